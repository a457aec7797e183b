"""Tool calls a stop cut short that still run in this process, and the late results they record.

A synchronous tool runs in a worker thread, and a thread cannot be killed: when a run is stopped
while one runs, the call goes on. What it returns is recorded on the stopped step when it comes (a
``tool_result`` with ``returned`` and ``late``), so no side effect lands unrecorded, and a resume of
the run waits for it (:meth:`StillRunning.wait`) instead of running the call a second time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger(__name__)


@dataclass(eq=False)
class LateCall:
    """One call of a stopped run still running in a worker thread of this process."""

    run_id: str
    call_id: str
    name: str
    step: int
    stopped_at: float
    futures: list[concurrent.futures.Future]
    recorded: threading.Event = field(default_factory=threading.Event)

    @property
    def after(self) -> float:
        """Seconds since the stop."""
        return time.time() - self.stopped_at

    def describe(self) -> str:
        """``call ID (NAME) of step N of run RUN``."""
        return f"call {self.call_id} ({self.name}) of step {self.step} of run {self.run_id}"


def observation_of(name: str, future: concurrent.futures.Future) -> str:
    """What a finished thread job gives the model: its value as text, or the error it raised."""
    from tea_notebook.protocol.registry import InvokeResult

    if future.cancelled():
        return f"Error: {name} never started"
    exc = future.exception()
    if exc is not None:
        return InvokeResult(name, False, error={"type": type(exc).__name__, "message": str(exc)}).to_observation()
    return InvokeResult(name, True, future.result()).to_observation()


class StillRunning:
    """The calls cut short by a stop that still run in this process, by ``(run id, call id)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[tuple[str, str], LateCall] = {}

    def watch(self, call: LateCall, record: Callable[[LateCall], None]) -> None:
        """Keep ``call`` until its thread jobs end, then ``record(call)`` (in the thread that ends
        last: it records what the call returned) and forget it."""
        with self._lock:
            self._calls[(call.run_id, call.call_id)] = call
        left = [len(call.futures)]

        def ended(_future: concurrent.futures.Future) -> None:
            with self._lock:
                left[0] -= 1
                if left[0]:
                    return
            try:
                record(call)
            except Exception as exc:  # noqa: BLE001 - the workspace may be closed by now; a thread must not die noisily
                log.warning("could not record what %s returned after the stop: %s", call.describe(), exc)
            finally:
                with self._lock:
                    self._calls.pop((call.run_id, call.call_id), None)
                call.recorded.set()

        for future in call.futures:
            future.add_done_callback(ended)

    def get(self, run_id: str, call_id: str) -> LateCall | None:
        """The call if it still runs in this process (its late result not recorded yet)."""
        with self._lock:
            return self._calls.get((run_id, call_id))

    async def wait(self, calls: list[LateCall], timeout: float) -> list[LateCall]:
        """Wait up to ``timeout`` seconds for ``calls`` to return and their results to be recorded;
        the calls still running then."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            left = [c for c in calls if not c.recorded.is_set()]
            if not left or time.monotonic() >= deadline:
                return left
            await asyncio.sleep(0.02)


#: the calls of stopped runs still running in this process
STILL_RUNNING = StillRunning()

__all__ = ["STILL_RUNNING", "LateCall", "StillRunning", "observation_of"]
