"""Task sets shipped with the package.

:func:`sample` is 30 questions in GAIA's format (``metadata.jsonl`` with ``task_id``, ``Question``,
``Level``, ``Final answer``, ``file_name``) over a small local corpus — a lighthouse keeper's log, a
table of planets, a shop's orders as JSON, a recipe — from plain arithmetic (level 1) to sums over a
file (level 3). No network is needed to answer any of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tea_notebook.eval.tasks import Task


def sample_path() -> Path:
    """The folder of the sample set (``metadata.jsonl`` and its attachments), inside the package."""
    return Path(__file__).resolve().parent / "data" / "sample"


def sample() -> "list[Task]":
    """The sample set's 30 tasks (attachments as absolute paths)."""
    from tea_notebook.eval.tasks import load_gaia

    return load_gaia(sample_path())


__all__ = ["sample", "sample_path"]
