"""A ToolSelf stage's configuration kept for reuse (issue 30): ``ws.keep_configuration(run, stage=K,
name=...)`` stores it in the expert-agent bank as a candidate of the promotion gate, made from the
run's task and by the run; the gate measures it on held-out tasks (its toolbox given to the "with"
arm, every tool registered) and promotes it only on a gain; the lineage shows it with its run; a
leaked held-out set and every bad input are refused with nothing written.

A real SQLite workspace, a real ToolSelf run and real evaluations; the models are scripted.
"""

from __future__ import annotations

import pytest
from test_promotion_gate import held_out, knows_already, uses_the_tool
from test_toolself import Script, config, finish

from tea_notebook.errors import NotFoundError, TeaError
from tea_notebook.evolve.agent_bank import AgentBank
from tea_notebook.evolve.gate import DECISION_KIND, LeakageError, decisions, is_candidate
from tea_notebook.models.offline import ScriptedModel, call

pytestmark = pytest.mark.usefixtures("warm_litellm")

RUN_TASK = "Count the vowels in a word for the tea menu"
SUB_GOAL = "Count the vowels of the word with count_vowels"
STRATEGY = "As a Word Analyst, I will call count_vowels on the word and answer with its result"


@pytest.fixture
def toolself_run(ws) -> str:
    """count_vowels registered, and a finished one-stage ToolSelf run whose toolbox is [count_vowels]."""

    @ws.tools.tool
    def count_vowels(text: str) -> int:
        """Count the vowels in a text."""
        return sum(ch in "aeiou" for ch in text.lower())

    script = Script(
        [config(SUB_GOAL, ["count_vowels"], "vowels are a, e, i, o and u", STRATEGY)],
        [call("count_vowels", text="kiwi"), finish("2")],
    )
    result = ws.toolself("menu_counter", model=script.name, tools=["count_vowels"]).run_sync(RUN_TASK)
    assert result.status == "success"
    return result.run_id


def follows_the_configuration(messages, tools):
    """Works with count_vowels only when the kept configuration is in its system prompt."""
    if f"<configuration>\nSub-goal: {SUB_GOAL}" in messages[0]["content"]:
        return uses_the_tool(messages, tools)
    return call("done", success=True, text="3")


def agent_versions(ws) -> int:
    return sum(len(ws.db.history("agent", head.name)) for head in ws.db.heads("agent"))


def test_a_kept_configuration_that_helps_is_promoted_and_its_lineage_shows_the_run(ws, toolself_run):
    kept = ws.keep_configuration(toolself_run, stage=1, name="vowel_counting_stage")
    assert is_candidate(kept) and kept.category == "toolself_configuration" and kept.origin == "evolved"
    assert (kept.role, kept.description, kept.tools) == (SUB_GOAL, STRATEGY, ["count_vowels"])
    assert kept.competencies == ["vowels are a, e, i, o and u"]
    assert kept.metadata["toolself_configuration"]["run"] == toolself_run
    assert kept.metadata["evolution"]["tasks"] == [RUN_TASK] and kept.metadata["evolution"]["runs"] == [toolself_run]
    bank = AgentBank(ws, threshold=0.0)
    assert bank.find("count the vowels of a word") is None  # a candidate is not offered

    agent = ws.agent("generalist", model=ScriptedModel(follows_the_configuration).name, tools=[])
    decision = ws.promotion_gate(held_out(), agent=agent, scorer="exact").check(kept.name, kind="agent")
    assert decision.status == "promoted" and decision.kind == "agent", decision.message
    assert decision.gain == pytest.approx(5 / 6) and decision.cohort["tools"] == []
    promoted = ws.agents.get(kept.name)
    assert promoted.version == decision.promoted_version and not is_candidate(promoted)
    assert promoted.metadata["toolself_configuration"] == kept.metadata["toolself_configuration"]
    found = bank.find("count the vowels of a word")
    assert found is not None and found[0].name == kept.name  # offered for reuse now

    (node,) = ws.lineage(kind="agent").nodes[kept.name]
    assert (node.version, node.status, node.promoted_as, node.made_by) == (1, "promoted", 2, [toolself_run])
    assert [d.id for d in node.gate] == [decision.id]


def test_a_kept_configuration_that_does_not_help_stays_a_candidate(ws, toolself_run):
    kept = ws.keep_configuration(toolself_run, stage=1, name="vowel_counting_stage")
    agent = ws.agent("expert", model=ScriptedModel(knows_already).name, tools=[])
    decision = ws.promotion_gate(held_out(), agent=agent, scorer="exact").check(kept.name, kind="agent")
    assert decision.status == "candidate" and "includes zero" in decision.message
    current = ws.agents.get(kept.name)
    assert current.version == kept.version and is_candidate(current)
    assert [d.id for d in decisions(ws, kept.name, "agent")] == [decision.id]


def test_a_held_out_set_with_the_runs_task_is_refused_as_leakage(ws, toolself_run):
    kept = ws.keep_configuration(toolself_run, stage=1, name="vowel_counting_stage")
    agent = ws.agent("generalist", model=ScriptedModel(follows_the_configuration).name, tools=[])
    leaky = [*held_out(), {"id": "menu", "question": "count the vowels in a word for the TEA menu", "answer": "2"}]
    runs_before = len(ws.db.runs(1000))
    with pytest.raises(LeakageError, match="leakage: 1 held-out task.*made agent 'vowel_counting_stage' v1"):
        ws.promotion_gate(leaky, agent=agent, scorer="exact").check(kept.name, kind="agent")
    assert ws.evaluations() == [] and len(ws.db.runs(1000)) == runs_before and ws.db.heads(DECISION_KIND) == []


def test_the_gate_names_a_toolbox_tool_that_is_no_longer_registered(ws, toolself_run):
    kept = ws.keep_configuration(toolself_run, stage=1, name="vowel_counting_stage")
    ws.tools.unregister("count_vowels")
    agent = ws.agent("generalist", model=ScriptedModel(follows_the_configuration).name, tools=[])
    with pytest.raises(
        TeaError, match="'vowel_counting_stage' v1 needs tool\\(s\\) that are not registered: count_vowels"
    ):
        ws.promotion_gate(held_out(), agent=agent, scorer="exact").check(kept.name, kind="agent")
    assert ws.evaluations() == [] and ws.db.heads(DECISION_KIND) == []
    assert is_candidate(ws.agents.get(kept.name))


def test_bad_input_is_named_and_nothing_is_written(ws, toolself_run):
    plain = ws.agent("plain", model=ScriptedModel(knows_already).name, tools=[])
    other = plain.run_sync("How many vowels are in 'banana'?").run_id
    before = agent_versions(ws)
    with pytest.raises(NotFoundError, match="no run 'nope'"):
        ws.keep_configuration("nope", stage=1, name="kept")
    with pytest.raises(TeaError, match=f"run {other} \\(plain\\) is not a ToolSelf run"):
        ws.keep_configuration(other, stage=1, name="kept")
    for stage in (0, 2, True, "1"):
        with pytest.raises(TeaError, match=f"run {toolself_run} has stages 1 to 1; there is no stage"):
            ws.keep_configuration(toolself_run, stage=stage, name="kept")
    with pytest.raises(TeaError, match="the agent name 'plain' is already used"):
        ws.keep_configuration(toolself_run, stage=1, name="plain")
    with pytest.raises(TeaError, match="cannot keep the configuration as 'not a name!'"):
        ws.keep_configuration(toolself_run, stage=1, name="not a name!")
    with pytest.raises(TeaError, match="name the kept configuration"):
        ws.keep_configuration(toolself_run, stage=1, name="")
    assert agent_versions(ws) == before
    ws.keep_configuration(toolself_run, stage=1, name="kept")
    with pytest.raises(TeaError, match="the agent name 'kept' is already used"):
        ws.keep_configuration(toolself_run, stage=1, name="kept")
    ws.agents.unregister("kept")  # its history keeps the name taken
    with pytest.raises(TeaError, match="the agent name 'kept' is already used"):
        ws.keep_configuration(toolself_run, stage=1, name="kept")
    ws.tools.unregister("count_vowels")
    after = agent_versions(ws)
    with pytest.raises(TeaError, match="stage 1 of run .* no longer registered: count_vowels"):
        ws.keep_configuration(toolself_run, stage=1, name="kept_again")
    assert agent_versions(ws) == after


def test_the_agent_bank_does_not_revise_a_kept_configuration(ws, toolself_run):
    from test_evolution_loop import EXPERT

    kept = ws.keep_configuration(toolself_run, stage=1, name="word_analysis_specialist")
    expert = AgentBank(ws).add({**EXPERT, "tools": ["count_vowels"]})
    assert expert.name == "word_analysis_specialist_2"  # the bank takes another name
    assert ws.agents.get(kept.name).version == kept.version and is_candidate(ws.agents.get(kept.name))
