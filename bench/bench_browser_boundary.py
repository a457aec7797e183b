"""What the browser's boundary costs (issue 19): a navigation and a cold start, with and without it.

    .venv/bin/python bench/bench_browser_boundary.py [--write] [--quick] [--reps 30] [--cold 6]

Three browser sessions of the same environment code (``Browser``) run side by side, driven in one
asyncio loop, their rounds interleaved (A, B, C, A, B, C …) so that the machine's noise falls on all:

* ``direct`` — the browser as it was before: Chromium on the host, no proxy (the confinement is
  replaced for this session only; nothing else changes);
* ``proxy`` — the fallback: Chromium on the host, every request through the egress proxy (TCP);
* ``confined`` — the default: Chromium inside bubblewrap, its only network the bridge to the proxy.

Measured: ``goto`` of a local page (allowed by the policy; ~6 KB of HTML) through ``Environment.call``
(the action layer: the page load, the state snapshot and the viewport screenshot), and the cold start
(``start()``: the launch of Chromium and its first blank tab). Target: ≤ 10 % added per navigation.
With --write the figures replace the "Browser boundary" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import os
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

from _common import command_line, machine, publish, summary  # noqa: E402
from bench_envs import _Site  # noqa: E402 - the same local pages as the environments' benchmark

from tea_notebook.egress.policy import EgressPolicy  # noqa: E402
from tea_notebook.envs import browser_sandbox  # noqa: E402
from tea_notebook.envs.browser import Browser, find_chromium  # noqa: E402

NAVIGATION_TARGET = 0.10  # at most 10 % added per navigation
VARIANTS = ("direct", "proxy", "confined")


class _NoProxy:
    """Stands in for the proxy of the ``direct`` session, which has none (and so no credential)."""

    username = password = None

    def close(self) -> None:
        pass


def _direct_box(chromium: str, *_args: Any, **_options: Any) -> browser_sandbox.BrowserBox:
    """The browser as it ran before the boundary: on the host, no proxy, the kernel's environment."""
    folder = Path(tempfile.mkdtemp(prefix="tea-browser-direct-"))
    (folder / "profile").mkdir()
    (folder / "downloads").mkdir()
    return browser_sandbox.BrowserBox(
        "direct", folder, folder / "profile", folder / "downloads", chromium, [], dict(os.environ),
        _NoProxy(), chromium,  # type: ignore[arg-type]
    )  # fmt: skip


def _make(variant: str, folder: Path, policy: EgressPolicy) -> Browser:
    isolation = {"direct": "process", "proxy": "process", "confined": "bubblewrap"}[variant]
    env = Browser(folder / variant, timeout=20, isolation=isolation)
    env.egress = policy
    return env


async def _start(env: Browser, variant: str) -> float:
    """Start ``env`` (the ``direct`` one without its box); seconds taken."""
    real = browser_sandbox.confine
    if variant == "direct":
        browser_sandbox.confine = _direct_box  # type: ignore[assignment]
    try:
        t0 = time.perf_counter()
        await env.start()
        return time.perf_counter() - t0
    finally:
        browser_sandbox.confine = real


async def run(reps: int, cold: int) -> dict[str, Any]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    netloc = f"127.0.0.1:{server.server_address[1]}"
    policy = EgressPolicy(allow=[netloc])
    folder = Path(tempfile.mkdtemp(prefix="bench-browser-boundary-"))
    starts: dict[str, list[float]] = {v: [] for v in VARIANTS}
    gotos: dict[str, list[float]] = {v: [] for v in VARIANTS}
    import warnings

    warnings.simplefilter("ignore", browser_sandbox.BrowserWarning)
    try:
        for _ in range(cold):  # cold starts, interleaved
            for variant in VARIANTS:
                env = _make(variant, folder, policy)
                try:
                    starts[variant].append(await _start(env, variant))
                finally:
                    await env.stop()
        envs = {v: _make(v, folder, policy) for v in VARIANTS}
        try:
            for variant, env in envs.items():
                await _start(env, variant)
            for i in range(reps + 2):  # two warm-up rounds
                page = "a" if i % 2 == 0 else "b"
                for variant, env in envs.items():
                    t0 = time.perf_counter()
                    out = await env.call("goto", {"url": f"http://{netloc}/{page}.html"})
                    took = time.perf_counter() - t0
                    if f"Page {page.upper()}" not in out:
                        raise RuntimeError(f"{variant}: goto returned {out[:300]!r}")
                    if i >= 2:
                        gotos[variant].append(took)
            described = {v: env.boundary for v, env in envs.items()}
        finally:
            for env in envs.values():
                await env.stop()
    finally:
        server.shutdown()
    return {
        "start": {v: summary(s) for v, s in starts.items()},
        "goto": {v: summary(s) for v, s in gotos.items()},
        "max": {v: max(s) * 1000 for v, s in {**{f"start-{k}": x for k, x in starts.items()}, **gotos}.items()},
        "described": described,
    }


def render(r: dict[str, Any]) -> str:
    def row(label: str, key: str, variant: str) -> str:
        s = r[key][variant]
        top = r["max"][variant if key == "goto" else f"start-{variant}"]
        return f"| {label} | {s['min_ms']:.1f} | {s['median_ms']:.1f} | {top:.1f} | {s['n']} |"

    base = r["goto"]["direct"]["median_ms"]
    added = {v: (r["goto"][v]["median_ms"] - base) / base for v in ("proxy", "confined")}
    start_base = r["start"]["direct"]["median_ms"]
    verdict = "within" if added["confined"] <= NAVIGATION_TARGET else "OVER"
    return f"""## Browser boundary

Command: `{r["command"]}` — machine: {machine()}; run {time.strftime("%Y-%m-%d")}; load average (1-min)
{r["load"][0]:.2f} before, {r["load"][1]:.2f} after, on 2 cores shared with other work. Three sessions of the same `Browser` code, driven in
one loop with their rounds interleaved: **direct** (Chromium on the host, no proxy: the browser before
issue 19), **proxy** (the fallback: on the host, through the egress proxy) and **confined** (the default:
inside bubblewrap, its only network the bridge to the proxy). `goto` of a local page (allowed by the
policy) through `Environment.call`, which includes the state snapshot and the screenshot every
navigation takes; cold start = `start()` (Chromium's launch and its first tab). Milliseconds.

| measurement | min | median | max | n |
| --- | ---: | ---: | ---: | ---: |
{row("`goto`, direct", "goto", "direct")}
{row("`goto`, proxy (fallback)", "goto", "proxy")}
{row("`goto`, confined (bubblewrap + bridge + proxy)", "goto", "confined")}
{row("cold start, direct", "start", "direct")}
{row("cold start, proxy (fallback)", "start", "proxy")}
{row("cold start, confined", "start", "confined")}

Per navigation (median) the proxy adds {added["proxy"] * 100:+.1f} % and the whole boundary
{added["confined"] * 100:+.1f} % ({verdict} the ≤ {NAVIGATION_TARGET * 100:.0f} % target); a cold start
goes from {start_base:.0f} ms to {r["start"]["confined"]["median_ms"]:.0f} ms.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--quick", action="store_true", help="few rounds (a smoke run)")
    parser.add_argument("--reps", type=int, default=30, help="navigations per session")
    parser.add_argument("--cold", type=int, default=6, help="cold starts per session")
    args = parser.parse_args()
    if find_chromium() is None:
        print("no Chromium: nothing to measure (apt-get install chromium)")
        return
    if browser_sandbox.boundary.bubblewrap() is None:
        print("bubblewrap cannot run here: the confined browser cannot be measured")
        return
    reps, cold = (6, 2) if args.quick else (args.reps, args.cold)
    load = os.getloadavg()[0]
    results = asyncio.run(run(reps, cold))
    results["command"] = command_line()
    results["load"] = (load, os.getloadavg()[0])
    publish(render(results), args.write and not args.quick)


if __name__ == "__main__":
    main()
