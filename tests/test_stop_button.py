"""The live view's Stop button, and the other ``%%agent`` run control, ``--grant``.

The button cannot use widget messages (``%%agent`` keeps the kernel busy), so it asks the Jupyter
server to interrupt the kernel. The end-to-end test does exactly what a person does: a real
``jupyter server`` (token auth) starts a kernel through its REST API, the kernel runs a slow
scripted ``%%agent`` cell, the live view HTML the kernel sent is opened in Chromium from the server
(logged in with the token, so the page has the server's ``_xsrf`` cookie), the Stop button is
clicked, and the run must end as ``interrupted`` within 2 s with the kernel still usable.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
import time
import types
from pathlib import Path
from typing import Any

import pytest
from event_factory import event
from jupyter_process import JupyterProcess, launch_chromium, running

from tea_notebook.notebook import live
from tea_notebook.notebook.live import LiveView, kernel_id, stop_button_html
from tea_notebook.runtime.events import Event

MIME = "application/vnd.tea.trajectory+json"
KERNEL_ID = "0b7e5f6a-1234-4abc-9def-0123456789ab"


def started_view(kernel: str | None) -> LiveView:
    view = LiveView(interval=0, display=False, kernel=kernel)
    view(event("run_started", agent="agent", task="Do it.", model="tea/test"))
    return view


# -- the button in the view ---------------------------------------------------------------------------
def test_the_running_view_has_a_stop_button_that_asks_the_server_to_interrupt():
    view = started_view(KERNEL_ID)
    html_text = view.html()
    buttons = re.findall(r"<button[^>]*>[^<]*</button>", html_text)
    assert len(buttons) == 1 and buttons[0].endswith(">Stop</button>")
    button = buttons[0]
    assert f"data-kernel='{KERNEL_ID}'" in button and "class='tea-stop'" in button
    handler = re.search(r'onclick="([^"]*)"', button).group(1).replace("&amp;", "&").replace("&quot;", '"')
    for piece in (
        "getElementById('jupyter-config-data')",
        "baseUrl",
        "'api/kernels/'+b.dataset.kernel+'/interrupt'",
        "method:'POST'",
        "'X-XSRFToken'",
        "_xsrf=",
        "credentials:'same-origin'",
        "textContent='stopping…'",
    ):
        assert piece in handler, piece
    assert "<" not in handler and ">" not in handler
    assert "interrupt the kernel (■) to stop" in html_text  # the hint stays next to it

    view.mark_stopping()
    stopping = view.html()
    assert "<button" not in stopping and "stopping…" in stopping

    view(event("run_finished", status="interrupted"))
    done = view.html()
    assert "<button" not in done and "interrupted" in done and "to stop" not in done


def test_without_a_kernel_there_is_only_the_hint():
    html_text = started_view(None).html()
    assert "<button" not in html_text and "interrupt the kernel (■) to stop" in html_text


def test_the_button_only_takes_kernel_ids():
    assert f"data-kernel='{KERNEL_ID}'" in stop_button_html(KERNEL_ID)
    with pytest.raises(ValueError):
        stop_button_html("x' onmouseover='alert(1)")


def test_the_kernel_id_comes_from_the_connection_file_name(monkeypatch):
    assert kernel_id() is None  # not in a kernel here (whether or not ipykernel was imported)
    fake_connect = types.ModuleType("ipykernel.connect")
    files = iter([f"/run/user/0/jupyter/runtime/kernel-{KERNEL_ID}.json", "/tmp/kernel-12345.json"])
    fake_connect.get_connection_file = lambda: next(files)
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    monkeypatch.setitem(sys.modules, "ipykernel.connect", fake_connect)
    assert kernel_id() == KERNEL_ID
    assert kernel_id() is None  # a name without a server's kernel id: no button

    def not_in_a_kernel():
        raise RuntimeError("app not specified, and not in a running Kernel")

    fake_connect.get_connection_file = not_in_a_kernel
    assert kernel_id() is None
    assert started_view(None).kernel is None
    monkeypatch.setattr(live, "kernel_id", lambda: KERNEL_ID)
    assert LiveView(display=False).kernel == KERNEL_ID


# -- %%agent in a plain IPython shell: no button, and --grant ---------------------------------------
@pytest.fixture
def shell_ws(ip, tmp_path):
    import tea_notebook

    path = tmp_path / "ws"
    tea_notebook.Workspace(path, embedder="hashing").close()
    ip.run_line_magic("tea", f"workspace {path}")
    ip.run_cell_magic(
        "tool",
        "",
        textwrap.dedent(
            '''
            from tea_notebook import ToolContext

            def granted(ctx: ToolContext) -> str:
                """The permissions granted to this run."""
                return ",".join(sorted(ctx.context.grants)) or "(none)"
            '''
        ),
    )
    return ip.magics_manager.registry["TeaMagics"].workspace


def test_grant_reaches_the_runs_context(ip, shell_ws):
    from tea_notebook.models.offline import ScriptedModel, call

    def script() -> ScriptedModel:
        return ScriptedModel([call("granted"), call("done", success=True, text="ok", files_to_display=[])])

    first = script()
    result = ip.run_cell_magic(
        "agent", f"--model {first.name} --tools granted --grant kernel.write --grant fs.read --quiet", "Check."
    )
    assert result.status == "success"
    observation = result.trajectory.steps[0].actions[0]["observation"]
    assert observation == "fs.read,kernel.write"

    second = script()
    again = ip.run_cell_magic("agent", f"--model {second.name} --tools granted --quiet", "Check.")
    assert again.trajectory.steps[0].actions[0]["observation"] == "(none)"  # grants are per run
    assert "--grant" in ip.find_cell_magic("agent").__doc__


def test_a_plain_shell_shows_no_stop_button(ip, shell_ws, shown):
    assert ip.run_cell_magic("agent", "--model tea/test --tools granted", "Check.").status == "success"
    assert len(shown) >= 2 and not any("<button" in h for h in shown), shown
    assert any("interrupt the kernel (■) to stop" in h for h in shown), [
        re.sub("<style>.*?</style>", "", h)[:300] for h in shown
    ]


def test_the_live_view_follows_only_its_cells_run_tree():
    import asyncio

    from tea_notebook.runtime.jobs import RunTree

    seen: list[str] = []
    follow = RunTree("cellctx", lambda e: seen.append(e.run_id))

    def emit(run_id: str, parent: str | None = None, root: str | None = None) -> None:
        follow(
            Event(id=run_id, run_id=run_id, type="step", time=0.0, data={"root_run": root or run_id}, parent_id=parent)
        )

    async def the_cells_run() -> str:
        emit("mine")  # emitted inside the cell's run: it is the cell's, whatever its root says
        await asyncio.sleep(0)
        return "done"

    emit("other")  # another run of the workspace
    assert asyncio.run(follow.run(the_cells_run())) == "done"
    emit("mine")  # later events of a known run (from any thread)
    emit("child", parent="mine")  # a sub-agent of it
    emit("grandchild", parent="child")
    emit("stranger", parent="other")
    emit("rooted", root="cellctx")  # a run that names the cell's context as its root
    assert seen == ["mine", "mine", "child", "grandchild", "rooted"]


# -- the real thing: a Jupyter server, a kernel, Chromium ----------------------------------------------
class Server(JupyterProcess):
    """A ``jupyter server`` subprocess with token auth; ``api(...)`` calls its REST API."""

    def __init__(self, root: Path, home: Path):
        super().__init__("jupyter_server", root, home)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("jupyter_server")
    pytest.importorskip("ipykernel")
    yield from running(Server, tmp_path_factory)


@pytest.fixture(scope="module")
def chromium():
    yield from launch_chromium()


class KernelClient:
    """A jupyter_client client on a kernel the server started (through its connection file)."""

    def __init__(self, connection_file: Path):
        from jupyter_client import BlockingKernelClient

        self.kc = BlockingKernelClient(connection_file=str(connection_file))
        self.kc.load_connection_file()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def iopub_until_idle(self, msg_id: str, timeout: float = 60) -> list[dict[str, Any]]:
        from kernel_driver import iopub_until_idle

        return iopub_until_idle(self.kc, msg_id, time.monotonic() + timeout)

    def reply(self, msg_id: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            msg = self.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg["content"]

    def ok(self, code: str, timeout: float = 60) -> list[dict[str, Any]]:
        msg_id = self.kc.execute(code)
        content = self.reply(msg_id, timeout)
        iopub = self.iopub_until_idle(msg_id, timeout)
        assert content["status"] == "ok", (code, content, [m["content"] for m in iopub if m["msg_type"] == "error"])
        return iopub

    def value(self, expr: str) -> Any:
        iopub = self.ok(f"import json as _json\nprint('@@' + _json.dumps({expr}))")
        text = "".join(m["content"]["text"] for m in iopub if m["msg_type"] == "stream")
        return json.loads(next(x for x in text.splitlines() if x.startswith("@@"))[2:])


SLOW = '''
import time

def slow(i: int) -> str:
    """Wait a little, then return i."""
    time.sleep(0.2)
    return f"slow {i}"
'''


@pytest.mark.slow
def test_stop_button_interrupts_the_run_through_the_jupyter_server(server, chromium, tmp_path):
    kernel = server.api("POST", "api/kernels", {"name": "tea-test"})["id"]
    connection_file = server.runtime / f"kernel-{kernel}.json"
    deadline = time.monotonic() + 30
    while not connection_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    k = KernelClient(connection_file)
    try:
        assert k.value("__import__('sys').executable") == sys.executable
        k.ok("%load_ext tea_notebook")
        k.ok(f'%config TeaMagics.workspace_path = "{tmp_path / "ws"}"')
        assert k.value("__import__('tea_notebook.notebook.live').notebook.live.kernel_id()") == kernel
        k.ok(f"%%tool\n{SLOW.strip()}\n")
        k.ok("%%agent --model tea/test --tools slow --quiet\nWarm up.")  # litellm imported, provider registered
        k.ok(
            "from tea_notebook.models.offline import ScriptedModel, call\n"
            "script = ScriptedModel([call('slow', i=i) for i in range(100)]"
            " + [call('done', success=True, text='all done', files_to_display=[])])"
        )
        model = k.value("script.name")

        # run the slow cell and take the live view the kernel sends while it runs
        msg_id = k.kc.execute(f"%%agent --model {model} --tools slow\nCall slow a hundred times.")
        iopub: list[dict[str, Any]] = []
        live_html = None
        deadline = time.monotonic() + 30
        while live_html is None and time.monotonic() < deadline:
            msg = k.kc.get_iopub_msg(timeout=30)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            iopub.append(msg)
            html_text = msg["content"].get("data", {}).get("text/html", "")
            if msg["msg_type"] == "update_display_data" and "class='tea-stop'" in html_text and "step 2" in html_text:
                live_html = html_text
        assert live_html is not None, [m["msg_type"] for m in iopub]
        assert f"data-kernel='{kernel}'" in live_html

        # the output as a Jupyter page shows it: same origin as the server, with its config data
        page_file = server.root / "live-view.html"
        page_file.write_text(
            "<!doctype html><html><head><meta charset='utf-8'>"
            '<script id="jupyter-config-data" type="application/json">{"baseUrl": "/"}</script>'
            f"</head><body>{live_html}</body></html>",
            encoding="utf-8",
        )
        # The server serves /files/ under "CSP: sandbox allow-scripts" (an opaque origin: no cookies,
        # no same-origin requests) so that stored HTML cannot act on the server. JupyterLab's page,
        # where live output really renders, has no sandbox; bypass_csp gives this page the same footing.
        context = chromium.new_context(bypass_csp=True)
        page = context.new_page()
        assert page.goto(f"{server.url}?token={server.token}").ok  # logs in: auth and _xsrf cookies
        assert {"_xsrf"} <= {c["name"] for c in context.cookies()}
        interrupts: list[int] = []
        page.on(
            "response",
            lambda r: interrupts.append(r.status) if r.url.endswith(f"/api/kernels/{kernel}/interrupt") else None,
        )
        assert page.goto(f"{server.url}files/{page_file.name}", referer=server.url).ok
        button = page.locator("button.tea-stop")
        assert button.count() == 1 and button.inner_text() == "Stop"
        clicked = time.monotonic()
        button.click()
        assert button.inner_text() == "stopping…" and button.is_disabled()

        content = k.reply(msg_id, timeout=30)
        replied = time.monotonic() - clicked
        iopub += k.iopub_until_idle(msg_id, timeout=30)
        page.wait_for_timeout(100)
        assert interrupts == [204], interrupts  # the server accepted the interrupt (XSRF and auth passed)
        assert button.inner_text() == "stopping…"
        context.close()

        print(f"the cell replied {replied:.2f} s after the click")
        assert replied < 2.0, f"the cell replied {replied:.2f} s after the click"
        assert content["status"] == "ok", content
        results = [m["content"] for m in iopub if m["msg_type"] == "execute_result"]
        assert len(results) == 1 and results[0]["data"][MIME]["status"] == "interrupted"
        steps = results[0]["data"][MIME]["steps"]
        assert 2 <= len(steps) < 30  # the trajectory so far is kept, and it stopped early
        updates = [m["content"]["data"].get("text/html", "") for m in iopub if m["msg_type"] == "update_display_data"]
        assert any("stopping…" in u and "tea-stop" not in u for u in updates)  # the view showed the stop
        assert "interrupted" in updates[-2] and "tea-stop" not in updates[-2]  # it ended with no button
        assert updates[-1] == ""  # then gave way to the result below (one header in the cell)

        # the kernel goes on, and the run is stored as interrupted
        assert k.value("1 + 1") == 2
        assert (
            k.value("[r['status'] for r in get_ipython().magics_manager.registry['TeaMagics'].workspace.runs()]")[0]
            == "interrupted"
        )
        calls = k.value("len(script.calls)")
        time.sleep(0.5)
        assert k.value("len(script.calls)") == calls  # nothing runs on in the background
        assert server.api("GET", f"api/kernels/{kernel}")["execution_state"] == "idle"
    finally:
        k.kc.stop_channels()
        server.api("DELETE", f"api/kernels/{kernel}")
