"""A step that changes the run folder records a seal of it (``folder_seal``); a resume whose folder still
matches the seal of the stop's last record reads only the files written within moments of that
snapshot, and a folder changed by hand is refused all the same — even a change that keeps a file's
size and modification time (its change time moves)."""

from __future__ import annotations

import os
import time

import pytest

from tea_notebook import ToolContext
from tea_notebook._sync import run_sync
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.runtime import folder_snapshots
from tea_notebook.runtime.forking import ForkError


def stopped_run(ws):
    """A run that writes ``old.txt``, waits past the seal's margin, writes ``new.txt`` and is stopped
    in its third step (its folder: ``old.txt`` older than the last seal, ``new.txt`` just written)."""

    @ws.tools.tool
    def put(name: str, text: str, tc: ToolContext, pause: float = 0.0) -> str:
        """Write a file in the run folder, after a pause.

        Args:
            name: the file's name.
            text: what it holds.
            pause: seconds to wait first.
        """
        time.sleep(pause)
        tc.write(name, text)
        return f"wrote {name}"

    @ws.tools.tool
    def halt(tc: ToolContext) -> str:
        """Stop the run."""
        tc.context.cancel.set()
        return "halted"

    script = ScriptedModel(
        [
            call("put", name="old.txt", text="old"),
            call("put", name="new.txt", text="new", pause=3 * folder_snapshots.RACY_NS / 1e9),
            call("halt"),
            call("done", success=True, text="done"),
        ]
    )
    stopped = ws.agent("writer", model=script.name, tools=["put", "halt"]).run_sync("write")
    assert stopped.status == "interrupted"
    steps = [e.data for e in ws.events.events(stopped.run_id, nested=False) if e.type == "step"]
    assert all(isinstance(s.get("folder_seal"), str) for s in steps if s.get("folder"))
    return stopped


def counting_reads(monkeypatch) -> list[str]:
    read: list[str] = []
    real = folder_snapshots.read_beneath

    def counted(root, path, limit):
        read.append(path)
        return real(root, path, limit)

    monkeypatch.setattr(folder_snapshots, "read_beneath", counted)
    return read


def test_a_resume_of_an_untouched_folder_reads_only_what_was_written_just_before_the_seal(ws, monkeypatch):
    stopped = stopped_run(ws)
    read = counting_reads(monkeypatch)
    resumed = run_sync(ws.resume(stopped.run_id))
    assert resumed.success
    assert "old.txt" not in read and "new.txt" in read  # the seal vouches for old.txt; new.txt is too recent
    assert (ws.path / "runs" / resumed.run_id / "old.txt").read_text() == "old"


def test_a_same_size_change_that_puts_the_modification_time_back_is_refused(ws, monkeypatch):
    stopped = stopped_run(ws)
    old = ws.path / "runs" / stopped.run_id / "old.txt"
    before = os.stat(old)
    old.write_text("OLD")  # same size
    os.utime(old, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the same modification time
    read = counting_reads(monkeypatch)
    with pytest.raises(ForkError, match="changed old.txt"):
        run_sync(ws.resume(stopped.run_id))
    assert "old.txt" in read


def test_a_file_removed_by_hand_is_refused_under_a_seal(ws):
    stopped = stopped_run(ws)
    (ws.path / "runs" / stopped.run_id / "old.txt").unlink()
    with pytest.raises(ForkError, match="removed old.txt"):
        run_sync(ws.resume(stopped.run_id))


def test_the_seal_kept_step_by_step_equals_one_made_from_scratch(ws, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    snapshots = folder_snapshots.FolderSnapshots(folder)
    pause = 1.5 * folder_snapshots.RACY_NS / 1e9
    steps = [
        lambda: (folder / "a.txt").write_text("a"),
        lambda: (folder / "b.txt").write_text("b"),
        lambda: os.chmod(folder / "a.txt", 0o600),
        lambda: (folder / "a.txt").write_text("A"),
        lambda: (folder / "b.txt").unlink(),
        lambda: (folder / "c.txt").write_text("c"),
    ]
    for change in steps:
        change()
        time.sleep(pause)  # the files changed settle: the seal covers them
        snapshots.changes(ws)
        at, _, total = snapshots.seal().partition(":")
        stats = {p.name: os.lstat(p) for p in folder.iterdir()}
        digests = {rel: entry[2] for rel, entry in snapshots.seen.items()}
        assert f"{folder_snapshots.seal_sum(stats, digests, int(at)):032x}" == total
        assert int(total, 16) != 0
