"""Threads for synchronous work that may never return (environment actions, synchronous tools),
apart from asyncio's default executor. A leaf module: the protocol layer and the environments both
use :data:`ACTION_THREADS`.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import functools
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(eq=False)
class _Job:
    owner: object
    limit: int
    label: str
    fn: Callable[[], Any]
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    started: float = 0.0


class ActionThreads:
    """The threads that run synchronous environment actions, apart from asyncio's default executor.

    Why not ``asyncio.to_thread``: a thread cannot be killed, so an action that outlives its time
    limit (a read blocked on a named pipe, a C call that never returns) keeps its thread after
    ``wait_for`` has given up. On the loop's default executor (``min(32, cores + 4)`` threads: six
    on a two-core machine) a handful of those starve every later ``to_thread`` on that loop: tools,
    sandbox start-up, every other environment. Here instead:

    * one session (one :class:`Environment` instance, the *owner*) holds at most ``limit`` threads
      at once. A call over that waits in line; if none of its session's threads frees up within its
      time limit it is dropped without ever running (never run late, after the agent was told it
      timed out), and the error names the actions holding the threads. A jammed session jams only
      itself;
    * all sessions together hold at most ``max_threads`` threads, started on demand and ended after
      ``idle_seconds`` without work;
    * they are daemon threads: one blocked forever does not hold up interpreter exit, as a blocked
      default-executor thread does (those are joined at exit).
    """

    def __init__(self, max_threads: int = 64, idle_seconds: float = 30.0):
        self.max_threads = max_threads
        self.idle_seconds = idle_seconds
        self._cond = threading.Condition()
        self._waiting: deque[_Job] = deque()
        self._running: set[_Job] = set()
        self._per_owner: dict[object, int] = {}
        self._threads = 0
        self._idle = 0

    def submit(self, owner: object, limit: int, label: str, fn: Callable[[], Any]) -> concurrent.futures.Future:
        """Run ``fn`` on a thread of ``owner``'s share; cancelling the future before it starts
        drops it for good."""
        job = _Job(owner, max(1, limit), label, fn)
        with self._cond:
            self._waiting.append(job)
            ready = sum(1 for j in self._waiting if self._per_owner.get(j.owner, 0) < j.limit)
            if self._idle < ready and self._threads < self.max_threads:
                self._threads += 1
                threading.Thread(target=self._work, name=f"tea-action-{self._threads}", daemon=True).start()
            else:
                self._cond.notify()
        return job.future

    def held_by(self, owner: object) -> list[str]:
        """What ``owner``'s running actions are, and for how long they have run."""
        now = time.monotonic()
        with self._cond:
            jobs = sorted((j for j in self._running if j.owner is owner), key=lambda j: j.started)
            return [f"{j.label} for {now - j.started:.1f} s" for j in jobs]

    def running(self, label: str) -> bool:
        """Whether an action or tool with this ``label`` (``"tool NAME"``) is running now."""
        with self._cond:
            return any(j.label == label for j in self._running)

    @property
    def busy(self) -> int:
        """How many threads are running an action now."""
        with self._cond:
            return len(self._running)

    def _take(self) -> _Job | None:
        """The first waiting job whose owner has a thread to spare (lock held)."""
        for i, job in enumerate(self._waiting):
            if job.future.cancelled() or self._per_owner.get(job.owner, 0) >= job.limit:
                continue
            del self._waiting[i]
            if not job.future.set_running_or_notify_cancel():
                return self._take()
            self._per_owner[job.owner] = self._per_owner.get(job.owner, 0) + 1
            job.started = time.monotonic()
            self._running.add(job)
            return job
        # jobs cancelled while waiting are dropped here, so the line does not grow
        if any(j.future.cancelled() for j in self._waiting):
            self._waiting = deque(j for j in self._waiting if not j.future.cancelled())
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                job = self._take()
                deadline = time.monotonic() + self.idle_seconds
                while job is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._threads -= 1
                        return
                    self._idle += 1
                    self._cond.wait(left)
                    self._idle -= 1
                    job = self._take()
            try:
                job.future.set_result(job.fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                job.future.set_exception(exc)
            finally:
                with self._cond:
                    self._running.discard(job)
                    left_running = self._per_owner[job.owner] - 1
                    if left_running:
                        self._per_owner[job.owner] = left_running
                    else:
                        del self._per_owner[job.owner]
            del job  # a finished action's result is not kept alive by an idle thread


#: the process's threads for synchronous actions and tools (started on first use)
ACTION_THREADS = ActionThreads()
#: synchronous calls of one tool, environment or agent that may run at once
SYNC_THREADS = 8
#: when set (a list), :func:`run_sync_call` appends the future of each thread job it starts: the agent
#: loop keeps them to record what a call cut short by a stop returns later
THREAD_JOBS: contextvars.ContextVar[list[concurrent.futures.Future] | None] = contextvars.ContextVar(
    "tea_thread_jobs", default=None
)


#: how long (s) the loop's thread waits for a synchronous call that returned quickly last time before it
#: awaits it like any other (see :func:`run_sync_call`)
QUICK_WAIT = 0.001
_QUICK: dict[str, bool] = {}  # label -> whether its last call returned within QUICK_WAIT / 2


async def run_sync_call(
    owner: object, limit: int, label: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """``await`` ``fn(*args, **kwargs)`` on :data:`ACTION_THREADS` in ``owner``'s share of at most
    ``limit`` threads, with the caller's context variables. Cancelled (a time limit, a stop) before it
    starts, it never runs."""
    import asyncio  # (imported here: opening a workspace needs no event loop)

    run = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    future = ACTION_THREADS.submit(owner, limit, label, run)
    jobs = THREAD_JOBS.get()
    if jobs is not None:
        jobs.append(future)
    started = time.perf_counter()
    if _QUICK.get(label, False):
        # it returned within QUICK_WAIT / 2 last time: waited for on this thread, which costs a third
        # of the CPU of the loop's wake-up through its self-pipe; past QUICK_WAIT it is awaited as
        # usual, so a stop or a time limit is seen at most QUICK_WAIT later
        try:
            result = future.result(timeout=QUICK_WAIT)
        except concurrent.futures.TimeoutError:
            pass
        else:
            return result
    try:
        result = await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.cancel()
        raise
    if label in _QUICK or len(_QUICK) < 10_000:  # (labels are tool and action names: bounded in practice)
        _QUICK[label] = time.perf_counter() - started < QUICK_WAIT / 2
    return result
