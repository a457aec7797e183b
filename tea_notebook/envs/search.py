"""Search engines for the deep researcher, behind one small interface.

An engine has a ``name`` and ``search(query, k)`` (sync or async) returning :class:`Hit` objects;
an engine that serves its own documents (the local corpus) also has ``read(url)``. Three come
with tea_notebook:

- :class:`WebSearch`: the web through the ``ddgs`` metasearch library (DuckDuckGo, Bing, Brave,
  Google, … as ddgs backends);
- :class:`CorpusSearch`: a folder of documents (markdown, text, HTML, PDF) indexed with the
  workspace's own hybrid retrieval (BM25 fused with embedding cosine), kept in a SQLite file and
  updated when files change;
- any user object with ``name`` and ``search``.

Engines are named by a spec string so that an agent's choice survives a kernel restart:
``"web"`` (or ``"web:bing"`` for one ddgs backend), ``"corpus:/path/to/folder"``, or
``"module:Class"`` for a user class that takes no arguments.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tea_notebook.errors import TeaError
from tea_notebook.protocol.retrieval import KeywordIndex, fuse

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost

CORPUS_SUFFIXES = (".md", ".markdown", ".txt", ".text", ".rst", ".html", ".htm", ".pdf")


class SearchError(TeaError):
    """An engine could not answer (network down, rate limit, a bad engine spec)."""


@dataclass
class Hit:
    """One search result: where it is, what it is called, the engine's snippet."""

    url: str
    title: str
    snippet: str
    engine: str
    score: float = 0.0

    def line(self, number: int) -> str:
        """The hit as a numbered line for a prompt or an observation."""
        snippet = " ".join(self.snippet.split())[:300]
        return f"[{number}] {self.title or '(no title)'} — {self.url}\n    {snippet}"


@dataclass
class Page:
    """A page's readable text and how it was obtained (``http``, ``browser``, ``corpus``, ``file``)."""

    url: str
    title: str
    text: str
    via: str


class WebSearch:
    """The web through ``ddgs`` (metasearch: ``backend="auto"`` or e.g. ``"bing,brave"``)."""

    def __init__(self, backend: str = "auto", *, timeout: int = 10, region: str = "us-en"):
        self.backend, self.timeout, self.region = backend, timeout, region
        self.name = "web" if backend == "auto" else f"web:{backend}"

    def search(self, query: str, k: int = 5) -> list[Hit]:
        try:
            from ddgs import DDGS
            from ddgs.exceptions import DDGSException
        except ImportError as exc:  # pragma: no cover - a dependency of tea_notebook
            raise SearchError(f"web search needs the ddgs package ({exc})") from None
        try:
            rows = DDGS(timeout=self.timeout).text(query, max_results=k, backend=self.backend, region=self.region)
        except DDGSException as exc:
            raise SearchError(f"{self.name}: {type(exc).__name__}: {exc}") from None
        return [
            Hit(str(r.get("href") or ""), str(r.get("title") or ""), str(r.get("body") or ""), self.name)
            for r in rows or []
            if r.get("href")
        ]

    def __repr__(self) -> str:
        return f"WebSearch({self.backend!r})"


# -- the local corpus -------------------------------------------------------------------------------
def split_chunks(text: str, size: int = 1200) -> list[str]:
    """Paragraph-aligned pieces of at most about ``size`` characters (a longer paragraph is cut)."""
    out: list[str] = []
    current = ""
    for para in (p.strip() for p in text.replace("\r\n", "\n").split("\n\n")):
        if not para:
            continue
        while len(para) > size:
            if current:
                out.append(current)
                current = ""
            out.append(para[:size])
            para = para[size:]
        if current and len(current) + len(para) + 2 > size:
            out.append(current)
            current = ""
        current = f"{current}\n\n{para}" if current else para
    if current:
        out.append(current)
    return out


def _title_of(text: str, fallback: str) -> str:
    for line in text.splitlines()[:20]:
        line = line.strip()
        if line.startswith("#"):
            return line.lstrip("#").strip()[:200] or fallback
        if line:
            return line[:120]
    return fallback


def html_to_markdown(html: str, url: str | None = None) -> tuple[str, str]:
    """``(title, markdown)`` of an HTML page's main content (trafilatura), "" when it has none."""
    import trafilatura

    text = trafilatura.extract(
        html, url=url, output_format="markdown", include_links=True, include_tables=True, favor_recall=True
    )
    meta = trafilatura.extract_metadata(html)
    title = (meta.title if meta is not None and meta.title else "") or ""
    return title, (text or "").strip()


class CorpusSearch:
    """A folder of documents as a search engine, indexed with hybrid retrieval.

    ``CorpusSearch(ws, "docs/")``. The index (chunks, their vectors from the workspace's embedder)
    lives in ``<workspace>/corpora/<folder hash>.db`` and is brought up to date on first use and by
    :meth:`refresh` (only changed files are read again). PDFs are converted behind the sandbox
    boundary by the workspace's document converter. Hits have ``corpus://NAME/relative/path`` URLs;
    :meth:`read` returns a document's whole text.
    """

    def __init__(self, workspace: "RunHost", folder: str | Path, *, name: str | None = None, chunk_chars: int = 1200):
        self.workspace = workspace
        self.folder = Path(folder).expanduser().resolve()
        if not self.folder.is_dir():
            raise SearchError(f"corpus folder {self.folder} does not exist or is not a folder")
        self.name = name or f"corpus:{self.folder.name}"
        self.chunk_chars = chunk_chars
        key = hashlib.sha256(f"{self.folder}|{workspace.embedder.id}|{chunk_chars}".encode()).hexdigest()[:16]
        self.db_path = workspace.path / "corpora" / f"{key}.db"
        self._lock = threading.Lock()
        self._ready = False
        self._keyword = KeywordIndex()
        self._vectors: Any = None
        self._chunk_doc: dict[int, int] = {}
        self._docs: dict[int, tuple[str, str]] = {}  # id -> (relative path, title)
        self.problems: list[str] = []  # files that could not be read at the last refresh

    @property
    def spec(self) -> str:
        """How this engine is named in an agent's card."""
        return f"corpus:{self.folder}"

    def _connect(self) -> sqlite3.Connection:
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.db_path, check_same_thread=False)
        db.executescript(
            """
            CREATE TABLE IF NOT EXISTS docs(id INTEGER PRIMARY KEY, path TEXT UNIQUE, size INTEGER,
                                            mtime INTEGER, title TEXT, text TEXT);
            CREATE TABLE IF NOT EXISTS chunks(id INTEGER PRIMARY KEY, doc INTEGER, ord INTEGER, text TEXT,
                                              vector BLOB);
            CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc);
            """
        )
        return db

    def _files(self) -> dict[str, Path]:
        out = {}
        for path in sorted(self.folder.rglob("*")):
            if path.suffix.lower() in CORPUS_SUFFIXES and path.is_file() and not path.is_symlink():
                out[path.relative_to(self.folder).as_posix()] = path
        return out

    def _read_document(self, path: Path) -> tuple[str, str]:
        """``(title, text)`` of one corpus file."""
        suffix = path.suffix.lower()
        if suffix == ".pdf":
            from tea_notebook.envs.documents import DocumentConverter

            conversion = DocumentConverter(self.workspace).convert_sync(path)
            if not conversion.markdown.strip():
                raise SearchError("; ".join(conversion.problems) or "no text")
            return _title_of(conversion.markdown, path.stem), conversion.markdown
        raw = path.read_text(encoding="utf-8", errors="replace")
        if suffix in (".html", ".htm"):
            title, text = html_to_markdown(raw)
            return title or path.stem, text
        return _title_of(raw, path.stem), raw

    def refresh(self) -> dict[str, int]:
        """Bring the index up to date with the folder; counts of added, changed, removed, unchanged files."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> dict[str, int]:
        counts = {"added": 0, "changed": 0, "removed": 0, "unchanged": 0}
        if not self.folder.is_dir():  # gone (or unmounted): keep the index rather than empty it
            raise SearchError(f"corpus folder {self.folder} does not exist or is not a folder")
        self.problems = []
        db = self._connect()
        try:
            known = {row[1]: row for row in db.execute("SELECT id, path, size, mtime FROM docs")}
            files = self._files()
            for rel in set(known) - set(files):
                doc_id = known[rel][0]
                db.execute("DELETE FROM chunks WHERE doc = ?", (doc_id,))
                db.execute("DELETE FROM docs WHERE id = ?", (doc_id,))
                counts["removed"] += 1
            pending: list[tuple[int, int, str]] = []
            for rel, path in files.items():
                st = path.stat()
                row = known.get(rel)
                if row is not None and row[2] == st.st_size and row[3] == st.st_mtime_ns:
                    counts["unchanged"] += 1
                    continue
                try:
                    title, text = self._read_document(path)
                except (OSError, TeaError, ValueError) as exc:
                    self.problems.append(f"{rel}: {exc}")
                    continue
                if row is not None:
                    db.execute("DELETE FROM chunks WHERE doc = ?", (row[0],))
                    db.execute(
                        "UPDATE docs SET size=?, mtime=?, title=?, text=? WHERE id=?",
                        (st.st_size, st.st_mtime_ns, title, text, row[0]),
                    )
                    doc_id = row[0]
                    counts["changed"] += 1
                else:
                    cur = db.execute(
                        "INSERT INTO docs(path, size, mtime, title, text) VALUES (?, ?, ?, ?, ?)",
                        (rel, st.st_size, st.st_mtime_ns, title, text),
                    )
                    doc_id = int(cur.lastrowid)
                    counts["added"] += 1
                for i, chunk in enumerate(split_chunks(text, self.chunk_chars) or [title]):
                    cur = db.execute("INSERT INTO chunks(doc, ord, text) VALUES (?, ?, ?)", (doc_id, i, chunk))
                    pending.append((int(cur.lastrowid), doc_id, f"{title}\n{chunk}"))
            for start in range(0, len(pending), 256):  # embed in batches; rows keep their vectors
                batch = pending[start : start + 256]
                vectors = self.workspace.embedder.embed([text for _, _, text in batch])
                db.executemany(
                    "UPDATE chunks SET vector = ? WHERE id = ?",
                    [(vectors[i].astype(np.float32).tobytes(), cid) for i, (cid, _, _) in enumerate(batch)],
                )
            db.commit()
            self._load(db)
        finally:
            db.close()
        self._ready = True
        return counts

    def _load(self, db: sqlite3.Connection) -> None:
        from tea_notebook.store.vectors import VectorIndex

        self._keyword = KeywordIndex()
        self._docs = {row[0]: (row[1], row[2]) for row in db.execute("SELECT id, path, title FROM docs")}
        ids, vectors = [], []
        self._chunk_doc = {}
        for cid, doc, text, blob in db.execute("SELECT id, doc, text, vector FROM chunks"):
            self._chunk_doc[cid] = doc
            self._keyword.upsert(cid, f"{self._docs.get(doc, ('', ''))[1]}\n{text}")
            if blob:
                ids.append(cid)
                vectors.append(np.frombuffer(blob, np.float32))
        dim = len(vectors[0]) if vectors else 1
        index = VectorIndex(dim)
        if vectors:
            index.rebuild(np.array(ids, np.int64), np.vstack(vectors))
        self._vectors = index

    def _ensure(self) -> None:
        if not self._ready:
            self.refresh()

    def __len__(self) -> int:
        self._ensure()
        return len(self._docs)

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """The ``k`` documents whose best chunk matches ``query`` best (hybrid score)."""
        self._ensure()
        with self._lock:
            if not self._chunk_doc:
                return []
            pool = max(4 * k, 20)
            qv = self.workspace.embedder.embed([query])[0]
            vec_ids, vec_scores = self._vectors.search(qv, pool)
            kw_ids, kw_scores = self._keyword.search(query, pool)
            fused = fuse(
                dict(zip(vec_ids.tolist(), vec_scores.tolist())), dict(zip(kw_ids.tolist(), kw_scores.tolist()))
            )
            best: dict[int, tuple[float, int]] = {}
            for cid, score, _sem, _kw in fused:
                doc = self._chunk_doc.get(cid)
                if doc is not None and (doc not in best or score > best[doc][0]):
                    best[doc] = (score, cid)
            ranked = sorted(best.items(), key=lambda kv: -kv[1][0])[:k]
            if not ranked:
                return []
            db = sqlite3.connect(self.db_path)
            try:
                texts = dict(
                    db.execute(
                        f"SELECT id, text FROM chunks WHERE id IN ({','.join('?' * len(ranked))})",
                        [cid for _, (_, cid) in ranked],
                    ).fetchall()
                )
            finally:
                db.close()
        return [
            Hit(self._url(self._docs[doc][0]), self._docs[doc][1], texts.get(cid, ""), self.name, score)
            for doc, (score, cid) in ranked
        ]

    def _url(self, rel: str) -> str:
        return f"corpus://{self.folder.name}/{rel}"

    def read(self, url: str) -> Page | None:
        """A corpus document's whole text by its ``corpus://`` URL; None for other URLs."""
        prefix = f"corpus://{self.folder.name}/"
        if not url.startswith(prefix):
            return None
        self._ensure()
        db = sqlite3.connect(self.db_path)
        try:
            row = db.execute("SELECT title, text FROM docs WHERE path = ?", (url[len(prefix) :],)).fetchone()
        finally:
            db.close()
        return Page(url, row[0], row[1], "corpus") if row else None

    def __repr__(self) -> str:
        return f"CorpusSearch({str(self.folder)!r})"


# -- specs and failover -----------------------------------------------------------------------------
def engine_spec(engine: Any) -> str:
    """The spec string that rebuilds ``engine`` in another process (a class path for user classes)."""
    if isinstance(engine, str):
        return engine
    spec = getattr(engine, "spec", None)
    if isinstance(spec, str):
        return spec
    if isinstance(engine, WebSearch):
        return engine.name
    cls = type(engine)
    return f"{cls.__module__}:{cls.__qualname__}"


def make_engine(spec: Any, workspace: "RunHost") -> Any:
    """An engine from a spec string (or the engine object itself)."""
    if not isinstance(spec, str):
        if not callable(getattr(spec, "search", None)):
            raise SearchError(f"a search engine needs a search(query, k) method; {spec!r} has none")
        return spec
    if spec == "web" or spec.startswith("web:"):
        return WebSearch(spec.partition(":")[2] or "auto")
    if spec.startswith("corpus:"):
        return CorpusSearch(workspace, spec.partition(":")[2])
    module, _, qual = spec.partition(":")
    if not module or not qual:
        raise SearchError(
            f"unknown search engine {spec!r}: use 'web', 'web:BACKEND', 'corpus:FOLDER' or 'module:Class'"
        )
    try:
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
        return obj()
    except Exception as exc:  # noqa: BLE001 - any failure to build it is the spec's problem
        raise SearchError(f"search engine {spec!r} could not be built: {type(exc).__name__}: {exc}") from None


async def search_one(engine: Any, query: str, k: int, timeout: float) -> list[Hit]:
    """Run one engine's search (sync ones in a thread) within ``timeout`` seconds."""
    fn = engine.search
    if inspect.iscoroutinefunction(fn):
        work = fn(query, k)
    else:
        work = asyncio.to_thread(fn, query, k)
    try:
        hits = await asyncio.wait_for(work, timeout)
    except asyncio.TimeoutError:
        raise SearchError(f"no answer within {timeout:g} s") from None
    out = []
    for h in hits or []:
        if not isinstance(h, Hit):
            raise SearchError(f"search() must return Hit objects, got {type(h).__name__}")
        out.append(h)
    return out


async def search_with_failover(
    engines: list[Any], query: str, k: int, timeout: float = 20.0
) -> tuple[list[Hit], list[str]]:
    """The hits of the first engine that answers with any, and a note per engine tried.

    An engine that raises, times out or finds nothing is noted and the next one is tried.
    """
    notes: list[str] = []
    for engine in engines:
        name = getattr(engine, "name", type(engine).__name__)
        try:
            hits = await search_one(engine, query, k, timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a user engine may raise anything: it is an observation
            detail = str(exc) if isinstance(exc, SearchError) else f"{type(exc).__name__}: {exc}"
            notes.append(f"{name} failed: {detail}")
            continue
        if hits:
            notes.append(f"{name}: {len(hits)} hit(s)")
            return hits, notes
        notes.append(f"{name}: no results")
    return [], notes


__all__ = [
    "CorpusSearch",
    "Hit",
    "Page",
    "SearchError",
    "WebSearch",
    "engine_spec",
    "make_engine",
    "search_with_failover",
    "split_chunks",
]
