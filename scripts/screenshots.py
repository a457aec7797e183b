"""Regenerate the documentation's screenshots (docs/images/*.png) from a real JupyterLab.

    .venv/bin/python scripts/screenshots.py [--out docs/images] [--keep]

Starts JupyterLab with this checkout's build of the extension (the harness of tests/test_extension_ui.py:
its own Jupyter folders, this interpreter as the kernel, a token on a free loopback port), runs a few small
scripted notebooks in headless Chromium (Playwright; the system ``chromium`` unless TEA_CHROMIUM names
another) and saves what a person sees:

- ``extension-trajectory.png``: a planner with two sub-agents, one step open, with its buttons;
- ``time-travel-context.png``: a step's context panel (what the model saw, part by part);
- ``time-travel-fork.png``: a fork made with "edit and fork" (the edited observation, before and after, and
  where the fork departs from the original);
- ``extension-threads.png``: a CORAL team's run as threads (the team of tutorial 06);
- ``background-runs.png``: two ``%%agent --background`` runs going on while the next cell has run;
- ``extension-sidebar.png``: the TEA sidebar with its runs and memory.

Everything runs offline with scripted models. Needs the dev extra (pytest, Playwright, JupyterLab) and a
built extension (``pip install -e .`` builds it; ``cd extension && jlpm build:prod`` after changes).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_extension_ui import BACKGROUND, BUILT, TEAM, TOOLS, Lab, Page  # noqa: E402 - the suite's harness

from tea_notebook.envs.browser import LAUNCH_ARGS, find_chromium  # noqa: E402

MAX_BYTES = 200 * 1024  # keep each picture small enough for the repository

SETUP = """%load_ext tea_notebook
%config TeaMagics.workspace_path = {ws!r}
%config TeaMagics.update_interval = 0.1
ws = %tea workspace"""

TIME_TRAVEL = '''%%tool
def stock(tea: str) -> str:
    """How many tins of a tea are in the shop's stock."""
    return {"green": "12 tins of green tea", "black": "21 tins of black tea", "oolong": "5 tins of oolong tea"}[tea]'''

TIME_TRAVEL_SCRIPTS = """from tea_notebook.models.offline import ScriptedModel, call
counter = ScriptedModel([call('stock', tea='green'), call('stock', tea='black'), call('stock', tea='oolong'),
                         call('done', success=True, text='38 tins'),
                         call('done', success=True, text='83 tins')], name='stocktaker')  # the last: the fork's
print('ready')"""

RUN_STOCKTAKER = (
    "%%agent stocktaker --model tea/script:stocktaker --tools stock\n"
    "How many tins of green, black and oolong tea are in stock?"
)

RUN_PLANNER = "%%agent planner\nWhich tea has more caffeine?"

# a run long enough to fold its older steps into memory (summaries the sidebar's Memory lists)
MEMORY = """teas = ['green', 'black', 'oolong', 'white', 'pu-erh', 'rooibos', 'jasmine', 'matcha', 'sencha']
reader_model = ScriptedModel([call('lookup', query=f'caffeine in {t} tea') for t in teas]
                             + [call('done', success=True, text='matcha has the most')], name='reader')
reader = ws.agent('reader', tools=['lookup'], model=reader_model.name, memory_budget=120, keep_recent_steps=2)
folded = (await reader.run('Which tea has the most caffeine?'))
print(folded.status, len(ws.memory.list()), 'memory records')"""

CORAL_PRELUDE = """import re
from tea_notebook.models.client import display_name
from tea_notebook.models.offline import ScriptedModel, call
offline = True"""

# the cells of tutorial 06 that make and run its CORAL team, found by how they start
CORAL_CELLS = ('CAFFEINE = {"green"', "LINE = re.compile(", "team = ws.coral(", "answer = await team.run(TASK)")


def notebook(cells: list[str]) -> dict[str, Any]:
    """An nbformat 4 notebook of code cells for our test kernel."""
    return {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c} for c in cells
        ],
        "metadata": {
            "kernelspec": {"name": "tea-test", "display_name": "tea", "language": "python"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def tutorial_cells(name: str, starts: tuple[str, ...]) -> list[str]:
    """The code cells of ``notebooks/NAME`` that start with each of ``starts``, in that order."""
    nb = json.loads((ROOT / "notebooks" / name).read_text())
    sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    found = []
    for start in starts:
        match = [s for s in sources if s.startswith(start)]
        if len(match) != 1:
            raise SystemExit(f"notebooks/{name}: expected one code cell starting {start!r}, found {len(match)}")
        found.append(match[0])
    return found


class Shots:
    """Saves element or page screenshots as PNG under ``out``, and says how big each is."""

    def __init__(self, out: Path):
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.saved: list[Path] = []

    def __call__(self, target: Any, name: str) -> None:
        path = self.out / f"{name}.png"
        target.screenshot(path=str(path), animations="disabled")
        size = path.stat().st_size
        self.saved.append(path)
        print(f"  {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {size / 1024:.0f} KB")
        if size > MAX_BYTES:
            print(f"  warning: {path.name} is over {MAX_BYTES // 1024} KB", file=sys.stderr)


def write(lab: Lab, name: str, cells: list[str]) -> None:
    (lab.root / name).write_text(json.dumps(notebook(cells)))


def source(lp: Page, index: int) -> str:
    return lp.page.evaluate(
        f"() => window.jupyterapp.shell.currentWidget.content.widgets[{index}].model.sharedModel.getSource()"
    )


def set_source(lp: Page, index: int, text: str) -> None:
    lp.page.evaluate(
        f"() => window.jupyterapp.shell.currentWidget.content.widgets[{index}]"
        f".model.sharedModel.setSource({json.dumps(text)})"
    )


def cell_count(lp: Page) -> int:
    return lp.page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets.length")


def view(lp: Page, index: int) -> Any:
    """The finished trajectory view in cell ``index``."""
    out = lp.cell(index).locator(".jp-OutputArea-output .tea-traj").last
    out.wait_for(timeout=30000)
    lp.page.wait_for_function(
        f"""() => {{ const n = window.jupyterapp.shell.currentWidget.content.widgets[{index}].node;
                   const s = n.querySelector('.tea-traj [data-tea=status]');
                   return s && s.textContent !== 'running'; }}""",
        timeout=60000,
    )
    return out


def scroll_to(lp: Page, index: int) -> None:
    lp.page.evaluate(f"() => window.jupyterapp.shell.currentWidget.content.widgets[{index}].node.scrollIntoView()")
    lp.page.wait_for_timeout(300)


def agents_and_time_travel(lp: Page, shots: Shots) -> None:
    """The planner's run (trajectory), a step's context, an edit-and-fork; then the sidebar."""
    lp.open("agents.ipynb")
    for i in range(4):
        lp.run(i, timeout=90)
    # 4: the planner with two sub-agents; its delegating step open
    lp.run(4, timeout=90)
    out = view(lp, 4)
    out.locator(".tea-step[data-agent=planner][data-step='2'] .tea-step-head").click()
    out.locator(".tea-step[data-agent=planner][data-step='2'] .tea-step-body").wait_for()
    scroll_to(lp, 4)
    shots(lp.cell(4), "extension-trajectory")
    # 5: the stocktaker; the context of its step 3, the new history part opened
    lp.run(5, timeout=90)
    out = view(lp, 5)
    run_id = json.loads(lp.outputs_text(5))[-1]["metadata"]["application/vnd.tea.trajectory+json"]["run_id"]
    out.locator(".tea-step[data-step='3'] [data-tea=context]").click()
    panel = out.locator(".tea-step[data-step='3'] [data-tea=context-panel]")
    panel.locator(".tea-ctx-part").first.wait_for(timeout=30000)
    panel.locator(".tea-ctx-part.tea-ctx-new[data-kind=history]", has_text="<step_2>").first.locator("summary").click()
    scroll_to(lp, 5)
    shots(lp.cell(5), "time-travel-context")
    out.locator(".tea-step[data-step='3'] [data-tea=context]").click()  # hide it again
    # "edit and fork" on step 3: the observation edited in place; its Fork runs one cell below
    before = cell_count(lp)
    out.locator(".tea-step[data-step='3'] [data-tea=edit-fork]").click()
    value = out.locator(".tea-step[data-step='3'] [data-tea=edit-value]")
    value.wait_for(timeout=30000)
    if value.input_value() != "5 tins of oolong tea":
        raise SystemExit(f"unexpected value to edit: {value.input_value()!r}")
    value.fill("50 tins of oolong tea")
    out.locator(".tea-step[data-step='3'] [data-tea=edit-fork-go]").click()
    lp.page.wait_for_function(
        f"() => window.jupyterapp.shell.currentWidget.content.widgets.length === {before + 1}", timeout=30000
    )
    forked = view(lp, 6)
    forked.locator(".tea-step[data-step='3'] .tea-step-head").click()
    forked.locator(".tea-step[data-step='3'] [data-tea=edit-detail]").wait_for()
    forked.locator("[data-tea=departure] summary").click()  # where it departs from the original, unfolded
    forked.locator("[data-tea=departure-replay]").wait_for()
    scroll_to(lp, 6)
    shots(lp.cell(6), "time-travel-fork")
    print(f"  (forked {run_id} at step 3)")
    # a run that folds its older steps into memory, then the sidebar: runs and memory
    lp.run(7, timeout=120)
    sidebar(lp, shots)


def sidebar(lp: Page, shots: Shots) -> None:
    page = lp.page
    page.set_viewport_size({"width": 1200, "height": 820})  # a whole-page picture: keep it small
    page.locator(".jp-SideBar [data-id='tea-sidebar']").click()
    bar = page.locator("#tea-sidebar")
    bar.wait_for()
    page.wait_for_function(
        "() => document.querySelectorAll('#tea-sidebar .tea-sb-runs .tea-sb-item').length >= 3", timeout=30000
    )
    page.wait_for_function(
        "() => document.querySelectorAll('#tea-sidebar .tea-sb-memory .tea-sb-item').length >= 1", timeout=30000
    )
    # the runs and memory sections open (the sidebar opens with every section closed), one run opened
    for section in ("runs", "memory"):
        if not bar.locator(f".tea-sb-{section}").evaluate("d => d.open"):
            bar.locator(f".tea-sb-{section} > summary").click()
    bar.locator(".tea-sb-runs .tea-sb-item > summary").first.click()
    bar.locator(".tea-sb-memory .tea-sb-item > summary").first.click()
    # the planner's run opened from the sidebar in a main-area tab
    planner = bar.locator(".tea-sb-runs .tea-sb-item").filter(has_text="planner · success").first
    planner.locator("summary").first.click()
    planner.locator(".tea-sb-open").click()
    page.locator(".jp-TeaTrajectoryPanel .tea-traj").wait_for(timeout=15000)
    page.wait_for_timeout(500)
    shots(page, "extension-sidebar")


def team(lp: Page, shots: Shots) -> None:
    lp.open("team.ipynb")
    n = cell_count(lp)
    for i in range(n):
        lp.run(i, timeout=120)
    out = view(lp, n - 1)
    scroll_to(lp, n - 1)
    shots(out, "extension-threads")


def background(lp: Page, shots: Shots) -> None:
    lp.open("background.ipynb")
    for i in range(3):
        lp.run(i)
    lp.run(3)  # returns at once: the run goes on in the background
    lp.cell(3).locator("button.jupyter-button", has_text="Stop").wait_for(timeout=10000)
    lp.run(4)
    lp.run(5)
    lp.page.wait_for_timeout(1500)  # a few steps in
    scroll_to(lp, 3)
    shots(lp.page, "background-runs")
    lp.page.wait_for_function(  # let both end before the kernel goes away
        "() => window.jupyterapp.shell.currentWidget.content.node.innerText.split('ended: success').length > 2",
        timeout=120000,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images", help="where the PNGs go")
    parser.add_argument("--keep", action="store_true", help="keep the temporary Jupyter folders (and say where)")
    args = parser.parse_args(argv)
    if not (BUILT / "package.json").is_file():
        print("the extension is not built: pip install -e . (or cd extension && jlpm build:prod)", file=sys.stderr)
        return 1
    executable = find_chromium()
    if not executable:
        print("no Chromium (apt-get install chromium, or set TEA_CHROMIUM)", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    temp = Path(tempfile.mkdtemp(prefix="tea-screenshots-"))
    root, home = temp / "root", temp / "home"
    root.mkdir()
    home.mkdir()
    lab = Lab(root, home)
    shots = Shots(args.out.resolve())
    started = time.monotonic()
    try:
        ws = str(root / "ws")
        setup = SETUP.format(ws=ws)
        write(
            lab,
            "agents.ipynb",
            [
                setup,
                TOOLS + "\n\n" + TIME_TRAVEL.removeprefix("%%tool\n"),
                TEAM,
                TIME_TRAVEL_SCRIPTS,
                RUN_PLANNER,
                RUN_STOCKTAKER,
                MEMORY,
            ],
        )
        write(lab, "team.ipynb", [setup, CORAL_PRELUDE, *tutorial_cells("06_toolself_and_coral.ipynb", CORAL_CELLS)])
        write(lab, "background.ipynb", [setup, TOOLS, *BACKGROUND])
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=executable, args=LAUNCH_ARGS)
            try:
                for scene in (agents_and_time_travel, team, background):
                    context = browser.new_context(viewport={"width": 1280, "height": 900})
                    try:
                        print(f"{scene.__name__}:")
                        scene(Page(context.new_page(), lab), shots)
                    finally:
                        context.close()
            finally:
                browser.close()
    finally:
        lab.stop()
        if args.keep:
            print(f"Jupyter folders kept in {temp}")
        else:
            import shutil

            shutil.rmtree(temp, ignore_errors=True)
    print(f"{len(shots.saved)} screenshots in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
