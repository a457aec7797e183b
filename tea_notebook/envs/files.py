"""The ``files`` environment: the run's own folder as a small file system (list, read, write,
append, search, replace), confined to that folder.

Every path is relative to the run folder (``<workspace>/runs/<run id>``, or
``<workspace>/sessions/interactive`` outside runs). Absolute paths, ``..`` that leaves the folder and
symbolic links that point out of it are refused; the check is made on the fully resolved path, also
for files that do not exist yet.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, ClassVar, Iterator

from tea_notebook.envs.base import Environment, EnvironmentFailure, action

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
        "replace needs the exact old text. Binary files cannot be read."
    )
    category: ClassVar[str] = "files"

    #: at most this many entries in one ``list``
    max_list_entries: ClassVar[int] = 500
    #: at most this many matches in one ``search``
    max_search_results: ClassVar[int] = 100
    #: files larger than this are skipped by ``search``
    max_search_file_bytes: ClassVar[int] = 10 * 1024 * 1024
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
        self._root: Path | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Create the run folder."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._root = self.folder.resolve()

    # -- confinement -------------------------------------------------------------------------
    @property
    def root(self) -> Path:
        """The run folder, fully resolved (symbolic links followed)."""
        if self._root is None:
            self._root = self.folder.resolve()
        return self._root

    def resolve(self, path: str) -> Path:
        """The real path of ``path`` (relative to the run folder), or :class:`EnvironmentFailure`
        when it is absolute or ends up outside the folder once ``..`` and symbolic links are
        followed. Works for paths that do not exist yet (their existing prefix is resolved)."""
        raw = str(path).strip() if path is not None else ""
        if not raw:
            raw = "."
        if "\0" in raw:
            raise EnvironmentFailure(f"path {raw!r} refused: it contains a NUL character")
        given = Path(raw)
        if given.is_absolute() or given.anchor:
            raise EnvironmentFailure(
                f"path {raw!r} refused: absolute paths are not allowed; use a path relative to the run folder"
            )
        try:
            # strict=False resolves the existing prefix (following every link, dangling ones too)
            # and appends the rest, so a file that does not exist yet is checked through its parent
            real = (self.root / given).resolve()
        except (OSError, RuntimeError) as exc:  # a symbolic link loop
            raise EnvironmentFailure(f"path {raw!r} refused: it cannot be resolved ({exc})") from None
        if real != self.root and not real.is_relative_to(self.root):
            via = "a symbolic link" if ".." not in given.parts else "'..'"
            raise EnvironmentFailure(
                f"path {raw!r} refused: it leads outside the run folder (through {via}, to {real})"
            )
        return real

    def relative(self, real: Path) -> str:
        """A resolved path as the agent writes it: relative to the run folder, with ``/``."""
        rel = real.relative_to(self.root).as_posix()
        return rel or "."

    def _existing_file(self, path: str) -> Path:
        real = self.resolve(path)
        if not real.exists():
            raise EnvironmentFailure(f"{path!r} does not exist in the run folder")
        if real.is_dir():
            raise EnvironmentFailure(f"{path!r} is a folder, not a file (use list)")
        return real

    def _inside(self, candidate: Path) -> bool:
        """True when ``candidate`` (a path found while walking) really lies inside the folder."""
        try:
            real = candidate.resolve()
        except (OSError, RuntimeError):
            return False
        return real == self.root or real.is_relative_to(self.root)

    def _walk(self, top: Path) -> Iterator[Path]:
        """Everything under ``top`` depth first, folders before files, sorted by name; linked
        folders are listed but never entered."""
        try:
            with os.scandir(top) as it:
                entries = sorted(it, key=lambda e: (not e.is_dir(follow_symlinks=False), e.name))
        except OSError:
            return
        for entry in entries:
            path = Path(entry.path)
            yield path
            if entry.is_dir(follow_symlinks=False):
                yield from self._walk(path)

    def _read_text(self, real: Path, path: str) -> str:
        """A whole text file (for replace), within the write limit."""
        size = real.stat().st_size
        if size > self.max_write_bytes:
            raise EnvironmentFailure(
                f"{path!r} is {_size(size)}, larger than the {_size(self.max_write_bytes)} edit limit"
            )
        data = real.read_bytes()
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
        real = self.resolve(path)
        if not real.exists():
            raise EnvironmentFailure(f"{path!r} does not exist in the run folder")
        if not real.is_dir():
            return f"{self.relative(real)}  ({_size(real.stat().st_size)})"
        if recursive:
            entries: Iterator[Path] = self._walk(real)
        else:
            entries = iter(sorted(real.iterdir(), key=lambda p: (not p.is_dir(), p.name)))
        lines: list[str] = []
        more = 0
        for entry in entries:
            if len(lines) >= self.max_list_entries:
                more += 1
                continue
            lines.append(self._describe(entry))
        where = self.relative(real)
        if not lines:
            return f"{where}/ is empty"
        head = f"{where}/ ({len(lines) + more} entries{', recursive' if recursive else ''}):"
        out = "\n".join([head, *lines])
        if more:
            out += f"\n… {more} more entries not shown (limit {self.max_list_entries}); list a sub-folder"
        return out

    def _describe(self, entry: Path) -> str:
        try:
            rel = entry.relative_to(self.root).as_posix()
        except ValueError:  # under a linked folder: show it as the agent would name it
            rel = entry.as_posix()
        if entry.is_symlink():
            if not self._inside(entry):
                return f"{rel}  (link to outside the run folder, not accessible)"
            return f"{rel}{'/' if entry.is_dir() else ''}  (link to {self.relative(entry.resolve())})"
        if entry.is_dir():
            return f"{rel}/"
        try:
            return f"{rel}  ({_size(entry.stat().st_size)})"
        except OSError:
            return rel

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
        real = self._existing_file(path)
        if start_line < 1:
            raise EnvironmentFailure(f"start_line must be 1 or more, not {start_line}")
        if end_line is not None and end_line < start_line:
            raise EnvironmentFailure(f"end_line ({end_line}) is before start_line ({start_line})")
        rel = self.relative(real)
        size = real.stat().st_size
        budget = self.max_read_bytes
        taken: list[bytes] = []
        used = 0
        cut_at: int | None = None  # the line where the read limit stopped the output
        cut_inside = False  # part of line cut_at was shown
        lineno = 0
        at_start = True
        with open(real, "rb") as f:
            if _is_binary(f.read(_SNIFF)):
                raise EnvironmentFailure(f"{rel!r} is a binary file ({_size(size)}); read only shows text files")
            f.seek(0)
            while True:
                piece = f.readline(_CHUNK)  # a long line arrives in several pieces
                if not piece:
                    break
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
        if total == 0:
            return f"{rel}: empty file (0 lines)"
        if start_line > total:
            raise EnvironmentFailure(f"{rel!r} has {total} lines; start_line {start_line} is past the end")
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
                f"{rel}: lines {start_line}-{shown} of {total}; output cut{where} by the {_size(budget)} "
                f"read limit, continue with start_line={cut_at}"
            )
        else:
            header = f"{rel}: lines {start_line}-{last} of {total}"
        return f"{header}{note}\n{text}"

    @action
    def write(self, path: str, content: str) -> str:
        """Write a text file (replacing it when it exists); missing parent folders are created.

        Args:
            path: the file, relative to the run folder
            content: the whole new text of the file
        """
        real = self.resolve(path)
        if real.is_dir():
            raise EnvironmentFailure(f"{path!r} is a folder; give a file path")
        data = content.encode("utf-8")
        self._check_write_size(path, len(data))
        existed = real.exists()
        real.parent.mkdir(parents=True, exist_ok=True)
        real.write_bytes(data)
        lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
        verb = "overwrote" if existed else "created"
        return f"{verb} {self.relative(real)} ({_size(len(data))}, {lines} lines)"

    @action
    def append(self, path: str, content: str) -> str:
        """Add text at the end of a file (created, with its parent folders, when missing).

        Args:
            path: the file, relative to the run folder
            content: the text to add (include a trailing newline if you want one)
        """
        real = self.resolve(path)
        if real.is_dir():
            raise EnvironmentFailure(f"{path!r} is a folder; give a file path")
        data = content.encode("utf-8")
        before = real.stat().st_size if real.exists() else 0
        self._check_write_size(path, before + len(data), "resulting file")
        real.parent.mkdir(parents=True, exist_ok=True)
        with open(real, "ab") as f:
            f.write(data)
        return f"appended {_size(len(data))} to {self.relative(real)} (now {_size(before + len(data))})"

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
        if regex:
            try:
                matcher = re.compile(pattern)
            except re.error as exc:
                raise EnvironmentFailure(f"invalid regular expression {pattern!r}: {exc}") from None
            found = matcher.search
        else:

            def found(line: str) -> bool:
                return pattern in line

        real = self.resolve(path)
        if not real.exists():
            raise EnvironmentFailure(f"{path!r} does not exist in the run folder")
        files = [real] if real.is_file() else sorted(p for p in self._walk(real) if p.is_file())
        hits: list[str] = []
        more = searched = 0
        skipped: list[str] = []
        for file in files:
            if not self._inside(file):
                continue
            try:
                size = file.stat().st_size
                if size > self.max_search_file_bytes:
                    skipped.append(self.relative(file.resolve()))
                    continue
                with open(file, "rb") as f:
                    if _is_binary(f.read(_SNIFF)):
                        continue
                    f.seek(0)
                    searched += 1
                    rel = self.relative(file.resolve())
                    for lineno, raw in enumerate(f, 1):
                        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                        if found(line):
                            if len(hits) < self.max_search_results:
                                hits.append(f"{rel}:{lineno}: {_short(line.strip(), 200)}")
                            else:
                                more += 1
            except OSError:
                continue
        notes = []
        if skipped:
            notes.append(
                f"skipped {len(skipped)} file(s) over {_size(self.max_search_file_bytes)}: {', '.join(skipped[:5])}"
            )
        if not hits:
            kind = "regex" if regex else "text"
            out = f"no matches for {kind} {pattern!r} in {self.relative(real)} ({searched} text files searched)"
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
        real = self._existing_file(path)
        rel = self.relative(real)
        text = self._read_text(real, rel)
        found = text.count(old)
        if found == 0:
            raise EnvironmentFailure(f"{_short(old)!r} not found in {rel}; read the file and copy the exact text")
        done = found if count is None else min(count, found)
        updated = text.replace(old, new, done)
        data = updated.encode("utf-8")
        self._check_write_size(rel, len(data), "resulting file")
        real.write_bytes(data)
        return f"replaced {done} of {found} occurrence{'s' if found != 1 else ''} in {rel}"

    # -- what the prompt shows ---------------------------------------------------------------
    def state(self) -> str:
        """The root, how many files it holds and the most recently modified ones."""
        if not self.folder.exists():
            return f"root: {self.folder} (not created yet)"
        count = scanned = 0
        recent: list[tuple[float, str]] = []
        capped = False
        for entry in self._walk(self.root):
            scanned += 1
            if scanned > self.max_state_scan:
                capped = True
                break
            try:
                if entry.is_symlink() or not entry.is_file():
                    continue
                mtime = entry.stat().st_mtime
            except OSError:
                continue
            count += 1
            recent.append((mtime, entry.relative_to(self.root).as_posix()))
            if len(recent) > 20:
                recent.sort(reverse=True)
                del recent[5:]
        recent.sort(reverse=True)
        lines = [f"root: {self.root}", f"files: {count}{'+' if capped else ''}"]
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
