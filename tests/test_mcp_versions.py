"""MCP protocol versions and hostile or careless input, with real processes over real HTTP and stdio.

Import: from a server that speaks only 2026-07-28 (stateless: ``server/discover``, no ``initialize``,
no ``Mcp-Session-Id``) and from one that speaks only 2025-11-25 (the handshake and its session), both
``tests/mcp_era_server.py``, written from the wire format with the standard library. Export:
``tea mcp serve`` answers the SDK's client pinned to either version, over HTTP (bound to ``[::1]``,
written with brackets) and over stdio. A server listing a 400-deep schema is reported at once with
the reason. ``%tea mcp add --token-env NAME`` reads the token from the environment, and a ``${NAME}``
reference is never filled in from a Python variable.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loopback_http import free_port, start_listening
from test_mcp import stop

import tea_notebook
from tea_notebook.errors import TeaError

pytestmark = pytest.mark.slow  # every test spawns processes

HERE = Path(__file__).resolve().parent
ERA_SERVER = str(HERE / "mcp_era_server.py")
PY = sys.executable
TEA = [PY, "-m", "tea_notebook"]
TOKEN = "era-token-0123456789abcdef"
DEEP_SERVER = """
import json, sys

def deep(n):
    schema = {"type": "string"}
    for _ in range(n):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema

for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("id") is None:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "deep", "version": "0"}}
    elif msg["method"] == "tools/list":
        result = {"tools": [{"name": "fine", "inputSchema": {"type": "object"}},
                            {"name": "deep", "inputSchema": deep(int(sys.argv[1]))}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


@pytest.fixture
def ws(tmp_path):
    with tea_notebook.Workspace(tmp_path / "ws", embedder="hashing") as opened:
        yield opened


def era_server(tmp_path: Path, mode: str, **env: str) -> tuple[subprocess.Popen, str, Path]:
    port, log = free_port(), tmp_path / f"{mode}.log"
    proc = start_listening([PY, ERA_SERVER, mode, str(port), str(log)], port, env={**os.environ, **env})
    return proc, f"http://127.0.0.1:{port}/mcp", log


def wire(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


# -- import: one server per era ------------------------------------------------------------------------
def test_import_from_a_server_that_speaks_only_2026_07_28(ws, tmp_path):
    proc, url, log = era_server(tmp_path, "modern")
    try:
        report = ws.tools.import_mcp("modern", url=url, timeout=20)
        assert report.protocol_version == "2026-07-28" and report.server_info == {
            "name": "era-server",
            "version": "1.0",
        }
        assert [t.name for t in report.tools] == ["modern_add"]
        assert ws.tools.get("modern_add").metadata["provenance"]["mcp"]["protocol_version"] == "2026-07-28"
        assert ws.tools.invoke("modern_add", {"a": 20, "b": 22}).value == "42"
    finally:
        ws.tools.remove_mcp("modern")
        stop(proc)
    seen = wire(log)
    assert [e["method"] for e in seen] == ["server/discover", "tools/list", "tools/call"]  # no handshake
    assert {e["version"] for e in seen} == {"2026-07-28"} and {e["session"] for e in seen} == {None}


def test_import_from_a_server_that_speaks_only_2025_11_25(ws, tmp_path):
    proc, url, log = era_server(tmp_path, "legacy")
    try:
        report = ws.tools.import_mcp("legacy", url=url, timeout=20)
        assert report.protocol_version == "2025-11-25" and [t.name for t in report.tools] == ["legacy_add"]
        assert ws.tools.invoke("legacy_add", {"a": 1, "b": 2}).value == "3"
    finally:
        ws.tools.remove_mcp("legacy")
        stop(proc)
    seen = wire(log)
    # the stateless probe is refused (no session), then the handshake; its session carries every later request
    assert [e["method"] for e in seen[:2]] == ["server/discover", "initialize"]
    after = seen[2:]
    assert {"tools/list", "tools/call"} <= {e["method"] for e in after}
    assert len({e["session"] for e in after}) == 1 and None not in {e["session"] for e in after}
    assert {e["version"] for e in after} == {"2025-11-25"}


# -- export: tea mcp serve answers both ---------------------------------------------------------------------
def _export_workspace(path: Path) -> None:
    ws = tea_notebook.Workspace(path, embedder="hashing")

    @ws.tools.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    ws.close()


async def _call_add(server, mode: str, token: str | None = None) -> tuple[str, list[str], str]:
    from contextlib import AsyncExitStack

    import httpx2
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async with AsyncExitStack() as stack:
        if isinstance(server, str):
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
            )
            server = streamable_http_client(server, http_client=http)
        client = await stack.enter_async_context(Client(server, mode=mode))
        tools = await client.list_tools()
        result = await client.call_tool("add", {"a": 19, "b": 23})
        return client.protocol_version, [t.name for t in tools.tools], result.content[0].text


def _listening_on_ipv6_loopback(port: int, proc: subprocess.Popen, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            with socket.create_connection(("::1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on [::1]:{port}")


def test_tea_mcp_serve_on_bracketed_ipv6_loopback_answers_both_versions(tmp_path):
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("this machine has no IPv6 loopback ([::1])")
    _export_workspace(tmp_path / "w")
    port = free_port()
    cmd = [*TEA, "mcp", "serve", "-w", str(tmp_path / "w"), "--tools", "add", "--transport", "http"]
    proc = subprocess.Popen(
        [*cmd, "--host", "[::1]", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TEA_MCP_TOKEN": TOKEN},
    )
    try:
        _listening_on_ipv6_loopback(port, proc)
        url = f"http://[::1]:{port}/mcp"
        assert asyncio.run(_call_add(url, "legacy", TOKEN)) == ("2025-11-25", ["add"], "42")
        assert asyncio.run(_call_add(url, "2026-07-28", TOKEN)) == ("2026-07-28", ["add"], "42")
    finally:
        stop(proc)
    assert f"http://[::1]:{port}/mcp" in proc.stderr.read()
    for host, why in (("[localhost]", "brackets go around an IPv6 address only"), ("[::1", "brackets go around")):
        bad = subprocess.run([*cmd, "--host", host], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and f"--host {host}: {why}" in bad.stderr


def test_tea_mcp_serve_over_stdio_answers_both_versions(tmp_path):
    from mcp import StdioServerParameters

    _export_workspace(tmp_path / "w")
    cmd = [*TEA, "mcp", "serve", "-w", str(tmp_path / "w"), "--tools", "add"]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    assert asyncio.run(_call_add(params, "legacy")) == ("2025-11-25", ["add"], "42")
    assert asyncio.run(_call_add(params, "2026-07-28")) == ("2026-07-28", ["add"], "42")


# -- a hostile server's schema ---------------------------------------------------------------------------
def test_a_400_deep_schema_is_reported_at_once_with_the_reason(ws, tmp_path):
    script = tmp_path / "deep_server.py"
    script.write_text(DEEP_SERVER)
    before = ws.tools.names()
    started = time.monotonic()
    with pytest.raises(TeaError) as info:
        ws.tools.import_mcp("deep", [PY, str(script), "400"], timeout=60)
    took = time.monotonic() - started
    message = str(info.value)
    assert "MCP server 'deep' sent a message this client cannot read during the list of its tools" in message
    assert "nested too deeply" in message and "did not answer" not in message
    assert took < 20, took  # the reason at once, not the 60 s timeout
    assert ws.tools.names() == before and "deep" not in ws.toolkits
    report = ws.tools.import_mcp("deep", [PY, str(script), "20"])  # a deep but readable schema is fine
    assert {t.name for t in report.tools} == {"deep_fine", "deep_deep"}


# -- %tea mcp add --token-env, and ${NAME} never from Python ------------------------------------------------
def test_tea_mcp_add_reads_the_token_from_the_environment_never_from_python(ip, tmp_path, monkeypatch):
    from conftest import magics_workspace
    from IPython.core.error import UsageError

    opened = magics_workspace(ip, tmp_path, monkeypatch)
    proc, url, log = era_server(tmp_path, "modern", ERA_TOKEN=TOKEN)
    monkeypatch.setenv("ERA_SECRET", TOKEN)
    ip.user_ns.update(ERA_SECRET="python-value-not-the-token", era_url=url)
    try:
        rows = ip.run_line_magic("tea", "mcp add viaenv --url {era_url} --token-env ERA_SECRET")  # {var}: expanded
        assert [r["name"] for r in rows] == ["viaenv_add"]
        stored = opened.tools.get("viaenv_add").metadata["mcp"]["spec"]
        assert stored["headers"] == {"Authorization": "Bearer ${ERA_SECRET}"} and stored["url"] == url
        assert opened.tools.invoke("viaenv_add", {"a": 2, "b": 3}).value == "5"
        # a ${NAME} reference written by hand is the environment's, not the Python variable's
        rows = ip.run_line_magic("tea", f"mcp add byhand --url {url} --header 'Authorization=Bearer ${{ERA_SECRET}}'")
        assert [r["name"] for r in rows] == ["byhand_add"]
        assert opened.tools.get("byhand_add").metadata["mcp"]["spec"]["headers"] == {
            "Authorization": "Bearer ${ERA_SECRET}"
        }
        with pytest.raises(UsageError, match="the environment variable ERA_UNSET_VAR is not set"):
            ip.run_line_magic("tea", f"mcp add nope --url {url} --token-env ERA_UNSET_VAR")
        with pytest.raises(UsageError, match="--token-env goes with --url"):
            ip.run_line_magic("tea", f"mcp add nope --token-env ERA_SECRET {PY} {ERA_SERVER}")
        with pytest.raises(UsageError, match="refused the connection \\(HTTP 401\\)"):
            monkeypatch.setenv("ERA_WRONG", "not-the-token-at-all")
            ip.run_line_magic("tea", f"mcp add wrong --url {url} --token-env ERA_WRONG")
    finally:
        stop(proc)
    assert "nope_add" not in opened.tools and "wrong" not in opened.toolkits
