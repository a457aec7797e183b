"""The loop's own per-step costs cut without changing what it does (issue 32): one timer per run for
the tools' time limits (:class:`TimeLimits`, not an ``asyncio.timeout`` per call) and for the stop
watch and the slow-tool commit, a turn of the event loop only when something else is ready to run (or
every ``TURN_EVERY``), and the history's size kept as a running total."""

from __future__ import annotations

import asyncio
import time

import pytest

from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.runtime import stopping
from tea_notebook.runtime.time_limits import TimeLimits


def test_a_time_limit_cuts_a_slow_await_short_after_quick_ones_with_one_timer():
    limits = TimeLimits()
    timers: list[float] = []

    async def main() -> float:
        loop = asyncio.get_running_loop()
        call_at = loop.call_at

        def counted(when, callback, *args, **kwargs):
            timers.append(when)
            return call_at(when, callback, *args, **kwargs)

        loop.call_at = counted  # type: ignore[method-assign]
        for i in range(50):
            assert await limits.within(5.0, asyncio.sleep(0, result=i)) == i
        assert len(timers) == 1  # the first call's timer serves the later ones (their deadlines come after)
        started = time.perf_counter()
        with pytest.raises(TimeoutError):
            await limits.within(0.1, asyncio.sleep(5))
        return time.perf_counter() - started

    took = asyncio.run(main())
    assert 0.09 < took < 2.0
    assert limits.open == []


def test_a_cancellation_from_elsewhere_is_not_taken_for_a_time_out():
    limits = TimeLimits()

    async def main() -> None:
        async def limited() -> None:
            await limits.within(0.05, asyncio.sleep(5))

        task = asyncio.ensure_future(limited())
        await asyncio.sleep(0.01)
        task.cancel()  # a stop, before the limit
        with pytest.raises(asyncio.CancelledError):
            await task

        async def both() -> None:  # the limit passes and the task is cancelled from elsewhere too
            limit = limits.start(0.0)
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                assert not limits.end(limit, cancelled=True)  # the other cancellation stays: not a time-out
                raise

        task = asyncio.ensure_future(both())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert limits.open == []


def test_a_time_limit_still_fires_on_a_second_event_loop():
    limits = TimeLimits()

    async def quick() -> None:
        await limits.within(60.0, asyncio.sleep(0))  # leaves its timer on a loop that is closed next

    async def slow() -> None:
        await limits.within(0.05, asyncio.sleep(5))

    asyncio.run(quick())
    with pytest.raises(TimeoutError):
        asyncio.run(slow())


def test_limits_of_concurrent_tasks_each_end_their_own_await():
    limits = TimeLimits()

    async def main() -> list:
        async def one(seconds: float, nap: float) -> str:
            try:
                await limits.within(seconds, asyncio.sleep(nap))
            except TimeoutError:
                return "timed out"
            return "done"

        return await asyncio.gather(one(0.05, 1.0), one(1.0, 0.1), one(0.2, 1.0), one(2.0, 0.0))

    assert asyncio.run(main()) == ["timed out", "done", "timed out", "done"]


def test_a_run_that_never_waits_still_gives_the_event_loop_a_turn(ws):
    """A scripted model and a quick synchronous tool never suspend the run once the tool is known to be
    quick: with nothing else ready it skips the turns, yet the loop's timers still run at least every
    TURN_EVERY (a live view, a stop sent to the kernel)."""

    @ws.tools.tool
    def quick(n: int) -> int:
        """Return n."""
        return n

    script = ScriptedModel([call("quick", n=i) for i in range(200)] + [call("done", success=True, text="ok")])
    agent = ws.agent("q", model=script.name, tools=["quick"], max_steps=210, memory_budget=10**9)
    step_at: dict[int, float] = {}
    ws.events.subscribe(lambda e: step_at.setdefault(e.step, time.perf_counter()) if e.type == "step" else None)

    async def main() -> tuple[bool, list[float]]:
        ticks: list[float] = []

        async def ticker() -> None:
            while True:
                await asyncio.sleep(0.001)
                ticks.append(time.perf_counter())

        ticking = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.01)
        result = await agent.run("count")
        ticking.cancel()
        return result.success, ticks

    success, ticks = asyncio.run(main())
    assert success
    # from step 20 on nothing suspends the run: without a turn now and then the ticker would not run at all
    begin, end = step_at[20], step_at[200]
    assert end - begin > 4 * stopping.TURN_EVERY, "too quick to tell"
    assert sum(1 for t in ticks if begin < t < end) >= 2


def test_memory_folds_at_the_same_steps_with_the_running_total(ws):
    @ws.tools.tool
    def read(n: int) -> str:
        """Read a long page."""
        return f"page {n}: " + "words " * 300

    script = ScriptedModel([call("read", n=i) for i in range(12)] + [call("done", success=True, text="ok")])
    agent = ws.agent("r", model=script.name, tools=["read"], max_steps=20, memory_budget=1200, keep_recent_steps=2)
    result = agent.run_sync("read them all")
    assert result.success
    folds = [e for e in ws.events.events(result.run_id) if e.type == "memory_written" and not e.data.get("merged")]
    # each step renders ~190 tokens (a 600-character result); over 1,200 tokens the oldest steps are folded,
    # keeping the 2 most recent: as the sum of every step's size each step did
    assert folds and all(f.data["folded_steps"] for f in folds)
    sizes: dict[int, int] = {}
    for e in ws.events.events(result.run_id):
        if e.type == "step" and e.step is not None:
            from tea_notebook.runtime.steps import StepRecord

            sizes[e.step] = StepRecord.from_event(e.step, e.data).size()
    live: list[int] = []
    expected: list[list[int]] = []
    for step in sorted(sizes):
        live.append(step)
        if sum(sizes[s] for s in live) > 1200 and live[:-2]:
            expected.append(live[:-2])
            live = live[-2:]
    assert [f.data["folded_steps"] for f in folds] == expected
