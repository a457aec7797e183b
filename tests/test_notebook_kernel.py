"""The notebook layer through real Jupyter kernels: ``%load_ext``, ``%%tool`` and ``%%agent`` as a
front end sees them, i.e. the shell replies and the iopub messages (live view, rich results,
errors, interrupts). Models are offline (``tea/test``, ``tea/demo``, ``ScriptedModel``)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import textwrap
import time
from typing import Any

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from jupyter_client import KernelManager  # noqa: E402
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from kernel_driver import (  # noqa: E402
    KERNEL,
    Kernel,
    agent_cell,
    make_kernel_specs,
    start_kernel,
    tool_cell,
)

pytestmark = pytest.mark.slow

MIME = "application/vnd.tea.trajectory+json"


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory) -> KernelSpecManager:
    return make_kernel_specs(tmp_path_factory.mktemp("kernels"))


@pytest.fixture(scope="module")
def loaded(kernel_specs, tmp_path_factory):
    """One kernel for the module; ``%load_ext tea_notebook`` timed as its first cell."""
    k = start_kernel(kernel_specs, tmp_path_factory.mktemp("kernel-cwd"))
    try:
        assert k.json("__import__('sys').executable") == sys.executable
        assert k.json("'tea_notebook' in __import__('sys').modules") is False
        load = k.run("%load_ext tea_notebook")
        yield k, load
    finally:
        k.close()


@pytest.fixture
def kernel(loaded, tmp_path) -> Kernel:
    """The module's kernel switched to a fresh workspace in this test's tmp_path."""
    k, _ = loaded
    k.workspace(tmp_path / "ws")
    return k


def walk_keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in walk_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in walk_keys(v)}
    return set()


# -- %load_ext ------------------------------------------------------------------------------
def test_load_ext_succeeds_quickly(loaded):
    k, load = loaded
    assert load.status == "ok", load.reply["content"]
    assert not load.of_type("error")
    assert not [m for m in load.of_type("stream") if m["content"]["name"] == "stderr"]
    assert load.elapsed < 1.0, f"%load_ext tea_notebook took {load.elapsed:.2f} s"
    # heavy dependencies stay unloaded until first use
    assert k.json("[m for m in ('litellm', 'faiss', 'onnxruntime') if m in __import__('sys').modules]") == []
    assert k.json("sorted(get_ipython().magics_manager.magics['cell']).count('agent')") == 1
    assert set(k.json("sorted(get_ipython().magics_manager.magics['line'])")) >= {"tea"}
    assert set(k.json("sorted(get_ipython().magics_manager.magics['cell'])")) >= {"tool", "agent"}


# -- %%tool -----------------------------------------------------------------------------------
SHOUT = '''@tagged(
    "loud",
)
@logged
def shout(text: str) -> str:
    """Repeat the text in capitals.

    Args:
        text: what to repeat
    """
    return text.upper()'''

COUNT = '''def count_words(text: str) -> int:
    """Count the words in a text."""
    words = [w for w in text.split() if w]

    return len(words)'''


def test_tool_magic_registers_the_cells_functions(kernel):
    kernel.ok(
        textwrap.dedent(
            """
            import functools

            def logged(fn):
                @functools.wraps(fn)
                def wrapper(*args, **kwargs):
                    return fn(*args, **kwargs)
                return wrapper

            def tagged(label):
                def deco(fn):
                    fn.label = label
                    return fn
                return deco
            """
        )
    )
    ex = kernel.ok(f"%%tool --category text\n{SHOUT}\n\n\n{COUNT}\n")
    shown = ex.result["data"]
    assert "shout" in shown["text/plain"] and "count_words" in shown["text/plain"]
    assert "<table>" in shown["text/html"]
    # they stay ordinary functions in the namespace
    assert kernel.json("[shout('hi'), shout.label, count_words('a b  c')]") == ["HI", "loud", 3]
    stored = kernel.json(
        "{n: get_ipython().magics_manager.registry['TeaMagics'].workspace.tools.get(n).source"
        " for n in ('shout', 'count_words')}"
    )
    assert stored == {"shout": SHOUT, "count_words": COUNT}
    categories = kernel.json(
        "{r.name: r.category for r in get_ipython().magics_manager.registry['TeaMagics'].workspace.tools.list()}"
    )
    assert categories == {"shout": "text", "count_words": "text"}
    listing = kernel.ok("%tea tools").result["data"]
    for name in ("shout", "count_words"):
        assert name in listing["text/plain"] and f">{name}<" in listing["text/html"]
    assert "model_id" in listing["application/vnd.jupyter.widget-view+json"]  # the registry browser widget


# -- %%agent: live view and rich result ------------------------------------------------------
ADD = '''
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
'''


def test_agent_live_view_and_rich_result(kernel):
    tool_cell(kernel, ADD)
    ex = agent_cell(kernel, "Add two numbers.", "--model tea/test --tools add")
    assert ex.status == "ok", ex.reply["content"]
    kinds = [
        m["msg_type"] for m in ex.iopub if m["msg_type"] in ("display_data", "update_display_data", "execute_result")
    ]
    # one live display first, then in-place updates, then the final result
    assert kinds[0] == "display_data" and kinds[-1] == "execute_result"
    assert kinds.count("display_data") == 1 and kinds.count("update_display_data") >= 1
    assert set(kinds[1:-1]) == {"update_display_data"}
    first = ex.of_type("display_data")[0]["content"]
    display_id = first["transient"]["display_id"]
    assert display_id
    updates = ex.of_type("update_display_data")
    assert all(u["content"]["transient"]["display_id"] == display_id for u in updates)
    assert "starting" in first["data"]["text/html"]
    live = [u["content"]["data"]["text/html"] for u in updates]
    assert any("add(" in h and "step 1" in h for h in live)  # the steps appear while it runs
    assert "success" in live[-2] and "tea/test (scripted, not an LLM)" in live[-2]  # and it ends finished
    # ... then gives way to the result just below: the finished cell shows its header once
    assert updates[-1]["content"]["data"] == {"text/plain": "", "text/html": ""}
    assert ex.result["data"]["text/html"].count("<div class='h'>") == 1

    result = ex.result
    assert {MIME, "text/html", "text/plain"} <= set(result["data"])
    payload = result["data"][MIME]
    assert payload["status"] == "success" and payload["model"] == "tea/test (scripted, not an LLM)"
    assert [a["name"] for s in payload["steps"] for a in s["actions"]] == ["add", "done"]
    assert payload["steps"][0]["actions"][0]["observation"] == "2"  # tea/test calls add(a=1, b=1)
    # ids and times live in the metadata, never in the diffable payload
    run_id = result["metadata"][MIME]["run_id"]
    assert run_id and run_id not in json.dumps(payload) and run_id not in result["data"]["text/plain"]
    assert not walk_keys(payload) & {"run_id", "parent_id", "id", "forked_from", "time", "started", "ended", "latency"}
    stored = kernel.json(
        "[(r['id'], r['status']) for r in get_ipython().magics_manager.registry['TeaMagics'].workspace.runs()]"
    )
    assert stored == [[run_id, "success"]]

    # the same cell again gives the same payload: executed notebooks stay diffable
    again = agent_cell(kernel, "Add two numbers.", "--model tea/test --tools add").result
    assert again["metadata"][MIME]["run_id"] != run_id
    assert again["data"][MIME] == payload


def test_agent_out_binds_the_result_and_quiet_shows_no_live_view(kernel):
    tool_cell(kernel, ADD)
    ex = agent_cell(kernel, "Add two numbers.", "--model tea/test --tools add --out res --quiet")
    assert ex.status == "ok", ex.reply["content"]
    assert not ex.of_type("display_data", "update_display_data")
    run_id = ex.result["metadata"][MIME]["run_id"]
    bound = kernel.json("[type(res).__name__, res.run_id, res.status, res.steps, res.model, res.task, res is _]")
    assert bound == ["RunResult", run_id, "success", 2, "tea/test", "Add two numbers.", True]


def test_a_plot_shows_as_an_image_after_matplotlib_use_agg(kernel):
    """Tutorial 06's cell: ``matplotlib.use("Agg")`` drops IPython's PNG printer for figures; the
    library's figures render themselves, so the cell shows the plot, not ``<Figure size …>``."""
    tool_cell(kernel, ADD)
    agent_cell(kernel, "Add two numbers.", "--model tea/test --tools add --out res --quiet")
    ex = kernel.ok('import matplotlib\nmatplotlib.use("Agg")\nres.plot()')
    data = ex.result["data"]
    assert "image/png" in data, sorted(data)
    import base64

    assert base64.b64decode(data["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"


# -- escaping ----------------------------------------------------------------------------------
EVIL = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def test_model_and_tool_text_is_escaped_in_every_html_output(kernel):
    tool_cell(
        kernel,
        f'''
        def evil(x: int) -> str:
            """Return some hostile markup."""
            return {EVIL!r}
        ''',
    )
    ex = agent_cell(kernel, "Call evil <script>alert(3)</script> now.", "--model tea/test --tools evil")
    assert ex.status == "ok", ex.reply["content"]
    htmls = ex.htmls()
    assert len(htmls) >= 3 and ex.of_type("update_display_data")
    for html_text in htmls:
        assert "<script" not in html_text.lower()
        assert "<img" not in html_text.lower()
        assert not re.search(r"<[^<>]*onerror\s*=", html_text, re.I)
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"
    live = [m["content"]["data"]["text/html"] for m in ex.of_type("update_display_data")]
    final = ex.result["data"]["text/html"]
    assert any(escaped in h for h in live) and escaped in final
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in final  # the task too
    # the JSON payload keeps the real text (it is data, not markup)
    assert ex.result["data"][MIME]["steps"][0]["actions"][0]["observation"] == EVIL


# -- a very large observation ---------------------------------------------------------------------
def test_a_megabyte_observation_stays_out_of_the_display(kernel):
    tool_cell(
        kernel,
        '''
        def big(n: int) -> str:
            """Return a very long text."""
            return "ab" * 500_000
        ''',
    )
    ex = agent_cell(kernel, "Get the big text.", "--model tea/test --tools big")
    assert ex.status == "ok", ex.reply["content"]
    final = ex.result["data"]["text/html"]
    assert len(final) < 100_000
    assert "<details>" in final and "1,000,000 characters" in final
    assert "ab" * 300 in final  # the preview is there
    payload = ex.result["data"][MIME]
    assert len(json.dumps(payload)) < 100_000
    assert payload["steps"][0]["actions"][0]["observation"].startswith("ab" * 10_000)
    updates = ex.of_type("display_data", "update_display_data")
    assert len(updates) >= 2
    for m in updates:
        assert len(json.dumps(m["content"])) < 100_000
    # every message of the cell is small: the megabyte never goes to the front end
    assert max(len(json.dumps(m["content"])) for m in ex.iopub) < 200_000


# -- no model configured ---------------------------------------------------------------------------
def test_without_a_model_the_scripted_demo_runs_and_says_so(kernel):
    assert kernel.json("__import__('os').environ.get('TEA_MODEL')") is None
    tool_cell(
        kernel,
        '''
        def convert_temperature(value: float) -> float:
            """Convert a temperature in degrees Celsius to Fahrenheit."""
            return value * 9 / 5 + 32
        ''',
    )
    ex = agent_cell(kernel, "Convert 30 degrees Celsius to Fahrenheit.")
    assert ex.status == "ok", ex.reply["content"]
    payload = ex.result["data"][MIME]
    assert payload["model"] == "tea/demo (scripted, not an LLM)"
    # the demo model cannot check its answer: 'unverified', not 'success' (first-ten-minutes item 1)
    assert payload["status"] == "unverified" and payload["answer"].startswith("86.0")
    text = ex.result["data"]["text/plain"]
    assert "tea/demo (scripted, not an LLM)" in text and "TEA_MODEL" in text
    assert "TEA_MODEL" in ex.result["data"]["text/html"]
    live = " ".join(m["content"]["data"]["text/html"] for m in ex.of_type("update_display_data"))
    assert "No model is configured" in live and "TEA_MODEL=provider/model" in live
    assert kernel.json("[r['model'] for r in get_ipython().magics_manager.registry['TeaMagics'].workspace.runs()]") == [
        "tea/demo"
    ]


# -- errors -----------------------------------------------------------------------------------------
def test_a_failed_run_errors_the_cell(kernel):
    ex = agent_cell(kernel, "Say hello.", "--model tea/script:missing")
    assert ex.status == "error"
    content = ex.reply["content"]
    assert content["ename"] == "UsageError"
    assert "no scripted model 'missing'" in content["evalue"] and len(content["evalue"]) < 300
    assert not ex.of_type("execute_result")
    # the run is stored as an error
    assert kernel.json(
        "[r['status'] for r in get_ipython().magics_manager.registry['TeaMagics'].workspace.runs()]"
    ) == ["error"]
    # the kernel goes on
    assert kernel.ok("1 + 1").result["data"]["text/plain"] == "2"


def test_nbclient_stops_at_a_failed_agent_cell(kernel_specs, tmp_path):
    """What papermill / nbval do: execute a notebook and stop at the erroring cell."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext tea_notebook"),
        nbformat.v4.new_code_cell(f'%config TeaMagics.workspace_path = "{tmp_path / "ws"}"'),
        nbformat.v4.new_code_cell("%%agent --model tea/script:missing\nSay hello."),
        nbformat.v4.new_code_cell("reached = True"),
    ]
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    env.pop("TEA_MODEL", None)
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=kernel_specs)
    client = nbclient.NotebookClient(nb, km=km, timeout=120, resources={"metadata": {"path": str(tmp_path)}})
    with pytest.raises(CellExecutionError) as info:
        client.execute(env=env)
    assert "UsageError" in str(info.value) and "no scripted model 'missing'" in str(info.value)
    assert nb.cells[3].get("execution_count") is None  # the notebook stopped there
    assert (tmp_path / "ws" / "tea.db").exists() and not (tmp_path / ".tea").exists()


# -- interrupt ------------------------------------------------------------------------------------
def test_interrupt_stops_the_run_and_keeps_the_kernel(kernel_specs, tmp_path):
    k = start_kernel(kernel_specs, tmp_path)
    try:
        ws = tmp_path / "ws"
        k.ok("%load_ext tea_notebook")
        k.ok(f'%config TeaMagics.workspace_path = "{ws}"')
        tool_cell(
            k,
            '''
            import time

            def slow(i: int) -> str:
                """Wait a little, then return i."""
                time.sleep(0.2)
                return f"slow {i}"
            ''',
        )
        # warm up (litellm import, provider registration) so the interrupt lands in the loop
        assert agent_cell(k, "Warm up.", "--model tea/test --tools slow --quiet").status == "ok"
        k.ok(
            "from tea_notebook.models.offline import ScriptedModel, call\n"
            "script = ScriptedModel([call('slow', i=i) for i in range(100)]"
            " + [call('done', success=True, text='all done', files_to_display=[])])"
        )
        model = k.json("script.name")
        assert model.startswith("tea/script:")
        sent = time.monotonic()
        msg_id = k.send(f"%%agent --model {model} --tools slow\nCall slow a hundred times.")
        time.sleep(1.0)
        interrupted = time.monotonic()
        k.km.interrupt_kernel()
        ex = k.wait(msg_id, timeout=30)
        waited = time.monotonic() - interrupted
        assert waited < 2.0, f"the cell replied {waited:.2f} s after the interrupt"
        assert time.monotonic() - sent < 10
        assert ex.status == "ok", ex.reply["content"]
        assert ex.result["data"][MIME]["status"] == "interrupted"

        # the next cell runs normally
        assert k.ok("1 + 1").result["data"]["text/plain"] == "2"

        time.sleep(0.5)  # the run must really have stopped, not only the cell
        db = sqlite3.connect(ws / "tea.db")
        try:
            runs = db.execute("SELECT id, status FROM runs WHERE task=?", ("Call slow a hundred times.",)).fetchall()
            assert len(runs) == 1 and runs[0][1] == "interrupted"
            run_id = runs[0][0]
            counts = dict(db.execute("SELECT type, count(*) FROM events WHERE run_id=? GROUP BY type", (run_id,)))
            steps = [
                s
                for (s,) in db.execute("SELECT step FROM events WHERE run_id=? AND type='step' ORDER BY seq", (run_id,))
            ]
            finished = json.loads(
                db.execute("SELECT data FROM events WHERE run_id=? AND type='run_finished'", (run_id,)).fetchone()[0]
            )
        finally:
            db.close()
        assert counts["run_started"] == 1 and counts["run_finished"] == 1
        assert 2 <= counts["tool_result"] < 20, counts
        assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 2
        assert finished["status"] == "interrupted"
        calls_then = k.json("len(script.calls)")
        assert calls_then < 20
        time.sleep(0.5)
        assert k.json("len(script.calls)") == calls_then  # nothing runs in the background
    finally:
        k.close()


# -- ToolSelf and CORAL views ------------------------------------------------------------------------
TOOLSELF_SETUP = '''
import json
from tea_notebook.models.offline import ScriptedModel, call
ws = get_ipython().magics_manager.registry['TeaMagics'].workspace

@ws.tools.tool
def lookup(key: str) -> str:
    """Look up a value."""
    return {"x": "6"}.get(key, "?")

@ws.tools.tool
def mul(a: int, b: int) -> int:
    """Multiply two numbers."""
    return a * b

def staged(messages, tools):
    system, user = messages[0]["content"], messages[1]["content"]
    if "Agent Configuration Engineer" in system:
        first = "Iteration 1" not in user
        return json.dumps({"next_sub_goal": "find x" if first else "compute x*7", "execution_strategy": "As a Data Analyst",
                           "toolbox": ["lookup"] if first else ["mul"], "inter_agent_knowledge": "" if first else "ALL"})
    if "<sub_goal>find x<" in system:
        if "-> 6" in user:
            return call("reconfigure", execution_summary="x is 6", update_content="sub_goal", update_reason="x found",
                        new_sub_goal="compute x*7")
        return call("lookup", key="x")
    if "-> 42" in user:
        return call("finish", task_completion_status="complete", final_result="42",
                    execution_summary={"detailed_execution": ["looked up", "multiplied"], "tools_used": ["lookup", "mul"]})
    return call("mul", a=6, b=7)

staged_model = ScriptedModel(staged).name
'''


def test_toolself_live_view_shows_stages_with_sub_goal_and_toolbox(kernel):
    kernel.ok(TOOLSELF_SETUP)
    name = kernel.json("staged_model")
    ex = agent_cell(kernel, "What is x times 7?", f"staged --kind toolself --tools lookup,mul --model {name}")
    assert ex.status == "ok", ex.reply["content"]
    live = [m["content"]["data"]["text/html"] for m in ex.of_type("update_display_data")]
    # while it runs the view shows the stages as nested sections, each with its sub-goal and toolbox
    assert any("stage 1</b> · find x" in h and "<span class='badge'>lookup</span>" in h for h in live)
    result = ex.result
    payload = result["data"][MIME]
    assert payload["status"] == "success" and payload["answer"] == "42"
    assert [(s["index"], s["sub_goal"], s["toolbox"]) for s in payload["stages"]] == [
        (1, "find x", ["lookup"]),
        (2, "compute x*7", ["mul"]),
    ]
    html = result["data"]["text/html"]
    assert html.count("class='stage'") == 2 and "x found" in html  # the reason stage 2 began


CORAL_SETUP = '''
from tea_notebook.models.offline import ScriptedModel, call
ws = get_ipython().magics_manager.registry['TeaMagics'].workspace

@ws.tools.tool
def capital(country: str) -> str:
    """The capital of a country."""
    return {"france": "Paris"}.get(country.lower(), "unknown")

ws.agent("geo", tools=["capital"], model=ScriptedModel([call("capital", country="France"),
                                                        call("done", success=True, text="Paris")]).name)

def team_script(messages, tools):
    system, user = messages[0]["content"], messages[-1]["content"]
    if "INFORMATION FLOW ORCHESTRATOR" in system:
        if "#2 " in user:
            return call("submit_answer", answer="Paris")
        if "#1 " not in user:
            return [call("send_message", content="Find the capital of France", mentions=["geo_worker"]),
                    call("wait_for_mentions", timeout_ms=5000)]
        return call("wait_for_mentions", timeout_ms=5000)
    if "Find the capital" in user and "[geo_agent]" not in user:
        return call("geo_agent", task="capital of France")
    if "[geo_agent]" in user and "#2 " not in user:
        return call("send_message", content="The capital is Paris.")
    return call("wait_for_mentions", timeout_ms=2000)

ws.coral("team", workers={"geo_worker": "geo"}, planner=False, model=ScriptedModel(team_script).name,
         budget_seconds=60)
'''


def test_coral_live_view_shows_threads_with_messages_and_folded_tool_calls(kernel):
    kernel.ok(CORAL_SETUP)
    ex = agent_cell(kernel, "What is the capital of France?", "team")
    assert ex.status == "ok", ex.reply["content"]
    live = [m["content"]["data"]["text/html"] for m in ex.of_type("update_display_data")]
    assert any("class='thread'" in h and "Find the capital of France" in h for h in live)
    result = ex.result
    payload = result["data"][MIME]
    assert payload["status"] == "success" and payload["answer"] == "Paris"
    assert [(m["seq"], m["sender"], m["mentions"]) for m in payload["messages"]] == [
        (1, "information_flow_orchestrator", ["geo_worker"]),
        (2, "geo_worker", ["information_flow_orchestrator"]),
    ]
    html = result["data"]["text/html"]
    assert html.count("class='msg") == 2
    # the worker's call of the agent it wraps is folded under its reply
    assert "1 tool calls" in html and "geo_agent(" in html
    # the team takes no steps itself: its header counts its members' (not "0 steps")
    kernel.ok("def _tree(t):\n    return len(t.steps) + sum(_tree(c) for c in t.children)")
    total = kernel.json(f"_tree(ws.trajectory({result['metadata'][MIME]['run_id']!r}))")
    header = re.search(r"<div class='h'>.*?</div>", html)[0]
    assert total > 0 and f"<span>{total} steps (by sub-agents)</span>" in header, header
    assert any(f"<span>{total} steps (by sub-agents)</span>" in h for h in live)  # the live header too
