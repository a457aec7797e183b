"""Time travel in a real JupyterLab, driven by Chromium (issue 22), with the server, browser and page
helpers of test_extension_ui.py.

A scripted agent runs in a ``%%agent`` cell; on its step 3 the "context" button asks the kernel what
the model saw and shows the parts with their kinds, sizes and "new" marks, their texts folded; the
"edit and fork" button inserts ``%tea fork RUN --step 3 --edit`` below; running that cell prefills
the next one with ``await ws.fork(...)`` and the step's observation; edited and run, it shows the
fork's view with the edit (the header's line, the step's chip, before and after).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_extension_ui import MIME, SETUP, Page, browser, lab, notebook_page, shots  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

TOOL = '''%%tool
def work(n: int) -> str:
    """Do one unit of work."""
    return f"result {n}"'''

SCRIPTS = """from tea_notebook.models.offline import ScriptedModel, call
first = ScriptedModel([call('work', n=1), call('work', n=2), call('work', n=3),
                       call('done', success=True, text='original')], name='tt-first')
after = ScriptedModel([call('done', success=True, text='forked after the edit')], name='tt-after')
print('ready')"""

RUN = "%%agent worker --model tea/script:tt-first --tools work\nDo the work."


def _source(lp: Page, index: int) -> str:
    return lp.page.evaluate(
        f"() => window.jupyterapp.shell.currentWidget.content.widgets[{index}].model.sharedModel.getSource()"
    )


def _cells(lp: Page) -> int:
    return lp.page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets.length")


def _run_id(lp: Page, index: int) -> str:
    outputs = json.loads(lp.outputs_text(index))
    return next(o for o in outputs if o.get("output_type") == "execute_result")["metadata"][MIME]["run_id"]


def test_context_and_edit_and_fork_in_jupyterlab(lab, browser, shots):  # noqa: F811 - fixtures
    ws_path = lab.root / "tt-ws"
    cells = [SETUP.format(ws=str(ws_path)), TOOL, SCRIPTS, RUN]
    with notebook_page(lab, browser, "tt.ipynb", cells) as lp:
        lp.open("tt.ipynb")
        for i in range(3):
            lp.run(i)
        assert "ready" in lp.outputs_text(2)
        lp.run(3, timeout=90)
        out = lp.cell(3).locator(".jp-OutputArea-output .tea-traj").last
        out.wait_for(timeout=15000)
        assert out.locator("[data-tea=status]").inner_text() == "success"
        run_id = _run_id(lp, 3)
        _context(lp, out, shots)
        _edit_and_fork(lp, out, run_id, shots)


def _context(lp: Page, out: Any, shots: Any) -> None:  # noqa: F811 - the fixture, passed on
    step3 = out.locator(".tea-step[data-step='3']")
    buttons = step3.locator(".tea-step-head")
    assert buttons.locator("[data-tea=fork]").count() == 1 and buttons.locator("[data-tea=edit-fork]").count() == 1
    buttons.locator("[data-tea=context]").click()
    panel = out.locator(".tea-step[data-step='3'] [data-tea=context-panel]")
    panel.locator(".tea-ctx-part").first.wait_for(timeout=30000)
    text = panel.inner_text()
    assert "context of step 3" in text and "new since step 2 marked" in text
    kinds = panel.locator(".tea-ctx-size")
    shown = {kinds.nth(i).get_attribute("data-kind") for i in range(kinds.count())}
    assert {"system prompt", "task", "history", "tools"} <= shown, shown
    # the history block of step 2 is new since step 2's request; the system prompt is not
    new = panel.locator(".tea-ctx-part.tea-ctx-new")
    assert new.count() >= 1
    assert any("<step_2>" in new.nth(i).locator(".tea-ctx-gist").inner_text() for i in range(new.count()))
    assert panel.locator(".tea-ctx-part.tea-ctx-new[data-kind='system prompt']").count() == 0
    # texts are folded until opened
    history = panel.locator(".tea-ctx-part.tea-ctx-new[data-kind=history]", has_text="<step_2>").first
    assert not history.evaluate("d => d.open")
    history.locator("summary").click()
    lp.page.wait_for_function(
        """() => [...document.querySelectorAll('.tea-ctx-part.tea-ctx-new[data-kind=history]')]
                 .some(d => d.open && d.querySelector('.tea-ctx-text').textContent.includes('result 2'))""",
        timeout=10000,
    )
    shots(lp.cell(3), "time-travel-context")
    # the button hides the panel again
    buttons.locator("[data-tea=context]").click()
    assert out.locator(".tea-step[data-step='3'] [data-tea=context-panel]").count() == 0


def _edit_and_fork(lp: Page, out: Any, run_id: str, shots: Any) -> None:  # noqa: F811 - the fixture, passed on
    page = lp.page
    before = _cells(lp)
    out.locator(".tea-step[data-step='3'] [data-tea=edit-fork]").click()
    page.wait_for_function(f"() => window.jupyterapp.shell.currentWidget.content.widgets.length === {before + 1}")
    assert _source(lp, 4) == f"%tea fork {run_id} --step 3 --edit"
    assert lp.outputs_text(4) == "[]"  # inserted, not run
    lp.run(4)
    # the kernel's set_next_input puts the prefilled cell below
    page.wait_for_function(
        f"() => window.jupyterapp.shell.currentWidget.content.widgets.length === {before + 2}", timeout=15000
    )
    assert "the cell below forks the run" in lp.outputs_text(4)
    code = _source(lp, 5)
    assert "observation = 'result 3'" in code, code
    assert f"await ws.fork('{run_id}', 3, edit={{'observation': observation, 'action': 1}})" in code
    # a person edits the observation (and picks the model the fork goes on with), then runs the cell
    edited = code.replace("'result 3'", "'EDITED three'").replace("edit={", "model='tea/script:tt-after', edit={")
    page.evaluate(
        f"() => window.jupyterapp.shell.currentWidget.content.widgets[5].model.sharedModel.setSource({json.dumps(edited)})"
    )
    lp.run(5, timeout=90)
    forked = lp.cell(5).locator(".jp-OutputArea-output .tea-traj").last
    forked.wait_for(timeout=15000)
    assert forked.locator("[data-tea=status]").inner_text() == "success"
    assert forked.locator("[data-tea=forked-from]").inner_text().startswith(f"forked from {run_id}")
    assert forked.locator("[data-tea=edit]").inner_text() == "edited: the observation of action 1 (work) of step 3"
    step3 = forked.locator(".tea-step[data-step='3']")
    assert step3.locator("[data-tea=edited]").count() == 1
    step3.locator(".tea-step-head").click()
    detail = forked.locator(".tea-step[data-step='3'] [data-tea=edit-detail]")
    detail.wait_for(timeout=5000)
    assert "was: result 3" in detail.inner_text() and "now: EDITED three" in detail.inner_text()
    assert "EDITED three" in forked.locator(".tea-step[data-step='3'] .tea-step-body").inner_text()
    assert "forked after the edit" in forked.inner_text()
    shots(lp.cell(5), "time-travel-fork-edited")
    # what the fork's model saw at its first live step: the edited observation, not the original
    forked.locator(".tea-step[data-step='4'] [data-tea=context]").click()
    part = forked.locator(".tea-step[data-step='4'] .tea-ctx-part", has_text="<step_3>").first
    part.wait_for(timeout=30000)
    seen = part.locator(".tea-ctx-text").evaluate("n => n.textContent")
    assert "EDITED three" in seen and "result 3" not in seen
