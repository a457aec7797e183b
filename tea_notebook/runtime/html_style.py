"""What every HTML view of the runtime shares: the ``tea-t`` style sheet and the escapers. It imports
nothing of the package, so the views of steps, contexts and runs (and the live view and the
evolution renderer above them) all draw on it; :mod:`tea_notebook.runtime.render` re-exports it."""

from __future__ import annotations

import html
from typing import Any

CSS = (
    "<style>.tea-t{font-family:system-ui,-apple-system,Segoe UI,sans-serif;font-size:13px;line-height:1.4;"
    "border:1px solid #d0d7de;border-radius:6px;padding:8px 10px;margin:4px 0;max-width:100%}"
    ".tea-t .h{display:flex;gap:10px;flex-wrap:wrap;align-items:baseline}.tea-t .st{font-weight:600}"
    ".tea-t .step{border-left:3px solid #d0d7de;padding:2px 8px;margin:6px 0}"
    ".tea-t .act{margin:3px 0 3px 6px}.tea-t code,.tea-t pre{font-family:ui-monospace,Menlo,monospace;font-size:12px}"
    ".tea-t pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:4px 6px;margin:2px 0;"
    "max-height:24em;overflow:auto}.tea-t .err{color:#cf222e}.tea-t .muted{color:#57606a}"
    ".tea-t details>summary{cursor:pointer}.tea-t .badge{border:1px solid #d0d7de;border-radius:10px;"
    "padding:0 6px;font-size:11px}.tea-t .stage{border:1px solid #d0d7de;border-radius:6px;padding:2px 8px;"
    "margin:6px 0}.tea-t .thread{border:1px solid #d0d7de;border-radius:6px;padding:2px 8px;margin:6px 0}"
    ".tea-t .msg{margin:6px 0;padding:3px 8px;border-radius:6px;background:#f6f8fa}"
    ".tea-t .msg.orch{background:#ddf4ff}</style>"
)
"""The style sheet of every ``tea-t`` view (trajectory, live view, evolution renderer)."""


def esc_str(value: Any) -> str:
    """``str(value)`` as HTML text (None as ``None``, unlike :func:`esc`), quotes escaped."""
    return html.escape(str(value), quote=True)


def esc(value: Any) -> str:
    """``value`` as HTML text (None as nothing), quotes escaped: safe in text and attributes."""
    return html.escape("" if value is None else str(value), quote=True)


__all__ = ["CSS", "esc", "esc_str"]
