"""The floor of an event write: the store's ``Database.append_events`` against a bare SQLite commit.

    .venv/bin/python bench/bench_sqlite_floor.py [--write] [--n 2000] [--quick]

Two databases in one temporary folder, each a fresh file in WAL mode with ``synchronous=NORMAL`` (the
store's settings): the workspace's own ``Database`` (its schema, its lock, ``BEGIN IMMEDIATE`` … ``COMMIT``)
and a bare ``sqlite3`` connection with the same ``events`` table (one ``INSERT`` and a ``COMMIT``). For 1 row
(one event) and 5 rows (a step's events), the two take turns call by call (the order alternating), n
calls each after a warm-up; wall and CPU time (``time.process_time``) per call, min / median / max.
Then the bytes each writer adds to its WAL per call (checkpoints off for that pass, mean of 200 calls):
a WAL frame is a whole page, so this counts the pages a commit writes. The bare table is the one a
new workspace makes (``seq`` without AUTOINCREMENT since issue 32).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish  # noqa: E402

from tea_notebook.store.database import Database  # noqa: E402

EVENTS = """CREATE TABLE events(
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, run_id TEXT NOT NULL,
    parent_id TEXT, type TEXT NOT NULL, step INTEGER, time REAL NOT NULL, data TEXT NOT NULL);
CREATE INDEX events_by_run ON events(run_id, seq);"""
WAL_CALLS = 200  # calls of each writer whose WAL growth is counted
DATA = json.dumps({"root_run": "r" * 21, "agent": "bench", "name": "lookup", "observation": "v" * 200})


def bare(path: Path) -> sqlite3.Connection:
    """A plain connection with the store's journal settings and its events table."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(EVENTS)
    return conn


def spread(values: list[float]) -> str:
    """min / median / max, microseconds."""
    us = [v * 1e6 for v in values]
    return f"{min(us):.0f} / **{statistics.median(us):.0f}** / {max(us):.0f}"


def measure(n: int) -> dict[str, dict[str, list[float]]]:
    """Wall and CPU seconds per call of each writer, for 1 and 5 rows, interleaved."""
    out: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="tea-bench-sqlite-") as tmp:
        db = Database(Path(tmp) / "tea.db")
        conn = bare(Path(tmp) / "bare.db")
        ids = iter(range(10**9))

        def rows(k: int) -> list[tuple]:
            return [(f"e{next(ids)}", "run1", None, "tool_result", 1, time.time(), DATA) for _ in range(k)]

        def ours(k: int) -> None:
            db.append_events(rows(k))

        def plain(k: int) -> None:
            batch = rows(k)
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO events(id, run_id, parent_id, type, step, time, data) VALUES (?,?,?,?,?,?,?)", batch
            )
            conn.execute("COMMIT")

        for k in (1, 5):
            writers = {f"ours/{k}": ours, f"bare/{k}": plain}
            for fn in writers.values():  # warm-up
                for _ in range(50):
                    fn(k)
            for name in writers:
                out[name] = {"wall": [], "cpu": []}
            for i in range(n):
                for name in list(writers) if i % 2 == 0 else list(writers)[::-1]:
                    cpu, wall = time.process_time(), time.perf_counter()
                    writers[name](k)
                    out[name]["wall"].append(time.perf_counter() - wall)
                    out[name]["cpu"].append(time.process_time() - cpu)
        for each in (db._conn, conn):
            each.execute("PRAGMA wal_autocheckpoint=0")
        out["page"] = {"bytes": [float(db._conn.execute("PRAGMA page_size").fetchone()[0])]}
        for k in (1, 5):
            for name, wal_path in ((f"ours/{k}", Path(tmp) / "tea.db-wal"), (f"bare/{k}", Path(tmp) / "bare.db-wal")):
                before = wal_path.stat().st_size
                for _ in range(WAL_CALLS):
                    (ours if name.startswith("ours") else plain)(k)
                out[name]["wal"] = [(wal_path.stat().st_size - before) / WAL_CALLS]
        db.close()
        conn.close()
    return out


def main() -> None:
    """Measure, print, and with ``--write`` replace the section in docs/benchmarks.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="replace the section in docs/benchmarks.md")
    parser.add_argument("--n", type=int, default=2000, help="calls of each writer per row count")
    args = parse_args(parser, n=20)
    load = os.getloadavg()[0]
    got = measure(args.n)
    rows = []
    for k, what in ((1, "one event row"), (5, "five event rows (a step's events)")):
        o, b = got[f"ours/{k}"], got[f"bare/{k}"]
        ratio = statistics.median(o["cpu"]) / statistics.median(b["cpu"])
        rows.append(
            f"| {what} | {spread(o['wall'])} | {spread(o['cpu'])} | {spread(b['wall'])} | {spread(b['cpu'])} "
            f"| {ratio:.2f}× | {o['wal'][0]:,.0f} / {b['wal'][0]:,.0f} | {args.n} |"
        )
    section = f"""## Event writes against a bare SQLite commit

Command: `{command_line()}` — machine: {machine()}; run {time.strftime("%Y-%m-%d")}; load average (1-min)
{load:.2f} before, {os.getloadavg()[0]:.2f} after, on 2 cores shared with other work.

The floor of the runtime's event write (the "one SQLite transaction holding one event row" of "Agent runtime"):
the store's `Database.append_events` (its lock, `BEGIN IMMEDIATE`, the insert, `COMMIT`) against a bare
`sqlite3` connection doing the same insert and commit on a table of the same schema, both in WAL mode with
`synchronous=NORMAL`, each in a fresh file; the two take turns call by call. Microseconds per call,
min / **median** / max; the ratio is of the CPU medians. WAL bytes: what each call adds to the WAL
(checkpoints off, mean of {WAL_CALLS} calls; a frame is a {got["page"]["bytes"][0]:.0f}-byte page and 24 bytes of header).

| transaction | ours, wall µs | ours, CPU µs | bare SQLite, wall µs | bare SQLite, CPU µs | ours ÷ bare (CPU) | WAL bytes, ours / bare | n |
|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}
"""
    publish(section, args.write)


if __name__ == "__main__":
    main()
