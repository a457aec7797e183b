"""Snapshots of a run's folder, step by step, so a fork or resume at step N finds the folder as it
was after step N.

After each step the folder is walked without following links; only files whose size or
modification time changed are read and hashed again, and each content is kept once by its sha256
(``Database.put_file_blobs``). The step event records what changed (``folder``: ``path -> sha256``,
``None`` for a deleted file, or a marker for a file not kept). A fork rebuilds the manifest of its
source up to the fork step from those events and writes the files into its own folder.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tea_notebook._safe_open import read_beneath, write_beneath

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost

SIZE_CAP = 16 * 1024 * 1024
LINK = "!link"
TOO_LARGE = "!too-large"
NOT_KEPT = (LINK, TOO_LARGE)


@dataclass
class FolderSnapshots:
    """What one run's folder held at its last snapshot: ``path -> (size, mtime_ns, sha256 or marker)``."""

    folder: Path
    seen: dict[str, tuple[int, int, str]] = field(default_factory=dict)

    def changes(self, ws: "RunHost") -> dict[str, str | None]:
        """Walk the folder, keep new contents in the store and return what changed since the last call."""
        now: dict[str, tuple[int, int, str]] = {}
        fresh: dict[str, bytes] = {}
        for rel, st in _walk(self.folder):
            key = (st.st_size, st.st_mtime_ns)
            old = self.seen.get(rel)
            if old is not None and old[:2] == key:
                now[rel] = old
                continue
            now[rel] = (*key, self._digest(rel, st, fresh))
        changed: dict[str, str | None] = {
            rel: entry[2] for rel, entry in now.items() if self.seen.get(rel, (0, 0, ""))[2] != entry[2]
        }
        changed.update({rel: None for rel in self.seen if rel not in now})
        ws.db.put_file_blobs(fresh)
        self.seen = now
        return changed

    def _digest(self, rel: str, st: os.stat_result, fresh: dict[str, bytes]) -> str:
        if stat.S_ISLNK(st.st_mode):
            return LINK  # never read through: a link the sandbox planted may lead anywhere
        if st.st_size > SIZE_CAP:
            return TOO_LARGE
        try:
            data = read_beneath(self.folder, rel, SIZE_CAP)
        except Exception:  # replaced by a link or grown past the cap while we looked
            return LINK
        if data is None:
            return LINK
        digest = hashlib.sha256(data).hexdigest()
        fresh[digest] = data
        return digest


def _walk(root: Path) -> Iterable[tuple[str, os.stat_result]]:
    """Files and links beneath ``root`` with their ``lstat``, links never followed (a stack, not
    recursion: a sandbox may nest folders deeper than Python's recursion limit)."""
    pending: list[tuple[str, str]] = [(str(root), "")]
    while pending:
        folder, prefix = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:  # gone, or a path too long to open: nothing of it is kept
            continue
        for entry in entries:
            rel = prefix + entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:  # deleted while we walked
                continue
            if stat.S_ISDIR(st.st_mode):
                pending.append((entry.path, rel + "/"))
            elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                yield rel, st


def manifest(ws: "RunHost", run_id: str, step: int) -> dict[str, str]:
    """The run folder of ``run_id`` after ``step``: ``path -> sha256 or marker``, following the run's
    own fork source first (a fork's replayed steps carry no folder changes of their own)."""
    files: dict[str, str] = {}
    row = ws.db.run_row(run_id) or {}
    if row.get("forked_from") and row.get("fork_step") is not None:
        files.update(manifest(ws, row["forked_from"], min(row["fork_step"], step)))
    for event in ws.events.events(run_id, nested=False):
        data: Mapping[str, Any] = event.data
        if event.type == "step" and not data.get("replayed") and (event.step or 0) <= step:
            for rel, digest in (data.get("folder") or {}).items():
                if digest is None:
                    files.pop(rel, None)
                else:
                    files[rel] = digest
    return files


def restore(ws: "RunHost", files: Mapping[str, str], folder: Path) -> list[str]:
    """Write the files of a manifest into ``folder`` (never through a link there); returns the
    paths that could not be restored (not kept, or their content missing from the store)."""
    missing: list[str] = []
    for rel, digest in sorted(files.items()):
        data = None if digest in NOT_KEPT else ws.db.file_blob(digest)
        if data is None:
            missing.append(rel)
            continue
        write_beneath(folder, rel, data)
    return missing
