"""How an agent-loop run stops: what it was running is cancelled, waited for or watched, and every
call the stop cut short ends up recorded on its step — cancelled, never started, or what it returned
(a synchronous tool cannot be killed: its late result is recorded when it comes, so a resume never
runs it a second time). :class:`StoppableRun` is the part of :class:`~tea_notebook.runtime.loop.AgentRun`
that does this.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import time
from typing import TYPE_CHECKING, Any, Awaitable

from tea_notebook.runtime.event_types import ErrorEvent, StopState, ToolResultEvent
from tea_notebook.runtime.inflight import STILL_RUNNING, LateCall, observation_of
from tea_notebook.runtime.runlog import RunInterrupted, RunLog

if TYPE_CHECKING:
    from tea_notebook.runtime.folder_snapshots import FolderSnapshots

#: seconds a stopped run waits for the tools it was running to end (synchronous ones cannot be killed)
STOP_GRACE = 1.0
#: seconds between two looks at a run's stop signal while it waits for a model or a tool
STOP_POLL = 0.05
#: the longest (s) a run goes without giving the event loop a turn while nothing else is ready to run
#: on it (see :meth:`StoppableRun._turn_due`)
TURN_EVERY = 0.005


class _StopWatch:
    """One wait of a run (see :meth:`StoppableRun._cancellable`): cancels ``task`` when ``run``'s stop
    signal is set, at the run's next look (every :data:`STOP_POLL` seconds: one timer per run, armed
    while it waits; no task or timer per wait). Before cancelling it notes the calls in flight and their
    thread jobs (the cancellation unwinds them). Only the innermost watch of a task acts."""

    __slots__ = ("run", "task", "outer", "nested", "fired", "running", "jobs")

    def __init__(self, run: "StoppableRun", task: "asyncio.Task[Any]", outer: "_StopWatch | None"):
        self.run, self.task = run, task
        self.nested: int = 0  # watches of the same task inside this one
        self.outer = outer if outer is not None and outer.task is task else None
        if self.outer is not None:
            self.outer.nested += 1
        self.fired = False
        self.running: dict[str, tuple[str, int]] = {}
        self.jobs: list[concurrent.futures.Future] = []
        run.waits.append(self)
        run.keep_looking()

    def look(self) -> None:
        """Cancel the task if the run was stopped (and no watch of the task inside this one is open)."""
        run = self.run
        if self.fired or self.nested or not run.ctx.cancel.is_set():
            return
        run.stopped_at = run.stopped_at or time.time()
        self.running = dict(run.in_flight)
        self.jobs = [j for call_id in self.running for j in run.thread_jobs.get(call_id, [])]
        self.fired = True
        self.task.cancel()

    def close(self) -> None:
        """Stop watching."""
        self.run.waits.remove(self)
        if self.outer is not None:
            self.outer.nested -= 1


def _drop(aw: Awaitable[Any]) -> None:
    """Cancel what was never awaited: nothing of a coroutine runs (and no "never awaited" warning)."""
    if asyncio.iscoroutine(aw):
        aw.close()
    else:
        asyncio.ensure_future(aw).cancel()


#: the innermost stop watch of the running task (see :meth:`StoppableRun._cancellable`)
_WATCH: contextvars.ContextVar[_StopWatch | None] = contextvars.ContextVar("tea_stop_watch", default=None)


class StoppableRun(RunLog):
    """A run's log with its calls in flight and what a stop does to them (see the module's docstring)."""

    #: the run folder's snapshots (a late result records what its call wrote there)
    snapshots: "FolderSnapshots"

    def start_stopping(self) -> None:
        """Nothing running yet, nothing stopped."""
        #: tool calls running now, by call id: ``(name, step)`` (a stop names those still running)
        self.in_flight: dict[str, tuple[str, int]] = {}
        self.reported_stops: set[str] = set()  # call ids already reported as cut short by a stop
        #: the worker-thread jobs of the calls running now, by call id (a stop records what they return)
        self.thread_jobs: dict[str, list[concurrent.futures.Future]] = {}
        #: when the run was stopped (``time.time()``), once it was
        self.stopped_at: float | None = None
        #: when (the event loop's clock) the run last gave the loop a turn (see :meth:`_turn_due`)
        self.turned = 0.0
        #: the run's waits open now (see :meth:`_cancellable`) and its timer for the next look at them
        self.waits: list[_StopWatch] = []
        self.looking: asyncio.TimerHandle | None = None
        self.looking_on: asyncio.AbstractEventLoop | None = None

    def keep_looking(self) -> None:
        """Make sure the run looks (:meth:`_look`) within :data:`STOP_POLL` seconds."""
        loop = asyncio.get_running_loop()
        if self.looking is None or self.looking_on is not loop:  # (a timer of a loop gone never fires)
            self.looking, self.looking_on = loop.call_later(STOP_POLL, self._look), loop

    def stop_looking(self) -> None:
        """The run has ended: no more looks."""
        if self.looking is not None:
            self.looking.cancel()
            self.looking = None

    def _look(self) -> None:
        """Every :data:`STOP_POLL` seconds while the run waits for something (or :meth:`_looked` asks
        for more): each open wait looks at the stop signal."""
        self.looking = None
        for watch in list(self.waits):
            watch.look()
        if self._looked() or self.waits:
            self.keep_looking()

    def _looked(self) -> bool:
        """Called at each look of :meth:`_look` (a hook): whether to look again even with no wait open."""
        return False

    async def _cancellable(self, aw: Awaitable[Any]) -> Any:
        """Await ``aw`` in this task while watching the stop signal; cancelling the run cancels it too.

        No task or timer is started per wait: a :class:`_StopWatch` looks at the signal at the run's
        looks, every :data:`STOP_POLL` seconds, and when it is set cancels this task (only the innermost
        watch of a task does: a sub-agent's run awaited inside a tool call handles its own stop first)."""
        if self.ctx.cancel.is_set():
            self.stopped_at = self.stopped_at or time.time()
            _drop(aw)
            await self._after_stop(dict(self.in_flight))
            raise RunInterrupted("the run was stopped")
        task = asyncio.current_task()
        assert task is not None  # awaited, so in a task
        watch = _StopWatch(self, task, _WATCH.get())
        token = _WATCH.set(watch)
        started = False
        try:
            # a turn of the event loop before and after (when due), also when it returns without
            # suspending: runs that take turns (a CORAL team's members) interleave the same way in a
            # run and its fork
            if self._turn_due():
                await asyncio.sleep(0)
            started = True
            result = await aw
        except BaseException as exc:
            if not started:
                _drop(aw)
            if not watch.fired:
                if isinstance(exc, asyncio.CancelledError):  # cancelled from outside (the run's task)
                    self.stopped_at = self.stopped_at or time.time()
                    running = dict(self.in_flight)
                    if running:
                        self._report_stopped(running)
                raise
            task.uncancel()
            await self._after_stop(watch.running, watch.jobs)
            raise RunInterrupted("the run was stopped") from None
        finally:
            watch.close()
            _WATCH.reset(token)
        if watch.fired:  # what it awaited took the cancellation and returned anyway
            task.uncancel()
            await self._after_stop(watch.running, watch.jobs)
            raise RunInterrupted("the run was stopped")
        if self._turn_due():
            await asyncio.sleep(0)
        return result

    def _turn_due(self) -> bool:
        """Whether to give the event loop a turn (``await asyncio.sleep(0)``) now: when anything else
        is ready to run on it (another run taking turns with this one: they interleave the same way in
        a run and its fork), and at least every :data:`TURN_EVERY` seconds (its timers and I/O: a live
        view, a stop sent to the kernel). With nothing else ready a turn would run this task first
        again, so the order of what runs is the same without it; it is skipped (an event-loop
        iteration costs more than a quick step's own bookkeeping)."""
        loop = asyncio.get_running_loop()
        # asyncio's queue of callbacks ready to run (CPython's event loops; another loop: always a turn)
        ready = getattr(loop, "_ready", None)
        now = loop.time()
        if ready is None or ready or now - self.turned >= TURN_EVERY:
            self.turned = now
            return True
        return False

    async def _after_stop(
        self, running: dict[str, tuple[str, int]], jobs: list[concurrent.futures.Future] | None = None
    ) -> None:
        """The run was stopped and what it awaited cancelled (in-process async tools are cancelled,
        sandboxed ones killed): wait up to :data:`STOP_GRACE` seconds for synchronous tools, which see
        ``ToolContext.cancelled`` and should return, then say in the trajectory which tools were
        running and which still are."""
        if jobs is None:
            jobs = [j for call_id in running for j in self.thread_jobs.get(call_id, [])]
        deadline = time.monotonic() + STOP_GRACE
        while jobs and time.monotonic() < deadline and not all(j.done() for j in jobs):
            await asyncio.sleep(0.02)
        if running:
            self._report_stopped(running)

    def _report_stopped(self, running: dict[str, tuple[str, int]]) -> None:
        """One ``tool_result`` per tool call the stop cut short, and an ``error`` event naming them
        (calls that ended and reported it themselves meanwhile are left out). A call whose thread
        ended meanwhile has what it returned recorded; one whose thread still runs is watched
        (:data:`~tea_notebook.runtime.inflight.STILL_RUNNING`) and its result recorded when it comes."""
        running = {k: v for k, v in running.items() if k not in self.reported_stops}
        self.reported_stops.update(running)
        if not running:
            return
        stopped_at = self.stopped_at or time.time()
        names_still: set[str] = set()
        for call_id, (name, step) in running.items():
            jobs = self.thread_jobs.pop(call_id, [])
            if any(not j.done() for j in jobs):
                names_still.add(name)
                self._watch_late(LateCall(self.run_id, call_id, name, step, stopped_at, jobs))
                continue
            late = LateCall(self.run_id, call_id, name, step, stopped_at, jobs)
            if jobs:  # its thread ended within the grace: what it returned (or that it never started)
                self._late_ended(late)
            else:
                self._record_unfinished(call_id, name, step, "stopped")
        tools = sorted({name for name, _ in running.values()})
        still_running = sorted(names_still)
        message = f"stopped while running {', '.join(tools)}" + (
            f"; still running: {', '.join(still_running)} (what it returns is recorded when it does)"
            if still_running
            else "; none of them is still running"
        )
        self.emit(
            "error", ErrorEvent(kind="tools_interrupted", message=message, tools=tools, still_running=still_running)
        )

    def _watch_late(self, late: LateCall) -> None:
        """Say that ``late`` still runs (a synchronous tool cannot be killed) and record what it returns
        on its step when it does, from the thread it ends in."""
        result = ToolResultEvent(
            id=late.call_id,
            name=late.name,
            ok=False,
            error_type="Interrupted",
            observation=(
                f"Error: {late.name} was interrupted when the run was stopped; it is still running (a synchronous "
                "tool that did not check its cancel flag): what it returns is recorded here when it does"
            ),
            latency=None,
            stop_state="running",
        )
        self.emit("tool_result", result, late.step)
        STILL_RUNNING.watch(late, self._late_ended)

    def _record_unfinished(self, call_id: str, name: str, step: int, state: StopState) -> None:
        """Record that a call cut short by the stop ended without a result (``stopped``: cancelled) or
        never began (``not_started``): a resumed run runs it."""
        words = "it never started" if state == "not_started" else "it was stopped"
        result = ToolResultEvent(
            id=call_id,
            name=name,
            ok=False,
            error_type="Interrupted",
            observation=f"Error: {name} was interrupted when the run was stopped; {words}",
            latency=None,
            stop_state=state,
        )
        self.emit("tool_result", result, step, durable=True)

    def _late_ended(self, late: LateCall) -> None:
        """Record on its step what a call cut short by the stop returned, and how long after the stop:
        a resumed run takes it as the call's result (the call is not run again)."""
        if late.futures[-1].cancelled():
            self._record_unfinished(late.call_id, late.name, late.step, "not_started")
            return
        observation, after = observation_of(late.name, late.futures[-1]), round(late.after, 3)
        result = ToolResultEvent(
            id=late.call_id,
            name=late.name,
            ok=False,
            error_type="Interrupted",
            observation=f"Error: {late.name} was interrupted when the run was stopped; it returned {after:.1f} s "
            f"after the stop: {observation}",
            latency=None,
            returned=observation,
            late=after,
        )
        changed = self.snapshots.changes(self.ws)  # what it wrote in the run folder since the stop
        if changed:
            result["folder"] = changed
        self.emit("tool_result", result, late.step, durable=True)


__all__ = ["STOP_GRACE", "StoppableRun"]
