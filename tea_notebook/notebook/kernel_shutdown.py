"""Tell the runs of a Jupyter kernel that the kernel is restarting or shutting down, so that a run it
interrupts records "interrupted: the kernel restarted" rather than "stopped by the user".

Jupyter's restart (and shutdown) interrupts the kernel before it sends the shutdown request: the ■
signal arrives first. :func:`watch_kernel_shutdown` wraps the kernel's ``do_shutdown`` (run on the
control thread, while a cell still runs) to set the reason; :data:`STOP_GRACE` is how long a cell's
■ waits for it before stopping the run.
"""

from __future__ import annotations

from typing import Any

from tea_notebook.runtime.stop_reason import process_stopping, wait_for_process_stop

#: seconds a ■ waits for a shutdown request that may follow it (a restart sends it milliseconds later)
STOP_GRACE = 0.25


def watch_kernel_shutdown(ip: Any) -> bool:
    """Wrap the shell's kernel's ``do_shutdown`` once (a Jupyter kernel only); True when it is watched."""
    kernel = getattr(ip, "kernel", None)
    original = getattr(kernel, "do_shutdown", None)
    if original is None or getattr(original, "tea_watched", False):
        return original is not None

    def do_shutdown(restart: bool) -> Any:
        process_stopping("interrupted: the kernel restarted" if restart else "interrupted: the kernel shut down")
        return original(restart)

    do_shutdown.tea_watched = True  # type: ignore[attr-defined]
    kernel.do_shutdown = do_shutdown
    return True


def after_interrupt() -> None:
    """Wait (at most :data:`STOP_GRACE` s) for a shutdown request that may follow a ■, before the run stops."""
    wait_for_process_stop(STOP_GRACE)


__all__ = ["STOP_GRACE", "after_interrupt", "watch_kernel_shutdown"]
