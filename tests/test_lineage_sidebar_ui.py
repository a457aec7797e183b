"""The sidebar's Evolution section and the lineage's cell view in a real JupyterLab, driven by Chromium
(issue 30): the versions of a tool as a tree with their statuses, the gate's evidence on expand, a
run that opens its trajectory, and a rollback that shows its plan, changes nothing, and applies only
on the second, explicit confirm.
"""

from __future__ import annotations

import pytest
from test_extension_ui import SETUP, browser, lab, notebook_page, shots  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

EVOLVE = """import re
from tea_notebook.evolve.gate import enter_candidate
from tea_notebook.models.offline import ScriptedModel, call
ws = get_ipython().magics_manager.registry['TeaMagics'].workspace

def register(letters):
    source = f'def count_vowels(text: str) -> int:\\n    "Count the vowels in a text."\\n    return sum(ch in {letters!r} for ch in text.lower())\\n'
    ns = {}
    exec(source, ns)
    ws.tools.tool(source=source)(ns['count_vowels'])

def solver(messages, tools):
    task = messages[-1]['content']
    seen = re.search(r'\\[count_vowels\\] .* -> (\\d+)', task)
    if seen:
        return call('done', success=True, text=seen.group(1))
    if any(t['function']['name'] == 'count_vowels' for t in tools):
        return call('count_vowels', text=re.search(r"vowels are in '(\\w+)'", task).group(1))
    return call('done', success=True, text='3')

register('aeiou')  # v1, by hand
enter_candidate(ws, 'count_vowels', made_from=['count the vowels in a word'])  # v2, a candidate
agent = ws.agent('solver', model=ScriptedModel(solver).name, tools=[])
words = {'banana': 3, 'queue': 4, 'rhythm': 0, 'education': 5, 'strength': 1, 'onomatopoeia': 8}
held_out = [{'id': w, 'question': f"How many vowels are in '{w}'?", 'answer': str(n)} for w, n in words.items()]
decision = ws.promotion_gate(held_out, agent=agent, scorer='exact').check('count_vowels')  # v3
register('aeiouy')  # v4
print([v.version for v in ws.tools.versions('count_vowels')], decision.status)"""

VERSION = "print('version', ws.tools.get('count_vowels').version)"
CELL_VIEW = "ws.lineage('count_vowels')"


def test_the_evolution_section_and_the_cell_view(lab, browser, shots):  # noqa: F811 - fixtures
    cells = [SETUP.format(ws=str(lab.root / "ws-lineage")), EVOLVE, VERSION, CELL_VIEW]
    with notebook_page(lab, browser, "lineage.ipynb", cells) as lp:
        page = lp.page
        lp.open("lineage.ipynb")
        lp.run(0)
        lp.run(1, timeout=120)
        assert "promoted" in lp.outputs_text(1), lp.outputs_text(1)
        page.locator(".jp-SideBar [data-id='tea-sidebar']").click()
        bar = page.locator("#tea-sidebar")
        bar.locator(".tea-sb-evolution > summary").click()
        asset = bar.locator(".tea-lin-asset[data-name=count_vowels]")
        asset.wait_for(timeout=20000)
        asset.locator("> summary").click()
        nodes = asset.locator(".tea-lin-node")
        labels = [nodes.nth(i).locator("summary code").inner_text() for i in range(nodes.count())]
        # v1 by hand; v2 a candidate entered for the gate, promoted as v3; v4 the update after it
        assert [x.strip() for x in labels] == ["v1", "└ v2 ← v1", "└ v4 ← v2"], labels
        promoted = asset.locator(".tea-lin-node[data-node='count_vowels@2']")
        assert promoted.locator(".tea-lin-promoted").count() == 1 and "as v3" in promoted.inner_text()
        promoted.locator("summary").first.click()
        evidence = promoted.locator("table.tea-lin-evidence")
        evidence.wait_for(timeout=10000)
        text = evidence.inner_text()
        assert "95% interval" in text and "6 held-out tasks × 1 epoch" in text and "underpowered" in text, text
        shots(bar, "sidebar-evolution")
        # a run that used it opens its trajectory
        promoted.locator("button.tea-lin-run").last.click()
        page.locator(".jp-TeaTrajectoryPanel .tea-traj").wait_for(timeout=10000)

        # roll back v4: the plan first, nothing changed; then the confirm applies it
        lp.activate("lineage.ipynb")
        newest = asset.locator(".tea-lin-node[data-node='count_vowels@4']")
        newest.locator("summary").first.click()
        newest.locator("button.tea-lin-plan-button").click()
        plan = newest.locator("pre.tea-lin-plan")
        plan.wait_for(timeout=10000)
        assert "v4 → v3" in plan.inner_text() and "NOT applied" in plan.inner_text()
        lp.run(2)
        assert "version 4" in lp.outputs_text(2)
        newest.locator("button.tea-lin-confirm").click()
        bar.locator("pre.tea-lin-notice", has_text="applied").wait_for(timeout=10000)
        page.wait_for_function(
            """() => document.querySelector("#tea-sidebar .tea-lin-node[data-node='count_vowels@4'] .tea-lin-rolled-back")""",
            timeout=10000,
        )
        lp.run(2)
        assert "version 3" in lp.outputs_text(2)

        # the cell view: a tree, its run ids open their trajectory
        lp.run(3)
        view = lp.cell(3).locator(".tea-lineage")
        view.wait_for(timeout=10000)
        assert "rolled back" in view.inner_text() and "└ v4 ← v2" in view.inner_text()
        shots(view, "lineage-cell")
        before = page.locator(".jp-TeaTrajectoryPanel").count()
        view.locator("[data-run]").first.click()
        page.wait_for_function(
            f"() => document.querySelectorAll('.jp-TeaTrajectoryPanel').length > {before}", timeout=10000
        )
