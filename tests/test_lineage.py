"""The evolution lineage (issue 30): every version of a tool a node with its parent, the runs that
made it, the gate's evidence and the runs that used it; a rollback of a node and what derives from
it keeps every version, and asks for confirmation when others depend on it; promoted tools no run
used since are flagged.

A real SQLite workspace, the real tool manager, gate and evaluations; the models are scripted.
"""

from __future__ import annotations

import pytest
from test_promotion_gate import TASK, held_out, uses_the_tool
from vowel_tool_script import TESTS, tool_manager_script, vowel_module

from tea_notebook.errors import NotFoundError, TeaError
from tea_notebook.evolve.lineage import ROLLBACK_KIND
from tea_notebook.models.offline import ScriptedModel

pytestmark = pytest.mark.usefixtures("warm_litellm")

WITH_Y = vowel_module('return sum(1 for ch in text.lower() if ch in "aeiouy")')
THIRD = vowel_module('return sum(1 for ch in text.lower() if ch in "aeiou") + 0')
TESTS_WITH_Y = TESTS.replace('count_vowels("sky") == 0', 'count_vowels("sky") == 1')


def make(ws, module: str, tests: str = TESTS, **options):
    creation = ws.tools.create(TASK, model=tool_manager_script(module, tool_tests={"tests": tests}).name, **options)
    assert creation.status == "registered", creation.summary()
    return creation


def test_two_generations_of_updates_and_a_rollback(ws):
    # generation 0: a candidate, promoted by the gate on held-out tasks
    first = make(ws, vowel_module(), candidate=True)
    solver = ws.agent("solver", model=ScriptedModel(uses_the_tool).name, tools=[])
    decision = ws.promotion_gate(held_out(), agent=solver, scorer="exact").check("count_vowels")
    assert decision.status == "promoted" and decision.promoted_version == 2
    assert ws.lineage().unused == ["count_vowels"]  # promoted, not used by any run since
    # generations 1 and 2: updates made without the gate (offered at once, promotion unmeasured)
    second = make(ws, WITH_Y, TESTS_WITH_Y)
    user = ws.agent("user", model=ScriptedModel(uses_the_tool).name, tools=["count_vowels"])
    used = user.run_sync("How many vowels are in 'sky'?")
    assert used.answer == "1"  # v3 counts y
    third = make(ws, THIRD)
    assert [t.tool.version for t in (first, second, third)] == [1, 3, 4]

    @ws.tools.tool
    def vowel_share(text: str) -> float:
        """The share of a text's letters that are vowels."""
        return 0.0

    ws.tools.relate("vowel_share", "depends_on", "count_vowels")

    lineage = ws.lineage("count_vowels")
    nodes = lineage.nodes["count_vowels"]
    assert [(n.version, n.parent, n.status, n.promoted_as) for n in nodes] == [
        (1, None, "promoted", 2),
        (3, 1, "unmeasured", None),
        (4, 3, "unmeasured", None),
    ]
    assert nodes[0].made_by == [first.run_id] and nodes[1].made_by == [second.run_id]
    assert [d.id for d in nodes[0].gate] == [decision.id]
    # the gate's "with" runs used v1 while it was the (candidate) current version; the user's run used v3
    assert nodes[0].score_line() == "6 run(s): 6 success, 6/6 correct"
    assert [u.run_id for u in nodes[1].used_by] == [used.run_id] and nodes[2].used_by == []
    assert [n.current for n in nodes] == [False, False, True] and lineage.unused == []
    assert "v3 ← v1: unmeasured" in lineage.text() and "promoted as v2" in lineage.text()
    html = lineage._repr_html_()
    assert "count_vowels" in html and "promoted" in html and decision.message in html.replace("&#x27;", "'")

    # a rollback that reaches beyond the node (v4 derives from v3; vowel_share depends on it) waits
    plan = lineage.rollback("count_vowels", 3)
    assert not plan.applied and plan.nodes == ["count_vowels@v3", "count_vowels@v4"]
    assert (plan.head_before, plan.head_after, plan.dependents) == (4, 2, ["vowel_share"])
    assert "NOT applied" in repr(plan) and "v4 → v2" in repr(plan)
    assert ws.tools.get("count_vowels").version == 4 and ws.db.heads(ROLLBACK_KIND) == []
    plan = lineage.rollback("count_vowels", 3, confirm=True)
    assert plan.applied
    current = ws.tools.get("count_vowels")
    assert current.version == 2 and current.source == first.tool.source
    assert len(ws.tools.versions("count_vowels")) == 4  # nothing deleted
    after = ws.lineage("count_vowels").nodes["count_vowels"]
    assert [(n.version, n.current, n.rolled_back) for n in after] == [
        (1, True, False),
        (3, False, True),
        (4, False, True),
    ]
    assert "[rolled back]" in ws.lineage().text()
    with pytest.raises(TeaError, match="nothing to roll back: the current version of 'count_vowels' is v2"):
        ws.lineage().rollback("count_vowels", 3, confirm=True)
    with pytest.raises(NotFoundError, match="no lineage node count_vowels@v9"):
        ws.lineage().rollback("count_vowels", 9)
    with pytest.raises(NotFoundError, match="no tool named 'nothing'"):
        ws.lineage("nothing")


def test_a_rollback_of_a_lone_version_needs_no_confirmation(ws):
    make(ws, vowel_module())
    plan = ws.lineage().rollback("count_vowels", 1)
    assert plan.applied and plan.head_after is None
    assert "count_vowels" not in ws.tools and len(ws.tools.versions("count_vowels")) == 1
