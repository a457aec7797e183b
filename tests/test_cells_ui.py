"""The agent works in the notebook (issue 29), in a real JupyterLab driven by Chromium.

Scripted-model agents run with ``%%agent NAME --cells`` (ask mode, in the background):

- one reads the data cell and proposes a cleaning cell, inserted below its own cell with a badge and an
  approval bar; the test clicks Edit, adds a line and clicks Run: the cell runs in the notebook, its
  output (the added line's too) goes back to the model, the run ends; the notebook saved to disk holds
  the agent's cell with ``metadata.tea`` (status "edited");
- a rejected proposal never runs (its side-effect file stays absent) and its cell is gone;
- after a page reload (the notebook not saved) a pending proposal is back, cell and bar, and runs;
- "Fix with agent" on a cell that raised ``KeyError`` inserts and runs ``%tea fix CELL_ID``: the agent
  proposes an edit shown as a diff; the person changes the cell first, so Run shows a conflict (their
  text kept, nothing run, the agent told); the agent proposes again, the test approves, and the cell
  then succeeds;
- a kernel restart ends a waiting proposal (bar gone, badge "no longer waiting"); after ``%load_ext`` the
  page talks to the new kernel.

Uses the JupyterLab server, browser and page helpers of test_extension_ui.py. Screenshots
``agent-cells-*.png`` go to TEA_SCREENSHOTS_DIR when set (docs/images).
"""

from __future__ import annotations

import importlib.util
import json
import time
from typing import Any

import pytest
from test_extension_ui import SETUP, Page, browser, lab, notebook_page, shots  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

NAME = "cells.ipynb"
PANDAS = importlib.util.find_spec("pandas") is not None

if PANDAS:
    DATA = """import pandas as pd
df = pd.DataFrame([{'item': 'tea', 'price': 3.5}, {'item': 'cake', 'price': None}, {'item': 'scone', 'price': 2.0}])
df"""
    CLEAN = "clean = df.dropna(subset=['price'])\nclean"
else:  # the same table as a list of dicts
    DATA = """df = [{'item': 'tea', 'price': 3.5}, {'item': 'cake', 'price': None}, {'item': 'scone', 'price': 2.0}]
df"""
    CLEAN = "clean = [r for r in df if r['price'] is not None]\nclean"

MODELS = """import json
from tea_notebook.models.offline import ScriptedModel, call
seen = {}  # what each script was shown after each of its actions (the prompt's text)

def script(name, actions):
    turns = []
    def brain(messages, tools):
        if turns:
            seen.setdefault(name, []).append(" ".join(m['content'] for m in messages if isinstance(m.get('content'), str)))
        turns.append(1)
        if len(turns) <= len(actions):
            return actions[len(turns) - 1]
        return call('done', success=True, text=f'{name} done')
    return ScriptedModel(brain, name=name)

script('cleaner', [call('notebook_read_cell', cell_id='data'),
                   call('notebook_propose_cell', code=CLEAN, explanation='drop the rows without a price')])
script('prankster', [call('notebook_propose_cell', code=f"open({SIDE!r}, 'w').write('ran')",
                          explanation='write a file')])
script('patient', [call('notebook_propose_cell', code="print('patience', 6 * 7)", explanation='wait for me')])
FIXED = "prices = {'tea': 3.5}\\nprices.get('cake', 0)"
script('fixer', [call('notebook_read_cell', cell_id='broken'),
                 call('notebook_propose_edit', cell_id='broken', code=FIXED, explanation='cake has no price: default to 0'),
                 call('notebook_read_cell', cell_id='broken'),  # after the conflict: read it again, propose again
                 call('notebook_propose_edit', cell_id='broken', code=FIXED, explanation='the same fix, on your text')])
print('ready')"""

BROKEN = "prices = {'tea': 3.5}\nprices['cake']"

CELLS = [
    ("setup", SETUP + "\n%config TeaMagics.default_model = 'tea/script:fixer'"),  # %tea fix's model
    ("data", DATA),
    ("models", ""),  # filled in with the side-effect path
    ("clean", "%%agent cleaner --model tea/script:cleaner --cells\nClean the table."),
    ("prank", "%%agent prankster --model tea/script:prankster --cells\nLeave a mark."),
    ("wait", "%%agent patient --model tea/script:patient --cells\nPropose one cell."),
    ("broken", BROKEN),
    ("seen", "print(json.dumps(seen))"),
]


def _notebook(cells: list[tuple[str, str]]) -> dict[str, Any]:
    """A notebook (nbformat 4.5) of code cells with the given ids."""
    return {
        "cells": [
            {"cell_type": "code", "id": i, "execution_count": None, "metadata": {}, "outputs": [], "source": s}
            for i, s in cells
        ],
        "metadata": {
            "kernelspec": {"name": "tea-test", "display_name": "tea", "language": "python"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _index(lp: Page, cell_id: str) -> int:
    return lp.page.evaluate(
        f"""() => window.jupyterapp.shell.currentWidget.content.widgets
                 .findIndex(c => c.model.id === {json.dumps(cell_id)})"""
    )


def _run(lp: Page, cell_id: str, wait: bool = True) -> None:
    index = _index(lp, cell_id)
    assert index >= 0, f"no cell {cell_id}"
    lp.run(index, wait=wait)


def _bar(lp: Page) -> Any:
    """The one approval bar waiting, once it shows."""
    bar = lp.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .tea-cell-bar[data-tea-proposal]")
    try:
        bar.first.wait_for(timeout=30000)
    except Exception:
        print(
            lp.page.evaluate(
                "() => window.jupyterapp.shell.currentWidget.content.widgets.map(c => c.node.innerText.slice(0, 600)).join('\\n----\\n')"
            )
        )
        raise
    assert bar.count() == 1
    return bar.first


def _cell_of(bar: Any) -> Any:
    return bar.locator("xpath=ancestor::div[contains(concat(' ', @class, ' '), ' jp-Cell ')][1]")


def _run_ended(lp: Page, cell_id: str, timeout: float = 30) -> None:
    """Wait until the run of the ``%%agent`` cell ``cell_id`` says success in its view."""
    index = _index(lp, cell_id)
    node = f"window.jupyterapp.shell.currentWidget.content.widgets[{index}].node"
    try:
        lp.page.wait_for_function(
            f"() => [...{node}.querySelectorAll('[data-tea=status]')].some(x => x.textContent === 'success')",
            timeout=timeout * 1000,
        )
    except Exception:
        print(lp.page.evaluate(f"() => {node}.innerText.slice(0, 3000)"))
        raise


def _seen(lp: Page, name: str) -> list[str]:
    _run(lp, "seen")
    outputs = json.loads(lp.outputs_text(_index(lp, "seen")))
    return json.loads(outputs[0]["text"]).get(name, [])


def _to_top(lp: Page, index: int) -> None:
    """Scroll the notebook so that cell ``index`` is at the top (for a screenshot)."""
    lp.page.evaluate(f"() => window.jupyterapp.shell.currentWidget.content.widgets[{index}].node.scrollIntoView()")
    time.sleep(0.3)


def _seen_after(lp: Page, name: str, count: int, timeout: float = 30) -> list[str]:
    """What script ``name`` was shown, once it was called after ``count`` of its actions."""
    deadline = time.monotonic() + timeout
    said = _seen(lp, name)
    while len(said) < count and time.monotonic() < deadline:
        time.sleep(0.5)
        said = _seen(lp, name)
    assert len(said) >= count, f"{name} was called after {len(said)} actions, not {count}"
    return said


def test_agent_cells_in_jupyterlab(lab, browser, shots):  # noqa: F811 - fixtures
    side = lab.root / "side_effect.txt"
    models = MODELS.replace("CLEAN", repr(CLEAN)).replace("{SIDE!r}", repr(str(side)))
    filled = {"models": models, "setup": dict(CELLS)["setup"].format(ws=str(lab.root / "cells-ws"))}
    cells = [(i, filled.get(i, s)) for i, s in CELLS]
    with notebook_page(lab, browser, NAME, []) as lp:
        (lab.root / NAME).write_text(json.dumps(_notebook(cells)))
        page = lp.page
        lp.open(NAME)
        for cell_id in ("setup", "data", "models"):
            _run(lp, cell_id)
        _edit_and_run(lp, shots)
        _reject(lp, side)
        _saved(lp, {"cleaner": "edited"})  # the rejected cell is not there
        _reload(lp)  # a proposal inserted after the save comes back
        _saved(lp, {"cleaner": "edited", "patient": "ran"})
        _fix(lp, shots)
        _restart(lp)
        assert page.locator(".tea-cell-bar[data-tea-proposal]").count() == 0


def _edit_and_run(lp: Page, shots: Any) -> None:  # noqa: F811 - the fixture's function
    page = lp.page
    _run(lp, "clean")  # returns at once: the agent runs in the background, the kernel stays idle
    bar = _bar(lp)
    cell = _cell_of(bar)
    agent_index = _index(lp, "clean")
    assert cell.evaluate(
        "(n, i) => n === window.jupyterapp.shell.currentWidget.content.widgets[i + 1].node", agent_index
    )
    badge = cell.locator(".tea-cell-badge")
    assert badge.locator(".tea-cell-badge-who").inner_text().startswith("agent cleaner · run ")
    assert " · step " in badge.inner_text() and "waiting for you" in badge.inner_text()
    assert bar.locator(".tea-cell-bar-why").inner_text() == "drop the rows without a price"
    run = bar.locator("[data-tea-action=run]")
    assert run.inner_text() == "Run (lets this run run cells)"  # the first approval grants cell runs
    _to_top(lp, agent_index)
    shots(page, "agent-cells-proposal")
    bar.locator("[data-tea-action=edit]").click()
    page.wait_for_function("() => document.activeElement && document.activeElement.closest('.cm-editor')")
    page.keyboard.press("Control+End")
    page.keyboard.type("\nprint('rows left:', len(clean))")
    run.click()
    page.wait_for_function(
        """() => [...document.querySelectorAll('.tea-cell-badge')]
                 .some(b => b.getAttribute('data-tea-status') === 'edited')""",
        timeout=30000,
    )
    index = agent_index + 1
    outputs = lp.outputs_text(index)
    assert "rows left: 2" in outputs
    _run_ended(lp, "clean")
    said = _seen(lp, "cleaner")
    assert "scone" in said[0] and ("NaN" if PANDAS else "None") in said[0]  # it read the data cell's outputs
    assert '"decision": "edited and ran"' in said[1] and "rows left: 2" in said[1]  # what ran, and its output
    assert lp.page.locator(".tea-cell-bar[data-tea-proposal]").count() == 0


def _reject(lp: Page, side: Any) -> None:
    page = lp.page
    before = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets.length")
    _run(lp, "prank")
    bar = _bar(lp)
    proposal = bar.get_attribute("data-tea-proposal")
    assert "write('ran')" in _cell_of(bar).locator(".jp-InputArea").inner_text()
    bar.locator("[data-tea-action=reject]").click()
    page.wait_for_function(
        f"""() => !document.querySelector('.tea-cell-badge[data-tea-proposal={json.dumps(proposal)}]')""",
        timeout=10000,
    )
    assert page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets.length") == before
    _run_ended(lp, "prank")
    assert '"decision": "rejected"' in _seen(lp, "prankster")[0]
    assert not side.exists(), "a rejected proposal ran"


def _reload(lp: Page) -> None:
    page = lp.page
    _run(lp, "wait")
    proposal = _bar(lp).get_attribute("data-tea-proposal")
    lp.open(NAME)  # a reload, the notebook not saved since the proposal was inserted
    bar = _bar(lp)
    assert bar.get_attribute("data-tea-proposal") == proposal
    cell = _cell_of(bar)
    assert "patience" in cell.locator(".jp-InputArea").inner_text()
    assert cell.locator(".tea-cell-badge-who").inner_text().startswith("agent patient")
    bar.locator("[data-tea-action=run]").click()
    page.wait_for_function(
        f"""() => {{ const b = document.querySelector('.tea-cell-badge[data-tea-proposal={json.dumps(proposal)}]');
                    return b && b.getAttribute('data-tea-status') === 'ran'; }}""",
        timeout=30000,
    )
    said = _seen_after(lp, "patient", 1)  # (this page holds no view of the run: it began before the reload)
    assert '"decision": "ran"' in said[0] and "patience 42" in said[0]


def _saved(lp: Page, statuses: dict[str, str]) -> None:
    """Save the notebook: on disk, the agent cells (by agent) with their ``metadata.tea`` statuses."""
    lp.page.evaluate("async () => { await window.jupyterapp.shell.currentWidget.context.save(); }")
    saved = json.loads((lp.lab.root / NAME).read_text())
    tea = [c["metadata"]["tea"] for c in saved["cells"] if "tea" in c.get("metadata", {})]
    assert {t["agent"]: t["status"] for t in tea} == statuses, tea
    for t in tea:
        assert t["proposal"].startswith("p") and t["run"] and t["step"] >= 1


def _fix(lp: Page, shots: Any) -> None:  # noqa: F811 - the fixture's function
    page = lp.page
    _run(lp, "broken")
    broken = lp.cell(_index(lp, "broken"))
    assert "KeyError" in lp.outputs_text(_index(lp, "broken"))
    fix = broken.locator("[data-tea-action=fix]")
    fix.wait_for(timeout=10000)
    fix.click()
    # the visible cell below runs `%tea fix broken`; its agent proposes an edit of the failing cell
    below = _index(lp, "broken") + 1
    page.wait_for_function(
        f"""() => window.jupyterapp.shell.currentWidget.content.widgets[{below}]
                 .model.sharedModel.getSource() === '%tea fix broken'""",
        timeout=10000,
    )
    bar = _bar(lp)
    assert bar.get_attribute("data-tea-kind") == "edit"
    assert _cell_of(bar).evaluate("n => n.querySelector('.tea-cell-bar') !== null")
    assert broken.locator(".tea-cell-bar").count() == 1  # the bar is on the failing cell itself
    added = [t.inner_text() for t in bar.locator(".tea-diff-add").all()]
    removed = [t.inner_text() for t in bar.locator(".tea-diff-del").all()]
    diff = bar.locator(".tea-cell-diff").inner_text()
    assert any("prices.get('cake', 0)" in t for t in added) and any("prices['cake']" in t for t in removed), diff
    _to_top(lp, _index(lp, "broken") - 1)
    shots(page, "agent-cells-fix")
    # the person changes the cell before approving: a conflict, shown; their text is kept and nothing runs
    source = f"window.jupyterapp.shell.currentWidget.content.widgets[{_index(lp, 'broken')}].model.sharedModel"
    page.evaluate(f"() => {source}.setSource({source}.getSource() + '  # mine')")
    count = page.evaluate(
        f"() => window.jupyterapp.shell.currentWidget.content.widgets[{_index(lp, 'broken')}].model.executionCount"
    )
    first = bar.get_attribute("data-tea-proposal")
    bar.locator("[data-tea-action=run]").click()
    # said on the cell (alone, or above the agent's next proposal if that came already)
    broken.locator(".tea-cell-bar", has_text="changed since the agent read it").first.wait_for(timeout=10000)
    assert page.evaluate(f"() => {source}.getSource()") == BROKEN + "  # mine"
    assert "KeyError" in lp.outputs_text(_index(lp, "broken"))
    assert (
        page.evaluate(
            f"() => window.jupyterapp.shell.currentWidget.content.widgets[{_index(lp, 'broken')}].model.executionCount"
        )
        == count
    )
    assert '"decision": "conflict"' in _seen_after(lp, "fixer", 2)[1]  # the agent is told
    # it reads the cell again and proposes the fix on the person's text; the conflict stays said above it
    again = broken.locator(".tea-cell-bar[data-tea-proposal]")
    again.wait_for(timeout=30000)
    assert again.get_attribute("data-tea-proposal") != first
    assert "changed since the agent read it" in again.inner_text()
    assert any("# mine" in t.inner_text() for t in again.locator(".tea-diff-del").all())
    bar = again
    bar.locator("[data-tea-action=run]").click()
    page.wait_for_function(
        """() => { const m = window.jupyterapp.shell.currentWidget.content.widgets
                        .find(c => c.model.id === 'broken').model;
                    const o = m.outputs.toJSON();
                    return m.sharedModel.getSource().includes('.get(') && o.length > 0
                        && !o.some(x => x.output_type === 'error'); }""",
        timeout=30000,
    )
    assert "0" in lp.outputs_text(_index(lp, "broken"))
    assert broken.locator("[data-tea-action=fix]").count() == 0  # it no longer fails
    assert '"decision": "ran"' in _seen_after(lp, "fixer", 4)[3]


def _restart(lp: Page) -> None:
    """A kernel restart ends a waiting proposal (its bar goes; its badge says so once the kernel's side
    is back); after ``%load_ext tea_notebook`` the page talks to the new kernel."""
    page = lp.page
    _run(lp, "models")  # the scripts afresh
    _run(lp, "wait")
    proposal = _bar(lp).get_attribute("data-tea-proposal")
    page.evaluate(
        "async () => { await window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart(); }"
    )
    page.wait_for_function("() => !document.querySelector('.tea-cell-bar[data-tea-proposal]')", timeout=30000)
    lp.page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'", timeout=60000
    )
    for cell_id in ("setup", "models"):
        _run(lp, cell_id)
    badge = page.locator(f".tea-cell-badge[data-tea-proposal={json.dumps(proposal)}]")
    page.wait_for_function(
        f"""() => {{ const b = document.querySelector('.tea-cell-badge[data-tea-proposal={json.dumps(proposal)}]');
                    return b && b.getAttribute('data-tea-status') === 'expired'; }}""",
        timeout=10000,
    )
    assert "no longer waiting" in badge.inner_text()
    _run(lp, "wait")  # the new kernel's run proposes again (numbering starts over): a bar, which the test rejects
    bar = _bar(lp)
    assert "patience" in _cell_of(bar).locator(".jp-InputArea").inner_text()
    bar.locator("[data-tea-action=reject]").click()
    page.wait_for_function("() => !document.querySelector('.tea-cell-bar[data-tea-proposal]')", timeout=10000)
