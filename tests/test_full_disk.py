"""A full disk, on a real small filesystem (a tmpfs mounted with ``size=``; mounting needs root, so
the tests are skipped for an ordinary user): a write SQLite cannot make is a ``WorkspaceError`` naming
the workspace folder and the space left, not a raw ``sqlite3.OperationalError``, and the runs of this
process still ``running`` are marked ``error`` at once, not left for the next open."""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

import tea_notebook
from tea_notebook.errors import WorkspaceError
from tea_notebook.models.offline import ScriptedModel, call

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("mount") is None,
    reason="needs root to mount a size-limited tmpfs (a real small filesystem)",
)


@pytest.fixture
def small_disk(tmp_path):
    """A 6 MiB tmpfs at tmp_path / 'disk', unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Fill the filesystem until only ``leave`` bytes are free; the ballast file (delete it to free space)."""
    ballast = disk / "ballast"
    with open(ballast, "wb") as out:
        out.write(b"\0" * max(0, shutil.disk_usage(disk).free - leave))
    return ballast


def run_row(ws, run_id: str) -> dict:
    return next(r for r in ws.db.runs(100, parent_id=None) if r["id"] == run_id)


def test_a_write_on_a_full_disk_names_the_folder_and_marks_the_running_run_at_once(small_disk):
    ws = tea_notebook.Workspace(small_disk / "ws", embedder="hashing")
    try:
        ws.db.start_run(
            {
                "id": "run-on-full-disk",
                "parent_id": None,
                "agent": "a",
                "task": "t",
                "model": "tea/test",
                "started": time.time(),
                "forked_from": None,
                "fork_step": None,
            }
        )
        ballast = fill(small_disk, 64_000)
        with pytest.raises(WorkspaceError) as info:
            ws.db.set_meta("big", secrets.token_hex(200_000))  # 400 KB that cannot be written
        message = str(info.value)
        assert f"the disk holding workspace {ws.path} is full (" in message and " free)" in message
        assert "the run of this process that was running is marked 'error'" in message
        assert not isinstance(info.value, sqlite3.Error)
        row = run_row(ws, "run-on-full-disk")
        assert row["status"] == "error" and "is full" in row["answer"]  # at once: no reopen needed
        assert ws.db.meta("big") is None  # nothing half-written
        ballast.unlink()
        ws.db.set_meta("small", "fine again")  # space freed: the workspace goes on
        assert ws.db.meta("small") == "fine again"
    finally:
        ws.close()
    with tea_notebook.Workspace(small_disk / "ws", embedder="hashing") as again:
        assert run_row(again, "run-on-full-disk")["status"] == "error"


def test_an_agent_run_on_a_full_disk_ends_in_error_saying_so(small_disk):
    ws = tea_notebook.Workspace(small_disk / "ws", embedder="hashing")
    try:

        @ws.tools.tool
        def noise(n: int) -> str:
            """Random text of n characters."""
            return secrets.token_hex(n // 2)

        ws.agent("noisy", tools=["noise"], max_steps=40)
        fill(small_disk, 300_000)
        script = ScriptedModel(lambda messages, tools: call("noise", n=60_000))
        result = ws.agent("noisy").run_sync("Make noise.", model=script.name, raise_on_error=False)
        assert result.status == "error"
        assert f"the disk holding workspace {ws.path} is full" in str(result.error)
        assert "OperationalError" not in str(result.error)
        assert run_row(ws, result.run_id)["status"] == "error"
    finally:
        ws.close()
