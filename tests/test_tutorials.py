"""The tutorial notebooks in notebooks/: stored executed, tagged where output is live, passing nbval.

nbval runs in a child pytest (``--nbval`` and ``--nbval-lax``, kernel in this environment) so the
main test run needs no nbval options, and on a copy of notebooks/ so a run never writes into the
checkout (``%tea workspace PATH`` first opens ./.tea in the kernel's folder). Strict ``--nbval`` compares every untagged cell's fresh output with the stored one,
so it also fails when the stored outputs are stale.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
IGNORE_TAG = "nbval-ignore-output"
# cells whose output is live (display updates) or names run ids, times or temporary paths
RUN_SPECIFIC = ("%%agent", "%tea runs", "%tea workspace", "%tea show")
# a cell that fails on purpose (tutorial 09 hands it to %tea fix); nbclient and nbval go on past it
RAISES_TAG = "raises-exception"


def _code_cells(path: Path) -> list:
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def _offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TEA_MODEL"}  # the stored outputs are the offline ones
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def test_the_quickstart_exists():
    assert [p.name for p in NOTEBOOKS][:1] == ["01_quickstart.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_executed_in_order_without_errors(path):
    cells = _code_cells(path)
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1)), "re-run the notebook top to bottom"
    for c in cells:
        for out in c.outputs:
            failing = RAISES_TAG in c.metadata.get("tags", [])
            assert out.output_type != "error" or failing, f"stored error in cell {c.source[:60]!r}"
            assert not (out.output_type == "stream" and out.name == "stderr"), f"stderr in {c.source[:60]!r}"
    assert sum(bool(c.outputs) for c in cells) >= len(cells) // 2  # it renders with outputs on GitHub


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_figures_are_images_not_their_repr(path):
    """A figure whose stored output is only ``<Figure size …>`` showed as text to its reader."""
    for c in _code_cells(path):
        for out in c.outputs:
            text = "".join((out.get("data") or {}).get("text/plain", ""))
            if text.startswith("<Figure size"):
                assert "image/png" in out.data, f"a figure stored as text in {c.source[:60]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_run_specific_cells_are_tagged_and_compared_ones_are_clean(path):
    cells = _code_cells(path)
    run_ids: set[str] = set()
    for c in cells:
        for out in c.outputs:
            for meta in (out.get("metadata") or {}).values():
                if isinstance(meta, dict) and meta.get("run_id"):
                    run_ids.add(meta["run_id"])
    for c in cells:
        tagged = IGNORE_TAG in c.metadata.get("tags", [])
        first = c.source.lstrip().splitlines()[0] if c.source.strip() else ""
        if first.startswith(RUN_SPECIFIC):
            assert tagged, f"tag {first!r} with {IGNORE_TAG}"
        # a comment above a cell magic makes the cell a SyntaxError: markers go in tags
        assert not re.match(r"\s*#.*\n\s*%%", c.source), c.source[:60]
        if not tagged:
            text = repr([out.get("data", {}).get("text/plain", "") + out.get("text", "") for out in c.outputs])
            assert not any(r in text for r in run_ids), f"a run id in the compared output of {first!r}"
            assert "tea-quickstart-" not in text, f"a temporary path in the compared output of {first!r}"


def test_offline_runs_say_their_model_is_scripted():
    outputs = "".join(
        str(out.get("data", {})) + out.get("text", "") for c in _code_cells(NOTEBOOKS[0]) for out in c.outputs
    )
    assert "tea/demo (scripted, not an LLM)" in outputs
    assert "tea/script:quickstart (scripted, not an LLM)" in outputs


def test_the_evaluation_tutorial_says_its_models_are_scripted_and_resumes():
    path = ROOT / "notebooks" / "07_evaluation.ipynb"
    assert path in NOTEBOOKS
    outputs = "".join(str(out.get("data", {})) + out.get("text", "") for c in _code_cells(path) for out in c.outputs)
    assert "tea/script:stand_in (scripted, not an LLM)" in outputs
    assert "stopped by the user" in outputs and "evaluation stand-in: 30/30 done" in outputs


def test_the_time_travel_tutorial_shows_a_context_forks_and_a_resume():
    path = ROOT / "notebooks" / "08_time_travel.ipynb"
    assert path in NOTEBOOKS
    cells = _code_cells(path)
    sources = "\n".join(c.source for c in cells)
    for call in (
        "result.context(3)",
        "await ws.fork(result.run_id, 3, edit=",
        "await ws.fork(sub.run_id",
        "await ws.resume(",
        "ws.branches(",
        "ws.compare(",
    ):
        assert call in sources, call
    outputs = "".join(str(out.get("data", {})) + out.get("text", "") for c in cells for out in c.outputs)
    assert "tea/script:stocktaker (scripted, not an LLM)" in outputs
    assert "73 tins (green 14, black 9, oolong 50)" in outputs  # the edited fork's answer
    assert "Stock report: 19 tins (green 14, black 0, oolong 5)" in outputs  # the parent of the sub-agent's fork
    assert "interrupted · stopped by the user" in outputs and "the model was asked at steps [1, 2, 3]" in outputs
    # issue 28: a fork that restores files, a stop mid-call resumed once, a replay policy and its divergence report
    assert "the fork's folder: ['count_sheet.txt']" in outputs and "the original's folder: []" in outputs
    assert "orders.txt: ['20 tins of oolong']" in outputs and "was already resumed by run RESUMED" in outputs
    assert 'replay="recorded"' in sources and "recorded fork  reproduced the original" in outputs
    assert "edited fork    departs at step 4: different model input" in outputs


def test_the_agent_cells_tutorial_proposes_edits_rejects_and_fixes():
    path = ROOT / "notebooks" / "09_agent_cells.ipynb"
    assert path in NOTEBOOKS
    cells = _code_cells(path)
    sources = "\n".join(c.source for c in cells)
    for line in ("%%agent analyst --cells", "%%tea approve p1", "%tea approve p2", "%tea reject p3", "%tea fix"):
        assert line in sources, line
    failing = [c.source.splitlines()[0] for c in cells if RAISES_TAG in c.metadata.get("tags", [])]
    assert failing == ["def tins_of(shop):"]
    outputs = "".join(str(out.get("data", {})) + out.get("text", "") for c in cells for out in c.outputs)
    assert "tea/script:analyst (scripted, not an LLM)" in outputs
    assert "proposal p1 (new, agent analyst): running your edit of it" in outputs
    assert "p1 decided: edit_run by the person (granted the run its cell runs)" in outputs
    assert "success · tins sold by shop: {'Kyoto': 19, 'Osaka': 8}" in outputs  # built from the edited cell
    assert "shop_totals.csv exists: False" in outputs  # the rejected proposal never ran
    assert "not saved: you rejected the cell (keep the totals in the notebook for now)" in outputs
    assert "proposal p4 (edit, agent fixer): running it as proposed" in outputs and "fixed: a shop with no" in outputs
    assert "the notebook's cells are not rewound" in outputs and "no proposal is waiting" in outputs


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["--nbval", "--nbval-lax"])
def test_notebooks_pass_nbval(mode, tmp_path):
    folder = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", folder, ignore=shutil.ignore_patterns(".tea", ".ipynb_checkpoints"))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", mode, "--nbval-current-env", str(folder)],
        cwd=tmp_path,
        env=_offline_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    cells = sum(len(_code_cells(p)) for p in NOTEBOOKS)
    assert re.search(rf"\b{cells} passed\b", proc.stdout), tail
