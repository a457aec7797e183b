"""MCP import and export with real processes: a test server we wrote (tests/mcp_test_server.py) over
stdio and over streamable HTTP, `tea mcp serve` called from the SDK's own client, a round trip
between two workspaces, an agent run calling an imported tool, and every bad input we promise to
report (a server that does not start, speaks another protocol version, hangs, prints prose, lists a
broken schema, answers malformed or huge results, dies). Nothing is mocked."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from child_processes import alive, gone_soon
from loopback_http import free_port, start_listening

import tea_notebook
from tea_notebook.errors import TeaError
from tea_notebook.models.offline import ScriptedModel, call

pytestmark = pytest.mark.slow  # every test spawns processes

HERE = Path(__file__).resolve().parent
SERVER = str(HERE / "mcp_test_server.py")
PY = sys.executable
TEA = [PY, "-m", "tea_notebook"]
SECRET = "sk-mcp-test-0123456789abcdef0123"


def server_cmd(mode: str | None = None) -> list[str]:
    return [PY, SERVER, *([mode] if mode else [])]


def wait_gone(pid: int, limit: float = 15.0) -> bool:
    return gone_soon(pid, limit, poll=0.05)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture
def http_server():
    port = free_port()
    proc = start_listening([PY, SERVER, "http", str(port)], port)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc)


def nothing_changed(ws, tools_before: list[str], kits_before: list[str]) -> None:
    assert ws.tools.names() == tools_before
    assert ws.toolkits.names() == kits_before


# -- import over stdio ----------------------------------------------------------------------------------
def test_import_over_stdio_registers_a_toolkit_and_calls_through_the_live_session(ws):
    report = ws.tools.import_mcp("testsrv", server_cmd(), env={"GREETING": "hello", "TESTSRV_TOKEN": SECRET})
    names = {t.name for t in report.tools}
    assert names == {
        f"testsrv_{n}" for n in ("add", "echo", "forecast", "pid", "getenv", "die", "huge", "slow", "fail")
    }
    kit = ws.toolkits.get("testsrv")
    assert kit.origin == "mcp" and set(kit.tools) == names and set(ws.tools.members("testsrv")) == names
    add = ws.tools.get("testsrv_add")
    assert add.origin == "mcp" and add.toolkit == "testsrv" and add.description == "Add two integers."
    assert add.parameters["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }
    assert add.parameters["required"] == ["a", "b"]  # the server's input schema, kept
    prov = add.metadata["provenance"]["mcp"]
    assert prov["server"] == "testsrv" and prov["transport"] == "stdio" and prov["server_info"]["name"] == "testsrv"
    assert prov["protocol_version"]

    assert ws.tools.invoke("testsrv_add", {"a": 2, "b": 40}).value == 42  # structured {"result": 42}, unwrapped
    assert ws.tools.invoke("testsrv_echo", {"text": "hi there"}).value == "hi there"
    assert '"sky": "clear"' in ws.tools.invoke("testsrv_forecast", {"city": "Oslo"}).value
    assert ws.tools.invoke("testsrv_getenv", {"name": "GREETING"}).value == "hello"
    assert ws.tools.invoke("testsrv_getenv", {"name": "TESTSRV_TOKEN"}).value == SECRET  # given in this process
    bad = ws.tools.invoke("testsrv_add", {"a": "two", "b": 1})
    assert not bad.ok and bad.error["type"] == "ValidationError" and bad.error["field"] == "a"  # checked here
    failed = ws.tools.invoke("testsrv_fail", {"message": "boom"})
    assert (
        not failed.ok
        and "MCP server 'testsrv'" in failed.error["message"]
        and "'fail' failed" in failed.error["message"]
    )

    (session,) = [s for s in ws.envs.sessions() if s.environment == "mcp:testsrv"]
    assert session.key == "interactive" and "9 tools, connected" in session.state
    pid = ws.tools.invoke("testsrv_pid").value
    assert alive(pid) and ws.tools.invoke("testsrv_pid").value == pid  # one warm session
    # the values went to the server but not into the workspace database: every env value is a reference
    assert add.metadata["mcp"]["spec"]["env"] == {"GREETING": "${GREETING}", "TESTSRV_TOKEN": "${TESTSRV_TOKEN}"}
    ws.tools.flush()
    assert SECRET.encode() not in b"".join(p.read_bytes() for p in ws.path.glob("tea.db*"))
    ws.envs.release()
    assert wait_gone(pid), "the server outlived its session"


def test_imported_tools_survive_a_restart_in_a_new_process(ws):
    ws.tools.import_mcp("testsrv", server_cmd(), env={"TESTSRV_TOKEN": SECRET}, prefix="s_")
    path = ws.path
    ws.close()
    code = (
        "import sys, tea_notebook\n"
        f"ws = tea_notebook.Workspace({str(path)!r}, embedder='hashing')\n"
        "show = lambda r: print(r.ok, r.value if r.ok else r.error['message'])\n"
        "show(ws.tools.invoke('s_add', {'a': 1, 'b': 2}))\n"
        "show(ws.tools.invoke('s_getenv', {'name': 'TESTSRV_TOKEN'}))\n"
        "ws.close()\n"
    )
    env = {**os.environ, "TESTSRV_TOKEN": "from-the-environment"}
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["True 3", "True from-the-environment"]
    env.pop("TESTSRV_TOKEN")
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    first = out.stdout.splitlines()[0]
    assert first.startswith(
        "False MCP server 'testsrv': env 'TESTSRV_TOKEN' refers to ${TESTSRV_TOKEN}, which is not set"
    )


def test_a_dead_server_is_restarted_at_the_next_call_once_then_reported(ws, tmp_path):
    flag = tmp_path / "crash-on-start"
    ws.tools.import_mcp("testsrv", server_cmd(), env={"TESTSRV_CRASH_FLAG": str(flag)})
    first = ws.tools.invoke("testsrv_pid").value
    died = ws.tools.invoke("testsrv_die")
    assert (
        not died.ok and "MCP server 'testsrv' closed the connection during the call of 'die'" in died.error["message"]
    )
    second = ws.tools.invoke("testsrv_pid")
    assert second.ok and second.value != first and alive(second.value)  # restarted once, transparently
    os.kill(second.value, signal.SIGKILL)
    wait_gone(second.value)
    # the client sees the death between calls (a killed process is gone for good a few ms after its
    # main thread is a zombie), as it would when a server crashes while nobody calls it
    deadline = time.monotonic() + 5
    while "connected" in ws.envs.sessions()[0].state and time.monotonic() < deadline:
        time.sleep(0.01)
    flag.write_text("crash")  # from now on the server cannot start
    gone = ws.tools.invoke("testsrv_add", {"a": 1, "b": 1})
    message = gone.error["message"]
    assert not gone.ok and "MCP server 'testsrv' had died and was restarted once" in message
    assert "exited before completing the handshake" in message and "cannot start (on purpose)" in message
    flag.unlink()
    assert ws.tools.invoke("testsrv_add", {"a": 1, "b": 1}).value == 2  # and it starts again once it can


def test_slow_malformed_and_huge_results_become_observations_naming_the_server(ws):
    ws.tools.import_mcp("testsrv", server_cmd(), call_timeout=1.0, max_result_chars=1000)
    slow = ws.tools.invoke("testsrv_slow", {"seconds": 5})
    assert not slow.ok and slow.error["message"] == "MCP server 'testsrv': tool 'slow' did not answer within 1 s"
    huge = ws.tools.invoke("testsrv_huge", {"n": 50_000})
    assert huge.ok and huge.value.startswith("x" * 1000) and len(huge.value) < 1300
    assert "MCP server 'testsrv' returned 50,000 characters for 'huge', more than the limit of 1,000" in huge.value
    assert ws.tools.invoke("testsrv_add", {"a": 1, "b": 2}).value == 3  # the session outlived both
    ws.tools.import_mcp("broken", server_cmd("malformed"))
    bad = ws.tools.invoke("broken_fine", {})
    assert not bad.ok and bad.error["message"].startswith("MCP server 'broken' sent a malformed result for tool 'fine'")


# -- bad servers: a clear error naming the server, nothing registered --------------------------------------
@pytest.mark.parametrize(
    "mode, expected",
    [
        ("crash", "MCP server 'bad' exited before completing the handshake"),
        ("bad-version", "MCP server 'bad' speaks protocol version '1999-01-01', which this client does not support"),
        ("hang", "MCP server 'bad' did not answer the handshake within 2 s"),
        ("not-mcp", "MCP server 'bad' does not speak MCP: it sent 'hello, I am not an MCP server'"),
        ("bad-tools", "MCP server 'bad': tool 'broken' has an input schema that is not valid JSON Schema"),
    ],
)
def test_a_server_that_misbehaves_registers_nothing(ws, mode, expected):
    @ws.tools.tool
    def mine(x: int) -> int:
        """Mine."""
        return x

    tools, kits = ws.tools.names(), ws.toolkits.names()
    start = time.monotonic()
    with pytest.raises(TeaError) as info:
        ws.tools.import_mcp("bad", server_cmd(mode), timeout=2 if mode == "hang" else 20)
    assert str(info.value).startswith(expected), str(info.value)
    assert time.monotonic() - start < 15  # reported as soon as it is known, not at a time limit
    nothing_changed(ws, tools, kits)
    assert not [s for s in ws.envs.sessions() if s.environment == "mcp:bad"]


def test_unreachable_servers_and_name_clashes_register_nothing(ws):
    @ws.tools.tool
    def testsrv_echo(text: str) -> str:
        """Already here."""
        return text

    tools, kits = ws.tools.names(), ws.toolkits.names()
    with pytest.raises(TeaError, match=r"MCP server 'gone' could not be started \(/no/such/server\)"):
        ws.tools.import_mcp("gone", ["/no/such/server"])
    with pytest.raises(TeaError, match=r"MCP server 'far' cannot be reached at http://127.0.0.1:\d+/mcp"):
        ws.tools.import_mcp("far", url=f"http://127.0.0.1:{free_port()}/mcp", timeout=3)
    with pytest.raises(TeaError, match="a tool named 'testsrv_echo' is already registered .* nothing was registered"):
        ws.tools.import_mcp("testsrv", server_cmd())
    nothing_changed(ws, tools, kits)
    with pytest.raises(TeaError, match="either a command .* or a url"):
        ws.tools.import_mcp("both", server_cmd(), url="http://127.0.0.1:1/mcp")
    report = ws.tools.import_mcp("testsrv", server_cmd(), prefix="t_")  # another prefix avoids the clash
    assert len(report.tools) == 9 and ws.tools.invoke("testsrv_echo", {"text": "x"}).value == "x"
    assert ws.tools.remove_mcp("testsrv") and "t_add" not in ws.tools and "testsrv" not in ws.toolkits


# -- import over streamable HTTP -----------------------------------------------------------------------------
def test_import_over_streamable_http(ws, http_server):
    report = ws.tools.import_mcp("web", url=http_server, headers={"Authorization": f"Bearer {SECRET}"})
    assert {t.name for t in report.tools} >= {"web_add", "web_echo"}
    rec = ws.tools.get("web_add")
    assert rec.metadata["provenance"]["mcp"]["transport"] == "http"
    assert rec.metadata["mcp"]["spec"]["headers"] == {"Authorization": "${MCP_AUTHORIZATION}"}
    assert ws.tools.invoke("web_add", {"a": 20, "b": 22}).value == 42
    assert ws.tools.invoke("web_echo", {"text": "over http"}).value == "over http"


def test_an_http_server_that_went_away_is_reported_then_reconnected(ws):
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"

    def start() -> subprocess.Popen:
        return start_listening([PY, SERVER, "http", str(port)], port)

    proc = start()
    try:
        ws.tools.import_mcp("web", url=url)
        assert ws.tools.invoke("web_add", {"a": 1, "b": 2}).value == 3
        stop(proc)
        down = [ws.tools.invoke("web_add", {"a": 1, "b": 2}) for _ in range(2)]
        assert all(not r.ok and "MCP server 'web'" in r.error["message"] for r in down)
        assert "cannot be reached at " + url in down[-1].error["message"]  # the one restart found nobody
        proc = start()
        assert ws.tools.invoke("web_add", {"a": 2, "b": 2}).value == 4  # reconnected at the next call
    finally:
        stop(proc)


# -- an agent run calls an imported tool ----------------------------------------------------------------------
def test_an_agent_run_calls_an_imported_mcp_tool(ws, warm_litellm):
    ws.tools.import_mcp("testsrv", server_cmd())
    interactive = ws.tools.invoke("testsrv_pid").value
    script = ScriptedModel(
        [call("testsrv_add", a=19, b=23), call("testsrv_pid"), call("done", success=True, text="42")]
    )
    agent = ws.agent("adder", model=script.name, tools=["testsrv_add", "testsrv_pid"])
    result = agent.run_sync("What is 19 + 23?")
    assert result.success and result.answer == "42"
    first, second = (step.actions[0] for step in result.trajectory.steps[:2])
    assert first["name"] == "testsrv_add" and first["ok"] and str(first["observation"]) == "42"
    in_run = int(second["observation"])
    assert in_run != interactive  # the run had its own session of the server ...
    assert wait_gone(in_run), "the run's MCP server outlived the run"  # ... stopped with the run
    assert alive(interactive) and ws.tools.invoke("testsrv_pid").value == interactive


# -- export: `tea mcp serve`, called by the SDK's own client ---------------------------------------------------
def _export_workspace(path: Path) -> None:
    ws = tea_notebook.Workspace(path, embedder="hashing")

    @ws.tools.tool
    def convert_temperature(value: float) -> float:
        """Convert a temperature from Celsius to Fahrenheit."""
        return value * 9 / 5 + 32

    @ws.tools.tool
    def leak_key() -> str:
        """Return a text holding an API key."""
        return "the key is " + "sk-" + "live0123456789abcdef0123"

    @ws.tools.tool
    def explode(what: str) -> str:
        """Raise an error that mentions a password."""
        raise RuntimeError(f"could not log in with password={what}")

    @ws.tools.tool
    def hidden() -> str:
        """Not exported."""
        return "no"

    ws.agent("thermo", tools=["convert_temperature"], model="tea/demo", max_steps=5)
    ws.close()


async def _client_session_calls(transport: str, target: list[str] | str, token: str | None = None) -> dict:
    from contextlib import AsyncExitStack

    import httpx2
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    stack = AsyncExitStack()
    if transport == "stdio":
        opened = stdio_client(StdioServerParameters(command=target[0], args=target[1:], env=dict(os.environ)))
    else:
        client = await stack.enter_async_context(
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=60)
        )
        opened = streamable_http_client(target, http_client=client)
    out: dict = {}
    async with stack, opened as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            init = await session.initialize()
            out["server"] = init.server_info.name
            out["tools"] = {t.name: t for t in (await session.list_tools()).tools}
            out["convert"] = await session.call_tool("convert_temperature", {"value": 30})
            out["bad_args"] = await session.call_tool("convert_temperature", {"value": "hot"})
            out["leak"] = await session.call_tool("leak_key", {})
            out["explode"] = await session.call_tool("explode", {"what": "hunter2-very-secret"})
            out["hidden"] = await session.call_tool("hidden", {})
            if "thermo_agent" in out["tools"]:
                out["agent"] = await session.call_tool("thermo_agent", {"task": "What is 30 °C in Fahrenheit?"})
    return out


def _check_export(out: dict) -> None:
    assert set(out["tools"]) == {"convert_temperature", "leak_key", "explode", "thermo_agent"}
    schema = out["tools"]["convert_temperature"].input_schema
    assert schema["properties"]["value"]["type"] == "number" and schema["required"] == ["value"]
    assert out["convert"].is_error is False and out["convert"].structured_content == {"result": 86.0}
    assert out["convert"].content[0].text == "86.0"
    assert out["bad_args"].is_error and "expected number" in out["bad_args"].content[0].text
    leak = out["leak"].content[0].text
    assert out["leak"].is_error is False and "sk-live" not in leak and "redacted" in leak
    boom = out["explode"].content[0].text
    assert out["explode"].is_error and "could not log in" in boom and "hunter2" not in boom
    assert out["hidden"].is_error and "no tool named 'hidden' is exported" in out["hidden"].content[0].text
    answer = out["agent"].content[0].text  # the offline demo model's answer, through A2T
    assert out["agent"].is_error is False and "86.0" in answer and "tea/demo" in answer


def test_tea_mcp_serve_over_stdio_to_the_sdk_client(tmp_path):
    _export_workspace(tmp_path / "w")
    cmd = [*TEA, "mcp", "serve", "-w", str(tmp_path / "w"), "--tools", "convert_temperature,leak_key,explode"]
    out = asyncio.run(_client_session_calls("stdio", [*cmd, "--agents", "thermo", "--name", "exported"]))
    assert out["server"] == "exported"
    _check_export(out)


def test_tea_mcp_serve_over_streamable_http(tmp_path):
    _export_workspace(tmp_path / "w")
    port = free_port()
    cmd = [*TEA, "mcp", "serve", "-w", str(tmp_path / "w"), "--tools", "convert_temperature,leak_key,explode"]
    proc = start_listening(
        [*cmd, "--agents", "thermo", "--transport", "http", "--port", str(port)],
        port,
        limit=60,
        env={**os.environ, "TEA_MCP_TOKEN": SECRET},
    )
    try:
        out = asyncio.run(_client_session_calls("http", f"http://127.0.0.1:{port}/mcp", SECRET))
    finally:
        stop(proc)
    _check_export(out)


def test_tea_mcp_serve_exports_only_what_is_named(tmp_path):
    _export_workspace(tmp_path / "w")
    none = subprocess.run([*TEA, "mcp", "serve", "-w", str(tmp_path / "w")], capture_output=True, text=True, timeout=60)
    assert none.returncode == 2 and "nothing to export: name tools with --tools" in none.stderr
    missing = subprocess.run(
        [*TEA, "mcp", "serve", "-w", str(tmp_path / "w"), "--tools", "convert_temperature,nope", "--agents", "ghost"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "nope, agent ghost" in missing.stderr


def test_round_trip_export_one_workspace_import_it_into_another(tmp_path, ws):
    _export_workspace(tmp_path / "a")
    served = [*TEA, "mcp", "serve", "-w", str(tmp_path / "a"), "--tools", "convert_temperature,leak_key"]
    report = ws.tools.import_mcp("a", [*served, "--agents", "thermo"], prefix="")
    assert {t.name for t in report.tools} == {"convert_temperature", "leak_key", "thermo_agent"}
    original = tea_notebook.Workspace(tmp_path / "a", embedder="hashing")
    try:
        theirs = original.tools.get("convert_temperature")
        ours = ws.tools.get("convert_temperature")
        assert ours.parameters == theirs.parameters and ours.description == theirs.description
    finally:
        original.close()
    assert ws.tools.invoke("convert_temperature", {"value": 30}).value == 86.0  # a float again, not "86.0"
    assert "sk-live" not in ws.tools.invoke("leak_key").value
    assert "86.0" in ws.tools.invoke("thermo_agent", {"task": "What is 30 °C in Fahrenheit?"}).value


# -- %tea mcp ---------------------------------------------------------------------------------------------
def test_tea_mcp_magic_adds_lists_and_removes(ip, tmp_path):
    from IPython.core.error import UsageError

    ip.run_line_magic("tea", f"workspace {tmp_path / 'mws'}")
    listing = ip.run_line_magic("tea", f"mcp add calc --prefix m_ --env GREETING=hey {PY} {SERVER}")
    assert {row["name"] for row in listing} >= {"m_add", "m_getenv"}
    ws = ip.magics_manager.registry["TeaMagics"].workspace
    assert ws.tools.invoke("m_getenv", {"name": "GREETING"}).value == "hey"
    servers = ip.run_line_magic("tea", "mcp list")
    assert [row["server"] for row in servers] == ["calc"] and "m_add" in servers[0]["tools"]
    with pytest.raises(UsageError, match="MCP server 'bad' exited before completing the handshake"):
        ip.run_line_magic("tea", f"mcp add bad {PY} {SERVER} crash")
    with pytest.raises(UsageError, match="needs a command"):
        ip.run_line_magic("tea", "mcp add nothing")
    assert "m_add" in str(ip.run_line_magic("tea", "mcp remove calc"))
    assert "m_add" not in ws.tools and ip.run_line_magic("tea", "mcp list") == []


# -- the MCP guide runs as written -------------------------------------------------------------------------------
def test_the_mcp_guide_runs_as_written(tmp_path, monkeypatch):
    """docs/guide/mcp.md: its examples in order in one fresh kernel, then its HTTP command serving while
    the block that adds a listening server runs (with the token both read from $TEA_MCP_TOKEN)."""
    import re

    from docs_examples import python_blocks, run_page

    page = HERE.parent / "docs" / "guide" / "mcp.md"
    text = page.read_text()
    commands = re.findall(r"```bash\n(.*?)```", text, re.S)[-1].strip().splitlines()
    http = next(c for c in commands if "--transport http" in c).split("#")[0].split()
    assert http[:3] == ["tea", "mcp", "serve"] and http[-2] == "--port"
    (remote,) = [b.code for b in python_blocks(text) if b.skip and "--url" in b.code]
    assert "${TEA_MCP_TOKEN}" in remote, "the guide must show the client sending the server's token"
    _export_workspace(tmp_path / "srv" / ".tea")  # what the command serves (the page makes its own ./.tea)
    port = free_port()
    monkeypatch.setenv("TEA_MCP_TOKEN", SECRET)  # the HTTP server and the notebook's kernel share it
    proc = start_listening([*TEA, *http[1:-1], str(port)], port, limit=60, cwd=tmp_path / "srv")
    try:
        checks = [
            remote.replace("8765", str(port)),
            "ws_nb = get_ipython().magics_manager.registry['TeaMagics'].workspace\n"
            "assert ws_nb.tools.invoke('convert_temperature', {'value': 30}).value == 86.0\n"
            "assert ws_nb.tools.invoke('remote_convert_temperature', {'value': 100}).value == 212.0\n"
            "assert '${TEA_MCP_TOKEN}' in str(ws_nb.tools.get('remote_convert_temperature').metadata)\n"
            "other.close(); print('checked')",
        ]
        nb = run_page(page, tmp_path / "page", checks=checks)
    finally:
        log = stop(proc) or (proc.stderr.read() if proc.stderr else "")
    assert "".join(o.get("text", "") for o in nb.cells[-1].outputs).strip().endswith("checked")
    assert SECRET not in log
