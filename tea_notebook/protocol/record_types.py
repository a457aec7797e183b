"""The record types of the registries named by kind, and the content hash their versions are compared by,
without importing them: :mod:`tea_notebook.protocol.records` (and pydantic with it) loads when a record
is first made, validated or read, not when a workspace opens its registries."""

from __future__ import annotations

import hashlib
import importlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tea_notebook.protocol.records import Record

#: each registry kind (the ``KIND`` of its record class) and the class in ``protocol/records.py`` that holds it
RECORD_CLASSES = {
    "tool": "ToolRecord",
    "toolkit": "ToolkitRecord",
    "environment": "EnvironmentRecord",
    "agent": "AgentRecord",
    "memory": "MemoryRecord",
    "experience": "ExperienceRecord",
}


def checked_kind(kind: str) -> str:
    """``kind`` when it names a record type; a ValueError naming the kinds otherwise."""
    if kind not in RECORD_CLASSES:
        raise ValueError(f"no record type of kind {kind!r}; the kinds are {', '.join(RECORD_CLASSES)}")
    return kind


def record_class(kind: str) -> type[Record]:
    """The record class of registry ``kind`` (``"tool"`` → ``ToolRecord``), imported on this first need."""
    records = importlib.import_module("tea_notebook.protocol.records")
    cls: type[Record] = getattr(records, RECORD_CLASSES[checked_kind(kind)])
    return cls


def content_hash(content: dict[str, Any]) -> str:
    """sha256 of a record's content as canonical JSON (what versions are compared by)."""
    blob = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
