"""The fallback's cells when a front end runs cells without storing them in IPython's history, as nbval
does (``store_history=False``): they are cells ``run[n]`` with their results and errors, ``%tea fix``
finds the failing one, and a proposal approved in such a cell ran as that cell (issue 29, tutorial 09)."""

from __future__ import annotations

from conftest import magics_workspace

from tea_notebook.envs.cell_proposals import Proposal
from tea_notebook.notebook.cell_commands import fix_task


def test_cells_run_without_history_are_listed_fixed_and_approved(ip, tmp_path, monkeypatch):
    magics_workspace(ip, tmp_path, monkeypatch)
    fallback = ip.magics_manager.registry["TeaMagics"].cells.fallback
    before = len(fallback.unstored)
    stored = len(fallback.cells()) - before
    ip.run_cell("shelf = [3, 4]\nlen(shelf)", store_history=False)
    ip.run_cell("shelf[7]", store_history=False)
    cells = fallback.cells()
    table, failing = cells[-2:]
    assert table["id"] == f"run[{before + 1}]" and failing["id"] == f"run[{before + 2}]"
    assert table["source"] == "shelf = [3, 4]\nlen(shelf)" and table["outputs"][0]["data"]["text/plain"] == "2"
    assert failing["outputs"][0]["ename"] == "IndexError" and failing["execution_count"] is None
    assert [c["index"] for c in cells[-2:]] == [stored + before, stored + before + 1]
    task = fix_task(cells, None, ip, False)
    assert task.startswith(f"Cell run[{before + 2}] of the notebook failed with IndexError: list index out of range")
    assert "shelf: list, len 2" in task

    proposal = Proposal(id=fallback.board.new_id(), kind="new", code="print('as proposed')")
    fallback.board.open(proposal)
    ip.run_cell(f"%%tea approve {proposal.id}\nprint('edited')", store_history=False)
    assert proposal.finished.is_set(), proposal.decision
    assert proposal.outcome is not None and proposal.outcome["cell_id"] == f"run[{before + 3}]"
    assert proposal.outcome["outputs"] == "edited" and proposal.outcome["execution_count"] is None
    approving = fallback.cells()[-1]  # the approving cell, not the approved code's own run
    assert len(fallback.unstored) == before + 3 and approving["id"] == f"run[{before + 3}]"
    assert approving["source"].startswith("%%tea approve") and approving["outputs"][0]["text"] == "edited\n"
    proposal.status = "ran"
