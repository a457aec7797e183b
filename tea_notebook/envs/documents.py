"""Files to markdown for the deep analyzer (and PDFs for the researcher), behind the sandbox boundary.

:class:`DocumentConverter` reads a file the caller has already allowed, checks its size, and looks
its content hash up in the workspace's cache (``<workspace>/cache/markdown``). On a miss the bytes
are copied into the run folder and converted with ``markitdown`` inside a sandbox session of the
run (no network, no home folder, memory, time and disk limits): a hostile PDF or a ZIP bomb can only
break that process. ZIP archives are unpacked there, inside the run folder. The result knows its
sections (pages, sheets, slides, archive members, headings) so an answer can cite them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tea_notebook.envs.safe_open import Beneath, read_beneath, write_beneath
from tea_notebook.envs.sandbox import PythonSandbox
from tea_notebook.envs.search import split_chunks
from tea_notebook.envs.sessions import EnvironmentRuntime
from tea_notebook.errors import EnvironmentFailure, TeaError
from tea_notebook.protocol.context import Context

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost

SESSION_NAME = "documents"
_CHILD = Path(__file__).with_name("_convert_child.py")
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
CACHE_FORMAT = 1
MAX_MARKDOWN = 64 * 2**20  # bytes of markdown read back from one conversion
#: formats whose bytes are never text (the converter refuses one that yields none)
BINARY_SUFFIXES = (".pdf", ".docx", ".xlsx", ".xls", ".pptx", ".epub")


class DocumentError(TeaError):
    """A file that cannot be converted; the message names the file and why."""


class DocumentSandbox(PythonSandbox):
    """The sandbox session in which a run's documents are converted (no network, the run's folder)."""

    name = SESSION_NAME
    description = "The sandbox in which documents are converted to markdown."


@dataclass
class Section:
    """A part of a converted document an answer can point at: ``ref`` is e.g. ``"page 3"``."""

    ref: str
    start: int
    end: int


@dataclass
class Conversion:
    """A file as markdown, with its sections and what could not be read (archive members)."""

    name: str
    sha256: str
    kind: str
    markdown: str
    problems: list[str] = field(default_factory=list)
    members: list[str] = field(default_factory=list)
    cached: bool = False

    @property
    def sections(self) -> list[Section]:
        """Pages, sheets, slides, members or headings, in order; one section when it has none."""
        return sections_of(self.markdown, self.kind)

    def chunks(self, size: int = 6000) -> list[tuple[str, str]]:
        """``(reference, text)`` pieces of at most about ``size`` characters, never across sections."""
        out = []
        for sec in self.sections:
            body = self.markdown[sec.start : sec.end].replace("\x0c", "").strip()
            if not body:
                continue
            for piece in split_chunks(body, size):
                out.append((f"{self.name}, {sec.ref}", piece))
        return out


_SLIDE = re.compile(r"<!-- Slide number: (\d+) -->")
_SHEET = re.compile(r"^## (.+)$", re.M)
_MEMBER = re.compile(r"<!-- member: (.+?) -->")
_HEADING = re.compile(r"^#{1,3} (.+)$", re.M)


def sections_of(markdown: str, kind: str) -> list[Section]:
    """The sections of a converted document (see :class:`Section`)."""
    marks: list[tuple[int, str]] = []
    if kind == "zip":
        found = list(_MEMBER.finditer(markdown))
        for i, m in enumerate(found):
            end = found[i + 1].start() if i + 1 < len(found) else len(markdown)
            member = m.group(1)
            inner = sections_of(markdown[m.end() : end], Path(member).suffix.lstrip(".").lower())
            for j, sec in enumerate(inner):
                ref = member if sec.ref in ("whole document", "beginning") else f"{member}, {sec.ref}"
                marks.append((m.start() if j == 0 else m.end() + sec.start, ref))
    elif "\x0c" in markdown:
        marks.append((0, "page 1"))
        for n, m in enumerate(re.finditer("\x0c", markdown), start=2):
            marks.append((m.end(), f"page {n}"))
    elif kind == "pptx":
        marks = [(m.start(), f"slide {m.group(1)}") for m in _SLIDE.finditer(markdown)]
    elif kind in ("xlsx", "xls"):
        marks = [(m.start(), f"sheet {m.group(1).strip()!r}") for m in _SHEET.finditer(markdown)]
    else:
        marks = [(m.start(), f"section {m.group(1).strip()[:80]!r}") for m in _HEADING.finditer(markdown)]
    if not marks:
        return [Section("whole document", 0, len(markdown))]
    if marks[0][0] > 0 and markdown[: marks[0][0]].strip():
        marks.insert(0, (0, "beginning"))
    return [
        Section(ref, start, marks[i + 1][0] if i + 1 < len(marks) else len(markdown))
        for i, (start, ref) in enumerate(marks)
    ]


def _markitdown_version() -> str:
    try:
        from importlib.metadata import version

        return version("markitdown")
    except Exception:  # noqa: BLE001 - the cache key only needs to change when markitdown does
        return "unknown"


class DocumentConverter:
    """Converts files to markdown behind the sandbox boundary, cached by content hash.

    ``max_mb``: larger files are refused with an error naming the size; ``timeout``: seconds per
    conversion; ``memory_mb`` / ``quota_mb``: the sandbox's limits (a ZIP bomb stops there).
    """

    def __init__(
        self,
        workspace: "RunHost",
        *,
        max_mb: float = 50.0,
        timeout: float = 120.0,
        memory_mb: int = 2048,
        quota_mb: int = 2048,
    ):
        self.workspace = workspace
        self.max_bytes = int(max_mb * 2**20)
        self.timeout = float(timeout)
        self.cache_dir = workspace.path / "cache" / "markdown"
        self._config = {"timeout": timeout, "memory_mb": memory_mb, "quota_mb": quota_mb, "max_output": 20_000}
        self._limits = {"members": 500, "member_bytes": 200 * 2**20, "total_bytes": min(quota_mb, 1024) * 2**19}
        self._source = _CHILD.read_text(encoding="utf-8")
        self._hash = hashlib.sha256(self._source.encode()).hexdigest()
        self._version = _markitdown_version()

    # -- reading the caller's file ---------------------------------------------------------------
    def read_file(self, path: str | Path) -> bytes:
        """The bytes of a regular file, refusing what is too large or not a file (no symlink is followed
        at the last component: a link is resolved by the caller's check, not here)."""
        path = Path(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise DocumentError(f"{path.name}: no such file ({path})") from None
        except OSError as exc:
            raise DocumentError(f"{path.name}: cannot be opened ({exc.strerror})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise DocumentError(f"{path.name}: not a regular file")
            if st.st_size > self.max_bytes:
                raise DocumentError(
                    f"{path.name}: {st.st_size / 2**20:.0f} MB is over the analyzer's limit of "
                    f"{self.max_bytes / 2**20:g} MB (max_mb=)"
                )
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(self.max_bytes + 1)
            if len(data) > self.max_bytes:
                raise DocumentError(f"{path.name}: grew past the limit of {self.max_bytes / 2**20:g} MB while read")
            return data
        finally:
            os.close(fd)

    # -- converting -------------------------------------------------------------------------------
    async def convert(self, path: str | Path, context: Context | None = None, *, name: str | None = None) -> Conversion:
        """The file at ``path`` as markdown (from the cache when the same bytes were converted before)."""
        path = Path(path)
        return await self.convert_bytes(self.read_file(path), name or path.name, context)

    async def convert_bytes(self, data: bytes, name: str, context: Context | None = None) -> Conversion:
        """``data`` (a file called ``name``) as markdown."""
        if len(data) > self.max_bytes:
            raise DocumentError(
                f"{name}: {len(data) / 2**20:.0f} MB is over the limit of {self.max_bytes / 2**20:g} MB"
            )
        sha = hashlib.sha256(data).hexdigest()
        suffix = Path(name).suffix.lower()
        cached = self._cached(sha, suffix)
        if cached is not None:
            return Conversion(
                name, sha, cached["kind"], cached["markdown"], cached["problems"], cached["members"], True
            )
        result = await self._in_sandbox(data, name, sha, context or Context())
        magic = data[:4].decode("latin-1")
        if suffix in BINARY_SUFFIXES and magic and result["markdown"].lstrip().startswith(magic):
            # a guard behind the converter's own check: a binary file's bytes never reach the model as its text
            raise DocumentError(f"{name}: the conversion gave back the file's raw bytes, not its text")
        self._store(sha, suffix, result)
        return Conversion(name, sha, result["kind"], result["markdown"], result["problems"], result["members"])

    def convert_sync(self, path: str | Path) -> Conversion:
        """:meth:`convert` from synchronous code (outside runs: the interactive sandbox session)."""
        from tea_notebook._sync import run_sync

        return run_sync(self.convert(path))

    def _cache_path(self, sha: str, suffix: str) -> Path:
        # the name's suffix picks the converter, so it is part of the key (a CSV read as text differs)
        return self.cache_dir / f"{sha}{_SAFE.sub('', suffix)[:10]}.json"

    def _cached(self, sha: str, suffix: str) -> dict[str, Any] | None:
        try:
            entry = json.loads(self._cache_path(sha, suffix).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if (entry.get("format"), entry.get("markitdown"), entry.get("converter")) != (
            CACHE_FORMAT,
            self._version,
            self._hash,
        ):
            return None  # made by another markitdown or another version of our converter
        return entry

    def _store(self, sha: str, suffix: str, result: dict[str, Any]) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        target = self._cache_path(sha, suffix)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        tmp.write_text(
            json.dumps(
                {"format": CACHE_FORMAT, "markitdown": self._version, "converter": self._hash, **result},
                ensure_ascii=False,
            ),
            encoding="utf-8",
        )
        os.replace(tmp, target)

    async def _in_sandbox(self, data: bytes, name: str, sha: str, context: Context) -> dict[str, Any]:
        runtime = EnvironmentRuntime(self.workspace.envs.manager, SESSION_NAME, DocumentSandbox, self._config)
        safe = _SAFE.sub("_", name)[-120:] or "document"

        async def work(box: DocumentSandbox) -> dict[str, Any]:
            root = Beneath(box.folder)
            try:
                # a new file renamed into place: whatever sandboxed code left at the name is replaced
                written = write_beneath(root, f"documents/{sha[:16]}/{safe}", data, mode=0o644)  # the sandbox reads it
                source = box.folder / written
                out_rel = f"{box.workdir.name}/.documents/{sha}.md"
                result = await box._call(
                    "call",
                    self.timeout,
                    name="convert",
                    hash=self._hash,
                    source=self._source,
                    function="convert",
                    args={"path": str(source), "out": str(box.folder / out_rel), "name": name, "limits": self._limits},
                )
                if result.error is not None or result.limit is not None:
                    raise DocumentError(f"{name}: {_failure(result)}")
                summary = json.loads(result.value or "{}").get("json") or {}
                try:
                    produced = read_beneath(root, out_rel, MAX_MARKDOWN)
                except EnvironmentFailure as exc:
                    raise DocumentError(f"{name}: its markdown cannot be read: {exc}") from None
                if produced is None:
                    raise DocumentError(f"{name}: the conversion left no markdown")
                markdown = produced.decode("utf-8", "replace")
            finally:
                root.close()
            return {
                "kind": str(summary.get("kind") or "text"),
                "markdown": markdown,
                "problems": [str(p) for p in summary.get("problems") or []],
                "members": [str(m) for m in summary.get("members") or []],
            }

        return await self.workspace.envs.manager.run(runtime, context, work)


def _failure(result: Any) -> str:
    """Why a conversion failed, in one line (the converter's own message, or the limit it hit)."""
    if result.limit is not None and result.limit != "interrupted":
        return f"the conversion hit the sandbox's {result.limit} limit ({(result.error or {}).get('message', '')})"
    error = result.error or {}
    message = str(error.get("message") or "").strip()
    return message or error.get("type") or "the conversion failed"


__all__ = ["Conversion", "DocumentConverter", "DocumentError", "Section", "sections_of"]
