"""Agent cells in JupyterLab (issue 29): how fast a proposal shows and an approval runs.

    .venv/bin/python bench/bench_cells_ui.py [--n 20] [--write]

A real JupyterLab (the tests' ``Lab``: this interpreter as the kernel, the extension as built in
tea_notebook/labextension) and headless Chromium. A scripted agent (``%%agent NAME --cells``, ask mode)
proposes ``n`` cells one after another (after two warm-up proposals); for each, in the page:

  1. proposal → cell visible: from the kernel's own timestamp on the comm message that carries the
     proposal (its header's ``date``) to the first animation frame after the proposed cell's badge is in
     the page (the cell was inserted through the notebook model and decorated). Target ≤ 150 ms.
  2. approval click → cell running: from the click on the bar's Run (its handler is timed in the page)
     to the kernel's own timestamp on the ``execute_input`` message of that cell (the kernel started
     executing it). Target ≤ 100 ms.

Both clocks are this machine's (the kernel's and the browser's wall clock). With --write the figures
replace the "JupyterLab extension: agent cells" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from _common import command_line, machine, parse_args, publish  # noqa: E402

from tea_notebook.envs.browser import LAUNCH_ARGS  # noqa: E402

VISIBLE_TARGET_MS = 150.0
RUNNING_TARGET_MS = 100.0
WARMUP = 2
NAME = "bench-cells.ipynb"

MODEL = """from tea_notebook.models.offline import ScriptedModel, call
ScriptedModel([call('notebook_propose_cell', code=f'bench_value = {{i}}') for i in range({total})]
              + [call('done', success=True, text='proposed')], name='bench-cells')
print('ready')"""

AGENT = "%%agent bencher --model tea/script:bench-cells --cells --max-steps {steps}\nPropose cells."

#: the page's spy: the kernel's timestamps of proposals and cell starts, when each badge appeared
SPY_JS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const kernel = w.sessionContext.session.kernel;
  const at = d => {
    // the kernel's ISO date, microseconds kept (Date.parse keeps milliseconds only)
    const m = /^(\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d)(\\.\\d+)?(Z|[+-]\\d\\d:?\\d\\d)?$/.exec(String(d));
    if (!m) { return Date.parse(d); }
    return Date.parse(m[1] + (m[3] || 'Z')) + (m[2] ? parseFloat('0' + m[2]) * 1000 : 0);
  };
  const B = window.__bench = { proposals: {}, starts: [] };
  kernel.iopubMessage.connect((_, msg) => {
    const type = msg.header.msg_type;
    if (type === 'comm_msg' && msg.content.data && msg.content.data.type === 'proposal') {
      const id = msg.content.data.proposal.id;
      B.proposals[id] = Object.assign(B.proposals[id] || {}, { sent: at(msg.header.date) });
    } else if (type === 'execute_input') {
      B.starts.push({ started: at(msg.header.date), code: msg.content.code });
    }
  });
  const seen = new Set();
  new MutationObserver(() => {
    for (const badge of w.content.node.querySelectorAll('.tea-cell-badge[data-tea-proposal]')) {
      const id = badge.getAttribute('data-tea-proposal');
      if (seen.has(id) || !badge.isConnected) { continue; }
      seen.add(id);
      const p = B.proposals[id] = Object.assign(B.proposals[id] || {}, { inserted: Date.now() });
      requestAnimationFrame(() => { p.visible = Date.now(); });
    }
  }).observe(w.content.node, { subtree: true, childList: true });
}"""

CLICK_JS = """(id) => {
  const b = document.querySelector(`.tea-cell-bar[data-tea-proposal="${id}"] [data-tea-action=run]`);
  const t = Date.now();
  b.click();
  window.__bench.proposals[id].clicked = t;
  return t;
}"""


def _notebook(cells: list[str]) -> dict[str, Any]:
    return {
        "cells": [
            {"cell_type": "code", "id": f"c{i}", "execution_count": None, "metadata": {}, "outputs": [], "source": s}
            for i, s in enumerate(cells)
        ],
        "metadata": {"kernelspec": {"name": "tea-test", "display_name": "tea", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def measure(n: int) -> dict[str, Any]:
    """Start JupyterLab and Chromium, run the agent, time its ``n`` proposals (after the warm-up)."""
    from playwright.sync_api import sync_playwright
    from test_extension_ui import BUILT, SETUP, Lab, Page

    if not (BUILT / "package.json").is_file():
        raise SystemExit("the extension is not built: cd extension && jlpm build:prod")
    executable = os.environ.get("TEA_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    total = n + WARMUP
    with tempfile.TemporaryDirectory() as tmp:
        root, home = Path(tmp) / "root", Path(tmp) / "home"
        root.mkdir()
        home.mkdir()
        cells = [
            SETUP.format(ws=str(root / "ws")),
            MODEL.format(total=total),
            AGENT.format(steps=total + 5),
        ]
        (root / NAME).write_text(json.dumps(_notebook(cells)))
        lab = Lab(root, home)
        started = time.monotonic()
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=executable, args=LAUNCH_ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                lp = Page(page, lab)
                lp.open(NAME)
                lp.run(0)
                lp.run(1)
                page.evaluate(SPY_JS)
                lp.run(2)
                samples = []
                for i in range(total):
                    pid = f"p{i + 1}"
                    page.wait_for_function(
                        f"() => {{ const p = window.__bench.proposals[{json.dumps(pid)}]; return p && p.visible && p.sent; }}",
                        timeout=60000,
                    )
                    clicked = page.evaluate(CLICK_JS, pid)
                    code = f"bench_value = {i}"
                    page.wait_for_function(
                        f"() => window.__bench.starts.some(s => s.code === {json.dumps(code)})", timeout=60000
                    )
                    page.wait_for_function(
                        f"""() => {{ const b = document.querySelector('.tea-cell-badge[data-tea-proposal={json.dumps(pid)}]');
                                   return b && b.getAttribute('data-tea-status') === 'ran'; }}""",
                        timeout=60000,
                    )
                    record = page.evaluate(
                        f"""() => Object.assign({{}}, window.__bench.proposals[{json.dumps(pid)}],
                               {{ started: window.__bench.starts.find(s => s.code === {json.dumps(code)}).started }})"""
                    )
                    samples.append(
                        {
                            "visible": record["visible"] - record["sent"],
                            "inserted": record["inserted"] - record["sent"],
                            "running": record["started"] - clicked,
                        }
                    )
                version = browser.version
                browser.close()
        finally:
            lab.stop()
        wall = time.monotonic() - started
    timed = samples[WARMUP:]
    return {
        "n": len(timed),
        "visible": [s["visible"] for s in timed],
        "inserted": [s["inserted"] for s in timed],
        "running": [s["running"] for s in timed],
        "chromium": version,
        "wall_s": wall,
    }


def _mmm(values: list[float]) -> str:
    return f"{min(values):.0f} / {statistics.median(values):.0f} / {max(values):.0f} ms"


def render(r: dict[str, Any], command: str) -> str:
    """The docs/benchmarks.md section."""
    ok = lambda v, t: "✅" if v <= t else "❌"  # noqa: E731
    load = f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"
    vis, run = statistics.median(r["visible"]), statistics.median(r["running"])
    return f"""## JupyterLab extension: agent cells

Command: `{command}` — machine: {machine()}; headless Chromium {r["chromium"]}; run {time.strftime("%Y-%m-%d")}; wall {r["wall_s"]:.0f} s (JupyterLab's start included). The machine is shared: its 1-minute load average was {load} after the run.

| what (n = {r["n"]} proposals of a scripted agent, after {WARMUP} warm-up ones) | min / median / max | target | |
|---|---|---|---|
| **proposal → cell visible**: the kernel's timestamp on the proposal's comm message → the first animation frame with the proposed cell (badge, bar) in the notebook | **{_mmm(r["visible"])}** | ≤ {VISIBLE_TARGET_MS:.0f} ms | {ok(vis, VISIBLE_TARGET_MS)} |
| of which until the cell and its badge are in the page | {_mmm(r["inserted"])} | | |
| every sample, in order | {", ".join(f"{v:.0f}" for v in r["visible"])} ms | | |
| **approval click → cell running**: the click on Run → the kernel's timestamp on that cell's `execute_input` | **{_mmm(r["running"])}** | ≤ {RUNNING_TARGET_MS:.0f} ms | {ok(run, RUNNING_TARGET_MS)} |

Between the two: the page sends the decision on the comm, then runs the cell as the notebook's own
(`NotebookActions.runCells`), so the approved cell has its execution count, outputs and history.
"""


def main() -> None:
    """Measure and print (``--write``: also update docs/benchmarks.md)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--n", type=int, default=20, help="proposals to time (after two warm-up ones)")
    args = parse_args(parser, n=2)
    if args.n < 1:
        parser.error("--n must be at least 1")
    publish(render(measure(args.n), command_line()), args.write)


if __name__ == "__main__":
    main()
