"""The live view's updates in a real JupyterLab (issue 23): after one whole payload the kernel sends
only what changed, and the extension's view still shows every step; a notebook saved mid-run keeps
the whole run so far (the renderer writes the merged trajectory into the output as the save starts);
after a reload mid-run the saved run renders, and when the run ends the cell holds the stored
trajectory.

Uses the JupyterLab server, browser and page helpers of test_extension_ui.py.
"""

from __future__ import annotations

import json
import time

import pytest
from test_extension_ui import MIME, SETUP, Lab, Page, browser, lab, notebook_page  # noqa: F401

pytestmark = pytest.mark.slow

TOOL = '''%%tool
import time

def tick(i: int) -> str:
    """Wait a moment, then return i."""
    time.sleep(0.08)
    return f"tick {i} " + "lorem ipsum " * 8'''

STEPS = 80
SCRIPT = (
    "from tea_notebook.models.offline import ScriptedModel, call\n"
    f"ScriptedModel([call('tick', i=i) for i in range({STEPS})] + [call('done', success=True, text='ticked')],"
    " name='ticker')"
)
RUN = f"%%agent ticker --model tea/script:ticker --tools tick --max-steps {STEPS + 5}\nTick {STEPS} times."

SPY = """() => {
    const w = window.jupyterapp.shell.currentWidget;
    window.__teaUpdates = [];
    w.sessionContext.session.kernel.iopubMessage.connect((_, msg) => {
        if (msg.header.msg_type === 'update_display_data' || msg.header.msg_type === 'display_data') {
            const data = msg.content.data || {};
            const p = data['application/vnd.tea.trajectory+json'];
            window.__teaUpdates.push({type: msg.header.msg_type, bytes: JSON.stringify(msg.content).length,
                                      partial: !!(p && p.partial), steps: p ? p.steps.length : -1});
        }
    });
}"""


def _count(lp: Page, index: int) -> int:
    text = lp.cell(index).locator(".tea-traj .tea-count").first.inner_text()
    return int(text.split()[0])


def _saved_outputs(server: Lab, name: str, index: int) -> list:
    return json.loads((server.root / name).read_text())["cells"][index]["outputs"]


def test_updates_carry_changes_and_the_view_shows_every_step_and_survives_a_reload(lab, browser):  # noqa: F811
    cells = [SETUP.format(ws=str(lab.root / "live-ws")), TOOL, SCRIPT, RUN, "6 * 7"]
    with notebook_page(lab, browser, "live.ipynb", cells) as lp:
        page = lp.page
        lp.open("live.ipynb")
        for i in range(3):
            lp.run(i)
        page.evaluate(SPY)
        lp.run(3, wait=False)
        page.wait_for_function(
            """() => { const n = window.jupyterapp.shell.currentWidget.content.widgets[3].node;
                       const c = n.querySelector('.tea-traj .tea-count');
                       return c && parseInt(c.textContent) >= 25; }""",
            timeout=60000,
        )
        shown = _count(lp, 3)
        updates = page.evaluate("() => window.__teaUpdates")
        carrying = [u for u in updates if u["steps"] >= 0]
        assert carrying and not carrying[0]["partial"]  # the first is whole
        partial = [u for u in carrying[1:] if u["partial"]]
        assert len(partial) >= 3 and len(partial) == len(carrying) - 1, updates
        # each carries the steps made since the one before (a held update coalesces several: the view's
        # byte budget), never all of them; the view shows all
        assert (
            max(u["steps"] for u in partial) < shown
            and sum(u["steps"] for u in partial) >= shown - carrying[0]["steps"]
        )
        assert max(u["bytes"] for u in partial) < 12_000, updates
        assert lp.cell(3).locator("[data-tea=status]").first.inner_text() == "running"
        assert lp.cell(3).locator("[data-tea=incomplete]").count() == 0

        # saved mid-run: the notebook holds the whole run so far, not the last update
        page.evaluate("""async () => { const nb = window.jupyterapp.shell.currentWidget; await nb.context.save(); }""")
        saved = [o for o in _saved_outputs(lab, "live.ipynb", 3) if MIME in o.get("data", {})]
        assert len(saved) == 1 and saved[0]["data"][MIME].get("partial") is None
        at_save = len(saved[0]["data"][MIME]["steps"])
        assert at_save >= shown and saved[0]["data"][MIME]["task"] == f"Tick {STEPS} times."
        assert len(saved[0]["metadata"][MIME]["latency"]["steps"]) == at_save

        # a reload mid-run: the saved run renders (no error, nothing missing up to the save)
        lp.page.goto(f"{lab.url}lab/tree/live.ipynb?token={lab.token}")
        page.wait_for_function(
            """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
                       return w && w.content && w.content.widgets.length === 5
                           && w.content.widgets[3].node.querySelector('.tea-traj .tea-count'); }""",
            timeout=60000,
        )
        assert _count(lp, 3) >= at_save
        assert lp.cell(3).locator("[data-tea=error]").count() == 0

        # the run ends: the kernel goes idle; the saved notebook's cell converges to the stored trajectory
        page.wait_for_function(
            """() => { const w = window.jupyterapp.shell.currentWidget;
                       const k = w.sessionContext.session && w.sessionContext.session.kernel;
                       return k && k.status === 'idle'; }""",
            timeout=120000,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            statuses = page.evaluate(
                """() => [...window.jupyterapp.shell.currentWidget.content.widgets[3].node
                            .querySelectorAll('[data-tea=status]')].map(x => x.textContent)"""
            )
            if "success" in statuses:
                break
            time.sleep(0.2)
        print("after the reload, the cell shows", statuses)
        assert "success" in statuses
        assert _count(lp, 3) == STEPS + 1
