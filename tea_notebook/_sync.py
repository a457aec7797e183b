"""Run a coroutine to completion from synchronous code, even inside a running event loop (a Jupyter
cell). The coroutine runs on one long-lived background loop thread; ``asyncio.run`` is never used.
asyncio itself is imported by the first function that needs it (opening a workspace does not).
"""

from __future__ import annotations

import atexit
import sys
import threading
from typing import TYPE_CHECKING, Any, Coroutine, TypeVar

if TYPE_CHECKING:
    import asyncio
    import concurrent.futures

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    import asyncio

    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="tea-sync-loop", daemon=True)
            thread.start()
            _loop = loop
            atexit.register(_shutdown, loop)
        return _loop


def _shutdown(loop: asyncio.AbstractEventLoop) -> None:
    """At exit, stop litellm's logging worker properly (its queue drained, its tasks ended) and
    cancel what else is still pending on the loop, so the interpreter prints neither 'Task was
    destroyed but it is pending' nor a traceback from a task of a closed loop."""
    import asyncio

    async def cancel_all() -> None:
        await _stop_litellm_worker()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    if loop.is_running():
        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout=2)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
        loop.call_soon_threadsafe(loop.stop)


async def _stop_litellm_worker(drain: float = 1.0) -> None:
    """Drain (for at most ``drain`` seconds) and stop litellm's logging worker when it runs on this
    loop. Every litellm call of the library runs on the background loop (see :func:`on_background`),
    so the worker lives there and nowhere else."""
    import asyncio

    module = sys.modules.get("litellm.litellm_core_utils.logging_worker")
    worker = getattr(module, "GLOBAL_LOGGING_WORKER", None)
    if worker is None or getattr(worker, "_bound_loop", None) is not asyncio.get_running_loop():
        return
    try:
        await asyncio.wait_for(worker.flush(), drain)
    except Exception:  # noqa: BLE001 - best effort at exit: a slow callback is dropped, not waited for
        pass
    try:
        await worker.stop()
    except Exception:  # noqa: BLE001
        pass


def exit_first() -> None:
    """Run this module's exit handler before those registered so far (litellm registers its own
    queue flush at import, which would otherwise run first and open a loop of its own)."""
    with _lock:
        loop = _loop
    if loop is not None and not loop.is_closed():
        atexit.unregister(_shutdown)
        atexit.register(_shutdown, loop)


def submit(coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
    """Start ``coro`` on the background loop; the caller waits on the returned future."""
    import asyncio

    return asyncio.run_coroutine_threadsafe(coro, _background_loop())


async def on_background(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on the background loop from whatever loop the caller runs on (directly when it
    is that loop): objects bound to the background loop (a browser session) stay on it."""
    import asyncio

    loop = _background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Wait for ``coro`` on the background loop and return its result (or raise its exception)."""
    import asyncio

    loop = _background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coro.close()
        raise RuntimeError("run_sync was called from the background loop itself; await instead")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()
