"""The progress of an evaluation: done / correct / errors / cost so far.

In a notebook it is one display updated in place (HTML with a bar, and a text/plain fallback); in a
terminal one line rewritten with ``\\r`` (a line every few tasks when the output is not a terminal).
Updates are throttled so a fast evaluation is not slowed by rendering.
"""

from __future__ import annotations

import html
import sys
import time
from typing import Any, TextIO


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where displays can be updated in place)."""
    if "ipykernel" not in sys.modules:
        return False
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:  # noqa: BLE001 - no IPython
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class _Snapshot:
    """What the display shows (a text/plain and a text/html view of the same numbers)."""

    def __init__(self, progress: "Progress"):
        self.p = progress

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.p.line())

    def __repr__(self) -> str:
        return self.p.line()

    def _repr_html_(self) -> str:
        p = self.p
        total = max(p.total, 1)
        done_w = 100 * p.done / total
        ok_w = 100 * p.correct / total
        err_w = 100 * p.errors / total
        bar = (
            "<div style='display:flex;height:10px;width:320px;background:#eaeef2;border-radius:3px;overflow:hidden'>"
            f"<div style='width:{ok_w:.2f}%;background:#1a7f37'></div>"
            f"<div style='width:{max(done_w - ok_w - err_w, 0):.2f}%;background:#cf222e'></div>"
            f"<div style='width:{err_w:.2f}%;background:#9a6700'></div></div>"
        )
        return f"<div class='tea-eval-progress'>{bar}<code>{html.escape(p.line())}</code></div>"


class Progress:
    """Shows an evaluation's progress. ``mode`` is ``"notebook"``, ``"terminal"``, ``"lines"`` (a
    line every ``every`` tasks) or ``"off"``; ``"auto"`` picks the first that fits."""

    def __init__(
        self,
        name: str,
        total: int,
        *,
        mode: str = "auto",
        model: str = "",
        interval: float = 0.25,
        stream: TextIO | None = None,
        every: int = 10,
    ):
        self.name, self.total, self.model = name, total, model
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "notebook" if in_notebook() else ("terminal" if self.stream.isatty() else "off")
        self.mode, self.interval, self.every = mode, interval, every
        self.done = self.correct = self.errors = self.running = 0
        self.cost = 0.0
        self.note = ""
        self.started = time.monotonic()
        self._last = 0.0
        self._handle = None
        self._printed = 0
        if mode == "notebook":
            from IPython.display import display

            self._handle = display(_Snapshot(self), display_id=True)

    def line(self) -> str:
        """The progress as one line of text."""
        elapsed = time.monotonic() - self.started
        text = (
            f"{self.name}: {self.done}/{self.total} done · {self.correct} correct · {self.errors} errors · "
            f"${self.cost:.4f} · {self.running} running · {elapsed:.1f}s"
        )
        if self.model:
            text += f" · {self.model}"
        if self.note:
            text += f" · {self.note}"
        return text

    def update(
        self,
        *,
        done: int,
        correct: int,
        errors: int,
        cost: float,
        running: int = 0,
        note: str | None = None,
        force: bool = False,
    ) -> None:
        """New numbers; shown now when ``force`` or when ``interval`` has passed."""
        self.done, self.correct, self.errors, self.cost, self.running = done, correct, errors, cost, running
        if note is not None:
            self.note = note
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        self._show()

    def _show(self) -> None:
        if self.mode == "notebook" and self._handle is not None:
            self._handle.update(_Snapshot(self))
        elif self.mode == "terminal":
            self.stream.write("\r" + self.line()[:200] + "\x1b[K")
            self.stream.flush()
        elif (
            self.mode == "lines"
            and self.done != self._printed
            and (self.done - self._printed >= self.every or self.done == self.total)
        ):
            self._printed = self.done
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def close(self) -> None:
        """The final numbers (and a newline after a terminal bar)."""
        self._show()
        if self.mode == "terminal":
            self.stream.write("\n")
            self.stream.flush()
        elif self.mode == "lines" and self._printed != self.done:
            self._printed = self.done
            self.stream.write(self.line() + "\n")


__all__ = ["Progress", "in_notebook"]
