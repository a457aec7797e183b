"""Child processes in tests: whether one is still alive or gone soon, and driving one that a test
kills on purpose (wait until it has written enough rows to its workspace, kill it with SIGKILL, never
leave it running when the test fails on the way), or several released at once through a gate file."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def alive(pid: int | None) -> bool:
    """True when ``pid`` is a live process (a zombie waiting to be reaped counts as gone)."""
    if pid is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def gone_soon(pid: int | None, seconds: float = 3.0, *, poll: float = 0.02) -> bool:
    """Whether ``pid`` is gone (see ``alive``) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


def count_rows(db_file: Path, table: str) -> int:
    """The rows of ``table`` in a workspace database another process writes (0 until it exists)."""
    if not db_file.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db_file}?mode=ro", uri=True, timeout=5) as db:
            return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    except sqlite3.OperationalError:
        return 0  # the tables are being made


def wait_for_rows(
    child: subprocess.Popen, db_file: Path, table: str, at_least: int, *, seconds: float = 90, poll: float = 0.05
) -> int:
    """Poll ``table`` while ``child`` lives until it holds ``at_least`` rows or ``seconds`` pass; the
    last count seen."""
    seen, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline and child.poll() is None:
        seen = count_rows(db_file, table)
        if seen >= at_least:
            break
        time.sleep(poll)
    return seen


def kill_9(child: subprocess.Popen, timeout: float) -> None:
    """Kill ``child`` with SIGKILL (no clean-up of its own) and wait for it."""
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=timeout)


@contextmanager
def reaped(child: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """The child, killed and waited for on the way out if it still runs."""
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def run_released_together(
    argvs: list[list[str]], gate: Path, *, settle: float, timeout: float, cwd: Path
) -> list[subprocess.CompletedProcess]:
    """Start one child per argv in ``cwd``, give them ``settle`` seconds to import and open what they
    need (each then waits for ``gate`` to exist), touch ``gate`` so they all go at once, and wait for
    every one: their results (text output), in order."""
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd) for argv in argvs
    ]
    time.sleep(settle)
    gate.touch()
    done = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done
