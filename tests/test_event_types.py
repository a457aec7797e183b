"""Typed events (issue 27): one TypedDict per event type, the stored events versioned and migrated
(a workspace made by the previous release opens and reads the same), and the extension's TypeScript
types generated from the same definitions."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import TypeAdapter

import tea_notebook
from tea_notebook.errors import WorkspaceError
from tea_notebook.runtime.event_types import EVENT_DATA, EventType
from tea_notebook.runtime.events import EVENT_TYPES
from tea_notebook.store.database import EVENTS_VERSION

ROOT = Path(__file__).resolve().parent.parent
PREV = Path(__file__).resolve().parent / "data" / "workspace_prev_release"


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def events_of(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT seq, id, run_id, parent_id, type, step, time, data FROM events ORDER BY seq"
        ).fetchall()
    conn.close()
    return rows


def meta_of(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    conn.close()
    return rows


def fits(type_: str, data: dict[str, Any]) -> list[str]:
    """What is wrong with ``data`` as an event of ``type_`` (empty: it is what the definition says)."""
    shape = EVENT_DATA[type_]
    known = shape.__required_keys__ | shape.__optional_keys__
    problems = [f"{type_}: undeclared field {k!r}" for k in sorted(set(data) - known)]
    problems += [f"{type_}: missing field {k!r}" for k in sorted(shape.__required_keys__ - set(data))]
    try:
        TypeAdapter(shape).validate_python(data, strict=True)
    except ValueError as exc:
        problems.append(f"{type_}: {exc}")
    return problems


# -- the definitions ------------------------------------------------------------------------------
def test_every_event_type_has_one_definition():
    assert set(get_args(EventType)) == set(EVENT_DATA) == EVENT_TYPES
    assert len(EVENT_DATA) == 21
    for type_, shape in EVENT_DATA.items():
        assert shape.__name__ == "".join(p.title() for p in type_.split("_")) + "Event"


def test_a_run_emits_each_type_with_its_definition():
    """RunLog.emit has one overload per event type, pairing it with its TypedDict (what mypy checks)."""
    from typing import get_overloads, get_type_hints

    from tea_notebook.runtime.runlog import RunLog

    pairs = {}
    for overload in get_overloads(RunLog.emit):
        hints = get_type_hints(overload)
        (type_,) = get_args(hints["type_"])
        pairs[type_] = hints["data"]
    assert pairs == EVENT_DATA


def test_what_a_run_writes_is_what_the_definitions_say(ws):
    from tea_notebook.models.offline import ScriptedModel, call

    @ws.tools.tool
    def work(n: int) -> str:
        """Do one unit of work."""
        return f"result {n}"

    script = ScriptedModel(
        [
            {"content": '{"thinking": "go"}', "tool_calls": [call("work", n=1)]},
            "not json",
            call("done", success=True, text="ok"),
        ]
    )
    result = ws.agent("worker", model=script.name, tools=["work"]).run_sync("work")
    events = ws.events.events(result.run_id)
    assert {"run_started", "model_request", "model_response", "tool_call", "tool_result", "step", "error"} <= {
        e.type for e in events
    }
    assert [p for e in events for p in fits(e.type, e.data)] == []


def test_every_kind_of_run_writes_what_the_definitions_say(tmp_path):
    """The runs of the previous release's workspace made again (a fork, a Process, ToolSelf, CORAL)."""
    maker = _load(PREV / "make_workspace.py", "make_prev_workspace")
    made = maker.make(tmp_path / "ws")
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    try:
        events = [e for run_id in made["runs"].values() for e in ws.events.events(run_id)]
    finally:
        ws.close()
    assert {"stage", "message", "thread", "run_finished", "error"} <= {e.type for e in events}
    assert [p for e in events for p in fits(e.type, e.data)] == []
    assert made["trajectories"]["toolself"]["answer"] == "7" and made["trajectories"]["coral"]["answer"] == "42"


def test_an_egress_refusal_is_an_egress_refused_event():
    """The egress floor builds the event's data itself (it sits below the runtime's definitions)."""
    from tea_notebook.egress.policy import Decision

    refused = Decision(False, "http://10.0.0.1:8080/x", "10.0.0.1", 8080, ("10.0.0.1",), "private", "a private address")
    assert fits("egress_refused", refused.as_event()) == []


# -- stored events: versioned, migrated ----------------------------------------------------------
@pytest.fixture
def prev_workspace(tmp_path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    shutil.copyfile(PREV / "tea.db", folder / "tea.db")
    return folder


def test_a_new_workspace_is_stamped_with_the_events_version(ws):
    assert ws.db.meta("events_version") == str(EVENTS_VERSION)


def test_a_workspace_of_the_previous_release_opens_migrated_and_reads_the_same(prev_workspace):
    db = prev_workspace / "tea.db"
    before = events_of(db)
    assert "events_version" not in meta_of(db)  # made before events were versioned
    expected = json.loads((PREV / "expected.json").read_text())
    summary = _load(PREV / "make_workspace.py", "make_prev_workspace").summary

    ws = tea_notebook.Workspace(prev_workspace, embedder="hashing")
    try:
        assert ws.db.meta("events_version") == str(EVENTS_VERSION)
        for name, run_id in expected["runs"].items():
            assert summary(ws.trajectory(run_id)) == expected["trajectories"][name], name
        # every stored event fits its definition as it stands
        assert [p for _, _, _, _, t, _, _, d in before for p in fits(t, json.loads(d))] == []
    finally:
        ws.close()
    assert events_of(db) == before  # version 1 changed no stored event
    again = tea_notebook.Workspace(prev_workspace, embedder="hashing")  # a second open migrates nothing
    again.close()
    assert meta_of(db)["events_version"] == str(EVENTS_VERSION)


def test_events_of_a_newer_release_are_refused(prev_workspace):
    db = prev_workspace / "tea.db"
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO meta VALUES ('events_version', ?)", (str(EVENTS_VERSION + 1),))
    conn.close()
    with pytest.raises(WorkspaceError, match="events version"):
        tea_notebook.Workspace(prev_workspace, embedder="hashing")


# -- the TypeScript types ------------------------------------------------------------------------
def test_the_extension_types_are_generated_from_the_definitions():
    gen = _load(ROOT / "scripts" / "gen_event_types.py", "gen_event_types")
    schema, typescript = gen.generate()
    stale = [
        str(path.relative_to(ROOT))
        for path, text in ((gen.SCHEMA_PATH, schema), (gen.TS_PATH, typescript))
        if not path.exists() or path.read_text() != text
    ]
    assert not stale, f"{', '.join(stale)} differ from the event definitions: run scripts/gen_event_types.py"
