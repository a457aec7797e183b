"""The tool-calling agent runtime: the ReAct loop, prompt assembly, rules, events, memory folding,
cancellation, forking and the `tea run` command. Models are scripted (no LLM, no network)."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import asyncio  # noqa: E402
import json  # noqa: E402
import sqlite3  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402
from conftest import tea_cli as tea  # noqa: E402
from prompt_parts import section, system_text, thoughts, turn, user_text  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.errors import RunFailed, TeaError  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.protocol.records import EnvironmentRecord  # noqa: E402
from tea_notebook.runtime.trajectory import Trajectory  # noqa: E402

SECRET = "sk-test-1234567890abcdef1234"


# -- helpers --------------------------------------------------------------------------------
def types_of(events) -> list[str]:
    return [e.type for e in events]


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def broken_tool(x: int) -> str:
    """A tool that always fails."""
    raise RuntimeError("broken on purpose")


def shout(text: str) -> str:
    """Repeat the text in capitals."""
    return text.upper()


pytestmark = pytest.mark.usefixtures("warm_litellm")  # timings measure the runtime, not litellm's first import.


@pytest.fixture
def adder(ws):
    calls: list[tuple[int, int]] = []

    @ws.tools.tool
    def add_numbers(a: int, b: int) -> int:
        """Add two integers and return the sum."""
        calls.append((a, b))
        return a + b

    return calls


# -- happy paths ----------------------------------------------------------------------------
def test_native_tool_calls_run_and_thoughts_land_in_the_trajectory(ws, adder):
    script = ScriptedModel(
        [
            turn(
                thoughts(
                    thinking="I should add the numbers.",
                    evaluation_previous_goal="No previous step.",
                    memory="Task: 2 + 3.",
                    next_goal="Call add_numbers.",
                ),
                call("add_numbers", a=2, b=3),
            ),
            turn(thoughts(thinking="The sum is 5.", next_goal="Report."), call("done", success=True, text="5")),
        ]
    )
    agent = ws.agent("calc", model=script.name, tools=["add_numbers"])
    result = agent.run_sync("What is 2 + 3?")

    assert result.status == "success" and result.success
    assert result.answer == "5" and result.steps == 2 and result.error is None
    assert result.model == script.name
    assert adder == [(2, 3)]
    traj = result.trajectory
    assert [s.number for s in traj.steps] == [1, 2]
    first = traj.steps[0]
    assert first.thinking == "I should add the numbers."
    assert first.evaluation == "No previous step."
    assert first.memory == "Task: 2 + 3."
    assert first.next_goal == "Call add_numbers."
    assert first.actions[0]["name"] == "add_numbers"
    assert first.actions[0]["arguments"] == {"a": 2, "b": 3}
    assert first.actions[0]["observation"] == "5" and first.actions[0]["ok"] is True
    assert traj.steps[1].thinking == "The sum is 5."
    assert traj.steps[1].actions[0]["name"] == "done"


def test_json_mode_parses_the_papers_json_with_code_fences(ws, adder):
    step1 = {
        "thinking": "Two numbers to add.",
        "evaluation_previous_goal": "Starting.",
        "memory": "Need 4 + 5.",
        "next_goal": "Add them.",
        "action": [{"name": "add_numbers", "args": {"a": 4, "b": 5}}],
    }
    step2 = {
        "thinking": "Got 9.",
        "evaluation_previous_goal": "Success: the sum is 9.",
        "memory": "4 + 5 = 9.",
        "next_goal": "Finish.",
        "action": [{"name": "done", "args": {"success": True, "text": "9"}}],
    }
    seen_tools: list = []

    def brain(messages, tools):
        seen_tools.append(tools)
        return "```json\n" + json.dumps(step1) + "\n```" if len(seen_tools) == 1 else json.dumps(step2)

    script = ScriptedModel(brain)
    result = ws.agent("calc", model=script.name, tools=["add_numbers"], tool_mode="json").run_sync("4 + 5?")

    assert result.status == "success" and result.answer == "9"
    assert adder == [(4, 5)]
    assert seen_tools == [[], []]  # JSON mode offers no native tools; they are listed in the prompt
    steps = result.trajectory.steps
    assert (steps[0].thinking, steps[0].evaluation, steps[0].memory, steps[0].next_goal) == (
        "Two numbers to add.",
        "Starting.",
        "Need 4 + 5.",
        "Add them.",
    )
    assert steps[1].evaluation == "Success: the sum is 9."
    assert steps[0].actions[0]["observation"] == "9"


# -- prompt assembly ------------------------------------------------------------------------
class Kettle:
    """An environment runtime whose state changes when its tool is used."""

    def __init__(self):
        self.temp = 20

    def state(self) -> str:
        return f"kettle at {self.temp}C"


def test_prompt_assembly_native(ws):
    kettle = Kettle()
    ws.envs.register(
        EnvironmentRecord(name="kitchen", description="A small kitchen with a kettle.", rules="Never boil it dry."),
        runtime=kettle,
    )

    @ws.tools.tool
    def heat_kettle(degrees: int) -> str:
        """Heat the kettle to a temperature."""
        kettle.temp = degrees
        return f"heated to {degrees}"

    captured: list[tuple[list[dict], list[dict]]] = []

    def brain(messages, tools):
        captured.append((messages, tools))
        if len(captured) == 1:
            return turn(
                thoughts(
                    thinking="Plan then heat.",
                    evaluation_previous_goal="Nothing done yet.",
                    memory="The kettle starts cold.",
                    next_goal="Heat the kettle to 80.",
                ),
                call("todo", action="add", steps=[{"description": "heat water", "priority": "high"}]),
                call("heat_kettle", degrees=80),
            )
        return call("done", success=True, text="tea water ready")

    script = ScriptedModel(brain)
    agent = ws.agent("cook", model=script.name, tools=["heat_kettle"], envs=["kitchen"], todo=True, max_steps=2)
    result = agent.run_sync("Make tea water", files=["/data/recipe.txt"])
    assert result.success

    (m1, tools1), (m2, _) = captured
    assert [m["role"] for m in m1] == ["system", "user"]
    u1, u2 = user_text(m1), user_text(m2)
    for tag in (
        "agent_state",
        "step_info",
        "task",
        "agent_history",
        "todo_contents",
        "environment_state",
        "tool_state",
    ):
        assert f"<{tag}>" in u1 and f"</{tag}>" in u1
    assert section(u1, "step_info") == "Step 1 of 2 max possible steps"
    assert "FINAL" not in u1
    assert section(u1, "task") == "Make tea water\nAttached files (absolute paths): /data/recipe.txt"
    assert section(u1, "agent_history").strip() == "(no steps yet)"
    assert section(u1, "todo_contents") == "(empty)"
    assert '<environment name="kitchen"><state>kettle at 20C</state></environment>' in u1
    assert section(u1, "available_actions") == "(offered as callable tools)"
    assert {t["function"]["name"] for t in tools1} == {"heat_kettle", "todo", "done"}
    system = system_text(m1)
    assert '<environment name="kitchen"><interaction>Never boil it dry.</interaction></environment>' in system
    assert "Use at most 3 actions per step" in system

    # step 2: the last allowed step, with step 1 in the history, the plan and the new environment state
    assert section(u2, "step_info").startswith("Step 2 of 2 max possible steps")
    assert "This is the FINAL allowed step" in section(u2, "step_info")
    history = section(u2, "agent_history")
    assert "<step_1>" in history and "</step_1>" in history
    assert "Evaluation of Previous Step: Nothing done yet." in history
    assert "Memory: The kettle starts cold." in history
    assert "Next Goal: Heat the kettle to 80." in history
    assert "Action Results:" in history
    assert '[heat_kettle] {"degrees": 80} -> heated to 80' in history
    assert "[todo]" in history
    assert "- [ ] 1. heat water (priority: high)" in section(u2, "todo_contents")
    assert "<state>kettle at 80C</state>" in section(u2, "environment_state")


def test_prompt_assembly_json_mode_lists_actions_as_json_lines(ws, adder):
    captured: list[list[dict]] = []

    def brain(messages, tools):
        captured.append(messages)
        return json.dumps({"thinking": "done", "action": [{"name": "done", "args": {"success": True, "text": "ok"}}]})

    script = ScriptedModel(brain)
    result = ws.agent("j", model=script.name, tools=["add_numbers"], tool_mode="json", max_steps=1).run_sync("x")
    assert result.success
    user, system = user_text(captured[0]), system_text(captured[0])
    assert "This is the FINAL allowed step" in section(user, "step_info")  # max_steps=1: step 1 is the last
    lines = section(user, "available_actions").strip().splitlines()
    listed = [json.loads(line) for line in lines]
    assert [a["name"] for a in listed] == ["add_numbers", "done"]
    adder_spec = listed[0]
    assert adder_spec["description"] == "Add two integers and return the sum."
    assert set(adder_spec["parameters"]["required"]) == {"a", "b"}
    assert set(listed[1]["parameters"]["required"]) == {"success", "text"}
    assert "Respond with ONLY this JSON object" in system
    assert "(offered as callable tools)" not in user


# -- rules ----------------------------------------------------------------------------------
def test_at_most_max_actions_run_in_order(ws):
    order: list[int] = []

    @ws.tools.tool
    def mark(n: int) -> str:
        """Mark a number."""
        order.append(n)
        return f"marked {n}"

    script = ScriptedModel(
        [
            [call("mark", n=1), call("mark", n=2), call("mark", n=3)],
            call("done", success=True, text="ok"),
        ]
    )
    result = ws.agent("m", model=script.name, tools=["mark"], max_actions=2).run_sync("mark things")
    assert result.success
    assert order == [1, 2]
    assert [a["name"] for a in result.trajectory.steps[0].actions] == ["mark", "mark"]
    history = section(user_text(script.calls[1]), "agent_history")
    assert "marked 1" in history and "marked 2" in history and "marked 3" not in history


def test_done_mixed_with_other_actions_is_an_error_then_the_run_continues(ws, adder):
    script = ScriptedModel(
        [
            [call("add_numbers", a=1, b=1), call("done", success=True, text="too early")],
            call("done", success=True, text="2"),
        ]
    )
    result = ws.agent("d", model=script.name, tools=["add_numbers"]).run_sync("1+1")
    assert result.success and result.answer == "2" and result.steps == 2
    assert adder == []  # the mixed step ran nothing
    nxt = user_text(script.calls[1])
    assert "Error: 'done' must be the only action in its step" in nxt
    assert result.trajectory.steps[0].errors == ["'done' must be the only action in its step"]


def test_done_without_success_is_an_error_observation(ws):
    script = ScriptedModel([call("done", text="forgot success"), call("done", success=False, text="gave up")])
    result = ws.agent("d", model=script.name, tools=[]).run_sync("try")
    assert result.status == "failed" and not result.success and result.answer == "gave up"
    assert "Error: done needs 'success' (true or false)" in section(user_text(script.calls[1]), "agent_history")


def test_max_steps_without_done(ws, adder):
    script = ScriptedModel([call("add_numbers", a=i, b=i) for i in range(3)])
    result = ws.agent("busy", model=script.name, tools=["add_numbers"], max_steps=3).run_sync("keep adding")
    assert result.status == "max_steps"
    assert result.success is False
    assert result.steps == 3
    assert "step limit" in result.answer
    assert len(adder) == 3
    assert ws.runs()[0]["status"] == "max_steps"


@pytest.mark.parametrize(
    "bad_turn, json_mode, expected",
    [
        (call("no_such_tool", q="x"), False, "unknown action(s) no_such_tool; available: add_numbers, done"),
        (call("add_numbers", a="one", b=2), False, "Error (ValidationError): argument 'a'"),
        (
            {"content": None, "tool_calls": [{"name": "add_numbers", "arguments": "{not json"}]},
            False,
            "Error: arguments of add_numbers are not a JSON object",
        ),
        ("I will just think about it.", False, "the action list is empty"),
        ('{"thinking": "hmm", "action": []}', True, "the action list is empty"),
        ("this is not json at all", True, "the reply is not valid JSON"),
    ],
    ids=["unknown-tool", "schema", "args-not-json", "empty-native", "empty-json", "invalid-json"],
)
def test_invalid_outputs_are_observations_in_the_next_prompt(ws, adder, bad_turn, json_mode, expected):
    final = (
        json.dumps({"action": [{"name": "done", "args": {"success": True, "text": "recovered"}}]})
        if json_mode
        else call("done", success=True, text="recovered")
    )
    script = ScriptedModel([bad_turn, final])
    agent = ws.agent("e", model=script.name, tools=["add_numbers"], tool_mode="json" if json_mode else "native")
    result = agent.run_sync("add things")
    assert result.success and result.answer == "recovered"
    assert adder == []
    assert "(no steps yet)" in user_text(script.calls[0])
    assert expected in section(user_text(script.calls[1]), "agent_history")


def test_consecutive_invalid_steps_end_the_run_with_a_readable_error(ws, adder):
    script = ScriptedModel([call("nope"), call("add_numbers", a="x", b=1), call("nope")] + [call("nope")] * 5)
    agent = ws.agent("e", model=script.name, tools=["add_numbers"], max_consecutive_errors=3)
    with pytest.raises(RunFailed, match="ended in error: 3 consecutive malformed model outputs") as failed:
        agent.run_sync("add")
    result = failed.value.result  # nothing lost: the stored run's result rides on the exception
    assert result.status == "error" and not result.success
    assert result.steps == 3
    assert result.error.startswith("3 consecutive malformed model outputs; last: unknown action(s) nope")
    assert result.answer == result.error
    assert ws.runs()[0]["status"] == "error"
    errors = [e for e in ws.events.events(result.run_id) if e.type == "error"]
    assert [e.data["consecutive"] for e in errors] == [1, 3]

    schema_only = ScriptedModel([call("add_numbers", a="x", b=1)] * 5)
    agent = ws.agent("e", model=schema_only.name, tools=["add_numbers"], max_consecutive_errors=2)
    result = agent.run_sync("add", raise_on_error=False)
    assert result.status == "error" and result.steps == 2
    assert result.error == "2 consecutive steps whose every action was invalid"


def test_a_valid_step_resets_the_error_counter(ws, adder):
    script = ScriptedModel(
        [
            call("nope"),
            call("nope"),
            call("add_numbers", a=1, b=2),
            call("nope"),
            call("nope"),
            call("done", success=True, text="3"),
        ]
    )
    result = ws.agent("e", model=script.name, tools=["add_numbers"], max_consecutive_errors=3).run_sync("add")
    assert result.status == "success" and result.steps == 6
    assert adder == [(1, 2)]
    errors = [e.data["consecutive"] for e in ws.events.events(result.run_id) if e.type == "error"]
    assert errors == [1, 2, 1, 2]


def test_repeated_bad_done_counts_towards_max_consecutive_errors(ws):
    script = ScriptedModel([call("done", text="no success field")] * 6)
    agent = ws.agent("d", model=script.name, tools=[], max_consecutive_errors=2, max_steps=6)
    result = agent.run_sync("t", raise_on_error=False)
    assert result.status == "error"
    assert result.steps == 2


def test_tool_exceptions_and_timeouts_are_observations(ws):
    @ws.tools.tool
    def fragile(x: int) -> str:
        """Always raises."""
        raise ValueError(f"cannot handle {x}")

    @ws.tools.tool
    def sleepy(seconds: float) -> str:
        """Sleeps."""
        time.sleep(seconds)
        return "woke up"

    script = ScriptedModel(
        [
            call("fragile", x=7),
            call("sleepy", seconds=1.5),
            call("fragile", x=8),
            call("done", success=True, text="survived"),
        ]
    )
    agent = ws.agent("t", model=script.name, tools=["fragile", "sleepy"], tool_timeout=0.2, max_consecutive_errors=2)
    result = agent.run_sync("be brave")
    # the run goes on after each failure; but the last tool call failed and nothing recovered, so the
    # scripted model's success=True is not taken at its word (first-ten-minutes item 1)
    assert result.status == "failed" and result.answer == "survived"
    assert "Error (ValueError): cannot handle 7" in user_text(script.calls[1])
    assert "Error: sleepy timed out" in user_text(script.calls[2])
    results = {e.data["name"]: e.data for e in ws.events.events(result.run_id) if e.type == "tool_result"}
    assert results["sleepy"]["ok"] is False and results["sleepy"]["error_type"] == "Timeout"
    assert results["sleepy"]["latency"] < 1.0  # the run did not wait for the sleeping tool
    assert results["fragile"]["error_type"] == "ValueError"


def test_secrets_never_reach_the_event_store(ws, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_API_KEY", SECRET)

    @ws.tools.tool
    def read_config() -> str:
        """Read the service configuration."""
        return f"endpoint=https://svc.example, key={os.environ['MY_SERVICE_API_KEY']}"

    def brain(messages, tools):
        if "key=" not in user_text(messages):
            return call("read_config")
        return turn(
            thoughts(thinking=f"The key is {SECRET}.", memory=f"key {SECRET}"),
            call("done", success=True, text="found the key"),
        )

    script = ScriptedModel(brain)
    result = ws.agent("s", model=script.name, tools=["read_config"]).run_sync("Find the service key")
    assert result.success
    assert SECRET in user_text(script.calls[1])  # the model itself did see it
    con = sqlite3.connect(ws.path / "tea.db")
    try:
        rows = [d for (d,) in con.execute("SELECT data FROM events WHERE run_id=?", (result.run_id,))]
    finally:
        con.close()
    assert len(rows) >= 8
    assert not [d for d in rows if SECRET in d]
    assert any("[MY_SERVICE_API_KEY redacted]" in d for d in rows)
    step1 = result.trajectory.steps[0]
    assert "redacted" in step1.actions[0]["observation"]


def test_secrets_never_reach_the_runs_table(ws, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_API_KEY", SECRET)
    script = ScriptedModel([call("done", success=True, text=f"the key is {SECRET}")])
    result = ws.agent("s", model=script.name, tools=[]).run_sync("Find the service key")
    assert result.success
    con = sqlite3.connect(ws.path / "tea.db")
    try:
        rows = con.execute("SELECT task, answer FROM runs").fetchall()
    finally:
        con.close()
    assert not [r for r in rows if SECRET in " ".join(map(str, r))]


# -- the event stream -----------------------------------------------------------------------
def test_event_stream_of_a_simple_run(ws, adder):
    live: list = []
    statuses_seen_live: list[str] = []

    def watch(event):
        live.append(event)
        if event.type == "run_started":
            statuses_seen_live.append(ws.db.run_row(event.run_id)["status"])

    unsubscribe = ws.events.subscribe(watch)
    script = ScriptedModel([call("add_numbers", a=1, b=2), call("done", success=True, text="3")])
    result = ws.agent("ev", model=script.name, tools=["add_numbers"]).run_sync("1 + 2")
    stored = ws.events.events(result.run_id)

    assert types_of(stored) == [
        "run_started",
        "model_request",
        "model_response",
        "tool_call",
        "tool_result",
        "step",
        "model_request",
        "model_response",
        "step",
        "run_finished",
    ]
    assert [e.step for e in stored] == [None, 1, 1, 1, 1, 1, 2, 2, 2, None]
    assert {e.run_id for e in stored} == {result.run_id}
    assert len({e.id for e in stored}) == len(stored)
    assert [e.seq for e in stored] == sorted(e.seq for e in stored) and len({e.seq for e in stored}) == len(stored)
    times = [e.time for e in stored]
    assert times == sorted(times) and times[-1] - times[0] < 30
    assert all(e.parent_id is None for e in stored)
    assert stored[0].data["task"] == "1 + 2" and stored[0].data["model"] == script.name
    assert stored[-1].data["status"] == "success" and stored[-1].data["steps"] == 2
    assert stored[3].data["name"] == "add_numbers" and stored[4].data["observation"] == "3"
    assert stored[3].data["id"] == stored[4].data["id"]

    # live subscriber: same events, same order, seen while the run was still running
    assert [e.id for e in live] == [e.id for e in stored]
    assert statuses_seen_live == ["running"]

    unsubscribe()
    again = ScriptedModel([call("done", success=True, text="x")])
    ws.agent("ev", model=again.name, tools=[]).run_sync("nothing")
    assert len(live) == len(stored)

    runs = ws.runs()
    assert runs[1]["id"] == result.run_id  # newest first: the unsubscribed run, then this one
    row = runs[1]
    assert row["status"] == "success" and row["agent"] == "ev" and row["answer"] == "3"


def test_subscribe_to_one_run_only(ws):
    got: list = []
    script = ScriptedModel([call("done", success=True, text="a")])
    first = ws.agent("a", model=script.name, tools=[]).run_sync("first")
    ws.events.subscribe(got.append, run_id=first.run_id)
    second = ScriptedModel([call("done", success=True, text="b")])
    ws.agent("a", model=second.name, tools=[]).run_sync("second")
    assert got == []


def test_trajectory_rebuilt_from_events_matches_the_run(ws, adder):
    script = ScriptedModel(
        [
            turn(thoughts(next_goal="add"), call("add_numbers", a=2, b=2), call("no_such", x=1)),
            call("add_numbers", a="bad", b=1),
            call("done", success=True, text="4", files_to_display=["/tmp/out.txt"]),
        ]
    )
    result = ws.agent("tr", model=script.name, tools=["add_numbers"]).run_sync("2+2")
    assert result.files == ["/tmp/out.txt"]
    traj = ws.trajectory(result.run_id[:8])  # an id prefix is enough
    assert isinstance(traj, Trajectory)
    assert (traj.run_id, traj.agent, traj.task, traj.status, traj.answer) == (
        result.run_id,
        "tr",
        "2+2",
        "success",
        "4",
    )
    assert len(traj.steps) == 3 and traj.children == [] and traj.parent_id is None
    assert traj.steps[0].errors and "unknown action(s) no_such" in traj.steps[0].errors[0]
    assert traj.steps[0].next_goal == "add"
    assert traj.steps[1].actions[0]["ok"] is False
    assert traj.steps[1].actions[0]["error_type"] == "ValidationError"
    assert traj.prompt_tokens == result.prompt_tokens > 0
    assert traj.completion_tokens == result.completion_tokens > 0
    text = traj.text()
    assert f"run {result.run_id}" in text and "answer: 4" in text and "add_numbers(a='bad', b=1)" in text


# -- the tea command ------------------------------------------------------------------------
@pytest.mark.slow
def test_tea_run_runs_and_show(tmp_path):
    good = tmp_path / "good"
    w = tea_notebook.Workspace(good, embedder="hashing")
    w.tools.register(shout)
    w.close()
    out = tea("run", "Shout something", "--model", "tea/test", "--json", "-w", str(good), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["status"] == "success" and data["success"] is True
    assert data["steps"] == 2 and data["model"] == "tea/test"
    run_id = data["run_id"]

    listed = tea("runs", "-w", str(good), cwd=tmp_path)
    assert listed.returncode == 0
    assert run_id in listed.stdout and "success" in listed.stdout and "Shout something" in listed.stdout
    shown = tea("show", run_id, "-w", str(good), cwd=tmp_path)
    assert shown.returncode == 0
    assert f"run {run_id}" in shown.stdout and "shout(text='example text') -> EXAMPLE TEXT" in shown.stdout

    bad = tmp_path / "bad"
    w = tea_notebook.Workspace(bad, embedder="hashing")
    w.tools.register(broken_tool)
    w.close()
    out = tea("run", "Use the tool", "--model", "tea/test", "--max-steps", "1", "--json", "-w", str(bad), cwd=tmp_path)
    assert out.returncode != 0
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["status"] == "max_steps" and data["success"] is False
    shown = tea("show", data["run_id"], "-w", str(bad), cwd=tmp_path)
    assert "broken on purpose" in shown.stdout


# -- memory folding -------------------------------------------------------------------------
PAGE = "tea leaves were traded along the old routes " * 40


def _reader(ws, steps: int, memory_text):
    @ws.tools.tool
    def read_page(page: int) -> str:
        """Read one page of the tea history archive."""
        return f"page {page}: {PAGE}"

    def brain(messages, tools):
        n = len(script.calls)
        if n > steps:
            return call("done", success=True, text="read it all")
        return turn(thoughts(memory=memory_text(n), next_goal=f"read page {n + 1}"), call("read_page", page=n))

    script = ScriptedModel(brain)
    return script


def test_memory_folding_keeps_the_prompt_bounded_and_is_recalled_later(ws):
    task = "Read the tea history archive page by page"
    script = _reader(ws, 30, lambda n: f"read page {n}")
    agent = ws.agent(
        "reader", model=script.name, tools=["read_page"], memory_budget=400, keep_recent_steps=2, max_steps=40
    )
    result = agent.run_sync(task)
    assert result.status == "success"
    events = ws.events.events(result.run_id)
    chars = {e.step: e.data["prompt_chars"] for e in events if e.type == "model_request"}
    per_step = len(PAGE) // 2  # what an unfolded step would add (its result is cut to 600 characters)
    assert chars[30] - chars[10] < per_step  # 20 more steps, far less than one unfolded step's growth
    assert chars[30] < 1.2 * chars[10]
    written = [e for e in events if e.type == "memory_written"]
    assert len(written) >= 20
    assert written[0].data["folded_steps"] == [1] and "step 1: read page 1" in written[0].data["summary"]

    last_prompt = user_text(script.calls[29])
    history = section(last_prompt, "agent_history")
    assert "step 27: read page 27" in section(history, "summaries")  # the newest fold
    assert "<step_1>" not in history and "<step_29>" in history  # only recent steps stay verbatim

    stored = ws.memory.list()
    assert len(stored) >= 20
    assert all(r.run_id == result.run_id and r.task == task and r.kind == "summary" for r in stored)
    summaries = {e.data["summary"] for e in written}
    assert all(r.description in summaries for r in stored)

    later = ScriptedModel([call("done", success=True, text="ok")])
    ws.agent("reader2", model=later.name, tools=["read_page"]).run_sync(task)
    insights = section(section(user_text(later.calls[0]), "agent_history"), "insights")
    assert "(earlier run) step" in insights and "read page" in insights


def test_step_count_survives_memory_folding(ws):
    script = _reader(ws, 12, lambda n: f"read page {n}")
    agent = ws.agent("r", model=script.name, tools=["read_page"], memory_budget=300, keep_recent_steps=2)
    result = agent.run_sync("Read the archive")
    assert any(e.type == "memory_written" for e in ws.events.events(result.run_id))
    assert len(result.trajectory.steps) == 13
    assert result.steps == 13
    finished = ws.events.events(result.run_id)[-1]
    assert finished.type == "run_finished" and finished.data["steps"] == 13


def test_prompt_stays_bounded_over_a_long_run(ws):
    memory = lambda n: f"Read page {n} of the archive; it lists tea shipments, prices and ports of that year."  # noqa: E731
    script = _reader(ws, 60, memory)
    agent = ws.agent("r", model=script.name, tools=["read_page"], memory_budget=400, keep_recent_steps=2, max_steps=70)
    result = agent.run_sync("Read the archive")
    chars = {e.step: e.data["prompt_chars"] for e in ws.events.events(result.run_id) if e.type == "model_request"}
    assert chars[60] < 1.25 * chars[30]
    summaries = section(section(user_text(script.calls[59]), "agent_history"), "summaries")
    assert len(summaries) <= 4 * 400  # the folded history stays within the memory budget
    assert "page 57" in summaries  # and keeps the newest fold


# -- cancellation ---------------------------------------------------------------------------
def _napper(ws, seconds: float):
    @ws.tools.tool
    def nap(minutes: int) -> str:
        """Take a nap."""
        time.sleep(seconds)
        return "rested"


def _sleeper_napping(ws, seconds: float):
    """An agent whose first action is a nap of ``seconds``, and an event set once that tool call starts."""
    _napper(ws, seconds)
    script = ScriptedModel([call("nap", minutes=1), call("done", success=True, text="never")])
    agent = ws.agent("sleeper", model=script.name, tools=["nap"])
    tool_started = threading.Event()
    ws.events.subscribe(lambda e: tool_started.set() if e.type == "tool_call" else None)
    return agent, tool_started


def test_cancel_from_another_thread_interrupts_the_run(ws):
    _napper(ws, 3.0)
    ctx = ws.context()
    tool_started = threading.Event()
    ws.events.subscribe(lambda e: tool_started.set() if e.type == "tool_call" else None)
    script = ScriptedModel([call("nap", minutes=1), call("done", success=True, text="never")])
    agent = ws.agent("sleeper", model=script.name, tools=["nap"])
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(result=agent.run_sync("nap please", context=ctx)))
    worker.start()
    assert tool_started.wait(20)
    t0 = time.monotonic()
    ctx.cancel.set()
    worker.join(5)
    assert not worker.is_alive()
    assert time.monotonic() - t0 < 2.0
    result = box["result"]
    assert result.status == "interrupted" and result.error == "stopped by the user"
    stored = ws.events.events(result.run_id)
    # the trajectory says which tool the stop cut short, and that it is still running (it sleeps on)
    assert types_of(stored) == [
        "run_started",
        "model_request",
        "model_response",
        "tool_call",
        "tool_result",
        "error",
        "run_finished",
    ]
    assert stored[4].data["error_type"] == "Interrupted" and stored[5].data["still_running"] == ["nap"]
    assert stored[-1].data["status"] == "interrupted"
    assert ws.db.run_row(result.run_id)["status"] == "interrupted"

    after = ScriptedModel([call("done", success=True, text="fine")])
    again = ws.agent("after", model=after.name, tools=[]).run_sync("still working?")
    assert again.success and ws.runs()[0]["status"] == "success"


def test_asyncio_cancellation_stores_an_interrupted_run(ws):
    agent, tool_started = _sleeper_napping(ws, 1.0)

    async def main() -> float:
        task = asyncio.create_task(agent.run("nap please"))
        while not tool_started.is_set():
            await asyncio.sleep(0.01)
        t0 = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - t0

    assert asyncio.run(main()) < 2.0
    row = ws.runs()[0]
    assert row["agent"] == "sleeper" and row["status"] == "interrupted"
    finished = [e for e in ws.events.events(row["id"]) if e.type == "run_finished"]
    assert len(finished) == 1 and finished[0].data["status"] == "interrupted"


def test_asyncio_cancellation_leaves_no_event_after_run_finished(ws):
    agent, tool_started = _sleeper_napping(ws, 0.5)

    async def main() -> None:
        task = asyncio.create_task(agent.run("nap please"))
        while not tool_started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(1.0)  # longer than the tool's nap

    asyncio.run(main())
    run_id = ws.runs()[0]["id"]
    deadline = time.monotonic() + 20  # a loaded machine may take longer to end the nap's thread
    while time.monotonic() < deadline and not any("late" in e.data for e in ws.events.events(run_id)):
        time.sleep(0.05)
    stored = ws.events.events(run_id)
    finished = [i for i, e in enumerate(stored) if e.type == "run_finished"]
    assert len(finished) == 1
    # after it only what the nap (a thread the cancel could not end) returned, recorded on its step (issue 28)
    after = stored[finished[0] + 1 :]
    assert [(e.type, e.step, "late" in e.data) for e in after] == [("tool_result", 1, True)]


# -- fork -----------------------------------------------------------------------------------
def test_fork_replays_steps_without_rerunning_tools(ws, worker):
    executed = worker

    original = ScriptedModel(
        [
            turn(thoughts(memory="did 1"), call("work", n=1)),
            turn(thoughts(memory="did 2"), call("work", n=2)),
            call("work", n=3),
            call("done", success=True, text="original"),
        ]
    )
    first = ws.agent("worker", model=original.name, tools=["work"]).run_sync("do the work")
    assert first.success and first.steps == 4 and executed == [1, 2, 3]

    other = ScriptedModel([call("work", n=30), call("done", success=True, text="forked")])
    forked = asyncio.run(ws.fork(first.run_id, step=2, model=other.name))

    assert forked.run_id != first.run_id
    assert forked.success and forked.answer == "forked" and forked.model == other.name
    assert executed == [1, 2, 3, 30]  # steps 1 and 2 were replayed, not re-executed
    prompt = user_text(other.calls[0])
    assert section(prompt, "step_info").startswith("Step 3 of")
    assert '[work] {"n": 2} -> result 2' in prompt and "Memory: did 2" in prompt
    traj = forked.trajectory
    assert traj.forked_from == first.run_id
    assert [(s.number, s.replayed) for s in traj.steps] == [(1, True), (2, True), (3, False), (4, False)]
    assert traj.steps[0].actions[0]["observation"] == "result 1"
    assert traj.steps[1].memory == "did 2"
    assert traj.steps[2].actions[0]["arguments"] == {"n": 30}
    row = ws.db.run_row(forked.run_id)
    assert row["forked_from"] == first.run_id and row["fork_step"] == 2
    started = ws.events.events(forked.run_id)[0]
    assert started.type == "run_started" and started.data["forked_from"] == first.run_id
    assert [e.type for e in ws.events.events(forked.run_id)].count("tool_call") == 1
    assert "forked from" in traj.text() and "(replayed)" in traj.text()

    with pytest.raises(TeaError, match="only 4 steps"):
        asyncio.run(ws.fork(first.run_id, step=5))
    with pytest.raises(TeaError, match="no run"):
        asyncio.run(ws.fork("nonexistent-run", step=1))


def _two_tool_run(ws):
    @ws.tools.tool
    def work(n: int) -> str:
        """Do one unit of work."""
        return f"result {n}"

    @ws.tools.tool
    def unrelated(n: int) -> str:
        """A tool the worker agent is not given."""
        return "unrelated"

    script = ScriptedModel([call("work", n=1), call("work", n=2), call("done", success=True, text="x")])
    agent = ws.agent("worker", model=script.name, tools=["work"], max_steps=6)
    return agent, agent.run_sync("do the work")


def _fork_prompt(ws, run_id, **kwargs):
    seen: list = []

    def brain(messages, tools):
        seen.append((user_text(messages), sorted(t["function"]["name"] for t in tools)))
        return call("done", success=True, text="forked")

    script = ScriptedModel(brain)
    forked = asyncio.run(ws.fork(run_id, step=2, model=script.name, **kwargs))
    assert forked.success
    return seen[0]


def test_fork_with_an_explicit_agent_keeps_its_configuration(ws):
    agent, first = _two_tool_run(ws)
    prompt, tools = _fork_prompt(ws, first.run_id, agent=agent)
    assert section(prompt, "step_info") == "Step 3 of 6 max possible steps"
    assert tools == ["done", "work"]


def test_fork_keeps_the_original_agents_configuration(ws):
    _, first = _two_tool_run(ws)
    prompt, tools = _fork_prompt(ws, first.run_id)
    assert section(prompt, "step_info") == "Step 3 of 6 max possible steps"
    assert tools == ["done", "work"]


# -- run_sync -------------------------------------------------------------------------------
def test_run_sync_inside_a_running_event_loop(ws, adder):
    script = ScriptedModel([call("add_numbers", a=20, b=22), call("done", success=True, text="42")])
    agent = ws.agent("nb", model=script.name, tools=["add_numbers"])

    async def notebook_cell():
        asyncio.get_running_loop()  # we are inside a loop, like a Jupyter cell
        return agent.run_sync("20 + 22")

    result = asyncio.run(notebook_cell())
    assert result.success and result.answer == "42" and adder == [(20, 22)]
