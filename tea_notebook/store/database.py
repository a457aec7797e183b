"""The workspace database: versioned records, change log, usage statistics, cached embeddings,
runs with their events, and the full texts of clipped fields (``blobs``).

One SQLite file in WAL mode. Writers take ``BEGIN IMMEDIATE`` so two processes registering at
the same time serialise instead of losing versions; readers never block.

Opening checks the file before trusting it: only a missing ``tea.db`` makes a new workspace (built
under a temporary name and linked into place whole, so no one ever sees it half made); an empty,
foreign, newer or damaged file is refused with a :class:`WorkspaceError` naming it, and left as it
is. Runs that a dead process left ``running`` are marked ``interrupted`` (see
:meth:`Database.interrupt_orphaned_runs`).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import itertools
import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, NoReturn

from tea_notebook._lazy import LazyModule
from tea_notebook.errors import NotFoundError, WorkspaceError
from tea_notebook.store.blobs import build, clip
from tea_notebook.store.blobs import digest as text_digest

if TYPE_CHECKING:  # numpy loads when vectors are first touched, not with the workspace
    import socket

    import numpy as np

    from tea_notebook import redaction
else:  # loaded by the first run (its owner, its redacted task), not by opening the workspace
    socket = LazyModule("socket", globals(), "socket")
    redaction = LazyModule("tea_notebook.redaction", globals(), "redaction")

FORMAT = "tea_notebook"
SCHEMA_VERSION = 1
EVENTS_VERSION = 1
"""The shape of the stored events (``meta.events_version``), as :mod:`tea_notebook.runtime.event_types`
declares it. A workspace made before events were versioned has none (version 0). A release that
changes what an event holds raises it and adds the step that rewrites older events to
:data:`_EVENT_MIGRATIONS`; opening a workspace runs the steps it lacks. Separate from the schema
version: an older release still opens a workspace whose events it reads the same."""
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: the JSON paths of a record's data that :meth:`Database.count_heads` counts through an index (a
#: routed agent's tools offered only by name; candidates of the evolution registries)
COUNTED_PATHS = ("$.metadata.routing", "$.metadata.evolution.status")

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
CREATE INDEX IF NOT EXISTS changes_by_kind ON changes(kind, seq);
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
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, run_id TEXT NOT NULL,
    parent_id TEXT, type TEXT NOT NULL, step INTEGER, time REAL NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_run ON events(run_id, seq);
CREATE TABLE IF NOT EXISTS embeddings(
    embedder TEXT NOT NULL, text_hash TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY(embedder, text_hash));
CREATE TABLE IF NOT EXISTS blobs(
    digest TEXT PRIMARY KEY, size INTEGER NOT NULL, data BLOB, recipe TEXT);
CREATE TABLE IF NOT EXISTS file_blobs(
    digest TEXT PRIMARY KEY, size INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS evaluations(
    name TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL, config TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS eval_results(
    evaluation TEXT NOT NULL, task_id TEXT NOT NULL, position INTEGER NOT NULL, status TEXT NOT NULL,
    correct INTEGER, data TEXT NOT NULL, finished REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY(evaluation, task_id));
"""
# ``events.seq`` orders events (reads, merges, cuts); it is an INTEGER PRIMARY KEY, so a new event gets
# the largest seq plus one. Workspaces made before issue 32 declared it AUTOINCREMENT (and keep it:
# ``IF NOT EXISTS`` leaves a table as it is), which also updates ``sqlite_sequence`` on every insert: one
# more page in each step's commit. The two give the same numbers as long as no event is deleted, and
# nothing deletes events: a release that deletes runs must keep seq from going back (never delete the
# newest event, or bring AUTOINCREMENT back). Both forms read and write alike, for this release and
# older ones.
# ``evaluations`` and ``eval_results`` (batch evaluation, tea_notebook.eval) came after schema 1 was
# released: tables an older reader never opens, created at open like the rest (a migration, not a
# new schema version). One row per (evaluation, task), written as each task ends.
# Columns added to ``runs`` after schema 1 was released. Adding them is compatible both ways (an
# older reader ignores them), so it is a migration at open, not a new schema version: which
# process runs a run, to tell a run whose process died from one that is still going.
_RUN_OWNER_COLUMNS = (("owner_pid", "INTEGER"), ("owner_host", "TEXT"), ("owner_start", "TEXT"))
_JOURNAL_SIZE_LIMIT = 4 * 1024 * 1024  # the WAL file shrinks back after a large write


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


_RUN_SELECT = ", ".join(_RUN_COLUMNS)
_LAST_CHANGE = "SELECT coalesce(max(seq), 0) FROM changes WHERE kind=?"


@functools.lru_cache(maxsize=1)
def _machine() -> tuple[str, str]:
    """``(boot id, PID namespace)`` of this machine and process ("" where unknown)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return boot, namespace


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """``(state, start time in clock ticks after boot)`` of a process, from ``/proc``; None when unseen."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()  # the command name may hold spaces and parentheses
    return fields[0].decode(), fields[19].decode()


def _this_process() -> tuple[str, str]:
    """``(host name, start identity)`` of this process: boot id, PID namespace and start time, so a
    later process that gets the same pid is not taken for this one."""
    boot, namespace = _machine()
    stat = _proc_stat(os.getpid())
    return socket.gethostname(), f"{boot}|{namespace}|{stat[1] if stat else ''}"


def _owner_gone(pid: int, host: str | None, start: str | None) -> str | None:
    """Why the process that owns a run has certainly ended, or None (alive, or cannot be told)."""
    if not pid or pid <= 0 or host != socket.gethostname():
        return None  # another machine (or container): its processes cannot be seen from here
    parts = (start or "").split("|")
    boot, namespace, started = parts if len(parts) == 3 else ("", "", "")
    my_boot, my_namespace = _machine()
    if boot and my_boot and boot != my_boot:
        return f"the machine restarted after pid {pid} on {host} started it"
    if namespace != my_namespace:
        return None
    stat = _proc_stat(pid) if started else None
    if stat is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return f"the process that ran it (pid {pid} on {host}) has ended"
        except OSError:
            pass  # it exists but is not ours to signal
        return None  # a live pid whose start cannot be compared may be the owner
    state, ticks = stat
    if state in ("Z", "X"):
        return f"the process that ran it (pid {pid} on {host}) has ended"
    if ticks != started:
        return f"the process that ran it (pid {pid} on {host}) has ended (the pid now belongs to another process)"
    return None


@dataclass(frozen=True)
class Change:
    """One entry of the change log (register, rollback or unregister)."""

    seq: int
    kind: str
    name: str
    op: str
    version: int | None
    at: float


_ID_SOURCE: tuple[int, int, Iterator[int]] = (0, 0, iter(()))  # (pid, random base, counter) of new_id


def new_id() -> str:
    """A fresh, sortable-enough unique id (of a run or an event): the time in ms, then 40 bits that
    are a random number drawn once per process plus a counter (a uuid4 each costs more than the
    rest of an event's bookkeeping; two processes collide only drawing within 2**20 of each other
    and writing in the same millisecond)."""
    global _ID_SOURCE
    pid, base, counter = _ID_SOURCE
    if pid != os.getpid():  # the first id of this process (a forked child draws its own)
        pid, base, counter = _ID_SOURCE = (os.getpid(), int.from_bytes(os.urandom(5), "big"), itertools.count())
    return f"{int(time.time() * 1000):x}{(base + next(counter)) & 0xFFFFFFFFFF:010x}"


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    """True for errors that mean the file itself is damaged (not a lock, not a constraint)."""
    name = getattr(exc, "sqlite_errorname", "")
    return name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or "malformed" in str(exc) or "not a database" in str(exc)


#: the shape of :meth:`Database.export_run_tree`'s data: 1 (no ``version`` key) carried no
#: run-folder files; 2 adds ``file_blobs``. A newer shape is refused on import, an older one imports.
RUN_TREE_VERSION = 2


def _folder_digests(data: Any) -> set[str]:
    """The sha256 digests of run-folder files an event's data (JSON text or dict) names in its
    ``folder`` field (markers such as ``"!link"`` and deletions are no files)."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except ValueError:
            return set()
    folder = data.get("folder") if isinstance(data, dict) else None
    if not isinstance(folder, dict):
        return set()
    return {v for v in folder.values() if isinstance(v, str) and len(v) == 64 and not v.startswith("!")}


def _is_full(exc: sqlite3.DatabaseError) -> bool:
    """True when SQLite could not write because the disk (or a quota) is full."""
    return getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL" or "database or disk is full" in str(exc)


def _free_space(folder: Path) -> str:
    """The free space left where ``folder`` is, for a message (``'12 KiB'``); ``'unknown'`` when it cannot be read."""
    import shutil

    try:
        free = float(shutil.disk_usage(folder).free)
    except OSError:
        return "unknown"
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if free < 1024 or unit == "GiB":
            return f"{free:.0f} {unit}" if unit == "bytes" else f"{free:.1f} {unit}"
        free /= 1024
    return "unknown"  # pragma: no cover - the loop always returns


def _damaged(path: Path, problem: object) -> WorkspaceError:
    return WorkspaceError(
        f"workspace database {path} is damaged ({problem}); it was left as it is: restore it from a "
        "backup, or move it away to start a new workspace in this folder"
    )


def _init_schema(cur: sqlite3.Cursor) -> None:
    """Create what is missing (tables, indexes, later columns) inside an open write transaction."""
    for stmt in filter(str.strip, _SCHEMA.split(";")):
        cur.execute(stmt)
    have = {row[1] for row in cur.execute("PRAGMA table_info(runs)")}
    for column, kind in _RUN_OWNER_COLUMNS:
        if column not in have:
            cur.execute(f"ALTER TABLE runs ADD COLUMN {column} {kind}")
    cur.execute("CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status)")
    for i, path in enumerate(COUNTED_PATHS):  # what Database.count_heads counts through an index
        cur.execute(f"CREATE INDEX IF NOT EXISTS versions_counted_{i} ON versions(kind, json_extract(data, '{path}'))")
    cur.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))
    cur.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    _migrate_events(cur)


def _events_0_to_1(cur: sqlite3.Cursor) -> None:
    """Events before they were typed (issue 27): the definitions name every field as the emit sites
    wrote it then, so no stored event changes; the step only stamps the version."""


# step i brings stored events from version i to i + 1
_EVENT_MIGRATIONS: tuple[Callable[[sqlite3.Cursor], None], ...] = (_events_0_to_1,)


def _events_version(found: str | None) -> int:
    return int(found) if found is not None else 0


def _migrate_events(cur: sqlite3.Cursor) -> None:
    """Bring the stored events to :data:`EVENTS_VERSION` inside the open write transaction (a newer
    version was refused before: see :func:`_check_is_ours`)."""
    row = cur.execute("SELECT value FROM meta WHERE key='events_version'").fetchone()
    found = _events_version(row[0] if row else None)
    if found >= EVENTS_VERSION:
        return
    for step in _EVENT_MIGRATIONS[found:EVENTS_VERSION]:
        step(cur)
    cur.execute("INSERT OR REPLACE INTO meta VALUES ('events_version', ?)", (str(EVENTS_VERSION),))


def _create(path: Path) -> None:
    """Make a new database at ``path`` (which did not exist): built under a temporary name and
    hard-linked into place, so another process never opens a half-made (empty) file. When another
    process links its own first, that one is used."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.new")
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            cur = conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            _init_schema(cur)
            cur.execute("COMMIT")
        finally:
            conn.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created it first
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(tmp, path)
    except (OSError, sqlite3.Error) as exc:
        raise WorkspaceError(f"cannot create workspace database {path}: {exc}") from None
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)


def _check_is_ours(path: Path) -> None:
    """Refuse a file that is not a sound tea_notebook database, without writing to it."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        raise WorkspaceError(f"cannot read workspace database {path}: {exc.strerror or exc}") from None
    if size == 0:
        raise WorkspaceError(
            f"{path} is empty (0 bytes), not a tea_notebook database; a new workspace is only made where "
            "no tea.db exists: delete the empty file to start afresh"
        )
    if head != _SQLITE_MAGIC:
        raise WorkspaceError(f"{path} is not a tea_notebook database (not an SQLite file)")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60.0)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:
                return  # a database another process is creating right now: ours to finish
            rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            problems = []
            if rows.get("format") != FORMAT:
                conn.execute("SELECT count(*) FROM versions").fetchone()
            else:  # ours: anything wrong from here on is damage
                try:
                    conn.execute("SELECT count(*) FROM versions").fetchone()
                    # reads every page once: tens of milliseconds for a 150 MB file
                    problems = [r[0] for r in conn.execute("PRAGMA quick_check(3)") if r[0] != "ok"]
                except sqlite3.DatabaseError as exc:
                    problems = [str(exc)]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise WorkspaceError(f"{path} is not a readable tea_notebook database ({exc})") from None
    if problems:
        raise _damaged(path, "; ".join(problems))
    if rows.get("format") != FORMAT:
        raise WorkspaceError(f"{path} is an SQLite database of another program, not tea_notebook")
    found = int(rows.get("schema_version", "0"))
    if found > SCHEMA_VERSION:
        raise WorkspaceError(
            f"{path} was written by a newer tea_notebook (schema {found}, this one reads {SCHEMA_VERSION})"
        )
    events = _events_version(rows.get("events_version"))
    if events > EVENTS_VERSION:
        raise WorkspaceError(
            f"{path} holds events of a newer tea_notebook (events version {events}, this one reads "
            f"{EVENTS_VERSION}): open it with that release"
        )


def _put_uses(cur: sqlite3.Cursor, kind: str, rows: list[tuple]) -> None:
    """Add invocation counts ``(name, calls, failures, timed calls, total latency, last used)``."""
    cur.executemany(
        "INSERT INTO usage(kind, name, calls, failures, timed, total_latency, last_used) "
        "VALUES (?,?,?,?,?,?,?) ON CONFLICT(kind, name) DO UPDATE SET "
        "calls=calls+excluded.calls, failures=failures+excluded.failures, timed=timed+excluded.timed, "
        "total_latency=total_latency+excluded.total_latency, "
        "last_used=max(coalesce(last_used, 0), excluded.last_used)",
        [(kind, *row) for row in rows],
    )


_EVENTS_AT_ONCE = 32  # rows of one INSERT statement (7 values each, far below SQLite's limit)


@functools.lru_cache(maxsize=_EVENTS_AT_ONCE)
def _insert_events(rows: int) -> str:
    """The statement that inserts ``rows`` events, in their order."""
    values = ",".join(["(?,?,?,?,?,?,?)"] * rows)
    return f"INSERT INTO events(id, run_id, parent_id, type, step, time, data) VALUES {values}"


#: the folder beside ``tea.db`` of the intent journals (:class:`IntentJournal`), one file per open event log
INTENTS_SUFFIX = "-intents"


class IntentJournal:
    """Events made durable before they are committed: what an agent run writes before a tool acts.

    A step's events are committed to SQLite in one transaction when the step ends. What the step did
    before a tool runs (the model call that chose it, the ``tool_call`` record) must survive the
    process being killed while the tool runs, so that a resume repeats no call that returned: it is
    appended here first, one ``write`` of one JSON line (a SQLite commit costs tens of times more),
    as durable as a commit of the WAL with ``synchronous=NORMAL`` (it survives the process, not a
    power cut). A process that opens the workspace after the writer died inserts what its file holds
    (:meth:`Database.recover_intents`), before it marks the writer's runs interrupted.

    A commit does not empty the file (a syscall a step): the lines of committed events stay until the
    file passes :attr:`ROTATE_AT` bytes, and the first commit after that truncates it to its header.
    Recovery inserts by event id and skips the ids already stored, so the committed lines a dead
    writer left add nothing, and only what it never committed is inserted, in its order.
    """

    ROTATE_AT = 256 * 1024
    """Bytes of lines after which a commit empties the file (what recovery may read again at most)."""

    def __init__(self, folder: Path):
        folder.mkdir(exist_ok=True)
        host, start = _this_process()
        header = (json.dumps({"pid": os.getpid(), "host": host, "start": start}) + "\n").encode()
        self.path = folder / f"{os.getpid()}-{new_id()}.jsonl"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
        os.write(self._fd, header)
        self._header = len(header)
        self._size = self._header  # what the file holds (this process is its only writer)
        self._dirty = False  # holds lines not committed yet
        self._cut = False  # a write was cut short (a full disk): the file holds an incomplete line

    def append(self, rows: list[tuple], blobs: "Mapping[str, str | tuple[int, list]]") -> None:
        """Append events ``(id, run_id, parent_id, type, step, time, data)`` and the full texts they
        point to, as one line. A write cut short raises OSError (the caller commits instead); the
        next line starts on a line of its own."""
        line = json.dumps({"rows": rows, "blobs": blobs}, ensure_ascii=False) + "\n"
        data = ("\n" + line if self._cut else line).encode("utf-8", "surrogatepass")
        self._dirty = True
        written = os.write(self._fd, data)
        self._size += written
        if written < len(data):
            self._cut = True  # until the next commit empties the file, each line starts with a newline
            raise OSError(errno.ENOSPC, f"the intent journal {self.path} took {written} of {len(data)} bytes")

    def clear(self) -> None:
        """What the journal holds is committed: it is emptied once it has grown past
        :attr:`ROTATE_AT` bytes (or holds a line cut short), else left as it is."""
        if self._dirty:
            self._dirty = False
            if self._size > self.ROTATE_AT or self._cut:
                os.ftruncate(self._fd, self._header)
                self._size, self._cut = self._header, False

    def close(self) -> None:
        """Close the file, and remove it when what it held was committed (otherwise the next open
        after this process has ended inserts it). Closing twice does nothing."""
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd < 0:
            return
        os.close(fd)
        if not self._dirty:
            self.path.unlink(missing_ok=True)

    def __del__(self) -> None:
        # a workspace dropped without ws.close() must not keep the descriptor for the life of the process
        try:
            self.close()
        except OSError:
            pass


def _read_intents(path: Path) -> tuple[dict[str, Any], list[tuple], dict[str, str | tuple[int, list]]] | None:
    """The owner, events and texts of one intent journal (a line cut short or not JSON is skipped);
    None when it cannot be read."""
    try:
        lines = path.read_bytes().decode("utf-8", "surrogatepass").splitlines()
        owner = json.loads(lines[0]) if lines else None
    except (OSError, ValueError):
        return None
    if not isinstance(owner, dict):
        return None
    rows: list[tuple] = []
    blobs: dict[str, str | tuple[int, list]] = {}
    for line in lines[1:]:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        rows.extend(tuple(r) for r in entry.get("rows") or [] if isinstance(r, list) and len(r) == 7)
        for key, kept in (entry.get("blobs") or {}).items():
            blobs[key] = kept if isinstance(kept, str) else (int(kept[0]), list(kept[1]))
    return owner, rows, blobs


class Database:
    """The SQLite file of a workspace. Thread-safe within a process; safe across processes."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.exists() and not self.path.is_symlink():
            _create(self.path)
        _check_is_ours(self.path)
        self._lock = threading.RLock()
        self._closed = False
        self._journals: list[IntentJournal] = []
        # the newest change of each kind (see last_change), valid while PRAGMA data_version reads
        # ``_changes_version``: another connection's commit moves it, this one's writes forget the kind
        self._change_seqs: dict[str, int] = {}
        self._changes_version = -1
        try:
            self._conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA busy_timeout=60000")
            self._conn.execute(f"PRAGMA journal_size_limit={_JOURNAL_SIZE_LIMIT}")
            with self.transaction() as cur:
                _init_schema(cur)
        except WorkspaceError:
            raise
        except sqlite3.DatabaseError as exc:
            raise WorkspaceError(f"cannot open workspace database {self.path}: {exc}") from None
        self.recover_intents()
        self.interrupt_orphaned_runs()

    # -- plumbing -------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """A write transaction that holds the database's write lock from its first statement.

        A damaged file shows as a :class:`WorkspaceError` naming it, not a bare sqlite3 error."""
        with self._lock, self._naming_damage():
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                try:
                    cur.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # already rolled back by SQLite (a damaged page aborts the transaction)
                raise
            cur.execute("COMMIT")

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        if self._closed:
            return self._read_closed(sql, args)
        with self._lock:
            try:  # not _naming_damage(): a context manager costs as much as the read of a cached row
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.DatabaseError as exc:
                self._raise_named(exc)

    def _read_closed(self, sql: str, args: tuple) -> list[tuple]:
        """A read after :meth:`close`, from the file through a read-only connection of its own: what was
        loaded lazily before the close (a trajectory's steps) can still be shown; writes stay refused."""
        from urllib.parse import quote

        try:
            conn = sqlite3.connect(f"file:{quote(str(self.path))}?mode=ro", uri=True, timeout=60.0)
        except sqlite3.Error as exc:
            raise WorkspaceError(f"workspace database {self.path} was closed and cannot be read again: {exc}") from None
        try:
            with self._naming_damage():
                return conn.execute(sql, args).fetchall()
        finally:
            conn.close()

    @contextmanager
    def _naming_damage(self) -> Iterator[None]:
        """A damaged file shows as a :class:`WorkspaceError` naming it, not a bare sqlite3 error."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            self._raise_named(exc)

    def _raise_named(self, exc: sqlite3.DatabaseError) -> NoReturn:
        """Raise ``exc`` as the :class:`WorkspaceError` naming a damaged file or a full disk, or as it is."""
        if _is_damage(exc):
            raise _damaged(self.path, exc) from None
        if _is_full(exc):
            raise self._disk_full() from None
        raise exc

    def _disk_full(self) -> WorkspaceError:
        """A full disk as a WorkspaceError naming the folder and the space left; this process's runs
        still ``running`` are marked ``error`` at once (their events can no longer be written), not
        left for the next open to find."""
        folder = self.path.parent
        marked = 0
        if not getattr(self, "_marking_full", False):
            self._marking_full = True
            try:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                # no checkpoint first: this small write reuses the log's space the failed one had taken
                reason = f"error: the disk holding {folder} is full; the run's events could not be written"
                host, _ = _this_process()
                self._conn.execute("BEGIN IMMEDIATE")
                marked = self._conn.execute(
                    "UPDATE runs SET status='error', answer=?, ended=? "
                    "WHERE status='running' AND owner_pid=? AND owner_host=?",
                    (reason, time.time(), os.getpid(), host),
                ).rowcount
                self._conn.execute("COMMIT")
            except sqlite3.Error:
                marked = -1
                if self._conn.in_transaction:
                    try:
                        self._conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
            finally:
                self._marking_full = False
        runs = {
            -1: "; the runs of this process could not be marked either (the next open marks them)",
            0: "",
            1: "; the run of this process that was running is marked 'error'",
        }.get(marked, f"; the {marked} runs of this process that were running are marked 'error'")
        return WorkspaceError(
            f"the disk holding workspace {folder} is full ({_free_space(folder)} free): what was being "
            f"written to {self.path.name} was not{runs}. Free some space, then go on"
        )

    def close(self) -> None:
        """Close the connection (the file stays) and the intent journals. Reads still work afterwards,
        each through a read-only connection of its own (:meth:`_read_closed`)."""
        with self._lock:
            self._closed = True
            self._conn.close()
            for journal in self._journals:
                journal.close()
            self._journals.clear()

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
        self._change_seqs.pop(kind, None)
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
            self._change_seqs.pop(kind, None)
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
            self._change_seqs.pop(kind, None)
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

    def count_heads(self, kind: str, path: str, value: Any) -> int:
        """How many current records of a kind hold ``value`` at JSON ``path`` of their data
        (``"$.metadata.routing"``), counted without loading them (through an index for the paths of
        :data:`COUNTED_PATHS`: a scan of 10,000 tools costs tens of ms, and every routed run asks)."""
        if path in COUNTED_PATHS:  # the index matches only its own expression, written out
            return self._read(
                "SELECT count(*) FROM versions v JOIN heads h "
                "ON h.kind=v.kind AND h.name=v.name AND h.version=v.version "
                f"WHERE v.kind=? AND json_extract(v.data, '{path}') = ?",
                (kind, value),
            )[0][0]
        return self._read(
            "SELECT count(*) FROM heads h JOIN versions v "
            "ON v.kind=h.kind AND v.name=h.name AND v.version=h.version "
            "WHERE h.kind=? AND json_extract(v.data, ?) = ?",
            (kind, path, value),
        )[0][0]

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
        """The sequence number of the newest change to a kind (0 when none).

        Asked several times a step (is the registry's cache current? are last step's tools still the
        ones to offer?), so it is kept per kind and read again only after a change: this connection's
        writes to the change log (:meth:`put_version`, :meth:`set_head`, :meth:`remove_head`, the only
        writers of ``changes``) forget their kind, and a commit by any other connection (another
        process, another workspace object on the folder) moves ``PRAGMA data_version``, which is read
        every time (a cheaper statement than the query) and forgets every kind. So what another
        process or thread committed before the call is seen."""
        if self._closed:
            return self._read(_LAST_CHANGE, (kind,))[0][0]
        with self._lock:
            conn = self._conn
            try:
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != self._changes_version:
                    self._change_seqs.clear()
                    self._changes_version = version
                seq = self._change_seqs.get(kind)
                if seq is None:
                    seq = conn.execute(_LAST_CHANGE, (kind,)).fetchone()[0]
                    if not conn.in_transaction:  # inside this thread's own write: not committed yet
                        self._change_seqs[kind] = seq
                return seq
            except sqlite3.DatabaseError as exc:
                self._raise_named(exc)

    def changes_since(self, kind: str, seq: int) -> list[Change]:
        """Changes to a kind after ``seq``, oldest first."""
        rows = self._read("SELECT * FROM changes WHERE kind=? AND seq>? ORDER BY seq", (kind, seq))
        return [Change(*r) for r in rows]

    # -- usage --------------------------------------------------------------------------
    def record_uses(self, kind: str, rows: list[tuple[str, int, int, int, float, float]]) -> None:
        """Add invocation counts ``(name, calls, failures, timed calls, total latency, last used)``."""
        with self.transaction() as cur:
            _put_uses(cur, kind, rows)

    def usage(self, kind: str, name: str | None = None) -> dict[str, tuple[int, int, float, float | None]]:
        """``name -> (calls, failures, mean latency in seconds of calls that ran, last used)`` for a
        kind (or one name of it)."""
        sql = (
            "SELECT name, calls, failures, CASE WHEN timed > 0 THEN total_latency / timed ELSE 0 END, "
            "last_used FROM usage WHERE kind=?"
        )
        rows = self._read(sql + " AND name=?", (kind, name)) if name else self._read(sql, (kind,))
        return {r[0]: tuple(r[1:]) for r in rows}

    # -- runs and events ----------------------------------------------------------------
    def start_run(self, row: dict) -> None:
        """Insert a run row (status 'running'), owned by this process; the task is redacted and clipped."""
        task, blob = self._stored_text(row["task"])
        host, start = _this_process()
        with self.transaction() as cur:
            self._put_blobs(cur, blob)
            cur.execute(
                "INSERT INTO runs(id, parent_id, agent, task, model, status, started, forked_from, fork_step, "
                "owner_pid, owner_host, owner_start) VALUES (:id, :parent_id, :agent, :task, :model, 'running', "
                ":started, :forked_from, :fork_step, :owner_pid, :owner_host, :owner_start)",
                {**row, "task": task, "owner_pid": os.getpid(), "owner_host": host, "owner_start": start},
            )

    def finish_run(self, run_id: str, status: str, answer: str | None) -> None:
        """Record how a run ended (``answer`` is redacted and clipped here)."""
        text, blob = self._stored_text(answer) if answer is not None else (None, {})
        with self.transaction() as cur:
            self._put_blobs(cur, blob)
            cur.execute("UPDATE runs SET status=?, answer=?, ended=? WHERE id=?", (status, text, time.time(), run_id))

    @staticmethod
    def _stored_text(text: str) -> tuple[str, dict[str, str]]:
        full = redaction.redact(str(text))
        stored, key = clip(full)
        return stored, ({key: full} if key else {})

    def append_events(
        self,
        rows: list[tuple],
        blobs: "dict[str, str | tuple[int, list]] | None" = None,
        uses: "list[tuple[str, list[tuple]]] | None" = None,
    ) -> None:
        """Append events ``(id, run_id, parent_id, type, step, time, data)``, the full texts their
        clipped fields point to and invocation counts ``uses`` (``(kind, rows)`` as for
        :meth:`record_uses`), in one transaction.

        Every step of a run commits here, so the transaction is written out rather than taken from
        :meth:`transaction` (the same statements and the same errors, without two generator-based
        context managers: a tenth of the call's CPU)."""
        with self._lock:
            cur = self._conn.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
                try:
                    if blobs:  # most steps clip nothing: no statement
                        self._put_blobs(cur, blobs)
                    for kind, use_rows in uses or ():
                        _put_uses(cur, kind, use_rows)
                    # a step's events: one statement (cheaper than executemany); rows of another length
                    # are refused by executemany, naming the row
                    if 0 < len(rows) <= _EVENTS_AT_ONCE and all(len(row) == 7 for row in rows):
                        cur.execute(_insert_events(len(rows)), [value for row in rows for value in row])
                    elif rows:
                        cur.executemany(_insert_events(1), rows)
                except BaseException:
                    try:
                        cur.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass  # already rolled back by SQLite (a damaged page aborts the transaction)
                    raise
                cur.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                self._raise_named(exc)

    def run_row(self, run_id: str) -> dict | None:
        """One run's row as a dict (an unambiguous id prefix works too)."""
        rows = self._read(f"SELECT {_RUN_SELECT} FROM runs WHERE id=?", (run_id,))
        if not rows:
            rows = self._read(f"SELECT {_RUN_SELECT} FROM runs WHERE id LIKE ? LIMIT 2", (run_id + "%",))
            if len(rows) != 1:
                return None
        return dict(zip(_RUN_COLUMNS, rows[0]))

    def runs(self, limit: int = 50, parent_id: str | None = "") -> list[dict]:
        """Newest runs first; by default top-level runs only (``parent_id=None`` for all)."""
        if parent_id is None:
            rows = self._read(f"SELECT {_RUN_SELECT} FROM runs ORDER BY started DESC LIMIT ?", (limit,))
        elif parent_id == "":
            rows = self._read(
                f"SELECT {_RUN_SELECT} FROM runs WHERE parent_id IS NULL ORDER BY started DESC LIMIT ?", (limit,)
            )
        else:
            rows = self._read(f"SELECT {_RUN_SELECT} FROM runs WHERE parent_id=? ORDER BY started", (parent_id,))
        return [dict(zip(_RUN_COLUMNS, r)) for r in rows]

    def run_owner(self, run_id: str) -> tuple[int | None, str | None, str | None]:
        """``(pid, host, start identity)`` of the process that ran a run (None for runs recorded
        before owners were)."""
        rows = self._read("SELECT owner_pid, owner_host, owner_start FROM runs WHERE id=?", (run_id,))
        if not rows:
            raise NotFoundError(f"no run {run_id!r} in {self.path}")
        return rows[0]

    def intent_journal(self) -> IntentJournal:
        """A new :class:`IntentJournal` of this workspace (one per event log), closed with the database."""
        journal = IntentJournal(self.path.with_name(self.path.name + INTENTS_SUFFIX))
        with self._lock:
            self._journals.append(journal)
        return journal

    def recover_intents(self) -> int:
        """Insert the events that processes which have ended made durable in their intent journals but
        never committed (:class:`IntentJournal`; events already committed are skipped) and remove
        their journals. Returns how many events were inserted. Called on every open, before
        :meth:`interrupt_orphaned_runs`."""
        folder = self.path.with_name(self.path.name + INTENTS_SUFFIX)
        try:
            paths = sorted(folder.iterdir())
        except OSError:  # no journal was ever written here
            return 0
        inserted = 0
        for path in paths:
            read = _read_intents(path)
            if read is None:
                continue
            owner, rows, blobs = read
            pid, host, start = owner.get("pid"), owner.get("host"), owner.get("start")
            if not isinstance(pid, int) or (pid == os.getpid() and start == _this_process()[1]):
                continue  # this process's own (another workspace object of it may still commit them)
            if _owner_gone(pid, host, start) is None:
                continue  # its writer may still commit them
            with self.transaction() as cur:
                self._put_blobs(cur, blobs)
                for row in rows:
                    inserted += cur.execute(
                        "INSERT OR IGNORE INTO events(id, run_id, parent_id, type, step, time, data) "
                        "VALUES (?,?,?,?,?,?,?)",
                        row,
                    ).rowcount
            path.unlink(missing_ok=True)
        return inserted

    def interrupt_orphaned_runs(self) -> list[str]:
        """Mark ``interrupted`` the runs left ``running`` by a process that has ended (killed,
        crashed, its machine restarted), with the reason as the run's answer and a ``run_finished``
        event. Runs of live processes, of other hosts or other PID namespaces (whose processes
        cannot be seen from here) and runs recorded without an owner are left alone. Returns the
        ids of the runs marked. Called on every open."""
        rows = self._read(
            "SELECT id, parent_id, agent, owner_pid, owner_host, owner_start FROM runs "
            "WHERE status='running' AND owner_pid IS NOT NULL"
        )
        dead = []
        for run_id, parent_id, agent, pid, host, start in rows:
            why = _owner_gone(pid, host, start)
            if why is not None:
                dead.append((run_id, parent_id, agent, why))
        if not dead:
            return []
        marked = []
        now = time.time()
        with self.transaction() as cur:
            for run_id, parent_id, agent, why in dead:
                reason = f"interrupted: {why}; found when pid {os.getpid()} opened the workspace"
                changed = cur.execute(
                    "UPDATE runs SET status='interrupted', answer=?, ended=? WHERE id=? AND status='running'",
                    (reason, now, run_id),
                ).rowcount
                if not changed:
                    continue  # another process got there first
                steps = cur.execute(
                    "SELECT coalesce(max(step), 0) FROM events WHERE run_id=? AND type='step'", (run_id,)
                ).fetchone()[0]
                usage = cur.execute(
                    "SELECT coalesce(sum(json_extract(data, '$.prompt_tokens')), 0), "
                    "coalesce(sum(json_extract(data, '$.completion_tokens')), 0), "
                    "coalesce(sum(json_extract(data, '$.cost')), 0.0) FROM events "
                    "WHERE type='model_response' AND run_id=?",
                    (run_id,),
                ).fetchone()
                root = run_id
                for _ in range(1000):
                    up = cur.execute("SELECT parent_id FROM runs WHERE id=?", (root,)).fetchone()
                    if not up or not up[0]:
                        break
                    root = up[0]
                data = {
                    "root_run": root,
                    "agent": agent,
                    "status": "interrupted",
                    "answer": "",
                    "error": reason,
                    "steps": steps,
                    "prompt_tokens": int(usage[0]),
                    "completion_tokens": int(usage[1]),
                    "cost": float(usage[2]),
                    "files": [],
                    "recovered": True,
                }
                cur.execute(
                    "INSERT INTO events(id, run_id, parent_id, type, step, time, data) VALUES (?,?,?,?,?,?,?)",
                    (new_id(), run_id, parent_id, "run_finished", None, now, json.dumps(data)),
                )
                marked.append(run_id)
        return marked

    def events_of(
        self, run_ids: list[str], *, only: tuple[str, ...] = (), without: tuple[str, ...] = ()
    ) -> list[tuple]:
        """Events of some runs in order: ``(seq, id, run_id, parent_id, type, step, time, data)``
        (``only``: of these types; ``without``: not of these types)."""
        if not run_ids:
            return []
        marks = ",".join("?" * len(run_ids))
        where = f"run_id IN ({marks})"
        if only:
            where += f" AND type IN ({','.join('?' * len(only))})"
        if without:
            where += f" AND type NOT IN ({','.join('?' * len(without))})"
        return self._read(f"SELECT * FROM events WHERE {where} ORDER BY seq", (*run_ids, *only, *without))

    def fork_events(self, run_id: str, calls_from: int) -> list[tuple]:
        """One run's own events as :meth:`events_of` gives them, for making a fork of it: without its
        model requests, and with its model replies, tool calls and results only from step
        ``calls_from`` on (the steps a fork takes again; the others replay from their ``step`` events)."""
        return self._read(
            "SELECT * FROM events WHERE run_id=? AND type != 'model_request' AND "
            "(type NOT IN ('tool_call', 'tool_result', 'model_response') OR step >= ?) ORDER BY seq",
            (run_id, calls_from),
        )

    def forks_of(self, run_ids: list[str]) -> list[dict]:
        """The runs forked (or resumed) from any of ``run_ids``, oldest first."""
        if not run_ids:
            return []
        marks = ",".join("?" * len(run_ids))
        rows = self._read(
            f"SELECT {_RUN_SELECT} FROM runs WHERE forked_from IN ({marks}) ORDER BY started", tuple(run_ids)
        )
        return [dict(zip(_RUN_COLUMNS, r)) for r in rows]

    def run_events_of_type(self, run_ids: list[str], types: list[str]) -> list[tuple[str, str, int | None, str]]:
        """``(run_id, type, step, data)`` of the events of some types of some runs (not nested), in order."""
        if not run_ids:
            return []
        self_marks, type_marks = ",".join("?" * len(run_ids)), ",".join("?" * len(types))
        return self._read(
            f"SELECT run_id, type, step, data FROM events WHERE run_id IN ({self_marks}) AND type IN ({type_marks}) "
            "ORDER BY seq",
            (*run_ids, *types),
        )

    def step_events_after(self, run_id: str, types: list[str], after: int) -> list[tuple[str, int, str]]:
        """``(type, step, data)`` of one run's own events of some types at steps after ``after``, in order
        (what a fork compares its steps with: only the original's steps it has not replayed)."""
        marks = ",".join("?" * len(types))
        return self._read(
            f"SELECT type, step, data FROM events WHERE run_id=? AND type IN ({marks}) AND step > ? ORDER BY seq",
            (run_id, *types, after),
        )

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

    def step_counts(self, run_ids: list[str]) -> dict[str, tuple[int, int]]:
        """For each run: ``(its own steps, steps with every run nested under it)`` (step events)."""
        if not run_ids:
            return {}
        marks = ",".join("?" * len(run_ids))
        rows = self._read(
            "WITH RECURSIVE tree(root, id) AS ("
            f"SELECT id, id FROM runs WHERE id IN ({marks}) "
            "UNION ALL SELECT tree.root, runs.id FROM runs JOIN tree ON runs.parent_id = tree.id) "
            "SELECT tree.root, sum(tree.id = tree.root), count(*) FROM tree "
            "JOIN events ON events.run_id = tree.id AND events.type = 'step' GROUP BY tree.root",
            tuple(run_ids),
        )
        counts = {r: (0, 0) for r in run_ids}
        counts.update({root: (int(own), int(total)) for root, own, total in rows})
        return counts

    def run_tree(self, run_id: str) -> list[dict]:
        """The rows of a run and of every run nested under it (one query), the run first, then
        oldest first."""
        rows = self._read(
            "WITH RECURSIVE tree(id) AS "
            "(SELECT ? UNION SELECT runs.id FROM runs JOIN tree ON runs.parent_id = tree.id) "
            f"SELECT {_RUN_SELECT} FROM runs WHERE id IN tree ORDER BY id != ?, started",
            (run_id, run_id),
        )
        return [dict(zip(_RUN_COLUMNS, r)) for r in rows]

    def descendants(self, run_id: str) -> list[str]:
        """The run and every run nested under it."""
        out, frontier = [run_id], [run_id]
        while frontier:
            marks = ",".join("?" * len(frontier))
            frontier = [r[0] for r in self._read(f"SELECT id FROM runs WHERE parent_id IN ({marks})", tuple(frontier))]
            out += frontier
        return out

    # -- run trees moved between workspaces (a Ray worker's runs into the driver's) -------------
    def export_run_tree(self, run_id: str) -> dict:
        """A run and its sub-runs as plain data: run rows (every column), their events in order,
        every kept full text and the run-folder file contents their events name (``file_blobs``:
        ``[sha256, bytes]``, so a fork of an imported run restores its folder; ``missing_files``: those
        this store does not have), for :meth:`import_run_tree` in another workspace. ``version`` says the tree's shape
        (:data:`RUN_TREE_VERSION`)."""
        ids = self.descendants(run_id)
        marks = ",".join("?" * len(ids))
        cols = [r[1] for r in self._read("PRAGMA table_info(runs)")]
        runs = [dict(zip(cols, r)) for r in self._read(f"SELECT * FROM runs WHERE id IN ({marks})", tuple(ids))]
        events = [list(r[1:]) for r in self.events_of(ids)]  # without the local sequence number
        blobs = [
            [d, size, None if data is None else bytes(data), recipe]
            for d, size, data, recipe in self._read("SELECT digest, size, data, recipe FROM blobs")
        ]
        named = sorted(set().union(*(_folder_digests(e[-1]) for e in events)))
        files = [[d, bytes(data)] for d, data in self._file_blob_rows(named, "data")]
        tree = {"version": RUN_TREE_VERSION, "runs": runs, "events": events, "blobs": blobs, "file_blobs": files}
        # files this store does not have either (its runs came from a tree without them): said, not lost
        tree["missing_files"] = sorted(set(named) - {d for d, _ in files})
        return tree

    def import_run_tree(self, tree: dict) -> int:
        """Add the runs, events, full texts and run-folder files of :meth:`export_run_tree` (ids kept;
        a run already here is skipped with its events). Returns the number of runs added. A tree of
        a newer shape, or whose files are damaged (content that does not match its sha256) or missing
        (named by an event, neither in the tree nor here), raises WorkspaceError and nothing is added;
        a tree exported before files travelled (version 1) imports without them."""
        files = self._checked_tree_files(tree)
        added = 0
        with self.transaction() as cur:
            have = {r[1] for r in cur.execute("PRAGMA table_info(runs)")}
            new_runs = set()
            for row in tree.get("runs", []):
                row = {k: v for k, v in row.items() if k in have}
                names = ",".join(row)
                marks = ",".join("?" * len(row))
                if cur.execute(f"INSERT OR IGNORE INTO runs({names}) VALUES ({marks})", tuple(row.values())).rowcount:
                    new_runs.add(row["id"])
                    added += 1
            cur.executemany(
                "INSERT OR IGNORE INTO events(id, run_id, parent_id, type, step, time, data) VALUES (?,?,?,?,?,?,?)",
                [tuple(e) for e in tree.get("events", []) if e[1] in new_runs],
            )
            cur.executemany(
                "INSERT OR IGNORE INTO blobs(digest, size, data, recipe) VALUES (?,?,?,?)",
                [tuple(b) for b in tree.get("blobs", [])],
            )
            cur.executemany(
                "INSERT OR IGNORE INTO file_blobs(digest, size, data) VALUES (?,?,?)",
                [(key, len(data), data) for key, data in files.items()],
            )
        return added

    def _file_blob_rows(self, digests: list[str], column: str) -> list[tuple[str, Any]]:
        """``(digest, column)`` of the kept run-folder files among ``digests`` (asked in chunks: SQLite
        limits the parameters of one statement)."""
        rows: list[tuple[str, Any]] = []
        for i in range(0, len(digests), 500):
            chunk = tuple(digests[i : i + 500])
            marks = ",".join("?" * len(chunk))
            rows += self._read(f"SELECT digest, {column} FROM file_blobs WHERE digest IN ({marks})", chunk)
        return rows

    def _checked_tree_files(self, tree: dict) -> dict[str, bytes]:
        """The run-folder files an exported tree carries, ``sha256 -> bytes``, each checked against
        its digest; WorkspaceError for a tree this release cannot read or whose files are damaged or
        missing (before anything is written)."""
        if not isinstance(tree, dict):
            raise WorkspaceError(f"a run tree is a dict from export_run_tree, not {type(tree).__name__}")
        version = tree.get("version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise WorkspaceError(f"the run tree's version must be a whole number (1 or more), not {version!r}")
        if version > RUN_TREE_VERSION:
            raise WorkspaceError(
                f"the run tree was exported by a newer tea_notebook (run tree version {version}; this one reads up "
                f"to {RUN_TREE_VERSION}): upgrade tea_notebook to import it"
            )
        files: dict[str, bytes] = {}
        entries = tree.get("file_blobs") or []
        if not isinstance(entries, list):
            raise WorkspaceError(f"the run tree's file_blobs must be a list of [sha256, bytes], not {entries!r:.100}")
        for i, entry in enumerate(entries):
            if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[1], (bytes, bytearray))):
                raise WorkspaceError(f"file_blobs[{i}] of the run tree must be [sha256, bytes], not {entry!r:.100}")
            key, data = str(entry[0]), bytes(entry[1])
            if hashlib.sha256(data).hexdigest() != key:
                raise WorkspaceError(
                    f"file_blobs[{i}] of the run tree is damaged: its content does not match sha256:{key:.64} "
                    "(nothing was imported)"
                )
            files[key] = data
        if version >= 2:
            named: set[str] = set().union(*(_folder_digests(e[-1]) for e in tree.get("events") or []))
            said = tree.get("missing_files") or []
            if not isinstance(said, list) or not all(isinstance(d, str) for d in said):
                raise WorkspaceError(f"the run tree's missing_files must be a list of digests, not {said!r:.100}")
            here = {d for d, _ in self._file_blob_rows(sorted(named - set(files)), "digest")}
            absent = sorted(named - set(files) - here - set(said))
            if absent:
                raise WorkspaceError(
                    f"the run tree names {len(absent)} run-folder file(s) it does not carry (first: "
                    f"sha256:{absent[0]}): it is incomplete; export it again (nothing was imported)"
                )
        return files

    # -- batch evaluations ----------------------------------------------------------------
    def put_evaluation(self, name: str, config: dict) -> None:
        """Create or update an evaluation's record (its configuration as JSON)."""
        now = time.time()
        with self.transaction() as cur:
            cur.execute(
                "INSERT INTO evaluations(name, created, updated, config) VALUES (?,?,?,?) "
                "ON CONFLICT(name) DO UPDATE SET updated=excluded.updated, config=excluded.config",
                (name, now, now, json.dumps(config, default=str)),
            )

    def evaluation(self, name: str) -> dict | None:
        """``{name, created, updated, config}`` of one evaluation, or None."""
        rows = self._read("SELECT name, created, updated, config FROM evaluations WHERE name=?", (name,))
        if not rows:
            return None
        name, created, updated, config = rows[0]
        return {"name": name, "created": created, "updated": updated, "config": json.loads(config)}

    def evaluations(self) -> list[dict]:
        """Every evaluation, newest first, with its counts of tasks, correct ones and errors."""
        rows = self._read(
            "SELECT e.name, e.created, e.updated, count(r.task_id), coalesce(sum(r.correct), 0), "
            "coalesce(sum(r.status='error'), 0) FROM evaluations e LEFT JOIN eval_results r "
            "ON r.evaluation=e.name GROUP BY e.name ORDER BY e.updated DESC"
        )
        keys = ("name", "created", "updated", "tasks", "correct", "errors")
        return [dict(zip(keys, r)) for r in rows]

    def put_eval_result(
        self, evaluation: str, task_id: str, position: int, status: str, correct: bool | None, data: dict
    ) -> None:
        """Store one task's result (replacing an earlier attempt at it, whose count goes up)."""
        with self.transaction() as cur:
            cur.execute(
                "INSERT INTO eval_results(evaluation, task_id, position, status, correct, data, finished) "
                "VALUES (?,?,?,?,?,?,?) ON CONFLICT(evaluation, task_id) DO UPDATE SET position=excluded.position, "
                "status=excluded.status, correct=excluded.correct, data=excluded.data, finished=excluded.finished, "
                "attempts=attempts+1",
                (
                    evaluation,
                    task_id,
                    position,
                    status,
                    None if correct is None else int(correct),
                    json.dumps(data, default=str),
                    time.time(),
                ),
            )

    def eval_results(self, evaluation: str) -> list[dict]:
        """An evaluation's stored task results in task order: the stored data plus ``status``,
        ``correct``, ``finished`` and ``attempts``."""
        rows = self._read(
            "SELECT task_id, position, status, correct, data, finished, attempts FROM eval_results "
            "WHERE evaluation=? ORDER BY position, task_id",
            (evaluation,),
        )
        out = []
        for task_id, position, status, correct, data, finished, attempts in rows:
            item = json.loads(data)
            item.update(
                task_id=task_id,
                position=position,
                status=status,
                correct=None if correct is None else bool(correct),
                finished=finished,
                attempts=attempts,
            )
            out.append(item)
        return out

    def eval_sample_of_run(self, run_id: str) -> dict | None:
        """The evaluation sample whose run is ``run_id`` (the latest scored, if several), as
        :meth:`eval_results` gives it plus ``evaluation`` and that evaluation's ``config``; None
        when the run is no evaluation's."""
        rows = self._read(
            "SELECT r.evaluation, r.task_id, r.status, r.correct, r.data, e.config FROM eval_results r "
            "JOIN evaluations e ON e.name=r.evaluation WHERE instr(r.data, ?) > 0 "
            "AND json_extract(r.data, '$.run_id')=? ORDER BY r.finished DESC LIMIT 1",
            (run_id, run_id),
        )
        if not rows:
            return None
        evaluation, task_id, status, correct, data, config = rows[0]
        item = json.loads(data)
        item.update(
            evaluation=evaluation,
            task_id=task_id,
            status=status,
            correct=None if correct is None else bool(correct),
            config=json.loads(config),
        )
        return item

    def delete_evaluation(self, name: str) -> None:
        """Forget an evaluation and its results (its runs stay)."""
        with self.transaction() as cur:
            cur.execute("DELETE FROM eval_results WHERE evaluation=?", (name,))
            cur.execute("DELETE FROM evaluations WHERE name=?", (name,))

    # -- blobs --------------------------------------------------------------------------
    @staticmethod
    def _put_blobs(cur: sqlite3.Cursor, blobs: Mapping[str, str | tuple[int, list]]) -> None:
        rows: list[tuple[str, int, bytes | None, str | None]] = []
        for key, kept in blobs.items():
            if isinstance(kept, str):
                rows.append((key, len(kept), kept.encode("utf-8", "surrogatepass"), None))
            else:
                size, recipe = kept
                rows.append((key, size, None, json.dumps(recipe)))
        cur.executemany("INSERT OR IGNORE INTO blobs(digest, size, data, recipe) VALUES (?,?,?,?)", rows)

    def put_file_blobs(self, files: Mapping[str, bytes]) -> None:
        """Keep run-folder file contents by their sha256 (``digest -> bytes``); a kept digest costs nothing."""
        if files:
            with self.transaction() as cur:
                cur.executemany(
                    "INSERT OR IGNORE INTO file_blobs(digest, size, data) VALUES (?,?,?)",
                    [(key, len(data), data) for key, data in files.items()],
                )

    def file_blob(self, digest: str) -> bytes | None:
        """The file content kept under a sha256 digest, or None; content that does not match its
        digest raises WorkspaceError."""
        rows = self._read("SELECT data FROM file_blobs WHERE digest=?", (digest,))
        if not rows:
            return None
        data = bytes(rows[0][0])
        if hashlib.sha256(data).hexdigest() != digest:
            raise _damaged(self.path, f"the kept file sha256:{digest} does not match its digest")
        return data

    def put_blobs(self, blobs: Mapping[str, str | tuple[int, list]]) -> None:
        """Keep full texts by their sha256: ``digest -> text``, or ``digest -> (length, recipe)``
        for a text made of kept ones (see :mod:`tea_notebook.store.blobs`). A kept digest costs nothing."""
        if blobs:
            with self.transaction() as cur:
                self._put_blobs(cur, blobs)

    def blob(self, digest: str, _depth: int = 0) -> str | None:
        """The full text kept under a sha256 digest, or None; a text that does not match its digest
        (a damaged or edited file) raises WorkspaceError."""
        rows = self._read("SELECT data, recipe FROM blobs WHERE digest=?", (digest,))
        if not rows:
            return None
        data, recipe = rows[0]
        text: str | None
        if data is not None:
            text = bytes(data).decode("utf-8", "surrogatepass")
        elif _depth < 16:
            text = build(json.loads(recipe), lambda key: self.blob(key, _depth + 1))
        else:
            text = None
        if text is None or text_digest(text) != digest:
            raise _damaged(self.path, f"the kept text sha256:{digest} cannot be rebuilt to match its digest")
        return text

    # -- embeddings ---------------------------------------------------------------------
    def get_vectors(self, embedder: str, text_hashes: list[str]) -> dict[str, np.ndarray]:
        """Cached embeddings for text hashes (missing ones are absent from the result)."""
        import numpy as np

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
        import numpy as np

        with self.transaction() as cur:
            cur.executemany(
                "INSERT OR REPLACE INTO embeddings VALUES (?,?,?,?)",
                [
                    (embedder, h, int(v.shape[0]), np.ascontiguousarray(v, np.float32).tobytes())
                    for h, v in vectors.items()
                ],
            )
