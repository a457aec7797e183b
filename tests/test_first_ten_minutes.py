"""The "first ten minutes": problems a new notebook user hit by trying the README as written, each
fixed at its cause and pinned here with real components (an in-process IPython shell, a real
ipykernel through jupyter_client where the behaviour is kernel-specific, real sockets on
127.0.0.1 for unreachable servers, real subprocesses for what happens at exit)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("IPython")

from conftest import magics_workspace  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402
from loopback_http import free_port as _closed_port  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SECRET_VALUE = "hunter2-correct-horse-battery"


@pytest.fixture
def shell_ws(ip, magics, tmp_path, monkeypatch):
    """A fresh workspace made current in the shell, no model configured anywhere."""
    magics_workspace(ip, tmp_path, monkeypatch)
    yield magics.workspace


def _actions(result) -> list[dict]:
    return [a for s in result.trajectory.steps for a in s.actions]


def _stored_text(ws, run_id: str) -> str:
    """Everything stored about a run: its events' data, as JSON text."""
    return json.dumps([e.data for e in ws.trajectory(run_id).events], default=str)


# -- 1. the demo model never runs code on the user's data, and never claims an unchecked success ----
def test_1_demo_model_with_kernel_write_runs_no_code_and_is_not_success(ip, shell_ws):
    ip.user_ns["prices"] = [3.5, None, 5.0]
    result = ip.run_cell_magic(
        "agent",
        "analyst --env kernel --grant kernel.write --quiet",
        "Drop the rows of `prices` whose price is missing, in place.",
    )
    assert result.model == "tea/demo"
    names = [a["name"] for a in _actions(result)]
    assert "kernel_run" not in names and "kernel_write" not in names, names
    assert ip.user_ns["prices"] == [3.5, None, 5.0]
    assert result.status in ("failed", "unverified") and not result.success, result.status
    assert "not an LLM" in result.answer


def test_1_demo_model_run_is_unverified_not_success(ws, warm_litellm):
    @tea_notebook.tool(workspace=ws)
    def convert_temperature(value: float, unit: str = "C") -> float:
        """Convert a temperature between Celsius and Fahrenheit."""
        return value * 9 / 5 + 32 if unit == "C" else (value - 32) * 5 / 9

    result = ws.agent("calc", tools=["convert_temperature"]).run_sync("What is 30 °C in Fahrenheit?")
    assert result.model == "tea/demo" and result.answer.startswith("86.0")
    assert result.status == "unverified" and not result.success
    assert ws.runs(1)[0]["status"] == "unverified"


def test_1_tool_error_makes_an_offline_run_failed_unless_a_later_step_recovers(ws, warm_litellm):
    from tea_notebook.envs.kernel import KernelEnvironment

    ns = {"prices": [3.5, None]}
    ws.envs.add(KernelEnvironment, namespace=ns)
    # what the demo model used to do: the English task sent as code; the script then claims success
    task = "Drop the rows whose price is missing"
    script = ScriptedModel([call("kernel_run", code=task), call("done", success=True, text="done it")])
    result = ws.agent("a1", model=script.name, envs=["kernel"]).run_sync(task, grants=["kernel.write"])
    (ran,) = [a for a in _actions(result) if a["name"] == "kernel_run"]
    assert ran["ok"] is False and "SyntaxError" in ran["observation"]
    assert result.status == "failed" and not result.success
    assert "kernel_run failed and no later action succeeded" in _stored_text(ws, result.run_id)

    recovered = ScriptedModel(
        [
            call("kernel_run", code=task),
            call("kernel_run", code="prices[:] = [p for p in prices if p is not None]"),
            call("done", success=True, text="dropped"),
        ]
    )
    result = ws.agent("a2", model=recovered.name, envs=["kernel"]).run_sync(task, grants=["kernel.write"])
    assert result.status == "success" and ns["prices"] == [3.5]


# -- 8. the kernel environment: values need kernel.read, and what is read is redacted -----------------
def test_8_kernel_values_need_the_read_grant_and_are_redacted(ip, shell_ws):
    ws = shell_ws
    ip.user_ns["secret"] = SECRET_VALUE
    ip.user_ns["scores"] = [31, 41, 59]
    script = ScriptedModel(
        [call("kernel_variables"), call("kernel_read", name="scores"), call("done", success=True, text="ok")]
    )
    result = ip.run_cell_magic("agent", f"k8 --env kernel --model {script.name} --quiet", "Summarise my scores")
    variables, read = _actions(result)[:2]
    assert (
        variables["ok"]
        and "secret: str" in variables["observation"]
        and "scores: list, len 3" in variables["observation"]
    )
    assert read["ok"] is False and "kernel.read grant" in read["observation"]
    prompts = json.dumps(script.calls)
    for leaked in (SECRET_VALUE, "31, 41, 59"):
        assert leaked not in prompts and leaked not in _stored_text(ws, result.run_id)
    assert result.status == "failed"  # the refused read was never recovered

    script = ScriptedModel(
        [
            call("kernel_variables"),
            call("kernel_read", name="scores"),
            call("kernel_read", name="secret"),
            call("done", success=True, text="ok"),
        ]
    )
    result = ip.run_cell_magic(
        "agent", f"k8 --env kernel --grant kernel.read --model {script.name} --quiet", "Summarise my scores"
    )
    variables, scores, secret = _actions(result)[:3]
    assert "scores: list, len 3 = [31, 41, 59]" in variables["observation"]
    assert scores["ok"] and "[31, 41, 59]" in scores["observation"]
    assert secret["ok"] and "[redacted]" in secret["observation"]
    assert SECRET_VALUE not in json.dumps(script.calls) and SECRET_VALUE not in _stored_text(ws, result.run_id)
    # kernel.read does not allow changes
    script = ScriptedModel([call("kernel_write", name="scores", value_json=[]), call("done", success=False, text="no")])
    ip.run_cell_magic("agent", f"k8 --env kernel --grant kernel.read --model {script.name} --quiet", "clear scores")
    assert ip.user_ns["scores"] == [31, 41, 59]


# -- 9. a stopped run stops its in-flight tools and says which were running -----------------------
def _stop_when_called(ws, tool_name: str, ctx, after: float = 0.4) -> callable:
    """Set the run's stop signal ``after`` seconds after ``tool_name`` was called (as ■ would)."""

    def watch(event) -> None:
        if event.type == "tool_call" and event.data.get("name") == tool_name:
            threading.Timer(after, ctx.cancel.set).start()

    return ws.events.subscribe(watch)


def _stopped_run(ws, tool_name: str, args: dict):
    script = ScriptedModel([call(tool_name, **args), call("done", success=True, text="wrote it")])
    ctx = ws.context()
    unsubscribe = _stop_when_called(ws, tool_name, ctx)
    try:
        started = time.monotonic()
        result = ws.agent(f"stop_{tool_name}", model=script.name, tools=[tool_name]).run_sync(
            "write the file", context=ctx
        )
        took = time.monotonic() - started
    finally:
        unsubscribe()
    return result, took


def _interruption(result) -> tuple[dict, dict]:
    events = result.trajectory.events
    [cut] = [e.data for e in events if e.type == "tool_result" and e.data.get("error_type") == "Interrupted"]
    [note] = [e.data for e in events if e.type == "error" and e.data.get("kind") == "tools_interrupted"]
    return cut, note


def test_9_stopped_run_cancels_an_async_tool_before_its_side_effect(ws, warm_litellm, tmp_path):
    target = tmp_path / "async-landed.txt"

    @tea_notebook.tool(workspace=ws)
    async def slow_write_async(path: str) -> str:
        """Wait, then write a file."""
        import asyncio

        await asyncio.sleep(1.5)
        Path(path).write_text("landed")
        return "written"

    result, took = _stopped_run(ws, "slow_write_async", {"path": str(target)})
    assert result.status == "interrupted" and took < 1.5
    time.sleep(1.6)
    assert not target.exists()
    cut, note = _interruption(result)
    assert cut["name"] == "slow_write_async" and "interrupted when the run was stopped" in cut["observation"]
    assert note["tools"] == ["slow_write_async"] and note["still_running"] == []


def test_9_stopped_run_tells_a_sync_tool_through_its_cancel_flag(ws, warm_litellm, tmp_path):
    target = tmp_path / "sync-landed.txt"

    @tea_notebook.tool(workspace=ws)
    def slow_write_sync(path: str, ctx: tea_notebook.ToolContext) -> str:
        """Wait (checking for a stop), then write a file."""
        for _ in range(30):
            if ctx.cancelled:
                return "stopped before writing"
            time.sleep(0.05)
        Path(path).write_text("landed")
        return "written"

    result, _ = _stopped_run(ws, "slow_write_sync", {"path": str(target)})
    assert result.status == "interrupted"
    time.sleep(1.6)
    assert not target.exists()
    cut, note = _interruption(result)
    assert cut["name"] == "slow_write_sync" and note["tools"] == ["slow_write_sync"] and note["still_running"] == []


def test_9_stopped_run_names_a_sync_tool_that_ignores_the_flag_as_still_running(ws, warm_litellm, tmp_path):
    @tea_notebook.tool(workspace=ws)
    def stubborn_sleep(seconds: float) -> str:
        """Sleep, whatever happens."""
        time.sleep(seconds)
        return "slept"

    result, _ = _stopped_run(ws, "stubborn_sleep", {"seconds": 3.5})
    cut, note = _interruption(result)
    assert note["still_running"] == ["stubborn_sleep"] and "still running" in cut["observation"]


def test_9_stopped_run_kills_a_sandboxed_generated_tool(ws, warm_litellm):
    import hashlib

    from tea_notebook.protocol.records import ToolRecord

    source = textwrap.dedent(
        '''
        import time
        from pathlib import Path


        def sandbox_slow_write(name: str) -> str:
            """Wait, then write a file in the sandbox's folder."""
            try:
                time.sleep(1.5)
            except BaseException:  # even code that swallows the interrupt must not finish
                time.sleep(1.5)
            Path(name).write_text("landed")
            return str(Path(name).resolve())
        '''
    )
    ws.tools.register(
        ToolRecord(
            name="sandbox_slow_write",
            description="Wait, then write a file in the sandbox's folder.",
            parameters={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            source=source,
            source_hash=hashlib.sha256(source.encode()).hexdigest(),
            entrypoint="source:sandbox_slow_write",
            origin="generated",
            category="generated",
        )
    )
    result, took = _stopped_run(ws, "sandbox_slow_write", {"name": "sandbox-landed.txt"})
    assert result.status == "interrupted" and took < 3
    time.sleep(3.5)
    assert not list(ws.path.rglob("sandbox-landed.txt"))
    cut, note = _interruption(result)
    assert cut["name"] == "sandbox_slow_write" and note["still_running"] == []


# -- 7. unreachable and silent model servers: said at once, or within interactive time limits --------
class _SilentServer:
    """Accepts connections on 127.0.0.1 and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def silent_server():
    server = _SilentServer()
    yield server
    server.close()


def _complete(client, model: str):
    from tea_notebook._sync import run_sync

    return run_sync(client.complete(model, [{"role": "user", "content": "hi"}]))


def test_7_refused_connection_is_said_at_once_without_retries_or_key_advice(monkeypatch, warm_litellm, caplog):
    from tea_notebook.models.client import ModelClient, ModelError

    url = f"http://127.0.0.1:{_closed_port()}/v1"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_BASE", url)
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        _complete(ModelClient(retries=3), "openai/gpt-4o-mini")
    assert time.monotonic() - started < 3.0
    message = str(info.value)
    assert f"cannot reach {url}" in message and "connection refused" in message
    assert "OPENAI_API_KEY" not in message and "InternalServerError" not in message
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]


def test_7_silent_server_times_out_with_interactive_defaults(monkeypatch, warm_litellm, silent_server):
    from tea_notebook.models.client import DEFAULT_RETRIES, DEFAULT_TIMEOUT, ModelClient, ModelError

    assert (ModelClient().timeout, ModelClient().retries) == (DEFAULT_TIMEOUT, DEFAULT_RETRIES) == (60.0, 1)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    url = f"http://127.0.0.1:{silent_server.port}/v1"
    client = ModelClient(timeout=1.0, backoff=0.01, api_base=url)
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        _complete(client, "openai/gpt-4o-mini")
    took = time.monotonic() - started
    assert 1.9 < took < 8.0, took  # two attempts of 1 s (the default retries: 1)
    assert f"no answer from {url} within 1 s (2 attempts" in str(info.value)
    assert "OPENAI_API_KEY" not in str(info.value)
    assert len(silent_server.accepted) == 2


def test_7_agent_api_base_option_and_config_timeout(ip, shell_ws, monkeypatch, silent_server):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    url = f"http://127.0.0.1:{silent_server.port}/v1"
    ip.run_line_magic("config", "TeaMagics.model_timeout = 1.0")
    ip.run_line_magic("config", "TeaMagics.model_retries = 0")
    try:
        assert (shell_ws.model_timeout, shell_ws.model_retries) == (1.0, 0)
        started = time.monotonic()
        with pytest.raises(UsageError, match=f"no answer from {url} within 1 s"):
            ip.run_cell_magic("agent", f"local --model openai/qwen3 --api-base {url} --quiet", "say hi")
        assert time.monotonic() - started < 6.0
    finally:
        ip.run_line_magic("config", "TeaMagics.model_timeout = None")
        ip.run_line_magic("config", "TeaMagics.model_retries = None")
    run = shell_ws.runs(1)[0]
    [request] = [e.data for e in shell_ws.trajectory(run["id"]).events if e.type == "model_request"]
    assert request["timeout"] == 1.0 and request["retries"] == 0 and request["api_base"] == url
    assert shell_ws.api_base is None  # --api-base was for that run only


def test_7_live_view_counts_down_while_a_model_call_waits():
    from tea_notebook.notebook.live import LiveView
    from tea_notebook.runtime.events import Event

    view = LiveView(display=False)
    now = time.time()
    view(Event("e1", "r1", "run_started", now, {"agent": "a", "task": "t", "model": "openai/x"}, None, None, 1))
    view(Event("e2", "r1", "model_request", now, {"model": "openai/x", "timeout": 60.0, "retries": 1}, None, 1, 2))
    assert "waiting for the model: 60 s left of 60 s" in view.html() or "59 s left of 60 s" in view.html()
    view.waiting["r1"] = (time.monotonic() - 1, 60.0, 1)
    assert "no answer within 60 s: retrying (up to 1×)" in view.html()
    view(Event("e3", "r1", "model_response", now, {"model": "openai/x"}, None, 1, 3))
    assert "waiting for the model" not in view.html() and not view.waiting


# -- 3. a %%tool keeps the imports it reads from other cells, so it rebuilds after a restart -----------
def test_3_tool_rebuilt_in_a_fresh_process_has_its_imports(ip, shell_ws, recwarn):
    assert ip.run_cell(
        "import statistics as st\nfrom pathlib import PurePosixPath\nimport json", store_history=True
    ).success
    ip.run_cell_magic(
        "tool",
        "",
        '''def middle_suffix(paths: list[str]) -> str:
    """The median length of the paths' stems, with the first path's suffix."""
    lengths = [len(PurePosixPath(p).stem) for p in paths]
    return json.dumps({"median": st.median(lengths), "suffix": PurePosixPath(paths[0]).suffix})
''',
    )
    record = shell_ws.tools.get("middle_suffix")
    head = record.source.split("\n\n\n", 1)[0].splitlines()
    assert sorted(head) == ["from pathlib import PurePosixPath", "import json", "import statistics as st"]
    assert not [w for w in recwarn if "middle_suffix" in str(w.message)]
    script = textwrap.dedent(
        f"""
        import tea_notebook
        ws = tea_notebook.Workspace({str(shell_ws.path)!r}, embedder="hashing")
        result = ws.tools.invoke("middle_suffix", {{"paths": ["a/abc.txt", "b/de.md", "c/fghi.py"]}})
        print("@@", result.ok, result.value if result.ok else result.error)
        ws.close()
        """
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    line = next(x for x in out.stdout.splitlines() if x.startswith("@@"))
    assert line == '@@ True {"median": 3, "suffix": ".txt"}', out.stdout + out.stderr


def test_3_tool_using_a_notebook_variable_is_warned_about_at_definition(ip, shell_ws):
    ip.run_cell("THRESHOLD = 3\ndef helper(x):\n    return x * 2", store_history=True)
    with pytest.warns(UserWarning, match=r"%%tool above_threshold: it uses THRESHOLD, helper from the notebook"):
        ip.run_cell_magic(
            "tool",
            "",
            'def above_threshold(x: int) -> bool:\n    """Whether twice x passes the threshold."""\n'
            "    return helper(x) > THRESHOLD\n",
        )


# -- 5. a comment above %%agent: IPython's rule, not "Line magic function `%%agent` not found" --------
def test_5_comment_above_a_cell_magic_says_it_must_be_the_first_line(ip, shell_ws):
    from IPython.core.inputtransformer2 import TransformerManager

    result = ip.run_cell("# my first agent\n%%agent --quiet\nWhat is 2 + 2?")
    error = result.error_before_exec
    assert isinstance(error, UsageError), error
    assert "%%agent must be the first line of the cell" in str(error) and "not found" not in str(error)
    assert shell_ws.runs() == []  # nothing ran
    # the rule is the same for every cell magic of the shell; code and strings that are not a
    # comment-then-magic cell are left alone
    assert "%%tool must be the first line" in str(ip.run_cell("# a tool\n\n%%tool\ndef f(): pass").error_before_exec)
    assert ip.run_cell('x5 = """\n%%agent in a string\n"""').success
    assert ip.run_cell("# only a comment\n%%not_a_magic_here").error_before_exec is None
    # %load_ext registers it once (loading again replaces it); a plain IPython has no such hint
    from tea_notebook.notebook.hints import register

    register(ip)
    assert sum(getattr(t, "tea_hint", False) for t in ip.input_transformers_cleanup) == 1
    assert not any(getattr(t, "tea_hint", False) for t in TransformerManager().cleanup_transforms)
    assert ip.input_transformer_manager.check_complete("# note\n%%agent\ntask")[0] in ("complete", "incomplete")


# -- 6. no "Task was destroyed but it is pending!" and no traceback when runs end and Python exits -----
EXIT_NOISE = ("Task was destroyed but it is pending", "Traceback", "Event loop is closed", "event loop changed")


def test_6_script_that_runs_agents_exits_without_litellm_noise(tmp_path):
    script = textwrap.dedent(
        f"""
        import asyncio
        import tea_notebook
        from tea_notebook.models.offline import ScriptedModel, call

        ws = tea_notebook.Workspace({str(tmp_path / "ws")!r}, embedder="hashing")
        model = ScriptedModel([call("done", success=True, text="hi")] * 5).name
        loop = asyncio.new_event_loop()  # a loop of the caller's own, closed after its run
        print(loop.run_until_complete(ws.agent("a", model=model, tools=[]).run("x")).status)
        loop.close()
        print(ws.agent("b", model=model, tools=[]).run_sync("y").status)
        print(asyncio.run(ws.agent("c", model=model, tools=[]).run("z")).status)
        print(ws.agent("d", tools=[]).run_sync("the demo model").status)
        """
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("TEA_MODEL", None)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["success", "success", "success", "failed"]
    for noise in EXIT_NOISE:
        assert noise not in out.stderr, out.stderr


@pytest.mark.slow
def test_6_real_kernel_shut_down_after_runs_prints_no_litellm_noise(tmp_path):
    pytest.importorskip("jupyter_client")
    from jupyter_client import KernelManager
    from kernel_driver import make_kernel_specs

    specs = make_kernel_specs(tmp_path / "specs", "tea-exit")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("TEA_MODEL", None)
    log = tmp_path / "kernel-stderr.txt"
    km = KernelManager(kernel_name="tea-exit", kernel_spec_manager=specs)
    with open(log, "w") as err:
        km.start_kernel(env=env, cwd=str(tmp_path), stderr=err, stdout=err)
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
            cells = [
                "%load_ext tea_notebook\nimport tea_notebook\nfrom tea_notebook.models.offline import ScriptedModel, call\n"
                f"%tea workspace {tmp_path / 'ws'}\n"
                "s = ScriptedModel([call('done', success=True, text='hi')] * 9, name='exit6')\n"
                f"ws = tea_notebook.Workspace({str(tmp_path / 'ws')!r})",
                "r = await ws.agent('a', model=s.name, tools=[]).run('on the kernel loop')\nprint(r.status)",
                "%%agent b --model tea/script:exit6 --quiet\non the background loop",
                "r = await ws.agent('a', model=s.name, tools=[]).run('again on the kernel loop')\nprint(r.status)",
            ]
            printed = []
            for code in cells:
                msg_id = kc.execute(code)
                while True:
                    msg = kc.get_iopub_msg(timeout=120)
                    if msg["parent_header"].get("msg_id") != msg_id:
                        continue
                    assert msg["msg_type"] != "error", msg["content"]
                    if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                        printed.append(msg["content"]["text"].strip())
                    if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                        break
            assert printed == ["success", "success"]
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=False)
    stderr = log.read_text()
    for noise in EXIT_NOISE:
        assert noise not in stderr, stderr


# -- 2. offline token counts are estimates, and every place that shows them says so -------------------
def test_2_offline_token_counts_are_marked_as_estimates(ip, shell_ws):
    from tea_notebook.notebook.live import LiveView
    from tea_notebook.runtime.plots import plot_run
    from tea_notebook.runtime.render import header_html

    script = ScriptedModel([call("done", success=True, text="4")])
    result = ip.run_cell_magic("agent", f"tokens --model {script.name} --quiet", "What is 2 + 2?")
    total = result.prompt_tokens + result.completion_tokens
    assert total > 0
    assert f"tokens=~{total} (estimated" in repr(result)
    assert f"tokens=~{total} (estimated" in ip.display_formatter.formatters["text/plain"](result)
    assert f"~{total:,} tokens (estimated)" in header_html("a", result.model, "success", 1, total, 0.0)
    assert "(estimated" not in header_html("a", "openai/gpt-4.1-mini", "success", 1, total, 0.0)
    assert "(estimated: scripted model" in result.trajectory.text()
    assert "estimated" in plot_run(result.trajectory).axes[0].get_ylabel()
    [row] = [r for r in ip.run_line_magic("tea", "runs") if r["run"] == result.run_id]
    assert row["tokens"] == f"~{total:,} (estimated)"
    # the live view's header is header_html: the same note while the run goes
    view = LiveView(display=False)
    from tea_notebook.runtime.events import Event

    view(Event("e", "r", "run_started", time.time(), {"agent": "a", "task": "t", "model": script.name}, None, None, 1))
    assert "tokens (estimated)" in view.html()


# -- 4. every README example runs as written, inline ones included ------------------------------------
def test_4_readme_inline_examples_run_and_a_wrong_one_is_caught(ip, shell_ws):
    from test_readme import inline_examples, notebook_section, run_inline_examples

    section = notebook_section()
    assert 'tools.detail("fetch_page")' not in section and 'tools.detail("convert_temperature")' in section
    assert "tools.rows" in inline_examples(section)
    ip.run_cell_magic(
        "tool",
        "--category math",
        'def convert_temperature(value: float, unit: str = "C") -> float:\n'
        '    """Convert a temperature between Celsius and Fahrenheit."""\n'
        '    return value * 9 / 5 + 32 if unit == "C" else (value - 32) * 5 / 9\n',
    )
    ran = run_inline_examples(ip, section)
    assert "tools = %tea tools" in ran and 'tools.detail("convert_temperature")' in ran
    # the example the README used to have: now caught
    with pytest.raises(AssertionError, match=r'README example `tools.detail\("fetch_page"\)` failed'):
        run_inline_examples(ip, 'from Python `tools = %tea tools`, `tools.detail("fetch_page")`')
