"""Benchmark of an MCP tool call's round trip through our registry, against the SDK's own client.

    .venv/bin/python bench/bench_mcp.py [--write] [--calls 4000]

Measures, on this machine, in one run: the test MCP server (tests/mcp_test_server.py, the SDK's
``MCPServer``) is started twice over stdio. One is imported into a fresh workspace with
``ws.tools.import_mcp`` and called through TCP, ``await ws.tools.ainvoke("srv_add", {...})`` (argument
validation against the server's schema, the MCP session found in ECP's session manager, the SDK's
``ClientSession.call_tool``, the result converted, usage counted); the other is called directly with
the SDK's ``ClientSession.call_tool`` on the same event loop. Both warm. The calls take turns (one of
each per step, which goes first alternating) so the shared machine's load hits both alike. Reported: medians, p95, and their ratio (target ≤ 1.2×). Also: the synchronous
``ws.tools.invoke`` from the main thread (as a cell calls it), and the cold import (spawn, handshake,
tools/list, registration).
With --write the figures replace the "MCP: tool-call round trip" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish, summary  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook._sync import run_sync  # noqa: E402

SERVER = [sys.executable, str(ROOT / "tests" / "mcp_test_server.py")]
TARGET_RATIO = 1.2


async def _alternate(ws: Any, calls: int) -> tuple[list[float], list[float]]:
    """Timed calls, ours and direct, alternating in blocks; both warm."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    ours: list[float] = []
    direct: list[float] = []
    params = StdioServerParameters(command=SERVER[0], args=SERVER[1:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            for i in range(50):  # warm both
                assert (await session.call_tool("add", {"a": i, "b": 1})).structured_content == {"result": i + 1}
                assert (await ws.tools.ainvoke("srv_add", {"a": i, "b": 1})).value == i + 1
            clock = time.perf_counter
            for i in range(calls):  # one call of each per step, in turns: ours first, then direct first
                for which in ("ours", "direct") if i % 2 == 0 else ("direct", "ours"):
                    a, b = i % 97, i % 89
                    if which == "ours":
                        t = clock()
                        res = await ws.tools.ainvoke("srv_add", {"a": a, "b": b})
                        ours.append(clock() - t)
                        assert res.value == a + b, res
                    else:
                        t = clock()
                        out = await session.call_tool("add", {"a": a, "b": b})
                        direct.append(clock() - t)
                        assert out.structured_content == {"result": a + b}
    return ours, direct


def bench(calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        ws = tea_notebook.Workspace(Path(tmp) / "ws", embedder="hashing")
        try:
            started = time.perf_counter()
            report = ws.tools.import_mcp("srv", SERVER)
            cold = time.perf_counter() - started
            assert len(report.tools) == 9, report
            ours, direct = run_sync(_alternate(ws, calls))
            sync_times = []
            for i in range(min(calls, 1000)):
                t = time.perf_counter()
                assert ws.tools.invoke("srv_add", {"a": i, "b": 2}).value == i + 2
                sync_times.append(time.perf_counter() - t)
        finally:
            ws.close()
    o, d, s = summary(ours), summary(direct), summary(sync_times)
    return {
        "cold_s": cold,
        "ours": o,
        "direct": d,
        "sync": s,
        "ratio": o["median_ms"] / d["median_ms"],
        "ratio_p95": o["p95_ms"] / d["p95_ms"],
    }


def render(results: dict[str, Any], command: str) -> str:
    r = results["bench"]
    o, d, s = r["ours"], r["direct"], r["sync"]
    ok = "✅" if r["ratio"] <= TARGET_RATIO else "❌"
    rows = [
        f"| **ratio**: through our registry / direct `ClientSession.call_tool`, medians | **{r['ratio']:.2f}×** | "
        f"≤ {TARGET_RATIO:g}× | {ok} |",
        f"| the same, p95s | {r['ratio_p95']:.2f}× | | |",
        f"| added by our layers per call (difference of the medians) | {o['median_ms'] - d['median_ms']:.3f} ms | | |",
        f'| through our registry, `await ws.tools.ainvoke("srv_add", …)`, min / median / p95 / max (n={o["n"]:,}) | '
        f"{o['min_ms']:.3f} / {o['median_ms']:.3f} / {o['p95_ms']:.3f} / {o['max_ms']:.3f} ms | | |",
        f'| direct, the SDK\'s `ClientSession.call_tool("add", …)`, min / median / p95 / max (n={d["n"]:,}) | '
        f"{d['min_ms']:.3f} / {d['median_ms']:.3f} / {d['p95_ms']:.3f} / {d['max_ms']:.3f} ms | | |",
        f"| synchronous `ws.tools.invoke` from the main thread (as a cell calls it), min / median / p95 / max (n={s['n']:,}) | "
        f"{s['min_ms']:.3f} / {s['median_ms']:.3f} / {s['p95_ms']:.3f} / {s['max_ms']:.3f} ms | | |",
        f"| cold: `ws.tools.import_mcp` (spawn, handshake, tools/list, 9 tools registered) | {r['cold_s']:.2f} s | | |",
    ]
    return f"""## MCP: tool-call round trip

Command: `{command}` — machine: {results["machine"]}; run {results["when"]}. The machine is shared: its
1-minute load average was {results["load"][0]:.2f} before the run and {results["load"][1]:.2f} after.

| what | measured | target | |
|---|---|---|---|
{chr(10).join(rows)}

The test MCP server (`tests/mcp_test_server.py`, the SDK's `MCPServer`, tool `add(a, b)`) runs twice over stdio:
one imported into a fresh workspace (`ws.tools.import_mcp("srv", [python, server])`) and called through TCP —
argument validation against the server's input schema, the live MCP session found in ECP's session manager, the
SDK's `ClientSession.call_tool`, the `{{"result": …}}` structured content unwrapped, usage counted — and one called
directly with the SDK's own `ClientSession.call_tool`, on the same event loop (tea's background loop), in the same
run. Both warm (50 calls each first); the timed calls take turns, one of each per step (which goes first
alternates), so the shared machine's load falls on both alike; "added" is the difference of the medians. Most of a round trip is the server's own work and the two pipe
hops, which both paths share.
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--calls", type=int, default=4000, help="timed calls on each path")
    args = parse_args(parser, calls=20)
    command = command_line()
    results: dict[str, Any] = {"machine": machine(), "when": time.strftime("%Y-%m-%d")}
    load_before = os.getloadavg()[0]
    results["bench"] = bench(args.calls)
    results["load"] = (load_before, os.getloadavg()[0])
    print({k: v for k, v in results["bench"].items()}, flush=True)
    publish(render(results, command), args.write)


if __name__ == "__main__":
    main()
