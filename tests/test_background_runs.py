"""Background runs: ``agent.start(task)`` and ``%%agent --background`` return at once with a handle
while the run goes on in the library's background loop, the kernel free for other cells.

Python-level tests drive handles directly in a workspace; kernel tests go through a real ipykernel
(jupyter_client) the way JupyterLab does: the cell's reply comes back while the run still goes, other
cells run meanwhile, the live view's updates after the cell ended are messages *of that cell* (their
parent is its request, which is how a front end finds the output to update), the Stop button is a
widget whose click (a comm message, as the browser sends it) stops only that run.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
from kernel_driver import Kernel, make_kernel_specs, start_kernel, tool_cell
from test_notebook_kernel import MIME

import tea_notebook
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.runtime.jobs import Runnable

pytestmark = pytest.mark.usefixtures("warm_litellm")  # timings measure the runs, not litellm's first import.


def slow_tools(ws: tea_notebook.Workspace, seconds: float = 0.05) -> list[str]:
    calls: list[int] = []

    @ws.tools.tool
    def tick(i: int) -> str:
        """Wait a little and return i."""
        time.sleep(seconds)
        calls.append(i)
        return f"tick {i}"

    return calls


def ticking(n: int, answer: str = "ticked") -> ScriptedModel:
    return ScriptedModel([call("tick", i=i) for i in range(n)] + [call("done", success=True, text=answer)])


# == the handle ======================================================================================
def test_start_returns_at_once_and_result_waits(ws):
    calls = slow_tools(ws, 0.05)
    agent = ws.agent("bg", tools=["tick"], max_steps=500, model=ticking(20).name)
    started = time.perf_counter()
    handle = agent.start("Tick twenty times.")
    assert time.perf_counter() - started < 0.2
    assert handle.status == "running" and not handle.done()
    with pytest.raises(TimeoutError, match="still running"):
        handle.result(timeout=0.01)
    result = handle.result(timeout=30)
    assert (result.status, result.answer, result.steps) == ("success", "ticked", 21)
    assert handle.status == "success" and handle.done() and handle.run_id == result.run_id
    assert calls == list(range(20))
    assert list(ws.jobs) == [handle] and ws.jobs.running() == []
    row = ws.jobs.rows()[0]
    assert (row["run"], row["agent"], row["status"], row["error"]) == (result.run_id, "bg", "success", "")
    # the run is stored like a foreground one
    assert ws.trajectory(result.run_id).status == "success"


def test_two_background_runs_and_a_foreground_one_share_the_workspace(ws):
    slow_tools(ws, 0.02)
    a = ws.agent("a", tools=["tick"], max_steps=500, model=ticking(15, "A").name).start("Tick as A.")
    b = ws.agent("b", tools=["tick"], max_steps=500, model=ticking(15, "B").name).start("Tick as B.")
    # the caller's thread is free: a foreground run goes on while both background runs do
    fg = ws.agent("fg", tools=["tick"], max_steps=500, model=ticking(5, "F").name).run_sync("Tick in front.")
    assert fg.answer == "F"
    assert a.status in ("running", "success") and b.status in ("running", "success")
    results = [h.result(30) for h in (a, b)]
    assert [r.answer for r in results] == ["A", "B"]
    for r, n in zip([*results, fg], (15, 15, 5)):
        events = ws.events.events(r.run_id, nested=False)
        assert {e.run_id for e in events} == {r.run_id}
        assert sum(e.type == "tool_result" for e in events) == n  # nothing of the other runs mixed in
        assert [e.step for e in events if e.type == "step"] == list(range(1, n + 2))
    assert [h.status for h in ws.jobs] == ["success", "success"]


def test_cancel_stops_only_that_run_and_keeps_its_trajectory(ws):
    calls = slow_tools(ws, 0.05)
    long = ws.agent("long", tools=["tick"], max_steps=500, model=ticking(400).name).start("Tick for long.")
    other = ws.agent("other", tools=["tick"], max_steps=500, model=ticking(10, "other").name).start("Tick a bit.")
    deadline = time.monotonic() + 10
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    asked = time.monotonic()
    assert long.cancel(wait=5) == "interrupted"
    assert time.monotonic() - asked < 2.0
    assert other.result(30).status == "success"  # the other run went on
    done_then = len([c for c in calls if c >= 0])
    time.sleep(0.3)
    assert len(calls) == done_then  # nothing of the stopped run goes on behind it
    tr = ws.trajectory(long.run_id)
    assert tr.status == "interrupted" and 1 <= len(tr.steps) < 400


def test_an_exception_that_escapes_a_run_stays_on_its_handle(ws):
    class Exploding(Runnable):
        """A run whose coroutine raises (a bug, not a task failure)."""

        def __init__(self, workspace: tea_notebook.Workspace):
            self.workspace, self.name = workspace, "exploding"

        async def run(self, task: str, files: list[str] | None = None, **kwargs: Any) -> Any:
            await asyncio.sleep(0.05)
            raise RuntimeError(f"boom while doing {task!r}")

    seen: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: seen.append(args.exc_value)
    try:
        handle = Exploding(ws).start("the job")
        ended = threading.Event()
        handle.add_done_callback(lambda h: ended.set())
        assert ended.wait(5)
        assert handle.status == "error"
        assert handle.error == "RuntimeError: boom while doing 'the job'"
        assert ws.jobs.rows()[0]["error"] == "RuntimeError: boom while doing 'the job'"
        with pytest.raises(RuntimeError, match="boom"):
            handle.result(1)
        # a callback added after the end runs at once; one that raises is ignored
        late: list[str] = []
        handle.add_done_callback(lambda h: late.append(h.status))
        handle.add_done_callback(lambda h: 1 / 0)
        assert late == ["error"]
    finally:
        threading.excepthook = previous
    assert seen == []


def test_await_a_handle_in_async_code(ws):
    """``await handle`` on another event loop (a notebook cell's) than the background one."""
    slow_tools(ws, 0.01)
    handle = ws.agent("aw", tools=["tick"], max_steps=500, model=ticking(3, "awaited").name).start("Tick thrice.")

    async def cell() -> Any:
        return await handle

    result = asyncio.new_event_loop().run_until_complete(cell())
    assert result.answer == "awaited" and handle.status == "success"


def test_model_options_apply_to_the_background_run_only(ws, monkeypatch):
    """``%%agent --background --api-base URL`` passes its server to this run's model calls."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connecting is refused
    url = f"http://127.0.0.1:{port}/v1"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    agent = ws.agent("remote", tools=[], model="openai/gpt-4o-mini")
    handle = agent.start("Say hi.", model_options={"api_base": url})
    result = handle.result(30)
    assert result.status == "error" and f"cannot reach {url}" in (result.error or "")
    assert ws.context().model_options == {}  # nothing leaks into other runs


def test_every_agent_kind_can_start(ws):
    """Agents, workflow agents and CORAL teams share one start/run_sync (the Runnable mixin)."""
    from tea_notebook.agents.coral import CoralTeam
    from tea_notebook.agents.workflow import WorkflowAgent
    from tea_notebook.runtime.agent import Agent

    for kind in (Agent, WorkflowAgent, CoralTeam):
        assert issubclass(kind, Runnable)
        assert kind.start is Runnable.start and kind.run_sync is Runnable.run_sync
        assert kind.run is not Runnable.run


# == in a real kernel ===============================================================================
@pytest.fixture(scope="module")
def bk(tmp_path_factory):
    specs = make_kernel_specs(tmp_path_factory.mktemp("kernels"))
    k = start_kernel(specs, tmp_path_factory.mktemp("bg-kernel"))
    try:
        k.ok("%load_ext tea_notebook")
        k.ok(f"%tea workspace {tmp_path_factory.mktemp('bg-ws')}")
        tool_cell(
            k,
            '''
            import time

            def tick(i: int) -> str:
                """Wait a little and return i."""
                time.sleep(0.05)
                return f"tick {i}"
            ''',
        )
        k.ok("from tea_notebook.models.offline import ScriptedModel, call")
        k.ok("ws = %tea workspace")
        yield k
    finally:
        k.close()


def scripted(k: Kernel, var: str, n: int, answer: str) -> str:
    k.ok(
        f"{var} = ScriptedModel([call('tick', i=i) for i in range({n})] + [call('done', success=True, text={answer!r})])"
    )
    return k.json(f"{var}.name")


def messages_of(k: Kernel, parent: str, until: float, stop: Any) -> list[dict[str, Any]]:
    """iopub messages whose parent is ``parent``, read until ``stop(messages)`` or the deadline."""
    out: list[dict[str, Any]] = []
    while time.monotonic() < until and not stop(out):
        try:
            msg = k.kc.get_iopub_msg(timeout=0.2)
        except Exception:  # noqa: BLE001 - queue.Empty
            continue
        if msg["parent_header"].get("msg_id") == parent:
            out.append(msg)
    return out


def finished(messages: list[dict[str, Any]]) -> bool:
    """Whether one of ``messages`` is the view's last update: the run's stored trajectory (the live
    view's own updates say ``live`` in their metadata)."""
    return any(
        m["msg_type"] == "update_display_data"
        and MIME in m["content"]["data"]
        and not m["content"].get("metadata", {}).get(MIME, {}).get("live")
        for m in messages
    )


def test_background_cell_returns_at_once_and_its_view_updates_after(bk):
    model = scripted(bk, "m1", 30, "done in the background")
    sent = time.monotonic()
    cell = bk.send(
        f"%%agent bg1 --background --model {model} --tools tick --max-steps 500 --out job\nTick thirty times."
    )
    ex = bk.wait(cell, timeout=30, sent=sent)
    assert ex.status == "ok", ex.reply["content"]
    assert ex.elapsed < 1.5, f"the cell took {ex.elapsed:.2f} s: it waited for the run"
    shown = ex.of_type("display_data")
    view_ids = [
        m["content"]["transient"]["display_id"]
        for m in shown
        if "class='tea-t'" in m["content"]["data"].get("text/html", "")
    ]
    assert len(view_ids) == 1
    widgets = [m for m in shown if "application/vnd.jupyter.widget-view+json" in m["content"]["data"]]
    assert len(widgets) == 1  # the Stop button
    # the cell's value, the handle, is a line of its own that will change when the run ends
    assert not ex.of_type("execute_result")
    line = [m["content"] for m in shown if "running in the background" in m["content"]["data"].get("text/html", "")]
    assert len(line) == 1 and line[0]["transient"]["display_id"] not in view_ids
    run_id = bk.json("job.run_id")  # the cell waited for the run to start (not to end): its value names it
    assert run_id and f"<code>{run_id}</code>" in line[0]["data"]["text/html"]
    assert bk.json("_ is job")  # still the cell's value
    # the kernel is free: another cell runs while the run goes on
    assert bk.json("job.status") == "running"
    assert bk.ok("21 * 2").result["data"]["text/plain"] == "42"
    # the view's updates after the cell ended are still messages of that cell, up to the final one;
    # and the handle's line is updated to the final status
    line_id = line[0]["transient"]["display_id"]

    def line_updated(messages: list[dict[str, Any]]) -> bool:
        return any(m["content"].get("transient", {}).get("display_id") == line_id for m in messages)

    updates = messages_of(bk, cell, time.monotonic() + 30, lambda ms: finished(ms) and line_updated(ms))
    kinds = [m["msg_type"] for m in updates]
    assert kinds and set(kinds) <= {"update_display_data", "comm_close", "comm_msg"}, kinds
    final = [m for m in updates if finished([m])][-1]["content"]
    assert final["transient"]["display_id"] == view_ids[0]
    assert final["data"][MIME]["status"] == "success" and final["data"][MIME]["answer"] == "done in the background"
    ended = [m["content"] for m in updates if m["content"].get("transient", {}).get("display_id") == line_id]
    assert len(ended) == 1, kinds
    assert "ended: success" in ended[0]["data"]["text/html"] and "running" not in ended[0]["data"]["text/html"]
    assert ended[0]["data"]["text/plain"].startswith("RunHandle('bg1', success, ")
    assert bk.json("[job.status, job.result(5).steps]") == ["success", 31]


def test_the_stop_widget_stops_only_its_run(bk):
    slow = scripted(bk, "m2", 400, "never")
    quick = scripted(bk, "m3", 10, "quick one")
    ex = bk.ok(f"%%agent long --background --model {slow} --tools tick --max-steps 500 --out long\nTick for long.")
    button = next(
        m["content"]["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
        for m in ex.of_type("display_data")
        if "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
    )
    bk.ok(f"%%agent short --background --model {quick} --tools tick --max-steps 500 --out short\nTick a bit.")
    time.sleep(0.5)
    jobs = bk.ok("%tea jobs")
    assert "application/vnd.jupyter.widget-view+json" in jobs.result["data"]
    table = jobs.result["data"]["text/html"]
    assert "long" in table and "short" in table and "running" in table
    # the browser's click on the Stop button: a comm message to the button's model
    clicked = time.monotonic()
    bk.kc.shell_channel.send(
        bk.kc.session.msg("comm_msg", {"comm_id": button, "data": {"method": "custom", "content": {"event": "click"}}})
    )
    deadline = time.monotonic() + 5
    while bk.json("long.status") != "interrupted" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert bk.json("long.status") == "interrupted"
    assert time.monotonic() - clicked < 3
    assert bk.json("short.result(30).answer") == "quick one"
    rows = bk.json("[[r['agent'], r['status']] for r in ws.jobs.rows()]")
    assert ["long", "interrupted"] in rows and ["short", "success"] in rows


def test_a_background_run_that_errors_says_so_in_its_view_not_in_other_cells(bk):
    bk.ok(
        "def broken(messages, tools):\n"
        "    raise ValueError('the scripted model broke')\n"
        "bad = ScriptedModel(broken).name"
    )
    model = bk.json("bad")
    cell = bk.send(f"%%agent fails --background --model {model} --out failing\nFail.")
    ex = bk.wait(cell, timeout=30)
    assert ex.status == "ok", ex.reply["content"]  # the cell that started it does not raise either
    assert not ex.of_type("error")

    updates = ex.iopub if finished(ex.iopub) else ex.iopub + messages_of(bk, cell, time.monotonic() + 20, finished)
    final = [m for m in updates if finished([m])][-1]["content"]["data"]
    later = bk.ok("'an unrelated cell'")
    assert not later.of_type("error") and not [m for m in later.of_type("stream") if m["content"]["name"] == "stderr"]
    assert final[MIME]["status"] == "error"
    assert bk.json("failing.status") == "error"
    assert "the scripted model broke" in bk.json("failing.error")
    jobs = bk.ok("%tea jobs").result["data"]["text/html"]
    assert "fails" in jobs and "error" in jobs and "the scripted model broke" in jobs


def test_background_with_quiet_has_no_view_and_the_handle_reads_as_text(bk):
    model = scripted(bk, "m4", 2, "quiet")
    ex = bk.ok(f"%%agent q --background --quiet --model {model} --tools tick --max-steps 500 --out qh\nTick twice.")
    shown = ex.of_type("display_data")
    assert len(shown) == 1 and MIME not in shown[0]["content"]["data"]  # only the handle's line: no view
    text = shown[0]["content"]["data"]["text/plain"]
    assert text.startswith("RunHandle('q', ")
    assert json.loads(json.dumps(bk.json("qh.result(10).answer"))) == "quiet"


def test_the_first_model_call_imports_litellm_off_the_loop(tmp_path):
    """litellm's first import takes seconds; made on the shared loop it would freeze every other run and
    live view (a second background run would not even start). In a fresh process: the loop keeps
    ticking while the first run imports it. (Offline ``tea/`` models never import litellm, so the
    run calls a hosted-model name whose local server refuses the connection at once.)"""
    import subprocess
    import sys

    code = f"""
import asyncio, sys, time
import tea_notebook
from tea_notebook._sync import submit
assert "litellm" not in sys.modules
ws = tea_notebook.Workspace({str(tmp_path / "ws")!r}, embedder="hashing")
gaps = []
async def heartbeat(stop):
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0.01)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
import threading
stop = threading.Event()
beat = submit(heartbeat(stop))
started = time.perf_counter()
scripted = ws.agent("s", tools=[], model="tea/test").run_sync("Hello.")
assert "litellm" not in sys.modules, "a scripted run imported litellm"
started = time.perf_counter()
try:
    result = ws.agent("a", tools=[], model="openai/gpt-4o-mini").start("Hello.").result(60)
except Exception as exc:  # RunFailed: the refused connection ends the run in error
    result = exc.result
took = time.perf_counter() - started
stop.set(); beat.result(5)
assert "litellm" in sys.modules and result.status == "error" and "cannot reach" in result.error, result
print(round(took, 2), round(max(gaps), 3))
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **__import__("os").environ,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "OPENAI_API_BASE": "http://127.0.0.1:9/v1",  # the discard port: nothing listens
        },
    )
    assert out.returncode == 0, out.stderr[-2000:]
    took, worst_gap = map(float, out.stdout.split())
    assert took > 0.5  # the run did pay for the import ...
    assert worst_gap < took / 3, (took, worst_gap)  # ... but the loop was not frozen for it
