"""An evaluation's views in a real JupyterLab, driven by Chromium (issue 30), with the server, browser
and page helpers of test_extension_ui.py: a sample the agent ended in "success" but the scorer
marked wrong shows both in its trajectory's header (the cell's view and the main-area view a results
table's row opens), and an eval set's sample marks open their runs too.
"""

from __future__ import annotations

import json

import pytest
from test_extension_ui import MIME, SETUP, browser, lab, notebook_page  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

EVAL = """from tea_notebook.eval import evaluate, eval_set
from tea_notebook.models.offline import ScriptedModel, call
ws = get_ipython().magics_manager.registry['TeaMagics'].workspace
solver = ScriptedModel(lambda messages, tools: call('done', success=True, text='FINAL ANSWER: 4'), name='ev-solver')
agent = ws.agent('solver', model=solver.name, tools=[])
tasks = [{'id': 'plus', 'question': 'What is 1 + 3?', 'answer': '4'},
         {'id': 'minus', 'question': 'What is 5 - 2?', 'answer': '3'}]
results = evaluate(ws, agent, tasks, name='ev', scorer='exact', progress='off')
results"""

SHOW = "results.trajectory('minus')"

SET = "eval_set(ws, 'evs', agents=['solver'], tasks=tasks, scorer='exact', progress='off')"


def _result_run(lp, index: int) -> str:
    outputs = json.loads(lp.outputs_text(index))
    return next(o for o in outputs if o.get("output_type") in ("execute_result", "display_data"))["metadata"][MIME][
        "run_id"
    ]


def test_a_wrong_sample_reads_success_and_wrong_and_its_row_opens_it(lab, browser):  # noqa: F811 - fixtures
    cells = [SETUP.format(ws=str(lab.root / "ev-ws")), EVAL, SHOW, SET]
    with notebook_page(lab, browser, "ev.ipynb", cells) as lp:
        lp.open("ev.ipynb")
        lp.run(0)
        lp.run(1, timeout=90)
        lp.run(2)
        # the cell's own view: the agent's status, and the scorer's verdict with target and scorer
        view = lp.cell(2).locator(".jp-OutputArea-output .tea-traj").last
        view.wait_for(timeout=15000)
        assert view.locator("[data-tea=status]").inner_text() == "success"
        assert view.locator("[data-tea=verdict]").inner_text() == "✗ wrong"
        details = view.locator("[data-tea=sample-details]").inner_text()
        assert "target: 3" in details and "scored answer: 4" in details and "scores: correct 0" in details
        assert "scored by exact · evaluation ev, task minus" in view.locator("[data-tea=sample]").inner_text()
        minus = _result_run(lp, 2)
        # a row of the results table opens its run in the main area, with the same header
        lp.cell(1).locator(f".tea-eval tr[data-run='{minus}'] td").first.click()
        opened = lp.page.locator(f"#tea-run-{minus} .tea-traj")
        opened.wait_for(timeout=30000)
        assert opened.locator("[data-tea=verdict]").inner_text() == "✗ wrong"
        assert opened.locator("[data-tea=status]").inner_text() == "success"
        step1 = opened.locator(".tea-step[data-step='1']")  # tied to the notebook: "context" and Fork work there
        assert step1.locator("[data-tea=fork]").count() == 1
        step1.locator("[data-tea=context]").click()
        step1.locator("[data-tea=context-panel] .tea-ctx-part").first.wait_for(timeout=30000)
        lp.activate("ev.ipynb")
        # an eval set's sample marks open their runs as well
        lp.run(3, timeout=90)
        marks = lp.cell(3).locator(".tea-eval-samples")
        marks.locator("summary").click()
        right = marks.locator("[data-run]").first
        run = right.get_attribute("data-run")
        right.click()
        other = lp.page.locator(f"#tea-run-{run} .tea-traj")
        other.wait_for(timeout=30000)
        assert other.locator("[data-tea=verdict]").inner_text() == "✓ right"
