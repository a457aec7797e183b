"""Reading a long run back: ``Trajectory.load``, its steps, and one step's context (issue 32).

    .venv/bin/python bench/bench_trajectory_reads.py [--write] [--steps 1000] [--context-steps 600]
        [--at 300] [--repeat 20] [--quick]

A scripted run of ``--steps`` steps (one instant ``lookup`` a step, the runtime benchmark's trajectory) and one of
``--context-steps`` steps, each in a workspace of its own; then, in one process, ``--repeat`` rounds, each taking
every measurement once, in turn:

* ``Trajectory.load(ws, run)`` of the long run (what ``ws.trajectory(run)`` returns: lazy, its events read
  when first asked for), and the same followed by ``.steps`` (every step read and decoded);
* ``ws.trajectory(run).context(at)`` of the other run: one step's prompt rebuilt from the store through the
  trajectory, and ``result.context(at)`` through the run's result;
* the floor: a bare ``sqlite3`` connection reading the long run's event rows (``SELECT ... FROM events WHERE
  run_id = ?``), all of them, without decoding.

CPU time (``time.process_time``, every thread) and wall time per call, min / median / max.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.runtime.trajectory import Trajectory  # noqa: E402

TARGET_MS = 20.0  # issue 32: each read of a long run within 20 ms


def scripted_run(folder: str, steps: int) -> tuple[Any, Any]:
    """A workspace and the result of a ``steps``-step run in it (one ``lookup`` a step, then ``done``)."""
    ws = tea_notebook.Workspace(folder, embedder="hashing")

    @tea_notebook.tool(workspace=ws)
    def lookup(key: str) -> str:
        """Look up a key in the reference table and return its value."""
        return f"value of {key}: " + "lorem ipsum dolor sit amet " * 6

    script = [call("lookup", key=f"k{i}") for i in range(1, steps + 1)] + [call("done", success=True, text="ok")]
    agent = ws.agent("reader", tools=["lookup"], max_steps=steps + 1, model=ScriptedModel(script).name)
    result = agent.run_sync("Look up every key, one at a time.")
    assert result.status == "success", (result.status, result.error)
    return ws, result


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """CPU and wall seconds of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def spread(values: list[float]) -> str:
    """min / **median** / max, in ms."""
    ms = [1000 * v for v in values]
    return f"{min(ms):.2f} / **{statistics.median(ms):.2f}** / {max(ms):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--steps", type=int, default=1000, help="steps of the long run (Trajectory.load)")
    parser.add_argument("--context-steps", type=int, default=600, help="steps of the run whose context is read")
    parser.add_argument("--at", type=int, default=300, help="the step whose context is rebuilt")
    parser.add_argument("--repeat", type=int, default=20, help="rounds (every measurement once a round)")
    args = parse_args(parser, steps=20, context_steps=12, at=6, repeat=2)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        long_ws, long_run = scripted_run(f"{tmp}/long", args.steps)
        ctx_ws, ctx_run = scripted_run(f"{tmp}/context", args.context_steps)
        bare = sqlite3.connect(long_ws.db.path)
        rid = long_run.run_id
        cases: dict[str, Callable[[], Any]] = {
            f"`Trajectory.load(ws, run)`, {args.steps}-step run": lambda: Trajectory.load(long_ws, rid),
            f"`Trajectory.load(ws, run).steps`, {args.steps}-step run": lambda: Trajectory.load(long_ws, rid).steps,
            f"`ws.trajectory(run).context({args.at})`, {args.context_steps}-step run": lambda: ctx_ws.trajectory(
                ctx_run.run_id
            ).context(args.at),
            f"`result.context({args.at})`, {args.context_steps}-step run": lambda: ctx_run.context(args.at),
            f"floor: bare `sqlite3` read of the {args.steps}-step run's event rows": lambda: bare.execute(
                "SELECT id, type, step, time, data FROM events WHERE run_id = ?", (rid,)
            ).fetchall(),
        }
        for fn in cases.values():  # warm-up: imports, the page cache
            fn()
        cpu: dict[str, list[float]] = {k: [] for k in cases}
        wall: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.repeat):
            for name, fn in cases.items():
                c, w = timed(fn)
                cpu[name].append(c)
                wall[name].append(w)
        steps_read = len(Trajectory.load(long_ws, rid).steps)
        bare.close()
        long_ws.close()
        ctx_ws.close()
    assert steps_read == args.steps + 1, steps_read
    rows = []
    for name in cases:
        median = 1000 * statistics.median(cpu[name])
        target = "" if name.startswith("floor") else f"≤ {TARGET_MS:g} ms | {'✅' if median <= TARGET_MS else '❌'}"
        rows.append(f"| {name} | {spread(cpu[name])} ms | {spread(wall[name])} ms | {target or ' | '} |")
    section = f"""## Trajectory reads: loading a long run and one step's context

Command: `{command_line()}` — machine: {machine()}; run {time.strftime("%Y-%m-%d")}; load average (1-min)
{load_before:.2f} before, {os.getloadavg()[0]:.2f} after, on 2 cores shared with other work.

Scripted runs (one `lookup` a step), each in a workspace of its own; {args.repeat} rounds, each taking every row
once, in turn; CPU time (every thread) and wall time per call, min / **median** / max; n = {args.repeat} a row.
A loaded trajectory is lazy: `Trajectory.load` reads the run tree and the events' index, and a step's events are
read and decoded when first asked for (`.steps` reads them all). The floor reads the same run's event rows with a
bare `sqlite3` connection, without decoding them.

| read | CPU | wall | target | |
|---|---|---|---|---|
{chr(10).join(rows)}
"""
    publish(section, args.write)


if __name__ == "__main__":
    main()
