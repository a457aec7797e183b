"""The store under attack and accident (issue 10, finding 10): runs left ``running`` by a killed
process, damaged and empty database files, and huge model replies.

Real SQLite files and real child processes (``sys.executable``) throughout; models are scripted.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import json  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from child_processes import kill_9, reaped, run_released_together  # noqa: E402
from workspace_on_disk import make_ws, sha256_file  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.errors import NotFoundError, WorkspaceError  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.notebook.live import LiveView  # noqa: E402
from tea_notebook.protocol.records import ToolRecord  # noqa: E402
from tea_notebook.runtime.render import trajectory_html  # noqa: E402
from tea_notebook.store.blobs import FIELD_LIMIT  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MB = 1024 * 1024


@pytest.fixture(scope="module", autouse=True)
def _warm(warm_litellm):
    """litellm imported once for the module."""


# -- runs of dead processes -------------------------------------------------------------------
_SLOW_RUN = """
import os, sys, time
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
import tea_notebook
from tea_notebook.models.offline import ScriptedModel, call
ws = tea_notebook.Workspace(sys.argv[1], embedder="hashing")
marker, hold = sys.argv[2], float(sys.argv[3])

def slow(messages, tools):
    with open(marker, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(hold)  # the model "thinks" until killed (or until the hold ends)
    return call("done", success=True, text="finished in time")

script = ScriptedModel(slow)
result = ws.agent("slowpoke", model=script.name, tools=[]).run_sync("a slow task")
print(result.status)
ws.close()
"""


def _start_slow_run(path: Path, marker: Path, hold: float) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", _SLOW_RUN, str(path), str(marker), str(hold)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    deadline = time.time() + 120
    while not marker.exists():
        if child.poll() is not None:
            pytest.fail(f"the child ended early: {child.stderr.read()}")
        assert time.time() < deadline, "the child never reached its model call"
        time.sleep(0.05)
    return child


def _the_run(path: Path) -> dict:
    ws = make_ws(path)
    try:
        rows = ws.runs(10)
        assert len(rows) == 1
        return rows[0]
    finally:
        ws.close()


def test_a_run_of_a_killed_process_is_marked_interrupted_on_open(tmp_path):
    path = tmp_path / "ws"
    make_ws(path).close()
    child = _start_slow_run(path, tmp_path / "thinking", hold=300)
    with reaped(child):
        # while the child is alive, opening the workspace leaves its run alone
        assert _the_run(path)["status"] == "running"
        kill_9(child, 30)
    assert child.returncode == -signal.SIGKILL
    ws = make_ws(path)
    run = ws.runs(10)[0]
    assert run["status"] == "interrupted"
    assert f"pid {child.pid}" in run["answer"] and "ended" in run["answer"]
    assert run["ended"] is not None and run["ended"] >= run["started"]
    traj = ws.trajectory(run["id"])
    assert traj.status == "interrupted" and f"pid {child.pid}" in traj.text()
    finished = [e for e in ws.events.events(run["id"]) if e.type == "run_finished"]
    assert len(finished) == 1 and finished[0].data["status"] == "interrupted"
    assert finished[0].data["recovered"] is True and finished[0].data["root_run"] == run["id"]
    ws.close()
    # opening again changes nothing more (one run_finished, same reason)
    ws = make_ws(path)
    assert ws.runs(10)[0]["answer"] == run["answer"]
    assert len([e for e in ws.events.events(run["id"]) if e.type == "run_finished"]) == 1
    ws.close()


def test_a_live_run_in_another_process_is_left_alone_and_finishes(tmp_path):
    path = tmp_path / "ws"
    make_ws(path).close()
    child = _start_slow_run(path, tmp_path / "thinking", hold=3)
    with reaped(child):
        for _ in range(3):  # several opens while it thinks
            ws = make_ws(path)
            assert ws.runs(10)[0]["status"] == "running"
            assert ws.db.interrupt_orphaned_runs() == []
            ws.close()
        out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert out.strip() == "success"
    run = _the_run(path)
    assert run["status"] == "success" and run["answer"] == "finished in time"


def _fake_run(ws: tea_notebook.Workspace, run_id: str, pid: int | None, host: str | None, start: str | None) -> None:
    ws.db.start_run(
        {
            "id": run_id,
            "parent_id": None,
            "agent": "fake",
            "task": f"task of {run_id}",
            "model": "tea/test",
            "started": time.time(),
            "forked_from": None,
            "fork_step": None,
        }
    )
    con = sqlite3.connect(ws.path / "tea.db")
    con.execute("UPDATE runs SET owner_pid=?, owner_host=?, owner_start=? WHERE id=?", (pid, host, start, run_id))
    con.commit()
    con.close()


def test_owner_identity_tells_reused_pids_restarts_and_other_hosts_apart(tmp_path):
    path = tmp_path / "ws"
    ws = make_ws(path)
    ws.db.start_run(
        {
            "id": "mine",
            "parent_id": None,
            "agent": "a",
            "task": "t",
            "model": "m",
            "started": time.time(),
            "forked_from": None,
            "fork_step": None,
        }
    )
    pid, host, start = ws.db.run_owner("mine")
    assert pid == os.getpid() and host == socket.gethostname()
    boot, namespace, ticks = start.split("|")
    assert ticks.isdigit() and boot and namespace.startswith("pid:")
    # this very process, a pid now used by another process, a restarted machine, another host,
    # a process in another PID namespace, a run recorded before owners were
    _fake_run(ws, "reused", os.getpid(), host, f"{boot}|{namespace}|{int(ticks) + 12345}")
    _fake_run(ws, "rebooted", os.getpid(), host, f"not-this-boot|{namespace}|{ticks}")
    _fake_run(ws, "elsewhere", 999_999, "another-host.example", f"x|{namespace}|1")
    _fake_run(ws, "container", 999_999, host, f"{boot}|pid:[1]|1")
    _fake_run(ws, "legacy", None, None, None)
    ws.close()
    ws = make_ws(path)
    status = {r["id"]: (r["status"], r["answer"]) for r in ws.db.runs(parent_id=None)}
    assert status["mine"] == ("running", None)
    assert status["reused"][0] == "interrupted" and "another process" in status["reused"][1]
    assert status["rebooted"][0] == "interrupted" and "restarted" in status["rebooted"][1]
    for left in ("elsewhere", "container", "legacy"):
        assert status[left] == ("running", None), left
    ws.close()


def test_a_database_from_before_run_owners_opens_and_migrates(tmp_path):
    path = tmp_path / "ws"
    ws = make_ws(path)
    ws.tools.register(ToolRecord(name="kept_tool", description="a tool that must survive the migration"))
    ws.close()
    con = sqlite3.connect(path / "tea.db")
    for column in ("owner_pid", "owner_host", "owner_start"):
        con.execute("DROP INDEX IF EXISTS runs_by_status")
        con.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    con.execute("DROP TABLE blobs")
    con.execute(
        "INSERT INTO runs(id, parent_id, agent, task, model, status, started) "
        "VALUES ('old', NULL, 'a', 'old task', 'm', 'running', 1.0)"
    )
    con.commit()
    columns = {r[1] for r in con.execute("PRAGMA table_info(runs)")}
    con.close()
    assert "owner_pid" not in columns
    ws = make_ws(path)
    assert ws.tools.names() == ["kept_tool"]
    assert ws.db.run_row("old")["status"] == "running"  # no owner recorded: left as it was
    script = ScriptedModel([call("done", success=True, text="fine")])
    result = ws.agent("a", model=script.name, tools=[]).run_sync("after the migration")
    assert result.success and ws.db.run_owner(result.run_id)[0] == os.getpid()
    ws.close()
    con = sqlite3.connect(path / "tea.db")
    columns = {r[1] for r in con.execute("PRAGMA table_info(runs)")}
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert {"owner_pid", "owner_host", "owner_start"} <= columns and "blobs" in tables


# -- damaged and empty files ----------------------------------------------------------------------
def _filled(path: Path, events: int = 0) -> Path:
    ws = make_ws(path)
    ws.tools.register_many(
        [ToolRecord(name=f"tool_{i}", description=f"tool number {i} " + "words " * 60) for i in range(400)]
    )
    for i in range(events):
        ws.events.emit("fake_run", "step", {"n": i, "text": "event text " * 80})
    ws.events.flush()
    ws.close()
    return path / "tea.db"


def _garble(db: Path, start: float, end: float) -> None:
    """Overwrite whole pages between two fractions of the file with random bytes."""
    size = db.stat().st_size
    page = 4096
    first, last = int(size * start) // page * page, int(size * end) // page * page
    assert last - first >= 4 * page
    with open(db, "r+b") as fh:
        fh.seek(first)
        fh.write(random.Random(10).randbytes(last - first))


def test_garbage_in_the_middle_of_tea_db_is_refused_with_the_path_and_left_alone(tmp_path):
    path = tmp_path / "ws"
    db = _filled(path)
    assert db.stat().st_size > 200_000
    _garble(db, 0.35, 0.65)
    digest, size = sha256_file(db), db.stat().st_size
    for _ in range(2):
        with pytest.raises(WorkspaceError) as info:
            make_ws(path)
        message = str(info.value)
        assert str(db) in message and "damaged" in message
        assert sha256_file(db) == digest and db.stat().st_size == size
    assert not (path / "vectors").exists()


def test_damage_found_after_opening_is_a_workspace_error_too(tmp_path):
    path = tmp_path / "ws"
    db = _filled(path, events=3000)
    ws = make_ws(path)  # sound when opened
    try:
        _garble(db, 0.1, 0.95)
        with pytest.raises(WorkspaceError) as info:
            ws.events.events("fake_run")
        assert str(db) in str(info.value) and "damaged" in str(info.value)
    finally:
        ws.db.close()


def test_an_empty_tea_db_is_an_error_not_a_new_workspace(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    db = path / "tea.db"
    db.write_bytes(b"")
    for _ in range(2):
        with pytest.raises(WorkspaceError) as info:
            make_ws(path)
        assert str(db) in str(info.value) and "empty (0 bytes)" in str(info.value)
    assert db.exists() and db.stat().st_size == 0
    assert sorted(p.name for p in path.iterdir()) == ["tea.db"]


def test_only_a_missing_file_makes_a_new_workspace(tmp_path):
    path = tmp_path / "ws"
    ws = make_ws(path)
    ws.close()
    db = path / "tea.db"
    assert db.stat().st_size > 0
    assert not [p.name for p in path.iterdir() if p.name.endswith(".new")]  # no temporary file left
    con = sqlite3.connect(db)
    meta = dict(con.execute("SELECT key, value FROM meta"))
    mode = con.execute("PRAGMA journal_mode").fetchone()[0]
    con.close()
    assert meta["format"] == "tea_notebook" and mode.lower() == "wal"


_OPENER = """
import os, sys, time
from tea_notebook.workspace import Workspace
from tea_notebook.protocol.records import ToolRecord
path, worker, gate = sys.argv[1], sys.argv[2], sys.argv[3]
deadline = time.time() + 60
while not os.path.exists(gate):
    if time.time() > deadline:
        sys.exit("gate never opened")
    time.sleep(0.001)
ws = Workspace(path, embedder="hashing")
ws.tools.register(ToolRecord(name=f"from_{worker}", description=f"registered by worker {worker}"))
ws.close()
"""


def test_processes_creating_one_workspace_at_once_all_open_it(tmp_path):
    """Nobody sees a half-made (empty) tea.db: it is linked into place whole."""
    path = tmp_path / "ws"
    path.mkdir()
    gate = tmp_path / "go"
    workers = 6
    argvs = [[sys.executable, "-c", _OPENER, str(path), str(w), str(gate)] for w in range(workers)]
    done = run_released_together(argvs, gate, settle=2.0, timeout=120, cwd=REPO)  # every child imported and waiting
    errors = [p.stderr.strip().splitlines()[-1] for p in done if p.returncode != 0]
    assert not errors
    ws = make_ws(path)
    assert ws.tools.names() == sorted(f"from_{w}" for w in range(workers))
    ws.close()
    assert not [p.name for p in path.iterdir() if p.name.endswith(".new")]


# -- huge replies ---------------------------------------------------------------------------------
def _big_text(size: int) -> str:
    """Text with newlines, quotes and backslashes (so its JSON form differs from it)."""
    line = 'line with "quotes", a back\\slash and a tab\there; '
    return (line * (size // len(line) + 1))[:size] + "\nTHE END"


def _reply(shape: str, big: str) -> dict:
    if shape == "plain_text":
        return {"content": big, "tool_calls": [call("done", success=True, text="ok")]}
    if shape == "json_thoughts":
        return {
            "content": json.dumps({"thinking": big, "next_goal": "finish"}),
            "tool_calls": [call("count", text="x")],
        }
    if shape == "tool_argument":
        return {"content": None, "tool_calls": [call("count", text=big)]}
    raise AssertionError(shape)


@pytest.mark.parametrize("shape", ["plain_text", "json_thoughts", "tool_argument"])
def test_a_10_mb_reply_is_stored_once_and_rendered_clipped(tmp_path, shape):
    path = tmp_path / "ws"
    ws = make_ws(path)

    @ws.tools.tool
    def count(text: str) -> int:
        """Count the characters of a text."""
        return len(text)

    warm = ScriptedModel([call("done", success=True, text="warm")])
    ws.agent("a", model=warm.name, tools=["count"]).run_sync("warm up")
    ws.close()
    before = (path / "tea.db").stat().st_size

    big = _big_text(10 * MB)
    ws = make_ws(path)
    script = ScriptedModel([_reply(shape, big), call("done", success=True, text="ok")])
    live = LiveView(display=False)
    unsubscribe = ws.events.subscribe(live)
    result = ws.agent("a", model=script.name, tools=["count"]).run_sync("handle a huge reply")
    unsubscribe()
    assert result.success and live.runs[result.run_id].status == "success"
    assert len(live.html()) < FIELD_LIMIT + 30_000
    traj = ws.trajectory(result.run_id)
    page = trajectory_html(traj)
    plain = traj.text()
    payload = json.dumps(traj.to_dict())

    step = traj.steps[0]
    if shape == "plain_text":
        clipped = step.thinking
    elif shape == "json_thoughts":
        clipped = step.thinking
    else:
        clipped = step.actions[0]["arguments"]["text"]
    assert len(clipped) < FIELD_LIMIT + 500 and "full text: ws.events.full_text('sha256:" in clipped
    assert ws.events.full_text(clipped) == big  # the full text, exactly, from the clipped one
    reply = next(e.data for e in ws.events.events(result.run_id) if e.type == "model_response")
    if shape != "tool_argument":
        assert ws.events.full_text(reply["content"]) == _reply(shape, big)["content"]
    ws.close()
    growth = (path / "tea.db").stat().st_size - before
    # the reply once (~10.5 MB with its JSON escapes), not two to four times
    assert 9.5 * MB < growth < 13 * MB, growth / MB
    assert len(page) < FIELD_LIMIT + 30_000, len(page)
    assert len(plain) < FIELD_LIMIT + 10_000 and len(payload) < 2 * FIELD_LIMIT + 30_000
    print(f"{shape}: tea.db grew {growth / MB:.2f} MB, HTML {len(page) / 1024:.0f} KB")


def test_full_text_api(ws):
    assert ws.events.full_text("short text") == "short text"
    with pytest.raises(NotFoundError):
        ws.events.full_text("sha256:" + "0" * 64)
    long = "x" * (FIELD_LIMIT + 10)
    event = ws.events.emit("r1", "step", {"thinking": long})
    clipped = event.data["thinking"]
    assert clipped.startswith("x" * FIELD_LIMIT) and f"{FIELD_LIMIT + 10:,} characters in all" in clipped
    ref = clipped.rsplit("sha256:", 1)[1][:64]
    assert ws.events.full_text(clipped) == long == ws.events.full_text(f"sha256:{ref}") == ws.db.blob(ref)


def test_a_tampered_blob_is_reported_not_returned(tmp_path):
    path = tmp_path / "ws"
    ws = make_ws(path)
    long = "y" * (FIELD_LIMIT * 2)
    clipped = ws.events.emit("r1", "step", {"thinking": long}).data["thinking"]
    ws.events.flush()
    con = sqlite3.connect(path / "tea.db")
    con.execute("UPDATE blobs SET data=? WHERE size=?", (("z" * (FIELD_LIMIT * 2)).encode(), FIELD_LIMIT * 2))
    con.commit()
    con.close()
    with pytest.raises(WorkspaceError) as info:
        ws.events.full_text(clipped)
    assert "cannot be rebuilt to match its digest" in str(info.value)
    ws.close()


def test_recipes_rebuild_exactly_and_fall_back_to_whole_texts():
    from tea_notebook.store.blobs import build, digest, plan

    big = _big_text(200_000)
    reply = "```json\n" + json.dumps({"thinking": big}, indent=1) + "\n```"
    known = {digest(reply): reply}
    recipe = plan(big, known)
    assert recipe is not None and len(json.dumps(recipe)) < 200
    assert build(recipe, known.get) == big
    args_json = json.dumps({"text": big, "n": 1}, ensure_ascii=False)
    recipe = plan(args_json, {digest(big): big})
    assert recipe is not None and build(recipe, {digest(big): big}.get) == args_json
    assert plan(_big_text(100_000) + "different", {digest(reply): reply}) is None
    assert build([[digest(big), 0, 10, ""]], {}.get) is None  # a missing part is no text
