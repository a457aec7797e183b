"""Snapshots of a run's folder, step by step, so a fork or resume at step N finds the folder as it
was after step N.

After each step the folder is walked without following links; only files whose size,
modification or change time changed are read and hashed again (a file's change time moves with any
write, even one that puts its size and modification time back), and each content is kept once by its sha256
(``Database.put_file_blobs``). The step event records what changed (``folder``: ``path -> sha256``,
``None`` for a deleted file, or a marker for a file not kept). A fork rebuilds the manifest of its
source up to the fork step from those events and writes the files into its own folder.

A stop records what the folder held then as well (``folder`` on ``run_finished``, and on the
``tool_result`` of a call that returned after the stop), so a resume starts from the folder as the
stop left it, and can tell a folder changed by hand since (:func:`resume_start`): it refuses such a
resume unless forced, and a forced one starts from the folder as it is, saying what was changed.

A step that records changes also records a seal of the folder (``folder_seal``, :meth:`FolderSnapshots.seal`):
one sum over its files' paths, sizes, times, inodes, modes and digests. A resume whose folder still
matches the seal of its last record reads and hashes only the files written within moments of that
snapshot (their times may not show a later change); otherwise it reads them all.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tea_notebook._safe_open import Beneath, read_beneath, write_beneath

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost

SIZE_CAP = 16 * 1024 * 1024
LINK = "!link"
TOO_LARGE = "!too-large"
NOT_KEPT = (LINK, TOO_LARGE)
#: a file changed within this long (ns) before a snapshot began is left out of its seal: file times come
#: from a clock that moves in ticks of a few ms, so a change in the same tick would not show in them
RACY_NS = 50_000_000


@dataclass
class FolderSnapshots:
    """What one run's folder held at its last snapshot: ``path -> (size, mtime_ns, sha256 or marker,
    ctime_ns)``."""

    folder: Path
    seen: dict[str, tuple[int, int, str, int]] = field(default_factory=dict)
    #: a call that returned after a stop takes a snapshot from its own thread
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    #: when the last snapshot began (``time.time_ns()``) and each file's stat then
    _at: int = field(default=0, init=False, repr=False, compare=False)
    _stats: dict[str, os.stat_result] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: the seal's terms of the files it covers (see :meth:`seal`), their sum, and the files not covered yet
    _covered: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _sum: int = field(default=0, init=False, repr=False, compare=False)
    _pending: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    def changes(self, ws: "RunHost") -> dict[str, str | None]:
        """Walk the folder, keep new contents in the store and return what changed since the last call."""
        with self.lock:
            at = time.time_ns()
            entries = list(_walk(self.folder))
            if not entries and not self.seen:  # empty (or not made yet) and so it was: nothing changed
                self._at, self._stats = at, {}
                return {}
            now, fresh = self.look(entries)
            self._at, self._stats = at, dict(entries)
            changed: dict[str, str | None] = {
                rel: entry[2] for rel, entry in now.items() if self.seen.get(rel, (0, 0, "", 0))[2] != entry[2]
            }
            changed.update({rel: None for rel in self.seen if rel not in now})
            # the seal covers a file again once it has settled (files read again, or gone, are left out)
            for rel in [rel for rel, entry in now.items() if self.seen.get(rel) is not entry] + [
                rel for rel in self.seen if rel not in now
            ]:
                self._sum -= self._covered.pop(rel, 0)
                self._pending.add(rel)
            ws.db.put_file_blobs(fresh)
            self.seen = now
        return changed

    def learn(self, rel: str, st: os.stat_result, digest: str) -> None:
        """Take a file just written with its digest as seen (a restore), so it is not read again."""
        with self.lock:
            self.seen[rel] = (st.st_size, st.st_mtime_ns, digest, st.st_ctime_ns)
            self._sum -= self._covered.pop(rel, 0)
            self._pending.add(rel)

    def seal(self) -> str:
        """The seal of the folder at the last snapshot: ``"AT:SUM"``, AT when it began (ns since the
        epoch), SUM the sum of one hash per file not changed within :data:`RACY_NS` before AT (see
        :func:`seal_sum`, which gives the same sum from scratch). Recorded beside ``folder`` on a step;
        :func:`resume_start` checks the folder against it. Only the files not covered yet are looked at."""
        with self.lock:
            limit = self._at - RACY_NS
            for rel in list(self._pending):
                st, entry = self._stats.get(rel), self.seen.get(rel)
                if st is None or entry is None:
                    self._pending.discard(rel)  # gone
                elif st.st_mtime_ns < limit and st.st_ctime_ns < limit:
                    self._covered[rel] = term = seal_term(rel, st, entry[2])
                    self._sum += term
                    self._pending.discard(rel)
            return f"{self._at}:{self._sum % (1 << 128):032x}"

    def look(
        self, entries: Iterable[tuple[str, os.stat_result]] | None = None
    ) -> tuple[dict[str, tuple[int, int, str, int]], dict[str, bytes]]:
        """The folder now (``path -> (size, mtime_ns, sha256 or marker, ctime_ns)``, files unchanged
        since the last snapshot not read again) and the contents read (``sha256 -> bytes``); nothing is
        kept. ``entries``: the folder's files with their ``lstat`` when walked already."""
        now: dict[str, tuple[int, int, str, int]] = {}
        fresh: dict[str, bytes] = {}
        held: list[Beneath] = []  # the folder, opened once for all the files read
        try:
            for rel, st in _walk(self.folder) if entries is None else entries:
                old = self.seen.get(rel)
                if old is not None and old[:2] == (st.st_size, st.st_mtime_ns) and old[3] == st.st_ctime_ns:
                    now[rel] = old
                    continue
                now[rel] = (st.st_size, st.st_mtime_ns, self._digest(rel, st, fresh, held), st.st_ctime_ns)
        finally:
            for beneath in held:
                beneath.close()
        return now, fresh

    def _digest(self, rel: str, st: os.stat_result, fresh: dict[str, bytes], held: list[Beneath]) -> str:
        if stat.S_ISLNK(st.st_mode):
            return LINK  # never read through: a link the sandbox planted may lead anywhere
        if st.st_size > SIZE_CAP:
            return TOO_LARGE
        try:
            if not held:
                held.append(Beneath(self.folder))
            data = read_beneath(held[0], rel, SIZE_CAP)
        except Exception:  # replaced by a link or grown past the cap while we looked
            return LINK
        if data is None:
            return LINK
        digest = hashlib.sha256(data).hexdigest()
        fresh[digest] = data
        return digest


def seal_term(rel: str, st: os.stat_result, digest: str) -> int:
    """One file's term of a seal: a 128-bit hash of its path, size, times, inode, mode and digest."""
    stamp = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode, digest)
    return int.from_bytes(
        hashlib.sha256(os.fsencode(rel) + b"\0" + " ".join(map(str, stamp)).encode()).digest()[:16], "big"
    )


def seal_sum(stats: Mapping[str, os.stat_result], digests: Mapping[str, str], at: int) -> int:
    """The sum (mod 2**128) of :func:`seal_term` over the files of ``stats`` (``path -> lstat``) whose
    modification and change times are older than ``at - RACY_NS``, with their ``digests`` (a file
    without one makes the sum -1, which matches no seal)."""
    limit, total = at - RACY_NS, 0
    for rel, st in stats.items():
        if st.st_mtime_ns >= limit or st.st_ctime_ns >= limit:
            continue
        digest = digests.get(rel)
        if digest is None:
            return -1
        total += seal_term(rel, st, digest)
    return total % (1 << 128)


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


def manifest(ws: "RunHost", run_id: str, step: int, *, stopped: bool = False) -> dict[str, str]:
    """The run folder of ``run_id`` after ``step``: ``path -> sha256 or marker``, following the run's
    own fork source first (a fork's replayed steps carry no folder changes of their own; what a
    resumed run started from besides them is on its ``run_started``). ``stopped``: as the run's stop
    left it (what changed after its last step until it ended, on ``run_finished``, and what its calls
    that returned after the stop changed, on their ``tool_result``)."""
    return _manifests(ws, run_id, step, (stopped,))[0][0]


#: the events that may carry a ``folder`` field
_FOLDER_EVENTS = ["run_started", "step", "tool_result", "run_finished"]


def _manifests(
    ws: "RunHost", run_id: str, step: int, stops: tuple[bool, ...]
) -> tuple[list[dict[str, str]], str | None]:
    """:func:`manifest` for each of ``stops`` (False, True: after ``step``, as the stop left it),
    reading the run's events once: only those of the types that carry folder changes, and decoding
    only those that do (a long run's other events are never parsed); and the seal of the folder as
    the stop left it (:meth:`FolderSnapshots.seal`), when the last record of it has one."""
    row = ws.db.run_row(run_id) or {}
    fork_step = row.get("fork_step")
    base: dict[str, str] = {}
    if row.get("forked_from") and fork_step is not None:
        base = manifest(ws, row["forked_from"], min(fork_step, step))
    outs = [dict(base) for _ in stops]
    seal: str | None = None
    ws.events.flush()
    for _, kind, at, text in ws.db.run_events_of_type([run_id], _FOLDER_EVENTS):
        if '"folder"' not in text:
            continue
        data: Mapping[str, Any] = json.loads(text)
        for files, stopped in zip(outs, stops):
            if kind == "run_started":
                applies = fork_step is None or step >= fork_step
            elif kind in ("step", "tool_result"):  # a call that returned late, within the stop's grace
                applies = not data.get("replayed") and (stopped or (at or 0) <= step)
            else:
                applies = stopped
            if applies:
                _apply(files, data.get("folder"))
                if stopped:
                    seal = data.get("folder_seal") if isinstance(data.get("folder_seal"), str) else None
    return outs, seal


def _apply(files: dict[str, str], changes: Any) -> None:
    for rel, digest in (changes or {}).items():
        if digest is None:
            files.pop(rel, None)
        else:
            files[rel] = digest


@dataclass
class FolderChanges:
    """How a folder differs from its record: files added, removed and changed (paths, sorted)."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def describe(self, shown: int = 3) -> str:
        """``added a.txt, b.txt; removed c.txt and 4 more`` (a few names of each kind, then a count)."""
        parts = []
        for what, paths in (("added", self.added), ("removed", self.removed), ("changed", self.changed)):
            if paths:
                more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
                parts.append(f"{what} {', '.join(paths[:shown])}{more}")
        return "; ".join(parts)

    def record(self) -> dict[str, list[str]]:
        """As ``run_started`` records it (``folder_by_hand``): the kinds with paths."""
        return {k: v for k, v in (("added", self.added), ("removed", self.removed), ("changed", self.changed)) if v}


def compare(recorded: Mapping[str, str], now: Mapping[str, str]) -> FolderChanges:
    """What differs between a recorded manifest and the folder's manifest now."""
    return FolderChanges(
        added=sorted(set(now) - set(recorded)),
        removed=sorted(set(recorded) - set(now)),
        changed=sorted(rel for rel in set(now) & set(recorded) if now[rel] != recorded[rel]),
    )


@dataclass
class FolderStart:
    """The folder a resumed run starts with: ``files`` (a manifest restored into its folder),
    ``start`` (how they differ from the stopped run's last finished step, recorded on ``run_started``
    as ``folder`` so a fork of the resumed run finds them) and ``by_hand`` (what was changed by hand
    since the stop, when the resume was forced)."""

    files: dict[str, str]
    start: dict[str, str | None]
    by_hand: FolderChanges | None = None
    contents: dict[str, bytes] = field(default_factory=dict, repr=False)
    #: why the resume is refused (the folder was changed by hand and the resume not forced), if it is
    refusal: str | None = None

    def started(self) -> dict[str, Any]:
        """What the resumed run's ``run_started`` records of its folder."""
        out: dict[str, Any] = {}
        if self.start:
            out["folder"] = self.start
        if self.by_hand:
            out["folder_by_hand"] = self.by_hand.record()
        return out

    def keep(self, ws: "RunHost") -> None:
        """Store the contents of the files changed by hand (once the resume goes ahead)."""
        ws.db.put_file_blobs(self.contents)


def resume_start(ws: "RunHost", run_id: str, step: int, *, force: bool) -> FolderStart:
    """The folder a resume of the stopped run ``run_id`` (last finished ``step``) starts with: its
    folder as the stop left it. For a folder changed since (by hand, or by a call whose result was
    never recorded) its ``refusal`` names what changed, unless ``force``: then the resume starts from
    the folder as it is now. A run folder that is not here at all (an imported run) is restored from
    the record. Nothing is written."""
    (base, recorded), seal = _manifests(ws, run_id, step, (False, True))
    folder = ws.path / "runs" / run_id
    files, changes = recorded, FolderChanges()
    contents: dict[str, bytes] = {}
    if folder.is_dir():
        seen, contents = _look_sealed(folder, recorded, seal)
        now = {rel: entry[2] for rel, entry in seen.items()}
        changes = compare(recorded, now)
        if changes and not force:
            refusal = (
                f"the run folder of run {run_id} ({folder}) was changed since the run stopped (by hand, or by a call "
                f"whose result was never recorded): {changes.describe()}. A resume starts from the folder as the "
                f"stop left it; to go on with the folder as it is now, resume with force=True "
                f"(ws.resume(run, force=True), %tea resume {run_id} --force): the new run records what was changed"
            )
            return FolderStart(recorded, {}, changes, refusal=refusal)
        if changes:
            files = now
            used = {d for d in now.values() if d not in NOT_KEPT}
            contents = {d: data for d, data in contents.items() if d in used}
    start: dict[str, str | None] = {rel: d for rel, d in files.items() if base.get(rel) != d}
    start.update({rel: None for rel in base if rel not in files})
    return FolderStart(files, start, changes or None, contents if changes else {})


def _look_sealed(
    folder: Path, recorded: Mapping[str, str], seal: str | None
) -> tuple[dict[str, tuple[int, int, str, int]], dict[str, bytes]]:
    """:meth:`FolderSnapshots.look` of a stopped run's folder: when the folder still matches ``seal``
    (the seal of the record ``recorded``), the files it covers take their digests from the record,
    and only the others (changed within moments of the seal, or since) are read and hashed."""
    entries = list(_walk(folder))
    snapshots = FolderSnapshots(folder)
    at, _, total = (seal or "").partition(":")
    if at.isdigit() and total:
        stats = dict(entries)
        if f"{seal_sum(stats, recorded, int(at)):032x}" == total:
            limit = int(at) - RACY_NS
            snapshots.seen = {
                rel: (st.st_size, st.st_mtime_ns, recorded[rel], st.st_ctime_ns)
                for rel, st in stats.items()
                if st.st_mtime_ns < limit and st.st_ctime_ns < limit
            }
    return snapshots.look(entries)


def restore(ws: "RunHost", files: Mapping[str, str], folder: Path, seen: "FolderSnapshots | None" = None) -> list[str]:
    """Write the files of a manifest into ``folder`` (never through a link there); returns the
    paths that could not be restored (not kept, or their content missing from the store). ``seen``
    (the folder's snapshots) learns each file written with its digest, so the next snapshot does not
    read and hash them all again."""
    missing: list[str] = []
    held: Beneath | None = None  # the folder, opened once for all the files written
    try:
        for rel, digest in sorted(files.items()):
            data = None if digest in NOT_KEPT else ws.db.file_blob(digest)
            if data is None:
                missing.append(rel)
                continue
            if held is None:
                folder.mkdir(parents=True, exist_ok=True)
                held = Beneath(folder)
            write_beneath(held, rel, data)
            if seen is not None:
                try:
                    st = os.lstat(folder / rel)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    seen.learn(rel, st, digest)
    finally:
        if held is not None:
            held.close()
    return missing
