"""Benchmark of the egress policy: what a checked fetch and the proxy add to a request.

    .venv/bin/python bench/bench_egress.py [--write] [--quick] [--n 300]

Measures, on this machine, in one run, against a local HTTP server (a 20 KB page on 127.0.0.1,
allowed explicitly by host and port):

* **page fetch**: the page reader's way — ``policy_client`` + ``fetch_following`` (the name checked
  and resolved once by the policy, the connection made to the checked address, each redirect hop
  checked) — against a plain ``httpx.AsyncClient`` GET of the same URL. A fresh client per fetch on
  both sides, as the reader makes one per page. Target: ≤ 5 ms added per fetch.
* **proxy**: a sandbox's way out — an HTTP GET through the bridge's loopback port and the host
  proxy's Unix socket (policy check, the port rule, the request head parsed and rewritten, exactly
  its body forwarded, the answer's head rewritten, connection to the checked address) — against the
  same GET sent straight to the server on a fresh socket. The floor to compare with is the direct
  socket: two extra local hops (bridge, proxy) and a policy check.
* **fallback proxy**: the same GET through the loopback TCP proxy a sandbox without bubblewrap uses,
  its session credential (``Proxy-Authorization``) checked on every request: one local hop, no bridge.

The two sides take turns (which goes first alternates) so the shared machine's load hits both alike.
Reported: min / median / max of wall time and the median of CPU time (this process), n per side.
``--quick`` runs a few iterations (CI runs it so the script does not rot; it asserts nothing about time).
With --write the figures replace the "Egress policy" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.server
import socket
import statistics
import sys
import threading
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, publish  # noqa: E402

from tea_notebook.egress import EgressPolicy, EgressProxy, policy_client  # noqa: E402
from tea_notebook.egress.bridge import start_bridge  # noqa: E402
from tea_notebook.egress.transport import fetch_following, ssl_context  # noqa: E402

PAGE = b"<html><body>" + b"<p>lorem ipsum dolor sit amet</p>" * 600 + b"</body></html>"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args) -> None:
        pass


def stats(samples: list[tuple[float, float]]) -> dict[str, float]:
    wall = sorted(w for w, _ in samples)
    cpu = [c for _, c in samples]
    return {
        "min": wall[0] * 1000,
        "median": statistics.median(wall) * 1000,
        "max": wall[-1] * 1000,
        "cpu": statistics.median(cpu) * 1000,
        "n": len(wall),
    }


def timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def rotate(sides: list, n: int) -> list[list]:
    """``n`` timings of each side, the sides taking turns and each round starting one side later, so a
    load spike hits every side alike."""
    out: list[list] = [[] for _ in sides]
    for i in range(n):
        for k in range(len(sides)):
            j = (i + k) % len(sides)
            out[j].append(timed(sides[j]))
    return out


def interleave(a, b, n: int) -> tuple[list, list]:
    out_a, out_b = [], []
    for i in range(n):
        if i % 2:
            out_b.append(timed(b))
            out_a.append(timed(a))
        else:
            out_a.append(timed(a))
            out_b.append(timed(b))
    return out_a, out_b


def row(name: str, s: dict[str, float]) -> str:
    return f"| {name} | {s['min']:.2f} | {s['median']:.2f} | {s['max']:.2f} | {s['cpu']:.2f} | {s['n']} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    parser.add_argument("--quick", action="store_true", help="a few iterations (CI: the script still runs)")
    parser.add_argument("--n", type=int, default=300, help="fetches per side")
    args = parser.parse_args()
    n = 10 if args.quick else args.n
    load_before = Path("/proc/loadavg").read_text().split()[0]

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_port
    url = f"http://127.0.0.1:{port}/page"
    policy = EgressPolicy(allow=[f"127.0.0.1:{port}"])
    loop = asyncio.new_event_loop()

    async def direct() -> bytes:
        import httpx

        # the same shared TLS context as the checked client: only the policy differs between the sides
        async with httpx.AsyncClient(trust_env=False, follow_redirects=True, verify=ssl_context()) as client:
            return (await client.get(url)).content

    async def checked() -> bytes:
        async with policy_client(policy) as client:
            async for response in fetch_following(client, policy, url):
                return await response.aread()
        return b""

    assert loop.run_until_complete(direct()) == loop.run_until_complete(checked()) == PAGE
    fetch_direct, fetch_checked = interleave(
        lambda: loop.run_until_complete(direct()), lambda: loop.run_until_complete(checked()), n
    )

    request = f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    plain = "GET /page HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()

    def get(address: tuple[str, int], data: bytes) -> None:
        with socket.create_connection(address, timeout=5) as conn:
            conn.sendall(data)
            size = 0
            while chunk := conn.recv(65536):
                size += len(chunk)
        assert size > len(PAGE)

    with EgressProxy(policy) as proxy, EgressProxy(policy, tcp=True, credential=True) as fallback:
        _thread, bridge = start_bridge(proxy.socket_path, 0)
        secret = base64.b64encode(f"{fallback.username}:{fallback.password}".encode()).decode()
        authorized = f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\nProxy-Authorization: Basic {secret}\r\n\r\n".encode()
        get(("127.0.0.1", bridge), request)
        get(("127.0.0.1", fallback.port), authorized)
        proxy_direct, proxy_via, proxy_tcp = rotate(
            [
                lambda: get(("127.0.0.1", port), plain),
                lambda: get(("127.0.0.1", bridge), request),
                lambda: get(("127.0.0.1", fallback.port), authorized),
            ],
            n,
        )
    loop.close()
    server.shutdown()

    load_after = Path("/proc/loadavg").read_text().split()[0]
    fd, fc = stats(fetch_direct), stats(fetch_checked)
    pd, pv, pt = stats(proxy_direct), stats(proxy_via), stats(proxy_tcp)
    section = "\n".join(
        [
            "## Egress policy: a checked fetch and the proxy",
            "",
            f"Command: `{command_line()}` — machine: {machine()}; run {date.today().isoformat()}; load average "
            f"(1-min) {load_before} before, {load_after} after, on 2 cores shared with other work. "
            f"The sides of each comparison take turns in one run; wall time in ms (min / median / max) and "
            f"the median CPU time of this process, n per side.",
            "",
            "| what | min | median | max | CPU (median) | n |",
            "|---|---|---|---|---|---|",
            row("page fetch, plain httpx client (20 KB page, loopback)", fd),
            row("page fetch through the policy (check, resolve once, connect to the checked address)", fc),
            row("GET straight to the server (fresh socket: the floor)", pd),
            row("GET through the sandbox's bridge and the host's egress proxy", pv),
            row("GET through the fallback's loopback proxy (credential checked)", pt),
            "",
            f"The policy adds **{fc['median'] - fd['median']:.2f} ms** per page fetch (median; target ≤ 5 ms), "
            f"{fc['cpu'] - fd['cpu']:.2f} ms of CPU. The proxy path adds **{pv['median'] - pd['median']:.2f} ms** "
            f"per request over a direct socket (two local hops and a policy check; the proxy runs in this "
            f"process, so its CPU is counted on that side); the fallback's loopback proxy, one hop with its "
            f"credential checked, adds **{pt['median'] - pd['median']:.2f} ms**.",
            "",
        ]
    )
    publish(section, args.write and not args.quick)


if __name__ == "__main__":
    main()
