"""A synchronous tool that returned quickly last time is waited for on the loop's thread for at most
``QUICK_WAIT`` (issue 32: the loop's wake-up through its self-pipe cost more than the tool), and
awaited like any other past that: a call that turns slow blocks the loop no longer than that, and a
failure, a time limit and a stop behave as before."""

from __future__ import annotations

import asyncio
import time

from tea_notebook._threads import QUICK_WAIT


def test_a_quick_tool_that_turns_slow_blocks_the_loop_no_longer_than_the_quick_wait(ws):
    delays = [0.0, 0.0, 1.0, 0.0]

    @ws.tools.tool
    def step(i: int) -> int:
        """Take delays[i] seconds."""
        time.sleep(delays[i])
        if i == 3:
            raise ValueError("broken on purpose")
        return i

    async def main() -> tuple[list, float]:
        gaps: list[float] = []

        async def ticker() -> None:
            last = time.perf_counter()
            while True:
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        ticking = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.02)
        results = [await ws.tools.ainvoke("step", {"i": i}) for i in range(4)]
        ticking.cancel()
        return results, max(gaps)

    results, longest_gap = asyncio.run(main())
    assert [r.value for r in results[:3]] == [0, 1, 2]
    assert not results[3].ok and results[3].error["type"] == "ValueError"  # a failure comes back as before
    # the slow call was awaited after QUICK_WAIT, not waited for on the loop's thread for its second
    assert QUICK_WAIT < 0.01 and longest_gap < 0.5


def test_a_time_limit_still_cuts_a_call_short_after_quick_ones(ws):
    @ws.tools.tool
    def nap(seconds: float) -> float:
        """Sleep."""
        time.sleep(seconds)
        return seconds

    async def main() -> float:
        for _ in range(3):
            await ws.tools.ainvoke("nap", {"seconds": 0.0})
        started = time.perf_counter()
        try:
            await asyncio.wait_for(ws.tools.ainvoke("nap", {"seconds": 1.0}), 0.1)
        except asyncio.TimeoutError:
            return time.perf_counter() - started
        raise AssertionError("the time limit did not cut the call short")

    assert asyncio.run(main()) < 0.5
