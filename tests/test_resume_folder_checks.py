"""A resume starts from the run folder as the stop left it, and refuses a folder changed by hand since
(issue 28): it names what was added, removed and changed, writes nothing, and goes on only when
forced (``ws.resume(run, force=True)``, ``%tea resume RUN --force``), recording what was changed.
Tools reach their run's folder through ``ToolContext.folder`` (and write beneath it, never out)."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import asyncio  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from conftest import tea  # noqa: E402

from tea_notebook import ToolContext  # noqa: E402
from tea_notebook._sync import run_sync  # noqa: E402
from tea_notebook.errors import EnvironmentFailure  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.runtime.forking import ForkError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def folder_tools(ws, stop: threading.Event | None = None) -> None:
    """``put`` and ``drop`` act in the calling run's folder; ``put_then_stop`` writes, then stops the run
    (so the step it is in never finishes); ``slow_put`` writes after ``stop`` is set (a sync tool that
    goes on after the stop); ``put_then_cancel`` writes, then cancels the task running the run, once."""
    cancelled: list[str] = []

    @ws.tools.tool
    def put(name: str, text: str, tc: ToolContext) -> str:
        """Write a file in the run folder.

        Args:
            name: the file's name.
            text: what it holds.
        """
        tc.write(name, text)
        return f"wrote {name}"

    @ws.tools.tool
    def drop(name: str, tc: ToolContext) -> str:
        """Delete a file in the run folder.

        Args:
            name: the file's name.
        """
        assert tc.folder is not None
        (tc.folder / name).unlink()
        return f"deleted {name}"

    @ws.tools.tool
    def put_then_stop(name: str, text: str, tc: ToolContext) -> str:
        """Write a file in the run folder, then stop the run.

        Args:
            name: the file's name.
            text: what it holds.
        """
        tc.write(name, text)
        tc.context.cancel.set()
        return f"wrote {name}"

    @ws.tools.tool
    async def put_then_cancel(name: str, text: str, tc: ToolContext) -> str:
        """Write a file in the run folder, then cancel the task running the run (its step never ends).

        Args:
            name: the file's name.
            text: what it holds.
        """
        tc.write(name, text)
        if not cancelled:  # the first time only
            cancelled.append(name)
            raise asyncio.CancelledError
        return f"wrote {name}"

    @ws.tools.tool
    def slow_put(name: str, text: str, tc: ToolContext) -> str:
        """Write a file in the run folder once the run was stopped (it ignores the stop).

        Args:
            name: the file's name.
            text: what it holds.
        """
        tc.context.cancel.set()
        time.sleep(1.4 if name.startswith("late") else 0.4)  # past the stop's grace, or within it
        tc.write(name, text)
        return f"wrote {name} late"


def stopped_run(ws, *, stop_with=None):
    """A run that wrote a.txt and b.txt (steps 1, 2) and was stopped in step 3 (``stop_with``: the
    action of step 3, by default one chosen as the stop came, so it never ran)."""
    folder_tools(ws)
    ctx = ws.context()

    def writer(messages, tools):
        step = len(asked) + 1
        asked.append(step)
        if step == 1:
            return call("put", name="a.txt", text="A")
        if step == 2:
            return call("put", name="b.txt", text="B")
        if step == 3:
            if stop_with is not None:
                return stop_with
            ctx.cancel.set()
            return call("drop", name="a.txt")
        return call("done", success=True, text="resumed")

    asked: list[int] = []
    model = ScriptedModel(writer)
    tools = ["put", "drop", "put_then_stop", "put_then_cancel", "slow_put"]
    stopped = ws.agent("writer", model=model.name, tools=tools).run_sync("w", context=ctx)
    assert stopped.status == "interrupted"
    return stopped


def stored(ws) -> tuple[int, int, int]:
    """Runs, events and kept files in the store (what a refused resume must leave as it is)."""
    ws.events.flush()
    return tuple(ws.db._read(f"SELECT count(*) FROM {t}")[0][0] for t in ("runs", "events", "file_blobs"))


def test_a_tool_writes_in_its_runs_folder_and_a_fork_finds_it(ws):
    folder_tools(ws)
    model = ScriptedModel([call("put", name="notes/n.txt", text="N"), call("done", success=True, text="ok")])
    run = ws.agent("noter", model=model.name, tools=["put"]).run_sync("note")
    assert (ws.path / "runs" / run.run_id / "notes" / "n.txt").read_text() == "N"
    steps = [e for e in ws.events.events(run.run_id, nested=False) if e.type == "step"]
    assert list(steps[0].data["folder"]) == ["notes/n.txt"]  # the snapshot saw what the tool wrote
    fork = run_sync(ws.fork(run.run_id, step=1, model=ScriptedModel([call("done", success=True, text="f")]).name))
    assert (ws.path / "runs" / fork.run_id / "notes" / "n.txt").read_text() == "N"


def test_a_tool_context_stays_in_its_runs_folder(ws, tmp_path):
    tool_context_stays(ws, tmp_path)


def tool_context_stays(ws, tmp_path):
    """A tool writing through its context (a name the model may have chosen) stays in its run's
    folder: no ``..``, no absolute path, no link planted there is followed."""
    from tea_notebook.protocol.context import Context

    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    run_ctx = Context("r1")
    run_ctx.is_run = True
    tc = ToolContext(ws, Context(parent=run_ctx), "put")  # a context below the run's: the run's folder
    assert tc.folder == ws.path / "runs" / "r1"
    assert tc.write("x/y.txt", "ok") == ws.path / "runs" / "r1" / "x" / "y.txt"
    assert tc.read("x/y.txt") == b"ok" and tc.read("none.txt") is None
    (tc.folder / "planted").symlink_to(outside)  # what a sandboxed tool could leave there
    (tc.folder / "away").symlink_to(tmp_path)
    for bad in ("../../escape.txt", str(outside), "away/outside.txt", "x/../../../escape.txt"):
        with pytest.raises(EnvironmentFailure):
            tc.write(bad, "overwritten")
    with pytest.raises(EnvironmentFailure):
        tc.read("away/outside.txt")
    tc.write("planted", "replaced")  # the link is replaced, never written through
    assert outside.read_text() == "keep" and not (tc.folder / "planted").is_symlink()
    assert not (ws.path / "escape.txt").exists() and not (ws.path / "runs" / "escape.txt").exists()
    loose = ToolContext(ws, Context(), "put")  # no run called it (ws.tools.invoke in a cell)
    assert loose.folder is None
    with pytest.raises(EnvironmentFailure, match="not called by a run"):
        loose.write("a.txt", "x")


def test_a_folder_changed_by_hand_refuses_the_resume_naming_what_changed(ws):
    stopped = stopped_run(ws)
    folder = ws.path / "runs" / stopped.run_id
    (folder / "b.txt").write_text("edited by hand")
    (folder / "a.txt").unlink()
    for i in range(5):
        (folder / f"new{i}.txt").write_text(str(i))
    before = stored(ws)
    with pytest.raises(ForkError) as refused:
        run_sync(ws.resume(stopped.run_id))
    words = str(refused.value)
    assert "changed since the run stopped" in words
    assert "added new0.txt, new1.txt, new2.txt and 2 more" in words
    assert "removed a.txt" in words and "changed b.txt" in words
    assert "force=True" in words and f"%tea resume {stopped.run_id} --force" in words
    assert stored(ws) == before  # nothing written
    assert (folder / "b.txt").read_text() == "edited by hand"  # nor changed


def test_a_forced_resume_goes_on_with_the_folder_as_it_is_and_says_so(ws):
    stopped = stopped_run(ws)
    folder = ws.path / "runs" / stopped.run_id
    (folder / "b.txt").write_text("edited by hand")
    (folder / "c.txt").write_text("added by hand")
    resumed = run_sync(ws.resume(stopped.run_id, force=True))
    assert resumed.success
    mine = ws.path / "runs" / resumed.run_id
    assert (mine / "b.txt").read_text() == "edited by hand" and (mine / "c.txt").read_text() == "added by hand"
    assert not (mine / "a.txt").exists()  # the step taken up again deleted it
    events = ws.events.events(resumed.run_id, nested=False)
    started = next(e for e in events if e.type == "run_started").data
    assert started["folder_by_hand"] == {"added": ["c.txt"], "changed": ["b.txt"]}
    notices = [e.data["message"] for e in events if e.type == "notice"]
    assert any("changed by hand since it stopped: added c.txt; changed b.txt" in n for n in notices), notices
    # a fork of the resumed run at the step it started from finds the folder it started with
    fork = run_sync(ws.fork(resumed.run_id, step=2, model=ScriptedModel([call("done", success=True, text="f")]).name))
    forked = ws.path / "runs" / fork.run_id
    assert (forked / "b.txt").read_text() == "edited by hand" and (forked / "c.txt").exists()
    assert (forked / "a.txt").read_text() == "A"


def test_force_is_a_bool(ws):
    stopped = stopped_run(ws)
    before = stored(ws)
    for bad in ("yes", 1, None):
        with pytest.raises(ForkError, match="force is True or False"):
            run_sync(ws.resume(stopped.run_id, force=bad))
    assert stored(ws) == before


def test_what_the_step_cut_short_wrote_is_no_hand_change_and_the_resume_keeps_it(ws):
    """The task running the run was cancelled in step 3 after its call wrote c.txt (the step never
    ended): the run's end records c.txt, so the resume is not refused, and the new run starts with
    the folder as the stop left it."""
    with pytest.raises(BaseException) as cancelled:
        stopped_run(ws, stop_with=call("put_then_cancel", name="c.txt", text="C"))
    assert "CancelledError" in type(cancelled.value).__name__
    run_id = ws.db.runs(1, parent_id=None)[0]["id"]
    finished = [e for e in ws.events.events(run_id, nested=False) if e.type == "run_finished"][-1]
    assert finished.data["status"] == "interrupted" and set(finished.data["folder"]) == {"c.txt"}
    resumed = run_sync(ws.resume(run_id, rerun_unknown=True))  # its call never returned: it runs again
    mine = ws.path / "runs" / resumed.run_id
    assert resumed.success and (mine / "c.txt").read_text() == "C" and (mine / "a.txt").read_text() == "A"
    started = next(e for e in ws.events.events(resumed.run_id, nested=False) if e.type == "run_started").data
    assert "folder_by_hand" not in started and set(started["folder"]) == {"c.txt"}


def test_a_stopped_step_that_finished_is_no_hand_change(ws):
    stopped = stopped_run(ws, stop_with=call("put_then_stop", name="c.txt", text="C"))
    resumed = run_sync(ws.resume(stopped.run_id))
    assert resumed.success and (ws.path / "runs" / resumed.run_id / "c.txt").read_text() == "C"


@pytest.mark.parametrize("name", ["soon.txt", "late.txt"])  # within the stop's grace, or after the run ended
def test_what_a_call_wrote_after_the_stop_is_recorded_and_no_hand_change(ws, name):
    stopped = stopped_run(ws, stop_with=call("slow_put", name=name, text="L"))
    resumed = run_sync(ws.resume(stopped.run_id, wait=10))  # waits for slow_put, which records its writes
    late = [
        e
        for e in ws.events.events(stopped.run_id, nested=False)
        if e.type == "tool_result" and e.data.get("late") is not None
    ]
    assert late and list(late[-1].data["folder"]) == [name]
    mine = ws.path / "runs" / resumed.run_id
    assert resumed.success and (mine / name).read_text() == "L"
    assert [a["observation"] for a in resumed.trajectory.steps[2].actions] == [f"wrote {name} late"]  # not run again


def test_an_imported_run_without_its_folder_resumes_from_the_record(ws, tmp_path):
    import tea_notebook

    stopped = stopped_run(ws)
    ws.events.flush()
    tree = ws.db.export_run_tree(stopped.run_id)
    other = tea_notebook.Workspace(tmp_path / "other", embedder="hashing")
    try:
        other.db.import_run_tree(tree)
        folder_tools(other)
        other.agent("writer", model=ScriptedModel([]).name, tools=["put", "drop"])  # the run's agent, here too
        assert not (other.path / "runs" / stopped.run_id).exists()
        resumed = run_sync(other.resume(stopped.run_id))
        mine = other.path / "runs" / resumed.run_id
        assert resumed.success and (mine / "b.txt").read_text() == "B" and not (mine / "a.txt").exists()
    finally:
        other.close()


def test_the_magic_takes_force(ws, ip):
    stopped = stopped_run(ws)
    (ws.path / "runs" / stopped.run_id / "d.txt").write_text("by hand")
    magics = ip.magics_manager.registry["TeaMagics"]
    magics._workspace = ws
    try:
        with pytest.raises(Exception, match="added d.txt"):
            tea(ip, f"resume {stopped.run_id} --quiet")
        result = tea(ip, f"resume {stopped.run_id} --quiet --force")
    finally:
        magics._workspace = None
    assert result.success and (ws.path / "runs" / result.run_id / "d.txt").read_text() == "by hand"


AS_USER = r"""
import json, os, sys
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
sys.path.insert(0, {tests!r})
import tea_notebook
from tea_notebook._sync import run_sync
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.runtime.forking import ForkError
import test_resume_folder_checks as t

ws = tea_notebook.Workspace({ws!r}, embedder="hashing")
stopped = t.stopped_run(ws)
os.chmod(ws.path / "runs" / stopped.run_id / "b.txt", 0)  # unreadable by its owner, not by root
report = {{"uid": os.geteuid()}}
try:
    resumed = run_sync(ws.resume(stopped.run_id))
    report["refused"] = None
except ForkError as exc:
    report["refused"] = str(exc)
    resumed = run_sync(ws.resume(stopped.run_id, force=True))
notices = [e.data["message"] for e in ws.events.events(resumed.run_id, nested=False) if e.type == "notice"]
report.update(status=resumed.status, notices=notices,
              b=(ws.path / "runs" / resumed.run_id / "b.txt").exists())
ws.close()
print(json.dumps(report))
"""


@pytest.mark.parametrize("who", ["root", "user"])
def test_a_file_made_unreadable_by_hand_as_root_and_as_a_user(tmp_path, who):
    """As root a file whose mode was changed is still read (its content did not change: the resume
    goes on and restores it); as an ordinary user it cannot be read, so it counts as changed: refused,
    and a forced resume says it was not restored."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the same check as root and as another user")
    from test_boundary import run_as_user, unprivileged_user, user_python

    if who == "root":
        uid = gid = 0
        home = tmp_path
        python = sys.executable
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": str(ROOT)}
    else:
        uid, gid, user_home = unprivileged_user()
        home = Path(tempfile.mkdtemp(prefix="resume-folder-", dir=user_home))
        os.chown(home, uid, gid)
        python, env = user_python(uid, gid, home)
    code = AS_USER.format(tests=str(ROOT / "tests"), ws=str(home / "ws"))
    try:
        done = run_as_user(uid, gid, home, python, env, code)
    finally:
        if who == "user":
            shutil.rmtree(home, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["uid"] == uid and report["status"] == "success"
    if who == "root":
        assert report["refused"] is None and report["b"]
    else:
        assert "changed b.txt" in report["refused"], report
        assert any("not restored (not kept): b.txt" in n for n in report["notices"]) and not report["b"]


AS_USER_CONTEXT = r"""
import os, sys
from pathlib import Path
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
sys.path.insert(0, {tests!r})
import tea_notebook
import test_resume_folder_checks as t

home = Path({home!r})
ws = tea_notebook.Workspace(home / "ws", embedder="hashing")
(home / "t").mkdir()
t.tool_context_stays(ws, home / "t")
ws.close()
print("uid", os.geteuid())
"""


def test_a_tool_context_stays_in_its_runs_folder_as_a_user():
    """The same attacks on a tool's context, made by an ordinary user (the test above runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the check as another user")
    from test_boundary import run_as_user, unprivileged_user, user_python

    uid, gid, user_home = unprivileged_user()
    home = Path(tempfile.mkdtemp(prefix="tool-context-", dir=user_home))
    os.chown(home, uid, gid)
    python, env = user_python(uid, gid, home)
    try:
        done = run_as_user(
            uid, gid, home, python, env, AS_USER_CONTEXT.format(tests=str(ROOT / "tests"), home=str(home))
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == f"uid {uid}"
