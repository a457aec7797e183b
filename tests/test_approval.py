"""``approval="manual"`` holds generated tools on EVERY path that creates them (issue 10, finding 6):
the ``tool_manager`` and ``mem2evolve`` agents a planner delegates to, Mem²Evolve itself and
``ws.tools.create``. A held tool is pending: not registered, not callable, until a person accepts it.

Models are scripted by stage (``stage_of``); the planner is a scripted function of its prompt.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from test_evolution_loop import EXPERT, GOOD, NEED, SPEC, TESTS

from tea_notebook.evolve.llm import stage_of
from tea_notebook.evolve.loop import Mem2Evolve, register_evolution_agents
from tea_notebook.models.offline import ScriptedModel, call, history_calls

pytestmark = pytest.mark.usefixtures("warm_litellm")

CODE = GOOD  # the scripted material of the evolution-loop tests
TASK = "Count the vowels in the word 'banana'."


class Stages:
    """A scripted model for the tool manager's and Mem²Evolve's stages; ``asked`` counts the stages."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.model = ScriptedModel(self)

    def __call__(self, messages: list[dict], tools: list[dict] | None) -> Any:
        stage = stage_of(messages)
        self.asked.append(stage)
        return getattr(self, stage)(messages, tools or [])

    def plan(self, messages, tools):
        query = re.search(r"Query:\s*(.*)", messages[1]["content"]).group(1).strip()
        return json.dumps({"sub_tasks": [{"description": query, "dependencies": []}]})

    def assess_tool_need(self, messages, tools):
        if "- count_vowels:" in messages[1]["content"]:
            return json.dumps(dict(NEED, need_creation=False, matching_tools=["count_vowels"], missing_tools=[]))
        return json.dumps(NEED)

    def tool_spec(self, messages, tools):
        return json.dumps({"tool_creation_specs": [SPEC]})

    def tool_code(self, messages, tools):
        reply = {"name": "count_vowels", "description": "d", "input_schema": {}, "returns": {}, "module_code": CODE}
        return json.dumps(reply)

    def tool_tests(self, messages, tools):
        return json.dumps({"tests": TESTS})

    def agent_spec(self, messages, tools):
        return json.dumps(EXPERT)

    def react(self, messages, tools):
        offered = {t["function"]["name"] for t in tools}
        assert "count_vowels" not in offered, "a pending tool must not be offered to an agent"
        return call("done", success=True, text="3")

    def aggregate(self, messages, tools):
        return json.dumps({"answer": "3", "reasoning": "The sub-task's result answers the query."})

    def judge(self, messages, tools):
        return json.dumps(
            {
                "task_completed": True,
                "completion_quality": "good",
                "overall_assessment": "The count is right.",
                "agent_evaluations": [
                    {
                        "agent_id": "x",
                        "agent_role": "Word Analysis Specialist",
                        "subtask_id": "1",
                        "performance": "success",
                        "strengths": ["answered"],
                        "issues": [],
                    }
                ],
                "tool_evaluations": [],
            }
        )

    def success_memory(self, messages, tools):
        return (
            "## How to count the vowels of a word exactly\n### Description\nCount each vowel of the word "
            "and report the number.\n### Task Context\n- counting the vowels in a word\n### Experience of Success"
            "\n- Successful Strategy: count carefully\n- Tools and Techniques: none"
        )


def planner_model(agent_tool: str, task: str) -> ScriptedModel:
    """A planner that delegates once to ``agent_tool`` and finishes with what it answered."""

    def answer(messages, tools):
        seen = history_calls(messages)
        if not seen:
            return call(agent_tool, task=task)
        return call("done", success=True, text=seen[-1][2])

    return ScriptedModel(answer)


def test_a_planner_delegating_to_tool_manager_leaves_the_tool_pending(ws):
    stages = Stages()
    register_evolution_agents(ws, model=stages.model.name, approval="manual")
    planner = ws.planner(["tool_manager"], model=planner_model("tool_manager_agent", "a vowel counter").name)
    done = planner.run_sync("Make a vowel-counting tool")

    assert "tool_tests" in stages.asked  # the tool was written and validated ...
    assert "count_vowels" not in ws.tools  # ... but not registered
    assert "count_vowels: pending" in done.answer and "waiting for a person's approval" in done.answer
    [creation] = ws.agents.runtime("tool_manager").pending
    [candidate] = creation.candidates
    assert candidate.status == "pending" and creation.status == "pending"
    assert candidate.accept().version == 1 and ws.tools.get("count_vowels").origin == "generated"


def test_a_planner_delegating_to_mem2evolve_leaves_the_tool_pending(ws):
    stages = Stages()
    register_evolution_agents(ws, model=stages.model.name, approval="manual", max_steps=3)
    planner = ws.planner(["mem2evolve"], model=planner_model("mem2evolve_agent", TASK).name)
    done = planner.run_sync(TASK)

    assert "tool_tests" in stages.asked and "count_vowels" not in ws.tools
    assert done.answer.startswith("3") and "new tool count_vowels" in done.answer
    [result] = ws.agents.runtime("mem2evolve").pending
    [sub] = result.subtasks
    assert sub.recruit.pending_tools == ["count_vowels"] and result.created_tools == []


def test_auto_approval_registers_through_the_same_agent(ws):
    stages = Stages()
    register_evolution_agents(ws, model=stages.model.name)  # the default stays "auto"
    answer = ws.agents.invoke("tool_manager", "a vowel counter")
    assert answer.ok and "count_vowels v1: registered" in answer.value and "approval" not in answer.value
    assert "count_vowels" in ws.tools and ws.agents.runtime("tool_manager").pending == []


def test_mem2evolve_with_manual_approval_leaves_the_tool_pending(ws):
    stages = Stages()
    result = Mem2Evolve(ws, model=stages.model.name, approval="manual", max_steps=3).run(TASK)
    [sub] = result.subtasks
    assert "count_vowels" not in ws.tools and sub.recruit.pending_tools == ["count_vowels"]
    assert sub.recruit.creation.candidates[0].status == "pending"


def test_ws_tools_create_with_manual_approval_leaves_the_tool_pending(ws):
    stages = Stages()
    creation = ws.tools.create("a vowel counter", model=stages.model.name, approval="manual")
    assert creation.status == "pending" and "count_vowels" not in ws.tools


def test_bad_options_fail_when_the_agents_are_registered(ws):
    with pytest.raises(ValueError, match="approval"):
        register_evolution_agents(ws, model="tea/demo", approval="sometimes")
    with pytest.raises(TypeError):
        register_evolution_agents(ws, model="tea/demo", no_such_option=1)
    assert "tool_manager" not in ws.agents and "mem2evolve" not in ws.agents
