"""Events made by hand, as the runtime would emit them, for feeding a live view or a renderer."""

from __future__ import annotations

import time
from typing import Any

from tea_notebook.runtime.events import Event


def event(type_: str, run_id: str = "r1", step: int | None = None, parent: str | None = None, **data: Any) -> Event:
    """An event of ``type_`` in run ``run_id``, stamped now, with ``data`` as its payload."""
    return Event(
        id=f"e{time.monotonic_ns()}",
        run_id=run_id,
        type=type_,
        time=time.time(),
        data=data,
        step=step,
        parent_id=parent,
    )
