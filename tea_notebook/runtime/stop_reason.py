"""Why a run was interrupted, in the words its record keeps: "stopped by the user" (■, Stop, a
context's ``cancel``), or why the process itself is stopping ("interrupted: the kernel restarted").

A Jupyter restart interrupts the kernel (SIGINT, the same signal as ■) a few milliseconds before it
asks the kernel to shut down; the notebook layer tells this module of the shutdown
(:func:`process_stopping`) and waits a moment on a ■ (:func:`wait_for_process_stop`) before stopping
the run, so that a restart is not recorded as the user's Stop.
"""

from __future__ import annotations

import threading

#: the reason of a run stopped by a person (■, the live view's Stop, ``ctx.cancel.set()``)
STOPPED_BY_USER = "stopped by the user"

_stopping = threading.Event()
_why: list[str] = []


def process_stopping(why: str) -> None:
    """Say that this process is stopping (``why``: "interrupted: the kernel restarted"): every run
    interrupted from now on records it instead of :data:`STOPPED_BY_USER`."""
    _why[:] = [why]
    _stopping.set()


def wait_for_process_stop(timeout: float) -> bool:
    """Wait at most ``timeout`` seconds for :func:`process_stopping`; True when the process is stopping."""
    return _stopping.wait(timeout)


def stop_reason(default: str = STOPPED_BY_USER) -> str:
    """Why a run interrupted now stopped: the process's reason when it is stopping, else ``default``."""
    return _why[0] if _stopping.is_set() and _why else default


__all__ = ["STOPPED_BY_USER", "process_stopping", "stop_reason", "wait_for_process_stop"]
