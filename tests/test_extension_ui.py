"""The JupyterLab extension in a real JupyterLab, driven by Chromium (Playwright for Python).

One JupyterLab server (token auth, its own Jupyter dirs, this interpreter as the kernel, the
extension as built in tea_notebook/labextension) and one browser page for the module. A planner with
two sub-agents runs in a ``%%agent`` cell with scripted models; the renderer must show its steps and
its sub-agents as a tree, expand a step, filter to a sub-agent; a slow run is stopped from the
renderer's Stop button (interrupted within 2 s, kernel usable); a Fork button inserts and runs
``%tea fork``; after a reload the saved trajectory renders without a Stop; the TEA sidebar lists
the tools and opens a run; a malformed payload shows an error box; script in a payload stays text.

Screenshots go to the test's tmp dir (and to TEA_SCREENSHOTS_DIR when set, e.g. docs/images).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
from jupyter_process import JupyterProcess, launch_chromium, running

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BUILT = ROOT / "tea_notebook" / "labextension"
EXT_NAME = "tea-notebook-jupyterlab"
MIME = "application/vnd.tea.trajectory+json"


def _notebook(cells: list[Any]) -> dict[str, Any]:
    """A notebook (nbformat 4) of code cells; a cell is its source, or (source, outputs)."""
    out = []
    for c in cells:
        source, outputs = (c, []) if isinstance(c, str) else c
        out.append({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": outputs, "source": source})
    return {
        "cells": out,
        "metadata": {
            "kernelspec": {"name": "tea-test", "display_name": "tea", "language": "python"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


class Lab(JupyterProcess):
    """A ``jupyter lab`` subprocess that sees only our kernel spec and our build of the extension."""

    def __init__(self, root: Path, home: Path):
        (home / "data" / "labextensions").mkdir(parents=True)
        (home / "data" / "labextensions" / EXT_NAME).symlink_to(BUILT)  # this build wins over an installed copy
        settings = home / "settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True)
        (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
        env = {"JUPYTERLAB_SETTINGS_DIR": str(home / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces")}
        args = (
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: run commands as a person would
            "--LabApp.news_url=None",  # no announcements feed (offline)
        )
        super().__init__("jupyterlab", root, home, env=env, args=args)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    pytest.importorskip("jupyterlab")
    pytest.importorskip("ipykernel")
    if not (BUILT / "package.json").is_file():
        if os.environ.get("TEA_REQUIRE_BROWSER"):  # CI: the build must have happened
            pytest.fail("the extension is not built: pip install -e . should have built it (is Node installed?)")
        pytest.skip("the extension is not built (pip install -e . builds it; it needs Node)")
    yield from running(Lab, tmp_path_factory)


@pytest.fixture(scope="module")
def browser():
    yield from launch_chromium()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """Where screenshots go: the test's tmp dir, and TEA_SCREENSHOTS_DIR (docs/images) when set."""
    folder = tmp_path_factory.mktemp("screenshots")
    extra = os.environ.get("TEA_SCREENSHOTS_DIR")

    def shot(target: Any, name: str) -> Path:
        path = folder / f"{name}.png"
        target.screenshot(path=str(path))
        if extra:
            Path(extra).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(extra) / path.name)
        return path

    shot.folder = folder
    return shot


@contextmanager
def notebook_page(lab: Any, browser: Any, name: str, cells: list[Any]) -> Iterator["Page"]:
    """A notebook of ``cells`` written under the server's root and a fresh browser page on it (not
    opened yet); on leaving, the page is closed and no error of the extension may have reached it."""
    (lab.root / name).write_text(json.dumps(_notebook(cells)))
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield Page(page, lab)
    finally:
        context.close()
    assert not [e for e in errors if "tea" in e.lower()], errors


class Page:
    """A JupyterLab page: open notebooks, run cells, read outputs (through window.jupyterapp)."""

    def __init__(self, page: Any, lab: Lab):
        self.page, self.lab = page, lab

    def open(self, name: str) -> None:
        self.page.goto(f"{self.lab.url}lab/tree/{name}?token={self.lab.token}")
        self.page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget", timeout=60000)
        self.page.wait_for_function(
            f"""() => {{
                const w = window.jupyterapp.shell.currentWidget;
                return w && w.context && w.context.path === {json.dumps(name)} && w.sessionContext
                    && w.sessionContext.session && w.sessionContext.session.kernel
                    && w.sessionContext.session.kernel.connectionStatus === 'connected'
                    && w.sessionContext.session.kernel.status === 'idle';
            }}""",
            timeout=60000,
        )

    def activate(self, name: str) -> None:
        self.page.evaluate(
            f"""() => {{
                const nb = [...window.jupyterapp.shell.widgets('main')].find(w => w.context && w.context.path === {json.dumps(name)});
                window.jupyterapp.shell.activateById(nb.id);
            }}"""
        )
        self.page.wait_for_function(
            f"() => window.jupyterapp.shell.currentWidget.context.path === {json.dumps(name)}", timeout=10000
        )

    def run(self, index: int, wait: bool = True, timeout: float = 60) -> None:
        script = f"""async () => {{
            const w = window.jupyterapp.shell.currentWidget;
            w.content.activeCellIndex = {index};
            const done = window.jupyterapp.commands.execute('notebook:run-cell');
            if ({"true" if wait else "false"}) {{ await done; }}
        }}"""
        self.page.evaluate(script)
        if wait:
            self.page.wait_for_function(
                "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
                timeout=timeout * 1000,
            )

    def cell(self, index: int) -> Any:
        return self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell").nth(index)

    def outputs_text(self, index: int) -> str:
        return self.page.evaluate(
            f"""() => JSON.stringify(window.jupyterapp.shell.currentWidget.content.widgets[{index}]
                .model.outputs.toJSON())"""
        )


SETUP = """%load_ext tea_notebook
%config TeaMagics.workspace_path = {ws!r}
%config TeaMagics.update_interval = 0.1"""

TOOLS = '''%%tool
import time

def slow(i: int) -> str:
    """Wait a little, then return i."""
    time.sleep(0.2)
    return f"slow {i}"

def lookup(query: str) -> str:
    """Look a fact up."""
    return f"fact about {query}"'''

TEAM = """from tea_notebook.models.offline import ScriptedModel, call
ws = get_ipython().magics_manager.registry['TeaMagics'].workspace
researcher = ScriptedModel([call('lookup', query='green tea'), call('done', success=True, text='green: 30 mg')])
analyst = ScriptedModel([call('lookup', query='black tea'), call('lookup', query='caffeine <script>x</script>'),
                         call('done', success=True, text='black: 47 mg')])
ws.agent('researcher', description='Finds facts and sources.', model=researcher.name, tools=['lookup'])
ws.agent('analyst', description='Compares numbers.', model=analyst.name, tools=['lookup'])
turns = []
def brain(messages, tools):
    turns.append(1)
    if len(turns) == 1:
        return call('todo', action='add', steps=[{'description': 'collect the facts'}, {'description': 'compare'}])
    if len(turns) == 2:
        return [call('researcher_agent', task='Which tea has more caffeine?'),
                call('analyst_agent', task='Which tea has more caffeine?')]
    return call('done', success=True, text='black tea has more caffeine')
planner = ScriptedModel(brain, name='planner-brain')
ws.planner(['researcher', 'analyst'], model=planner.name)
slow_script = ScriptedModel([call('slow', i=i) for i in range(100)]
                            + [call('done', success=True, text='all done', files_to_display=[])], name='slow')
print('ready')"""

RUN_PLANNER = "%%agent planner\nWhich tea has more caffeine?"
RUN_SLOW = "%%agent slowpoke --model tea/script:slow --tools slow\nCall slow a hundred times."


def _evil_outputs() -> list[Any]:
    evil = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    good = {
        "version": 1,
        "agent": evil,
        "task": f"task {evil}",
        "model": "tea/test",
        "status": "success",
        "answer": evil,
        "steps": [
            {
                "number": 1,
                "thinking": evil,
                "next_goal": evil,
                "actions": [{"name": "search", "arguments": {"q": evil}, "ok": True, "observation": evil}],
            }
        ],
        "children": [],
    }
    display = lambda data: {"output_type": "display_data", "data": data, "metadata": {}}  # noqa: E731

    def step(n: int, tool: str, obs: str) -> dict[str, Any]:
        return {
            "number": n,
            "thinking": f"thought {n}",
            "actions": [{"name": tool, "arguments": {"n": n}, "ok": True, "observation": obs}],
        }

    def run(agent: str, steps: list[Any], **extra: Any) -> dict[str, Any]:
        return {
            "version": 1,
            "agent": agent,
            "task": "What are the capitals?",
            "model": "tea/test",
            "status": "success",
            "steps": steps,
            "children": [],
            **extra,
        }

    coral = run(
        "orchestrator",
        [],
        threads=[
            {"id": "main", "name": "main", "participants": ["orchestrator", "w1"], "status": "open", "summary": ""}
        ],
        messages=[
            {
                "seq": 1,
                "thread": "main",
                "sender": "orchestrator",
                "mentions": ["w1"],
                "content": "Find the capital of France",
            },
            {
                "seq": 2,
                "thread": "main",
                "sender": "w1",
                "mentions": ["orchestrator"],
                "content": "w1 found: Paris",
                "work": [[0, 1, 0]],
            },
        ],
        children=[run("w1", [step(1, "geo_agent", "Paris")])],
    )
    toolself = run(
        "toolself",
        [step(1, "search", "a"), step(2, "search", "b"), step(3, "python", "c")],
        stages=[
            {
                "index": 1,
                "first_step": 1,
                "sub_goal": "find the facts",
                "toolbox": ["search"],
                "reason": "start",
                "strategy": "",
                "knowledge": "",
                "note": "",
            },
            {
                "index": 2,
                "first_step": 3,
                "sub_goal": "compute the answer",
                "toolbox": ["python"],
                "reason": "facts found",
                "strategy": "",
                "knowledge": "ALL",
                "note": "",
            },
        ],
    )
    return [
        ("malformed", [display({MIME: {"agent": 5, "steps": "not a list", "note": evil}, "text/plain": "x"})]),
        ("injection", [display({MIME: good, "text/plain": "y"})]),
        ("coral", [display({MIME: coral, "text/plain": "z"})]),
        ("toolself", [display({MIME: toolself, "text/plain": "w"})]),
    ]


def test_the_extension_in_jupyterlab(lab, browser, shots):
    ws_path = lab.root / "ws"  # under the server's root: the run's files open in JupyterLab
    cells = [SETUP.format(ws=str(ws_path)), TOOLS, TEAM, RUN_PLANNER, RUN_SLOW, "1 + 1"]
    evil = _evil_outputs()
    (lab.root / "untrusted.ipynb").write_text(json.dumps(_notebook([(f"# {n}", o) for n, o in evil])))
    with notebook_page(lab, browser, "ui.ipynb", cells) as lp:
        _run_and_inspect(lp, shots)
        _stop_from_the_renderer(lp, shots)
        _fork_from_a_step(lp)
        _sidebar(lp, shots)
        _reload(lp, shots)
        _untrusted(lp, shots)


def _run_and_inspect(lp: Page, shots: Any) -> None:
    page = lp.page
    lp.open("ui.ipynb")
    # the extension is loaded: both plugins and the mime renderer
    loaded = page.evaluate("() => window.jupyterapp.hasPlugin('tea-notebook-jupyterlab:sidebar')")
    assert loaded
    for i in range(3):
        lp.run(i)
    assert "ready" in lp.outputs_text(2)
    lp.run(3, timeout=90)
    out = lp.cell(3).locator(".jp-OutputArea-output .tea-traj").last
    out.wait_for(timeout=15000)
    assert out.locator("[data-tea=status]").inner_text() == "success"
    root_steps = out.locator(".tea-step[data-agent=planner]")
    assert root_steps.count() == 3
    runs = out.locator(".tea-run")
    assert sorted(runs.nth(i).get_attribute("data-agent") for i in range(runs.count())) == ["analyst", "researcher"]
    assert out.locator(".tea-step[data-agent=analyst]").count() == 3
    assert out.locator(".tea-step[data-agent=researcher]").count() == 2
    delegating = root_steps.nth(1)
    assert "researcher_agent" in delegating.inner_text() and "analyst_agent" in delegating.inner_text()

    # expand step 2: thinking, actions with arguments, observations
    delegating.locator(".tea-step-head").click()
    body = out.locator(".tea-step[data-agent=planner][data-step='2'] .tea-step-body")
    body.wait_for()
    text = body.inner_text()
    assert "researcher_agent(" in text and "green: 30 mg" in text and "black: 47 mg" in text
    # the analyst's script text is text, not markup
    assert out.locator("script").count() == 0
    shots(lp.cell(3), "trajectory-steps")

    # filter to a sub-agent
    out.locator("select.tea-filter-agent").select_option("analyst")
    page.wait_for_timeout(100)
    visible = out.locator(".tea-step")
    assert visible.count() == 3 and all(
        visible.nth(i).get_attribute("data-agent") == "analyst" for i in range(visible.count())
    )
    assert "3 steps match" in out.locator(".tea-count").inner_text()
    shots(lp.cell(3), "trajectory-filtered")
    # search across the trajectory, then clear the filters
    out.locator("select.tea-filter-agent").select_option("")
    out.locator("input.tea-search").fill("caffeine <script>")
    page.wait_for_timeout(400)
    assert out.locator(".tea-step").count() == 1
    out.locator("input.tea-search").fill("")
    page.wait_for_timeout(400)
    assert out.locator(".tea-step").count() == 8

    # the run's todo.md and files, which open in JupyterLab
    out.locator(".tea-todo > summary").click()
    assert "collect the facts" in out.locator(".tea-todo pre").inner_text()
    out.locator(".tea-files > summary").click()
    out.locator(".tea-files a.tea-file", has_text="todo.md").click()
    page.wait_for_function(
        "() => { const w = window.jupyterapp.shell.currentWidget; return w && w.context && w.context.path.endsWith('/todo.md'); }",
        timeout=15000,
    )
    page.evaluate("() => window.jupyterapp.commands.execute('application:close')")
    lp.activate("ui.ipynb")


def _stop_from_the_renderer(lp: Page, shots: Any) -> None:
    page = lp.page
    lp.run(4, wait=False)
    live = lp.cell(4).locator(".tea-traj").first
    live.wait_for(timeout=30000)
    page.wait_for_function(
        """() => { const w = window.jupyterapp.shell.currentWidget.content.widgets[4].node;
                   return w.querySelectorAll('.tea-step').length >= 2 && w.querySelector('[data-tea=stop]'); }""",
        timeout=30000,
    )
    assert live.locator("[data-tea=status]").inner_text() == "running"
    # the view updates in place: a card opened while the run goes stays open as steps arrive
    live.locator(".tea-step[data-step='1'] .tea-step-head").click()
    page.wait_for_function(
        """() => window.jupyterapp.shell.currentWidget.content.widgets[4].node.querySelectorAll('.tea-step').length >= 4""",
        timeout=30000,
    )
    assert live.locator(".tea-step[data-step='1'] .tea-step-body").count() == 1
    assert "slow 0" in live.locator(".tea-step[data-step='1'] .tea-step-body").inner_text()
    shots(lp.cell(4), "trajectory-live")
    stop = lp.cell(4).locator("[data-tea=stop]")
    clicked = time.monotonic()
    stop.click()
    page.wait_for_function(
        """() => { const w = window.jupyterapp.shell.currentWidget.content.widgets[4].node;
                   const s = [...w.querySelectorAll('[data-tea=status]')].map(x => x.textContent);
                   return s.includes('interrupted'); }""",
        timeout=10000,
        polling=50,
    )
    stopped = time.monotonic() - clicked
    print(f"interrupted {stopped:.2f} s after the click")
    assert stopped < 2.0, stopped
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'", timeout=10000
    )
    assert lp.cell(4).locator("[data-tea=stop]").count() == 0
    result = json.loads(lp.outputs_text(4))
    final = [o for o in result if o.get("output_type") == "execute_result"]
    assert len(final) == 1 and final[0]["data"][MIME]["status"] == "interrupted"
    assert 2 <= len(final[0]["data"][MIME]["steps"]) < 30
    # jump to a step: scrolled to, opened, marked
    final_view = lp.cell(4).locator(".jp-OutputArea-output .tea-traj").last
    final_view.locator("input.tea-jump").fill("2")
    final_view.locator("input.tea-jump").press("Enter")
    jumped = final_view.locator(".tea-step.tea-flash")
    assert jumped.get_attribute("data-step") == "2" and jumped.locator(".tea-step-body").count() == 1
    lp.run(5)  # the kernel goes on
    assert '"2"' in lp.outputs_text(5)


def _fork_from_a_step(lp: Page) -> None:
    page = lp.page
    out = lp.cell(3).locator(".tea-traj").last
    run_id = json.loads(lp.outputs_text(3))
    run_id = next(o for o in run_id if o.get("output_type") == "execute_result")["metadata"][MIME]["run_id"]
    out.locator(".tea-step[data-agent=planner][data-step='1'] [data-tea=fork]").click()
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.content.widgets.length === 7", timeout=10000)
    source = page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.content.widgets[4].model.sharedModel.getSource()"
    )
    assert source == f"%tea fork {run_id} --step 1"
    forked = lp.cell(4).locator(".jp-OutputArea-output .tea-traj").last
    page.wait_for_function(
        """() => { const n = window.jupyterapp.shell.currentWidget.content.widgets[4].node;
                   return [...n.querySelectorAll('[data-tea=forked-from]')].length > 0; }""",
        timeout=60000,
    )
    assert forked.locator("[data-tea=forked-from]").inner_text() == f"forked from {run_id} at step 1"
    assert forked.locator("[data-tea=status]").inner_text() == "success"
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'", timeout=30000
    )


def _sidebar(lp: Page, shots: Any) -> None:
    page = lp.page
    page.locator(".jp-SideBar [data-id='tea-sidebar']").click()
    bar = page.locator("#tea-sidebar")
    bar.wait_for()
    page.wait_for_function(
        "() => document.querySelectorAll('#tea-sidebar .tea-sb-tools .tea-sb-item').length >= 2", timeout=20000
    )
    tools = bar.locator(".tea-sb-tools .tea-sb-item")
    names = {tools.nth(i).get_attribute("data-name") for i in range(tools.count())}
    assert {"slow", "lookup"} <= names
    bar.locator(".tea-sb-tools .tea-sb-item[data-name=slow] > summary").click()
    slow = bar.locator(".tea-sb-tools .tea-sb-item[data-name=slow]")
    assert "Wait a little" in slow.inner_text()
    # the source as code, line by line (not one collapsed paragraph); usage and versions as tables
    source = slow.locator("[data-detail=source] pre.tea-code")
    assert source.count() == 1 and "def slow(" in source.inner_text() and "\n" in source.inner_text().strip()
    assert slow.locator("[data-detail=versions] table.tea-sb-table tbody tr").count() >= 1
    assert slow.locator("[data-detail=usage] table.tea-sb-table th", has_text="calls").count() == 1
    assert slow.locator("[data-detail=schema] table.tea-sb-table th", has_text="parameter").count() == 1
    assert "{" not in slow.locator("[data-detail=usage]").inner_text()  # no raw JSON
    shots(slow, "sidebar-tool")
    runs = bar.locator(".tea-sb-runs .tea-sb-item")
    assert runs.count() >= 3  # planner, slowpoke, the fork
    # two runs of one agent (the planner and its fork) are told apart: time, id prefix, steps, task
    lines = [runs.nth(i).locator(".tea-sb-sub").inner_text() for i in range(runs.count())]
    assert len(set(lines)) == len(lines), lines
    assert all(re.match(r"\d\d:\d\d:\d\d · [0-9a-f]{8,} · \d+ steps", line) for line in lines), lines
    bar.locator("input.tea-sb-search").fill("planner")
    shots(bar, "sidebar")
    planner_run = bar.locator(".tea-sb-runs .tea-sb-item").filter(has_text="planner · success").last
    planner_run.locator("summary").click()
    planner_run.locator(".tea-sb-open").click()
    panel = page.locator(".jp-TeaTrajectoryPanel .tea-traj")
    panel.wait_for(timeout=10000)
    assert panel.locator(".tea-step[data-agent=planner]").count() == 3
    shots(page, "sidebar-and-run-panel")
    bar.locator("input.tea-sb-search").fill("")


def _reload(lp: Page, shots: Any) -> None:
    page = lp.page
    page.evaluate(
        """async () => {
            const nb = [...window.jupyterapp.shell.widgets('main')].find(w => w.context && w.context.path === 'ui.ipynb');
            await nb.context.save();
        }"""
    )
    lp.open("ui.ipynb")
    trajs = lp.cell(3).locator(".tea-traj")
    try:
        trajs.last.wait_for(state="attached", timeout=15000)
    except Exception:
        shots(page, "reload-debug")
        print(
            page.evaluate(
                "() => document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)').innerText.slice(0, 3000)"
            )
        )
        raise
    trajs.last.scroll_into_view_if_needed()
    assert trajs.last.locator("[data-tea=status]").inner_text() == "success"
    # the stopped run's output may still be taking its stored trajectory from the kernel: wait for a status
    stopped = lp.cell(5).locator(".tea-traj [data-tea=status]").last
    deadline = time.monotonic() + 15
    while not stopped.inner_text().strip() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert stopped.inner_text() == "interrupted"
    assert page.locator("[data-tea=stop]").count() == 0


def _untrusted(lp: Page, shots: Any) -> None:
    page = lp.page
    lp.open("untrusted.ipynb")
    error = lp.cell(0).locator("[data-tea=error]")
    error.wait_for(timeout=15000)
    assert "payload.agent is missing" in error.inner_text()
    raw = error.locator(".tea-raw").inner_text()
    assert '"not a list"' in raw and "<script>window.__pwned=2</script>" in raw  # shown as text
    traj = lp.cell(1).locator(".tea-traj")
    traj.wait_for(timeout=15000)
    assert "<img src=x" in traj.locator(".tea-agent").inner_text()
    traj.locator(".tea-step-head").first.click()
    assert "<script>window.__pwned=2</script>" in traj.locator(".tea-step-body").inner_text()
    assert traj.locator("img, script").count() == 0 and error.locator("img, script").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    shots(lp.cell(0), "malformed")

    # CORAL: a chat-like transcript per thread, the tool calls folded under the message
    coral = lp.cell(2).locator(".tea-traj")
    assert coral.locator(".tea-tab.tea-active").inner_text() == "threads"
    assert coral.locator(".tea-thread").count() == 1
    assert [coral.locator(".tea-msg").nth(i).get_attribute("data-sender") for i in range(2)] == ["orchestrator", "w1"]
    coral.locator(".tea-msg[data-sender=w1] .tea-work-toggle").click()
    assert "geo_agent(" in coral.locator(".tea-msg[data-sender=w1]").inner_text()
    shots(lp.cell(2), "threads")
    # ToolSelf: stages as sections with sub-goal and toolbox
    ts = lp.cell(3).locator(".tea-traj")
    assert ts.locator(".tea-tab.tea-active").inner_text() == "stages"
    stages = ts.locator(".tea-stage")
    assert stages.count() == 2 and "compute the answer" in stages.nth(1).inner_text()
    assert ts.locator(".tea-stage").nth(0).locator(".tea-tool").inner_text() == "search"
    assert ts.locator(".tea-step").count() == 3
    ts.locator(".tea-tab[data-view=steps]").click()
    assert ts.locator(".tea-stage").count() == 0 and ts.locator(".tea-step").count() == 3


BACKGROUND = [
    "from tea_notebook.models.offline import ScriptedModel, call\n"
    "first = ScriptedModel([call('slow', i=i) for i in range(30)] + [call('done', success=True, text='first done')],"
    " name='bg-first')\n"
    "second = ScriptedModel([call('slow', i=i) for i in range(20)] + [call('done', success=True, text='second done')],"
    " name='bg-second')",
    "%%agent first --background --model tea/script:bg-first --tools slow --max-steps 50 --out job1\nTick thirty times.",
    "%%agent second --background --model tea/script:bg-second --tools slow --max-steps 50 --out job2\nTick twenty times.",
    "print('meanwhile:', job1.status, job2.status, 6 * 7)",
    "%tea jobs",
]


def test_background_runs_leave_the_kernel_free_and_finish_in_their_cells(lab, browser, shots):
    """Two ``%%agent --background`` runs: other cells run meanwhile, both views update in their own
    cells after those cells ended, and each becomes its run's trajectory (no Stop) when it ends."""
    ws_path = lab.root / "bg-ws"
    cells = [SETUP.format(ws=str(ws_path)), TOOLS, *BACKGROUND]
    (lab.root / "bg.ipynb").write_text(json.dumps(_notebook(cells)))
    context = browser.new_context(viewport={"width": 1400, "height": 1400})
    page = context.new_page()
    lp = Page(page, lab)
    try:
        lp.open("bg.ipynb")
        for i in range(3):
            lp.run(i)
        started = time.monotonic()
        lp.run(3)  # returns at once: the kernel goes idle while the run goes on
        lp.cell(3).locator("button.jupyter-button", has_text="Stop").wait_for(timeout=5000)  # its own Stop
        lp.run(4)
        lp.run(5)
        assert time.monotonic() - started < 8, "the background cells waited for their runs"
        meanwhile = json.loads(lp.outputs_text(5))
        assert meanwhile[0]["text"].strip() == "meanwhile: running running 42"
        shots(page, "background-runs")  # both still running, each with its Stop; the next cell has run
        # both views update in place, each in its own cell, and end as the stored trajectories
        for index, answer, steps in ((3, "first done", 31), (4, "second done", 21)):
            page.wait_for_function(
                f"""() => {{ const n = window.jupyterapp.shell.currentWidget.content.widgets[{index}].node;
                           const s = [...n.querySelectorAll('[data-tea=status]')].map(x => x.textContent);
                           return s.includes('success'); }}""",
                timeout=60000,
            )
            # the live view's own last update says success too; the stored trajectory replaces it next
            deadline = time.monotonic() + 30
            while True:
                outputs = json.loads(lp.outputs_text(index))
                final = [
                    o
                    for o in outputs
                    if MIME in o.get("data", {}) and not o.get("metadata", {}).get(MIME, {}).get("live")
                ]
                if final or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert len(final) == 1, [o.get("output_type") for o in outputs]
            assert final[0]["data"][MIME]["answer"] == answer and len(final[0]["data"][MIME]["steps"]) == steps
            view = lp.cell(index).locator(".tea-traj").first
            assert view.locator(".tea-count").inner_text().startswith(f"{steps} steps")  # the list is virtualised
            assert "tokens (estimated)" in view.locator("[data-tea=tokens]").inner_text()  # a scripted model
            assert lp.cell(index).locator("[data-tea=stop]").count() == 0
            assert lp.cell(index).locator("button.jupyter-button").count() == 0  # the Stop widget is gone
            # the handle's line, the cell's value, says how it ended (no longer "running in the background")
            page.wait_for_function(
                f"""() => window.jupyterapp.shell.currentWidget.content.widgets[{index}].node
                           .innerText.includes('ended: success')""",
                timeout=10000,
            )
            assert "running in the background" not in lp.cell(index).inner_text()
        lp.run(6)
        jobs = json.loads(lp.outputs_text(6))[0]["data"]["text/html"]
        assert "first" in jobs and "second" in jobs and jobs.count("success") == 2
        shots(page, "background-runs-done")
    finally:
        context.close()
