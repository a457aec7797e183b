"""What a step's commit writes (issue 32): new workspaces number events without AUTOINCREMENT (no
``sqlite_sequence`` page in every commit), workspaces made before keep their table and work the same,
and the intent journal is emptied only once it has grown (no syscall a step), with recovery exact
after a SIGKILL wherever it lands: the lines of committed events it still holds add nothing."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import tea_notebook
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.store.database import INTENTS_SUFFIX, Database, IntentJournal, new_id

# the events table as every workspace made before issue 32 declares it
OLD_EVENTS = """CREATE TABLE events(
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, run_id TEXT NOT NULL,
    parent_id TEXT, type TEXT NOT NULL, step INTEGER, time REAL NOT NULL, data TEXT NOT NULL)"""


def _old_workspace(folder: Path) -> Path:
    """A ``tea.db`` whose events table is made by the old DDL (the rest as today's)."""
    folder.mkdir(parents=True)
    Database(folder / "tea.db").close()
    conn = sqlite3.connect(folder / "tea.db", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("DROP TABLE events")
    conn.execute(OLD_EVENTS)
    conn.execute("CREATE INDEX events_by_run ON events(run_id, seq)")
    conn.execute("COMMIT")
    conn.close()
    return folder / "tea.db"


def _events_sql(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT sql FROM sqlite_master WHERE name='events'").fetchone()[0]
    finally:
        conn.close()


def _run(ws: tea_notebook.Workspace, steps: int) -> str:
    @ws.tools.tool
    def echo(n: int) -> str:
        """Say the number."""
        return f"n={n}"

    model = ScriptedModel([*(call("echo", n=i) for i in range(steps)), call("done", success=True, text="ok")])
    result = ws.agent(f"a{steps}", model=model.name, tools=["echo"]).run_sync("count")
    assert result.success, result.error
    return result.run_id


def _wal_frames_of_commits(db: Database, monkeypatch) -> list[int]:
    """Record the WAL frames each later ``append_events`` commit adds (checkpoints off)."""
    frames: list[int] = []
    append = Database.append_events
    db._conn.execute("PRAGMA wal_autocheckpoint=0")
    page = db._conn.execute("PRAGMA page_size").fetchone()[0]
    wal = Path(f"{db.path}-wal")

    def counted(self, rows, blobs=None, uses=None):
        before = wal.stat().st_size
        append(self, rows, blobs, uses)
        frames.append((wal.stat().st_size - before) // (page + 24))

    monkeypatch.setattr(Database, "append_events", counted)
    return frames


def test_a_new_workspace_numbers_events_without_autoincrement(tmp_path, monkeypatch):
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    try:
        assert "AUTOINCREMENT" not in _events_sql(ws.db.path)
        frames = _wal_frames_of_commits(ws.db, monkeypatch)
        run_id = _run(ws, 6)
        events = ws.events.events(run_id)
        seqs = [e.seq for e in events]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert [e.type for e in events][:2] == ["run_started", "model_request"]
        assert [e.type for e in events][-1] == "run_finished"
        rows = dict(ws.db._read("SELECT name, seq FROM sqlite_sequence"))
        assert "events" not in rows  # no counter row rewritten by every commit
        # a step's commit: the events table, its two indexes, the usage row, the context's text and its
        # index, page 1 when the file grows, a split now and then (6-7 pages; 7-8 with the counter)
        assert frames and sum(frames) / len(frames) <= 10, frames
    finally:
        ws.close()


def test_a_workspace_made_with_the_old_events_table_keeps_it_and_works(tmp_path):
    path = _old_workspace(tmp_path / "old")
    ws = tea_notebook.Workspace(path.parent, embedder="hashing")
    try:
        assert "AUTOINCREMENT" in _events_sql(path)  # not rebuilt: an older release reads it as before
        first = _run(ws, 3)
        second = _run(ws, 2)
        seqs = [e.seq for e in ws.events.events(first) + ws.events.events(second)]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert dict(ws.db._read("SELECT name, seq FROM sqlite_sequence"))["events"] == max(seqs)
        assert ws.trajectory(first).steps and ws.trajectory(second).context(1).text()
        tree = ws.db.export_run_tree(first)
    finally:
        ws.close()
    # a run moved from the old form into a new workspace and back: the same events, once each
    new = tea_notebook.Workspace(tmp_path / "new", embedder="hashing")
    try:
        assert new.db.import_run_tree(tree) == 1 and new.db.import_run_tree(tree) == 0
        moved = new.db.export_run_tree(first)
        assert [e[0] for e in moved["events"]] == [e[0] for e in tree["events"]]
    finally:
        new.close()
    old = tea_notebook.Workspace(path.parent, embedder="hashing")
    try:
        before = len(old.events.events(first))
        assert old.db.import_run_tree(moved) == 0 and len(old.events.events(first)) == before
        assert old.db._read("PRAGMA integrity_check") == [("ok",)]
    finally:
        old.close()


def test_the_previous_releases_workspace_opens_and_takes_new_runs(tmp_path):
    import shutil

    prev = Path(__file__).resolve().parent / "data" / "workspace_prev_release"
    shutil.copytree(prev, tmp_path / "prev", ignore=shutil.ignore_patterns("*.py", "*.json"))
    ws = tea_notebook.Workspace(tmp_path / "prev", embedder="hashing")
    try:
        had = ws.db._read("SELECT max(seq) FROM events")[0][0]
        run_id = _run(ws, 2)
        seqs = [e.seq for e in ws.events.events(run_id)]
        assert min(seqs) > had and seqs == sorted(seqs)
        assert "AUTOINCREMENT" in _events_sql(ws.db.path)
    finally:
        ws.close()


def test_the_journal_keeps_committed_lines_until_it_passes_its_size(tmp_path, monkeypatch):
    monkeypatch.setattr(IntentJournal, "ROTATE_AT", 600)
    journal = IntentJournal(tmp_path / "intents")
    try:
        header = journal.path.stat().st_size
        row = (new_id(), "r", None, "tool_call", 1, 1.0, json.dumps({"name": "x", "pad": "y" * 100}))
        journal.append([row], {})
        journal.clear()  # committed, but small: left as it is (no syscall)
        assert journal.path.stat().st_size > header
        for _ in range(5):
            journal.append([row], {})
            journal.clear()
        assert journal.path.stat().st_size == header  # past 600 bytes: the commit emptied it
        journal.clear()  # nothing new: nothing done
        assert journal.path.stat().st_size == header
    finally:
        journal.close()
    assert not journal.path.exists()  # everything in it was committed


CUT_SHORT = """
import json, os, resource, signal, sys
from pathlib import Path
from tea_notebook.store.database import IntentJournal, _read_intents

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit is cut short instead
journal = IntentJournal(Path(sys.argv[1]))
row = ["e1", "r", None, "tool_call", 1, 1.0, json.dumps({"pad": "x" * 3000})]
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (journal.path.stat().st_size + 1000, hard))
try:
    journal.append([row], {})
    print("not cut")
except OSError as exc:
    print("cut", exc.errno)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
journal.append([["e2", "r", None, "tool_call", 2, 2.0, "{}"]], {})
owner, rows, blobs = _read_intents(journal.path)
print(json.dumps([r[0] for r in rows]))
journal.clear()  # a cut line is gone with the next commit
print(journal.path.stat().st_size == len(journal.path.read_bytes().splitlines(True)[0]))
"""


def test_a_line_cut_short_costs_only_itself(tmp_path):
    script = tmp_path / "cut.py"
    script.write_text(CUT_SHORT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "intents")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    cut, read, emptied = done.stdout.split("\n")[:3]
    assert cut == "cut 28"  # ENOSPC: the caller commits the events instead
    assert json.loads(read) == ["e2"]  # the next line starts on a line of its own
    assert emptied == "True"


KILLED = """
import os, signal, sys
import tea_notebook
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.runtime import loop
from tea_notebook.store.database import IntentJournal

loop.COMMIT_SLOW_TOOL = 60.0  # the tool that kills is never "slow": its step is in the journal only
IntentJournal.ROTATE_AT = int(sys.argv[3])
where = sys.argv[4]
ws = tea_notebook.Workspace(sys.argv[1], embedder="hashing")
clears = 0
clear = IntentJournal.clear

def clear_then_maybe_die(self):
    global clears
    clears += 1
    if where == "after_commit" and clears == 3:  # step 3 committed, its lines not yet cleared
        os.kill(os.getpid(), signal.SIGKILL)
    clear(self)
    if where == "after_clear" and clears == 3:
        os.kill(os.getpid(), signal.SIGKILL)

IntentJournal.clear = clear_then_maybe_die

@ws.tools.tool
def charge(n: int) -> str:
    \"\"\"Charge a card (must not happen twice).\"\"\"
    with open(sys.argv[2], "a") as log:
        log.write(f"charge{n}\\n")
    if where == "tool" and n == 4:
        os.kill(os.getpid(), signal.SIGKILL)  # dies while the tool acts
    return "charged"

model = ScriptedModel([*(call("charge", n=i) for i in range(1, 6)), call("done", success=True, text="x")])
ws.agent("payer", model=model.name, tools=["charge"]).run_sync("pay")
"""

STEP = ["model_request", "model_response", "tool_call", "tool_result", "step"]


@pytest.mark.parametrize("rotate_at", [1, 256 * 1024])
@pytest.mark.parametrize("where", ["tool", "after_commit", "after_clear"])
def test_kill_9_anywhere_recovers_each_event_once(tmp_path, rotate_at, where):
    folder, log, script = tmp_path / "ws", tmp_path / "calls.log", tmp_path / "killed.py"
    script.write_text(KILLED)
    proc = subprocess.run(
        [sys.executable, str(script), str(folder), str(log), str(rotate_at), where],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    (journal,) = (folder / ("tea.db" + INTENTS_SUFFIX)).iterdir()
    kept = journal.read_text().count("\n") - 1  # lines after the header
    ws = tea_notebook.Workspace(folder, embedder="hashing")  # recovers, then marks the run interrupted
    try:
        (run,) = ws.runs(10)
        assert run["status"] == "interrupted"
        events = ws.events.events(run["id"])
        ids = [e.id for e in events]
        assert len(ids) == len(set(ids))
        types = [e.type for e in events]
        if where == "tool":  # three steps committed; the fourth's call only in the journal
            assert types == ["run_started", *STEP * 3, *STEP[:3], "run_finished"]
            assert log.read_text().split() == ["charge1", "charge2", "charge3", "charge4"]
            assert kept >= (1 if rotate_at == 1 else 4)  # committed lines stay until the journal is large
        else:  # killed once step 3 was committed
            assert types == ["run_started", *STEP * 3, "run_finished"]
        calls = [e.data["arguments"]["n"] for e in events if e.type == "tool_call"]
        assert calls == sorted(set(calls))
        assert not any((folder / ("tea.db" + INTENTS_SUFFIX)).iterdir())
    finally:
        ws.close()
