"""Benchmarks of the live environments (issue: environments): the Python sandbox and the browser.

    .venv/bin/python bench/bench_envs.py [--write] [--calls 300] [--cold 20] [--reps 25] [--no-browser]

Measures, on this machine:
  1. the sandbox's warm round trip for ``1+1`` (median and p95 over --calls calls, after a warm-up),
     at three layers: ``PythonSandbox.request`` (the pipe to the child and back),
     ``Environment.call("run_python")`` on the background loop (the action layer: a worker thread
     and the action's time limit) and ``ws.envs.invoke("python", "run_python", ...)`` (ECP: record
     and schema check, session lookup, the hop to the background loop, the usage row);
  2. the sandbox's cold start, spawn to ready (median of --cold), behind bubblewrap and as the
     fallback child process, and the first ``ws.envs.invoke`` of a new session (start + first call);
  3. the browser's actions through ECP on local pages served by a thread in this process: goto,
     click (a button that changes the page, and a link that navigates), extract (median of --reps
     each), and its cold start (Chromium launch + first goto).
With --write the figures replace the "Environments" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import http.server
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish, summary  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook import _sync  # noqa: E402
from tea_notebook.envs.sandbox import PythonSandbox  # noqa: E402

ROUND_TRIP_TARGET_MS = 20.0
COLD_START_TARGET_S = 1.0


def timed(fn: Callable[[], Any], n: int, check: Callable[[Any], bool] | None = None) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        value = fn()
        out.append(time.perf_counter() - t0)
        if check is not None and not check(value):
            raise RuntimeError(f"unexpected result: {value!r}")
    return out


# -- sandbox ----------------------------------------------------------------------------------
def bench_round_trip(base: Path, calls: int) -> dict[str, Any]:
    warm = max(20, calls // 10)
    sb = PythonSandbox(base / "direct", timeout=30)
    try:
        sb._spawn()
        request = lambda: sb.request("exec", code="1+1")  # noqa: E731
        timed(request, warm)
        direct = timed(request, calls, lambda r: r.value == "2" and r.ok)
        action = lambda: _sync.run_sync(sb.call("run_python", {"code": "1+1"}))  # noqa: E731
        timed(action, warm)
        layer = timed(action, calls, lambda v: v == "value: 2")
        described = sb.boundary.describe()
    finally:
        sb.kill()

    ws = tea_notebook.Workspace(base / "ws", embedder="hashing")
    try:
        ws.envs.ensure("python")
        invoke = lambda: ws.envs.invoke("python", "run_python", {"code": "1+1"})  # noqa: E731
        timed(invoke, warm)
        ecp = timed(invoke, calls, lambda r: r.ok and r.value == "value: 2")
    finally:
        ws.close()
    return {
        "direct": summary(direct),
        "action": summary(layer),
        "ecp": summary(ecp),
        "boundary": described,
    }


def bench_cold_start(base: Path, n: int) -> dict[str, Any]:
    def spawn_times(tag: str, count: int = n, **options: Any) -> list[float]:
        out = []
        for i in range(count):
            sb = PythonSandbox(base / f"cold-{tag}-{i}", timeout=30, **options)
            t0 = time.perf_counter()
            sb._spawn()
            out.append(time.perf_counter() - t0)
            sb.kill()
        return out

    spawn_times("warmup", 2)  # the bubblewrap probe and the page cache, outside the timings
    bounded = spawn_times("bwrap")
    plain = spawn_times("process", isolation="process")

    # the interpreter alone: start-up with -I and the standard modules the child imports
    imports = "import ast, errno, io, json, linecache, mmap, os, queue, resource, signal, subprocess, sys, tempfile"
    command = [sys.executable, "-I", "-X", "utf8", "-c", imports + ", threading, time, traceback"]
    interpreter = timed(lambda: subprocess.run(command, check=True), n)

    ws = tea_notebook.Workspace(base / "ws-cold", embedder="hashing")
    first = []
    try:
        ws.envs.ensure("python")
        for _ in range(n):
            ws.envs.release()
            t0 = time.perf_counter()
            result = ws.envs.invoke("python", "run_python", {"code": "1+1"})
            first.append(time.perf_counter() - t0)
            assert result.ok, result.error
    finally:
        ws.close()
    return {
        "spawn": summary(bounded),
        "spawn_plain": summary(plain),
        "interpreter": summary(interpreter),
        "first_invoke": summary(first),
    }


# -- browser ----------------------------------------------------------------------------------
PAGE = """<!doctype html>
<html><head><title>{title}</title></head>
<body>
<h1>{title}</h1>
<p>A local page for the benchmark. {filler}</p>
<ul>{items}</ul>
<p>Clicks: <span id="count">0</span></p>
<button id="inc" onclick="document.getElementById('count').textContent =
  String(Number(document.getElementById('count').textContent) + 1)">Add one</button>
<a id="next" href="/{other}.html">Go to {other_title}</a>
<table><tr><th>leaf</th><th>steep</th></tr><tr><td>green</td><td>2 min</td></tr>
<tr><td>black</td><td>4 min</td></tr></table>
</body></html>
"""


def _page(name: str, other: str) -> bytes:
    filler = "Tea is steeped in hot water for a few minutes. " * 20
    items = "".join(f"<li>item {i}: oolong, sencha, darjeeling</li>" for i in range(30))
    return PAGE.format(
        title=f"Page {name.upper()}", filler=filler, items=items, other=other, other_title=f"Page {other.upper()}"
    ).encode()


class _Site(http.server.BaseHTTPRequestHandler):
    pages = {"/a.html": _page("a", "b"), "/b.html": _page("b", "a")}

    def do_GET(self) -> None:  # noqa: N802 - the http.server interface
        body = self.pages.get(self.path.split("?")[0])
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def bench_browser(base: Path, reps: int, cold: int) -> dict[str, Any]:
    from tea_notebook.envs.browser import Browser, find_chromium

    if find_chromium() is None:
        try:
            from playwright.sync_api import sync_playwright  # noqa: F401
        except ImportError:
            return {"skipped": "Playwright is not installed"}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    ws = tea_notebook.Workspace(base / "ws-browser", embedder="hashing")
    ws.egress.allow(url.split("//", 1)[1])  # the local site: loopback needs an explicit allow
    try:
        ws.envs.add(Browser, timeout=15)

        def invoke(action: str, **args: Any) -> str:
            result = ws.envs.invoke("browser", action, args)
            if not result.ok:
                raise RuntimeError(f"browser.{action} failed: {result.error}")
            return result.value

        starts = []
        for _ in range(cold):
            ws.envs.release()
            t0 = time.perf_counter()
            invoke("goto", url=f"{url}/a.html")
            starts.append(time.perf_counter() - t0)
        times: dict[str, list[float]] = {"goto": [], "click": [], "click_link": [], "extract": []}
        for i in range(reps + 2):  # the first two rounds warm up
            keep = i >= 2
            for action, args, expect in (
                ("goto", {"url": f"{url}/a.html"}, "Page A"),
                ("click", {"selector": "#inc"}, "Clicked"),
                ("extract", {}, "Clicks: 1"),
                ("click_link", {"selector": "#next"}, "Page B"),
            ):
                t0 = time.perf_counter()
                out = invoke("click" if action == "click_link" else action, **args)
                took = time.perf_counter() - t0
                if expect not in out:
                    raise RuntimeError(f"browser.{action} returned {out[:300]!r}, expected {expect!r}")
                if keep:
                    times[action].append(took)
        env = ws.envs.manager.sessions[("browser", "interactive")]
        executable = getattr(env, "_executable_used", None) or "?"
        pieces = _browser_pieces(env, reps)
    finally:
        ws.close()
        server.shutdown()
    return {
        "start": summary(starts),
        **{k: summary(v) for k, v in times.items()},
        "executable": executable,
        "page_bytes": len(_Site.pages["/a.html"]),
        "pieces": pieces,
    }


def _browser_pieces(env: Any, n: int) -> dict[str, Any] | None:
    """Where a goto / click spends its time after the page is there: the viewport screenshot and the
    snapshot of interactive elements that every state refresh takes (timed alone, on the same page)."""
    from tea_notebook.envs import browser as browser_module

    async def work() -> dict[str, Any]:
        page = await env._page()
        shots, snaps = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            await page.screenshot(type="png")
            shots.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await page.evaluate(browser_module._SNAPSHOT_JS, browser_module.MAX_ELEMENTS)
            snaps.append(time.perf_counter() - t0)
        return {"screenshot": summary(shots), "snapshot": summary(snaps)}

    try:  # internals of the browser environment: skipped when they change
        return _sync.run_sync(work())
    except Exception as exc:  # noqa: BLE001
        print("browser breakdown skipped:", exc, flush=True)
        return None


# -- report -----------------------------------------------------------------------------------
def render(results: dict[str, Any]) -> str:
    rt, cs, br = results["round_trip"], results["cold"], results.get("browser")
    ok = lambda cond: "✅" if cond else "❌"  # noqa: E731
    ms = lambda s: f"{s['median_ms']:.2f} ms | {s['p95_ms']:.2f} ms"  # noqa: E731
    ms1 = lambda s: f"{s['median_ms']:.0f} ms | {s['p95_ms']:.0f} ms"  # noqa: E731
    ecp_extra = rt["ecp"]["median_ms"] - rt["direct"]["median_ms"]
    action_extra = rt["action"]["median_ms"] - rt["direct"]["median_ms"]
    rows = [
        f"| sandbox round trip `1+1`, `PythonSandbox.request` (pipe to the child and back) "
        f"| {ms(rt['direct'])} | < {ROUND_TRIP_TARGET_MS:g} ms | {ok(rt['direct']['median_ms'] < ROUND_TRIP_TARGET_MS)} |",
        f'| the same as an action, `Environment.call("run_python")` on the background loop | {ms(rt["action"])} | | |',
        f'| the same through ECP, `ws.envs.invoke("python", "run_python", {{"code": "1+1"}})` '
        f"| {ms(rt['ecp'])} | < {ROUND_TRIP_TARGET_MS:g} ms | {ok(rt['ecp']['median_ms'] < ROUND_TRIP_TARGET_MS)} |",
        f"| sandbox cold start, spawn → ready, behind its boundary "
        f"| {ms1(cs['spawn'])} | < {COLD_START_TARGET_S * 1000:.0f} ms "
        f"| {ok(cs['spawn']['median_ms'] < COLD_START_TARGET_S * 1000)} |",
        f'| the same as the fallback child process (`isolation="process"`) | {ms1(cs["spawn_plain"])} | | |',
        f"| of which the interpreter: `python -I` importing the child's standard modules, timed alone "
        f"| {ms1(cs['interpreter'])} | | |",
        f"| first `ws.envs.invoke` of a new session (session start + spawn + `1+1`) | {ms1(cs['first_invoke'])} | | |",
    ]
    if br and "skipped" not in br:
        rows += [
            f"| browser cold start: Chromium launch + first `goto` (n={br['start']['n']}) | {ms1(br['start'])} | | |",
            f"| browser `goto` a local page | {ms1(br['goto'])} | | |",
            f"| browser `click` a button that changes the page | {ms1(br['click'])} | | |",
            f"| browser `click` a link that navigates | {ms1(br['click_link'])} | | |",
            f"| browser `extract` (the page as markdown) | {ms1(br['extract'])} | | |",
        ]
        if br.get("pieces"):
            rows += [
                f"| of a `goto` / `click`: the viewport screenshot (`page.screenshot`, timed alone) "
                f"| {ms1(br['pieces']['screenshot'])} | | |",
                f"| of a `goto` / `click`: the snapshot of interactive elements for the state "
                f"| {ms1(br['pieces']['snapshot'])} | | |",
            ]
    table = "\n".join(rows)
    if br and "skipped" not in br:
        browser_text = f"""
**Browser.** `ws.envs.add(Browser, timeout=15)`, headless Chromium (`{br["executable"]}`) driven by Playwright, on
two local pages ({br["page_bytes"]:,} bytes: a heading, text, a 30-item list, a table, a counter button and a
link to the other page) served by a `ThreadingHTTPServer` thread in the benchmark process. One round is
`goto("/a.html")`, `click("#inc")` (the counter: no navigation), `extract()` (checked to show the new
count), `click("#next")` (navigates to the other page); {br["goto"]["n"]} rounds after 2 warm-up rounds, one browser
session throughout. Every action goes through `ws.envs.invoke`. `goto` and `click` include what the
environment does after each of them: waiting for the page to settle (`domcontentloaded`, then `load`
when quick), reading the page's interactive elements for the state, and a viewport screenshot for
the vision block; `extract` only reads the page. The cold start is `ws.envs.release()` followed by
the first `goto` of the new session (Playwright driver start, Chromium launch with a fresh profile,
page load).
"""
    elif br:
        browser_text = f"\n**Browser.** Not measured: {br['skipped']}.\n"
    else:
        browser_text = "\n**Browser.** Not measured (`--no-browser`).\n"
    return f"""## Environments

Command: `{command_line()}` — machine: {results["machine"]}; run {results["when"]}.

| what | median | p95 | target | |
|---|---|---|---|---|
{table}

**Sandbox.** `PythonSandbox(folder, timeout=30)` with its default limits ({rt["boundary"]}). Round trips: {rt["direct"]["n"]} calls of `1+1` in one warm session after a warm-up, each checked
for its value; `request` is the sandbox's own synchronous call (a JSON line straight to the worker,
its id to the supervisor; the worker redirects stdout/stderr to files, sets the CPU limit and the
wall-clock timer, runs the code and answers the supervisor, which checks the run folder's size and
passes the answer on); `Environment.call` adds the action layer (the action's time limit and the
hop to a worker thread, run here from a caller thread through the background loop:
+{action_extra:.2f} ms); `ws.envs.invoke` is what agent runs (through their E2T tools) and notebooks
call: record lookup and schema check, the run context, the session lookup, the hop to the background
loop, the usage count (+{ecp_extra:.2f} ms over `request`). Cold start: {cs["spawn"]["n"]} fresh sandboxes, each timed from `_spawn()`
(create the folders, start bubblewrap + the interpreter with `-I`, wait for its ready line, find
the worker's pid and, as root, put the sandbox in its pids and memory cgroups) to ready; the
interpreter itself is most of it ({cs["interpreter"]["median_ms"]:.0f} ms; the boundary adds little: the fallback
takes {cs["spawn_plain"]["median_ms"]:.0f} ms). "First invoke" is
`ws.envs.release()` then one `invoke`, i.e. what the first sandbox call of an agent run costs.
{browser_text}"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--calls", type=int, default=300, help="warm round trips per layer")
    parser.add_argument("--cold", type=int, default=20, help="cold starts of the sandbox")
    parser.add_argument("--reps", type=int, default=25, help="rounds of browser actions")
    parser.add_argument("--browser-cold", type=int, default=5, help="cold starts of the browser")
    parser.add_argument("--no-browser", action="store_true", help="skip the browser")
    args = parse_args(parser, calls=5, cold=1, reps=1, browser_cold=1, no_browser=True)
    results: dict[str, Any] = {"machine": machine(), "when": time.strftime("%Y-%m-%d")}
    with tempfile.TemporaryDirectory(prefix="tea-bench-envs-") as tmp:
        base = Path(tmp)
        results["round_trip"] = bench_round_trip(base, args.calls)
        print("round trip", results["round_trip"], flush=True)
        results["cold"] = bench_cold_start(base, args.cold)
        print("cold start", results["cold"], flush=True)
        if not args.no_browser:
            results["browser"] = bench_browser(base, args.reps, args.browser_cold)
            print("browser", results["browser"], flush=True)
    publish(render(results), args.write)


if __name__ == "__main__":
    main()
