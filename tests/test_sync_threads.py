"""Synchronous tools that never return cannot starve the process (issue 10, finding 8): they run on
a bounded pool of their own (``tea_notebook._threads``), a share per tool, not on asyncio's default
executor, whose handful of threads every ``to_thread`` of the loop needs."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from tea_notebook._threads import SYNC_THREADS


def test_sync_tools_stuck_past_their_timeout_cannot_starve_other_calls(ws):
    release = threading.Event()
    started: list[int] = []

    @ws.tools.tool
    def stuck(x: int) -> int:
        """Block until released (a read of a pipe nobody writes, a C call that never returns)."""
        started.append(x)
        release.wait(30)
        return x

    @ws.tools.tool
    def quick(x: int) -> int:
        """Return x."""
        return x

    async def main() -> tuple:
        for i in range(SYNC_THREADS + 4):  # more stuck calls than the tool's share of threads
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ws.tools.ainvoke("stuck", {"x": i}), 0.2)
        t0 = time.monotonic()
        other = await asyncio.wait_for(ws.tools.ainvoke("quick", {"x": 7}), 5)
        default_pool = await asyncio.wait_for(asyncio.to_thread(lambda: 3), 5)
        return other, default_pool, time.monotonic() - t0

    try:
        other, default_pool, took = asyncio.run(main())
    finally:
        release.set()
    assert other.ok and other.value == 7 and default_pool == 3 and took < 2
    # the calls over the tool's share were dropped when their time ran out: they never ran late
    time.sleep(0.3)
    assert len(started) == SYNC_THREADS
