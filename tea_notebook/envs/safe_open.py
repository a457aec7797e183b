"""Opening paths beneath a run folder without ever leaving it: :mod:`tea_notebook._safe_open`,
re-exported for the environments. The implementation lives below every floor so that runtime/ code
(todo.md, run views) uses the same walk as the files environment."""

from __future__ import annotations

from tea_notebook._safe_open import (
    MAX_DEPTH,
    MAX_LINKS,
    MAX_TURNS,
    MODES,
    Beneath,
    Entry,
    Opened,
    check_kind,
    exists_beneath,
    folder_beneath,
    kind,
    read_beneath,
    write_beneath,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_LINKS",
    "MAX_TURNS",
    "MODES",
    "Beneath",
    "Entry",
    "Opened",
    "check_kind",
    "exists_beneath",
    "folder_beneath",
    "kind",
    "read_beneath",
    "write_beneath",
]
