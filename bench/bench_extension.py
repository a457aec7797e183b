"""Benchmark of the JupyterLab extension's trajectory renderer: a 2,000-step trajectory in headless Chromium.

    .venv/bin/python bench/bench_extension.py [--write] [--steps 2000] [--runs 7]

Measures, on this machine:
  1. Time to first render: from handing the payload (a JSON string, as it arrives in an output) to
     the view until the frame after it is painted (JSON.parse + validation + rows + the first
     window of cards + the per-step charts, then layout and paint: two requestAnimationFrames).
  2. Scroll frame time: the list is scrolled from top to bottom in 60 px steps, one step per frame;
     per frame, the view's work (which rows are visible, re-rendering the window, measuring new
     rows, the forced layout), and the interval between frames (requestAnimationFrame timestamps).
The page is the renderer's own module (extension/lib, compiled by `jlpm build:lib`) with its CSS, served
from a local HTTP server; JupyterLab itself is not loaded (its start-up is not the renderer's).
With --write the figures replace the "JupyterLab extension: rendering" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import random
import shutil
import statistics
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish  # noqa: E402

from tea_notebook.envs.browser import LAUNCH_ARGS  # noqa: E402

EXT = ROOT / "extension"
FIRST_RENDER_TARGET_MS = 300.0
FRAME_TARGET_MS = 16.0

PAGE = """<!doctype html><html><head><meta charset="utf-8"><link rel="stylesheet" href="/style/base.css">
<style>body{margin:0;padding:8px;width:1100px}</style></head><body><div id="host"></div>
<script type="module">
import { TrajectoryView } from '/lib/view.js';
window.TrajectoryView = TrajectoryView;
window.benchReady = true;
</script></body></html>"""

FIRST_RENDER_JS = """async (text) => {
  const host = document.getElementById('host');
  host.textContent = '';
  const frame = () => new Promise(r => requestAnimationFrame(() => r()));
  await frame();
  const t0 = performance.now();
  const view = new window.TrajectoryView({});
  host.append(view.node);
  const meta = JSON.parse(text.meta);
  view.update(JSON.parse(text.payload), meta);
  const t1 = performance.now();
  await frame(); await frame();
  const t2 = performance.now();
  window.view = view;
  return { sync: t1 - t0, painted: t2 - t0, rows: view.rowCount };
}"""

SCROLL_JS = """async ({ expandEvery, step }) => {
  const view = window.view;
  const list = document.querySelector('.tea-list');
  // open every n-th card (taller, variable heights), as a person reading would
  for (let i = 0; i < 2000; i += expandEvery) { view.expanded.add(`step:root:${i + 1}`); }
  view.recomputeRows(); view.renderList(true);
  list.scrollTop = 0;
  const work = [], intervals = [];
  let disorder = 0;
  let last = null;
  const total = list.scrollHeight - list.clientHeight;
  await new Promise(done => {
    const tick = ts => {
      if (last !== null) { intervals.push(ts - last); }
      last = ts;
      const t0 = performance.now();
      list.scrollTop = Math.min(total, list.scrollTop + step);
      view.renderList(false);
      void list.offsetHeight; // the layout this frame needs, inside the measurement
      work.push(performance.now() - t0);
      // the window holds consecutive rows in order (checked outside the timing)
      const idx = [...document.querySelector('.tea-window').children].map(n => Number(n.dataset.row));
      if (idx.some((v, i) => i > 0 && v !== idx[i - 1] + 1)) { disorder++; }
      if (list.scrollTop >= total - 1) { done(); } else { requestAnimationFrame(tick); }
    };
    requestAnimationFrame(tick);
  });
  return { work, intervals, disorder, frames: work.length, height: list.scrollHeight, nodes: document.querySelectorAll('.tea-row').length };
}"""


def trajectory(steps: int, seed: int = 7) -> tuple[dict[str, Any], dict[str, Any]]:
    """A payload of ``steps`` steps in all: a planner and two sub-agents (10% of the steps each), with
    thoughts, tool calls with arguments, observations and tokens; latency per step in the metadata."""
    rng = random.Random(seed)
    words = "search read parse compare table price source quote evidence summary check answer".split()

    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    def step(i: int) -> dict[str, Any]:
        tools = rng.sample(["web_search", "read_page", "python", "files_read", "todo"], k=rng.randint(1, 2))
        return {
            "number": i,
            "thinking": text(30),
            "evaluation": text(10),
            "memory": text(12),
            "next_goal": text(8),
            "replayed": False,
            "errors": [],
            "prompt_tokens": rng.randint(800, 6000),
            "completion_tokens": rng.randint(30, 400),
            "cost": rng.random() / 500,
            "actions": [
                {"name": t, "arguments": {"query": text(5), "n": i}, "ok": rng.random() > 0.05, "observation": text(80)}
                for t in tools
            ],
        }

    def run(agent: str, n: int, children: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "version": 1,
            "agent": agent,
            "task": text(20),
            "model": "tea/test",
            "status": "success",
            "answer": text(20),
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cost": 0.0,
            "steps": [step(i + 1) for i in range(n)],
            "stages": [],
            "threads": [],
            "messages": [],
            "children": children,
        }

    sub = steps // 10
    payload = run("planner", steps - 2 * sub, [run("researcher", sub, []), run("analyst", sub, [])])
    latency = {
        "steps": [round(rng.uniform(0.2, 4.0), 3) for _ in payload["steps"]],
        "children": [{"steps": [round(rng.uniform(0.2, 4.0), 3) for _ in c["steps"]]} for c in payload["children"]],
    }
    return payload, {"run_id": "bench", "latency": latency}


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves extension/ and resolves the compiled modules' extension-less imports ('./model')."""

    def translate_path(self, path: str) -> str:
        local = super().translate_path(path)
        if not os.path.exists(local) and os.path.exists(local + ".js"):
            return local + ".js"
        return local

    def guess_type(self, path: Any) -> str:
        return "text/javascript" if str(path).endswith(".js") or "/lib/" in str(path) else super().guess_type(path)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path in ("/", "/index.html"):
            body = PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def log_message(self, *args: Any) -> None:
        pass


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(steps: int, runs: int) -> dict[str, Any]:
    """Run the page in headless Chromium: ``runs`` first renders (median), then one scroll pass."""
    from playwright.sync_api import sync_playwright

    if not (EXT / "lib" / "view.js").is_file():
        raise SystemExit("extension/lib is missing: build the extension first (pip install -e . or jlpm build:prod)")
    payload, meta = trajectory(steps)
    text = {"payload": json.dumps(payload), "meta": json.dumps(meta)}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, directory=str(EXT)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    executable = os.environ.get("TEA_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=executable, args=LAUNCH_ARGS)
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
            page.wait_for_function("() => window.benchReady === true")
            page.evaluate(FIRST_RENDER_JS, text)  # warm-up: module compile, first layout of the CSS
            renders = [page.evaluate(FIRST_RENDER_JS, text) for _ in range(runs)]
            scroll = page.evaluate(SCROLL_JS, {"expandEvery": 10, "step": 60})
            version = browser.version
            browser.close()
    finally:
        server.shutdown()
    work, intervals = scroll["work"], scroll["intervals"]
    if scroll["disorder"]:
        raise SystemExit(f"the list's rows were out of order in {scroll['disorder']} frames")
    return {
        "steps": steps,
        "payload_kb": len(text["payload"]) / 1024,
        "rows": renders[0]["rows"],
        "first_render_ms": statistics.median(r["painted"] for r in renders),
        "first_render_all": [round(r["painted"], 1) for r in renders],
        "sync_ms": statistics.median(r["sync"] for r in renders),
        "frames": scroll["frames"],
        "scroll_height": scroll["height"],
        "dom_rows": scroll["nodes"],
        "work_median_ms": statistics.median(work),
        "work_p95_ms": _pct(work, 0.95),
        "work_max_ms": max(work),
        "interval_median_ms": statistics.median(intervals),
        "interval_p95_ms": _pct(intervals, 0.95),
        "long_frames": sum(1 for x in intervals if x > 1000 / 60 * 1.5),
        "chromium": version,
    }


def render(r: dict[str, Any], command: str) -> str:
    """The docs/benchmarks.md section."""
    ok = lambda v, t: "✅" if v < t else "❌"  # noqa: E731
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"""## JupyterLab extension: rendering

Command: `{command}` — machine: {machine()}; headless Chromium {r["chromium"]}; run {time.strftime("%Y-%m-%d")}. The machine is shared: its 1-minute load average was {load:.2f} after the run.

| what | measured | target | |
|---|---|---|---|
| **time to first render** of a {r["steps"]:,}-step trajectory ({r["payload_kb"]:,.0f} KB of JSON): payload handed over → first frame painted, median of {len(r["first_render_all"])} | **{r["first_render_ms"]:.0f} ms** | < {FIRST_RENDER_TARGET_MS:.0f} ms | {ok(r["first_render_ms"], FIRST_RENDER_TARGET_MS)} |
| of which synchronous (JSON.parse, validation, rows, the first window of cards, charts) | {r["sync_ms"]:.0f} ms | | |
| all runs | {", ".join(f"{x:.0f}" for x in r["first_render_all"])} ms | | |
| **scroll frame time**: the view's work per frame (visible rows, window re-render, measuring, layout), p95 over {r["frames"]} frames | **{r["work_p95_ms"]:.1f} ms** | < {FRAME_TARGET_MS:.0f} ms | {ok(r["work_p95_ms"], FRAME_TARGET_MS)} |
| the same, median / max | {r["work_median_ms"]:.1f} / {r["work_max_ms"]:.1f} ms | | |
| interval between frames while scrolling (requestAnimationFrame), median / p95; frames over 25 ms | {r["interval_median_ms"]:.1f} / {r["interval_p95_ms"]:.1f} ms; {r["long_frames"]} | | |

The trajectory: a planner with {r["steps"] - 2 * (r["steps"] // 10):,} steps and two sub-agents of {r["steps"] // 10:,} steps
each ({r["rows"]:,} rows in the steps view), every step with thinking, evaluation, memory and next goal, one or two
tool calls with arguments and an ~80-word observation, tokens, cost and (in the metadata) latency, so the three
per-step charts are drawn. The renderer is the extension's own module (`extension/lib/view.js`, compiled by tsc,
the same code the JupyterLab bundle carries) with its stylesheet, in a page served locally: JupyterLab's own
start-up is not counted. Scrolling goes from top to bottom in 60 px steps, one per frame, with every 10th card
of the planner expanded (variable heights, measured as they come into view); the list keeps about
{r["dom_rows"]} rows in the DOM whatever the trajectory's length (virtualised; total height {r["scroll_height"]:,} px).
"""


def main() -> None:
    """Measure and print (``--write``: also update docs/benchmarks.md)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--steps", type=int, default=2000, help="steps in the trajectory")
    parser.add_argument("--runs", type=int, default=7, help="first renders to time (median)")
    args = parse_args(parser, steps=20, runs=1)
    results = measure(args.steps, args.runs)
    command = command_line()
    publish(render(results, command), args.write)


if __name__ == "__main__":
    main()
