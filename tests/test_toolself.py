"""ToolSelf (one agent that reconfigures itself through a tool) with scripted models, no network.

Every run here is driven by a :class:`Script`: one :class:`ScriptedModel` that answers the
reconfiguration engine μ (its system prompt says "Agent Configuration Engineer") from one queue and
the agent π from another, and keeps a copy of every prompt and of the tools offered with it. The
tests read those prompts back: what a stage's agent is shown (only its own steps, the knowledge μ
chose), what μ is shown (the history pool, the update requirement without ``update_content``), and
what comes back when an output is malformed.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from conftest import magics_workspace

import tea_notebook
import tea_notebook._sync
from tea_notebook.agents import kinds
from tea_notebook.agents.toolself import ToolSelfAgent
from tea_notebook.agents.training_data import KTO_SCHEMA, RFT_SCHEMA
from tea_notebook.errors import RunFailed, TeaError
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.runtime.agent import RunResult
from tea_notebook.runtime.plots import stage_totals

ENGINE = "Agent Configuration Engineer"
TASK = "What is the caffeine of green tea times the number of cups?"
LEDGER = {"green": "6", "cups": "7", "black": "9"}
POOL = ["lookup", "mul", "add", "shout"]
STEP_TAG = re.compile(r"<step_(\d+)>")


@pytest.fixture(scope="module", autouse=True)
def _warm(warm_litellm):
    """Timings measure ToolSelf, not litellm's first import."""


def register_pool(ws) -> list[str]:
    """The global tool pool of these tests (and one registered tool that is not in it)."""

    @ws.tools.tool
    def lookup(key: str) -> str:
        """Look a key up in the tea ledger."""
        return f"ledger[{key}] = {LEDGER.get(key, '?')} (OBS-{key}-MARK)"

    @ws.tools.tool
    def mul(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    @ws.tools.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @ws.tools.tool
    def shout(text: str) -> str:
        """Repeat the text in capitals."""
        return text.upper()

    @ws.tools.tool
    def outside(text: str) -> str:
        """A registered tool that is not in the agent's pool."""
        return text

    return list(POOL)


@pytest.fixture
def pool(ws) -> list[str]:
    return register_pool(ws)


# -- the script ----------------------------------------------------------------------------------
Item = Any  # text, call(...), or a function (messages, tools) -> text | call(...)


class Script:
    """μ answers from ``engine``, π from ``agent`` (each item used once, in order); every prompt
    is copied (μ's retry conversation grows in place) with the names of the tools offered."""

    def __init__(self, engine: list[Item], agent: list[Item]):
        self.engine, self.agent = list(engine), list(agent)
        self.engine_prompts: list[list[dict]] = []
        self.engine_tools: list[list[str]] = []
        self.agent_prompts: list[list[dict]] = []
        self.agent_tools: list[list[str]] = []
        self.model = ScriptedModel(self)

    @property
    def name(self) -> str:
        return self.model.name

    def __call__(self, messages: list[dict], tools: list[dict]) -> Any:
        names = sorted(t["function"]["name"] for t in tools)
        if ENGINE in messages[0]["content"]:
            self.engine_prompts.append(copy.deepcopy(messages))
            self.engine_tools.append(names)
            queue = self.engine
        else:
            self.agent_prompts.append(copy.deepcopy(messages))
            self.agent_tools.append(names)
            queue = self.agent
        if not queue:
            raise AssertionError("the script has no more answers for this model")
        item = queue.pop(0)
        return item(messages, tools) if callable(item) else item

    def agent_text(self, i: int) -> str:
        """The whole i-th prompt of π (system and user)."""
        return "\n".join(m["content"] for m in self.agent_prompts[i])

    def history(self, i: int) -> str:
        return section(self.agent_prompts[i][1]["content"], "history")


def section(text: str, tag: str) -> str:
    """The last ``<tag>...</tag>`` block (the A.6.1 system prompt names its tags before filling them)."""
    assert f"<{tag}>" in text and f"</{tag}>" in text, f"<{tag}> missing"
    return text.rsplit(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]


def config(goal: str, toolbox: list[str], knowledge: str = "", strategy: str = "") -> str:
    """μ's answer: the A.6.3 JSON."""
    return json.dumps(
        {
            "next_sub_goal": goal,
            "execution_strategy": strategy or f"As a Tea Analyst, I will follow these steps: 1. {goal}",
            "toolbox": toolbox,
            "inter_agent_knowledge": knowledge,
        }
    )


def reconfigure(summary: str, goal: str, reason: str = "sub-goal done", content: str = "sub_goal", **details: str):
    args: dict[str, Any] = dict(execution_summary=summary, update_content=content, update_reason=reason)
    args["new_sub_goal"] = goal
    if details:
        args["additional_details"] = details
    return call("reconfigure", **args)


def finish(result: str = "42", status: str = "complete"):
    summary = {"detailed_execution": ["looked up", "multiplied"], "tools_used": ["lookup", "mul"]}
    return call("finish", task_completion_status=status, final_result=result, execution_summary=summary)


def green_times_seven() -> Script:
    """Two stages: look green up (6), then, reconfigured, multiply it by 7."""
    engine = [config("find green", ["lookup"]), config("multiply", ["mul"])]
    agent = [
        call("lookup", key="green"),
        reconfigure("SUMMARY green is 6", "multiply"),
        call("mul", a=6, b=7),
        finish(),
    ]
    return Script(engine, agent)


def make(ws, script: Script, name: str = "ts", **options: Any) -> ToolSelfAgent:
    options.setdefault("tools", list(POOL))
    return ws.toolself(name, model=script.name, **options)


def stage_events(ws, run_id: str) -> list[dict]:
    return [e.data for e in ws.events.events(run_id) if e.type == "stage"]


def first_observation(step) -> str:
    return str(step.actions[0].get("observation", "")) if step.actions else ""


def three_stage_script(knowledge: str) -> Script:
    """find green -> (reconfigure) find cups -> (reconfigure) multiply -> finish."""
    engine = [
        config("find the caffeine of green tea", ["lookup"]),
        config("find the number of cups", ["lookup", "shout"], knowledge),
        config("multiply the two numbers", ["mul", "add"], knowledge),
    ]
    agent = [
        call("lookup", key="green"),
        reconfigure("SUMMARY-ONE: green tea has 6", "find the number of cups", reason="caffeine found"),
        call("lookup", key="cups"),
        reconfigure("SUMMARY-TWO: there are 7 cups", "multiply the two numbers", reason="cups found"),
        call("mul", a=6, b=7),
        finish("42"),
    ]
    return Script(engine, agent)


# -- stages: reset, knowledge, toolbox -----------------------------------------------------------
@pytest.mark.parametrize("knowledge", ["ALL", "", "green tea has 6 mg; look up the cups next"])
def test_three_stages_reset_the_history_and_pass_the_knowledge_mu_chose(ws, pool, knowledge):
    script = three_stage_script(knowledge)
    result = make(ws, script).run_sync(TASK)
    assert (result.status, result.answer, result.steps) == ("success", "42", 6)
    assert script.engine == [] and script.agent == []

    stages = result.trajectory.stages
    assert [s["index"] for s in stages] == [1, 2, 3]
    assert [s["first_step"] for s in stages] == [1, 3, 5]
    assert [s["sub_goal"] for s in stages] == [
        "find the caffeine of green tea",
        "find the number of cups",
        "multiply the two numbers",
    ]
    assert [s["toolbox"] for s in stages] == [["lookup"], ["lookup", "shout"], ["mul", "add"]]
    assert [s["reason"] for s in stages] == ["initial configuration", "caffeine found", "cups found"]
    assert [s.get("forced", False) for s in stages] == [False, False, False]
    assert all(s["engine"]["ok"] and s["engine"]["attempts"] == 1 for s in stages)
    assert stages[1]["knowledge"] == ("ALL" if knowledge == "ALL" else knowledge)

    # μ: nothing at first, then the pool in A.6.5 format and the agent's request
    first, second, third = (p[1]["content"] for p in script.engine_prompts)
    assert "<execution_history>NONE</execution_history>" in first
    assert "<update_requirement>NONE</update_requirement>" in first
    assert "Iteration 1:\nSub-goal: find the caffeine of green tea\nSummary: SUMMARY-ONE: green tea has 6" in second
    assert "Iteration 2" not in second
    requirement = section(second, "update_requirement")
    assert requirement == "Proposed Sub_goal: find the number of cups\nUpdate Reason: caffeine found"
    assert "Iteration 2:\nSub-goal: find the number of cups\nSummary: SUMMARY-TWO: there are 7 cups" in third
    tools_listed = section(first, "available_tools")
    assert [line.split(":")[0] for line in tools_listed.strip().splitlines()] == [f"- {t}" for t in POOL]
    assert "outside" not in tools_listed

    # π: stage 1's second prompt sees its first step; stage 2's first prompt sees nothing of stage 1
    assert "OBS-green-MARK" in script.history(1) and STEP_TAG.findall(script.history(1)) == ["1"]
    stage2 = script.agent_text(2)
    assert "<sub_goal>find the number of cups</sub_goal>" in stage2
    assert "OBS-green-MARK" not in stage2 and STEP_TAG.findall(script.history(2)) == []
    assert "(no steps yet in this stage)" in script.history(2)
    assert "Stage 2; step 1 of at most" in stage2
    knowledge_block = section(script.agent_prompts[2][0]["content"], "knowledge")
    if knowledge == "ALL":
        assert "SUMMARY-ONE: green tea has 6" in knowledge_block and "Iteration 1:" in knowledge_block
    else:
        assert knowledge_block == knowledge and "SUMMARY-ONE" not in stage2
    stage3 = script.agent_text(4)
    assert "OBS-green-MARK" not in stage3 and "OBS-cups-MARK" not in stage3
    assert ("SUMMARY-TWO" in stage3) == (knowledge == "ALL")
    assert ("SUMMARY-ONE" in stage3) == (knowledge == "ALL")

    # the step that asked for the reconfiguration stays in the old stage and says what comes next
    steps = result.trajectory.steps
    assert first_observation(steps[1]).startswith("Reconfigured: stage 2 starts with a fresh history.")
    assert "Toolbox: lookup, shout." in first_observation(steps[1])


def test_each_stage_offers_exactly_its_toolbox_and_the_two_management_tools(ws, pool):
    engine = [
        # the management tools may be named (they are always there), duplicates are dropped
        config("find green", ["lookup", "finish", "lookup"]),
        config("multiply", ["mul", "add", "reconfigure"]),
    ]
    agent = [call("lookup", key="green"), reconfigure("green is 6", "multiply"), call("mul", a=6, b=7), finish()]
    script = Script(engine, agent)
    result = make(ws, script).run_sync(TASK)
    assert result.success
    assert script.agent_tools == [
        ["finish", "lookup", "reconfigure"],
        ["finish", "lookup", "reconfigure"],
        ["add", "finish", "mul", "reconfigure"],
        ["add", "finish", "mul", "reconfigure"],
    ]
    assert script.engine_tools == [[], []]  # μ is a JSON generator: no tools
    assert [s["toolbox"] for s in result.trajectory.stages] == [["lookup"], ["mul", "add"]]
    assert "<toolbox>mul, add</toolbox>" in script.agent_prompts[2][0]["content"]


def test_a_tool_outside_the_stage_toolbox_is_refused(ws, pool):
    engine = [config("find green", ["lookup"])]
    agent = [call("mul", a=6, b=7), finish()]
    script = Script(engine, agent)
    result = make(ws, script).run_sync(TASK)
    assert result.success
    error = script.history(1)
    assert "unknown action(s) mul" in error and "mul" not in script.agent_tools[1]


def test_update_content_is_not_forwarded_to_mu_but_additional_details_are(ws, pool):
    engine = [config("find green", ["lookup"]), config("multiply", ["mul"])]
    agent = [
        reconfigure(
            "nothing yet",
            "multiply",
            reason="need arithmetic",
            content="execution_strategy",
            toolbox_requirements="a multiplier",
            knowledge_requirements="the green figure",
        ),
        finish(),
    ]
    script = Script(engine, agent)
    result = make(ws, script).run_sync(TASK)
    assert result.success
    requirement = section(script.engine_prompts[1][1]["content"], "update_requirement")
    assert requirement == (
        "Proposed Sub_goal: multiply\nUpdate Reason: need arithmetic\n"
        "Toolbox Requirements: a multiplier\nKnowledge Requirements: the green figure"
    )
    assert "execution_strategy" not in script.engine_prompts[1][1]["content"]
    stage = result.trajectory.stages[1]
    assert stage["update_content"] == "execution_strategy"  # kept for analysis
    assert stage["details"] == {"toolbox_requirements": "a multiplier", "knowledge_requirements": "the green figure"}
    assert (stage["proposed_sub_goal"], stage["reason"]) == ("multiply", "need arithmetic")
    assert stage["engine"]["requirement"] == requirement


# -- μ's bad outputs ------------------------------------------------------------------------------
BAD_CONFIGS = {
    "prose": ("I think the agent should look things up first.", "the reply is not a JSON object"),
    "unknown tool": (
        config("find green", ["lookup", "teleport"]),
        "the toolbox names tools that are not in <available_tools>: teleport",
    ),
    "empty toolbox": (config("find green", []), "the toolbox is empty"),
    "missing field": (
        json.dumps({"next_sub_goal": "find green", "toolbox": ["lookup"], "inter_agent_knowledge": ""}),
        "the JSON object lacks 'execution_strategy'",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_a_bad_configuration_goes_back_to_mu_with_the_problem(ws, pool, case):
    bad, problem = BAD_CONFIGS[case]
    engine = [bad, config("find green", ["lookup"]), bad, config("multiply", ["mul"])]
    agent = [call("lookup", key="green"), reconfigure("green is 6", "multiply"), finish()]
    script = Script(engine, agent)
    result = make(ws, script).run_sync(TASK)
    assert result.success and script.engine == []
    for retry in (script.engine_prompts[1], script.engine_prompts[3]):  # initial and after reconfigure
        assert [m["role"] for m in retry] == ["system", "user", "assistant", "user"]
        assert retry[2]["content"] == bad
        assert retry[3]["content"].startswith("Error: ") and problem in retry[3]["content"]
    stages = result.trajectory.stages
    assert [s["sub_goal"] for s in stages] == ["find green", "multiply"]
    assert [(s["engine"]["ok"], s["engine"]["attempts"]) for s in stages] == [(True, 2), (True, 2)]
    assert "note" not in stages[0]


def test_mu_bad_for_the_first_configuration_gives_the_fallback_stage(ws, pool):
    engine = ["not json", config("find green", ["teleport"])]  # engine_retries=1: two attempts
    agent = [call("shout", text="hi"), finish()]
    script = Script(engine, agent)
    result = make(ws, script, engine_retries=1).run_sync(TASK)
    assert result.success and script.engine == []
    [stage] = result.trajectory.stages
    assert stage["sub_goal"] == TASK and stage["toolbox"] == POOL and stage["knowledge"] == ""
    assert "no valid configuration" in stage["note"] and "teleport" in stage["note"]
    assert "whole tool pool" in stage["note"]
    assert (stage["engine"]["ok"], stage["engine"]["attempts"]) == (False, 2)
    assert script.agent_tools[0] == sorted([*POOL, "finish", "reconfigure"])
    assert f"<sub_goal>{TASK}</sub_goal>" in script.agent_prompts[0][0]["content"]
    errors = [e.data for e in ws.events.events(result.run_id) if e.type == "error"]
    assert any("teleport" in e["message"] for e in errors)
    html = result.trajectory._repr_mimebundle_()[0]["text/html"]
    assert "whole tool pool" in html


def test_mu_bad_after_a_reconfigure_keeps_the_stage_and_its_history(ws, pool):
    engine = [
        config("find green", ["lookup", "mul"]),
        "prose",
        "more prose",
        "still prose",  # engine_retries=2: three attempts, all bad
        config("multiply", ["mul"]),
    ]
    agent = [
        call("lookup", key="green"),
        reconfigure("SUMMARY-FAILED green is 6", "multiply"),
        call("lookup", key="cups"),
        reconfigure("SUMMARY-LATER green 6 cups 7", "multiply"),
        finish(),
    ]
    script = Script(engine, agent)
    result = make(ws, script).run_sync(TASK)
    assert result.success and script.engine == []
    steps = result.trajectory.steps
    observation = first_observation(steps[1])
    assert observation.startswith("Error: the reconfiguration engine gave no valid configuration (3 attempts)")
    assert "stage 1" in observation and "history kept" in observation
    # the next prompt is still stage 1's, with every earlier step
    after = script.agent_text(2)
    assert "Stage 1; step 3" in after and "<sub_goal>find green</sub_goal>" in after
    assert STEP_TAG.findall(script.history(2)) == ["1", "2"]
    assert "OBS-green-MARK" in script.history(2) and "no valid configuration" in script.history(2)
    # the failed request archived nothing: the later one is the pool's only entry
    later = script.engine_prompts[4][1]["content"]
    assert "Iteration 1:\nSub-goal: find green\nSummary: SUMMARY-LATER" in later
    assert "SUMMARY-FAILED" not in later and "Iteration 2" not in later
    stages = result.trajectory.stages
    assert [(s["index"], s["first_step"]) for s in stages] == [(1, 1), (2, 5)]


# -- malformed management calls -------------------------------------------------------------------
BAD_CALLS = {
    "reconfigure without new_sub_goal": (
        call("reconfigure", execution_summary="s", update_content="sub_goal", update_reason="r"),
        "new_sub_goal",
    ),
    "reconfigure with a wrong update_content": (
        call("reconfigure", execution_summary="s", update_content="everything", update_reason="r", new_sub_goal="g"),
        "update_content",
    ),
    "finish without final_result": (
        call(
            "finish",
            task_completion_status="complete",
            execution_summary={"detailed_execution": [], "tools_used": []},
        ),
        "final_result",
    ),
    "finish with a wrong status": (finish("42", status="done"), "task_completion_status"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_malformed_management_call_is_an_error_observation_naming_the_field(ws, pool, case):
    bad, field = BAD_CALLS[case]
    script = Script([config("find green", ["lookup"])], [bad, finish("42")])
    result = make(ws, script).run_sync(TASK)
    assert (result.status, result.answer, result.steps) == ("success", "42", 2)
    step = result.trajectory.steps[0]
    name = bad["name"]
    observation = first_observation(step)
    assert observation.startswith(f"Error: {name}: ") and field in observation
    assert step.errors and field in step.errors[0]
    assert len(result.trajectory.stages) == 1  # a bad reconfigure starts no stage
    shown = script.history(1)
    assert f"[{name}]" in shown and field in shown


def test_three_malformed_outputs_in_a_row_end_the_run_with_error_and_keep_the_steps(ws, pool):
    bad_reconfigure = BAD_CALLS["reconfigure with a wrong update_content"][0]
    bad_finish = BAD_CALLS["finish with a wrong status"][0]
    script = Script([config("find green", ["lookup"])], [bad_reconfigure, bad_finish, bad_reconfigure])
    with pytest.raises(RunFailed, match="3 consecutive malformed model outputs") as failed:
        make(ws, script).run_sync(TASK)  # a ToolSelf run that ends in error raises, like every kind's
    result = failed.value.result
    assert result.status == "error" and result.steps == 3
    assert "3 consecutive malformed model outputs" in result.error and "update_content" in result.error
    traj = ws.trajectory(result.run_id)
    assert traj.status == "error" and [s.number for s in traj.steps] == [1, 2, 3]
    assert [s.actions[0]["name"] for s in traj.steps] == ["reconfigure", "finish", "reconfigure"]
    assert all(first_observation(s).startswith("Error: ") for s in traj.steps)
    assert len(traj.stages) == 1


def test_a_toolself_run_forks_by_stage_and_refuses_a_step_clearly(ws, pool):
    from tea_notebook.runtime.render import payload

    script = Script([config("find green", ["lookup"])], [call("lookup", key="green"), finish("6")])
    result = make(ws, script).run_sync(TASK)
    assert result.success and result.steps == 2
    assert payload(result.trajectory)["forkable"] == "stages"  # Fork buttons on stages, not on steps
    with pytest.raises(TeaError, match="a ToolSelf run is forked at a stage"):
        tea_notebook._sync.run_sync(ws.fork(result.run_id, 1))


def test_a_fork_from_a_stage_starts_it_as_recorded_or_edited(ws, pool):
    script = green_times_seven()
    first = make(ws, script).run_sync(TASK)
    assert first.success and len(first.trajectory.stages) == 2
    runs = len(ws.db.runs(10_000, parent_id=None))
    for bad, message in (
        ({"stage": {"colour": "red"}}, "not colour"),
        ({"observation": "x"}, "edits its configuration"),
    ):
        with pytest.raises(TeaError, match=message):
            tea_notebook._sync.run_sync(ws.fork(first.run_id, stage=2, edit=bad))
    with pytest.raises(TeaError, match="stages 1 to 2; there is no stage 3"):
        tea_notebook._sync.run_sync(ws.fork(first.run_id, stage=3))
    assert len(ws.db.runs(10_000, parent_id=None)) == runs

    # stage 2 again with its toolbox edited: no call to the engine, the stage's agent sees the edit
    again = Script([], [call("add", a=6, b=7), finish("13")])
    edit = {"stage": {"sub_goal": "add the two numbers", "toolbox": ["add"]}}
    forked = tea_notebook._sync.run_sync(ws.fork(first.run_id, stage=2, edit=edit, model=again.name))
    assert forked.success and forked.answer == "13"
    assert again.engine_prompts == []  # the stage's configuration came from the fork
    assert again.agent_tools[0] == ["add", "finish", "reconfigure"]
    prompt = again.agent_text(0)
    assert "add the two numbers" in prompt and "OBS-green-MARK" not in prompt  # a stage starts afresh
    stages = forked.trajectory.stages
    assert [s["index"] for s in stages] == [2] and stages[0]["toolbox"] == ["add"]
    assert stages[0]["edited"]["before"] == {"sub_goal": "multiply", "toolbox": ["mul"]}
    steps = forked.trajectory.steps
    assert steps[0].replayed and steps[1].replayed and not steps[2].replayed  # stage 1's steps replayed
    # the pool of earlier stages is what the engine sees at the next reconfiguration
    onward = Script([config("multiply", ["mul"])], [reconfigure("added", "multiply"), call("mul", a=6, b=7), finish()])
    tea_notebook._sync.run_sync(ws.fork(first.run_id, stage=2, model=onward.name))
    assert "SUMMARY green is 6" in "\n".join(m["content"] for m in onward.engine_prompts[0])


def test_a_good_step_between_malformed_ones_resets_the_count(ws, pool):
    bad = BAD_CALLS["finish with a wrong status"][0]
    agent = [bad, bad, call("lookup", key="green"), bad, bad, finish("6")]
    script = Script([config("find green", ["lookup"])], agent)
    result = make(ws, script).run_sync(TASK)
    assert (result.status, result.steps) == ("success", 6)


# -- how runs end ---------------------------------------------------------------------------------
@pytest.mark.parametrize("status", ["partial", "incomplete"])
def test_finish_short_of_complete_is_a_failed_run(ws, pool, status):
    script = Script([config("find green", ["lookup"])], [finish("only green: 6", status=status)])
    result = make(ws, script).run_sync(TASK)
    assert (result.status, result.success, result.answer) == ("failed", False, "only green: 6")
    assert first_observation(result.trajectory.steps[0]) == f"finished ({status})"


def test_more_reconfigurations_than_max_stages_ends_with_max_steps(ws, pool):
    engine = [config("find green", ["lookup"]), config("find cups", ["lookup"])]
    agent = [reconfigure("a", "find cups"), reconfigure("b", "multiply")]
    script = Script(engine, agent)
    result = make(ws, script, max_stages=1).run_sync(TASK)
    assert (result.status, result.steps) == ("max_steps", 2)
    assert "more than 1 reconfigurations" in result.answer
    assert len(script.engine_prompts) == 2  # the refused request never reached μ
    assert [s["index"] for s in result.trajectory.stages] == [1, 2]


def test_a_stage_at_max_stage_steps_is_reconfigured_by_the_framework(ws, pool):
    engine = [config("find green", ["lookup"]), config("find green, again", ["lookup", "mul"])]
    agent = [call("lookup", key="green"), call("lookup", key="black"), call("mul", a=6, b=7), finish()]
    script = Script(engine, agent)
    result = make(ws, script, max_stage_steps=2).run_sync(TASK)
    assert (result.status, result.steps) == ("success", 4)
    assert "This is the stage's LAST step" in script.agent_text(1)
    assert "LAST step" not in script.agent_text(0)
    first, second = result.trajectory.stages
    assert first.get("forced", False) is False
    assert second["forced"] is True and second["first_step"] == 3
    assert second["reason"] == "stage 1 reached its limit of 2 steps"
    assert second["proposed_sub_goal"] == "find green"
    pool_text = script.engine_prompts[1][1]["content"]
    assert "(written by the framework: the stage used its 2 steps" in pool_text and "OBS-black-MARK" in pool_text
    assert "OBS-green-MARK" not in script.agent_text(2)  # a forced reset is a reset too


def test_stage_step_limit_with_no_reconfigurations_left_ends_the_run(ws, pool):
    engine = [config("find green", ["lookup"]), config("find cups", ["lookup"])]
    script = Script(engine, [call("lookup", key="green"), call("lookup", key="cups")])
    result = make(ws, script, max_stage_steps=1, max_stages=1).run_sync(TASK)
    assert (result.status, result.steps) == ("max_steps", 2)
    assert "reached its step limit" in result.answer and "1 reconfigurations" in result.answer
    assert [s.get("forced", False) for s in result.trajectory.stages] == [False, True]


def test_max_steps_over_the_whole_run(ws, pool):
    engine = [config("find green", ["lookup"]), config("find cups", ["lookup"])]
    agent = [call("lookup", key="green"), reconfigure("green 6", "find cups"), call("lookup", key="cups")]
    script = Script(engine, agent)
    result = make(ws, script, max_steps=3).run_sync(TASK)
    assert (result.status, result.steps) == ("max_steps", 3)
    assert "step limit" in result.answer
    assert "This is the FINAL step of the run" in script.agent_text(2)
    assert "step 1 of at most 30 in this stage; step 3 of 3 overall" in script.agent_text(2)


# -- context cleanup inside a stage ---------------------------------------------------------------
def test_context_cleanup_keeps_only_the_last_steps(ws, pool):
    @ws.tools.tool
    def read_page(n: int) -> str:
        """Read one page of the tea report."""
        return f"PAGE-{n}: " + "steeped leaves and caffeine " * 14

    steps = 6
    engine = [config("read the report", ["read_page"])]
    agent = [call("read_page", n=i) for i in range(1, steps + 1)] + [finish()]
    script = Script(engine, agent)
    result = make(ws, script, tools=["read_page"], context_window=400, keep_recent_steps=2).run_sync(TASK)
    assert result.success
    folds = [e.data for e in ws.events.events(result.run_id) if e.type == "memory_written"]
    assert folds and all("context cleanup" in f["summary"] for f in folds)
    folded = sorted(n for f in folds for n in f["folded_steps"])
    assert folded == list(range(1, steps - 1))  # everything but the last two steps was dropped
    final = script.history(steps)  # the prompt of the finishing step
    assert STEP_TAG.findall(final) == [str(steps - 1), str(steps)]
    assert "PAGE-1:" not in final and f"PAGE-{steps}:" in final
    for i in range(1, steps + 1):  # never more than keep_recent_steps (+ the newest) in a prompt
        assert len(STEP_TAG.findall(script.history(i))) <= 3
    # the cleanup drops steps; it does not ask a model to summarise them
    assert len(script.model.calls) == len(script.agent_prompts) + len(script.engine_prompts) == steps + 2


# -- ACP card ------------------------------------------------------------------------------------
def test_the_agent_rebuilt_from_its_card_keeps_its_settings_and_runs(ws, pool):
    engine_script = Script([config("find green", ["lookup"]), config("multiply", ["mul"])], [])
    agent_script = Script(
        [], [call("lookup", key="green"), reconfigure("green 6", "multiply"), call("mul", a=6, b=7), finish()]
    )
    ws.toolself(
        "ts",
        tools=list(POOL),
        model=agent_script.name,
        engine_model=engine_script.name,
        max_stages=5,
        max_stage_steps=7,
        engine_retries=1,
        context_window=9000,
        keep_recent_steps=3,
        max_steps=40,
    )
    card = ws.agents.get("ts")
    assert card.metadata["kind"] == "toolself"
    again = tea_notebook.Workspace(ws.path, embedder="hashing")
    try:
        rebuilt = kinds.build(again, "ts")
        assert isinstance(rebuilt, ToolSelfAgent) and rebuilt.workspace is again
        settings = (
            rebuilt.engine_model,
            rebuilt.max_stages,
            rebuilt.max_stage_steps,
            rebuilt.engine_retries,
            rebuilt.context_window,
            rebuilt.keep_recent_steps,
            rebuilt.max_steps,
            rebuilt.model,
            rebuilt.tools,
        )
        assert settings == (engine_script.name, 5, 7, 1, 9000, 3, 40, agent_script.name, POOL)
        result = rebuilt.run_sync(TASK)
        assert (result.status, result.answer) == ("success", "42")
        # μ's calls went to the engine model, π's to the agent's
        assert len(engine_script.engine_prompts) == 2 and engine_script.agent_prompts == []
        assert len(agent_script.agent_prompts) == 4 and agent_script.engine_prompts == []
        assert "step 1 of at most 7 in this stage; step 1 of 40 overall" in agent_script.agent_text(0)
        traj = again.trajectory(result.run_id)
        assert [s["engine"]["model"] for s in traj.stages] == [engine_script.name] * 2
        assert first_observation(traj.steps[2]) == "42"
    finally:
        again.close()


# -- views ---------------------------------------------------------------------------------------
def test_plot_stage_totals_and_html_show_the_stages(ws, pool):
    pytest.importorskip("matplotlib")
    script = three_stage_script("ALL")
    result = make(ws, script).run_sync(TASK)
    assert result.success
    traj = result.trajectory
    fig = result.plot()
    assert [ax.get_title() for ax in fig.axes] == [
        "prompt tokens per step, by stage",
        "tokens per stage",
        "toolbox size per stage",
    ]
    assert "3 stages" in fig._suptitle.get_text()
    totals = stage_totals(traj)
    assert [(t["index"], t["steps"], t["toolbox"]) for t in totals] == [(1, 2, 1), (2, 2, 2), (3, 2, 2)]
    assert [t["sub_goal"] for t in totals] == [s["sub_goal"] for s in traj.stages]
    # every model call (π's and μ's) belongs to a stage
    assert sum(t["prompt_tokens"] for t in totals) == result.prompt_tokens
    assert sum(t["completion_tokens"] for t in totals) == result.completion_tokens
    for t in totals:
        mine = [s for s in traj.steps if s.number in range(2 * t["index"] - 1, 2 * t["index"] + 1)]
        assert t["prompt_tokens"] == sum(s.prompt_tokens for s in mine) > 0
    sizes = [p.get_height() for p in fig.axes[2].patches]
    assert sizes == [1, 2, 2]
    html = traj._repr_mimebundle_()[0]["text/html"]
    assert html.count("<details open class='stage'>") == 3
    for goal in ("find the caffeine of green tea", "find the number of cups", "multiply the two numbers"):
        assert goal in html
    text = traj.text()
    assert [line.strip().split(":")[0] for line in text.splitlines() if line.strip().startswith("stage ")] == [
        "stage 1",
        "stage 2",
        "stage 3",
    ]


# -- training data -------------------------------------------------------------------------------
def jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def validate(records: list[dict], schema: dict) -> None:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(schema)
    for record in records:
        errors = list(validator.iter_errors(record))
        assert not errors, errors[0].message


@pytest.fixture
def two_runs(ws, pool) -> tuple[RunResult, RunResult]:
    ok = make(ws, three_stage_script("ALL")).run_sync(TASK)
    failed_script = Script(
        [config("find green", ["lookup"])], [call("lookup", key="green"), finish("6", status="partial")]
    )
    failed = make(ws, failed_script, name="ts2").run_sync(TASK)
    assert (ok.status, failed.status) == ("success", "failed")
    return ok, failed


def test_rft_keeps_successful_runs_and_validates(ws, two_runs, tmp_path):
    ok, failed = two_runs
    report = ws.export_training_data([ok, failed.run_id], tmp_path / "rft.jsonl", format="rft")
    assert report.runs == [ok.run_id]
    assert [rid for rid, _ in report.skipped] == [failed.run_id]
    assert "not successful" in report.skipped[0][1] and "failed" in report.skipped[0][1]
    records = jsonl(tmp_path / "rft.jsonl")
    validate(records, RFT_SCHEMA)
    assert (report.records, report.agent_records, report.engine_records) == (6, 3, 3) == (len(records), 3, 3)
    assert (report.positive, report.negative) == (6, 0)
    assert {r["run_id"] for r in records} == {ok.run_id} and all(r["label"] is True for r in records)
    agents = sorted((r for r in records if r["role"] == "agent"), key=lambda r: r["stage"])
    assert [r["stage"] for r in agents] == [1, 2, 3]
    # each agent segment holds its own stage's steps only
    stage1 = json.dumps(agents[0]["messages"])
    stage2 = json.dumps(agents[1]["messages"])
    assert "OBS-green-MARK" in stage1 and "OBS-green-MARK" not in stage2 and "OBS-cups-MARK" in stage2
    assert [m["role"] for m in agents[0]["messages"]] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert agents[0]["messages"][2]["content"].startswith("<think>")
    assert '"name": "lookup"' in agents[0]["messages"][2]["content"]
    assert agents[0]["messages"][3]["content"].startswith("<tool_response>ledger[green] = 6")
    engines = sorted((r for r in records if r["role"] == "engine"), key=lambda r: r["stage"])
    assert ENGINE in engines[0]["messages"][0]["content"]
    assert json.loads(engines[1]["messages"][-1]["content"])["next_sub_goal"] == "find the number of cups"
    assert "<execution_history>NONE</execution_history>" in engines[0]["messages"][1]["content"]
    assert "Summary: SUMMARY-ONE: green tea has 6" in engines[1]["messages"][1]["content"]


def test_kto_labels_every_run_and_a_label_function_overrides(ws, two_runs, tmp_path):
    ok, failed = two_runs
    report = ws.export_training_data([ok, failed], tmp_path / "kto.jsonl", format="kto")
    records = jsonl(tmp_path / "kto.jsonl")
    validate(records, KTO_SCHEMA)
    assert report.runs == [ok.run_id, failed.run_id] and report.skipped == []
    labels = {(r["run_id"], r["label"]) for r in records}
    assert labels == {(ok.run_id, True), (failed.run_id, False)}
    assert (report.positive, report.negative) == (6, 2) and report.records == len(records) == 8
    engine2 = next(r for r in records if r["run_id"] == ok.run_id and r["role"] == "engine" and r["stage"] == 3)
    prompt = engine2["prompt"][1]["content"]
    assert "Iteration 1:\nSub-goal: find the caffeine of green tea\nSummary: SUMMARY-ONE" in prompt
    assert "Iteration 2:\nSub-goal: find the number of cups\nSummary: SUMMARY-TWO" in prompt
    assert "Proposed Sub_goal: multiply the two numbers" in prompt
    segment = next(r for r in records if r["run_id"] == failed.run_id and r["role"] == "agent")
    assert "<tool_response>ledger[green] = 6" in segment["completion"][0]["content"]
    assert '"task_completion_status": "partial"' in segment["completion"][0]["content"]

    judged = ws.export_training_data(
        [ok, failed], tmp_path / "judged.jsonl", format="kto", label=lambda t: t.run_id == failed.run_id
    )
    flipped = {(r["run_id"], r["label"]) for r in jsonl(tmp_path / "judged.jsonl")}
    assert flipped == {(ok.run_id, False), (failed.run_id, True)}
    assert (judged.positive, judged.negative) == (2, 6)
    # a judge can also let a failed run into RFT
    rft = ws.export_training_data([failed], tmp_path / "judged_rft.jsonl", format="rft", label=lambda t: True)
    assert rft.runs == [failed.run_id] and rft.records == 2 and rft.skipped == []


def test_export_keeps_existing_files_and_refuses_bad_input(ws, two_runs, tmp_path):
    ok, _ = two_runs
    out = tmp_path / "out"
    out.mkdir()
    target = out / "data.jsonl"
    target.write_text("keep me\n")
    with pytest.raises(FileExistsError):
        ws.export_training_data([ok], target, format="kto")
    assert target.read_text() == "keep me\n"
    assert sorted(p.name for p in out.iterdir()) == ["data.jsonl"]  # no temporary file left behind
    report = ws.export_training_data([ok], target, format="kto", overwrite=True)
    assert report.records == 6 and len(jsonl(target)) == 6

    plain_script = ScriptedModel([call("done", success=True, text="6", files_to_display=[])])
    plain = ws.agent("plain", model=plain_script.name, tools=["lookup"]).run_sync("Look up green tea.")
    assert plain.success
    mixed = ws.export_training_data([plain, ok], out / "mixed.jsonl", format="kto")
    assert mixed.skipped == [(plain.run_id, "not a ToolSelf run (it has no stages)")]
    assert mixed.runs == [ok.run_id]

    with pytest.raises(TeaError, match="unknown training-data format 'sft'"):
        ws.export_training_data([ok], out / "x.jsonl", format="sft")
    assert not (out / "x.jsonl").exists()


# -- %%agent --kind toolself ---------------------------------------------------------------------
@pytest.fixture
def magic_ws(ip, tmp_path, monkeypatch):
    """A fresh workspace made current in the in-process IPython shell."""
    path = tmp_path / "magic_ws"
    return magics_workspace(ip, tmp_path, monkeypatch, folder=path.name, workspace_path=str(path))


def test_agent_magic_with_kind_toolself(ip, magic_ws):
    pytest.importorskip("IPython")
    register_pool(magic_ws)
    engine = [config("find green", ["lookup"]), config("multiply", ["mul"])]
    agent = [call("lookup", key="green"), reconfigure("green 6", "multiply"), call("mul", a=6, b=7), finish()]
    script = Script(engine, agent)
    line = f"mytool --kind toolself --model {script.name} --tools lookup,mul --quiet"
    result = ip.run_cell_magic("agent", line, TASK)
    assert isinstance(result, RunResult)
    assert (result.agent, result.status, result.answer) == ("mytool", "success", "42")
    assert magic_ws.agents.get("mytool").metadata["kind"] == "toolself"
    stages = magic_ws.trajectory(result.run_id).stages
    assert [(s["sub_goal"], s["toolbox"]) for s in stages] == [("find green", ["lookup"]), ("multiply", ["mul"])]
    listed = section(script.engine_prompts[0][1]["content"], "available_tools")
    assert [line.split(":")[0] for line in listed.strip().splitlines()] == ["- lookup", "- mul"]
    assert script.agent_tools[2] == ["finish", "mul", "reconfigure"]
    with pytest.raises(Exception, match="registered with kind 'toolself', not 'agent'"):
        ip.run_cell_magic("agent", f"mytool --kind agent --model {script.name} --quiet", TASK)
