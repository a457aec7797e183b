"""The live view of a ``%%agent`` run in a real JupyterLab, driven by Chromium (issue 28):

- while the first step's tool still runs, the view shows an in-progress card ("step 1: very_slow
  running 3 s…", counting) and "1 steps", not "0 steps"; the updates that tick carry no step;
- after a page reload mid-run the view re-attaches: the run's updates reach it again (steps keep
  arriving, Stop is offered while the kernel runs it) and it ends with the stored trajectory;
- a kernel restart mid-run leaves the view saying "interrupted: the kernel restarted — %tea resume RUN".

Uses the JupyterLab server, browser and page helpers of test_extension_ui.py.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from test_extension_ui import MIME, SETUP, Page, browser, lab, notebook_page, shots  # noqa: F401

pytestmark = pytest.mark.slow

TOOL = '''%%tool
import time

def very_slow(seconds: float) -> str:
    """Wait some seconds, then say so."""
    time.sleep(seconds)
    return f"slept {seconds} s"'''

SCRIPTS = """from tea_notebook.models.offline import ScriptedModel, call
ScriptedModel([call('very_slow', seconds=4)] + [call('very_slow', seconds=2) for _ in range(14)]
              + [call('done', success=True, text='rested')], name='slowest')
ScriptedModel([call('very_slow', seconds=2) for _ in range(8)] + [call('done', success=True, text='rested')],
              name='slower')
ScriptedModel([call('very_slow', seconds=60), call('done', success=True, text='never')], name='stuck')
print('ready')"""

RUN_SLOW = "%%agent slowpoke --model tea/script:slowest --tools very_slow --max-steps 20\nRest a while."
RUN_SLOWER = "%%agent slower --model tea/script:slower --tools very_slow --max-steps 20\nRest again."
RUN_STUCK = "%%agent stuck --model tea/script:stuck --tools very_slow\nRest for a minute."

SPY = """() => {
    const w = window.jupyterapp.shell.currentWidget;
    window.__teaUpdates = [];
    w.sessionContext.session.kernel.iopubMessage.connect((_, msg) => {
        const data = (msg.content && msg.content.data) || {};
        const p = data['application/vnd.tea.trajectory+json'];
        if (p && msg.header.msg_type === 'update_display_data') {
            window.__teaUpdates.push({bytes: JSON.stringify(p).length, steps: p.steps.length, partial: !!p.partial});
        }
    });
}"""


def _cell_js(index: int) -> str:
    return f"window.jupyterapp.shell.currentWidget.content.widgets[{index}].node"


def _running_seconds(lp: Page, index: int) -> int:
    text = lp.cell(index).locator(".tea-traj [data-tea=running]").first.inner_text()
    found = re.search(r"very_slow running (\d+) s…", text)
    assert found, text
    return int(found.group(1))


def _count(lp: Page, index: int) -> int:
    """The step count the cell's view shows (read again while the view is being replaced: empty for a moment)."""
    deadline = time.monotonic() + 10
    while True:
        words = lp.cell(index).locator(".tea-traj .tea-count").first.inner_text().split()
        if words and words[0].isdigit() or time.monotonic() > deadline:
            return int(words[0])
        time.sleep(0.1)


def test_running_step_reload_and_restart(lab, browser, shots):  # noqa: F811
    cells = [SETUP.format(ws=str(lab.root / "reattach-ws")), TOOL, SCRIPTS, RUN_SLOW, RUN_SLOWER, RUN_STUCK]
    with notebook_page(lab, browser, "reattach.ipynb", cells) as lp:
        page = lp.page
        lp.open("reattach.ipynb")
        for i in range(3):
            lp.run(i)
        page.evaluate(SPY)

        # 1. the first step's tool runs: an in-progress card that counts, "1 steps"
        lp.run(3, wait=False)
        page.wait_for_function(
            f"""() => {{ const r = {_cell_js(3)}.querySelector('.tea-traj [data-tea=running]');
                        return r && !r.hidden && r.textContent.includes('very_slow running'); }}""",
            timeout=30000,
            polling=50,
        )
        head = lp.cell(3).locator(".tea-traj .tea-head").first.inner_text()
        assert "1 steps" in head and "0 steps" not in head, head
        assert "step 1: very_slow running" in lp.cell(3).locator(".tea-traj [data-tea=running]").first.inner_text()
        first = _running_seconds(lp, 3)
        shots(lp.cell(3), "live-running-step")
        time.sleep(1.6)
        assert _running_seconds(lp, 3) > first  # it ticks
        ticks = [u for u in page.evaluate("() => window.__teaUpdates") if u["partial"] and u["steps"] == 0]
        assert ticks and max(u["bytes"] for u in ticks) < 1000, ticks  # a tick resends no step

        # 2. saved and reloaded mid-run: the view re-attaches and live updates resume
        page.wait_for_function(f"() => {_cell_js(3)}.querySelector('.tea-traj .tea-count')", timeout=30000)
        page.wait_for_function(
            f"() => parseInt({_cell_js(3)}.querySelector('.tea-traj .tea-count').textContent) >= 2", timeout=30000
        )
        page.evaluate("async () => { await window.jupyterapp.shell.currentWidget.context.save(); }")
        t0 = time.monotonic()
        page.goto(f"{lab.url}lab/tree/reattach.ipynb?token={lab.token}")
        print(f"goto took {time.monotonic() - t0:.1f} s")
        page.wait_for_function(
            """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
                       const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
                       return k && w.content.widgets.length === 6
                           && w.content.widgets[3].node.querySelector('.tea-traj .tea-count'); }""",
            timeout=60000,
        )
        after_reload = _count(lp, 3)
        print(
            f"reloaded in {time.monotonic() - t0:.1f} s:",
            after_reload,
            "steps",
            lp.cell(3).locator(".tea-traj .tea-head").first.inner_text(),
        )
        assert lp.cell(3).locator(".tea-traj [data-tea=status]").first.inner_text() == "running"
        page.wait_for_function(
            f"""() => parseInt({_cell_js(3)}.querySelector('.tea-traj .tea-count').textContent) > {after_reload}""",
            timeout=30000,
        )  # new steps arrive in the reloaded page
        assert lp.cell(3).locator(".tea-traj [data-tea=stop]").count() == 1  # Stop offered while the kernel runs it
        notice = lp.cell(3).locator(".tea-traj [data-tea=live-notice]")
        assert notice.count() == 0 or "stopped" not in notice.first.inner_text()
        # the run ends: the view ends with the stored trajectory, every step of it
        page.wait_for_function(
            f"""() => [...{_cell_js(3)}.querySelectorAll('[data-tea=status]')].some(s => s.textContent === 'success')""",
            timeout=60000,
        )
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
            timeout=30000,
        )
        deadline = time.monotonic() + 15
        while _count(lp, 3) < 16 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _count(lp, 3) == 16
        assert lp.cell(3).locator(".tea-traj [data-tea=running]").first.is_hidden()

        # 2b. reloaded mid-run before any save: the cell has no output for the run; the view comes back
        page.on("dialog", lambda dialog: dialog.accept())  # "leave the page?" (the notebook changed)
        lp.run(4, wait=False)
        page.wait_for_function(
            f"""() => {{ const r = {_cell_js(4)}.querySelector('.tea-traj [data-tea=running]');
                        return r && !r.hidden; }}""",
            timeout=30000,
        )
        page.goto(f"{lab.url}lab/tree/reattach.ipynb?token={lab.token}")
        page.wait_for_function(
            f"""() => {{ const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
                        return w && w.content && w.content.widgets.length === 6
                            && {_cell_js(4)}.querySelector('.tea-traj [data-tea=status]'); }}""",
            timeout=60000,
        )
        assert lp.cell(4).locator(".tea-traj [data-tea=status]").first.inner_text() == "running"
        back = _count(lp, 4)
        page.wait_for_function(
            f"() => parseInt({_cell_js(4)}.querySelector('.tea-traj .tea-count').textContent) > {back}",
            timeout=30000,
        )
        page.wait_for_function(
            f"""() => [...{_cell_js(4)}.querySelectorAll('[data-tea=status]')].some(s => s.textContent === 'success')""",
            timeout=60000,
        )
        deadline = time.monotonic() + 15
        while _count(lp, 4) < 9 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _count(lp, 4) == 9
        assert lp.cell(4).locator(".tea-traj").first.locator(".tea-task").inner_text() == "task: Rest again."

        # 3. a kernel restart mid-run: the view says so, with the command that goes on with the run
        lp.run(5, wait=False)
        page.wait_for_function(
            f"""() => {{ const r = {_cell_js(5)}.querySelector('.tea-traj [data-tea=running]');
                        return r && !r.hidden; }}""",
            timeout=30000,
        )
        page.wait_for_function(
            f"""() => {{ const o = window.jupyterapp.shell.currentWidget.content.widgets[5].model.outputs.toJSON();
                        return o.some(x => x.metadata && x.metadata[{json.dumps(MIME)}]
                                           && x.metadata[{json.dumps(MIME)}].run_id); }}""",
            timeout=10000,
        )
        outputs = json.loads(lp.outputs_text(5))
        run_id = next(o["metadata"][MIME]["run_id"] for o in outputs if MIME in o.get("metadata", {}))
        page.evaluate(
            "async () => { await window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart(); }"
        )
        reason = lp.cell(5).locator(".tea-traj [data-tea=stop-reason]").first
        reason.wait_for(timeout=30000)
        assert reason.inner_text() == f"interrupted: the kernel restarted — %tea resume {run_id}"
        assert lp.cell(5).locator(".tea-traj [data-tea=status]").first.inner_text() == "interrupted"
        assert lp.cell(5).locator(".tea-traj [data-tea=running]").first.is_hidden()
        assert lp.cell(5).locator(".tea-traj [data-tea=stop]").count() == 0
        shots(lp.cell(5), "live-kernel-restarted")
        # the notebook keeps it: the output now holds the interrupted run, with its reason
        saved = [o for o in json.loads(lp.outputs_text(5)) if MIME in o.get("data", {})]
        assert saved and saved[-1]["data"][MIME]["stop_reason"] == "interrupted: the kernel restarted"
