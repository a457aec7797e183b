"""Benchmark of ``%%tool --process`` (issue 28): a person's tool called in the kernel or in a child process.

    .venv/bin/python bench/bench_tool_process.py [--write] [--calls 300] [--runs 8] [--steps 20]

The same tool — ``scale(n, factor)`` returning a small dict, the code ``%%tool`` would store — is
registered twice in one workspace (hashing embedder): in the kernel (``%%tool``) and in a child
process (``%%tool --process``: ``metadata["process"]``, run by the workspace's executor in the run's
``process-tools`` session). Measured, the two sides interleaved call by call (or run by run):

  1. A warm call: ``await ws.tools.ainvoke(name, args)`` outside runs (the interactive session,
     started before timing). Wall time per call; the kernel's CPU per call (``time.process_time``)
     and, for the child, its processes' CPU (``/proc/PID/stat`` of its process group).
  2. The first call of a run (the run's session starts then) and a whole ``--steps``-step scripted
     agent run (one call per step, the run's session stopped at its end): wall and CPU per run.
  3. Stop: a tool that sleeps 5 s, Stop pressed 0.5 s into the call; time from the stop to the run's
     return, and whether the tool's write landed (in the kernel a synchronous tool cannot be ended).

Figures are median (min–max) over n; the machine is shared, so CPU time is given beside wall time.
With --write the figures replace the "%%tool in the kernel or in a process" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook._sync import run_sync  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.protocol.tools import make_tool  # noqa: E402

SOURCE = '''def scale(n: int, factor: float = 2.0) -> dict:
    """Scale n by a factor."""
    return {"n": n, "scaled": n * factor}
'''
SLOW = '''def slow_write(path: str) -> str:
    """Sleep, then write a file."""
    import time

    time.sleep(5)
    with open(path, "a") as f:
        f.write("landed\\n")
    return "wrote"
'''
TICKS = os.sysconf("SC_CLK_TCK")


def register(ws: Any, source: str, name: str, process: bool) -> None:
    """Register the function ``source`` defines as tool ``name``, as ``%%tool [--process]`` would."""
    namespace: dict[str, Any] = {"__name__": "__main__"}  # as a cell's functions are
    exec(compile(source, "<cell>", "exec"), namespace)
    fn = next(v for k, v in namespace.items() if callable(v) and not k.startswith("__"))
    ws.tools.register(make_tool(fn, name=name, source=source, metadata={"process": True} if process else None))


def group_cpu(pgid: int) -> float:
    """CPU seconds (user + system) of the live processes of process group ``pgid``."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state ppid pgrp ...
            total += int(fields[11]) + int(fields[12])
    return total / TICKS


def child_group(ws: Any) -> int | None:
    """The process group of the interactive ``process-tools`` session (its processes: supervisor, worker)."""
    env = ws.tools.executor().process_runtime.session(None)
    pid = env.pid if env is not None else None
    try:
        return os.getpgid(pid) if pid else None
    except ProcessLookupError:
        return None


def stats(values: list[float], scale: float = 1000.0, fmt: str = "{:.2f}") -> str:
    v = sorted(x * scale for x in values)
    return f"{fmt.format(statistics.median(v))} ({fmt.format(v[0])}–{fmt.format(v[-1])})"


def warm_calls(ws: Any, calls: int) -> dict[str, list[float]]:
    """Wall and kernel CPU per warm call, each side in turn; the child's CPU per call over all calls."""
    out: dict[str, list[float]] = {"here": [], "away": [], "here_cpu": [], "away_cpu": []}

    async def one(name: str, n: int) -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        result = await ws.tools.ainvoke(name, {"n": n})
        assert result.ok and result.value == {"n": n, "scaled": n * 2.0}, result
        return time.perf_counter() - t0, time.process_time() - c0

    async def all_calls() -> float:
        await one("scale_away", 0)  # the interactive session starts here, outside the timing
        group = child_group(ws)
        before = group_cpu(group) if group else 0.0
        for i in range(calls):
            for side in ("here", "away") if i % 2 == 0 else ("away", "here"):
                wall, cpu = await one(f"scale_{side}", i)
                out[side].append(wall)
                out[f"{side}_cpu"].append(cpu)
        return ((group_cpu(group) - before) / calls) if group else float("nan")

    out["child_cpu"] = [run_sync(all_calls())]
    return out


def runs(ws: Any, count: int, steps: int) -> dict[str, list[dict[str, float]]]:
    """``count`` agent runs of ``steps`` calls each, per side (alternating): the first call's wall
    time, and the run's wall and kernel CPU."""
    out: dict[str, list[dict[str, float]]] = {"here": [], "away": []}
    for i in range(-1, count):  # run -1 warms both sides up (not counted)
        for side in ("here", "away") if i % 2 == 0 else ("away", "here"):
            name = f"scale_{side}"
            script = ScriptedModel([call(name, n=k) for k in range(steps)] + [call("done", success=True, text="ok")])
            timed: dict[str, float] = {}
            original = ws.tools.ainvoke

            async def first_call(
                tool: str, args: Any = None, context: Any = None, original: Any = original, timed: Any = timed
            ) -> Any:
                t0 = time.perf_counter()
                result = await original(tool, args, context)
                timed.setdefault("first", time.perf_counter() - t0)
                return result

            ws.tools.ainvoke = first_call
            try:
                t0, c0 = time.perf_counter(), time.process_time()
                result = ws.agent(f"scaler_{side}", model=script.name, tools=[name], max_steps=steps + 1).run_sync(
                    "scale"
                )
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            finally:
                del ws.tools.ainvoke
            assert result.success and result.steps == steps + 1, result
            if i >= 0:
                out[side].append({"first": timed["first"], "wall": wall, "cpu": cpu})
    return out


def stops(ws: Any, folder: Path, count: int) -> dict[str, list[dict[str, Any]]]:
    """``count`` runs per side whose tool sleeps 5 s then writes; Stop 0.5 s into the call."""
    out: dict[str, list[dict[str, Any]]] = {"here": [], "away": []}
    for i in range(count):
        for side in ("here", "away") if i % 2 == 0 else ("away", "here"):
            target = folder / f"landed-{side}-{i}.txt"
            name = f"slow_write_{side}"
            script = ScriptedModel([call(name, path=str(target)), call("done", success=True, text="ok")])
            ctx = ws.context()
            pressed: dict[str, float] = {}

            def press(ctx: Any = ctx, pressed: dict[str, float] = pressed) -> None:
                pressed["t"] = time.perf_counter()
                ctx.cancel.set()

            agent = ws.agent(f"writer_{side}", model=script.name, tools=[name])
            original = ws.tools.ainvoke

            async def started(
                tool: str, args: Any = None, context: Any = None, original: Any = original, press: Any = press
            ) -> Any:
                threading.Timer(0.5, press).start()
                return await original(tool, args, context)

            ws.tools.ainvoke = started
            try:
                result = agent.run_sync("write", context=ctx)
            finally:
                del ws.tools.ainvoke
            returned = time.perf_counter()
            assert result.status == "interrupted", result
            out[side].append({"after_stop": returned - pressed["t"], "target": target})
    time.sleep(6)  # past every call's write
    for side in out:
        for r in out[side]:
            r["landed"] = r["target"].exists()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    parser.add_argument("--calls", type=int, default=300, help="warm calls per side")
    parser.add_argument("--runs", type=int, default=8, help="agent runs per side")
    parser.add_argument("--steps", type=int, default=20, help="tool calls per agent run")
    parser.add_argument("--stops", type=int, default=3, help="stopped runs per side")
    args = parse_args(parser, calls=10, runs=1, steps=3, stops=1)
    with tempfile.TemporaryDirectory(prefix="tea-bench-toolproc-") as tmp:
        ws = tea_notebook.Workspace(Path(tmp) / "ws", embedder="hashing")
        for side, process in (("here", False), ("away", True)):
            register(ws, SOURCE, f"scale_{side}", process)
            register(ws, SLOW, f"slow_write_{side}", process)
        print("warm calls", flush=True)
        warm = warm_calls(ws, args.calls)
        print("agent runs", flush=True)
        per_run = runs(ws, args.runs, args.steps)
        print("stops", flush=True)
        stopped = stops(ws, Path(tmp), args.stops)
        ws.envs.release()
        ws.close()

    here, away = statistics.median(warm["here"]), statistics.median(warm["away"])
    run_here = statistics.median(r["wall"] for r in per_run["here"])
    run_away = statistics.median(r["wall"] for r in per_run["away"])
    command = f"`{command_line()}`"
    lines = [
        "## %%tool in the kernel or in a process",
        "",
        f"{command}, {time.strftime('%Y-%m-%d')}; {machine()}; the machine was shared, so CPU time is given beside "
        "wall time; median (min–max) over n, the two sides interleaved call by call (run by run). The same small "
        "tool registered as `%%tool` (in the kernel) and `%%tool --process` (in the run's child process, "
        "`process-tools` session, started at the run's first call of such a tool and stopped at its end).",
        "",
        "| | n | in the kernel | in a process |",
        "|---|---|---|---|",
        f"| warm call, wall ms | {len(warm['here'])} | {stats(warm['here'])} | {stats(warm['away'])} |",
        f"| warm call, kernel CPU ms | {len(warm['here'])} | {stats(warm['here_cpu'])} | {stats(warm['away_cpu'])} |",
        f"| warm call, the child's CPU ms (mean over the calls) | {len(warm['away'])} | — | "
        f"{warm['child_cpu'][0] * 1000:.2f} |",
        f"| first call of a run (the session starts), wall ms | {len(per_run['here'])} | "
        f"{stats([r['first'] for r in per_run['here']])} | {stats([r['first'] for r in per_run['away']])} |",
        f"| {args.steps}-call agent run, wall ms | {len(per_run['here'])} | "
        f"{stats([r['wall'] for r in per_run['here']], fmt='{:.0f}')} | "
        f"{stats([r['wall'] for r in per_run['away']], fmt='{:.0f}')} |",
        f"| {args.steps}-call agent run, kernel CPU ms | {len(per_run['here'])} | "
        f"{stats([r['cpu'] for r in per_run['here']], fmt='{:.0f}')} | "
        f"{stats([r['cpu'] for r in per_run['away']], fmt='{:.0f}')} |",
        f"| Stop 0.5 s into a 5 s call: stop → run returned, ms | {len(stopped['here'])} | "
        f"{stats([r['after_stop'] for r in stopped['here']], fmt='{:.0f}')} | "
        f"{stats([r['after_stop'] for r in stopped['away']], fmt='{:.0f}')} |",
        f"| … its write landed anyway | {len(stopped['here'])} | "
        f"{sum(r['landed'] for r in stopped['here'])} of {len(stopped['here'])} | "
        f"{sum(r['landed'] for r in stopped['away'])} of {len(stopped['away'])} |",
        "",
        f"Out of process a warm call costs {1000 * (away - here):+.2f} ms (median) and a run's first call starts the "
        f"child; a {args.steps}-call run takes {run_away / run_here:.2f}× as long ({1000 * (run_away - run_here):+.0f} ms). "
        "The default stays in the kernel: a tool there sees the notebook's variables, working folder and "
        "`ToolContext`, and costs nothing per run; `%%tool --process` is the choice for a tool whose side effect "
        "must not outlive a Stop (docs/guide/tools.md).",
    ]
    publish("\n".join(lines) + "\n", args.write)


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
