"""The A2A message toolkit of CORAL: agents coordinate only by messages in threads.

:class:`A2ASession` is the shared state of one CORAL run — its threads and the message history ℋ —
living on the event loop the team runs on. Every message is stored once, as a ``message`` event
of the CORAL run (sequence number, thread, sender, mentions), so the run's trajectory holds the
whole conversation. The tools (``send_message``, ``wait_for_mentions``, ``create_thread``,
``list_threads``, ``close_thread``, ``list_agents`` and the orchestrator's ``submit_answer``) are
ordinary TCP tools of the toolkit ``a2a``; each finds its session and its caller through the
calling run's context.

Rules the session enforces (not the prompts): the asymmetric constraint (anyone but the
orchestrator may write only to the orchestrator), mentions of agents that exist and are in the
thread, a cap on messages, the orchestrator-only tools, waits that time out with an observation,
and a deadlock note to the orchestrator when every running agent is waiting and nothing is on its way.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tea_notebook.protocol.context import Context, ToolContext
from tea_notebook.protocol.records import ToolkitRecord
from tea_notebook.protocol.tools import make_tool
from tea_notebook.runtime.event_types import MessageEvent, ThreadEvent, ThreadStatus

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost
    from tea_notebook.runtime.runlog import RunLog

SYSTEM_SENDER = "coral"  # the framework's own notes (a worker that stopped); not an agent
MAIN_THREAD = "main"
MAX_WAIT_MS = 300_000
_MENTION = re.compile(r"(?<![\w.])@([A-Za-z_][\w.-]*)")


@dataclass
class Message:
    """One message of ℋ: ``(sender, mentions, content)`` in a thread, numbered in arrival order."""

    seq: int
    thread: str
    sender: str
    mentions: list[str]
    content: str
    time: float
    replayed: bool = False

    def line(self) -> str:
        to = ", ".join(f"@{m}" for m in self.mentions) or "(no mention)"
        return f"#{self.seq} [thread {self.thread}] {self.sender} → {to}: {self.content}"


@dataclass
class Thread:
    """A thread: who is in it, whether it is open, and the summary it was closed with."""

    id: str
    name: str
    participants: list[str]
    status: ThreadStatus = "open"
    summary: str = ""
    created_by: str = ""


@dataclass
class _Member:
    name: str
    description: str
    run_id: str = ""
    seen: int = 0  # messages[:seen] have been checked for mentions of this member
    pending: list[Message] = field(default_factory=list)
    waiting: bool = False
    stopped: str = ""  # the status its run ended with
    wake: asyncio.Event | None = None
    unanswered: int = 0  # mentions received since its last message to the orchestrator


class A2AError(Exception):
    """A refused A2A call; its message is the observation the caller reads."""


class A2ASession:
    """Threads and messages of one CORAL run, and the rules above. All methods run on the team's
    event loop (the agents' tool calls are coroutines there), so no locks are needed."""

    def __init__(
        self,
        log: "RunLog",
        orchestrator: str,
        members: dict[str, str],
        *,
        max_messages: int = 200,
        budget_seconds: float = 1800.0,
        wait_timeout_ms: int = 30000,
    ):
        self.log, self.orchestrator = log, orchestrator
        self.wait_timeout_ms = wait_timeout_ms
        self.members = {name: _Member(name, desc) for name, desc in members.items()}
        self.max_messages, self.budget_seconds = max_messages, budget_seconds
        self.messages: list[Message] = []
        self.threads: dict[str, Thread] = {}
        self.started = time.monotonic()
        self.closed = ""  # why the conversation is over ("" while it goes on)
        self.answer: str | None = None
        self.forced = False  # the answer came after the time budget was spent
        self.notes: list[str] = []  # framework notes for the orchestrator's next wait
        self.by_run: dict[str, str] = {}

    # -- membership ------------------------------------------------------------------------------
    def join(self, member: str, run_id: str) -> None:
        """Tie a member's run to its name (tools find their caller by the run's context)."""
        self.members[member].run_id = run_id
        self.by_run[run_id] = member

    def caller(self, ctx: Context) -> str:
        """The member whose run (or one of whose sub-runs) made a call."""
        c: Context | None = ctx
        while c is not None:
            if c.id in self.by_run:
                return self.by_run[c.id]
            c = c.parent
        raise A2AError("Error: this run is not a member of the CORAL team")

    def stopped(self, member: str, status: str) -> None:
        """A member's run ended; the orchestrator is told when the conversation is still going."""
        m = self.members[member]
        m.stopped = status or "ended"
        m.waiting = False
        if not self.closed and member != self.orchestrator:
            self.note(f"{member} stopped (status {m.stopped}) and will not answer further messages.")
        self._check_deadlock()

    def note(self, text: str) -> None:
        """A framework message to the orchestrator (stored in ℋ like any other)."""
        self._append(SYSTEM_SENDER, [self.orchestrator], text, MAIN_THREAD)

    # -- time ------------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def over_budget(self) -> bool:
        return self.elapsed() >= self.budget_seconds

    def status_line(self) -> str:
        left = max(0.0, self.budget_seconds - self.elapsed())
        line = f"{left:.0f} s of the time budget left; {self.max_messages - len(self.messages)} messages left"
        if self.over_budget():
            line = "THE TIME BUDGET IS SPENT: submit your current best answer now with submit_answer"
        return line

    # -- threads ---------------------------------------------------------------------------------
    def create_thread(self, by: str, name: str, participants: list[str], thread_id: str | None = None) -> Thread:
        """A new thread; the orchestrator is always in it."""
        if by not in (self.orchestrator, SYSTEM_SENDER):
            raise A2AError(f"Error: only {self.orchestrator} can create threads")
        unknown = [p for p in participants if p not in self.members]
        if unknown:
            raise A2AError(
                f"Error: no agent named {', '.join(unknown)} in this team; agents: {', '.join(self.members)}"
            )
        name = " ".join(str(name).split())[:80] or "thread"
        if thread_id is None:
            base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "thread"
            thread_id, n = base, 2
            while thread_id in self.threads:
                thread_id, n = f"{base}-{n}", n + 1
        people = list(dict.fromkeys([self.orchestrator, *participants]))
        thread = Thread(thread_id, name, people, created_by=by)
        self.threads[thread_id] = thread
        self._thread_event(thread)
        return thread

    def close_thread(self, by: str, thread_id: str, summary: str) -> Thread:
        if by != self.orchestrator:
            raise A2AError(f"Error: only {self.orchestrator} can close threads")
        thread = self._thread(thread_id, by)
        thread.status, thread.summary = "closed", summary
        self._thread_event(thread)
        return thread

    def _thread(self, thread_id: str, member: str) -> Thread:
        thread = self.threads.get(thread_id)
        if thread is None:
            raise A2AError(f"Error: no thread {thread_id!r}; threads: {', '.join(self.threads)}")
        if member not in thread.participants and member != SYSTEM_SENDER:
            raise A2AError(f"Error: you are not in thread {thread_id!r}")
        return thread

    def _thread_event(self, t: Thread) -> None:
        self.log.emit(
            "thread",
            ThreadEvent(
                id=t.id,
                name=t.name,
                participants=t.participants,
                status=t.status,
                summary=t.summary,
                by=t.created_by,
                orchestrator=self.orchestrator,
            ),
        )

    # -- messages --------------------------------------------------------------------------------
    def send(self, sender: str, content: str, mentions: list[str], thread_id: str) -> Message:
        """Post a message after checking every rule; raises :class:`A2AError` with the observation."""
        if self.closed:
            raise A2AError(f"Error: the conversation is over ({self.closed}); nothing more can be sent")
        content = str(content).strip()
        if not content:
            raise A2AError("Error: the message is empty")
        mentions = [m.lstrip("@") for m in mentions] or _MENTION.findall(content)
        mentions = list(dict.fromkeys(m for m in mentions if m != sender))
        if sender != self.orchestrator:
            if not mentions:
                mentions = [self.orchestrator]
            others = [m for m in mentions if m != self.orchestrator]
            if others:  # the paper's asymmetric constraint: (a_i → a_j) only when i = o or j = o
                raise A2AError(
                    f"Error: refused — {sender} may message only {self.orchestrator} (CORAL's star rule), not "
                    f"{', '.join(others)}. Tell {self.orchestrator} what you need and it will relay it."
                )
        if not mentions:
            raise A2AError(
                f"Error: mention the agent the message is for (mentions=[...]); agents: {', '.join(self.members)}"
            )
        unknown = [m for m in mentions if m not in self.members]
        if unknown:
            raise A2AError(
                f"Error: no agent named {', '.join(unknown)} in this team; agents: {', '.join(self.members)}"
            )
        thread = self._thread(thread_id, sender)
        if thread.status != "open":
            raise A2AError(f"Error: thread {thread_id!r} is closed")
        outside = [m for m in mentions if m not in thread.participants]
        if outside:
            raise A2AError(
                f"Error: {', '.join(outside)} {'is' if len(outside) == 1 else 'are'} not in thread {thread_id!r}; "
                f"its participants: {', '.join(thread.participants)}"
            )
        gone = [m for m in mentions if self.members[m].stopped]
        if gone:
            raise A2AError(
                f"Error: {', '.join(f'{m} (stopped: {self.members[m].stopped})' for m in gone)} cannot answer any more"
            )
        if len(self.messages) >= self.max_messages:
            raise A2AError(
                f"Error: the team's cap of {self.max_messages} messages is reached; "
                f"{self.orchestrator} must submit its best answer now"
            )
        return self._append(sender, mentions, content, thread_id)

    def _append(
        self,
        sender: str,
        mentions: list[str],
        content: str,
        thread_id: str,
        replayed: bool = False,
        elapsed: float | None = None,
    ) -> Message:
        msg = Message(len(self.messages) + 1, thread_id, sender, mentions, content, time.time(), replayed)
        self.messages.append(msg)
        self.log.emit(
            "message",
            MessageEvent(
                seq=msg.seq,
                thread=msg.thread,
                sender=msg.sender,
                mentions=msg.mentions,
                content=msg.content,
                replayed=replayed,
                elapsed=round(self.elapsed() if elapsed is None else elapsed, 3),
            ),
        )
        if sender in self.members:
            self.members[sender].unanswered = 0
        for name in mentions:
            member = self.members.get(name)
            if member is not None:
                member.unanswered += 1
                if member.wake is not None:
                    member.wake.set()
        return msg

    def replay(self, events: list[dict[str, Any]], delivered: dict[str, set[int]] | None = None) -> None:
        """Start from an earlier run's first events (a fork): its threads as they were (``thread``
        entries: id, name, participants, status, summary) and its messages, stored again and marked
        replayed. Each member is left with the mentions it had not been delivered (``delivered``:
        member -> message numbers), or without it with those that came after its own last message."""
        for e in events:
            if e.get("type") == "thread":
                tid = str(e["id"])
                if tid not in self.threads:
                    self.threads[tid] = Thread(tid, str(e.get("name") or tid), [], created_by=SYSTEM_SENDER)
                t = self.threads[tid]
                t.name = str(e.get("name") or t.name)
                t.participants = [p for p in e.get("participants") or [] if p in self.members] or t.participants
                t.status, t.summary = ("closed" if e.get("status") == "closed" else "open"), str(e.get("summary") or "")
                self._thread_event(t)
                continue
            thread = str(e.get("thread") or MAIN_THREAD)
            if thread not in self.threads:
                self.create_thread(SYSTEM_SENDER, thread, list(self.members), thread_id=thread)
            used = e.get("elapsed")
            used = float(used) if isinstance(used, (int, float)) and not isinstance(used, bool) else None
            sender, mentions, content = str(e.get("sender")), list(e.get("mentions") or []), str(e.get("content", ""))
            self._append(sender, mentions, content, thread, True, used)
            if used is not None:  # the time budget goes on as it stood at the fork point
                self.started = time.monotonic() - used
        for member in self.members.values():
            last_own = max((m.seq for m in self.messages if m.sender == member.name), default=0)
            mine = [m for m in self.messages if member.name in m.mentions]
            if delivered is not None:
                member.pending = [m for m in mine if m.seq not in delivered.get(member.name, set())]
            else:
                member.pending = [m for m in mine if m.seq > last_own]
            member.seen = len(self.messages)
            member.unanswered = len([m for m in mine if m.seq > last_own])

    def _collect(self, member: _Member) -> list[Message]:
        for msg in self.messages[member.seen :]:
            if member.name in msg.mentions:
                member.pending.append(msg)
        member.seen = len(self.messages)
        out, member.pending = member.pending, []
        return out

    async def wait(self, name: str, timeout: float) -> str:
        """Block until a message mentions ``name`` (returns them), the conversation ends, a deadlock
        is found (the orchestrator is told), or ``timeout`` seconds pass (an observation says so)."""
        member = self.members[name]
        if member.wake is None:
            member.wake = asyncio.Event()
        deadline = time.monotonic() + timeout
        while True:
            found = self._collect(member)
            if found:
                return self._delivered(name, found)
            if self.closed:
                return f"The conversation is over ({self.closed}). Stop working."
            if name == self.orchestrator and self.over_budget():
                return self._delivered(name, [])
            left = deadline - time.monotonic()
            if name == self.orchestrator and left > 0:  # wake when the budget runs out, to be told to submit
                left = min(left, self.budget_seconds - self.elapsed() + 0.001)
            if left <= 0:
                quiet = [m.name for m in self.members.values() if m.unanswered and m.name != name and not m.stopped]
                hint = f" Not answered yet: {', '.join(quiet)}." if name == self.orchestrator and quiet else ""
                return f"No new messages mentioning you within {timeout:g} s.{hint}"
            member.wake.clear()
            member.waiting = True
            try:
                if self._check_deadlock() and name == self.orchestrator:
                    return (
                        "Deadlock: every agent of the team is waiting for messages and none is on its way. "
                        "Send an instruction or an inquiry, or submit your answer."
                    )
                try:
                    await asyncio.wait_for(member.wake.wait(), timeout=left)
                except asyncio.TimeoutError:
                    pass
            finally:
                member.waiting = False

    def _delivered(self, name: str, found: list[Message]) -> str:
        lines = [m.line() for m in found]
        if name == self.orchestrator:
            lines.append(f"({self.status_line()})")
        return ("New messages:\n" if found else "") + "\n".join(lines)

    def _check_deadlock(self) -> bool:
        """True when every running member waits with nothing for it; the orchestrator is woken."""
        running = [m for m in self.members.values() if not m.stopped]
        if not running or self.closed:
            return False
        if all(m.waiting for m in running) and not any(self._has_mail(m) for m in running):
            orchestrator = self.members.get(self.orchestrator)
            if orchestrator is not None and orchestrator.wake is not None:
                orchestrator.wake.set()
            return True
        return False

    def _has_mail(self, member: _Member) -> bool:
        return bool(member.pending) or any(member.name in m.mentions for m in self.messages[member.seen :])

    def submit(self, by: str, answer: str) -> None:
        """The orchestrator's final answer: the conversation ends and every waiting agent wakes."""
        if by != self.orchestrator:
            raise A2AError(f"Error: only {self.orchestrator} can submit the answer")
        if self.answer is not None:
            raise A2AError("Error: the answer was already submitted")
        self.answer = str(answer)
        self.forced = self.over_budget()
        self.close("the orchestrator submitted the answer")

    def close(self, reason: str) -> None:
        """End the conversation (idempotent); waits return at once."""
        if not self.closed:
            self.closed = reason
        for m in self.members.values():
            if m.wake is not None:
                m.wake.set()

    # -- what an agent sees ----------------------------------------------------------------------
    def transcript(self, name: str, limit: int = 40) -> str:
        """ℋ as ``name`` sees it: its threads' messages (closed threads by their summary only)."""
        mine = {t.id for t in self.threads.values() if name in t.participants}
        lines = [
            f"Thread {t.id} ({t.name}): participants {', '.join(t.participants)}"
            + (f"; CLOSED, summary: {t.summary}" if t.status == "closed" else "")
            for t in self.threads.values()
            if t.id in mine
        ]
        visible = [m for m in self.messages if m.thread in mine and self.threads[m.thread].status == "open"]
        if len(visible) > limit:
            lines.append(f"({len(visible) - limit} earlier messages not shown)")
        lines += [m.line() for m in visible[-limit:]]
        if name == self.orchestrator:
            lines.append(f"Status: {self.status_line()}")
        return "\n".join(lines) or "(no messages yet)"


# -- the tools (TCP toolkit "a2a") --------------------------------------------------------------
def session_of(ctx: Context) -> A2ASession:
    """The CORAL session a run belongs to (its team's run holds it in the ``a2a`` state)."""
    c: Context | None = ctx
    while c is not None:
        session = c.state("a2a").get("session")
        if session is not None:
            return session
        c = c.parent
    raise A2AError("Error: the A2A tools work only inside a CORAL run")


def _who(tc: ToolContext) -> tuple[A2ASession, str]:
    session = session_of(tc.context)
    return session, session.caller(tc.context)


async def send_message(
    content: str, tc: ToolContext, mentions: list[str] | None = None, thread_id: str = "main"
) -> str:
    """Send a message in a thread to the agents you @mention (workers may write only to the orchestrator).

    Args:
        content: The message, in natural language.
        mentions: Names of the agents the message is for (an @name in the content works too).
        thread_id: The thread to write in (default: main).
    """
    try:
        session, me = _who(tc)
        msg = session.send(me, content, list(mentions or []), thread_id)
    except A2AError as exc:
        return str(exc)
    return f"Sent message #{msg.seq} to {', '.join(msg.mentions)} in thread {msg.thread}."


async def wait_for_mentions(tc: ToolContext, timeout_ms: int | None = None) -> str:
    """Wait until a message mentions you, and return the new messages (or say that none came in time).

    Args:
        timeout_ms: How long to wait, in milliseconds (default: the team's setting; at most 300000).
    """
    try:
        session, me = _who(tc)
    except A2AError as exc:
        return str(exc)
    wait = session.wait_timeout_ms if timeout_ms is None else timeout_ms
    return await session.wait(me, max(0, min(int(wait), MAX_WAIT_MS)) / 1000)


async def create_thread(thread_name: str, participant_ids: list[str], tc: ToolContext) -> str:
    """Create a thread with the given participants (orchestrator only; you are always in it).

    Args:
        thread_name: A short name for the thread.
        participant_ids: Names of the agents to add.
    """
    try:
        session, me = _who(tc)
        thread = session.create_thread(me, thread_name, list(participant_ids))
    except A2AError as exc:
        return str(exc)
    return f"Created thread {thread.id} with {', '.join(thread.participants)}."


async def close_thread(thread_id: str, summary: str, tc: ToolContext) -> str:
    """Close a thread that is done or crowded (orchestrator only); its messages are then hidden, the summary stays.

    Args:
        thread_id: The thread to close.
        summary: What the thread established.
    """
    try:
        session, me = _who(tc)
        session.close_thread(me, thread_id, summary)
    except A2AError as exc:
        return str(exc)
    return f"Closed thread {thread_id}."


async def list_threads(tc: ToolContext) -> str:
    """List the threads you are in, with their participants, status and number of messages."""
    try:
        session, me = _who(tc)
    except A2AError as exc:
        return str(exc)
    lines = []
    for t in session.threads.values():
        if me in t.participants:
            count = sum(1 for m in session.messages if m.thread == t.id)
            lines.append(f"{t.id} ({t.name}): {t.status}, {count} messages, participants {', '.join(t.participants)}")
    return "\n".join(lines) or "(no threads)"


async def list_agents(tc: ToolContext) -> str:
    """List the agents of the team with what each can do."""
    try:
        session, me = _who(tc)
    except A2AError as exc:
        return str(exc)
    return "\n".join(
        f"{m.name}{' (you)' if m.name == me else ''}: {m.description}"
        + (f" [stopped: {m.stopped}]" if m.stopped else "")
        for m in session.members.values()
    )


async def submit_answer(answer: str, tc: ToolContext) -> str:
    """Submit the team's final answer and end the task (orchestrator only; confirm it with the team first).

    Args:
        answer: The final answer, as short as the task asks for.
    """
    try:
        session, me = _who(tc)
        session.submit(me, answer)
    except A2AError as exc:
        return str(exc)
    return "Answer submitted; the task is over."


TOOLS = (send_message, wait_for_mentions, create_thread, list_threads, close_thread, list_agents, submit_answer)
ORCHESTRATOR_ONLY = ("create_thread", "close_thread", "submit_answer")
WORKER_TOOLS = ("send_message", "wait_for_mentions", "list_threads", "list_agents")
ORCHESTRATOR_TOOLS = WORKER_TOOLS + ORCHESTRATOR_ONLY

A2A_RULES = (
    "Agents coordinate only by messages: send_message writes in a thread to the agents you @mention; "
    "wait_for_mentions blocks until a message mentions you. Everyone but the orchestrator may write only to the "
    "orchestrator."
)


def ensure_toolkit(ws: "RunHost") -> None:
    """Register the ``a2a`` toolkit and its tools in TCP (again only when the code changed)."""
    names = []
    for fn in TOOLS:
        # "routing: explicit": offered only to agents that name them (CORAL members), never routed to others
        built = make_tool(fn, toolkit="a2a", category="communication", metadata={"routing": "explicit"})
        current = ws.tools.current(built.record.name)
        if current is None or current.source_hash != built.record.source_hash:
            ws.tools.register(built, note="CORAL A2A toolkit")
        names.append(built.record.name)
    kit = ws.toolkits.current("a2a")
    if kit is None or list(kit.tools) != names:
        ws.toolkits.register(
            ToolkitRecord(name="a2a", description="CORAL's agent-to-agent messages.", tools=names, rules=A2A_RULES)
        )


__all__ = [
    "A2AError",
    "A2ASession",
    "Message",
    "ORCHESTRATOR_TOOLS",
    "Thread",
    "WORKER_TOOLS",
    "ensure_toolkit",
    "session_of",
]
