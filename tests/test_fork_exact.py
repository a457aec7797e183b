"""An unedited fork reproduces the original exactly, for every agent kind: the same answer, the same
step count and the same model calls after the fork point, each with the same prompt and completion
tokens (a scripted model's tokens come from the size of what it is sent and what it answers, so equal
tokens show the prompts were the same). Every model here decides from its input alone (a function of
the messages; call ids made from the step), so a fork that loses state outside the messages (which
precondition tools succeeded, a toolkit's state, a CORAL member's pending messages and own steps,
ToolSelf's stage) asks different questions and fails these tests.

Also: the transformations that yield something an agent can run, each run by an agent, and the agent
an E2A or T2A card describes rebuilt in a fresh workspace (a new kernel)."""

from __future__ import annotations

import inspect
import json
import re
from typing import Any, Callable

import pytest

import tea_notebook
from tea_notebook import ActionSpec, EnvironmentRecord
from tea_notebook._sync import run_sync
from tea_notebook.models.offline import ScriptedModel, history_calls
from tea_notebook.protocol import transformations as tx
from tea_notebook.protocol.context import ToolContext
from tea_notebook.protocol.reserved import A2A_ACTIONS
from tea_notebook.runtime.forking import ForkError, turn_ends

pytestmark = pytest.mark.usefixtures("warm_litellm")

RESULT = re.compile(r"^\[([^\]]+)\] .* -> (.*)$", re.M)


# -- deterministic models and what a run asked ---------------------------------------------------------
def turn(step: Any, *calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A reply making ``calls`` (``(name, arguments)``) with ids made from ``step``: the same input
    gives the same reply, to the character."""
    return {
        "content": None,
        "tool_calls": [{"id": f"c{step}_{i}", "name": n, "arguments": a} for i, (n, a) in enumerate(calls)],
    }


def results(messages: list[dict]) -> list[tuple[str, str]]:
    """``(tool, observation)`` of the actions the prompt's history shows."""
    return RESULT.findall(str(messages[-1]["content"]))


Call = tuple[str, int | None, str, int, int]


def calls_of(ws, run_id: str, after: Callable[[Any], bool] | None = None, nested: bool = True) -> list[Call]:
    """``(agent, step, engine stage, prompt tokens, completion tokens)`` of the model calls of a run (and
    its sub-runs when ``nested``), sorted; with ``after``, only those asked after the first event it accepts."""
    events = ws.events.events(run_id, nested=nested)
    agents = {rid: ws.db.run_row(rid)["agent"] for rid in {e.run_id for e in events}}
    start = next((i for i, e in enumerate(events) if after(e)), len(events)) if after else 0
    asked = {(e.run_id, e.step, e.data.get("stage")) for e in events[start:] if e.type == "model_request"}
    return sorted(
        (agents[e.run_id], e.step, e.data.get("stage") or "", e.data["prompt_tokens"], e.data["completion_tokens"])
        for e in events
        if e.type == "model_response" and (e.run_id, e.step, e.data.get("stage")) in asked
    )


def assert_exact(ws, original, fork, after: Callable[[Any], bool]) -> None:
    """The fork ended as the original did, and asked what the original asked after the fork point."""
    assert (fork.status, fork.answer, fork.steps) == (original.status, original.answer, original.steps)
    expected = calls_of(ws, original.run_id, after)
    assert expected, "the original asked nothing after the fork point: the test proves nothing"
    assert calls_of(ws, fork.run_id) == expected


def own_step_after(run_id: str, step: int) -> Callable[[Any], bool]:
    return lambda e: e.run_id == run_id and e.type == "model_request" and (e.step or 0) > step


# -- the agent loop: a toolkit with a precondition and a state --------------------------------------------
class Notes:
    """The tools guide's environment: pages to open, then read."""

    pages = {"intro": ["TEA stands for Tool, Environment, Agent.", "Every run writes events."]}

    def open(self, page: str) -> str:
        self.page = self.pages[page]
        return f"opened {page}: {len(self.page)} lines"

    def read(self, line: int) -> str:
        return self.page[line]


def notes_environment(ws) -> None:
    ws.envs.register(
        EnvironmentRecord(
            name="notes",
            description="Text pages to open and read.",
            rules="Open a page before reading.",
            actions=[
                ActionSpec(
                    name="open",
                    description="Open a page.",
                    parameters={"type": "object", "properties": {"page": {"type": "string"}}},
                ),
                ActionSpec(
                    name="read",
                    description="Read a line.",
                    preconditions=["open"],
                    parameters={"type": "object", "properties": {"line": {"type": "integer"}}},
                ),
            ],
        ),
        runtime=Notes(),
    )


@pytest.fixture
def notes_kit(ws) -> None:
    """``notes_open`` / ``notes_read`` (E2T of the guide's environment; reading needs a page opened) and
    ``notes_count``, a tool of the same toolkit that counts its calls in the toolkit's state."""
    notes_environment(ws)
    tx.e2t(ws, "notes")

    @ws.tools.tool(toolkit="notes")
    def notes_count(tool: ToolContext) -> str:
        """Count how often it was called in this run."""
        tool.state["n"] = tool.state.get("n", 0) + 1
        return f"count {tool.state['n']}"


def reader(offered: list[list[str]]) -> ScriptedModel:
    """Opens the page, counts, reads line 1 when ``notes_read`` is offered (counts again when not),
    counts, and answers with the last two results and the tools it was offered last."""

    def respond(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
        names = sorted(t["function"]["name"] for t in tools)
        offered.append(names)
        done = results(messages)
        n = len(done)
        if n == 0:
            return turn(n, ("notes_open", {"page": "intro"}))
        if n == 2 and "notes_read" in names:
            return turn(n, ("notes_read", {"line": 1}))
        if n < 4:
            return turn(n, ("notes_count", {}))
        return turn(n, ("done", {"success": True, "text": f"{done[-2][1]} | {done[-1][1]} | {names}"}))

    return ScriptedModel(respond)


def test_an_agent_loop_fork_at_every_step_is_exact(ws, notes_kit):
    offered: list[list[str]] = []
    agent = ws.agent("reader", model=reader(offered).name, tools=["notes_open", "notes_read", "notes_count"])
    original = agent.run_sync("Read line 1 of the intro page.")
    assert original.status == "success" and original.steps == 5
    assert original.answer.startswith("Every run writes events. | count 2 |")
    for n in range(original.steps):
        offered.clear()
        fork = run_sync(ws.fork(original.run_id, n))
        assert_exact(ws, original, fork, own_step_after(original.run_id, n))
        if n >= 1:  # the replayed notes_open still holds: notes_read is offered at the next step
            assert "notes_read" in offered[0]
    # a fork of a fork (its replayed steps carry the context they restore), and the fork's own record
    fork = run_sync(ws.fork(original.run_id, 3))
    again = run_sync(ws.fork(fork.run_id, 2))
    assert_exact(ws, original, again, own_step_after(original.run_id, 2))
    contexts = [e.data.get("context") for e in ws.events.events(fork.run_id) if e.type == "step"]
    assert contexts[0] == {"succeeded": ["notes.open", "notes_open"], "state": {}}
    assert contexts[1]["state"] == {"toolkit:notes": {"n": 1}}
    assert contexts[2]["succeeded"][-1] == "notes_read" and contexts[2]["state"] == contexts[1]["state"]
    assert contexts[3]["state"] == {"toolkit:notes": {"n": 2}}  # the fork's own step 4


def test_a_resumed_run_offers_what_its_replayed_steps_made_available(ws, notes_kit):
    """A run stopped after ``notes_open`` (its second step presses Stop): its resume offers
    ``notes_read`` at once and goes on with the toolkit's count where it was."""
    stops: list[str] = []

    @ws.tools.tool
    def press_stop(tool: ToolContext) -> str:
        """Stop the run, as the Stop button does (once)."""
        if not stops:
            stops.append("stopped")
            tool.context.cancel.set()
        return "pressed"

    seen: list[list[str]] = []

    def respond(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
        names = sorted(t["function"]["name"] for t in tools)
        seen.append(names)
        done = results(messages)
        plan = [("notes_open", {"page": "intro"}), ("notes_count", {}), ("press_stop", {})]
        if len(done) < len(plan):
            return turn(len(done), plan[len(done)])
        if len(done) == len(plan):
            return turn(len(done), ("notes_read", {"line": 1}) if "notes_read" in names else ("notes_count", {}))
        if len(done) == len(plan) + 1:
            return turn(len(done), ("notes_count", {}))
        return turn(len(done), ("done", {"success": True, "text": f"{done[-2][1]} | {done[-1][1]}"}))

    tools = ["notes_open", "notes_read", "notes_count", "press_stop"]
    stopped = ws.agent("reader", model=ScriptedModel(respond).name, tools=tools).run_sync("Read.")
    assert stopped.status == "interrupted" and stops == ["stopped"]
    seen.clear()
    resumed = run_sync(ws.resume(stopped.run_id))
    assert "notes_read" in seen[0]
    assert resumed.status == "success" and resumed.answer == "Every run writes events. | count 2"


# -- a planner with sub-agents ------------------------------------------------------------------------
def measurer(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
    """A sub-agent: measures twice (what it measures depends on its prompt), then reports."""
    done = results(messages)
    if len(done) < 2:
        return turn(len(done), ("measure", {"x": len(done) + len(str(messages[-1]["content"])) % 3}))
    return turn(len(done), ("done", {"success": True, "text": ", ".join(r for _, r in done)}))


def leader(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
    """The planner: a plan, two sub-agents at once, one of them again, the plan completed, done."""
    done = results(messages)
    n = len(done)
    if n == 0:
        return turn(n, ("todo", {"action": "add", "steps": [{"description": "measure"}]}))
    if n == 1:
        return turn(n, ("helper_agent", {"task": "first"}), ("other_agent", {"task": "second"}))
    if n == 3:
        return turn(n, ("helper_agent", {"task": "again"}))
    if n == 4:
        return turn(n, ("todo", {"action": "complete", "step_id": 1, "status": "success", "result": "ok"}))
    return turn(n, ("done", {"success": True, "text": "; ".join(r[:60] for _, r in done)}))


@pytest.fixture
def planner(ws):
    @ws.tools.tool
    def measure(x: int) -> str:
        """Measure something."""
        return f"m{x * 3}"

    sub = ScriptedModel(measurer)
    ws.agent("helper", model=sub.name, tools=["measure"], description="Measures.")
    ws.agent("other", model=sub.name, tools=["measure"], description="Measures too.")
    return ws.planner(["helper", "other"], model=ScriptedModel(leader).name)


def test_a_planner_fork_at_every_step_and_of_every_sub_agent_step_is_exact(ws, planner):
    original = planner.run_sync("Measure twice.")
    assert original.status == "success" and original.steps == 5
    for n in range(original.steps):
        fork = run_sync(ws.fork(original.run_id, n))
        assert_exact(ws, original, fork, own_step_after(original.run_id, n))
    subs = ws.db.runs(100, parent_id=original.run_id)
    assert sorted(r["agent"] for r in subs) == ["helper", "helper", "other"]
    for sub in subs:
        at = dispatch_step(ws, original.run_id, sub)
        for k in range(3):
            fork = run_sync(ws.fork(sub["id"], k))
            assert (fork.status, fork.answer, fork.steps) == (original.status, original.answer, original.steps)
            # what the sub-agent asked after its step k (its sibling of that step is replayed, not asked
            # again), what the planner asked after the step that called it, and the sub-runs started later
            expected = calls_of(ws, sub["id"], own_step_after(sub["id"], k))
            expected += calls_of(ws, original.run_id, own_step_after(original.run_id, at), nested=False)
            for later in subs:
                if dispatch_step(ws, original.run_id, later) > at:
                    expected += calls_of(ws, later["id"])
            assert calls_of(ws, fork.run_id) == sorted(expected)


def dispatch_step(ws, root: str, sub: dict) -> int:
    """The planner's step whose call started the sub-run ``sub``."""
    calls = [
        e
        for e in ws.events.events(root, nested=False)
        if e.type == "tool_call" and e.data["name"] == f"{sub['agent']}_agent" and e.time <= sub["started"] + 1e-6
    ]
    return calls[-1].step


# -- ToolSelf -------------------------------------------------------------------------------------------
def toolself_model(messages: list[dict], tools: list[dict]) -> Any:
    """The engine: a configuration from the history it is shown. The agent: at every stage opens the kit
    (its count grows across stages in the toolkit's state), measures, then reconfigures (stages 1, 2)
    or finishes (stage 3)."""
    text = str(messages[-1]["content"])
    if "Agent Configuration Engineer" in str(messages[0]["content"]):
        k = len(re.findall(r"summary", text, re.I))
        toolbox = ["measure", "kit_open"]
        return json.dumps(
            {"next_sub_goal": f"goal {k}", "execution_strategy": "go", "toolbox": toolbox, "inter_agent_knowledge": ""}
        )
    done = results(messages)
    at = re.search(r"Stage (\d+); step (\d+)", text)
    stage, step = int(at[1]), int(at[2])
    if step == 1:
        return turn(f"{stage}_{step}", ("kit_open", {}))
    if step == 2:
        return turn(f"{stage}_{step}", ("measure", {"x": stage + len(done)}))
    if stage < 3:
        summary = f"stage {stage}: " + ", ".join(r for _, r in done)
        reconfigure = {
            "execution_summary": summary,
            "update_content": "sub_goal",
            "update_reason": "next",
            "new_sub_goal": f"goal {stage + 1}",
        }
        return turn(f"{stage}_{step}", ("reconfigure", reconfigure))
    summary_of = {"detailed_execution": ["opened", "measured"], "tools_used": ["kit_open", "measure"]}
    finish = {
        "task_completion_status": "complete",
        "final_result": " | ".join(r for _, r in done),
        "execution_summary": summary_of,
    }
    return turn(f"{stage}_{step}", ("finish", finish))


def test_a_toolself_fork_at_every_stage_is_exact(ws):
    @ws.tools.tool(toolkit="kit")
    def kit_open(tool: ToolContext) -> str:
        """Open the kit (counted in the toolkit's state)."""
        tool.state["opened"] = tool.state.get("opened", 0) + 1
        return f"opened {tool.state['opened']}"

    @ws.tools.tool
    def measure(x: int) -> str:
        """Measure something."""
        return f"m{x * 3}"

    agent = ws.toolself("ts", model=ScriptedModel(toolself_model).name, tools=["measure", "kit_open"])
    original = agent.run_sync("Measure in three stages.")
    assert original.status == "success" and original.answer == "opened 3 | m12" and original.steps == 9
    stages = [e.data for e in ws.events.events(original.run_id) if e.type == "stage"]
    assert [s["first_step"] for s in stages] == [1, 4, 7]
    for stage in stages:
        fork = run_sync(ws.fork(original.run_id, stage=stage["index"]))
        # from the stage's first step on (its configuration came from the engine before it, not asked again)
        assert_exact(ws, original, fork, agent_step_from(original.run_id, stage["first_step"]))


def agent_step_from(run_id: str, step: int) -> Callable[[Any], bool]:
    """The first request of the agent (not of the configuration engine) at ``step`` or later."""
    return lambda e: (
        e.run_id == run_id and e.type == "model_request" and (e.step or 0) >= step and not e.data.get("stage")
    )


# -- the orchestra ----------------------------------------------------------------------------------------
def test_an_orchestra_fork_at_every_step_is_exact(ws, tmp_path):
    import sitekit
    from test_orchestra import Researcher

    corpus = sitekit.corpus(tmp_path / "notes", n=30)

    def conductor(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
        history = history_calls(messages)
        called = [name for name, _, _ in history]
        n = len(history)
        if "todo" not in called:
            return turn(n, ("todo", {"action": "add", "steps": [{"description": "find the birthplace"}]}))
        if "deep_researcher_agent" not in called:
            return turn(n, ("deep_researcher_agent", {"task": ""}))
        if called.count("todo") == 1:
            return turn(n, ("todo", {"action": "complete", "step_id": 1, "status": "success", "result": "found"}))
        found = next(r for name, _, r in history if name == "deep_researcher_agent")
        return turn(n, ("done", {"success": True, "text": found[:300]}))

    orchestra = ws.orchestra(
        model=ScriptedModel(conductor).name,
        models={"researcher": Researcher().model.name},
        engines=[f"corpus:{corpus}"],
        researcher={"max_rounds": 3, "search_timeout": 10},
        tool_manager=False,
    )
    original = orchestra.run_sync("Where was the lead engineer of the Aurora project born?")
    assert original.status == "success" and "born in" in original.answer and original.steps == 4
    for n in range(original.steps):
        fork = run_sync(ws.fork(original.run_id, n))
        assert_exact(ws, original, fork, own_step_after(original.run_id, n))


# -- CORAL ---------------------------------------------------------------------------------------------------
ORC, PLANNER = "information_flow_orchestrator", "planner_agent"
LINE = re.compile(r"#(\d+) \[thread [^\]]+\] (\S+) → (.*?): (.*)")


def transcript(messages: list[dict]) -> list[tuple[str, str, str]]:
    """``(sender, mentions, content)`` of the messages the coral environment shows."""
    state = re.search(r'<environment name="coral"><state>(.*?)</state>', str(messages[-1]["content"]), re.S)
    return [(m[2], m[3], m[4]) for m in LINE.finditer(state[1] if state else "")]


def member(fn: Callable[[list[tuple[str, str, str]], list[dict]], list[tuple[str, dict]]]) -> ScriptedModel:
    """A member's model: its calls from the transcript it is shown (ids from its step)."""

    def respond(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
        step = re.search(r"Step (\d+) of", str(messages[-1]["content"]))
        return turn(step[1] if step else 0, *fn(transcript(messages), messages))

    return ScriptedModel(respond)


def send(content: str, to: str) -> tuple[str, dict]:
    return "send_message", {"content": content, "mentions": [to]}


WAIT = ("wait_for_mentions", {"timeout_ms": 5000})


def orchestrator(shown: list[tuple[str, str, str]], messages: list[dict]) -> list[tuple[str, dict]]:
    """Asks the planner, instructs w1 then w2 (one at a time), confirms with the planner, submits."""
    said = lambda who, word: any(s == who and word in c for s, _, c in shown)  # noqa: E731
    if not said(ORC, "Decompose"):
        return [send("Decompose the task.", PLANNER), WAIT]
    if said(PLANNER, "<tasks>") and not said(ORC, "capital of France"):
        return [send("Find the capital of France", "w1"), WAIT]
    if said("w1", "found") and not said(ORC, "capital of Italy"):
        return [send("Find the capital of Italy", "w2"), WAIT]
    if said("w2", "found") and not said(ORC, "Confirm"):
        answers = " ".join(c for s, _, c in shown if s in ("w1", "w2"))
        return [send(f"Confirm: {answers}", PLANNER), WAIT]
    if said(PLANNER, "Confirmed"):
        return [("submit_answer", {"answer": " / ".join(c for s, _, c in shown if s in ("w1", "w2"))})]
    return [WAIT]


def planner_member(shown: list[tuple[str, str, str]], messages: list[dict]) -> list[tuple[str, dict]]:
    asked = [c for s, m, c in shown if s == ORC and PLANNER in m]
    answered = [c for s, _, c in shown if s == PLANNER]
    if len(asked) > len(answered):
        if asked[-1].startswith("Confirm"):
            return [send("Confirmed.", ORC), WAIT]
        return [send("<tasks><task>France</task><task>Italy</task></tasks>", ORC), WAIT]
    return [WAIT]


def worker(name: str) -> Callable[..., list[tuple[str, dict]]]:
    """Hands an unanswered instruction to its sub-agent ``geo``, then reports what it found."""

    def fn(shown: list[tuple[str, str, str]], messages: list[dict]) -> list[tuple[str, dict]]:
        asked = [c for s, m, c in shown if s == ORC and name in m]
        answered = [c for s, _, c in shown if s == name]
        if len(asked) > len(answered):
            found = [r for t, r in results(messages) if t == "geo_agent"]
            if not found:
                return [("geo_agent", {"task": asked[-1]})]
            return [send(f"{name} found: {found[-1][:80]}", ORC), WAIT]
        return [WAIT]

    return fn


def geo(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
    """The workers' sub-agent: looks the country of its instruction up, answers."""
    done = results(messages)
    if not done:
        country = re.search(r"capital of (\w+)", str(messages[-1]["content"]))[1]
        return turn(0, ("capital", {"country": country}))
    return turn(1, ("done", {"success": True, "text": done[-1][1]}))


@pytest.fixture
def coral_team(ws):
    @ws.tools.tool
    def capital(country: str) -> str:
        """The capital of a country."""
        return {"France": "Paris", "Italy": "Rome"}.get(country, "unknown")

    ws.agent("geo", tools=["capital"], model=ScriptedModel(geo).name, description="Finds capitals.")
    workers = {w: {"agents": ["geo"], "model": member(worker(w)).name} for w in ("w1", "w2")}
    models = {"orchestrator": member(orchestrator).name, "planner": member(planner_member).name}
    return ws.coral("team", workers=workers, models=models, budget_seconds=1000, wait_timeout_ms=5000)


def test_a_coral_fork_at_every_offered_message_is_exact(ws, coral_team):
    original = coral_team.run_sync("What are the capitals of France and Italy?")
    assert original.status == "success" and original.answer == "w1 found: Paris / w2 found: Rome"
    sent = [(m["sender"], m["mentions"], m["content"]) for m in original.trajectory.messages]
    assert len(sent) == 8 and original.steps == 8
    inside = turn_ends(ws.events.events(original.run_id))
    offered = [k for k in range(len(sent) + 1) if k not in inside]
    assert offered == list(range(9))  # one message per turn here: every message is a fork point
    cut = {e.data["seq"]: e.seq for e in ws.events.events(original.run_id, nested=False) if e.type == "message"}
    for k in offered:
        fork = run_sync(ws.fork(original.run_id, k))
        assert [(m["sender"], m["mentions"], m["content"]) for m in fork.trajectory.messages] == sent
        assert_exact(ws, original, fork, after_event(cut.get(k, 0)))
        # each member went on from where it was: no step it had finished is taken again
        for row in ws.db.runs(100, parent_id=fork.run_id):
            started = next(e.data for e in ws.events.events(row["id"], nested=False) if e.type == "run_started")
            assert (started.get("forked_from") is not None) == (k > 0), row["agent"]
    # a fork of a fork, at a message it replayed and at one it sent itself
    fork = run_sync(ws.fork(original.run_id, 4))
    for k in (2, 6):
        again = run_sync(ws.fork(fork.run_id, k))
        assert [(m["sender"], m["mentions"], m["content"]) for m in again.trajectory.messages] == sent
        assert_exact(ws, original, again, after_event(cut[k]))


def after_event(seq: int) -> Callable[[Any], bool]:
    return lambda e: e.seq > seq


def test_a_coral_fork_while_a_worker_s_sub_agent_is_mid_call_continues_that_run(ws):
    """Messages 2 and 3 are posted while w1's sub-agent waits for a slow tool (1.5 s; the orchestrator
    pauses 0.3 s before message 2): a fork there continues the sub-agent's run (its model is not asked
    again; the call in flight runs again), exactly."""

    @ws.tools.tool
    async def slow_capital(country: str) -> str:
        """The capital of a country, slowly."""
        import asyncio

        await asyncio.sleep(1.5)
        return {"France": "Paris", "Italy": "Rome"}.get(country, "unknown")

    def geo_slow(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
        done = results(messages)
        if not done:
            return turn(0, ("slow_capital", {"country": re.search(r"capital of (\w+)", messages[-1]["content"])[1]}))
        return turn(1, ("done", {"success": True, "text": done[-1][1]}))

    def chatty(shown: list[tuple[str, str, str]], messages: list[dict]) -> list[tuple[str, dict]]:
        said = lambda who, word: any(s == who and word in c for s, _, c in shown)  # noqa: E731
        if not said(ORC, "capital of France"):  # then a pause: w1's sub-agent is in its slow call after it
            return [send("Find the capital of France", "w1"), ("wait_for_mentions", {"timeout_ms": 300})]
        if not said(ORC, "Note"):
            return [send("Note: w1 is looking France up.", PLANNER), WAIT]
        if said("w1", "found") and not said(ORC, "Confirm"):
            return [send("Confirm: " + " ".join(c for s, _, c in shown if s == "w1"), PLANNER), WAIT]
        if said(PLANNER, "Confirmed"):
            return [("submit_answer", {"answer": next(c for s, _, c in shown if s == "w1")})]
        return [WAIT]

    def noting(shown: list[tuple[str, str, str]], messages: list[dict]) -> list[tuple[str, dict]]:
        asked = [c for s, m, c in shown if s == ORC and PLANNER in m]
        answered = [c for s, _, c in shown if s == PLANNER]
        if len(asked) > len(answered):
            return [send("Confirmed." if asked[-1].startswith("Confirm") else "Noted.", ORC), WAIT]
        return [WAIT]

    ws.agent("geo", tools=["slow_capital"], model=ScriptedModel(geo_slow).name, description="Finds capitals.")
    team = ws.coral(
        "slow_team",
        workers={"w1": {"agents": ["geo"], "model": member(worker("w1")).name}},
        models={"orchestrator": member(chatty).name, "planner": member(noting).name},
        budget_seconds=1000,
        wait_timeout_ms=5000,
    )
    original = team.run_sync("What is the capital of France?")
    assert original.status == "success" and original.answer == "w1 found: Paris"
    sent = [(m["sender"], m["content"]) for m in original.trajectory.messages]
    assert [s for s, _ in sent] == [ORC, ORC, PLANNER, "w1", ORC, PLANNER]
    cut = {e.data["seq"]: e.seq for e in ws.events.events(original.run_id, nested=False) if e.type == "message"}
    for k in (2, 3):
        fork = run_sync(ws.fork(original.run_id, k))
        assert [(m["sender"], m["content"]) for m in fork.trajectory.messages] == sent
        assert_exact(ws, original, fork, after_event(cut[k]))
        w1 = next(r for r in ws.db.runs(100, parent_id=fork.run_id) if r["agent"] == "w1")
        (geo_run,) = ws.db.runs(100, parent_id=w1["id"])
        assert ws.db.run_row(geo_run["id"])["forked_from"] is not None  # the sub-agent's run went on


# -- replay="recorded": tools whose results change each call ---------------------------------------------------
def _has_replay_policy() -> bool:
    return "replay" in inspect.signature(tea_notebook.Workspace.fork).parameters


@pytest.mark.skipif(not _has_replay_policy(), reason="ws.fork(..., replay=) has not landed yet")
def test_a_recorded_fork_answers_from_the_original_and_runs_nothing(ws, tmp_path):
    ledger = tmp_path / "ledger.txt"

    @ws.tools.tool
    def tick() -> str:
        """Advance a counter kept in a file (a side effect; its result changes each call)."""
        count = len(ledger.read_text().splitlines()) + 1 if ledger.exists() else 1
        with ledger.open("a") as f:
            f.write("tick\n")
        return f"tick {count}"

    def respond(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
        done = results(messages)
        if len(done) < 3:
            return turn(len(done), ("tick", {}))
        return turn(len(done), ("done", {"success": True, "text": ", ".join(r for _, r in done)}))

    original = ws.agent("ticker", model=ScriptedModel(respond).name, tools=["tick"]).run_sync("Tick three times.")
    assert original.answer == "tick 1, tick 2, tick 3"
    for n in range(original.steps):
        fork = run_sync(ws.fork(original.run_id, n, replay="recorded"))
        assert_exact(ws, original, fork, own_step_after(original.run_id, n))
        assert len(ledger.read_text().splitlines()) == 3  # the tool never ran again
    live = run_sync(ws.fork(original.run_id, 1, replay="live"))  # steps 2 and 3 tick again
    assert live.answer == "tick 1, tick 4, tick 5" and len(ledger.read_text().splitlines()) == 5


@pytest.mark.skipif(not _has_replay_policy(), reason="ws.fork(..., replay=) has not landed yet")
def test_a_recorded_fork_of_the_toolkit_run_follows_the_original_context(ws, notes_kit):
    """With every tool answered from the recording, what the recorded ``notes_open`` set up holds in the
    fork (``notes_read`` is offered) and the toolkit's count is the original's: exact at every step."""
    agent = ws.agent("reader", model=reader([]).name, tools=["notes_open", "notes_read", "notes_count"])
    original = agent.run_sync("Read line 1 of the intro page.")
    for n in range(original.steps):
        fork = run_sync(ws.fork(original.run_id, n, replay="recorded"))
        assert_exact(ws, original, fork, own_step_after(original.run_id, n))
        replayed = [e.data for e in ws.events.events(fork.run_id) if e.type == "tool_result"]
        assert all(r.get("replayed") for r in replayed)  # no tool ran


@pytest.mark.skipif(not _has_replay_policy(), reason="ws.fork(..., replay=) has not landed yet")
def test_a_recorded_fork_of_a_planner_and_of_its_sub_agent_runs_no_tool(ws, tmp_path):
    """The sub-agents' tool counts its calls in a file. A recorded fork of the planner at any step, and
    of a sub-agent's run at any step, ends as the original did, asks what it asked, and runs no tool."""
    ledger = tmp_path / "ledger.txt"

    @ws.tools.tool
    def measure(x: int) -> str:
        """Measure something (each measurement is written down: its result changes each call)."""
        count = len(ledger.read_text().splitlines()) + 1 if ledger.exists() else 1
        with ledger.open("a") as f:
            f.write(f"{x}\n")
        return f"m{x * 3} (#{count})"

    sub = ScriptedModel(measurer)
    ws.agent("helper", model=sub.name, tools=["measure"], description="Measures.")
    ws.agent("other", model=sub.name, tools=["measure"], description="Measures too.")
    original = ws.planner(["helper", "other"], model=ScriptedModel(leader).name).run_sync("Measure twice.")
    assert original.status == "success"
    measured = ledger.read_text()
    for n in range(original.steps):
        fork = run_sync(ws.fork(original.run_id, n, replay="recorded"))
        assert (fork.status, fork.answer, fork.steps) == (original.status, original.answer, original.steps)
        # the sub-agents' answers come from the recording too: only the planner is asked
        mine = calls_of(ws, original.run_id, own_step_after(original.run_id, n), nested=False)
        assert calls_of(ws, fork.run_id) == mine
        assert ledger.read_text() == measured
    for row in ws.db.runs(100, parent_id=original.run_id):
        at = dispatch_step(ws, original.run_id, row)
        for k in range(3):
            fork = run_sync(ws.fork(row["id"], k, replay="recorded"))
            assert (fork.status, fork.answer, fork.steps) == (original.status, original.answer, original.steps)
            expected = calls_of(ws, row["id"], own_step_after(row["id"], k))
            expected += calls_of(ws, original.run_id, own_step_after(original.run_id, at), nested=False)
            assert calls_of(ws, fork.run_id) == sorted(expected)
            assert ledger.read_text() == measured
    live = run_sync(ws.fork(original.run_id, 0, replay="live"))  # the sub-agents measure again
    assert live.status == "success" and live.answer != original.answer
    assert len(ledger.read_text().splitlines()) == 2 * len(measured.splitlines())


def lines(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def nothing_written(ws) -> tuple[int, int]:
    return len(ws.db.runs(10_000)), ws.db._read("SELECT count(*) FROM events")[0][0]


@pytest.mark.skipif(not _has_replay_policy(), reason="ws.fork(..., replay=) has not landed yet")
def test_a_recorded_toolself_stage_fork_runs_no_tool_and_a_live_one_does(ws, tmp_path):
    """ToolSelf: ``measure`` numbers its calls (a file counts them). A recorded fork at every stage
    reproduces the run (answer, steps, every model call after the stage's start) and runs no tool; a
    live fork measures again. The run's controls (reconfigure, finish) may be named; they always run."""
    ledger = tmp_path / "ledger.txt"

    @ws.tools.tool(toolkit="kit")
    def kit_open(tool: ToolContext) -> str:
        """Open the kit (counted in the toolkit's state)."""
        tool.state["opened"] = tool.state.get("opened", 0) + 1
        return f"opened {tool.state['opened']}"

    @ws.tools.tool
    def measure(x: int) -> str:
        """Measure something (each measurement is written down: its result changes each call)."""
        with ledger.open("a") as f:
            f.write(f"{x}\n")
        return f"m{x * 3} #{lines(ledger)}"

    agent = ws.toolself("ts", model=ScriptedModel(toolself_model).name, tools=["measure", "kit_open"])
    original = agent.run_sync("Measure in three stages.")
    assert original.status == "success" and original.answer == "opened 3 | m12 #3" and lines(ledger) == 3
    stages = [e.data for e in ws.events.events(original.run_id) if e.type == "stage"]
    for stage in stages:
        fork = run_sync(ws.fork(original.run_id, stage=stage["index"], replay="recorded"))
        assert_exact(ws, original, fork, agent_step_from(original.run_id, stage["first_step"]))
        results = [e.data for e in ws.events.events(fork.run_id) if e.type == "tool_result"]
        assert results and all(r["replayed"] and r["policy"] == "recorded" for r in results)
        assert lines(ledger) == 3
        started = next(e.data for e in ws.events.events(fork.run_id) if e.type == "run_started")
        assert started["replay"] == {"*": "recorded"} and started["fork_stage"]["index"] == stage["index"]
    controls = {"finish": "refuse", "reconfigure": "refuse", "*": "recorded"}
    fork = run_sync(ws.fork(original.run_id, stage=2, replay=controls))
    assert_exact(ws, original, fork, agent_step_from(original.run_id, stages[1]["first_step"]))
    live = run_sync(ws.fork(original.run_id, stage=2, replay="live"))
    assert (live.status, live.steps, live.answer) == ("success", original.steps, "opened 3 | m12 #5")
    assert lines(ledger) == 5  # stages 2 and 3 measured again
    # bad input: a ForkError naming the tool, nothing written
    before = nothing_written(ws)
    with pytest.raises(ForkError, match=r"replay names 'nope'.*\(done, finish, reconfigure, todo\)"):
        run_sync(ws.fork(original.run_id, stage=2, replay={"nope": "recorded"}))
    with pytest.raises(ForkError, match="a replay policy is recorded, live or refuse, not 'maybe'"):
        run_sync(ws.fork(original.run_id, stage=2, replay="maybe"))
    assert nothing_written(ws) == before and lines(ledger) == 5


@pytest.fixture
def counting_coral_team(ws, tmp_path):
    """The CORAL team above, its workers' sub-agent looking capitals up with ``capital``, which numbers
    its calls (a file counts them): the team and the file."""
    ledger = tmp_path / "ledger.txt"

    @ws.tools.tool
    def capital(country: str) -> str:
        """The capital of a country, numbered by the lookup (each lookup is written down)."""
        with ledger.open("a") as f:
            f.write(f"{country}\n")
        found = {"France": "Paris", "Italy": "Rome"}.get(country, "unknown")
        return f"{found} (#{lines(ledger)})"

    ws.agent("geo", tools=["capital"], model=ScriptedModel(geo).name, description="Finds capitals.")
    workers = {w: {"agents": ["geo"], "model": member(worker(w)).name} for w in ("w1", "w2")}
    models = {"orchestrator": member(orchestrator).name, "planner": member(planner_member).name}
    team = ws.coral("team", workers=workers, models=models, budget_seconds=1000, wait_timeout_ms=5000)
    return team, ledger


@pytest.mark.skipif(not _has_replay_policy(), reason="ws.fork(..., replay=) has not landed yet")
def test_a_recorded_coral_fork_at_every_message_runs_no_tool_and_a_live_one_does(ws, counting_coral_team):
    """Each member's calls made again are answered from that member's own original run: the workers'
    sub-agent is not asked again and ``capital`` does not run, while the team's message tools run (they
    are its conversation), so the fork posts the original's messages and ends as it did, at every message."""
    team, ledger = counting_coral_team
    original = team.run_sync("What are the capitals of France and Italy?")
    assert original.status == "success" and original.answer == "w1 found: Paris (#1) / w2 found: Rome (#2)"
    sent = [(m["sender"], m["mentions"], m["content"]) for m in original.trajectory.messages]
    cut = {e.data["seq"]: e.seq for e in ws.events.events(original.run_id, nested=False) if e.type == "message"}
    for k in range(len(sent) + 1):
        fork = run_sync(ws.fork(original.run_id, k, replay="recorded"))
        assert [(m["sender"], m["mentions"], m["content"]) for m in fork.trajectory.messages] == sent
        assert (fork.status, fork.answer, fork.steps) == (original.status, original.answer, original.steps)
        # the members ask what they asked; the sub-agent's answers come from the recording: it is not asked
        expected = [c for c in calls_of(ws, original.run_id, after_event(cut.get(k, 0))) if c[0] != "geo"]
        assert calls_of(ws, fork.run_id) == expected, k
        assert lines(ledger) == 2
        members = ws.db.runs(100, parent_id=fork.run_id)
        assert not [r for m in members for r in ws.db.runs(100, parent_id=m["id"])]  # no sub-agent run
        for row in members:
            own = ws.events.events(row["id"], nested=False)
            assert next(e.data for e in own if e.type == "run_started")["replay"] == {"*": "recorded"}
            for e in own:
                if e.type == "tool_result" and e.data["name"] == "geo_agent":
                    assert e.data["replayed"] and e.data["policy"] == "recorded"
                elif e.type == "tool_result":  # the team's machinery: no policy applies to it
                    assert e.data["name"] in A2A_ACTIONS and "policy" not in e.data, e.data
        started = next(e.data for e in ws.events.events(fork.run_id, nested=False) if e.type == "run_started")
        assert started["replay"] == {"*": "recorded"}
    # the team's message tools may be named (they run whatever the policy says of them)
    fork = run_sync(ws.fork(original.run_id, 3, replay={"send_message": "refuse", "*": "recorded"}))
    assert [(m["sender"], m["mentions"], m["content"]) for m in fork.trajectory.messages] == sent
    assert (fork.answer, lines(ledger)) == (original.answer, 2)
    live = run_sync(ws.fork(original.run_id, 2, replay="live"))
    assert (live.status, live.answer) == ("success", "w1 found: Paris (#3) / w2 found: Rome (#4)")
    assert lines(ledger) == 4
    # bad input: a ForkError naming the tool, nothing written
    before = nothing_written(ws)
    with pytest.raises(ForkError, match=r"replay names 'nope'.*send_message"):
        run_sync(ws.fork(original.run_id, 3, replay={"nope": "recorded", "geo_agent": "live"}))
    with pytest.raises(ForkError, match="each part is TOOL=POLICY"):
        run_sync(ws.fork(original.run_id, 3, replay="capital=recorded,oops"))
    assert nothing_written(ws) == before and lines(ledger) == 4


@pytest.mark.skipif(not _has_replay_policy(), reason="ws.fork(..., replay=) has not landed yet")
def test_a_recorded_orchestra_fork_runs_no_tool_and_a_live_one_does(ws, tmp_path):
    """The orchestra is an agent loop (its planner) forked by steps: ``tick`` numbers its calls; a
    recorded fork at every step asks only what the planner asked and runs neither ``tick`` nor the
    researcher; a live one ticks and researches again."""
    import sitekit
    from test_orchestra import Researcher

    ledger = tmp_path / "ledger.txt"

    @ws.tools.tool
    def tick() -> str:
        """Advance a counter kept in a file (a side effect; its result changes each call)."""
        with ledger.open("a") as f:
            f.write("tick\n")
        return f"tick (#{lines(ledger)})"

    corpus = sitekit.corpus(tmp_path / "notes", n=30)

    def conductor(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
        history = history_calls(messages)
        called = [name for name, _, _ in history]
        n = len(history)
        if "todo" not in called:
            return turn(n, ("todo", {"action": "add", "steps": [{"description": "find the birthplace"}]}))
        if "tick" not in called:
            return turn(n, ("tick", {}))
        if "deep_researcher_agent" not in called:
            return turn(n, ("deep_researcher_agent", {"task": ""}))
        if called.count("todo") == 1:
            return turn(n, ("todo", {"action": "complete", "step_id": 1, "status": "success", "result": "found"}))
        found = next(r for name, _, r in history if name == "deep_researcher_agent")
        ticked = next(r for name, _, r in history if name == "tick")
        return turn(n, ("done", {"success": True, "text": f"{ticked}: {found[:300]}"}))

    orchestra = ws.orchestra(
        model=ScriptedModel(conductor).name,
        models={"researcher": Researcher().model.name},
        engines=[f"corpus:{corpus}"],
        researcher={"max_rounds": 3, "search_timeout": 10},
        tool_manager=False,
        tools=["tick"],
    )
    original = orchestra.run_sync("Where was the lead engineer of the Aurora project born?")
    assert original.status == "success" and original.answer.startswith("tick (#1): ") and original.steps == 5
    for n in range(original.steps):
        fork = run_sync(ws.fork(original.run_id, n, replay="recorded"))
        assert (fork.status, fork.answer, fork.steps) == (original.status, original.answer, original.steps)
        assert calls_of(ws, fork.run_id) == calls_of(ws, original.run_id, own_step_after(original.run_id, n), False)
        assert lines(ledger) == 1
    live = run_sync(ws.fork(original.run_id, 0, replay="live"))
    assert live.status == "success" and live.answer.startswith("tick (#2): ") and lines(ledger) == 2
    assert any(c[0] == "deep_researcher" for c in calls_of(ws, live.run_id))  # the researcher was asked again


# -- the transformations, each run by an agent ---------------------------------------------------------------
def opener_then_reader(prefix: str, shown: list[list[str]]) -> ScriptedModel:
    """Opens the intro page, reads line 1, answers with it (through tools named ``prefix + open/read``);
    ``shown`` gets the tools offered at each step."""

    def respond(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
        shown.append(sorted(t["function"]["name"] for t in tools))
        done = results(messages)
        if not done:
            return turn(0, (f"{prefix}open", {"page": "intro"}))
        if len(done) == 1:
            return turn(1, (f"{prefix}read", {"line": 1}))
        return turn(2, ("done", {"success": True, "text": done[-1][1]}))

    return ScriptedModel(respond)


def test_t2a_agent_over_a_toolkit_runs_the_guide_example(ws):
    notes_environment(ws)
    tx.e2t(ws, "notes")
    shown: list[list[str]] = []
    card = tx.t2a(ws, "notes", name="pages", description="Reads pages.", model=opener_then_reader("notes_", shown).name)
    assert card.tools == ["notes_open", "notes_read"]
    result = ws.agent("pages").run_sync("What does line 1 of the intro page say?")
    assert result.status == "success" and result.answer == "Every run writes events."
    assert shown[0] == ["done", "notes_open"] and "notes_read" in shown[1]


def test_a2e_environment_asks_an_agent_from_another_agent(ws):
    notes_environment(ws)
    tx.e2t(ws, "notes")
    inner: list[list[str]] = []
    ws.agent("pages", model=opener_then_reader("notes_", inner).name, tools=["notes_open", "notes_read"])
    env = tx.a2e(ws, "pages")
    assert env.name == "pages_env"

    def asker(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
        done = results(messages)
        if not done:
            return turn(0, ("pages_env_ask", {"message": "What does line 1 of the intro page say?"}))
        return turn(1, ("done", {"success": True, "text": done[-1][1]}))

    result = ws.agent("asker", model=ScriptedModel(asker).name, tools=[], envs=["pages_env"]).run_sync("Ask pages.")
    assert result.status == "success" and "Every run writes events." in result.answer
    assert "notes_read" in inner[1]  # the asked agent's own precondition held in its run


def test_a_composed_e2t_t2e_e2a_agent_runs(ws):
    notes_environment(ws)
    card = tx.compose(ws, "notes", ["E2T", "T2E", "E2A"], source_kind="environment")
    tools = list(card.tools)
    prefix = tools[0].removesuffix("open")
    shown: list[list[str]] = []
    result = ws.agent(card.name).run_sync(
        "What does line 1 of the intro page say?", model=opener_then_reader(prefix, shown).name
    )
    assert result.status == "success" and result.answer == "Every run writes events."
    assert f"{prefix}read" not in shown[0] and f"{prefix}read" in shown[1]


@pytest.mark.parametrize("made_by", ["E2A", "T2A"])
def test_an_agent_a_transformation_made_is_rebuilt_in_a_new_kernel(tmp_path, made_by):
    """The card E2A or T2A registers says how to build its agent: in a fresh workspace (a new kernel:
    no runner in this process) another agent calls it through A2T and it runs."""
    path = tmp_path / "ws"
    shown: list[list[str]] = []
    model = opener_then_reader("notes_", shown).name
    first = tea_notebook.Workspace(path, embedder="hashing")
    notes_environment(first)
    tx.e2t(first, "notes")
    if made_by == "E2A":
        name = tx.e2a(first, "notes", model=model).name
    else:
        name = tx.t2a(first, "notes", name="pages", description="Reads pages.", model=model).name
    first.close()

    fresh = tea_notebook.Workspace(path, embedder="hashing")
    try:
        notes_environment(fresh)  # the environment's runtime in this process
        assert fresh.agents.get(name).metadata.get("kind") == "agent"
        tool = tx.a2t(fresh, name)

        def outer(messages: list[dict], tools: list[dict]) -> dict[str, Any]:
            done = results(messages)
            if not done:
                return turn(0, (tool.name, {"task": "What does line 1 of the intro page say?"}))
            return turn(1, ("done", {"success": True, "text": done[-1][1]}))

        asker = fresh.agent("asker", model=ScriptedModel(outer).name, tools=[], sub_agents=[name])
        result = asker.run_sync("Ask.")
        assert result.status == "success", result.answer
        assert "Every run writes events." in result.answer
        assert shown[0] == ["done", "notes_open"] and "notes_read" in shown[1]
    finally:
        fresh.close()
