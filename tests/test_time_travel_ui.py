"""Time travel in a real JupyterLab, driven by Chromium (issue 22), with the server, browser and page
helpers of test_extension_ui.py.

A scripted agent runs in a ``%%agent`` cell; on its step 3 the "context" button asks the kernel what
the model saw and shows the parts with their kinds, sizes and "new" marks (each summarised readably,
no raw ``<agent_history>``), their texts folded; "edit and fork" opens the step's values in place
(which action's observation, or the actions), and its Fork button inserts ONE cell with the complete
``await ws.fork(...)`` (with the panel's replay choice, ``replay='recorded'``) and runs it: the fork's view
shows the edit (the header's line, the step's chip, before and after) and where it departs from the
original ("departs from RUN at step 4: different model input", what each did unfolded by a click). Runs
opened from the sidebar, from a row of ``%tea branches`` and from an evaluation's table open in the main
area with "context", Fork and "edit and fork" working there too; a plain Fork with the toolbar's "recorded
tools" puts ``--replay recorded`` in its line and its fork says "reproduced RUN". A fork followed live says
"reproduces RUN so far", then where it departs as soon as that step has finished, while it still runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_extension_ui import MIME, SETUP, Page, browser, lab, notebook_page, shots  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

TOOL = '''%%tool
import time

def work(n: int) -> str:
    """Do one unit of work."""
    if n >= 50:  # a long unit (the fork followed live below)
        time.sleep(4)
    return f"result {n}"'''

SCRIPTS = """from tea_notebook.models.offline import ScriptedModel, call
# the original's 4 turns, then one turn for each fork made from the views (they go on with this model)
first = ScriptedModel([call('work', n=1), call('work', n=2), call('work', n=3),
                       call('done', success=True, text='original'),
                       call('done', success=True, text='forked after the edit'),
                       call('done', success=True, text='forked from the branches view'),
                       call('done', success=True, text='original')], name='tt-first')
# a fork followed live: its step 2 takes long, then departs (other arguments), and its step 3 takes long too
ScriptedModel([call('work', n=51), call('work', n=52), call('done', success=True, text='slow')], name='tt-slow')
print('ready')"""

EVAL = """from tea_notebook.eval import evaluate
ws = get_ipython().magics_manager.registry['TeaMagics'].workspace
solver = ScriptedModel(lambda messages, tools: call('done', success=True, text='FINAL ANSWER: 3'), name='tt-solver')
results = evaluate(ws, ws.agent('solver', model=solver.name, tools=[]),
                   [{'id': 't1', 'question': 'What is 1 + 2?', 'answer': '3'}], name='tt-eval', progress='off')
results"""

RUN = "%%agent worker --model tea/script:tt-first --tools work\nDo the work."


#: the notebook of the test, wherever the focus is (a run opened in the main area is the current widget then)
NOTEBOOK = "[...window.jupyterapp.shell.widgets('main')].find(w => w.context && w.context.path === 'tt.ipynb')"


def _source(lp: Page, index: int) -> str:
    return lp.page.evaluate(f"() => {NOTEBOOK}.content.widgets[{index}].model.sharedModel.getSource()")


def _cells(lp: Page) -> int:
    return lp.page.evaluate(f"() => {NOTEBOOK}.content.widgets.length")


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
        fork_id = _edit_and_fork(lp, out, run_id, shots)
        _from_branches(lp, run_id, fork_id, shots)
        _from_sidebar(lp, run_id)
        _from_evaluation(lp)
        _live_departure(lp, run_id, shots)


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
    # each part is summarised readably: the history blocks by their step, no raw wrapper tags
    gists = panel.locator(".tea-ctx-part > summary .tea-ctx-gist")
    summaries = [gists.nth(i).inner_text() for i in range(gists.count())]
    assert not any("<agent_history>" in g or "<step_" in g for g in summaries), summaries
    history = [g for g in summaries if g.startswith("step ")]
    assert history[:2] == ['step 1: [work] {"n": 1} -> result 1', 'step 2: [work] {"n": 2} -> result 2'], summaries
    # the history block of step 2 is new since step 2's request; the system prompt is not
    new = panel.locator(".tea-ctx-part.tea-ctx-new")
    assert new.count() >= 1
    assert any(new.nth(i).locator(".tea-ctx-gist").inner_text().startswith("step 2:") for i in range(new.count()))
    assert panel.locator(".tea-ctx-part.tea-ctx-new[data-kind='system prompt']").count() == 0
    # texts are folded until opened
    block = panel.locator(".tea-ctx-part.tea-ctx-new[data-kind=history]", has_text="step 2:").first
    assert not block.evaluate("d => d.open")
    block.locator("summary").click()
    lp.page.wait_for_function(
        """() => [...document.querySelectorAll('.tea-ctx-part.tea-ctx-new[data-kind=history]')]
                 .some(d => d.open && d.querySelector('.tea-ctx-text').textContent.includes('result 2'))""",
        timeout=10000,
    )
    shots(lp.cell(3), "time-travel-context")
    # the button hides the panel again
    buttons.locator("[data-tea=context]").click()
    assert out.locator(".tea-step[data-step='3'] [data-tea=context-panel]").count() == 0


def _edit_and_fork(lp: Page, out: Any, run_id: str, shots: Any) -> str:  # noqa: F811 - the fixture, passed on
    """One gesture: the values open in place, a choice of what to edit, Fork runs one cell below."""
    page = lp.page
    before = _cells(lp)
    out.locator(".tea-step[data-step='3'] [data-tea=edit-fork]").click()
    panel = out.locator(".tea-step[data-step='3'] [data-tea=edit-panel]")
    value = panel.locator("[data-tea=edit-value]")
    value.wait_for(timeout=30000)
    assert _cells(lp) == before  # nothing inserted yet
    choices = panel.locator("[data-tea=edit-target] option")
    assert [choices.nth(i).inner_text() for i in range(choices.count())] == [
        "the observation of action 1 (work)",
        "the actions (names and arguments; they run live)",
    ]
    assert value.input_value() == "result 3"
    # the actions are offered as JSON (name and arguments); back to the observation, edited in place
    panel.locator("[data-tea=edit-target]").select_option(index=1)
    assert '"arguments"' in out.locator(".tea-step[data-step='3'] [data-tea=edit-value]").input_value()
    panel.locator("[data-tea=edit-target]").select_option(index=0)
    value = out.locator(".tea-step[data-step='3'] [data-tea=edit-value]")
    value.fill("EDITED three")
    # how the fork's tools answer: live (the default) or recorded, each explained
    replay = out.locator(".tea-step[data-step='3'] [data-tea=edit-replay]")
    assert "live — the tools run again" in replay.inner_text() and "recorded — each tool call is answered" in (
        replay.inner_text()
    )
    assert replay.locator("input[data-replay=live]").is_checked()
    replay.locator("input[data-replay=recorded]").check()
    shots(lp.cell(3), "time-travel-edit-in-place")
    out.locator(".tea-step[data-step='3'] [data-tea=edit-fork-go]").click()
    page.wait_for_function(f"() => {NOTEBOOK}.content.widgets.length === {before + 1}")
    code = _source(lp, 4)
    assert code.startswith(f"# fork run {run_id} at step 3: the observation of action 1 (work)"), code
    assert "observation = 'EDITED three'" in code
    assert f"await ws.fork('{run_id}', 3, edit={{'observation': observation, 'action': 1}}, replay='recorded')" in code
    assert _cells(lp) == before + 1  # ONE cell, run at once: the fork's view shows there
    forked = lp.cell(4).locator(".jp-OutputArea-output .tea-traj").last
    forked.wait_for(timeout=60000)
    forked.locator("[data-tea=status]", has_text="success").wait_for(timeout=60000)
    assert out.locator(".tea-step[data-step='3'] [data-tea=edit-panel]").count() == 0  # the panel closed
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
    shots(lp.cell(4), "time-travel-fork-edited")
    # where the fork first departs from the original: the edited observation is in step 4's prompt
    departure = forked.locator("[data-tea=departure]")
    assert departure.locator("summary").inner_text() == f"departs from {run_id} at step 4: different model input"
    assert "original: a prompt of" in departure.get_attribute("title")
    departure.locator("summary").click()
    original = departure.locator("[data-tea=departure-original]")
    original.wait_for(timeout=5000)
    assert original.inner_text().startswith(f"original ({run_id}): a prompt of")
    assert departure.locator("[data-tea=departure-replay]").inner_text().startswith("this replay: a prompt of")
    shots(forked.locator(".tea-head").locator(".."), "time-travel-departs")
    # what the fork's model saw at its first live step: the edited observation, not the original
    forked.locator(".tea-step[data-step='4'] [data-tea=context]").click()
    part = forked.locator(".tea-step[data-step='4'] .tea-ctx-part", has_text="step 3:").first
    part.wait_for(timeout=30000)
    seen = part.locator(".tea-ctx-text").evaluate("n => n.textContent")
    assert "EDITED three" in seen and "result 3" not in seen
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'", timeout=30000
    )
    return _run_id(lp, 4)


def _append_and_run(lp: Page, source: str) -> int:
    """Put a cell holding ``source`` at the end of the notebook and run it; its index."""
    index = _cells(lp)
    lp.page.evaluate(
        f"""() => window.jupyterapp.shell.currentWidget.content.model.sharedModel.insertCell({index},
             {{cell_type: 'code', source: {json.dumps(source)}}})"""
    )
    lp.run(index, timeout=90)
    return index


def _main_area_view(lp: Page, run: str) -> Any:
    view = lp.page.locator(f"#tea-run-{run} .tea-traj")
    view.wait_for(timeout=30000)
    return view


def _back_to_notebook(lp: Page) -> None:
    lp.activate("tt.ipynb")


def _from_branches(lp: Page, run_id: str, fork_id: str, shots: Any) -> None:  # noqa: F811 - the fixture
    """A row of the branches table opens its run: context works there, and Fork puts its cell in the notebook."""
    index = _append_and_run(lp, f"%tea branches {run_id}")
    table = lp.cell(index).locator(".tea-branches")
    table.wait_for(timeout=15000)
    table.locator(f"tr[data-run='{fork_id}']").click()
    view = _main_area_view(lp, fork_id)
    assert view.locator("[data-tea=forked-from]").inner_text().startswith(f"forked from {run_id}")
    departs = view.locator("[data-tea=departure] summary").inner_text()
    assert departs == f"departs from {run_id} at step 4: different model input"
    step4 = view.locator(".tea-step[data-step='4']")
    step4.locator("[data-tea=context]").click()
    step4.locator("[data-tea=context-panel] .tea-ctx-part").first.wait_for(timeout=30000)
    assert "context of step 4" in step4.locator("[data-tea=context-panel]").inner_text()
    # "edit and fork" is offered here as in the notebook, and the fork's cell goes to the notebook
    assert step4.locator("[data-tea=edit-fork]").count() == 1
    shots(view, "time-travel-branches-run")
    before = _cells(lp)
    view.locator(".tea-step[data-step='2'] [data-tea=fork]").click()
    lp.page.wait_for_function(f"() => {NOTEBOOK}.content.widgets.length === {before + 1}", timeout=15000)
    assert _source(lp, before) == f"%tea fork {fork_id} --step 2"
    again = lp.cell(before).locator(".jp-OutputArea-output .tea-traj").last
    again.locator("[data-tea=status]", has_text="success").wait_for(timeout=60000)
    assert "forked from the branches view" in again.inner_text()
    lp.page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'", timeout=30000
    )


def _from_sidebar(lp: Page, run_id: str) -> None:
    """A run the sidebar opens has "context" (the notebook's kernel answers) and its Fork buttons."""
    page = lp.page
    page.locator(".jp-SideBar [data-id='tea-sidebar']").click()
    bar = page.locator("#tea-sidebar")
    item = bar.locator(f".tea-sb-runs .tea-sb-item[data-name='{run_id}']")
    item.wait_for(timeout=20000)
    item.locator("summary").click()
    item.locator(".tea-sb-open").click()
    view = _main_area_view(lp, run_id)
    step3 = view.locator(".tea-step[data-step='3']")
    assert step3.locator("[data-tea=fork]").count() == 1 and step3.locator("[data-tea=edit-fork]").count() == 1
    step3.locator("[data-tea=context]").click()
    step3.locator("[data-tea=context-panel] .tea-ctx-part").first.wait_for(timeout=30000)
    assert "context of step 3" in step3.locator("[data-tea=context-panel]").inner_text()
    # "edit and fork" opens the values in place there too
    step3.locator("[data-tea=edit-fork]").click()
    assert step3.locator("[data-tea=edit-value]").input_value(timeout=30000) == "result 3"
    _recorded_fork(lp, view, run_id)
    page.locator(".jp-SideBar [data-id='tea-sidebar']").click()  # the sidebar closes again
    _back_to_notebook(lp)


def _recorded_fork(lp: Page, view: Any, run_id: str) -> None:
    """A plain Fork with the tools answered from the recording: the fork reproduces the original and says so."""
    assert view.locator("[data-tea=departure]").count() == 0  # the original is no fork
    view.locator("[data-tea=replay]").select_option("recorded")
    fork = view.locator(".tea-step[data-step='3'] [data-tea=fork]")
    assert "(recorded tools)" in fork.get_attribute("title")
    before = _cells(lp)
    fork.click()
    lp.page.wait_for_function(f"() => {NOTEBOOK}.content.widgets.length === {before + 1}", timeout=15000)
    assert _source(lp, before) == f"%tea fork {run_id} --step 3 --replay recorded"
    again = lp.cell(before).locator(".jp-OutputArea-output .tea-traj").last
    again.locator("[data-tea=status]", has_text="success").wait_for(timeout=60000)
    assert again.locator("[data-tea=departure]").inner_text() == f"reproduced {run_id}"
    lp.page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'", timeout=30000
    )


def _from_evaluation(lp: Page) -> None:
    """An evaluation table's run id opens the run, with its context."""
    index = _append_and_run(lp, EVAL)
    link = lp.cell(index).locator(".tea-eval code[data-run]").first
    link.wait_for(timeout=30000)
    run = link.get_attribute("data-run")
    link.click()
    view = _main_area_view(lp, run)
    step1 = view.locator(".tea-step[data-step='1']")
    step1.locator("[data-tea=context]").click()
    panel = step1.locator("[data-tea=context-panel]")
    panel.locator(".tea-ctx-part").first.wait_for(timeout=30000)
    assert "context of step 1" in panel.inner_text()
    _back_to_notebook(lp)


def _live_departure(lp: Page, run_id: str, shots: Any) -> None:  # noqa: F811 - the fixture, passed on
    """A fork followed live says it reproduces the original so far, then where it departs as soon as the
    step that departed has finished, while it still runs."""
    index = _cells(lp)
    lp.page.evaluate(
        f"""() => {NOTEBOOK}.content.model.sharedModel.insertCell({index},
             {{cell_type: 'code', source: '%tea fork {run_id} --step 1 --model tea/script:tt-slow'}})"""
    )
    lp.run(index, wait=False)
    view = lp.cell(index).locator(".jp-OutputArea-output .tea-traj").last
    departure = view.locator("[data-tea=departure]")
    departure.filter(has_text=f"reproduces {run_id} so far").wait_for(timeout=30000)
    assert view.locator("[data-tea=status]").inner_text() == "running"
    departure.filter(has_text=f"departs from {run_id} at step 2: different arguments").wait_for(timeout=30000)
    assert view.locator("[data-tea=status]").inner_text() == "running"  # said live, before the run ends
    departure.locator("summary").click()
    replay = departure.locator("[data-tea=departure-replay]")
    replay.wait_for(timeout=10000)  # unfolded, and kept unfolded by the live updates that follow
    assert replay.inner_text() == 'this replay: work({"n": 51})'
    assert departure.locator("[data-tea=departure-original]").inner_text() == f'original ({run_id}): work({{"n": 2}})'
    shots(lp.cell(index), "time-travel-departs-live")
    view.locator("[data-tea=status]", has_text="success").wait_for(timeout=60000)
    assert departure.locator("summary").inner_text() == f"departs from {run_id} at step 2: different arguments"
    lp.page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'", timeout=30000
    )
