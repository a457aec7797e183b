"""The ``files`` environment: the run's own folder as a small file system (list, read, write,
append, search, replace), confined to that folder.

Every path is relative to the run folder (``<workspace>/runs/<run id>``, or
``<workspace>/sessions/interactive`` outside runs). Absolute paths, ``..`` that leaves the folder and
symbolic links that point out of it are refused. Nothing is checked by name and then used by name:
every action opens what it touches through :class:`~tea_notebook.envs.safe_open.Beneath`, one
component at a time relative to the run folder's open descriptor, so a folder swapped for a link in
the middle of an action cannot redirect it (issue 10). Only regular files are read or written: named
pipes, sockets and devices are refused at once. Reads stop at size limits; regular-expression search
runs with the ``regex`` module's time limit, within one time budget per search.
"""

from __future__ import annotations

import io
import os
import stat
import time
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator

from tea_notebook.envs.base import Environment, EnvironmentFailure, action
from tea_notebook.envs.safe_open import Beneath, Entry, Opened, kind

_SNIFF = 8192  # bytes looked at to tell text from binary
_CHUNK = 65536  # read granularity: a single huge line never sits in memory whole


def _size(n: int) -> str:
    """A byte count for people: ``512 B``, ``1.5 KB``, ``2.0 MB``."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def _short(text: str, limit: int = 80) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    one = text.replace("\n", "\\n")
    return one if len(one) <= limit else one[: limit - 1] + "…"


def _is_binary(head: bytes) -> bool:
    """A NUL byte in the first block is the usual sign of a binary file."""
    return b"\0" in head


def _read_at_most(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from the start of an open file (whatever it has grown to since)."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class FileSystem(Environment):
    """The run's folder as a file system: list, read, write, append, search and replace text files.

    Options (``ws.envs.add(FileSystem, max_read_bytes=..., max_write_bytes=...)``):
    ``max_read_bytes`` bounds what one ``read`` returns (the rest is cut with a note) and
    ``max_write_bytes`` is the largest file ``write``, ``append`` and ``replace`` will produce.
    """

    name: ClassVar[str] = "files"
    description: ClassVar[str] = "The run's own folder: list, read, write, append, search and edit text files."
    rules: ClassVar[str] = (
        "Paths are relative to the run folder (no absolute paths, no '..' out of it, no links out of it). "
        "read shows a line range and the file's line count; search lists file:line: text; "
        "replace needs the exact old text. Only regular text files can be read."
    )
    category: ClassVar[str] = "files"

    #: at most this many entries in one ``list``
    max_list_entries: ClassVar[int] = 500
    #: at most this many matches in one ``search``
    max_search_results: ClassVar[int] = 100
    #: files larger than this are skipped by ``search``
    max_search_file_bytes: ClassVar[int] = 10 * 1024 * 1024
    #: one ``search`` (matching included) stops with an error past this many seconds
    max_search_seconds: ClassVar[float] = 2.0
    #: longest ``search`` pattern accepted
    max_pattern_chars: ClassVar[int] = 1000
    #: ``read`` counts a file's lines in its first this-many bytes only
    max_scan_bytes: ClassVar[int] = 256 * 1024 * 1024
    #: ``state`` stops counting files here
    max_state_scan: ClassVar[int] = 5000

    def __init__(
        self,
        folder: Path,
        context: Any = None,
        *,
        max_read_bytes: int = 1024 * 1024,
        max_write_bytes: int = 10 * 1024 * 1024,
    ):
        super().__init__(folder, context)
        if max_read_bytes < 1 or max_write_bytes < 1:
            raise ValueError("max_read_bytes and max_write_bytes must be positive")
        self.max_read_bytes = int(max_read_bytes)
        self.max_write_bytes = int(max_write_bytes)
        self._beneath: Beneath | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Create the run folder and hold it open."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._beneath = Beneath(self.folder)

    async def stop(self) -> None:
        """Let go of the run folder (an action still running keeps it open until it ends)."""
        self._beneath = None

    def kill(self) -> None:
        """Let go of the run folder."""
        self._beneath = None

    # -- confinement -------------------------------------------------------------------------
    @property
    def beneath(self) -> Beneath:
        """The run folder held open: every file the actions touch is opened through it."""
        held = self._beneath
        if held is None:  # used without start(), or after stop()
            self.folder.mkdir(parents=True, exist_ok=True)
            held = self._beneath = Beneath(self.folder)
        return held

    @property
    def root(self) -> Path:
        """The run folder, fully resolved (symbolic links followed)."""
        return self.beneath.real

    def _read_text(self, f: Opened, path: str) -> str:
        """A whole open text file (for replace), within the write limit."""
        if f.stat.st_size > self.max_write_bytes:
            raise EnvironmentFailure(
                f"{path!r} is {_size(f.stat.st_size)}, larger than the {_size(self.max_write_bytes)} edit limit"
            )
        data = _read_at_most(f.fd, self.max_write_bytes + 1)
        if len(data) > self.max_write_bytes:  # it grew since fstat
            raise EnvironmentFailure(f"{path!r} is larger than the {_size(self.max_write_bytes)} edit limit")
        if _is_binary(data[:_SNIFF]):
            raise EnvironmentFailure(f"{path!r} is a binary file; only text files can be edited")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise EnvironmentFailure(f"{path!r} is not UTF-8 text; it cannot be edited here") from None

    def _check_write_size(self, path: str, size: int, what: str = "content") -> None:
        if size > self.max_write_bytes:
            raise EnvironmentFailure(
                f"write to {path!r} refused: the {what} is {_size(size)}, over the {_size(self.max_write_bytes)} limit"
            )

    # -- actions ------------------------------------------------------------------------------
    @action
    def list(self, path: str = ".", recursive: bool = False) -> str:
        """List the files and folders at a path of the run folder.

        Args:
            path: folder (or file) relative to the run folder; "." is the run folder itself
            recursive: also list everything in the sub-folders

        Returns:
            One entry per line: folders end with "/", files show their size.
        """
        beneath = self.beneath
        with beneath.open(path, "any") as top:
            if not top.is_dir:
                return f"{top.rel}  ({_size(top.stat.st_size)})"
            lines: list[str] = []
            more = 0
            for entry in beneath.walk(top, recursive):
                if len(lines) >= self.max_list_entries:
                    more += 1
                    continue
                lines.append(self._describe(beneath, entry))
        if not lines:
            return f"{top.rel}/ is empty"
        head = f"{top.rel}/ ({len(lines) + more} entries{', recursive' if recursive else ''}):"
        out = "\n".join([head, *lines])
        if more:
            out += f"\n… {more} more entries not shown (limit {self.max_list_entries}); list a sub-folder"
        return out

    @staticmethod
    def _describe(beneath: Beneath, entry: Entry) -> str:
        mode = entry.stat.st_mode
        if stat.S_ISDIR(mode):
            return f"{entry.rel}/"
        if stat.S_ISREG(mode):
            return f"{entry.rel}  ({_size(entry.stat.st_size)})"
        if not stat.S_ISLNK(mode):
            return f"{entry.rel}  ({kind(mode)}, not readable)"
        try:
            found = beneath.lookup(entry.rel)
        except EnvironmentFailure:
            return f"{entry.rel}  (broken link)"
        if found is None:
            return f"{entry.rel}  (link to outside the run folder, not accessible)"
        target, st = found
        if st is None:
            return f"{entry.rel}  (link to {target}, which does not exist)"
        return f"{entry.rel}{'/' if stat.S_ISDIR(st.st_mode) else ''}  (link to {target})"

    @action
    def read(self, path: str, start_line: int = 1, end_line: int | None = None) -> str:
        """Read a text file, or a range of its lines.

        Args:
            path: the file, relative to the run folder
            start_line: first line to show (1-based)
            end_line: last line to show (inclusive); omit to read to the end

        Returns:
            A header with the line range and the file's line count, then the text.
        """
        if start_line < 1:
            raise EnvironmentFailure(f"start_line must be 1 or more, not {start_line}")
        if end_line is not None and end_line < start_line:
            raise EnvironmentFailure(f"end_line ({end_line}) is before start_line ({start_line})")
        budget = self.max_read_bytes
        taken: list[bytes] = []
        used = scanned = 0
        cut_at: int | None = None  # the line where the read limit stopped the output
        cut_inside = False  # part of line cut_at was shown
        counted_all = True
        lineno = 0
        at_start = True
        with self.beneath.open(path, "read") as opened:
            rel, size = opened.rel, opened.stat.st_size
            f = io.BufferedReader(io.FileIO(opened.fd, "rb", closefd=False), _CHUNK)
            if _is_binary(f.read(_SNIFF)):
                raise EnvironmentFailure(f"{rel!r} is a binary file ({_size(size)}); read only shows text files")
            f.seek(0)
            while True:
                if scanned >= self.max_scan_bytes:
                    counted_all = False
                    break
                piece = f.readline(_CHUNK)  # a long line arrives in several pieces
                if not piece:
                    break
                scanned += len(piece)
                starts_line = at_start
                if starts_line:
                    lineno += 1
                at_start = piece.endswith(b"\n")
                if lineno < start_line or (end_line is not None and lineno > end_line) or cut_at is not None:
                    continue
                room = budget - used
                if len(piece) > room:
                    taken.append(piece[:room])
                    used = budget
                    cut_at, cut_inside = lineno, room > 0 or not starts_line
                    continue
                taken.append(piece)
                used += len(piece)
        total = lineno
        of = str(total) if counted_all else f"at least {total} (counted in the first {_size(self.max_scan_bytes)})"
        if total == 0:
            return f"{rel}: empty file (0 lines)"
        if start_line > total:
            raise EnvironmentFailure(f"{rel!r} has {of} lines; start_line {start_line} is past the end")
        data = b"".join(taken)
        note = ""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            if cut_at is not None and exc.start >= len(data) - 3:  # the cut split a character
                text = data[: exc.start].decode("utf-8", errors="replace")
            else:
                text = data.decode("utf-8", errors="replace")
                note = " (not valid UTF-8: undecodable bytes shown as \ufffd)"
        last = min(end_line, total) if end_line is not None else total
        if cut_at is not None:
            shown = cut_at if cut_inside else cut_at - 1
            where = f" inside line {cut_at}" if cut_inside else ""
            header = (
                f"{rel}: lines {start_line}-{shown} of {of}; output cut{where} by the {_size(budget)} "
                f"read limit, continue with start_line={cut_at}"
            )
        else:
            header = f"{rel}: lines {start_line}-{last} of {of}"
        return f"{header}{note}\n{text}"

    @action
    def write(self, path: str, content: str) -> str:
        """Write a text file (replacing it when it exists); missing parent folders are created.

        Args:
            path: the file, relative to the run folder
            content: the whole new text of the file
        """
        data = content.encode("utf-8")
        self._check_write_size(path, len(data))
        with self.beneath.open(path, "write") as f:
            os.ftruncate(f.fd, 0)
            _write_all(f.fd, data)
        lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
        verb = "created" if f.created else "overwrote"
        return f"{verb} {f.rel} ({_size(len(data))}, {lines} lines)"

    @action
    def append(self, path: str, content: str) -> str:
        """Add text at the end of a file (created, with its parent folders, when missing).

        Args:
            path: the file, relative to the run folder
            content: the text to add (include a trailing newline if you want one)
        """
        data = content.encode("utf-8")
        self._check_write_size(path, len(data), "resulting file")
        with self.beneath.open(path, "append") as f:
            before = f.stat.st_size
            self._check_write_size(path, before + len(data), "resulting file")
            _write_all(f.fd, data)
        return f"appended {_size(len(data))} to {f.rel} (now {_size(before + len(data))})"

    def _line_test(self, pattern: str, regex: bool, deadline: float) -> Callable[[str], bool]:
        """A function telling whether a line matches; a regular expression gets only the time left
        before ``deadline`` (the ``regex`` module's ``timeout``, matching without holding the GIL)."""
        if not regex:
            return lambda line: pattern in line
        import regex as regex_module  # imported on first regex search

        try:
            matcher = regex_module.compile(pattern)
        except (regex_module.error, ValueError, OverflowError) as exc:
            raise EnvironmentFailure(f"invalid regular expression {pattern!r}: {exc}") from None

        def found(line: str) -> bool:
            try:
                return matcher.search(line, timeout=deadline - time.monotonic(), concurrent=True) is not None
            except TimeoutError:
                raise self._over_budget(pattern, regex) from None

        return found

    def _over_budget(self, pattern: str, regex: bool) -> EnvironmentFailure:
        what = "regular expression" if regex else "text"
        hint = " (nested repetition such as (a+)+ can take exponential time: simplify the pattern)" if regex else ""
        return EnvironmentFailure(
            f"search for {what} {pattern!r} stopped: it took longer than the {self.max_search_seconds:g} s "
            f"budget{hint}; narrow the pattern or the path"
        )

    @action
    def search(self, pattern: str, path: str = ".", regex: bool = False) -> str:
        """Find the lines that contain a text (or match a regular expression) in the run folder's text files.

        Args:
            pattern: the text to find (case-sensitive), or a Python regular expression when regex is true
            path: a folder to search recursively, or a single file, relative to the run folder
            regex: treat pattern as a regular expression

        Returns:
            One match per line as "file:line: text".
        """
        if not pattern:
            raise EnvironmentFailure("search needs a non-empty pattern")
        if len(pattern) > self.max_pattern_chars:
            raise EnvironmentFailure(
                f"search pattern {_short(pattern, 40)!r} refused: it is {len(pattern)} characters, "
                f"longer than the {self.max_pattern_chars} allowed"
            )
        deadline = time.monotonic() + self.max_search_seconds
        found = self._line_test(pattern, regex, deadline)
        beneath = self.beneath
        hits: list[str] = []
        more = searched = 0
        skipped: list[str] = []

        def scan(f: Opened) -> None:
            nonlocal more, searched
            if f.stat.st_size > self.max_search_file_bytes:
                skipped.append(f.rel)
                return
            data = _read_at_most(f.fd, self.max_search_file_bytes)
            if _is_binary(data[:_SNIFF]):
                return
            searched += 1
            text = data.decode("utf-8", errors="replace")
            if not regex and pattern not in text:
                return
            lines = text.split("\n")
            if lines and not lines[-1]:
                lines.pop()
            for lineno, line in enumerate(lines, 1):
                line = line.rstrip("\r")
                if found(line):
                    if len(hits) < self.max_search_results:
                        hits.append(f"{f.rel}:{lineno}: {_short(line.strip(), 200)}")
                    else:
                        more += 1

        with beneath.open(path, "any") as top:
            where = top.rel
            if not top.is_dir:
                scan(top)
            else:
                files: Iterator[Entry] = (
                    e for e in beneath.walk(top, folders_first=False) if stat.S_ISREG(e.stat.st_mode)
                )
                for entry in files:
                    if time.monotonic() > deadline:
                        raise self._over_budget(pattern, regex)
                    try:
                        opened = beneath.open_entry(entry)
                    except EnvironmentFailure:  # swapped for something else since it was listed
                        continue
                    if opened is not None:
                        with opened:
                            scan(opened)
        notes = []
        if skipped:
            notes.append(
                f"skipped {len(skipped)} file(s) over {_size(self.max_search_file_bytes)}: {', '.join(skipped[:5])}"
            )
        if not hits:
            kind_ = "regex" if regex else "text"
            out = f"no matches for {kind_} {pattern!r} in {where} ({searched} text files searched)"
            return "\n".join([out, *notes])
        if more:
            notes.append(
                f"… {more} more matches not shown (limit {self.max_search_results}); narrow the pattern or path"
            )
        return "\n".join(hits + notes)

    @action
    def replace(self, path: str, old: str, new: str, count: int | None = None) -> str:
        """Replace exact text in a file.

        Args:
            path: the file, relative to the run folder
            old: the exact text to replace (whitespace and newlines included)
            new: the replacement text
            count: replace only the first this-many occurrences; omit to replace them all
        """
        if not old:
            raise EnvironmentFailure("replace needs a non-empty old text")
        if count is not None and count < 1:
            raise EnvironmentFailure(f"count must be 1 or more (or omitted for all), not {count}")
        with self.beneath.open(path, "edit") as f:
            rel = f.rel
            text = self._read_text(f, rel)
            found = text.count(old)
            if found == 0:
                raise EnvironmentFailure(f"{_short(old)!r} not found in {rel}; read the file and copy the exact text")
            done = found if count is None else min(count, found)
            data = text.replace(old, new, done).encode("utf-8")
            self._check_write_size(rel, len(data), "resulting file")
            os.ftruncate(f.fd, 0)
            os.lseek(f.fd, 0, os.SEEK_SET)
            _write_all(f.fd, data)
        return f"replaced {done} of {found} occurrence{'s' if found != 1 else ''} in {rel}"

    # -- what the prompt shows ---------------------------------------------------------------
    def state(self) -> str:
        """The root, how many files it holds and the most recently modified ones."""
        if not self.folder.exists():
            return f"root: {self.folder} (not created yet)"
        beneath = self.beneath
        count = scanned = 0
        recent: list[tuple[float, str]] = []
        capped = False
        with beneath.open(".", "any") as top:
            for entry in beneath.walk(top):
                scanned += 1
                if scanned > self.max_state_scan:
                    capped = True
                    break
                if not stat.S_ISREG(entry.stat.st_mode):
                    continue
                count += 1
                recent.append((entry.stat.st_mtime, entry.rel))
                if len(recent) > 20:
                    recent.sort(reverse=True)
                    del recent[5:]
        recent.sort(reverse=True)
        lines = [f"root: {beneath.real}", f"files: {count}{'+' if capped else ''}"]
        if recent:
            now = time.time()
            lines.append("recently modified: " + ", ".join(f"{name} ({_ago(now - m)})" for m, name in recent[:5]))
        return "\n".join(lines)


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{int(seconds)}s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)}m ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h ago"
    return f"{int(seconds // 86400)}d ago"
