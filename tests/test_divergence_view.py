"""The divergence report in the trajectory payload (issue 28): a fork's payload says where it first
departed from its original and how (``divergence``: source, unit, step, how, what each did there), or
only which run it reproduces so far; the live view sends it as soon as the ``diverged`` event arrives,
once (the partial updates after it leave it out while it does not change). Real SQLite and tools,
scripted models that are functions of their input (test_divergence.py's)."""

from __future__ import annotations

import json

from event_factory import event
from test_divergence import counter, first_run, tools  # noqa: F401 - the fixture
from test_live_increments import live_view

from tea_notebook._sync import run_sync
from tea_notebook.notebook.live_bundle import live_payload
from tea_notebook.runtime.render import MIME_TYPE, payload


def test_an_edited_fork_says_where_it_departs_and_how(ws, tools):  # noqa: F811 - the fixture
    first = first_run(ws, tools, counter())
    assert "divergence" not in payload(first.trajectory)  # a run started afresh is no fork
    forked = run_sync(ws.fork(first.run_id, 2, edit={"observation": "EDITED"}))
    said = payload(forked.trajectory)["divergence"]
    assert {k: said[k] for k in ("source", "unit", "step", "how")} == {
        "source": first.run_id,
        "unit": "step",
        "step": 3,
        "how": "model input",
    }
    assert said["original"].startswith("a prompt of ") and said["replay"].startswith("a prompt of ")
    assert said["original"] != said["replay"]
    assert len(json.dumps(said)) < 1200  # small: it goes with every whole payload


def test_an_unedited_fork_reproduces_its_original(ws, tools):  # noqa: F811 - the fixture
    first = first_run(ws, tools, counter())
    same = run_sync(ws.fork(first.run_id, 1, replay="recorded"))
    assert same.trajectory.divergence is None
    assert payload(same.trajectory)["divergence"] == {"source": first.run_id, "unit": "step"}


def test_a_resume_compares_nothing(ws, tools):  # noqa: F811 - the fixture
    from tea_notebook.runtime.render import compared_fork

    assert compared_fork({"forked_from": "r0", "resumed_from": "r0", "fork_unit": "steps"}) is None
    assert compared_fork({"forked_from": "r0", "fork_unit": None}) is None  # a run that is not forked by steps
    assert compared_fork({"forked_from": "r0", "fork_unit": "steps"}) == "r0"
    assert compared_fork({}) is None


def test_the_live_view_says_it_at_once_and_sends_it_once(ws, tools):  # noqa: F811 - the fixture
    first = first_run(ws, tools, counter())
    forked = run_sync(ws.fork(first.run_id, 2, edit={"observation": "EDITED"}))
    view, handle = live_view()
    events = ws.events.events(forked.run_id, nested=True)
    at = next(i for i, e in enumerate(events) if e.type == "diverged")
    for e in events[:at]:
        view(e)
    view._dirty = True
    view.refresh()
    assert live_payload(view)["divergence"] == {"source": first.run_id, "unit": "step"}  # reproduces so far
    view(events[at])
    view._dirty = True
    view.refresh()
    update = handle.sent[-1]["data"][MIME_TYPE]
    assert update["partial"] and update["divergence"]["step"] == 3 and update["divergence"]["how"] == "model input"
    mark = len(handle.sent)
    for e in events[at + 1 :]:
        view(e)
        view._dirty = True
        view.refresh()
    later = [u["data"][MIME_TYPE] for u in handle.sent[mark:]]
    assert all("divergence" not in u for u in later if u.get("partial")), "sent again while unchanged"
    assert live_payload(view)["divergence"] == payload(forked.trajectory)["divergence"]


def test_a_fork_that_is_live_says_it_reproduces_so_far():
    view, handle = live_view()
    view(event("run_started", agent="counter", task="count", model="tea/test", forked_from="r0", fork_unit="steps"))
    view._dirty = True
    view.refresh()
    first = handle.sent[0]["data"][MIME_TYPE]  # whole
    assert first["divergence"] == {"source": "r0", "unit": "step"} and first["live"]
    view(event("step", step=1, thinking="one"))
    view._dirty = True
    view.refresh()
    assert "divergence" not in handle.sent[-1]["data"][MIME_TYPE]  # unchanged: the renderer keeps it
    view(event("diverged", source="r0", step=2, how="arguments", original="work({})", replay="work({'n': 2})"))
    view._dirty = True
    view.refresh()
    assert handle.sent[-1]["data"][MIME_TYPE]["divergence"] == {
        "source": "r0",
        "unit": "step",
        "step": 2,
        "how": "arguments",
        "original": "work({})",
        "replay": "work({'n': 2})",
    }
