"""The live view's cost (issue 23): bytes sent to the front end and time of a long scripted run.

    .venv/bin/python bench/bench_live_view.py [--steps 1000] [--runs 3] [--pace 0.05] [--write]

A 1,000-step scripted ``%%agent`` run in a real kernel, three ways, interleaved: ``--quiet`` (no live
view), the live view as it is (after one whole payload, updates carry what changed) and the live
view sending the whole trajectory with every update (how it worked before issue 23; the same code
with ``LiveView.next_bundle`` made to return the whole bundle). For each: wall seconds of the cell,
the kernel's CPU seconds, and the bytes of the iopub messages the cell produced (as JSON, header to
buffers: what the kernel sends towards the browser), split into the live view's messages
(``display_data`` + ``update_display_data``) and the cell's value (``execute_result``: the stored
trajectory, whole, once per MIME type). Targets: all bytes of the live run ≤ 2 MB; live ≤ 1.1× quiet.
``--pace``: seconds the scripted model sleeps a call (a slow model: the bytes must follow the steps,
not the run's duration; issue 32).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish  # noqa: E402
from bench_notebook import LIVE_SETUP, LIVE_TOOL, _cpu, _kernel  # noqa: E402

MODES = ("quiet", "live", "unbounded", "whole")
#: the live view as before issue 23: every update the whole trajectory (payload, full HTML, text)
WHOLE = (
    "from tea_notebook.notebook.live import LiveView as _LV\n"
    "_LV.next_bundle = lambda self, whole=False: _LV.bundle(self)"
)
LIVE = (
    "from tea_notebook.notebook.live import LiveView as _LV\n"
    "from tea_notebook.notebook import live_bundle as _lb\n"
    "_LV.next_bundle = lambda self, whole=False: _lb.LiveBundle(self, update=True, whole=whole)\n"
    "_LV.over_budget = _lb_budget if '_lb_budget' in globals() else _LV.over_budget\n"
    "_lb.HTML_TAIL = 1"
)
#: the live view as before issue 32: changes only, but an update every tick with changes (no byte budget)
#: and three whole steps in the HTML fallback
UNBOUNDED = (
    "from tea_notebook.notebook.live import LiveView as _LV\n"
    "from tea_notebook.notebook import live_bundle as _lb\n"
    "_LV.next_bundle = lambda self, whole=False: _lb.LiveBundle(self, update=True, whole=whole)\n"
    "_lb_budget = globals().get('_lb_budget', _LV.over_budget)\n"
    "_LV.over_budget = lambda self: False\n"
    "_lb.HTML_TAIL = 3"
)


def _size(msg: dict) -> int:
    parts = [msg.get(k) for k in ("header", "parent_header", "metadata", "content")]
    return sum(len(json.dumps(p, default=str).encode()) for p in parts) + sum(len(b) for b in msg.get("buffers") or [])


def _run(kc, km, code: str) -> dict:
    counts = {"view_bytes": 0, "result_bytes": 0, "other_bytes": 0, "updates": 0}

    def hook(msg: dict) -> None:
        kind = msg["header"]["msg_type"]
        size = _size(msg)
        if kind in ("display_data", "update_display_data"):
            counts["view_bytes"] += size
            counts["updates"] += kind == "update_display_data"
        elif kind == "execute_result":
            counts["result_bytes"] += size
        else:
            counts["other_bytes"] += size

    cpu = _cpu(km)
    t0 = time.perf_counter()
    reply = kc.execute_interactive(code, timeout=900, output_hook=hook)
    wall = time.perf_counter() - t0
    assert reply["content"]["status"] == "ok", reply["content"]
    return {**counts, "wall_s": wall, "cpu_s": _cpu(km) - cpu}


def bench(steps: int, runs: int, pace: float = 0.0) -> dict:
    km, kc = _kernel(sys.executable)
    samples: dict[str, list[dict]] = {m: [] for m in MODES}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for code in (LIVE_SETUP.format(folder=tmp), LIVE_TOOL):
                reply = kc.execute_interactive(code, timeout=120, output_hook=lambda m: None)
                assert reply["content"]["status"] == "ok", reply["content"]
            warm = "ScriptedModel([call('lookup', key='k'), call('done', success=True, text='ok')], name='lv_warm')\n"
            kc.execute_interactive(warm, timeout=60, output_hook=lambda m: None)
            for flag in ("--quiet", ""):  # imports and first-call costs out of the way
                cell = f"%%agent bench --tools lookup {flag} --model tea/script:lv_warm\nwarm up"
                kc.execute_interactive(cell, timeout=120, output_hook=lambda m: None)
            for i in range(runs):
                for mode in MODES if i % 2 == 0 else tuple(reversed(MODES)):  # interleaved, order alternating
                    name = f"lv_{mode}_{i}"
                    setup = (
                        f"{ {'whole': WHOLE, 'unbounded': UNBOUNDED}.get(mode, LIVE) }\n"
                        f"it = iter(range({steps} + 1))\n"
                        f"ScriptedModel(lambda m, t: (time.sleep({pace}), call('lookup', key='k') if next(it) < {steps} "
                        f"else call('done', success=True, text='ok'))[1], name='{name}')"
                    )
                    reply = kc.execute_interactive(setup, timeout=60, output_hook=lambda m: None)
                    assert reply["content"]["status"] == "ok", reply["content"]
                    flag = "--quiet" if mode == "quiet" else ""
                    cell = (
                        f"%%agent bench --tools lookup --max-steps {steps + 1} {flag} --model tea/script:{name}\nbench"
                    )
                    samples[mode].append(_run(kc, km, cell))
                    print(mode, i, samples[mode][-1], flush=True)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return {"steps": steps, "runs": runs, "pace": pace, "samples": samples}


def _stats(values: list[float]) -> tuple[float, float, float]:
    return min(values), statistics.median(values), max(values)


def render(results: dict, command: str) -> str:
    ok = lambda cond: "✅" if cond else "❌"  # noqa: E731
    s, steps, n = results["samples"], results["steps"], results["runs"]
    mb = lambda b: f"{b / 1e6:.2f} MB"  # noqa: E731
    rows = []
    for mode, label in (
        ("quiet", "`--quiet`"),
        ("live", "live view (changes only, byte budget)"),
        ("unbounded", "live view, changes only, no byte budget (before issue 32)"),
        ("whole", "live view, whole every update (before issue 23)"),
    ):
        total = [r["view_bytes"] + r["result_bytes"] + r["other_bytes"] for r in s[mode]]
        view = statistics.median(r["view_bytes"] for r in s[mode])
        result = statistics.median(r["result_bytes"] for r in s[mode])
        updates = statistics.median(r["updates"] for r in s[mode])
        wall, cpu = _stats([r["wall_s"] for r in s[mode]]), _stats([r["cpu_s"] for r in s[mode]])
        rows.append(
            f"| {label} | {mb(statistics.median(total))} | {mb(view)} ({updates:.0f} updates) | {mb(result)} | "
            f"{wall[0]:.2f} / {wall[1]:.2f} / {wall[2]:.2f} | {cpu[0]:.2f} / {cpu[1]:.2f} / {cpu[2]:.2f} |"
        )
    med = lambda mode, key: statistics.median(r[key] for r in s[mode])  # noqa: E731
    live_total = max(r["view_bytes"] + r["result_bytes"] + r["other_bytes"] for r in s["live"])
    wall_ratio, cpu_ratio = med("live", "wall_s") / med("quiet", "wall_s"), med("live", "cpu_s") / med("quiet", "cpu_s")
    before = med("whole", "wall_s") / med("quiet", "wall_s")
    return f"""## Live view: bytes and time (issue 23)

Command: `{command}` — machine: {results["machine"]}; run {results["when"]}; load average (1-min)
{results["load"][0]:.2f} before, {results["load"][1]:.2f} after, on 2 cores shared with other work.

A {steps}-step scripted `%%agent` run (one `lookup` call a step; the model sleeps {results.get("pace", 0):g} s a call) in a real kernel, {n} runs of each
mode, interleaved (order alternating). Bytes: the iopub messages of the cell as JSON (what the kernel
sends towards the browser): the live view's `display_data` + `update_display_data`, and the cell's
value (`execute_result`: the stored trajectory, custom MIME + HTML + text, once each). Times:
min / median / max.

| mode | all bytes (median) | live view | cell's value | wall s | kernel CPU s |
|---|---|---|---|---|---|
{chr(10).join(rows)}

| target | measured | |
|---|---|---|
| a {steps}-step live run sends ≤ 2 MB in all (worst of {n}) | {mb(live_total)} | {ok(live_total <= 2e6)} |
| live vs quiet, wall (medians) ≤ 1.1× | {wall_ratio:.2f}× (whole updates: {before:.2f}×) | {ok(wall_ratio <= 1.1)} |
| live vs quiet, kernel CPU (medians) | {cpu_ratio:.2f}× | |

The machine is shared with other jobs (the `--quiet` runs alone took {_stats([r["wall_s"] for r in s["quiet"]])[0]:.1f}–{_stats([r["wall_s"] for r in s["quiet"]])[2]:.1f} s):
wall times are noisy; the kernel's CPU seconds are the steadier figure. (Earlier runs now and then had one live
run take about twice the CPU of the others: issue 32 traced that to the run's start re-embedding the memory of
earlier runs, not to the view; each memory text is now embedded once.)

After one whole payload, each update (at most every 0.25 s) carries the steps events touched since
the one before, the run headers and a short HTML fallback (the header, a line for each recent step,
the latest step whole); the extension merges them. What the updates spend beyond their content (the
HTML, headers, metadata) is held to 30 KB + 400 bytes per step made: an update over it waits and goes
out with a later one, so a slow model's run sends about what a fast one does. The view ends as the
stored trajectory, sent once (the cell's value).
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pace", type=float, default=0.0, help="seconds the scripted model sleeps a call")
    parser.add_argument("--write", action="store_true")
    args = parse_args(parser, steps=20, runs=1)
    load = os.getloadavg()[0]
    results = bench(args.steps, args.runs, args.pace)
    results.update(machine=machine(), when=time.strftime("%Y-%m-%d"), load=(load, os.getloadavg()[0]))
    command = command_line()
    publish(render(results, command), args.write)


if __name__ == "__main__":
    main()
