"""Time limits on a run's tool calls with one timer per run instead of one per call.

:class:`TimeLimits` does what ``asyncio.timeout`` does for each await it limits (the task is cancelled
at the deadline and the cancellation becomes a time-out when it was the limit's own) but keeps one
timer armed at the earliest deadline still open: a call that returns leaves it as it is, and a later
call whose deadline comes after it arms nothing. A run's quick calls each cost a few attribute sets
instead of a timer made and cancelled (``asyncio.timeout`` cost more CPU than the loop's own part of
a quick tool call).
"""

from __future__ import annotations

import asyncio
import math
from typing import Awaitable, TypeVar

T = TypeVar("T")


class TimeLimit:
    """One limited await: its deadline (the event loop's clock), its task, how many cancellations the
    task had pending when it began, and whether the deadline passed while it was open."""

    __slots__ = ("deadline", "task", "cancelling", "expired")

    def __init__(self, deadline: float, task: "asyncio.Task[object]"):
        self.deadline, self.task = deadline, task
        self.cancelling = task.cancelling()
        self.expired = False


class TimeLimits:
    """The open time limits of one run (its tasks share one event loop) and the timer for the
    earliest of them: ``await limits.within(seconds, aw)``; or ``limit = limits.start(seconds)``
    before the await and ``limits.end(limit, ...)`` after it (also when it raised), which says whether
    the limit ended it."""

    def __init__(self) -> None:
        self.open: list[TimeLimit] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._timer_on: asyncio.AbstractEventLoop | None = None

    def start(self, seconds: float) -> TimeLimit:
        """Limit the await that follows in the current task to ``seconds``."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a time limit is started in a task")
        limit = TimeLimit(loop.time() + seconds, task)
        self.open.append(limit)
        if limit.deadline < self._timer_at or self._timer_on is not loop:  # (a timer of a loop gone never fires)
            self._arm(loop, limit.deadline)
        return limit

    def end(self, limit: TimeLimit, cancelled: bool) -> bool:
        """The await of ``limit`` ended (``cancelled``: by a ``CancelledError``); True when that was
        its time limit's doing (the cancellation is taken back; raise a time-out instead), False when
        it ended otherwise (a cancellation from elsewhere, a stop, stays pending: re-raise it)."""
        self.open.remove(limit)
        if not limit.expired:
            return False
        # as asyncio.timeout: its own cancellation is taken back; one from elsewhere stays
        return limit.task.uncancel() <= limit.cancelling and cancelled

    async def within(self, seconds: float, aw: Awaitable[T]) -> T:
        """``await aw`` in this task for at most ``seconds``; past them it is cancelled and
        ``TimeoutError`` raised (``asyncio.timeout``'s rules)."""
        limit = self.start(seconds)
        try:
            result = await aw
        except asyncio.CancelledError:
            if self.end(limit, cancelled=True):
                raise TimeoutError from None
            raise
        except BaseException:
            self.end(limit, cancelled=False)
            raise
        self.end(limit, cancelled=False)
        return result

    def close(self) -> None:
        """No more limits (the run ended): its timer no longer holds the run."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, math.inf

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at, self._timer_on = loop.call_at(at, self._fire), at, loop

    def _fire(self) -> None:
        """Cancel the task of every open limit whose deadline has passed; arm for the next one."""
        self._timer, self._timer_at = None, math.inf
        loop = asyncio.get_running_loop()
        now = loop.time()
        pending = math.inf
        for limit in self.open:
            if limit.expired:
                continue
            if limit.deadline <= now:
                limit.expired = True
                limit.task.cancel()
            else:
                pending = min(pending, limit.deadline)
        if pending < math.inf:
            self._arm(loop, pending)


__all__ = ["TimeLimit", "TimeLimits"]
