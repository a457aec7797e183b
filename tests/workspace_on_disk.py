"""A workspace opened on a folder of the test's choosing (lexical hashing embedder), and the hash of a
file in it, for the tests of what the store keeps on disk."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import tea_notebook


def make_ws(path: Path, **kw: Any) -> tea_notebook.Workspace:
    """The workspace at ``path`` (made when missing), with the hashing embedder unless ``kw`` names one."""
    kw.setdefault("embedder", "hashing")
    return tea_notebook.Workspace(path, **kw)


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's bytes, in hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
