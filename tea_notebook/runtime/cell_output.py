"""Output that changes after its cell has ended: a display updated from another thread (a background
run's view, a handle's status line) must go out as a message of the cell that made it, or the front
end would file it under whichever cell runs now. IPython is imported only when asked for."""

from __future__ import annotations

from typing import Any


def display_parent() -> Any:
    """The display publisher and the parent header of the message being handled now (the cell that
    is running), or None outside an ipykernel."""
    try:
        from IPython import get_ipython

        pub = getattr(get_ipython(), "display_pub", None)
    except Exception:  # noqa: BLE001 - no IPython
        return None
    if pub is None or not hasattr(pub, "set_thread_parent"):
        return None
    return pub, dict(pub.parent_header or {})


class as_message_of:
    """Within the block, this thread's display messages carry ``parent`` (see :func:`display_parent`)."""

    def __init__(self, parent: Any):
        self.parent, self.token = parent, None

    def __enter__(self) -> None:
        if self.parent is not None and self.parent[1]:
            pub, header = self.parent
            self.token = pub.set_thread_parent({"header": header})

    def __exit__(self, *exc: object) -> None:
        if self.token is not None:
            self.parent[0].reset_thread_parent(self.token)
