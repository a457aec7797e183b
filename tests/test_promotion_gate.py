"""The promotion gate (issue 30): a tool the tool manager creates as a candidate is offered only by
name, and promoted only when a paired evaluation on held-out tasks shows a gain whose interval lies
above zero; otherwise it stays a candidate with its evidence. Leaked held-out sets are refused with
nothing written, too few tasks are run but called underpowered, and the cohort is stored.

A real SQLite workspace, the real tool manager and sandbox, real evaluations; the models are scripted.
"""

from __future__ import annotations

import json
import re

import pytest
from vowel_tool_script import tool_manager_script

from tea_notebook.errors import TeaError
from tea_notebook.evolve.gate import DECISION_KIND, LeakageError, decisions, is_candidate, min_tasks, recheck
from tea_notebook.models.offline import ScriptedModel, call

pytestmark = pytest.mark.usefixtures("warm_litellm")

TASK = "count the vowels in a word"
WORDS = {"banana": 3, "queue": 4, "rhythm": 0, "education": 5, "strength": 1, "onomatopoeia": 8}


def held_out(words=WORDS) -> list[dict]:
    return [{"id": w, "question": f"How many vowels are in '{w}'?", "answer": str(n)} for w, n in words.items()]


def word_of(messages) -> str:
    text = " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))
    return re.search(r"How many vowels are in '(\w+)'", text).group(1)


def uses_the_tool(messages, tools):
    """Calls count_vowels when it is offered and answers with its result; without it, guesses 3 (right for banana only)."""
    offered = {t["function"]["name"] for t in tools}
    result = re.search(r"\[count_vowels\] .* -> (\d+)", messages[-1]["content"])
    if result:
        return call("done", success=True, text=result.group(1))
    if "count_vowels" in offered:
        return call("count_vowels", text=word_of(messages))
    return call("done", success=True, text="3")


def knows_already(messages, tools):
    """Answers right with or without the tool: the tool cannot help."""
    return call("done", success=True, text=str(WORDS[word_of(messages)]))


@pytest.fixture
def candidate(ws):
    """count_vowels, created by the tool manager as a candidate of the gate."""
    creation = ws.tools.create(TASK, model=tool_manager_script_good().name, candidate=True)
    assert creation.status == "registered", creation.summary()
    return creation.tool


def tool_manager_script_good() -> ScriptedModel:
    from vowel_tool_script import COUNT_AEIOU, vowel_module

    return tool_manager_script(vowel_module(COUNT_AEIOU))


def test_a_candidate_is_offered_only_by_name(ws, candidate):
    assert is_candidate(candidate) and candidate.metadata["routing"] == "explicit"
    assert candidate.metadata["evolution"]["tasks"] == [TASK]
    seen: list[set[str]] = []

    def look(messages, tools):
        seen.append({t["function"]["name"] for t in tools})
        return call("done", success=True, text="ok")

    model = ScriptedModel(look)
    ws.agent("router", model=model.name).run_sync("How many vowels are in 'banana'?")
    ws.agent("namer", model=model.name, tools=["count_vowels"]).run_sync("How many vowels are in 'banana'?")
    assert "count_vowels" not in seen[0] and "count_vowels" in seen[1]


def test_a_tool_that_helps_on_held_out_tasks_is_promoted(ws, candidate):
    solver = ScriptedModel(uses_the_tool)
    agent = ws.agent("solver", model=solver.name, tools=[])
    gate = ws.promotion_gate(held_out(), agent=agent, scorer="exact", level=0.95)
    decision = gate.check("count_vowels")
    assert decision.status == "promoted", decision.message
    assert decision.n == 6 and not decision.underpowered and decision.gain == pytest.approx(5 / 6)
    assert decision.ci_low > 0 and "95% interval" in decision.message
    promoted = ws.tools.get("count_vowels")
    assert promoted.version == decision.promoted_version == candidate.version + 1
    assert "routing" not in promoted.metadata and promoted.metadata["evolution"]["promotes"] == candidate.version
    assert promoted.source == candidate.source  # the same tool, now offered to every agent
    # the frozen cohort is stored with the decision, so it can be re-checked
    (stored,) = decisions(ws, "count_vowels")
    assert stored.id == decision.id and stored.status == "promoted"
    assert [t["id"] for t in stored.cohort["tasks"]] == list(WORDS)
    assert (stored.cohort["epochs"], stored.cohort["model"], stored.cohort["tools"]) == (1, solver.name, [])
    assert stored.cohort["candidate"] == {"kind": "tool", "name": "count_vowels", "version": candidate.version}
    assert set(stored.evaluations.values()) <= {e["name"] for e in ws.evaluations()}
    assert "promoted" in decision._repr_html_() and "onomatopoeia" in decision._repr_html_()
    # re-checked on the frozen cohort: measured again and stored, nothing promoted twice
    again = recheck(ws, stored, held_out(), agent=agent)
    assert (again.status, again.gain, again.cohort["recheck_of"]) == ("promoted", decision.gain, decision.id)
    assert again.message.startswith(
        f"re-check of decision {decision.id} on tool count_vowels v2: the gain holds"
    )  # v2: the promoted version, the same code
    assert ws.tools.get("count_vowels").version == promoted.version and len(decisions(ws, "count_vowels")) == 2
    changed = [*held_out()[:5], {"id": "onomatopoeia", "question": "How many vowels are in 'aeiou'?", "answer": "5"}]
    with pytest.raises(
        TeaError, match=f"not decision {decision.id}'s cohort: 1 task\\(s\\) differ \\('onomatopoeia'\\)"
    ):
        recheck(ws, stored, changed, agent=agent)
    assert len(decisions(ws, "count_vowels")) == 2
    with pytest.raises(TeaError, match="not a candidate \\(promoted\\)"):
        gate.check("count_vowels")


def test_a_tool_that_does_not_help_stays_a_candidate_with_its_interval(ws, candidate):
    agent = ws.agent("expert", model=ScriptedModel(knows_already).name, tools=[])
    decision = ws.promotion_gate(held_out(), agent=agent, scorer="exact", level=0.9).check("count_vowels")
    assert decision.status == "candidate" and decision.promoted_version is None
    assert (decision.gain, decision.ci_low, decision.ci_high) == (0.0, 0.0, 0.0)
    assert "stays a candidate" in decision.message and "90% interval +0.00 to +0.00" in decision.message
    assert "includes zero" in decision.message
    current = ws.tools.get("count_vowels")
    assert current.version == candidate.version and is_candidate(current)
    assert [d.id for d in decisions(ws, "count_vowels")] == [decision.id]  # the evidence is kept


def test_too_few_held_out_tasks_run_but_are_called_underpowered(ws, candidate):
    agent = ws.agent("solver", model=ScriptedModel(uses_the_tool).name, tools=[])
    few = dict(list(WORDS.items())[:4])
    decision = ws.promotion_gate(held_out(few), agent=agent, scorer="exact").check("count_vowels")
    assert min_tasks(0.95) == 6 and decision.n == 4 and decision.underpowered
    assert decision.gain > 0 and decision.status == "candidate"
    assert "underpowered" in decision.message and "at least 6 tasks" in decision.message
    assert is_candidate(ws.tools.get("count_vowels"))


def test_a_leaked_held_out_set_is_refused_with_nothing_written(ws, candidate):
    agent = ws.agent("solver", model=ScriptedModel(uses_the_tool).name, tools=[])
    leaky = [*held_out(), {"id": "made-it", "question": "Count the vowels in a  word", "answer": "?"}]
    runs_before = len(ws.db.runs(1000))
    with pytest.raises(LeakageError, match="leakage: 1 held-out task.*'Count the vowels in a  word'") as err:
        ws.promotion_gate(leaky, agent=agent, scorer="exact").check("count_vowels")
    assert err.value.overlap == ["Count the vowels in a  word"]
    assert ws.evaluations() == [] and len(ws.db.runs(1000)) == runs_before
    assert ws.db.heads(DECISION_KIND) == [] and decisions(ws) == []
    assert ws.tools.get("count_vowels").version == candidate.version


def test_bad_gate_settings_are_named(ws, candidate):
    agent = ws.agent("solver", model=ScriptedModel(uses_the_tool).name, tools=[])
    with pytest.raises(TeaError, match="level must be"):
        ws.promotion_gate(held_out(), agent=agent, level=95)
    with pytest.raises(TeaError, match="no tasks"):
        ws.promotion_gate([], agent=agent)
    with pytest.raises(TeaError, match="epochs must be"):
        ws.promotion_gate(held_out(), agent=agent, epochs=0)


def test_a_tool_made_without_the_gate_says_promotion_is_unmeasured(ws):
    creation = ws.tools.create(TASK, model=tool_manager_script_good().name)
    record = creation.tool
    assert record.metadata["evolution"]["status"] == "unmeasured" and "routing" not in record.metadata
    assert json.dumps(record.metadata["evolution"]["runs"]) == json.dumps([creation.run_id])


# -- the evolution loop -----------------------------------------------------------------------------------
def test_the_evolution_loop_without_a_held_out_set_says_promotion_is_unmeasured(ws):
    from test_evolution_loop import VOWELS_1, World, steps

    from tea_notebook.evolve.loop import Mem2Evolve

    result = Mem2Evolve(ws, model=World().model.name).run(VOWELS_1)
    assert result.created_tools == ["count_vowels"]
    assert "promotion" in steps(ws, result.run_id)
    [step] = [s for s in ws.trajectory(result.run_id).steps if s.actions and s.actions[0]["name"] == "promotion"]
    assert "promotion unmeasured: no held-out set" in step.actions[0]["observation"]
    record = ws.tools.get("count_vowels")
    assert record.metadata["evolution"]["status"] == "unmeasured" and "routing" not in record.metadata


def test_the_evolution_loop_with_a_gate_promotes_only_on_held_out_evidence(ws):
    from test_evolution_loop import VOWELS_1, World, steps

    from tea_notebook.evolve.loop import Mem2Evolve

    judge = ws.agent("solver", model=ScriptedModel(uses_the_tool).name, tools=[])
    leaky = ws.promotion_gate([*held_out(), {"id": "t", "question": VOWELS_1, "answer": "3"}], agent=judge)
    world = World()
    with pytest.raises(LeakageError, match="the tools this task would make"):
        Mem2Evolve(ws, model=world.model.name, gate=leaky).run(VOWELS_1)
    assert ws.db.runs(100) == [] and "count_vowels" not in ws.tools

    loop = Mem2Evolve(ws, model=world.model.name, gate=ws.promotion_gate(held_out(), agent=judge, scorer="exact"))
    result = loop.run(VOWELS_1)
    assert result.success and result.created_tools == ["count_vowels"]
    decision = loop.promotions["count_vowels"]
    assert decision.status == "promoted", decision.message
    assert VOWELS_1 in ws.tools.get("count_vowels", 1).metadata["evolution"]["tasks"]  # what made it, for leakage
    assert "promotion_gate" in steps(ws, result.run_id)
    assert ws.tools.get("count_vowels").version == decision.promoted_version
    # the lessons the task wrote were candidates too; the gate's agent does not read them: no gain, kept back
    lessons = [d for d in loop.promotions.values() if d.kind == "experience"]
    assert {d.name for d in lessons} == {e.name for e in result.experiences} and lessons
    assert all(d.status == "candidate" and "includes zero" in d.message for d in lessons)
    assert ws.experiences.retrieve("count the vowels in a word", k=5) == []
    # the new expert is gated alike: its card brings count_vowels to the agent, so it helps
    (expert,) = [d for d in loop.promotions.values() if d.kind == "agent"]
    assert (expert.name, expert.status, expert.cohort["tools"]) == ("word_analysis_specialist", "promoted", [])


# -- experiences ----------------------------------------------------------------------------------------
def test_an_experience_that_helps_is_promoted_and_retrieved_only_then(ws):
    from tea_notebook.evolve.gate import enter_candidate

    @ws.tools.tool
    def count_vowels(text: str) -> int:
        """Count the vowels in a text."""
        return sum(ch in "aeiou" for ch in text.lower())

    lesson, _ = ws.experiences.add(
        "failure",
        "Count vowels with the tool",
        "Counting letters by eye goes wrong",
        ["count the vowels of a word"],
        "ALWAYS call count_vowels to count vowels; never count by eye.",
    )
    query = "count the vowels of a word"
    assert [e.name for e in ws.experiences.retrieve(query)] == [lesson.name]
    candidate = enter_candidate(ws, lesson.name, kind="experience", made_from=["count the vowels in 'kiwi'"])
    assert is_candidate(candidate) and "routing" not in candidate.metadata
    assert ws.experiences.retrieve(query) == []  # a candidate is not offered

    def heeds_the_lesson(messages, tools):
        """Uses the tool only when the lesson is in its system prompt."""
        if "ALWAYS call count_vowels" in messages[0]["content"]:
            return uses_the_tool(messages, tools)
        return call("done", success=True, text="3")

    agent = ws.agent("learner", model=ScriptedModel(heeds_the_lesson).name, tools=["count_vowels"])
    gate = ws.promotion_gate(held_out(), agent=agent, scorer="exact")
    with pytest.raises(TeaError, match="the gate knows tools, experiences and expert agents, not 'env'"):
        gate.check(lesson.name, kind="env")
    decision = gate.check(lesson.name, kind="experience")
    assert decision.status == "promoted" and decision.kind == "experience", decision.message
    assert decision.cohort["tools"] == ["count_vowels"] and decision.cohort["candidate"]["kind"] == "experience"
    assert [e.name for e in ws.experiences.retrieve(query)] == [lesson.name]  # offered again
    nodes = ws.lineage(kind="experience").nodes[lesson.name]
    assert [(n.version, n.parent, n.status, n.promoted_as) for n in nodes] == [
        (1, None, "registered", None),
        (2, 1, "promoted", 3),
    ]
    assert [d.id for d in nodes[1].gate] == [decision.id]
    assert ws.lineage(kind="experience").unused == []  # retrieved since its promotion


# -- expert agents -----------------------------------------------------------------------------------------
def test_an_expert_agent_is_a_candidate_until_the_gate_promotes_it(ws):
    from test_evolution_loop import EXPERT

    from tea_notebook.evolve.agent_bank import AgentBank

    @ws.tools.tool
    def count_vowels(text: str) -> int:
        """Count the vowels in a text."""
        return sum(ch in "aeiou" for ch in text.lower())

    bank = AgentBank(ws, threshold=0.0)
    expert = bank.add({**EXPERT, "tools": ["count_vowels"]}, candidate=True, made_from=["count the vowels in 'kiwi'"])
    assert is_candidate(expert) and bank.find("count the vowels of a word") is None  # not offered yet

    def heeds_the_role(messages, tools):
        """Works as the expert (with its tool) only when its role is in the system prompt."""
        if "Role: Word Analysis Specialist" in messages[0]["content"]:
            return uses_the_tool(messages, tools)
        return call("done", success=True, text="3")

    agent = ws.agent("generalist", model=ScriptedModel(heeds_the_role).name, tools=[])
    gate = ws.promotion_gate(held_out(), agent=agent, scorer="exact")
    with pytest.raises(LeakageError, match="leakage: 1 held-out task"):
        ws.promotion_gate([{"id": "k", "question": "Count the vowels in 'KIWI'", "answer": "2"}], agent=agent).check(
            expert.name, kind="agent"
        )
    decision = gate.check(expert.name, kind="agent")
    assert decision.status == "promoted" and decision.kind == "agent", decision.message
    found = bank.find("count the vowels of a word")
    assert found is not None and found[0].name == expert.name and found[0].version == decision.promoted_version
    nodes = ws.lineage(kind="agent").nodes[expert.name]
    assert [(n.version, n.status, n.promoted_as) for n in nodes] == [(1, "promoted", 2)]
    assert ws.lineage(kind="agent").unused == [expert.name]  # no run of the expert since
