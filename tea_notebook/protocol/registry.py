"""The one versioned registry behind TCP, ECP and ACP.

It stores records in the workspace database (every change a new content-hashed version), keeps a
BM25 index and a faiss vector index in step with the database's change log (so a second process
sees the same registry), and implements the TEA interfaces: Register, Describe, Bind / Unbind,
Route, Invoke, plus get / list / search / versions / rollback / unregister.
"""

from __future__ import annotations

import builtins
import hashlib
import inspect
import json
import logging
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Generic, Iterable, Iterator, TypeVar, cast

from tea_notebook._lazy import LazyModule
from tea_notebook._sync import run_sync
from tea_notebook.errors import EmbeddingError, NotFoundError, RegistryError
from tea_notebook.models.embedders import query_vectors
from tea_notebook.protocol.context import Context
from tea_notebook.protocol.record_types import checked_kind, content_hash, record_class
from tea_notebook.protocol.retrieval import KeywordIndex, Ranking, SearchHit
from tea_notebook.protocol.schema import ArgumentValidator, argument_problems, not_an_object, validation_error
from tea_notebook.store.vectors import VectorIndex

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    import pydantic
    from pydantic import ValidationError

    from tea_notebook.protocol.records import Record
    from tea_notebook.protocol.store_host import StoreHost
else:  # numpy loads when vectors are first touched, pydantic when a record is first made or read
    np = LazyModule("numpy", globals(), "np")
    pydantic = LazyModule("pydantic", globals(), "pydantic")

log = logging.getLogger(__name__)
R = TypeVar("R", bound="Record")


@dataclass(frozen=True)
class VersionInfo:
    """One entry of a record's history."""

    name: str
    version: int
    hash: str
    created_at: float
    note: str
    current: bool

    def __repr__(self) -> str:
        mark = " (current)" if self.current else ""
        return f"<{self.name} v{self.version} {self.hash[:10]}{mark}>"


class InvokeError(RegistryError):
    """Raised by :meth:`InvokeResult.unwrap`; keeps the structured error of the failed call."""

    def __init__(self, name: str, error: dict[str, Any]):
        self.name, self.error = name, error
        super().__init__(f"{name}: {error.get('type')}: {error.get('message')}")


@dataclass
class InvokeResult:
    """What an invocation returned: a value, or a structured error. It never raises."""

    name: str
    ok: bool
    value: Any = None
    error: dict[str, Any] | None = None
    latency_ms: float = 0.0
    version: int = 0

    def unwrap(self) -> Any:
        """The value, or an :class:`InvokeError` carrying the structured error."""
        if not self.ok:
            raise InvokeError(self.name, self.error or {})
        return self.value

    def to_observation(self) -> str:
        """A compact text form for a model's next prompt."""
        if self.ok:
            return self.value if isinstance(self.value, str) else json.dumps(self.value, default=str)
        assert self.error is not None  # a failed result always carries its error
        return f"Error ({self.error['type']}): {self.error['message']}"


def _schema_errors(validator: ArgumentValidator, args: Any) -> dict[str, Any] | None:
    """Every schema violation of ``args`` as one structured ``ValidationError`` (see
    :func:`~tea_notebook.protocol.schema.validation_error`), or None when the arguments are valid."""
    problems = argument_problems(validator, args)
    return validation_error(problems) if problems else None


class Registry(Generic[R]):
    """A versioned, searchable registry of one record type, stored in a workspace."""

    def __init__(self, workspace: "StoreHost", record_type: "type[R] | str"):
        """``record_type`` is the record class, or its kind (``"tool"``: see
        :data:`~tea_notebook.protocol.record_types.RECORD_CLASSES`), imported when first needed."""
        self.workspace = workspace
        self._record_type: type[R] | None = None
        if isinstance(record_type, str):
            self.kind = checked_kind(record_type)
        else:
            self._record_type, self.kind = record_type, record_type.KIND
        self._db = workspace.db
        self._lock = threading.RLock()
        self._seq = 0
        self._ids: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self._texts: dict[str, str] = {}
        self._views: dict[str, str] = {}
        self._keyword = KeywordIndex()
        self._records: dict[str, R] = {}
        self._vectors: VectorIndex | None = None
        self._saved_seq = -1
        self._last_save = 0.0
        self._validators: dict[str, ArgumentValidator] = {}
        self._validator_of: dict[int, tuple[dict[str, Any], ArgumentValidator]] = {}  # by id() of a schema
        self._searches: OrderedDict[tuple, Ranking] = OrderedDict()
        self._runtimes: dict[str, Any] = {}
        self._heads: dict[str, R] = {}
        self._heads_seq = 0
        self._usage_pending: dict[str, list[float]] = {}
        self._usage_since = 0.0

    @property
    def record_type(self) -> type[R]:
        """The class of this registry's records (imported, with pydantic, on its first use)."""
        if self._record_type is None:
            self._record_type = cast("type[R]", record_class(self.kind))
        return self._record_type

    # -- helpers for specialisations ------------------------------------------------------
    def _coerce(self, obj: Any) -> tuple[R, Any]:
        """Turn what a user passes to ``register`` into ``(record, runtime or None)``."""
        if isinstance(obj, self.record_type):
            return obj, None
        if isinstance(obj, dict):
            try:
                return self.record_type.model_validate(obj), None
            except pydantic.ValidationError as exc:
                raise RegistryError(self._explain(exc, obj.get("name", "?"))) from None
        raise RegistryError(
            f"cannot register {type(obj).__name__} in the {self.kind} registry; "
            f"pass a {self.record_type.__name__} or a dict of its fields"
        )

    def _explain(self, exc: ValidationError, name: str) -> str:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(record)"
        return f"invalid {self.kind} {name!r}: field {where!r}: {first['msg']}"

    def _check_relations(self, record: R) -> None:
        for rel in record.relations:
            if rel.type not in record.RELATION_TYPES:
                allowed = ", ".join(sorted(record.RELATION_TYPES)) or "none"
                raise RegistryError(f"{self.kind} {record.name!r}: relation type {rel.type!r} is not one of {allowed}")
            if rel.target == record.name:
                raise RegistryError(f"{self.kind} {record.name!r} cannot relate to itself")

    def _runtime_key(self, record: R) -> str:
        return record.name

    # -- Register -----------------------------------------------------------------------
    def register(self, obj: Any, *, note: str = "", embedding: Any = None, runtime: Any = None) -> R:
        """Add a record or a new version of it; identical content creates no new version.

        ``embedding`` may carry a precomputed vector of the record's search text; ``runtime`` is
        what runs behind the record in this process (an environment session, an agent runner).
        Returns the stored record with its version number.
        """
        embeddings = None if embedding is None else [embedding]
        return self.register_many([obj], note=note, embeddings=embeddings, runtime=runtime)[0]

    def register_many(
        self, objs: Iterable[Any], *, note: str = "", embeddings: Any = None, runtime: Any = None
    ) -> list[R]:
        """Register several records in one transaction (all or nothing)."""
        prepared = []
        for obj in objs:
            record, rt = self._coerce(obj)
            try:  # objects built with model_copy(update=...) skipped validation: check again
                record = self.record_type.model_validate(record.model_dump())
            except pydantic.ValidationError as exc:
                raise RegistryError(self._explain(exc, str(getattr(record, "name", "?")))) from None
            rt = runtime if runtime is not None else rt
            self._check_relations(record)
            views = json.dumps(record.search_views())
            prepared.append((record, rt, record.search_text(), views))
        if embeddings is not None:
            embeddings = np.asarray(embeddings, dtype=np.float32).reshape(len(prepared), -1)
        with self._db.transaction() as cur:
            results = []
            for record, _, text, views in prepared:
                content = record.content()
                version, _created = self._db.put_version(
                    cur, self.kind, record.name, content_hash(content), json.dumps(content), text, views, note
                )
                results.append(version)
            if embeddings is not None:
                vecs = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
                cur.executemany(
                    "INSERT OR REPLACE INTO embeddings VALUES (?,?,?,?)",
                    [
                        (self.workspace.embedder.id, _record_key(views), vecs.shape[1], vecs[i].tobytes())
                        for i, (_, _, _, views) in enumerate(prepared)
                    ],
                )
        out = []
        for (record, rt, _, _), version in zip(prepared, results):
            stored = record.model_copy(update={"version": version})
            if rt is not None:
                self._runtimes[self._runtime_key(stored)] = rt
            out.append(stored)
        return out

    # -- reading ------------------------------------------------------------------------
    def _parse(self, data: str, version: int) -> R:
        return self.record_type.model_validate({**json.loads(data), "version": version})

    def _decorate(self, record: R, usage: dict[str, tuple] | None = None) -> R:
        """Attach live data that is not versioned (usage statistics; ``usage`` when already read)."""
        if "usage" in self.record_type.model_fields:
            if usage is None:
                self.flush_usage()
                usage = self._db.usage(self.kind, record.name)
            row = usage.get(record.name)
            if row:
                from tea_notebook.protocol.records import UsageStats

                calls, failures, mean, last = row
                record = record.model_copy(
                    update={
                        "usage": UsageStats(
                            calls=calls,
                            failures=failures,
                            mean_latency_ms=1000 * mean,
                            last_used=last,
                        )
                    }
                )
        return record

    def current(self, name: str) -> R | None:
        """The current record without usage statistics, from an in-memory cache kept in step with
        the database's change log (the hot path of invoke); None when not registered."""
        self._refresh_heads()
        return self._head(name)

    def _refresh_heads(self, last: int | None = None) -> None:
        """Drop cached records that changed in the database since the last look (or up to change
        ``last``, when the caller has just read it)."""
        if last is None:
            last = self._db.last_change(self.kind)
        if last != self._heads_seq:
            if self._heads_seq == 0 or last < self._heads_seq:
                self._heads.clear()
            else:
                for change in self._db.changes_since(self.kind, self._heads_seq):
                    self._heads.pop(change.name, None)
            self._heads_seq = last

    def _head(self, name: str) -> R | None:
        """The cached current record (loaded on first use), as of the last :meth:`_refresh_heads`."""
        record = self._heads.get(name)
        if record is None:
            stored = self._db.head(self.kind, name)
            if stored is None:
                return None
            record = self._heads[name] = self._parse(stored.data, stored.version)
        return record

    def get(self, name: str, version: int | None = None) -> R:
        """The current record (or a given version). Raises NotFoundError naming what is missing."""
        if version is None:
            record = self.current(name)
            if record is None:
                raise NotFoundError(self._missing(name))
            return self._decorate(record)
        stored = self._db.version(self.kind, name, version)
        if stored is None:
            if version is not None and self._db.history(self.kind, name):
                raise NotFoundError(f"{self.kind} {name!r} has no version {version}")
            raise NotFoundError(self._missing(name))
        return self._decorate(self._parse(stored.data, stored.version))

    def _missing(self, name: str) -> str:
        self._sync()
        hint = _did_you_mean(name, self._ids)
        return f"no {self.kind} named {name!r} is registered{'; ' + hint if hint else ''}"

    def require(self, names: Iterable[str], what: str | None = None) -> None:
        """Raise NotFoundError naming every one of ``names`` that is not registered, each with the
        closest registered names ("did you mean …"); ``what`` says where the names came from
        (``"--tools"``). Checked before a run starts, so a typo never costs a run."""
        missing = [n for n in dict.fromkeys(names) if n not in self]
        if not missing:
            return
        self._sync()
        parts = []
        for name in missing:
            hint = _did_you_mean(name, self._ids)
            parts.append(f"{name!r}" + (f" ({hint})" if hint else ""))
        where = f"{what}: " if what else ""
        raise NotFoundError(f"{where}no {self.kind} named {', '.join(parts)} is registered")

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.current(name) is not None

    def __len__(self) -> int:
        self._sync()
        return len(self._ids)

    def __iter__(self) -> Iterator[R]:
        return iter(self.list())

    def names(self) -> list[str]:
        """Names of all current records, sorted."""
        self._sync()
        return sorted(self._ids)

    def list(self, **where: Any) -> list[R]:
        """Current records, optionally filtered by field equality (``category="web"``)."""
        self._sync(records=True)
        if where.get("_usage", True):
            self.flush_usage()
        usage = self._db.usage(self.kind) if where.get("_usage", True) else {}
        out = []
        for name in sorted(self._records):
            rec = self._records[name]
            if all(getattr(rec, k, None) == v for k, v in where.items() if not k.startswith("_")):
                out.append(self._decorate(rec, usage) if name in usage else rec)
        return out

    def describe(self, name: str) -> str:
        """A readable description of a record: what it is, its interface, relations and history."""
        rec = self.get(name)
        lines = [f"{self.kind} {rec.name} (v{rec.version}, {rec.category}, from {rec.origin})", rec.description]
        lines += self._describe_extra(rec)
        if rec.relations:
            lines.append("relations: " + ", ".join(f"{r.type} → {r.target}" for r in rec.relations))
        usage = getattr(rec, "usage", None)
        if usage is not None and usage.calls:
            lines.append(f"usage: {usage.calls} calls, {usage.failures} failed, {usage.mean_latency_ms:.1f} ms mean")
        lines.append(f"versions: {len(self.versions(name))}")
        return "\n".join(lines)

    def _describe_extra(self, record: R) -> builtins.list[str]:
        return []

    def versions(self, name: str) -> builtins.list[VersionInfo]:
        """Every version of a record, oldest first, the current one marked."""
        history = self._db.history(self.kind, name)
        if not history:
            raise NotFoundError(self._missing(name))
        head = self._db.head(self.kind, name)
        current = head.version if head else None
        return [VersionInfo(name, v.version, v.hash, v.created_at, v.note, v.version == current) for v in history]

    def rollback(self, name: str, version: int) -> R:
        """Make an earlier version the current one; later versions stay in the history."""
        if not self._db.history(self.kind, name):
            raise NotFoundError(self._missing(name))
        self._db.set_head(self.kind, name, version)
        return self.get(name)

    def runtime(self, name: str) -> Any:
        """The object behind a record in this process (an environment's session dispatcher, an
        agent's runner, a tool's function), or None."""
        record = self.current(name)
        return self._runtimes.get(self._runtime_key(record) if record is not None else name)

    def unregister(self, name: str) -> None:
        """Remove a record from the current set (its history is kept; register brings it back)."""
        self._db.remove_head(self.kind, name)
        self._runtimes.pop(name, None)

    # -- staying in step with the database ------------------------------------------------
    def _sync(self, records: bool = False) -> None:
        """Apply database changes made since the last look (by this or another process)."""
        with self._lock:
            if records and not self._records and self._ids:
                self._records = {v.name: self._parse(v.data, v.version) for v in self._db.heads(self.kind)}
            last = self._db.last_change(self.kind)
            if last == self._seq:
                return
            if self._seq == 0:
                self._load_all(last, records)
                return
            touched = {c.name for c in self._db.changes_since(self.kind, self._seq)}
            for name in touched:
                head = self._db.head(self.kind, name)
                if head is None:
                    doc = self._ids.pop(name, None)
                    if doc is not None:
                        self._names.pop(doc, None)
                        self._keyword.remove(doc)
                    self._texts.pop(name, None)
                    self._views.pop(name, None)
                    self._records.pop(name, None)
                    continue
                doc = self._ids.get(name) or self._db.entity_id(self.kind, name)
                assert doc is not None  # the name has a head, so it has an entity
                self._ids[name], self._names[doc] = doc, name
                self._texts[name] = head.text
                self._views[name] = head.views
                self._keyword.upsert(doc, head.text)
                if self._records or records:
                    self._records[name] = self._parse(head.data, head.version)
            self._seq = last

    def _load_all(self, last: int, records: bool) -> None:
        for doc, name, text, views in self._db.head_texts(self.kind):
            self._ids[name], self._names[doc], self._texts[name] = doc, name, text
            self._views[name] = views
            self._keyword.upsert(doc, text)
        if records:
            self._records = {v.name: self._parse(v.data, v.version) for v in self._db.heads(self.kind)}
        self._seq = last

    def _vector_file(self) -> Path:
        slug = hashlib.sha1(self.workspace.embedder.id.encode()).hexdigest()[:10]
        return self.workspace.path / "vectors" / f"{self.kind}-{slug}.faiss"

    def _embed(self, texts: builtins.list[str]) -> np.ndarray:
        embedder = self.workspace.embedder
        try:
            vecs = np.asarray(embedder.embed(texts), dtype=np.float32)
        except EmbeddingError:
            raise
        except Exception as exc:  # noqa: BLE001 - the embedder's own errors, named
            raise EmbeddingError(
                f"embedder {embedder.id!r} failed on {len(texts)} text(s): {type(exc).__name__}: {exc}"
            ) from None
        if vecs.ndim != 2 or len(vecs) != len(texts) or not np.isfinite(vecs).all():
            raise EmbeddingError(
                f"embedder {embedder.id!r} returned {vecs.shape} for {len(texts)} text(s) "
                "(or non-finite values); refusing to index it"
            )
        return vecs

    def _vectors_for(self, names: builtins.list[str]) -> np.ndarray:
        """Record vectors: the normalised weighted sum of the record's view embeddings.

        Both record vectors and view vectors are cached in the database by content hash, so
        re-registering, rolling back or reopening never embeds the same text twice.
        """
        if not names:
            return np.empty((0, 0), np.float32)
        eid = self.workspace.embedder.id
        keys = [_record_key(self._views[n]) for n in names]
        cached = self._db.get_vectors(eid, list(set(keys)))
        todo = {k: json.loads(self._views[n]) for n, k in zip(names, keys) if k not in cached}
        if todo:
            texts = sorted({t for views in todo.values() for t, _ in views})
            view_vecs = self._db.get_vectors(eid, [_text_key(t) for t in texts])
            missing = [t for t in texts if _text_key(t) not in view_vecs]
            if missing:
                log.info("embedding %d %s texts with %s", len(missing), self.kind, eid)
                fresh: dict[str, np.ndarray] = {}
                for start in range(0, len(missing), 256):
                    chunk = missing[start : start + 256]
                    fresh.update({_text_key(t): v for t, v in zip(chunk, self._embed(chunk))})
                self._db.put_vectors(eid, fresh)
                view_vecs.update(fresh)
            combined: dict[str, np.ndarray] = {}
            for key, views in todo.items():
                vec = sum(w * view_vecs[_text_key(t)] for t, w in views)
                combined[key] = (vec / max(float(np.linalg.norm(vec)), 1e-12)).astype(np.float32)
            self._db.put_vectors(eid, combined)
            cached.update(combined)
        dims = {v.shape[0] for v in cached.values()}
        if len(dims) > 1:
            raise EmbeddingError(f"embedder {eid!r} produced vectors of different sizes {sorted(dims)}")
        return np.stack([cached[k] for k in keys])

    def _sync_vectors(self) -> VectorIndex | None:
        """Bring the vector index up to the registry's state (embedding what is new).

        The index file is a cache: it is written after a rebuild and at most every 30 s after
        incremental changes (and by :meth:`flush`); a stale file is caught up from the change log.
        With no index in memory and no file (the first fold of a fresh workspace), the index is
        built from every record (the fold's own few); no vector is made first to learn the size of
        a file that is not there.
        """
        self._sync()
        with self._lock:
            path = self._vector_file()
            index = self._vectors
            if index is None and self._ids and path.is_file():
                probe = self._vectors_for([next(iter(self._ids))])
                index = VectorIndex.load(path, probe.shape[1])
                if index is not None:
                    self._saved_seq = index.seq
                    if index.seq > self._seq:
                        self._sync()  # another process saved a newer index: catch up to it first
                    if index.seq > self._seq:
                        index = None
            if index is not None and index.seq == self._seq:
                self._vectors = index
                return index
            rebuilt = False
            if index is not None:
                touched = {c.name for c in self._db.changes_since(self.kind, index.seq)}
                present = [n for n in touched if n in self._ids]
                gone = [n for n in touched if n not in self._ids]
                ids_gone = [i for i in (self._db.entity_id(self.kind, n) for n in gone) if i]
                index.remove(np.array(ids_gone, np.int64))
                if present:
                    index.upsert(np.array([self._ids[n] for n in present], np.int64), self._vectors_for(present))
                if index.needs_rebuild():
                    index = None
            if index is None:
                names = list(self._ids)
                if not names:
                    self._vectors = None
                    return None
                vecs = self._vectors_for(names)
                index = VectorIndex(vecs.shape[1])
                index.rebuild(np.array([self._ids[n] for n in names], np.int64), vecs)
                rebuilt = True
            index.seq = self._seq
            self._vectors = index
            if rebuilt or time.monotonic() - self._last_save > 30:
                self.flush()
            return index

    def flush(self) -> None:
        """Write pending usage counts, and the vector index file if it is behind the in-memory index."""
        self.flush_usage()
        with self._lock:
            index = self._vectors
            if index is not None and index.seq != self._saved_seq:
                index.save(self._vector_file())
                self._saved_seq = index.seq
                self._last_save = time.monotonic()

    def index(self) -> int:
        """Embed and index everything now (otherwise the first search does it). Returns the count."""
        index = self._sync_vectors()
        return 0 if index is None else len(index)

    # -- Retrieve -----------------------------------------------------------------------
    def _query_vector(self, query: str) -> np.ndarray:
        """The embedding of a query, kept with the embedder (see
        :class:`~tea_notebook.models.embedders.QueryVectors`): every registry of the workspace, and
        every search of the same text, embeds it once."""
        cache = query_vectors(self.workspace.embedder)
        vec = None if cache is None else cache.get(query)
        if vec is None:
            vec = self._embed([query])[0]
            if cache is not None:
                cache.put(query, vec)
        return vec

    def search(
        self, query: str, k: int = 5, *, mode: str = "hybrid", keyword_weight: float = 0.2, **where: Any
    ) -> builtins.list[SearchHit[R]]:
        """Top-k records for a query: ``mode`` is ``hybrid`` (BM25 + embeddings), ``semantic`` or ``keyword``.

        ``where`` filters by field equality first (``category="web"``, ``toolkit="browser"``).
        Raises EmbeddingError when semantic search is asked for and embedding fails.
        """
        hits = []
        for doc, score, sem, kw in self._ranked(query, k, mode, keyword_weight, where)[0]:
            name = self._names.get(doc)
            if name is not None:
                hits.append(SearchHit(name, score, sem, kw, load=self.get))
        return hits

    def _ranked(
        self, query: str, k: int, mode: str, keyword_weight: float, where: dict[str, Any]
    ) -> tuple[builtins.list[tuple[int, float, float, float]], dict[str, tuple]]:
        """The work of :meth:`search`: the best ``k`` ``(id, score, cosine, keyword)`` with the usage
        prior applied, and the usage statistics the prior was computed from (``route`` decorates its
        records with them instead of reading them again)."""
        if mode not in ("hybrid", "semantic", "keyword"):
            raise ValueError(f"mode must be 'hybrid', 'semantic' or 'keyword', not {mode!r}")
        if not isinstance(query, str) or not query.strip():
            raise ValueError("search needs a non-empty query string")
        self._sync()
        allowed: set[int] | None = None
        if where:
            allowed = {self._ids[r.name] for r in self.list(**where, _usage=False)}
            if not allowed:
                return [], {}
        pool = max(4 * k, 40)
        weight = {"keyword": 1.0, "semantic": 0.0}.get(mode, keyword_weight)
        # an agent routing its tools asks the same query (its task) every step: the index work and
        # the fusion are kept while the registry is unchanged (``_seq`` follows the database's
        # change log), and only the usage prior (which moves) is applied again
        key = (query, mode, pool, weight, self._seq, self.workspace.embedder.id) if allowed is None else None
        ranking = None
        if key is not None:
            with self._lock:
                ranking = self._searches.get(key)
                if ranking is not None:
                    self._searches.move_to_end(key)
        if ranking is None:
            keyword, semantic = {}, {}
            if mode != "semantic":
                ids, scores = self._keyword.search(query, pool, allowed)
                keyword = dict(zip(ids.tolist(), scores.tolist()))
            if mode != "keyword":
                qvec = self._query_vector(query)
                index = self._sync_vectors()
                if index is not None:
                    ids, scores = index.search(qvec, pool, allowed)
                    semantic = dict(zip(ids.tolist(), scores.tolist()))
            ranking = Ranking(semantic, keyword, keyword_weight=weight)
            if key is not None:
                with self._lock:
                    self._searches[key] = ranking
                    if len(self._searches) > 64:
                        self._searches.popitem(last=False)
        usage = self._usage()
        return ranking.top(k, self._usage_prior(usage)), usage

    def similar(
        self, query: "str | R", k: int = 5, threshold: float | None = None, **where: Any
    ) -> builtins.list[tuple[R, float]]:
        """Records by pure cosine similarity, best first: ``[(record, cosine), ...]``.

        ``query`` is a text (embedded like a search query) or a record of this registry's type (its
        vector is built from its search views exactly as a registered record's is, so a record can
        be compared with the registered ones before it is registered). Only records with cosine
        ≥ ``threshold`` (when given) and matching ``where`` (field equality, checked on the current
        versions) are returned. No keyword score and no usage prior: this is the δ test of
        embedding-threshold retrieval. Raises EmbeddingError when embedding fails.
        """
        if isinstance(query, str):
            if not query.strip():
                raise ValueError("similar needs a non-empty query string")
            qvec = self._query_vector(query)
        elif isinstance(query, self.record_type):
            qvec = self._record_vector(query)
        else:
            expected = self.record_type.__name__
            raise TypeError(f"similar takes a text or a record ({expected}), not {type(query).__name__}")
        if k <= 0:
            return []
        index = self._sync_vectors()
        if index is None:
            return []
        if where:
            self._sync(records=True)  # filter on the in-memory current records (no parsing per candidate)
        out: list[tuple[R, float]] = []
        pool = k if not where else max(10 * k, 50)  # the search costs the same; fewer re-searches
        seen: set[int] = set()
        while True:
            ids, scores = index.search(qvec, pool)
            below = False
            for doc, score in zip(ids.tolist(), scores.tolist()):
                if doc in seen:
                    continue
                seen.add(doc)
                if threshold is not None and score < threshold:
                    below = True
                    break
                name = self._names.get(doc)
                if name is None:
                    continue
                record = self._records.get(name) if where else self.current(name)
                if record is None or any(getattr(record, f, None) != v for f, v in where.items()):
                    continue
                out.append((record, float(score)))
                if len(out) == k:
                    break
            if len(out) >= k or below or len(ids) < pool:
                break
            pool *= 4
        if out and "usage" in self.record_type.model_fields:
            out = [(self._decorate(rec), score) for rec, score in out]
        return out

    def _record_vector(self, record: R) -> np.ndarray:
        """The vector ``record`` has (or would have) in the index: its weighted, normalised views."""
        views = record.search_views()
        eid = self.workspace.embedder.id
        key = _record_key(json.dumps(views))
        cached = self._db.get_vectors(eid, [key])
        if key in cached:
            return cached[key]
        texts = sorted({t for t, _ in views})
        view_vecs = self._db.get_vectors(eid, [_text_key(t) for t in texts])
        missing = [t for t in texts if _text_key(t) not in view_vecs]
        fresh = {_text_key(t): v for t, v in zip(missing, self._embed(missing))} if missing else {}
        view_vecs.update(fresh)
        vec = cast("np.ndarray", sum(w * view_vecs[_text_key(t)] for t, w in views))  # views are never empty
        vec = (vec / max(float(np.linalg.norm(vec)), 1e-12)).astype(np.float32)
        fresh[key] = vec
        self._db.put_vectors(eid, fresh)
        return vec

    def _usage(self) -> dict[str, tuple]:
        """Usage statistics of every used record of this kind (pending counts written first)."""
        self.flush_usage()
        return self._db.usage(self.kind)

    def _usage_prior(self, usage: dict[str, tuple] | None = None) -> dict[int, float]:
        """A small bonus for tools that were used and worked (App. B.3's usage signals)."""
        if usage is None:
            self.flush_usage()
            usage = self._db.usage(self.kind)
        out = {}
        for name, (calls, failures, _total, _last) in usage.items():
            doc = self._ids.get(name)
            if doc is not None and calls:
                rate = (calls - failures) / calls
                out[doc] = 0.03 * (2 * rate - 1) * min(1.0, math.log1p(calls) / math.log1p(50))
        return out

    # -- Bind / Unbind ------------------------------------------------------------------
    def bind(self, name: str, context: Context) -> Context:
        """Attach a record to a run context (it must exist)."""
        if name not in self:
            raise NotFoundError(self._missing(name))
        context.bind(self.kind, name)
        return context

    def unbind(self, name: str, context: Context) -> Context:
        """Detach a record from a run context."""
        if not context.unbind(self.kind, name):
            raise NotFoundError(f"{self.kind} {name!r} is not bound to context {context.id!r}")
        return context

    # -- Route --------------------------------------------------------------------------
    def route(
        self, query: str | None = None, context: Context | None = None, *, k: int = 10, **where: Any
    ) -> builtins.list[R]:
        """Candidates for a request: retrieved (if ``query``), limited to what ``context`` binds,
        and pruned by the relation graph (see :meth:`_admissible`)."""
        if query:
            ranked, usage = self._ranked(query, max(k * 3, 20), "hybrid", 0.2, where)
            # the current records of the hits from the cache of heads, as of the change the search saw,
            # read as pruning asks for them (it stops at ``k``)
            self._refresh_heads(self._seq)
            candidates: Iterable[R] = self._heads_of(self._names.get(doc) for doc, *_ in ranked)
        else:
            candidates = self.list(**where)
            self._refresh_heads()
        bound = context.bound(self.kind) if context is not None else []
        if bound:
            candidates = (c for c in candidates if c.name in bound)
        chosen = self._prune(candidates, context, k) if k >= 0 else self._prune(candidates, context)[:k]
        if query:  # usage statistics attached to what is returned only (pruning does not read them)
            chosen = [self._decorate(c, usage) if c.name in usage else c for c in chosen]
        return chosen

    def _heads_of(self, names: Iterable[str | None]) -> Iterator[R]:
        """The cached current records of ``names`` (None entries skipped), one at a time."""
        for name in names:
            if name is None:
                continue
            record = self._head(name)
            if record is None:
                raise NotFoundError(self._missing(name))
            yield record

    def prune(self, candidates: builtins.list[R], context: Context | None = None) -> builtins.list[R]:
        """Keep the candidates the relation graph admits, in order (see :meth:`_admissible`)."""
        self._refresh_heads()  # dependencies are looked up in the cache of heads, as of now
        return self._prune(candidates, context)

    def _prune(self, candidates: Iterable[R], context: Context | None, limit: int | None = None) -> builtins.list[R]:
        """:meth:`prune` with the heads already refreshed, stopping once ``limit`` are chosen (a
        candidate's admission depends only on those before it, so the first ``limit`` are the same)."""
        chosen: list[R] = []
        if limit is not None and limit <= 0:
            return chosen
        taken = set(context.bound(self.kind)) if context is not None else set()
        blocked: set[str] = set()
        for cand in candidates:
            if self._admissible(cand, taken, blocked, context):
                chosen.append(cand)
                if len(chosen) == limit:
                    break
                taken.add(cand.name)
                if cand.relations:
                    blocked.update(cand.related("conflicts_with"))
        return chosen

    def _admissible(self, cand: R, taken: set[str], blocked: set[str], context: Context | None) -> bool:
        """Relation pruning: dependencies must exist, conflicts with chosen or bound records exclude.

        ``taken`` holds the names of the bound and already chosen records, ``blocked`` the names
        the chosen records conflict with (kept by :meth:`prune`, so each candidate costs the same
        however many were chosen before it)."""
        if cand.name in blocked:
            return False
        if not cand.relations:
            return True
        for dep in cand.related("depends_on"):
            if self._head(dep) is None:
                return False
        return not any(c in taken and c != cand.name for c in cand.related("conflicts_with"))

    # -- relation graph -----------------------------------------------------------------
    def graph(self, type_: str | None = None) -> builtins.list[tuple[str, str, str]]:
        """Edges ``(source, type, target)`` of the relation graph over current records."""
        return [
            (rec.name, rel.type, rel.target)
            for rec in self.list(_usage=False)
            for rel in rec.relations
            if type_ is None or rel.type == type_
        ]

    def relate(self, name: str, type_: str, target: str, note: str = "") -> R:
        """Add a relation edge (a new version of ``name``)."""
        from tea_notebook.protocol.records import Relation

        rec = self.get(name)
        if any(r.type == type_ and r.target == target for r in rec.relations):
            return rec
        updated = rec.model_copy(update={"relations": [*rec.relations, Relation(type=type_, target=target, note=note)]})
        return self.register(updated, note=f"relate {type_} {target}")

    # -- Invoke -------------------------------------------------------------------------
    def _validator(self, schema: dict[str, Any]) -> ArgumentValidator:
        """The validator of a schema: found by the schema object itself while that is the one a cached
        record holds (every call of a tool until its registry changes), else by its content."""
        held = self._validator_of.get(id(schema))
        if held is not None and held[0] is schema:
            return held[1]
        key = json.dumps(schema, sort_keys=True)
        validator = self._validators.get(key)
        if validator is None:  # jsonschema itself is imported only when arguments break the schema
            validator = self._validators[key] = ArgumentValidator(schema)
        if len(self._validator_of) >= 1024:  # schemas of records replaced since: let them go
            self._validator_of.clear()
        self._validator_of[id(schema)] = (schema, validator)  # kept alive, so its id is not reused
        return validator

    async def _invoke(
        self,
        name: str,
        label: str,
        schema: dict[str, Any] | None,
        args: Any,
        call: Callable[[dict[str, Any]], Any],
        context: Context | None,
        version: int = 0,
    ) -> InvokeResult:
        """Validate, call, time and count one invocation; every failure becomes a structured error."""
        import asyncio  # here, not at import: opening a workspace needs no event loop

        if args is None:
            args = {}
        if not isinstance(args, dict):
            return InvokeResult(label, False, error=validation_error([not_an_object(schema, args)]), version=version)
        if schema is not None:
            problem = _schema_errors(self._validator(schema), args)
            if problem is not None:
                self._count(name, label, False, None, context)
                return InvokeResult(label, False, error=problem, version=version)
        start = time.perf_counter()
        try:
            value = call(args)
            if inspect.isawaitable(value):
                value = await value
            ok, error = True, None
        except asyncio.CancelledError:
            raise
        except InvokeError as exc:  # a nested invocation (A2T, E2T) keeps its own error
            value, ok, error = None, False, dict(exc.error)
        except Exception as exc:  # noqa: BLE001 - a tool's failure is an observation, not a crash
            value, ok = None, False
            error = {"type": type(exc).__name__, "message": str(exc) or type(exc).__name__}
        latency = time.perf_counter() - start
        self._count(name, label, ok, latency, context)
        return InvokeResult(label, ok, value, error, 1000 * latency, version)

    def _count(self, name: str, label: str, ok: bool, latency: float | None, context: Context | None) -> None:
        """Count an invocation. Inside an agent run the counts are batched (the agent flushes them
        at the end of each step, reads of statistics flush first); otherwise they are written now."""
        now = time.time()
        with self._lock:
            slot = self._usage_pending.setdefault(name, [0, 0, 0, 0.0, 0.0])
            slot[0] += 1
            slot[1] += 0 if ok else 1
            slot[2] += 0 if latency is None else 1
            slot[3] += latency or 0.0
            slot[4] = now
            if not self._usage_since:
                self._usage_since = now
        if not getattr(context, "is_run", False) or now - self._usage_since > 0.5:
            self.flush_usage()
        if context is not None:
            context.record_call(self.kind, label, ok)

    def flush_usage(self) -> None:
        """Write pending invocation counts."""
        pending = self.take_usage()
        if pending:
            try:
                self._db.record_uses(self.kind, pending)
            except Exception as exc:  # noqa: BLE001 - statistics must not fail a call
                log.warning("could not record usage of %s: %s", ", ".join(r[0] for r in pending), exc)

    def take_usage(self) -> builtins.list[tuple]:
        """Pending invocation counts, handed over to be written by the caller (the agent loop writes
        them in its step's one transaction): rows for :meth:`Database.record_uses`."""
        with self._lock:
            pending, self._usage_pending, self._usage_since = self._usage_pending, {}, 0.0
        return [(n, *v) for n, v in pending.items()]

    def _sync_invoke(self, coro: Awaitable[InvokeResult]) -> InvokeResult:
        return run_sync(coro)  # type: ignore[arg-type]


def _text_key(text: str) -> str:
    """Cache key of one embedded text."""
    return hashlib.sha256(b"text:" + text.encode()).hexdigest()


def _record_key(views: str) -> str:
    """Cache key of a record vector (its views, serialised)."""
    return hashlib.sha256(b"record:" + views.encode()).hexdigest()


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    """The hint "did you mean a, b?" naming the registered names closest to a misspelt ``name``
    (difflib's ratio, names containing it or contained in it), or "" when none is close."""
    import difflib

    known = list(known)
    lowered = {k.lower(): k for k in known}
    close = [lowered[k] for k in difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.6)]
    close += [k for k in known if k not in close and (name.lower() in k.lower() or k.lower() in name.lower())]
    return f"did you mean {', '.join(close[:3])}?" if close else ""


def not_found_result(label: str, message: str) -> InvokeResult:
    """The structured error for invoking something that is not registered."""
    return InvokeResult(label, False, error={"type": "NotFoundError", "message": message})


__all__ = ["Registry", "InvokeResult", "InvokeError", "VersionInfo", "SearchHit", "not_found_result"]
