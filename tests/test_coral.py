"""CORAL (information-flow orchestrator + A2A messages) with scripted models, no network.

Every member of a team has its own :class:`ScriptedModel`. The scripts read what the member is shown
(the ``coral`` environment's transcript of its threads and the results of its last step) and decide from
that, so a message that is not delivered, not shown or shown twice changes what they do and fails the
test. The rules of :class:`A2ASession` (star topology, threads, caps, budgets, deadlocks, crashes) are
checked through real team runs, and a few also directly on a session.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Any, Callable

import pytest
from conftest import magics_workspace

import tea_notebook
from tea_notebook._sync import run_sync
from tea_notebook.agents import kinds
from tea_notebook.agents.a2a import MAIN_THREAD, SYSTEM_SENDER, A2AError, A2ASession
from tea_notebook.agents.coral import ORCHESTRATOR, PLANNER
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.notebook.live import LiveView

ORC, P = ORCHESTRATOR, PLANNER
TASK = "What are the capitals of France and Italy?"
CAPITALS = {"France": "Paris", "Italy": "Rome"}


pytestmark = pytest.mark.usefixtures("warm_litellm")  # timings measure CORAL, not litellm's first import.


# -- reading a member's prompt --------------------------------------------------------------------
LINE = re.compile(r"#(\d+) \[thread ([^\]]+)\] (\S+) → (.*?): (.*)")
STEP = re.compile(r"<step_(\d+)>(.*?)</step_\1>", re.S)


@dataclass
class Msg:
    seq: int
    thread: str
    sender: str
    mentions: list[str]
    content: str


def parse_lines(text: str) -> list[Msg]:
    out = []
    for line in text.splitlines():
        m = LINE.fullmatch(line.strip())
        if m:
            mentions = [x.strip().lstrip("@") for x in m[4].split(",") if x.strip().startswith("@")]
            out.append(Msg(int(m[1]), m[2], m[3], mentions, m[5]))
    return out


class View:
    """What a member's model is shown at one step."""

    def __init__(self, messages: list[dict], tools: list[dict]):
        self.system = messages[0]["content"]
        self.prompt = messages[-1]["content"] if isinstance(messages[-1]["content"], str) else ""
        self.tools = {t["function"]["name"] for t in tools}
        state = re.search(r'<environment name="coral"><state>(.*?)</state>', self.prompt, re.S)
        self.transcript = state[1] if state else ""
        self.messages = parse_lines(self.transcript)
        steps = STEP.findall(self.prompt)
        self.last = steps[-1][1] if steps else ""  # the results of the previous step
        step = re.search(r"Step (\d+) of", self.prompt)
        self.step = int(step[1]) if step else 0

    def to(self, name: str, sender: str = ORC) -> list[Msg]:
        return [m for m in self.messages if m.sender == sender and name in m.mentions]

    def by(self, name: str) -> list[Msg]:
        return [m for m in self.messages if m.sender == name]

    def result_of(self, tool: str) -> str | None:
        m = re.search(rf"\[{re.escape(tool)}\] .*? -> (.*)", self.last)
        return m[1] if m else None


class Script:
    """A member's model: ``fn(view)`` returns its next turn; every view is kept for the asserts."""

    def __init__(self, fn: Callable[[View], Any]):
        self.fn = fn
        self.views: list[View] = []
        self.model = ScriptedModel(self._respond)

    def _respond(self, messages: list[dict], tools: list[dict]) -> Any:
        view = View(messages, tools)
        self.views.append(view)
        return self.fn(view)

    @property
    def name(self) -> str:
        return self.model.name


def send(content: str, *mentions: str, thread: str | None = None) -> dict:
    args: dict[str, Any] = {"content": content}
    if mentions:
        args["mentions"] = list(mentions)
    if thread:
        args["thread_id"] = thread
    return call("send_message", **args)


def wait(ms: int = 5000) -> dict:
    return call("wait_for_mentions", timeout_ms=ms)


def waiter(ms: int = 5000) -> Script:
    """A member that only ever waits."""
    return Script(lambda v: wait(ms))


class Steps:
    """An orchestrator script: ``(condition, turn)`` pairs taken in order; while the next condition does
    not hold it waits. ``fallback`` answers once the list is done."""

    def __init__(self, *steps: tuple[Callable[[View], bool] | None, Any], fallback: Any = None, ms: int = 5000):
        self.steps, self.fallback, self.ms, self.done = list(steps), fallback, ms, 0

    def __call__(self, v: View) -> Any:
        if self.done < len(self.steps):
            cond, turn = self.steps[self.done]
            if cond is None or cond(v):
                self.done += 1
                return turn(v) if callable(turn) else turn
            return wait(self.ms)
        return self.fallback if self.fallback is not None else wait(self.ms)


# -- tools and wrapped agents ------------------------------------------------------------------------
ARRIVALS: list[str] = []


@pytest.fixture(autouse=True)
def _fresh_arrivals():
    ARRIVALS.clear()


def register_tools(ws: tea_notebook.Workspace) -> None:
    @ws.tools.tool
    async def meet(who: str) -> str:
        """Wait (up to 2 s) until the partner agent is in this tool too: 'met' proves both run at once."""
        ARRIVALS.append(who)
        partner = (len(ARRIVALS) - 1) ^ 1
        deadline = time.monotonic() + 2.0
        while len(ARRIVALS) <= partner and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        return "met" if len(ARRIVALS) > partner else "alone"

    @ws.tools.tool
    def capital(country: str) -> str:
        """The capital of a country."""
        return CAPITALS.get(country, "unknown")

    @ws.tools.tool
    def noop() -> str:
        """Does nothing."""
        return "ok"

    @ws.tools.tool
    async def slow(seconds: float) -> str:
        """Sleeps."""
        await asyncio.sleep(seconds)
        return "slept"


def geo_script() -> Script:
    """The wrapped agent: finds the country named in the worker's instruction, meets its twin, answers."""

    def fn(v: View) -> Any:
        task = re.search(r"<task>(.*?)</task>", v.prompt, re.S)[1]
        instruction = task.partition("Instruction from ")[2]
        country = next((c for c in CAPITALS if c in instruction), "nowhere")
        met = v.result_of("meet")
        if met is None:
            return [call("meet", who=country), call("capital", country=country)]
        return call("done", success=True, text=f"{v.result_of('capital')} ({met})")

    return Script(fn)


def worker_script(name: str, tool: str) -> Script:
    """A worker: an unanswered instruction goes to its wrapped agent, whose answer it reports."""

    def fn(v: View) -> Any:
        asked, answered = v.to(name), v.by(name)
        if len(asked) > len(answered):
            result = v.result_of(tool)
            if result is None:
                return call(tool, task=asked[-1].content)
            return send(f"{name} found: {result}")
        return wait(5000)

    return Script(fn)


def planner_script() -> Script:
    def fn(v: View) -> Any:
        asked, answered = v.to(P), v.by(P)
        if len(asked) > len(answered):
            if "Confirm" in asked[-1].content:
                return send("Confirmed: Paris and Rome are right; submit.")
            return send("<tasks><task>Capital of France</task><task>Capital of Italy</task></tasks>")
        return wait(5000)

    return Script(fn)


class PaperOrchestrator:
    """Inquire the planner, instruct both workers in one step, wait for both, confirm, submit."""

    def __init__(self):
        self.confirm_prompt = ""

    def __call__(self, v: View) -> Any:
        sent = lambda to, word: any(word in m.content for m in v.to(to))  # noqa: E731
        got = lambda frm, word: any(word in m.content for m in v.by(frm))  # noqa: E731
        if not sent(P, "Decompose"):
            return [send(f"Decompose: {TASK}", P), wait()]
        if got(P, "<tasks>") and not sent("w1", "France"):
            return [send("Find the capital of France", "w1"), send("Find the capital of Italy", "w2"), wait()]
        if got("w1", "found") and got("w2", "found") and not sent(P, "Confirm"):
            self.confirm_prompt = v.prompt
            return [send("Confirm: France → Paris, Italy → Rome?", P), wait()]
        if got(P, "Confirmed"):
            return call("submit_answer", answer="Paris, Rome")
        return wait()


@dataclass
class Paper:
    team: Any
    orchestrator: Script
    logic: PaperOrchestrator
    planner: Script
    workers: dict[str, Script]
    geo: Script


def paper_team(ws: tea_notebook.Workspace, name: str = "team") -> Paper:
    register_tools(ws)
    geo = geo_script()
    ws.agent("geo", tools=["meet", "capital"], model=geo.name, description="Finds capitals.")
    logic = PaperOrchestrator()
    orchestrator, planner = Script(logic), planner_script()
    workers = {w: worker_script(w, "geo_agent") for w in ("w1", "w2")}
    team = ws.coral(
        name,
        workers={w: {"agents": ["geo"], "model": s.name} for w, s in workers.items()},
        models={"orchestrator": orchestrator.name, "planner": planner.name},
        budget_seconds=20,
        wait_timeout_ms=5000,
    )
    return Paper(team, orchestrator, logic, planner, workers, geo)


# -- reading a finished run ----------------------------------------------------------------------
def child(tr: Any, agent: str) -> Any:
    found = [c for c in tr.children if c.agent == agent]
    assert len(found) == 1, [c.agent for c in tr.children]
    return found[0]


def results(tr: Any, agent: str) -> list[tuple[str, Any, str]]:
    """``(tool, arguments, observation)`` of every action of a member, in order."""
    return [
        (a["name"], a.get("arguments"), str(a.get("observation", "")))
        for s in child(tr, agent).steps
        for a in s.actions
    ]


def observations(tr: Any, agent: str, tool: str) -> list[str]:
    return [obs for name, _, obs in results(tr, agent) if name == tool]


def message_events(ws: tea_notebook.Workspace, run_id: str) -> list[Any]:
    return [e for e in ws.events.events(run_id, nested=True) if e.type == "message"]


def assert_numbered(ws: tea_notebook.Workspace, result: Any) -> list[dict]:
    """Messages are numbered 1..N in the order stored, each stored once, all in the team's run."""
    events = message_events(ws, result.run_id)
    assert {e.run_id for e in events} == {result.run_id}
    seqs = [e.data["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1))
    messages = result.trajectory.messages
    assert [m["seq"] for m in messages] == seqs
    assert result.steps == len(messages)
    for m in messages:
        assert set(m) >= {"seq", "thread", "sender", "mentions", "content", "replayed"}
    return messages


def member_runs_ended(tr: Any, members: list[str]) -> None:
    assert sorted(c.agent for c in tr.children) == sorted(members)
    for c in tr.children:
        assert c.status not in ("running", "", None), (c.agent, c.status)
        assert c.parent_id == tr.run_id


# == the paper's pattern =========================================================================
def test_paper_pattern_inquire_instruct_in_parallel_confirm_submit(ws):
    paper = paper_team(ws)
    started = time.perf_counter()
    result = paper.team.run_sync(TASK)
    elapsed = time.perf_counter() - started
    assert result.status == "success", result
    assert result.answer == "Paris, Rome"
    assert elapsed < 10

    messages = assert_numbered(ws, result)
    flow = [(m["sender"], m["mentions"]) for m in messages]
    assert flow[:4] == [(ORC, [P]), (P, [ORC]), (ORC, ["w1"]), (ORC, ["w2"])]
    assert sorted(flow[4:6]) == [("w1", [ORC]), ("w2", [ORC])]  # both replies, none lost, none twice
    assert flow[6:] == [(ORC, [P]), (P, [ORC])]
    assert all(m["thread"] == MAIN_THREAD and not m["replayed"] for m in messages)
    replies = {m["sender"]: m["content"] for m in messages[4:6]}
    # the wrapped agents ran at the same time (each one's 'meet' found the other) and found the right capitals
    assert replies == {"w1": "w1 found: Paris (met)", "w2": "w2 found: Rome (met)"}

    # the two instructions went out in ONE step, followed by the wait in that step
    step = [s for s in child(result.trajectory, ORC).steps if len(s.actions) == 3][0]
    assert [a["name"] for a in step.actions] == ["send_message", "send_message", "wait_for_mentions"]
    # the prompt in which the orchestrator confirms shows both replies
    assert replies["w1"] in paper.logic.confirm_prompt and replies["w2"] in paper.logic.confirm_prompt
    assert result.trajectory.threads[0]["id"] == MAIN_THREAD
    assert set(result.trajectory.threads[0]["participants"]) == {ORC, P, "w1", "w2"}
    member_runs_ended(result.trajectory, [ORC, P, "w1", "w2"])
    for c in result.trajectory.children:
        assert c.status == "success", (c.agent, c.status, c.answer)


def test_workers_wrap_registered_agents_as_nested_sub_runs(ws):
    paper = paper_team(ws)
    result = paper.team.run_sync(TASK)
    assert result.status == "success"
    tr = result.trajectory
    for worker, country in (("w1", "France"), ("w2", "Italy")):
        member = child(tr, worker)
        assert "geo_agent" in paper.workers[worker].views[0].tools
        calls = [(n, a) for n, a, _ in results(tr, worker) if n == "geo_agent"]
        assert len(calls) == 1
        (sub,) = member.children  # the wrapped agent's run is a child of the worker's run
        assert sub.agent == "geo" and sub.parent_id == member.run_id and sub.status == "success"
        # the instruction reached it (with the original task, AgentOrchestra's delegation rule)
        assert f"Instruction from {worker}: Find the capital of {country}" in sub.task
        assert sub.task.startswith(TASK)
        assert [a["name"] for s in sub.steps for a in s.actions] == ["meet", "capital", "done"]
    assert len(ws.db.runs(parent_id=result.run_id)) == 4  # the members; the wrapped runs are one level down


# == the asymmetric constraint ===================================================================
def test_workers_and_planner_may_write_only_to_the_orchestrator(ws):
    register_tools(ws)

    def w1_fn(v: View) -> Any:
        if v.to("w1") and not v.by("w1") and "hello there" not in v.last:
            return [send("hi w2", "w2"), send("@w2 hello there, can you help?"), send("report for the boss")]
        return wait(3000)

    def planner_fn(v: View) -> Any:
        if v.to(P) and not v.by(P) and "w1, do it" not in v.last:
            return [send("w1, do it", "w1"), send("planning done")]
        return wait(3000)

    orchestrator = Script(
        Steps(
            (None, [send("go", "w1"), send("go", P), wait(3000)]),
            (lambda v: v.by("w1") and v.by(P), call("submit_answer", answer="ok")),
            ms=3000,
        )
    )
    w1, planner, w2 = Script(w1_fn), Script(planner_fn), waiter(3000)
    team = ws.coral(
        "star",
        workers={"w1": {"tools": ["noop"], "model": w1.name}, "w2": {"tools": ["noop"], "model": w2.name}},
        models={"orchestrator": orchestrator.name, "planner": planner.name},
        budget_seconds=20,
    )
    result = team.run_sync("Test the star rule.")
    assert result.status == "success"
    tr = result.trajectory

    sent = observations(tr, "w1", "send_message")
    assert sent[0].startswith("Error: refused") and "star rule" in sent[0] and "not w2" in sent[0]
    assert sent[1].startswith("Error: refused") and "not w2" in sent[1]  # an @name in the content counts
    assert re.fullmatch(rf"Sent message #\d+ to {ORC} in thread main\.", sent[2])  # no mention: the orchestrator
    sent = observations(tr, P, "send_message")
    assert sent[0].startswith("Error: refused") and "not w1" in sent[0]
    assert re.fullmatch(rf"Sent message #\d+ to {ORC} in thread main\.", sent[1])

    messages = assert_numbered(ws, result)
    contents = [m["content"] for m in messages]
    assert "report for the boss" in contents and "planning done" in contents
    assert not any("hello there" in c or c in ("hi w2", "w1, do it") for c in contents)
    assert all(m["mentions"] == [ORC] for m in messages if m["sender"] != ORC)
    assert not any("w2" in m["mentions"] for m in messages)
    # w2 never saw any of it, in its transcript or in a wait
    assert w2.views and not any("hello" in v.prompt or "hi w2" in v.prompt for v in w2.views)
    assert all(
        obs.startswith(("No new messages", "The conversation is over"))
        for obs in observations(tr, "w2", "wait_for_mentions")
    )
    # w1 received only the orchestrator's "go"
    received = " ".join(observations(tr, "w1", "wait_for_mentions"))
    assert "w1, do it" not in received and "go" in received


def test_unknown_agents_threads_and_orchestrator_only_tools(ws):
    register_tools(ws)
    w1_seen: list[str] = []

    def w1_fn(v: View) -> Any:
        side = [m for m in v.to("w1") if m.thread == "side"]
        main = [m for m in v.to("w1") if m.thread == MAIN_THREAD]
        mine = v.by("w1")
        if side and not mine:
            if "unknown action" not in v.last:
                # not offered to a worker: the loop refuses the whole step
                return [
                    call("create_thread", thread_name="mine", participant_ids=["w2"]),
                    call("submit_answer", answer="x"),
                ]
            return send("side done", thread="side")
        if main and not any(m.thread == MAIN_THREAD for m in mine):
            w1_seen.append(v.transcript)
            return [send("main done"), call("list_threads")]
        return wait(3000)

    def w2_fn(v: View) -> Any:
        if v.to("w2") and v.result_of("list_threads") is None:
            return [send("sneaking into side", thread="side"), call("list_threads")]
        return wait(3000)

    orchestrator = Script(
        Steps(
            (
                None,
                [
                    send("hello?", "nobody"),
                    call("create_thread", thread_name="side", participant_ids=["w1"]),
                    send("try the side thread", "w2"),
                ],
            ),
            (
                None,
                [
                    call("create_thread", thread_name="bad", participant_ids=["ghost"]),
                    send("in side", "w2", thread="side"),
                    send("side work for w1", "w1", thread="side"),
                ],
            ),
            (None, send("no such thread", "w1", thread="nope")),
            (
                lambda v: any(m.thread == "side" for m in v.by("w1")),
                [
                    call("close_thread", thread_id="side", summary="finished by w1, all good"),
                    send("after close", "w1", thread="side"),
                    send("main work for w1", "w1"),
                ],
            ),
            (lambda v: any(m.thread == MAIN_THREAD for m in v.by("w1")), call("submit_answer", answer="done")),
            ms=3000,
        )
    )
    w1, w2 = Script(w1_fn), Script(w2_fn)
    team = ws.coral(
        "threads",
        workers={"w1": {"tools": ["noop"], "model": w1.name}, "w2": {"tools": ["noop"], "model": w2.name}},
        planner=False,
        models={"orchestrator": orchestrator.name},
        budget_seconds=20,
    )
    result = team.run_sync("Test threads.")
    assert result.status == "success", result
    tr = result.trajectory
    obs = [o for n, _, o in results(tr, ORC) if n != "wait_for_mentions"]
    assert obs[0] == f"Error: no agent named nobody in this team; agents: {ORC}, w1, w2"
    assert obs[1] == f"Created thread side with {ORC}, w1."
    assert obs[2] == "Sent message #1 to w2 in thread main."
    assert obs[3].startswith("Error: no agent named ghost")
    assert obs[4] == f"Error: w2 is not in thread 'side'; its participants: {ORC}, w1"
    assert re.fullmatch(r"Sent message #\d+ to w1 in thread side\.", obs[5])
    assert obs[6] == "Error: no thread 'nope'; threads: main, side"
    assert obs[7] == "Closed thread side."
    assert obs[8] == "Error: thread 'side' is closed"
    assert re.fullmatch(r"Sent message #\d+ to w1 in thread main\.", obs[9])
    assert obs[10] == "Answer submitted; the task is over."

    # a worker asking for orchestrator-only tools: not offered, so the step is refused by the loop
    assert "create_thread" not in w1.views[0].tools and "submit_answer" not in w1.views[0].tools
    errors = [e for s in child(tr, "w1").steps for e in s.errors]
    assert any("unknown action(s) create_thread, submit_answer" in e for e in errors), errors
    assert [t["id"] for t in tr.threads] == [MAIN_THREAD, "side"]  # "mine" was never made
    # w2 is not in thread side: refused, and it does not see it
    assert observations(tr, "w2", "send_message") == ["Error: you are not in thread 'side'"]
    assert observations(tr, "w2", "list_threads")[0].startswith("main (main): open")
    assert "side" not in observations(tr, "w2", "list_threads")[0]
    assert not any("side work" in v.transcript or "Thread side" in v.transcript for v in w2.views)

    # the closed thread: its messages hidden from the transcript, its summary shown
    (transcript,) = w1_seen
    assert f"Thread side (side): participants {ORC}, w1; CLOSED, summary: finished by w1, all good" in transcript
    assert "[thread side]" not in transcript and "side work for w1" not in transcript
    assert "main work for w1" in transcript
    assert "side (side): closed, 2 messages" in observations(tr, "w1", "list_threads")[0]
    side = next(t for t in tr.threads if t["id"] == "side")
    assert side["status"] == "closed" and side["summary"] == "finished by w1, all good"
    assert side["participants"] == [ORC, "w1"]
    # the trajectory keeps the closed thread's messages (only the agents' view hides them)
    assert [m["content"] for m in tr.messages if m["thread"] == "side"] == ["side work for w1", "side done"]
    assert_numbered(ws, result)


# == waits, deadlocks, crashes ===================================================================
def test_wait_times_out_and_names_who_has_not_answered(ws):
    register_tools(ws)

    def w1_fn(v: View) -> Any:  # takes the instruction, then is busy for 1 s (never answers in time)
        if v.to("w1") and v.result_of("slow") is None:
            return call("slow", seconds=1.0)
        return wait(3000)

    orchestrator = Script(
        Steps(
            (None, [send("do the long thing", "w1"), wait(300)]),
            (None, call("submit_answer", answer="gave up waiting")),
        )
    )
    w1 = Script(w1_fn)
    team = ws.coral(
        "timeout",
        workers={"w1": {"tools": ["slow"], "model": w1.name}},
        planner=False,
        models={"orchestrator": orchestrator.name},
        budget_seconds=20,
    )
    started = time.perf_counter()
    result = team.run_sync("Wait for the worker.")
    assert time.perf_counter() - started < 5
    assert result.status == "success"
    (waited,) = observations(result.trajectory, ORC, "wait_for_mentions")
    assert waited == "No new messages mentioning you within 0.3 s. Not answered yet: w1."
    w = child(result.trajectory, "w1")
    assert w.status == "failed"  # it was asked and never answered
    assert w.answer == "It sent no message."


def test_everyone_waiting_is_a_deadlock_reported_promptly(ws):
    register_tools(ws)
    orchestrator = Script(
        Steps(
            (None, wait(20_000)),
            (lambda v: "Deadlock" in v.last, call("submit_answer", answer="nobody had anything")),
            ms=20_000,
        )
    )
    w1, planner = waiter(20_000), waiter(20_000)
    team = ws.coral(
        "deadlock",
        workers={"w1": {"tools": ["noop"], "model": w1.name}},
        models={"orchestrator": orchestrator.name, "planner": planner.name},
        budget_seconds=60,
    )
    started = time.perf_counter()
    result = team.run_sync("Everyone waits.")
    elapsed = time.perf_counter() - started
    assert elapsed < 5, elapsed  # far below the 20 s waits
    assert result.status == "success" and result.answer == "nobody had anything"
    (waited,) = observations(result.trajectory, ORC, "wait_for_mentions")
    assert waited.startswith("Deadlock: every agent of the team is waiting")
    for member in ("w1", P):  # their waits ended with the conversation, not with their timeout
        assert observations(result.trajectory, member, "wait_for_mentions")[-1].startswith(
            "The conversation is over (the orchestrator submitted the answer)"
        )
    assert result.trajectory.messages == []


def test_a_crashed_worker_is_reported_and_refuses_messages(ws):
    register_tools(ws)

    def w1_fn(v: View) -> Any:
        if v.to("w1"):
            raise RuntimeError("the worker's model fell over")
        return wait(3000)

    orchestrator = Script(
        Steps(
            (None, [send("do something", "w1"), wait(3000)]),
            (lambda v: "crashed" in v.last, [send("are you there?", "w1"), call("list_agents")]),
            (None, call("submit_answer", answer="w1 is gone")),
        )
    )
    w1 = Script(w1_fn)
    team = ws.coral(
        "crash",
        workers={"w1": {"tools": ["noop"], "model": w1.name}, "w2": {"tools": ["noop"], "model": waiter(3000).name}},
        planner=False,
        models={"orchestrator": orchestrator.name},
        budget_seconds=20,
    )
    result = team.run_sync("Crash.")
    assert result.status == "success"
    tr = result.trajectory
    assert child(tr, "w1").status == "error"
    notes = [m for m in tr.messages if m["sender"] == SYSTEM_SENDER]
    assert notes and all(m["mentions"] == [ORC] for m in notes)
    assert notes[0]["content"].startswith("w1 crashed: ")
    assert "the worker's model fell over" in notes[0]["content"]
    assert any(m["content"].startswith("w1 stopped (status error)") for m in notes)
    waited = observations(tr, ORC, "wait_for_mentions")[0]
    assert f"{SYSTEM_SENDER} → @{ORC}: w1 crashed" in waited
    sent = observations(tr, ORC, "send_message")
    assert sent[1] == "Error: w1 (stopped: error) cannot answer any more"
    assert (
        "w1: " in observations(tr, ORC, "list_agents")[0]
        and "[stopped: error]" in observations(tr, ORC, "list_agents")[0]
    )
    assert [m["content"] for m in tr.messages if m["sender"] == ORC] == ["do something"]
    assert_numbered(ws, result)


# == budgets =====================================================================================
def test_an_orchestrator_that_never_submits_ends_at_max_steps_with_the_trajectory(ws):
    register_tools(ws)
    count = {"n": 0}

    def orchestrator_fn(v: View) -> Any:
        count["n"] += 1
        return [send(f"instruction {count['n']}", "w1"), wait(2000)]

    def w1_fn(v: View) -> Any:
        asked, answered = v.to("w1"), v.by("w1")
        if len(asked) > len(answered):
            return [send(f"reply {len(answered) + 1}"), wait(2000)]
        return wait(2000)

    orchestrator, w1 = Script(orchestrator_fn), Script(w1_fn)
    team = ws.coral(
        "nosubmit",
        workers={"w1": {"tools": ["noop"], "model": w1.name}},
        planner=False,
        models={"orchestrator": orchestrator.name},
        max_steps=4,
        budget_seconds=20,
    )
    started = time.perf_counter()
    result = team.run_sync("Never submit.")
    assert time.perf_counter() - started < 8
    assert result.status == "max_steps"
    assert result.error == "the orchestrator stopped without submitting an answer (max_steps)"
    messages = assert_numbered(ws, result)
    assert [m["content"] for m in messages if m["sender"] == ORC] == [f"instruction {i}" for i in range(1, 5)]
    assert [m["content"] for m in messages if m["sender"] == "w1"] == [f"reply {i}" for i in range(1, 4)]
    tr = result.trajectory
    assert tr.status == "max_steps" and len(tr.messages) == len(messages)
    member_runs_ended(tr, [ORC, "w1"])
    assert len(child(tr, ORC).steps) == 4 and len(child(tr, "w1").steps) == 4


def test_the_message_cap_refuses_further_messages(ws):
    register_tools(ws)
    orchestrator = Script(
        Steps(
            (None, [send("one", "w1"), send("two", "w1"), send("three", "w1")]),
            (None, send("four", "w1")),
            (None, call("submit_answer", answer="capped")),
        )
    )
    team = ws.coral(
        "cap",
        workers={"w1": {"tools": ["noop"], "model": waiter(2000).name}},
        planner=False,
        models={"orchestrator": orchestrator.name},
        max_messages=3,
        budget_seconds=20,
    )
    result = team.run_sync("Cap.")
    assert result.status == "success"
    sent = observations(result.trajectory, ORC, "send_message")
    assert [s.startswith("Sent message #") for s in sent] == [True, True, True, False]
    assert sent[3] == f"Error: the team's cap of 3 messages is reached; {ORC} must submit its best answer now"
    assert [m["content"] for m in result.trajectory.messages] == ["one", "two", "three"]


def test_a_spent_time_budget_is_announced_and_a_late_answer_is_max_steps(ws):
    register_tools(ws)

    def w1_fn(v: View) -> Any:  # busy: the team is not deadlocked
        if v.result_of("slow") is None:
            return call("slow", seconds=0.8)
        return wait(2000)

    orchestrator = Script(
        Steps(
            (None, wait(600)),
            (lambda v: "THE TIME BUDGET IS SPENT" in v.transcript, call("submit_answer", answer="late answer")),
            ms=600,
        )
    )
    team = ws.coral(
        "budget",
        workers={"w1": {"tools": ["slow"], "model": Script(w1_fn).name}},
        planner=False,
        models={"orchestrator": orchestrator.name},
        budget_seconds=0.3,
    )
    started = time.perf_counter()
    result = team.run_sync("Out of time.")
    assert time.perf_counter() - started < 5
    assert result.status == "max_steps" and result.answer == "late answer"
    (waited,) = observations(result.trajectory, ORC, "wait_for_mentions")
    assert "THE TIME BUDGET IS SPENT: submit your current best answer now with submit_answer" in waited
    assert "Status: THE TIME BUDGET IS SPENT" in orchestrator.views[1].transcript
    assert "s of the time budget left" in orchestrator.views[0].transcript
    assert child(result.trajectory, ORC).status == "max_steps"


def test_a_long_wait_is_cut_when_the_budget_runs_out(ws):
    """The orchestrator waits 10 s with a 0.3 s budget while a worker is busy: it should be told at the
    end of the budget (and submit), not when the grace period closes the conversation (5.3 s)."""
    register_tools(ws)

    def w1_fn(v: View) -> Any:  # always busy: no deadlock wakes the orchestrator
        return call("slow", seconds=0.3)

    orchestrator = Script(
        Steps(
            (None, wait(10_000)),
            (lambda v: "THE TIME BUDGET IS SPENT" in v.last, call("submit_answer", answer="best so far")),
            ms=10_000,
        )
    )
    team = ws.coral(
        "longwait",
        workers={"w1": {"tools": ["slow"], "model": Script(w1_fn).name}},
        planner=False,
        models={"orchestrator": orchestrator.name},
        budget_seconds=0.3,
    )
    result = team.run_sync("Out of time while waiting.")
    (waited,) = observations(result.trajectory, ORC, "wait_for_mentions")
    assert "THE TIME BUDGET IS SPENT" in waited, waited
    assert result.answer == "best so far"


# == ordering under concurrency ===================================================================
def test_concurrent_senders_keep_order_and_lose_nothing(ws):
    register_tools(ws)
    workers = ("w1", "w2", "w3")
    per_worker = 20

    def worker(name: str) -> Script:
        sent = {"n": 0, "go": False}  # the transcript shows only the last 40 messages: count here

        def fn(v: View) -> Any:
            sent["go"] = sent["go"] or "go, all of you" in v.last
            done = sent["n"]
            if not sent["go"] or done >= per_worker:
                return wait(5000)
            upto = min(per_worker, done + 3)  # at most 3 actions a step (Agent's max_actions)
            sent["n"] = upto
            return [send(f"{name}-{i:02d}") for i in range(done, upto)]

        return Script(fn)

    flags: set[str] = set()

    def orchestrator_fn(v: View) -> Any:
        if v.step == 1:
            return [send("go, all of you", *workers), wait(5000)]
        hidden = re.search(r"\((\d+) earlier messages not shown\)", v.transcript)
        total = len(v.messages) + (int(hidden[1]) if hidden else 0)  # the transcript shows the last 40
        if total >= 1 + per_worker * len(workers):
            if "drained" not in flags:  # one more wait takes what arrived after the last one
                flags.add("drained")
                return wait(200)
            return call("submit_answer", answer=str(total))
        return wait(5000)

    scripts = {w: worker(w) for w in workers}
    team = ws.coral(
        "burst",
        workers={w: {"tools": ["noop"], "model": s.name} for w, s in scripts.items()},
        planner=False,
        models={"orchestrator": Script(orchestrator_fn).name},
        max_steps=60,
        budget_seconds=30,
    )
    started = time.perf_counter()
    result = team.run_sync("Burst.")
    assert time.perf_counter() - started < 20
    assert result.status == "success", result
    assert result.answer == "61"
    messages = assert_numbered(ws, result)
    assert len(messages) == 1 + per_worker * len(workers)
    for w in workers:
        assert [m["content"] for m in messages if m["sender"] == w] == [f"{w}-{i:02d}" for i in range(per_worker)]
    # every message reached the orchestrator exactly once, in seq order within each worker
    received = re.findall(r"\b(w\d-\d\d)\b", "".join(observations(result.trajectory, ORC, "wait_for_mentions")))
    assert sorted(received) == sorted(f"{w}-{i:02d}" for w in workers for i in range(per_worker))
    for w in workers:
        assert [r for r in received if r.startswith(w)] == [f"{w}-{i:02d}" for i in range(per_worker)]
    # they really interleaved: the workers' messages are not three blocks one after the other
    senders = [m["sender"] for m in messages[1:]]
    switches = sum(1 for a, b in zip(senders, senders[1:]) if a != b)
    assert switches > 3


# == fork, rebuild, magic =========================================================================
def test_fork_replays_the_first_messages_then_continues_live(ws):
    paper = paper_team(ws)
    first = paper.team.run_sync(TASK)
    assert first.status == "success"
    original = first.trajectory.messages
    assert len(original) == 8

    forked = run_sync(ws.fork(first.run_id, step=4))
    assert forked.status == "success" and forked.answer == "Paris, Rome"
    tr = forked.trajectory
    assert tr.forked_from == first.run_id
    messages = assert_numbered(ws, forked)
    assert [m["replayed"] for m in messages[:4]] == [True] * 4
    assert not any(m["replayed"] for m in messages[4:])
    keep = ("seq", "thread", "sender", "mentions", "content")
    assert [{k: m[k] for k in keep} for m in messages[:4]] == [{k: m[k] for k in keep} for m in original[:4]]
    # live from there: both workers answer the replayed instructions, the planner confirms — once each
    flow = [(m["sender"], m["mentions"]) for m in messages[4:]]
    assert sorted(flow[:2]) == [("w1", [ORC]), ("w2", [ORC])]
    assert flow[2:] == [(ORC, [P]), (P, [ORC])]
    assert len(messages) == 8
    # a replayed message that was already answered is not delivered again: the planner had answered #1
    planner_run = next(c for c in tr.children if c.agent == P)
    waits = [
        a["observation"]
        for s in planner_run.steps
        if not s.replayed  # its steps before the fork point are the original's (the delivery of #1 among them)
        for a in s.actions
        if a["name"] == "wait_for_mentions"
    ]
    assert waits and not any("#1 " in w for w in waits)
    row = ws.db.run_row(forked.run_id)
    assert row["forked_from"] == first.run_id and row["fork_step"] == 4
    with pytest.raises(tea_notebook.errors.TeaError, match="only 8 messages"):
        run_sync(ws.fork(first.run_id, step=9))


def test_a_fork_from_an_edited_message_continues_the_team_from_it(ws):
    paper = paper_team(ws)
    first = paper.team.run_sync(TASK)
    original = first.trajectory.messages
    runs, events = len(ws.db.runs(10_000, parent_id=None)), len(ws.events.events(first.run_id))
    with pytest.raises(tea_notebook.errors.TeaError, match="the edit is {'message': text}"):
        run_sync(ws.fork(first.run_id, step=4, edit={"observation": "x"}))
    with pytest.raises(tea_notebook.errors.TeaError, match="must be text"):
        run_sync(ws.fork(first.run_id, step=4, edit={"message": ["not", "text"]}))
    assert len(ws.db.runs(10_000, parent_id=None)) == runs  # nothing written by a refused fork
    assert len(ws.events.events(first.run_id)) == events

    edited = original[3]["content"] + " (EDITED: answer in capitals)"
    forked = run_sync(ws.fork(first.run_id, step=4, edit={"message": edited}))
    assert forked.status == "success"
    messages = forked.trajectory.messages
    assert messages[3]["content"] == edited and messages[3]["replayed"]
    assert [m["content"] for m in messages[:3]] == [m["content"] for m in original[:3]]
    assert forked.trajectory.edit == {
        "kind": "message",
        "step": 4,
        "sender": original[3]["sender"],
        "before": original[3]["content"],
        "after": edited,
    }
    # the member the edited message mentions read the edited text, not the original
    reader = original[3]["mentions"][0]
    seen = [o for o in observations(forked.trajectory, reader, "wait_for_mentions") if "EDITED" in o]
    assert seen, f"{reader} never saw the edited message"


def test_a_fork_keeps_who_is_in_a_thread(ws):
    register_tools(ws)
    orchestrator = Script(
        Steps(
            (
                None,
                [
                    call("create_thread", thread_name="private", participant_ids=["w1"]),
                    send("secret for w1", "w1", thread="private"),
                ],
            ),
            (None, call("close_thread", thread_id="private", summary="done")),
            (None, call("submit_answer", answer="ok")),
            ms=300,
        )
    )
    w2 = waiter(1000)
    team = ws.coral(
        "private",
        workers={"w1": {"tools": ["noop"], "model": waiter(1000).name}, "w2": {"tools": ["noop"], "model": w2.name}},
        planner=False,
        models={"orchestrator": orchestrator.name},
        budget_seconds=20,
    )
    first = team.run_sync("Keep a secret.")
    assert first.status == "success"
    orchestrator.fn.done = 2  # the fork goes on with the submission
    w2.views.clear()
    forked = run_sync(ws.fork(first.run_id, step=1))
    assert forked.status == "success"
    private = next(t for t in forked.trajectory.threads if t["id"] == "private")
    assert private["participants"] == [ORC, "w1"]
    assert not any("secret for w1" in v.transcript for v in w2.views)


def test_rebuilt_from_its_acp_card_in_a_fresh_workspace(tmp_path):
    path = tmp_path / "ws"
    ws = tea_notebook.Workspace(path, embedder="hashing")
    paper = paper_team(ws, "card_team")
    rec = ws.agents.get("card_team")
    assert rec.metadata["kind"] == "coral"
    assert set(rec.metadata["config"]["workers"]) == {"w1", "w2"}
    ws.close()

    fresh = tea_notebook.Workspace(path, embedder="hashing")
    try:
        team = kinds.build(fresh, "card_team")
        assert team is not paper.team and team.kind == "coral"
        assert team.member_names() == [ORC, P, "w1", "w2"]
        assert team.budget_seconds == 20 and team.workers["w1"]["agents"] == ["geo"]
        result = team.run_sync(TASK)
        assert result.status == "success" and result.answer == "Paris, Rome"
        assert len(result.trajectory.messages) == 8
        assert [c.agent for c in child(result.trajectory, "w1").children] == ["geo"]
    finally:
        fresh.close()


@pytest.fixture
def shell_ws(ip, tmp_path, monkeypatch):
    """A fresh workspace made current in the in-process shell, no model configured."""
    return magics_workspace(ip, tmp_path, monkeypatch, workspace_path=str(tmp_path / "ws"))


def test_agent_magic_runs_a_coral_team(ip, shell_ws):
    from IPython.core.error import UsageError

    paper = paper_team(shell_ws, "magic_team")
    result = ip.run_cell_magic("agent", "magic_team --kind coral --quiet --out coral_result", TASK)
    assert result.status == "success" and result.answer == "Paris, Rome"
    assert ip.user_ns["coral_result"] is result
    assert len(result.trajectory.messages) == 8
    assert paper.orchestrator.views  # the team's own scripted members ran
    with pytest.raises(UsageError, match="does not apply to a CORAL team"):
        ip.run_cell_magic("agent", "magic_team --kind coral --quiet --tools noop", TASK)
    with pytest.raises(UsageError, match="registered with kind 'coral'"):
        ip.run_cell_magic("agent", "magic_team --kind agent --quiet", TASK)
    runs = ip.run_line_magic("tea", "runs")  # the team's run is one top-level run; its members are nested
    assert [(r["run"], r["agent"], r["status"]) for r in runs] == [(result.run_id, "magic_team", "success")]


# == views =======================================================================================
def test_html_live_view_and_run_listing(ws):
    paper = paper_team(ws)
    result = paper.team.run_sync(TASK)
    assert result.status == "success"
    tr = result.trajectory
    html = tr._repr_mimebundle_()[0]["text/html"]
    assert html.count("class='thread'") == 1
    assert html.count("class='msg") == len(tr.messages) == 8
    assert html.count("class='msg orch'") == 4  # the orchestrator's bubbles
    # the workers' calls of their wrapped agent fold under the message they led to
    assert "1 tool calls" in html and "geo_agent" in html

    view = LiveView(display=False)
    for e in ws.events.events(result.run_id, nested=True):
        view(e)
    live = view.html()
    assert live.count("class='thread'") == html.count("class='thread'")
    assert live.count("class='msg") == html.count("class='msg")
    assert live.count("class='msg orch'") == 4
    assert "1 tool calls" in live

    runs = ws.runs()
    assert [r["id"] for r in runs] == [result.run_id]  # the members and wrapped agents are nested, not listed
    assert runs[0]["agent"] == "team" and runs[0]["status"] == "success"

    # the team takes no steps itself: every header counts its members' (it used to say "0 steps")
    def tree(t: Any) -> int:
        return len(t.steps) + sum(tree(c) for c in t.children)

    total = tree(tr)
    assert not tr.steps and total > 0
    said = f"<span>{total} steps (by sub-agents)</span>"
    assert said in html.split("</div>", 1)[0]  # the first line: the team's header
    assert said in live and said in view.summary().data
    assert view.bundle()._text().endswith(f"{total} steps (by sub-agents)")
    assert ws.db.step_counts([result.run_id]) == {result.run_id: (0, total)}


def test_html_has_a_section_per_thread(ws):
    register_tools(ws)
    orchestrator = Script(
        Steps(
            (
                None,
                [
                    call("create_thread", thread_name="Side Work", participant_ids=["w1"]),
                    send("in side", "w1", thread="side-work"),
                    send("in main", "w1"),
                ],
            ),
            (None, call("submit_answer", answer="ok")),
        )
    )
    team = ws.coral(
        "views",
        workers={"w1": {"tools": ["noop"], "model": waiter(2000).name}},
        planner=False,
        models={"orchestrator": orchestrator.name},
        budget_seconds=20,
    )
    result = team.run_sync("Two threads.")
    assert result.status == "success"
    html = result.trajectory._repr_mimebundle_()[0]["text/html"]
    assert html.count("class='thread'") == 2 and html.count("class='msg") == 2
    assert "thread <b>Side Work</b> · 1 messages" in html and "thread <b>main</b> · 1 messages" in html


# == the session's rules, directly ================================================================
class _Log:
    def __init__(self):
        self.events: list[tuple[str, dict]] = []

    def emit(self, type_: str, data: dict | None = None, step: int | None = None) -> None:
        self.events.append((type_, dict(data or {})))


def session(**options: Any) -> A2ASession:
    s = A2ASession(_Log(), ORC, {ORC: "boss", "a": "worker a", "b": "worker b"}, **options)
    s.create_thread(SYSTEM_SENDER, MAIN_THREAD, [ORC, "a", "b"], thread_id=MAIN_THREAD)
    return s


def test_session_rules():
    s = session(max_messages=5)
    with pytest.raises(A2AError, match="the message is empty"):
        s.send(ORC, "   ", ["a"], MAIN_THREAD)
    with pytest.raises(A2AError, match="mention the agent the message is for"):
        s.send(ORC, "to whom?", [], MAIN_THREAD)
    with pytest.raises(A2AError, match="star rule"):
        s.send("a", "psst @b", [], MAIN_THREAD)
    with pytest.raises(A2AError, match="only information_flow_orchestrator can create threads"):
        s.create_thread("a", "t", ["b"])
    with pytest.raises(A2AError, match="only information_flow_orchestrator can close threads"):
        s.close_thread("a", MAIN_THREAD, "x")
    with pytest.raises(A2AError, match="only information_flow_orchestrator can submit"):
        s.submit("a", "42")
    m = s.send(ORC, "@a and @b: go", [], MAIN_THREAD)  # mentions from the content; the sender dropped
    assert m.mentions == ["a", "b"] and m.seq == 1
    assert s.send("a", "done @information_flow_orchestrator", ["@" + ORC, "a"], MAIN_THREAD).mentions == [ORC]
    t = s.create_thread(ORC, "Deep Dive!", ["a"])
    assert t.id == "deep-dive" and s.create_thread(ORC, "Deep Dive!", ["a"]).id == "deep-dive-2"
    s.stopped("b", "failed")
    with pytest.raises(A2AError, match=r"b \(stopped: failed\) cannot answer any more"):
        s.send(ORC, "b?", ["b"], MAIN_THREAD)
    notes = [m for m in s.messages if m.sender == SYSTEM_SENDER]
    assert [n.content for n in notes] == ["b stopped (status failed) and will not answer further messages."]
    s.send(ORC, "x", ["a"], MAIN_THREAD)
    s.send(ORC, "y", ["a"], MAIN_THREAD)
    with pytest.raises(A2AError, match="cap of 5 messages"):
        s.send(ORC, "z", ["a"], MAIN_THREAD)
    s.submit(ORC, "42")
    with pytest.raises(A2AError, match="the conversation is over"):
        s.send(ORC, "after", ["a"], MAIN_THREAD)
    with pytest.raises(A2AError, match="already submitted"):
        s.submit(ORC, "43")
    kinds_emitted = [k for k, _ in s.log.events]
    assert kinds_emitted.count("message") == len(s.messages) == 5
    assert [d["seq"] for k, d in s.log.events if k == "message"] == [1, 2, 3, 4, 5]


def test_session_waits_deliver_each_message_once():
    async def scenario() -> None:
        s = session()
        s.members[ORC].run_id = "run-o"  # mark running members as they would be
        waiting = asyncio.ensure_future(s.wait("a", 2.0))
        await asyncio.sleep(0.01)
        s.send(ORC, "first", ["a"], MAIN_THREAD)
        s.send(ORC, "second", ["a"], MAIN_THREAD)
        got = await asyncio.wait_for(waiting, 1.0)
        assert got.splitlines() == [
            "New messages:",
            f"#1 [thread main] {ORC} → @a: first",
            f"#2 [thread main] {ORC} → @a: second",
        ]
        assert await s.wait("a", 0.05) == "No new messages mentioning you within 0.05 s."
        s.send("a", "answer", [], MAIN_THREAD)
        got = await s.wait(ORC, 0.5)
        assert got.startswith("New messages:\n#3 [thread main] a → @information_flow_orchestrator: answer\n(")
        s.send(ORC, "for b", ["b"], MAIN_THREAD)
        assert await s.wait(ORC, 0.05) == "No new messages mentioning you within 0.05 s. Not answered yet: b."
        s.close("test over")
        assert await s.wait("b", 5) == "New messages:\n#4 [thread main] information_flow_orchestrator → @b: for b"
        assert await s.wait("b", 5) == "The conversation is over (test over). Stop working."

    run_sync(scenario())
