"""The registry browser (``%tea tools`` / ``agents`` / ``envs`` / ``toolkits``) and the memory explorer
(``%tea memory``): data from Python, the static HTML / text every renderer can show, the widget's
search box, filter and detail pane (in process), nbconvert's fallback to the table, and, through a
real kernel, the widget bundle and a search typed into the box (comm messages, debounced)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("ipywidgets")

from tea_notebook.notebook import registry_view  # noqa: E402
from tea_notebook.notebook.memory_view import MemoryExplorer  # noqa: E402
from tea_notebook.notebook.registry_view import WIDGET_MIME, RecordBrowser, RegistryBrowser  # noqa: E402
from tea_notebook.protocol.records import ActionSpec, EnvironmentRecord  # noqa: E402
from tea_notebook.protocol.tools import make_tool  # noqa: E402

EVIL = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def add_three(a: int, b: int, carry: int = 0) -> int:
    """Add two integers and a carry."""
    return a + b + carry


def shout(text: str) -> str:
    """Repeat the text in capitals."""
    return text.upper()


def fetch_page(url: str) -> str:
    """Download a web page and return its text."""
    return url


def hostile(x: int) -> int:
    return x


@pytest.fixture
def tools(ws):
    """Three tools in three categories; ``add`` used twice (one failure)."""
    ws.tools.register(make_tool(add, category="math"))
    ws.tools.register(make_tool(shout, category="text"))
    ws.tools.register(make_tool(fetch_page, category="web"))
    assert ws.tools.invoke("add", {"a": 1, "b": 2}).ok
    assert not ws.tools.invoke("add", {"a": "one", "b": 2}).ok
    return ws


def visible(html: str, name: str) -> bool:
    return f"<td>{name}</td>" in html


# -- data ---------------------------------------------------------------------------------------
def test_rows_hold_version_category_usage_and_parameters(tools):
    browser = RegistryBrowser(tools.tools, title="tools")
    assert browser.names == ["add", "fetch_page", "shout"] and len(browser) == 3
    row = browser.rows[0]
    assert {k: row[k] for k in ("name", "version", "versions", "category", "description", "parameters")} == {
        "name": "add",
        "version": 1,
        "versions": 1,
        "category": "math",
        "description": "Add two integers.",
        "parameters": "a, b",
    }
    assert (row["calls"], row["failures"]) == (2, 1) and row["mean_latency_ms"] is not None
    assert browser.rows[1]["calls"] == 0 and browser.rows[1]["mean_latency_ms"] is None
    assert "score" not in row
    # rows are copies: editing one does not change the browser
    browser.rows[0]["name"] = "changed"
    assert browser.rows[0]["name"] == "add"
    assert list(browser) == browser.rows and browser[0] == row


def test_search_is_a_new_browser_with_only_the_relevant_records(tools):
    everything = RegistryBrowser(tools.tools)
    found = everything.search("download the contents of a web page")
    assert isinstance(found, RegistryBrowser) and found is not everything
    assert found.names == ["fetch_page"] and found.rows[0]["score"] > 0
    assert everything.names == ["add", "fetch_page", "shout"]  # unchanged
    assert found.search("").names == everything.names  # an empty query lists everything again
    assert everything.filter(category="text").names == ["shout"]
    assert everything.filter(category="text").search("capitals").names == ["shout"]
    assert everything.filter(category="math").search("capitals").names == []
    assert "no match for &#x27;capitals&#x27;" in everything.filter(category="math").search("capitals")._repr_html_()


def test_static_html_and_text_escape_record_text(ws):
    ws.tools.register(make_tool(hostile, description=f"Return x. {EVIL}", category="x<y"))
    browser = RegistryBrowser(ws.tools, title="tools")
    html_text = browser._repr_html_()
    detail = browser.detail_html("hostile")
    for rendered in (html_text, detail, browser.table_html()):
        assert "<script" not in rendered.lower() and "<img" not in rendered.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html_text and "x&lt;y" in html_text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in detail
    assert EVIL in browser.text() and EVIL in browser.rows[0]["description"]  # text and data keep it as it is
    widget = browser.widget()
    for rendered in (widget.table.value, widget.detail.value, widget.heading.value):
        assert "<script" not in rendered.lower() and "<img" not in rendered.lower()
    assert "&lt;script&gt;" in widget.table.value and "&lt;script&gt;" in widget.detail.value


def test_outside_a_kernel_the_bundle_is_html_and_text(tools, monkeypatch):
    browser = RegistryBrowser(tools.tools, title="tools")
    data = browser._repr_mimebundle_()
    assert set(data) == {"text/plain", "text/html"}
    assert data["text/plain"].startswith("tools (3)\n  add v1 [math] Add two integers. · 2 calls, 1 failed")
    assert visible(data["text/html"], "shout")
    assert browser._widget is None  # no widget made where no front end could show it
    # timings only in the live widget: stored notebooks stay diffable
    assert "<th>calls</th>" in data["text/html"] and "<th>mean ms</th>" not in data["text/html"]
    assert "ms" not in data["text/plain"]
    assert "<th>mean ms</th>" in browser.widget().table.value

    monkeypatch.setattr(registry_view, "_in_kernel", lambda: True)
    data = browser._repr_mimebundle_()
    assert set(data) == {"text/plain", "text/html", WIDGET_MIME}
    assert data[WIDGET_MIME]["model_id"] == browser.widget().model_id
    assert browser._repr_mimebundle_()[WIDGET_MIME] == data[WIDGET_MIME]  # one widget per browser


# -- the widget ---------------------------------------------------------------------------------------
def test_typing_in_the_search_box_filters_the_table(tools):
    widget = RegistryBrowser(tools.tools, title="tools").widget()
    assert widget.browser.names == ["add", "fetch_page", "shout"]
    assert all(visible(widget.table.value, n) for n in ("add", "fetch_page", "shout"))

    widget.search_box.value = "capitals"  # no running event loop here: applied at once
    assert widget.browser.names == ["shout"] and widget.browser.query == "capitals"
    assert visible(widget.table.value, "shout") and not visible(widget.table.value, "add")
    assert "<th>score</th>" in widget.table.value and "matching &#x27;capitals&#x27;" in widget.heading.value
    assert widget.names.options == ("shout",) and widget.names.value == "shout"
    assert "<b>shout</b>" in widget.detail.value

    widget.search_box.value = ""
    assert widget.browser.names == ["add", "fetch_page", "shout"]
    assert widget.filter_box.options == ("(all)", "math", "text", "web")
    widget.filter_box.value = "web"
    assert widget.browser.names == ["fetch_page"] and not visible(widget.table.value, "shout")
    widget.search_box.value = "capitals"
    assert widget.browser.names == [] and "no match" in widget.table.value and widget.detail.value == ""
    widget.filter_box.value = "(all)"
    assert widget.browser.names == ["shout"]


def test_the_search_box_waits_for_typing_to_pause(tools):
    widget = RegistryBrowser(tools.tools).widget(debounce=0.2)
    searched: list[str] = []
    apply = widget.apply

    def counting_apply():
        searched.append(widget.search_box.value)
        apply()

    widget.apply = counting_apply

    async def type_then_pause():
        for text in ("c", "cap", "capitals"):
            widget.search_box.value = text
            await asyncio.sleep(0.02)
        assert widget.browser.names == ["add", "fetch_page", "shout"]  # nothing searched yet
        await asyncio.sleep(0.4)

    asyncio.run(type_then_pause())
    assert searched == ["capitals"] and widget.browser.names == ["shout"]


def test_the_detail_pane_shows_schema_versions_relations_and_usage_after_a_rollback(tools):
    browser = RegistryBrowser(tools.tools, title="tools")
    widget = browser.widget()
    assert widget.names.value == "add" and "&quot;carry&quot;" not in widget.detail.value

    tools.tools.register(make_tool(add_three, name="add", category="math"), note="a carry too")
    tools.tools.relate("add", "depends_on", "shout")
    assert tools.tools.get("add").version == 3
    tools.tools.rollback("add", 2)  # the carry, without the relation

    widget.names.value = "shout"
    widget.names.value = "add"  # the pane reads the registry when a name is chosen
    pane = widget.detail.value
    assert "<b>add</b> v2" in pane and "(3 versions)" in pane
    assert "&quot;carry&quot;" in pane and "&quot;required&quot;" in pane  # v2's JSON schema
    assert "v2 (current)" in pane and "v1</td>" in pane and "v3</td>" in pane and "a carry too" in pane
    assert "<b>relations</b></div><div class='muted'>none</div>" in pane  # the relation is v3's
    assert "2 calls, 1 failed" in pane

    info = browser.detail("add")
    assert info["version"] == 2 and set(info["schema"]["properties"]) == {"a", "b", "carry"}
    assert [(v["version"], v["current"]) for v in info["versions"]] == [(1, False), (2, True), (3, False)]
    assert info["usage"]["calls"] == 2 and info["usage"]["failures"] == 1

    tools.tools.rollback("add", 3)
    widget.refresh_button.click()
    pane = widget.detail.value
    assert "<b>add</b> v3" in pane and "depends_on → <code>shout</code>" in pane
    assert browser.rows[0]["version"] == 1  # the browser is a snapshot; the widget re-read the registry
    assert widget.browser.rows[0]["version"] == 3 and widget.browser.rows[0]["versions"] == 3

    tools.tools.unregister("shout")
    widget.names.value = "shout"
    assert "no tool named &#x27;shout&#x27;" in widget.detail.value


def test_environments_show_their_actions(ws):
    ws.envs.register(
        EnvironmentRecord(
            name="kitchen",
            description="A small kitchen with a kettle.",
            actions=[
                ActionSpec(
                    name="boil",
                    description="Boil the kettle.",
                    parameters={"type": "object", "properties": {"litres": {"type": "number"}}},
                )
            ],
        )
    )
    browser = RegistryBrowser(ws.envs, title="envs")
    assert browser.rows[0]["name"] == "kitchen" and "calls" not in browser.rows[0]
    pane = browser.detail_html("kitchen")
    assert "<code>boil</code> Boil the kettle." in pane and "&quot;litres&quot;" in pane


# -- the memory explorer ----------------------------------------------------------------------------
@pytest.fixture
def memory(ws):
    store = ws.memory_store
    store.save("run1", "boil water", "Filled the kettle and boiled the water.", ["A kettle needs water first."])
    store.save("run2", "brew tea", f"Steeped the leaves for three minutes. {EVIL}", ["Green tea wants cooler water."])
    return ws


def test_memory_explorer_lists_filters_and_searches(memory):
    explorer = MemoryExplorer(memory)  # a workspace is welcome: its memory registry is used
    assert isinstance(explorer, RecordBrowser) and explorer.registry is memory.memory
    assert [(r["kind"], r["run_id"]) for r in explorer.rows] == [
        ("summary", "run1"),
        ("insight", "run1"),
        ("summary", "run2"),
        ("insight", "run2"),
    ]
    assert explorer.choices() == ["insight", "summary"]
    assert [r["description"] for r in explorer.filter(kind="insight").rows] == [
        "A kettle needs water first.",
        "Green tea wants cooler water.",
    ]
    found = explorer.search("kettle")
    assert found.rows and all("kettle" in r["description"].lower() for r in found.rows)
    assert "run2" not in {r["run_id"] for r in found.rows}
    assert explorer.text().startswith("memory (4)\n  [summary] Filled the kettle")

    html_text = explorer._repr_html_()
    assert "<th>text</th>" in html_text and "<th>category</th>" not in html_text
    assert "<script" not in html_text.lower() and "&lt;script&gt;" in html_text

    widget = explorer.widget()
    assert widget.filter_box.description == "kind" and widget.filter_box.options == ("(all)", "insight", "summary")
    widget.filter_box.value = "insight"
    assert [r["kind"] for r in widget.browser.rows] == ["insight", "insight"]
    widget.search_box.value = "green tea"
    assert [r["description"] for r in widget.browser.rows] == ["Green tea wants cooler water."]
    pane = widget.detail.value
    assert "<b>insight</b>" in pane and "brew tea" in pane and "<code>run2</code>" in pane
    assert "parameters" not in pane and "v1 (current)" in pane


def test_empty_memory_says_none(ws):
    explorer = MemoryExplorer(ws.memory)
    assert explorer.rows == [] and "memory: none" in explorer._repr_html_() and explorer.text() == "memory: none"
    assert explorer.widget().detail.value == ""


# -- static renderers -------------------------------------------------------------------------------
def test_nbconvert_shows_the_table_when_no_widget_state_was_saved(tools, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbconvert = pytest.importorskip("nbconvert")
    monkeypatch.setattr(registry_view, "_in_kernel", lambda: True)
    data = RegistryBrowser(tools.tools, title="tools")._repr_mimebundle_()
    assert WIDGET_MIME in data
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("%tea tools", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("execute_result", data=data, execution_count=1)]
    nb.cells = [cell]
    body, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    assert visible(body, "fetch_page") and "Download a web page and return its text." in body
    markdown, _ = nbconvert.MarkdownExporter().from_notebook_node(nb)
    assert "fetch_page" in markdown


def test_importing_the_views_loads_no_widgets():
    code = (
        "import sys, tea_notebook.notebook.registry_view, tea_notebook.notebook.memory_view\n"
        "print('ipywidgets' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# -- through a real kernel ------------------------------------------------------------------------------
@pytest.mark.slow
def test_in_a_kernel_the_widget_searches_as_you_type(tmp_path):
    pytest.importorskip("ipykernel")
    from jupyter_client import KernelManager
    from kernel_driver import KERNEL, make_kernel_specs

    specs = make_kernel_specs(tmp_path / "kernels")
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)
    km.start_kernel(env=env, cwd=str(tmp_path))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)

        def run(code: str, allow_stdin: bool = True) -> list[dict]:
            msg_id = kc.execute(code, allow_stdin=allow_stdin)
            out = []
            while True:
                msg = kc.get_iopub_msg(timeout=60)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    return out
                out.append(msg)
                assert msg["msg_type"] != "error", msg["content"]

        run("%load_ext tea_notebook")
        run(
            "import tea_notebook\n"
            f"tea_notebook.Workspace({str(tmp_path / 'ws')!r}, embedder='hashing').close()\n"
            f"%tea workspace {tmp_path / 'ws'}"
        )
        run(
            "from tea_notebook.protocol.tools import make_tool\n"
            "ws = get_ipython().magics_manager.registry['TeaMagics'].workspace\n"
            "def add(a: int, b: int) -> int:\n    '''Add two integers.'''\n    return a + b\n"
            "def shout(text: str) -> str:\n    '''Repeat the text in capitals.'''\n    return text.upper()\n"
            "ws.tools.register(make_tool(add, category='math')); ws.tools.register(make_tool(shout, category='text'))"
        )
        headless = run("%tea tools", allow_stdin=False)  # how nbclient, papermill and nbval execute
        data = next(m for m in headless if m["msg_type"] == "execute_result")["content"]["data"]
        assert set(data) == {"text/html", "text/plain"} and visible(data["text/html"], "shout")
        assert not [m for m in headless if m["msg_type"] == "comm_open"]

        shown = run("%tea tools")  # how JupyterLab, Notebook and VS Code execute
        result = next(m for m in shown if m["msg_type"] == "execute_result")["content"]["data"]
        assert {WIDGET_MIME, "text/html", "text/plain"} <= set(result)
        assert visible(result["text/html"], "add") and "shout" in result["text/plain"]
        models = {m["content"]["comm_id"]: m["content"]["data"]["state"] for m in shown if m["msg_type"] == "comm_open"}
        assert result[WIDGET_MIME]["model_id"] in models
        box = next(i for i, s in models.items() if s["_model_name"] == "TextModel")

        def type_text(value: str) -> None:
            state = {"method": "update", "state": {"value": value}, "buffer_paths": []}
            kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": box, "data": state}))

        typed = time.monotonic()
        type_text("zzz")
        time.sleep(0.05)
        type_text("capitals")
        updates: list[tuple[float, str]] = []  # (seconds after the first keystroke, a widget's new value)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                msg = kc.get_iopub_msg(timeout=0.2)
            except Exception:  # noqa: BLE001 - queue.Empty: keep waiting
                if any("<th>name</th>" in v for _, v in updates) and time.monotonic() - typed > 1.5:
                    break
                continue
            if msg["msg_type"] == "comm_msg":
                value = msg["content"]["data"].get("state", {}).get("value")
                if isinstance(value, str):
                    updates.append((time.monotonic() - typed, value))
        tables = [(t, v) for t, v in updates if "<th>name</th>" in v]
        assert len(tables) == 1, updates  # debounced: one search, for the last text, after typing paused
        waited, table = tables[0]
        assert waited >= 0.3
        assert visible(table, "shout") and not visible(table, "add") and "<th>score</th>" in table
        assert not [v for _, v in updates if "matching &#x27;zzz" in v]
        assert json.loads(json.dumps(result))  # the bundle is plain JSON (what the notebook stores)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
