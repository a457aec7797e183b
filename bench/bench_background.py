"""Benchmark of background runs: a ``%%agent --background`` run against the same run in the foreground.

    .venv/bin/python bench/bench_background.py [--write] [--steps 200] [--reps 5]

In one real kernel (jupyter_client, as a front end drives it), with a scripted model and a fast tool:
  * foreground: ``%%agent`` (the cell waits for the run), timed from sending the cell to its reply;
  * background: ``%%agent --background --out h``, then a second cell ``h.result()``, timed from sending
    the first cell to the second cell's reply (so it includes one extra cell round trip);
each with the live view on and with ``--quiet``, the four interleaved over ``--reps`` rounds after a
warm-up. Target: background ≤ 1.1× foreground (median).
With --write the figures replace the "Background runs" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import machine, parse_args, publish  # noqa: E402
from bench_notebook import _execute, _kernel  # noqa: E402

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
TARGET = 1.1

SETUP = """
%load_ext tea_notebook
%tea workspace {ws}
from tea_notebook.models.offline import ScriptedModel, call
ws = %tea workspace

@ws.tools.tool
def tick(i: int) -> str:
    '''Return i.'''
    return f"tick {{i}}"

def script(n):
    return ScriptedModel([call("tick", i=i) for i in range(n)] + [call("done", success=True, text="ok")]).name
"""


def one(kc: Any, steps: int, background: bool, quiet: bool) -> float:
    _, content = _execute(kc, f"_m = script({steps})")
    assert content["status"] == "ok", content
    flags = f"--model {_model_name(kc)} --tools tick --max-steps {steps + 5}" + (" --quiet" if quiet else "")
    if background:
        start = time.perf_counter()
        _, c1 = _execute(kc, f"%%agent bench --background --out _h {flags}\nTick.")
        _, c2 = _execute(kc, "assert _h.result(300).status == 'success', _h")
        elapsed = time.perf_counter() - start
        assert c1["status"] == "ok" and c2["status"] == "ok", (c1, c2)
    else:
        start = time.perf_counter()
        _, c1 = _execute(kc, f"%%agent bench --out _r {flags}\nTick.")
        elapsed = time.perf_counter() - start
        assert c1["status"] == "ok", c1
        _, c2 = _execute(kc, "assert _r.status == 'success', _r")
        assert c2["status"] == "ok", c2
    return elapsed


def _model_name(kc: Any) -> str:
    out: list[str] = []

    def hook(msg: dict) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    kc.execute_interactive("print(_m)", timeout=30, output_hook=hook)
    return "".join(out).strip()


def bench(steps: int, reps: int) -> dict[str, Any]:
    km, kc = _kernel(sys.executable)
    try:
        with tempfile.TemporaryDirectory() as folder:
            _, content = _execute(kc, SETUP.format(ws=folder))
            assert content["status"] == "ok", content
            cases = [(bg, quiet) for quiet in (True, False) for bg in (False, True)]
            for bg, quiet in cases:  # warm-up
                one(kc, 20, bg, quiet)
            times: dict[tuple[bool, bool], list[float]] = {c: [] for c in cases}
            for _ in range(reps):
                for bg, quiet in cases:
                    times[(bg, quiet)].append(one(kc, steps, bg, quiet))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return {"times": times, "steps": steps, "reps": reps}


def render(r: dict[str, Any], command: str) -> str:
    t = r["times"]
    rows = []
    for quiet in (True, False):
        fg, bg = statistics.median(t[(False, quiet)]), statistics.median(t[(True, quiet)])
        spread = lambda v: f"{min(v) * 1000:.0f} / {statistics.median(v) * 1000:.0f} / {max(v) * 1000:.0f} ms"  # noqa: E731
        ratio = bg / fg
        ok = "✅" if ratio <= TARGET else "❌"
        label = "`--quiet`" if quiet else "live view on"
        rows.append(
            f"| {label} | {spread(t[(False, quiet)])} | {spread(t[(True, quiet)])} | **{ratio:.2f}×** | ≤ {TARGET}× | {ok} |"
        )
    return f"""## Background runs

Command: `{command}` — machine: {r["machine"]}; run {r["when"]}.

A {r["steps"]}-step `%%agent` run (scripted model, a tool that returns at once) in one real kernel driven through
jupyter_client. Foreground: from sending the cell to its reply. Background: from sending the `--background` cell to
the reply of a second cell `h.result()` (one more cell round trip included). min / median / max of n={r["reps"]}
interleaved rounds after a warm-up; the ratio is of the medians.

| live view | foreground (min / median / max) | background (min / median / max) | ratio | target | |
|---|---|---|---|---|---|
{chr(10).join(rows)}
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    args = parse_args(parser, steps=10, reps=1)
    command = " ".join([".venv/bin/python", "bench/bench_background.py", *sys.argv[1:]])
    results = {"machine": machine(), "when": time.strftime("%Y-%m-%d"), **bench(args.steps, args.reps)}
    for case, values in results["times"].items():
        print(case, [round(v, 3) for v in values], flush=True)
    publish(render(results, command), args.write)


if __name__ == "__main__":
    main()
