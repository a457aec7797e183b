"""The workspace database: versioned records, change log, usage statistics and cached embeddings.

One SQLite file in WAL mode. Writers take ``BEGIN IMMEDIATE`` so two processes registering at
the same time serialise instead of losing versions; readers never block.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from tea_notebook.errors import NotFoundError, WorkspaceError

FORMAT = "tea_notebook"
SCHEMA_VERSION = 1
_SQLITE_MAGIC = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entities(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL, name TEXT NOT NULL, UNIQUE(kind, name));
CREATE TABLE IF NOT EXISTS versions(
    kind TEXT NOT NULL, name TEXT NOT NULL, version INTEGER NOT NULL,
    hash TEXT NOT NULL, data TEXT NOT NULL, text TEXT NOT NULL, views TEXT NOT NULL,
    created_at REAL NOT NULL, note TEXT NOT NULL DEFAULT '',
    PRIMARY KEY(kind, name, version));
CREATE TABLE IF NOT EXISTS heads(
    kind TEXT NOT NULL, name TEXT NOT NULL, version INTEGER NOT NULL,
    PRIMARY KEY(kind, name));
CREATE TABLE IF NOT EXISTS changes(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL, name TEXT NOT NULL, op TEXT NOT NULL,
    version INTEGER, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS usage(
    kind TEXT NOT NULL, name TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0,
    timed INTEGER NOT NULL DEFAULT 0, total_latency REAL NOT NULL DEFAULT 0, last_used REAL,
    PRIMARY KEY(kind, name));
CREATE TABLE IF NOT EXISTS runs(
    id TEXT PRIMARY KEY, parent_id TEXT, agent TEXT NOT NULL, task TEXT NOT NULL,
    model TEXT NOT NULL DEFAULT '', status TEXT NOT NULL, started REAL NOT NULL, ended REAL,
    answer TEXT, forked_from TEXT, fork_step INTEGER);
CREATE TABLE IF NOT EXISTS events(
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, run_id TEXT NOT NULL,
    parent_id TEXT, type TEXT NOT NULL, step INTEGER, time REAL NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_run ON events(run_id, seq);
CREATE TABLE IF NOT EXISTS embeddings(
    embedder TEXT NOT NULL, text_hash TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY(embedder, text_hash));
"""


@dataclass(frozen=True)
class StoredVersion:
    """One stored version of a record, as the database holds it."""

    kind: str
    name: str
    version: int
    hash: str
    data: str
    text: str
    views: str
    created_at: float
    note: str


_RUN_COLUMNS = (
    "id",
    "parent_id",
    "agent",
    "task",
    "model",
    "status",
    "started",
    "ended",
    "answer",
    "forked_from",
    "fork_step",
)


@dataclass(frozen=True)
class Change:
    """One entry of the change log (register, rollback or unregister)."""

    seq: int
    kind: str
    name: str
    op: str
    version: int | None
    at: float


def _check_is_ours(path: Path) -> None:
    """Refuse a file that is not a tea_notebook database, without writing to it."""
    with open(path, "rb") as fh:
        head = fh.read(16)
    if head != _SQLITE_MAGIC:
        raise WorkspaceError(f"{path} is not a tea_notebook database (not an SQLite file)")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60.0)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:
                return  # a database another process is creating right now: ours to finish
            rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            conn.execute("SELECT count(*) FROM versions").fetchone()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise WorkspaceError(f"{path} is not a readable tea_notebook database ({exc})") from None
    if rows.get("format") != FORMAT:
        raise WorkspaceError(f"{path} is an SQLite database of another program, not tea_notebook")
    found = int(rows.get("schema_version", "0"))
    if found > SCHEMA_VERSION:
        raise WorkspaceError(
            f"{path} was written by a newer tea_notebook (schema {found}, this one reads {SCHEMA_VERSION})"
        )


class Database:
    """The SQLite file of a workspace. Thread-safe within a process; safe across processes."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.exists() and self.path.stat().st_size > 0:
            _check_is_ours(self.path)
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA busy_timeout=60000")
            with self.transaction() as cur:
                for stmt in filter(str.strip, _SCHEMA.split(";")):
                    cur.execute(stmt)
                cur.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))
                cur.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as exc:
            raise WorkspaceError(f"cannot open workspace database {self.path}: {exc}") from None

    # -- plumbing -------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """A write transaction that holds the database's write lock from its first statement."""
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            else:
                cur.execute("COMMIT")

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._conn.execute(sql, args).fetchall()

    def close(self) -> None:
        """Close the connection (the file stays)."""
        with self._lock:
            self._conn.close()

    # -- meta ---------------------------------------------------------------------------
    def meta(self, key: str, default: str | None = None) -> str | None:
        """A workspace setting stored in the database."""
        rows = self._read("SELECT value FROM meta WHERE key=?", (key,))
        return rows[0][0] if rows else default

    def set_meta(self, key: str, value: str) -> None:
        """Store a workspace setting."""
        with self.transaction() as cur:
            cur.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # -- versions -----------------------------------------------------------------------
    def put_version(
        self,
        cur: sqlite3.Cursor,
        kind: str,
        name: str,
        hash_: str,
        data: str,
        text: str,
        views: str,
        note: str = "",
    ) -> tuple[int, bool]:
        """Make ``data`` the current version of ``name`` inside an open transaction.

        Returns ``(version, created)``. Content equal to the current version creates nothing.
        """
        head = cur.execute(
            "SELECT h.version, v.hash FROM heads h JOIN versions v "
            "ON v.kind=h.kind AND v.name=h.name AND v.version=h.version "
            "WHERE h.kind=? AND h.name=?",
            (kind, name),
        ).fetchone()
        if head is not None and head[1] == hash_:
            return head[0], False
        last = cur.execute("SELECT max(version) FROM versions WHERE kind=? AND name=?", (kind, name)).fetchone()[0]
        version = (last or 0) + 1
        now = time.time()
        cur.execute(
            "INSERT INTO versions VALUES (?,?,?,?,?,?,?,?,?)",
            (kind, name, version, hash_, data, text, views, now, note),
        )
        cur.execute("INSERT OR REPLACE INTO heads VALUES (?,?,?)", (kind, name, version))
        cur.execute("INSERT OR IGNORE INTO entities(kind, name) VALUES (?,?)", (kind, name))
        cur.execute(
            "INSERT INTO changes(kind, name, op, version, at) VALUES (?,?,?,?,?)",
            (kind, name, "register", version, now),
        )
        return version, True

    def set_head(self, kind: str, name: str, version: int) -> None:
        """Make an existing stored version the current one (rollback)."""
        with self.transaction() as cur:
            found = cur.execute(
                "SELECT 1 FROM versions WHERE kind=? AND name=? AND version=?", (kind, name, version)
            ).fetchone()
            if not found:
                raise NotFoundError(f"{kind} {name!r} has no version {version}")
            cur.execute("INSERT OR REPLACE INTO heads VALUES (?,?,?)", (kind, name, version))
            cur.execute(
                "INSERT INTO changes(kind, name, op, version, at) VALUES (?,?,?,?,?)",
                (kind, name, "rollback", version, time.time()),
            )

    def remove_head(self, kind: str, name: str) -> None:
        """Take a record out of the current set; its versions stay in the history."""
        with self.transaction() as cur:
            gone = cur.execute("DELETE FROM heads WHERE kind=? AND name=?", (kind, name)).rowcount
            if not gone:
                raise NotFoundError(f"no {kind} named {name!r} is registered")
            cur.execute(
                "INSERT INTO changes(kind, name, op, version, at) VALUES (?,?,?,?,?)",
                (kind, name, "unregister", None, time.time()),
            )

    def head(self, kind: str, name: str) -> StoredVersion | None:
        """The current version of a record, or None."""
        rows = self._read(
            "SELECT v.* FROM heads h JOIN versions v "
            "ON v.kind=h.kind AND v.name=h.name AND v.version=h.version "
            "WHERE h.kind=? AND h.name=?",
            (kind, name),
        )
        return StoredVersion(*rows[0]) if rows else None

    def version(self, kind: str, name: str, version: int) -> StoredVersion | None:
        """One stored version, current or not."""
        rows = self._read("SELECT * FROM versions WHERE kind=? AND name=? AND version=?", (kind, name, version))
        return StoredVersion(*rows[0]) if rows else None

    def history(self, kind: str, name: str) -> list[StoredVersion]:
        """Every stored version of a record, oldest first."""
        rows = self._read("SELECT * FROM versions WHERE kind=? AND name=? ORDER BY version", (kind, name))
        return [StoredVersion(*r) for r in rows]

    def heads(self, kind: str) -> list[StoredVersion]:
        """The current version of every registered record of a kind, by name."""
        rows = self._read(
            "SELECT v.* FROM heads h JOIN versions v "
            "ON v.kind=h.kind AND v.name=h.name AND v.version=h.version "
            "WHERE h.kind=? ORDER BY h.name",
            (kind,),
        )
        return [StoredVersion(*r) for r in rows]

    def head_texts(self, kind: str) -> list[tuple[int, str, str, str]]:
        """``(entity id, name, keyword text, embedding views)`` of every current record of a kind."""
        return self._read(
            "SELECT e.id, h.name, v.text, v.views FROM heads h "
            "JOIN versions v ON v.kind=h.kind AND v.name=h.name AND v.version=h.version "
            "JOIN entities e ON e.kind=h.kind AND e.name=h.name WHERE h.kind=?",
            (kind,),
        )

    def entity_id(self, kind: str, name: str) -> int | None:
        """The stable integer id of a name (used as the vector id)."""
        rows = self._read("SELECT id FROM entities WHERE kind=? AND name=?", (kind, name))
        return rows[0][0] if rows else None

    # -- change log ---------------------------------------------------------------------
    def last_change(self, kind: str) -> int:
        """The sequence number of the newest change to a kind (0 when none)."""
        return self._read("SELECT coalesce(max(seq), 0) FROM changes WHERE kind=?", (kind,))[0][0]

    def changes_since(self, kind: str, seq: int) -> list[Change]:
        """Changes to a kind after ``seq``, oldest first."""
        rows = self._read("SELECT * FROM changes WHERE kind=? AND seq>? ORDER BY seq", (kind, seq))
        return [Change(*r) for r in rows]

    # -- usage --------------------------------------------------------------------------
    def record_uses(self, kind: str, rows: list[tuple[str, int, int, int, float, float]]) -> None:
        """Add invocation counts ``(name, calls, failures, timed calls, total latency, last used)``."""
        with self.transaction() as cur:
            cur.executemany(
                "INSERT INTO usage(kind, name, calls, failures, timed, total_latency, last_used) "
                "VALUES (?,?,?,?,?,?,?) ON CONFLICT(kind, name) DO UPDATE SET "
                "calls=calls+excluded.calls, failures=failures+excluded.failures, timed=timed+excluded.timed, "
                "total_latency=total_latency+excluded.total_latency, "
                "last_used=max(coalesce(last_used, 0), excluded.last_used)",
                [(kind, *row) for row in rows],
            )

    def usage(self, kind: str, name: str | None = None) -> dict[str, tuple[int, int, float, float | None]]:
        """``name -> (calls, failures, mean latency in seconds of calls that ran, last used)`` for a
        kind (or one name of it)."""
        sql = (
            "SELECT name, calls, failures, CASE WHEN timed > 0 THEN total_latency / timed ELSE 0 END, "
            "last_used FROM usage WHERE kind=?"
        )
        rows = self._read(sql + " AND name=?", (kind, name)) if name else self._read(sql, (kind,))
        return {r[0]: tuple(r[1:]) for r in rows}  # type: ignore[misc]

    # -- runs and events ----------------------------------------------------------------
    def start_run(self, row: dict) -> None:
        """Insert a run row (status 'running')."""
        with self.transaction() as cur:
            cur.execute(
                "INSERT INTO runs(id, parent_id, agent, task, model, status, started, forked_from, fork_step) "
                "VALUES (:id, :parent_id, :agent, :task, :model, 'running', :started, :forked_from, :fork_step)",
                row,
            )

    def finish_run(self, run_id: str, status: str, answer: str | None) -> None:
        """Record how a run ended (the caller redacts secrets from ``answer``)."""
        with self.transaction() as cur:
            cur.execute("UPDATE runs SET status=?, answer=?, ended=? WHERE id=?", (status, answer, time.time(), run_id))

    def append_events(self, rows: list[tuple]) -> None:
        """Append events ``(id, run_id, parent_id, type, step, time, data)`` in one transaction."""
        with self.transaction() as cur:
            cur.executemany(
                "INSERT INTO events(id, run_id, parent_id, type, step, time, data) VALUES (?,?,?,?,?,?,?)", rows
            )

    def run_row(self, run_id: str) -> dict | None:
        """One run's row as a dict (an unambiguous id prefix works too)."""
        rows = self._read("SELECT * FROM runs WHERE id=?", (run_id,))
        if not rows:
            rows = self._read("SELECT * FROM runs WHERE id LIKE ? LIMIT 2", (run_id + "%",))
            if len(rows) != 1:
                return None
        return dict(zip(_RUN_COLUMNS, rows[0]))

    def runs(self, limit: int = 50, parent_id: str | None = "") -> list[dict]:
        """Newest runs first; by default top-level runs only (``parent_id=None`` for all)."""
        if parent_id is None:
            rows = self._read("SELECT * FROM runs ORDER BY started DESC LIMIT ?", (limit,))
        elif parent_id == "":
            rows = self._read("SELECT * FROM runs WHERE parent_id IS NULL ORDER BY started DESC LIMIT ?", (limit,))
        else:
            rows = self._read("SELECT * FROM runs WHERE parent_id=? ORDER BY started", (parent_id,))
        return [dict(zip(_RUN_COLUMNS, r)) for r in rows]

    def events_of(self, run_ids: list[str]) -> list[tuple]:
        """Events of some runs in order: ``(seq, id, run_id, parent_id, type, step, time, data)``."""
        if not run_ids:
            return []
        marks = ",".join("?" * len(run_ids))
        return self._read(f"SELECT * FROM events WHERE run_id IN ({marks}) ORDER BY seq", tuple(run_ids))

    def model_usage(self, run_ids: list[str]) -> tuple[int, int, float]:
        """Summed ``(prompt tokens, completion tokens, cost)`` of the model calls of some runs."""
        if not run_ids:
            return 0, 0, 0.0
        marks = ",".join("?" * len(run_ids))
        row = self._read(
            "SELECT coalesce(sum(json_extract(data, '$.prompt_tokens')), 0), "
            "coalesce(sum(json_extract(data, '$.completion_tokens')), 0), "
            f"coalesce(sum(json_extract(data, '$.cost')), 0.0) FROM events "
            f"WHERE type='model_response' AND run_id IN ({marks})",
            tuple(run_ids),
        )[0]
        return int(row[0]), int(row[1]), float(row[2])

    def events_of_type(self, types: list[str]) -> list[tuple[str, str, float, str]]:
        """``(run_id, type, time, data)`` of every event of the given types, oldest first."""
        marks = ",".join("?" * len(types))
        return self._read(
            f"SELECT run_id, type, time, data FROM events WHERE type IN ({marks}) ORDER BY seq", tuple(types)
        )

    def tool_call_names(self) -> list[tuple[str]]:
        """The tool name of every tool call event (for plots)."""
        return self._read("SELECT json_extract(data, '$.name') FROM events WHERE type='tool_call'")

    def descendants(self, run_id: str) -> list[str]:
        """The run and every run nested under it."""
        out, frontier = [run_id], [run_id]
        while frontier:
            marks = ",".join("?" * len(frontier))
            frontier = [r[0] for r in self._read(f"SELECT id FROM runs WHERE parent_id IN ({marks})", tuple(frontier))]
            out += frontier
        return out

    # -- embeddings ---------------------------------------------------------------------
    def get_vectors(self, embedder: str, text_hashes: list[str]) -> dict[str, np.ndarray]:
        """Cached embeddings for text hashes (missing ones are absent from the result)."""
        out: dict[str, np.ndarray] = {}
        for start in range(0, len(text_hashes), 500):
            chunk = text_hashes[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for h, dim, blob in self._read(
                f"SELECT text_hash, dim, vector FROM embeddings WHERE embedder=? AND text_hash IN ({marks})",
                (embedder, *chunk),
            ):
                out[h] = np.frombuffer(blob, dtype=np.float32, count=dim)
        return out

    def put_vectors(self, embedder: str, vectors: dict[str, np.ndarray]) -> None:
        """Cache embeddings by text hash."""
        with self.transaction() as cur:
            cur.executemany(
                "INSERT OR REPLACE INTO embeddings VALUES (?,?,?,?)",
                [
                    (embedder, h, int(v.shape[0]), np.ascontiguousarray(v, np.float32).tobytes())
                    for h, v in vectors.items()
                ],
            )
