"""A fork of a run that worked in the notebook says that the notebook's cells are not rewound (issue 29),
in its ``run_started`` record, its trajectory's text and its HTML view; a fork of a run without cell
actions says nothing of the kind. The notebook is the test page of ``test_notebook_cells``."""

from __future__ import annotations

import json
from typing import Any

from test_notebook_cells import TABLE, Page, add_notebook

from tea_notebook._sync import run_sync
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.runtime.render import trajectory_html


def test_a_fork_of_a_run_with_cell_actions_says_the_cells_are_not_rewound(ws, warm_litellm):
    page = Page([TABLE])
    add_notebook(ws, page)

    def one_cell(messages: list[dict], tools: list[dict]) -> Any:
        if "OUTONE" in json.dumps(messages):
            return call("done", success=True, text="one cell")
        return call("notebook_propose_cell", code="print('OUTONE')")

    original = ws.agent("celler", model=ScriptedModel(one_cell).name, envs=["notebook"]).run_sync(
        "one cell", cells="ask"
    )
    assert original.status == "success" and len(page.shown) == 1
    assert original.trajectory.fork_note == ""  # no fork: nothing to say
    forked = run_sync(ws.fork(original.run_id, 1, replay="recorded"))
    assert forked.status == "success" and len(page.shown) == 1  # answered from the recording
    note = forked.trajectory.fork_note
    assert note.startswith("the notebook's cells are not rewound") and original.run_id in note
    assert "live replay proposes its cells again as new cells" in note
    started = next(e.data for e in ws.events.events(forked.run_id) if e.type == "run_started")
    assert started["fork_note"] == note
    assert note in forked.trajectory.text() and "cells are not rewound" in trajectory_html(forked.trajectory)


def test_a_fork_of_a_run_without_cell_actions_has_no_note(ws, warm_litellm):
    plain = ws.agent("plain", model=ScriptedModel(lambda messages, tools: call("done", success=True, text="ok")).name)
    original = plain.run_sync("nothing in the notebook")
    forked = run_sync(ws.fork(original.run_id, 0))
    assert forked.trajectory.fork_note == ""
    started = next(e.data for e in ws.events.events(forked.run_id) if e.type == "run_started")
    assert "fork_note" not in started
