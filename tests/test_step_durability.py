"""A step is one SQLite transaction, and what it did before a tool acts is durable first (issue 32):
the model call that chose the tool and its ``tool_call`` record are appended to the workspace's intent
journal (one write) before the tool runs, and committed with the step. A process killed by SIGKILL
while the tool runs loses neither: the next open of the workspace inserts them, before it marks the
run interrupted, so a resume knows the call was made."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import tea_notebook
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.runtime import loop
from tea_notebook.store.blobs import digest
from tea_notebook.store.database import INTENTS_SUFFIX, Database

KILLED_IN_A_TOOL = """
import os, signal, sys
import tea_notebook
from tea_notebook.models.offline import ScriptedModel, call

from tea_notebook.runtime import loop

loop.COMMIT_SLOW_TOOL = 60.0  # however loaded the machine, the tool is not yet "slow" when it kills the process
ws = tea_notebook.Workspace(sys.argv[1], embedder="hashing")

@ws.tools.tool
def charge(n: int) -> str:
    \"\"\"Charge a card (must not happen twice).\"\"\"
    with open(sys.argv[2], "a") as log:
        log.write(f"charge{n}\\n")
    os.kill(os.getpid(), signal.SIGKILL)  # the process dies while the tool acts
    return "charged"

model = ScriptedModel([call("charge", n=1), call("charge", n=2), call("done", success=True, text="x")])
ws.agent("payer", model=model.name, tools=["charge"]).run_sync("pay")
"""


def _raw_types(path, run_id=None) -> list[str]:
    """Event types committed to ``tea.db`` (read with a plain connection: no recovery runs)."""
    conn = sqlite3.connect(path)
    try:
        sql = "SELECT type FROM events" + (" WHERE run_id=?" if run_id else "") + " ORDER BY seq"
        return [r[0] for r in conn.execute(sql, (run_id,) if run_id else ())]
    finally:
        conn.close()


def test_kill_9_while_a_tool_acts_keeps_its_call_and_the_model_call_that_chose_it(tmp_path):
    folder, log, script = tmp_path / "ws", tmp_path / "calls.log", tmp_path / "killed.py"
    script.write_text(KILLED_IN_A_TOOL)  # a file: the tool's source must be readable to register it
    proc = subprocess.run(
        [sys.executable, str(script), str(folder), str(log)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -9, proc.stderr
    assert log.read_text().split() == ["charge1"]
    # the step was not committed (the tool never returned): its record is in the journal only
    assert "tool_call" not in _raw_types(folder / "tea.db")
    assert any((folder / ("tea.db" + INTENTS_SUFFIX)).iterdir())
    ws = tea_notebook.Workspace(folder, embedder="hashing")  # opening recovers it, then marks the run
    try:
        (run,) = ws.runs(10)
        assert run["status"] == "interrupted"
        types = [e.type for e in ws.events.events(run["id"])]
        assert types == ["run_started", "model_request", "model_response", "tool_call", "run_finished"]
        (called,) = [e.data for e in ws.events.events(run["id"]) if e.type == "tool_call"]
        assert called["name"] == "charge" and called["arguments"] == {"n": 1}
        context = ws.trajectory(run["id"]).context(1)  # the prompt that chose it, stored parts and all
        assert "pay" in context.text()
        assert not any((folder / ("tea.db" + INTENTS_SUFFIX)).iterdir())  # recovered once, then removed
    finally:
        ws.close()


def test_a_step_is_one_transaction_and_the_journal_holds_only_committed_events_after_it(ws, worker, monkeypatch):
    commits: list[list[str]] = []
    append = Database.append_events

    def counted(self, rows, blobs=None, uses=None):
        commits.append([r[3] for r in rows])
        return append(self, rows, blobs, uses)

    monkeypatch.setattr(Database, "append_events", counted)
    monkeypatch.setattr(loop, "COMMIT_SLOW_TOOL", 60.0)  # a loaded machine must not make the quick tool "slow"
    model = ScriptedModel([call("work", n=1), call("work", n=2), call("done", success=True, text="ok")])
    result = ws.agent("a", model=model.name, tools=["work"]).run_sync("work twice")
    assert result.success and worker == [1, 2]
    steps = [c for c in commits if "step" in c]
    assert steps[:2] == [["model_request", "model_response", "tool_call", "tool_result", "step"]] * 2
    (journal,) = (ws.path / ("tea.db" + INTENTS_SUFFIX)).iterdir()
    header, *lines = journal.read_text().splitlines()
    assert json.loads(header)["pid"] == os.getpid()
    journaled = [row[0] for line in lines for row in json.loads(line)["rows"]]
    assert journaled and set(journaled) <= {e.id for e in ws.events.events(result.run_id)}  # all committed
    ws.close()
    assert not journal.exists()  # removed on close: everything in it was committed


def test_a_slow_tool_has_its_call_committed_while_it_runs(ws):
    seen: list[list[str]] = []

    @ws.tools.tool
    def slow() -> str:
        """Take a while."""
        time.sleep(0.4)
        seen.append(_raw_types(ws.path / "tea.db"))  # another connection, as another process reads
        return "done"

    model = ScriptedModel([call("slow"), call("done", success=True, text="ok")])
    assert ws.agent("a", model=model.name, tools=["slow"]).run_sync("wait").success
    assert seen and seen[0][-1] == "tool_call"


def test_recovery_takes_a_dead_writers_journal_once_and_leaves_a_live_ones(tmp_path):
    folder = tmp_path / "ws"
    ws = tea_notebook.Workspace(folder, embedder="hashing")
    mine = ws.db.intent_journal()  # this live process's: never taken by another open
    mine.append([("e-live", "r", None, "notice", 1, 1.0, "{}")], {})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # a process that has ended
    owner = json.loads(mine.path.read_text().splitlines()[0])
    host, start = owner["host"], owner["start"].rsplit("|", 1)[0] + "|1"  # this machine, that process
    row = ["e-dead", "r", None, "tool_call", 1, 1.0, json.dumps({"name": "charge"})]
    journal = folder / ("tea.db" + INTENTS_SUFFIX) / f"{pid}-x.jsonl"
    journal.write_text(
        json.dumps({"pid": pid, "host": host, "start": start})
        + "\n"
        + json.dumps({"rows": [row], "blobs": {digest("kept text"): "kept text"}})
        + '\n{"rows": [["e-cut", "r"'  # a line cut short by the kill: skipped
    )
    other = tea_notebook.Workspace(folder, embedder="hashing")  # a second open in this process recovers
    try:
        assert _raw_types(folder / "tea.db") == ["tool_call"]  # the dead writer's event, not the live one's
        assert other.db.blob(digest("kept text")) == "kept text" and not journal.exists() and mine.path.exists()
        assert other.db.recover_intents() == 0  # taken once
    finally:
        other.close()
        ws.close()
    assert not mine.path.exists() or mine.path.read_text().count("\n") > 1  # kept only if never committed


_DROP_WORKSPACES = """
import gc, os, sys
import tea_notebook
from tea_notebook.models.offline import ScriptedModel, call

def run_and_drop(i):
    ws = tea_notebook.Workspace(os.path.join(sys.argv[1], f"ws{i}"), embedder="hashing")

    @ws.tools.tool
    def echo(n: int) -> str:
        \"\"\"Say the number.\"\"\"
        return str(n)

    script = ScriptedModel([call("echo", n=i), call("done", success=True, text="ok")])
    assert ws.agent("a", model=script.name, tools=["echo"]).run_sync("go").success

run_and_drop(0)  # the first one opens what every later one shares (the background loop, caches)
gc.collect()
before = len(os.listdir("/proc/self/fd"))
for i in range(1, 21):
    run_and_drop(i)
gc.collect()
print(len(os.listdir("/proc/self/fd")) - before)
"""


def test_a_workspace_dropped_without_close_gives_its_journal_descriptor_back(tmp_path):
    """Each agent run's workspace keeps an intent journal open; dropped without ``ws.close()`` (as a
    notebook does), it must not keep the descriptor for the life of the process (a long kernel would
    reach descriptor numbers ``select`` refuses). A fresh interpreter: nothing else holds workspaces."""
    script = tmp_path / "drop_workspaces.py"  # a file: a tool's source must be readable
    script.write_text(_DROP_WORKSPACES)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip().splitlines()[-1]) < 5, done.stdout
