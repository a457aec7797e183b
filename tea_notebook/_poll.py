"""Waiting for a descriptor to become readable, at any descriptor number.

``select.select`` refuses a descriptor numbered 1024 or more (``ValueError: filedescriptor out of range``),
which a long-lived kernel that has opened many files reaches; ``poll`` has no such limit.
"""

from __future__ import annotations

import select


def readable(fd: int, timeout: float) -> bool:
    """True when ``fd`` can be read without blocking (data, end of file or a hang-up) within
    ``timeout`` seconds (0: look once)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0.0, timeout) * 1000))
