"""The newest change of each registry kind is kept in memory (``Database.last_change``, asked
several times a step) and read again only after a change: this process's writes to the change log
forget their kind, and another connection's commit (another workspace object on the folder,
another process) is seen through ``PRAGMA data_version``. These tests check that nothing
registered, rolled back or unregistered anywhere is missed, down to a run's next step, and that an
unchanged registry costs one cheap statement a look."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import tea_notebook
from tea_notebook.models.offline import ScriptedModel, call

REPO = Path(__file__).resolve().parents[1]


def _workspace(path: Path) -> tea_notebook.Workspace:
    return tea_notebook.Workspace(path, embedder="hashing")


def _target(ws: tea_notebook.Workspace) -> None:
    @ws.tools.tool
    def target(text: str) -> str:
        """Say the text back."""
        return text


def _redescribe(ws: tea_notebook.Workspace, description: str) -> None:
    """A new version of ``target`` with another description (the same function behind it)."""
    record = ws.tools.get("target")
    ws.tools.register(record.model_copy(update={"description": description}))


def _statements(ws: tea_notebook.Workspace) -> list[str]:
    """Every SQL statement the workspace's connection runs from now on."""
    seen: list[str] = []
    ws.db._conn.set_trace_callback(seen.append)
    return seen


def test_own_register_rollback_and_unregister_move_the_newest_change(ws):
    assert ws.db.last_change("tool") == 0
    _target(ws)
    first = ws.db.last_change("tool")
    assert first > 0 and "target" in ws.tools
    _redescribe(ws, "Repeat the text.")
    second = ws.db.last_change("tool")
    assert second > first and ws.tools.current("target").description == "Repeat the text."
    ws.tools.rollback("target", 1)
    third = ws.db.last_change("tool")
    assert third > second and ws.tools.current("target").description == "Say the text back."
    ws.tools.unregister("target")
    assert ws.db.last_change("tool") > third
    assert "target" not in ws.tools and ws.tools.current("target") is None
    assert ws.db.last_change("toolkit") == 0  # other kinds are kept apart


def test_a_write_rolled_back_leaves_the_newest_change_as_it_was(ws):
    _target(ws)
    before = ws.db.last_change("tool")
    with pytest.raises(RuntimeError, match="refused"):
        with ws.db.transaction() as cur:
            ws.db.put_version(cur, "tool", "ghost", "h", "{}", "ghost", "[]")
            # inside the write the uncommitted change is visible to this thread, and not kept
            assert ws.db.last_change("tool") > before
            raise RuntimeError("refused")
    assert ws.db.last_change("tool") == before
    assert "ghost" not in ws.tools


def test_an_unchanged_registry_costs_one_statement_a_look(ws):
    _target(ws)
    ws.tools.current("target")  # the record is cached from here on
    seen = _statements(ws)
    for _ in range(5):
        ws.db.last_change("tool")
        assert ws.tools.current("target") is not None
    assert seen == ["PRAGMA data_version"] * 10
    seen.clear()
    _redescribe(ws, "Repeat the text.")  # this connection's own write: read again once
    seen.clear()
    ws.db.last_change("tool")
    ws.db.last_change("tool")
    assert sum("FROM changes" in s for s in seen) == 1


def test_two_workspaces_on_one_folder_see_each_other_at_once(tmp_path):
    one, two = _workspace(tmp_path / "ws"), _workspace(tmp_path / "ws")
    try:
        assert one.db.last_change("tool") == 0 and "target" not in one.tools  # both cached now
        _target(two)
        assert "target" in one.tools
        assert one.db.last_change("tool") == two.db.last_change("tool") > 0
        _redescribe(two, "Repeat the text.")
        assert one.tools.current("target").description == "Repeat the text."
        two.tools.unregister("target")
        assert one.tools.current("target") is None and "target" not in one.tools.names()
        # the other way round, written from another thread
        worker = threading.Thread(target=_target, args=(one,))
        worker.start()
        worker.join()
        assert two.tools.current("target") is not None
    finally:
        one.close()
        two.close()


def _run_redescribing(ws: tea_notebook.Workspace, redescribe) -> list[str]:
    """A run of two steps whose first step's tool calls ``redescribe()``; the descriptions of
    ``target`` the model was offered at each step."""
    offered: list[str] = []

    @ws.tools.tool
    def bump() -> str:
        """Change the target tool."""
        redescribe()
        return "changed"

    def respond(messages: list[dict], tools: list[dict]) -> object:
        offered.extend(t["function"]["description"] for t in tools if t["function"]["name"] == "target")
        if len(offered) == 1:
            return call("bump")
        return call("done", success=True, text="seen")

    model = ScriptedModel(respond)
    result = ws.agent("watcher", model=model.name, tools=["bump", "target"]).run_sync("watch the tools")
    assert result.status == "success", result.answer
    return offered


def test_a_run_sees_a_tool_changed_by_another_workspace_at_its_next_step(tmp_path):
    ws, other = _workspace(tmp_path / "ws"), _workspace(tmp_path / "ws")
    try:
        _target(ws)
        offered = _run_redescribing(ws, lambda: _redescribe(other, "Repeat the text, changed elsewhere."))
        assert offered == ["Say the text back.", "Repeat the text, changed elsewhere."]
    finally:
        ws.close()
        other.close()


_REDESCRIBE_CHILD = """
import sys
import tea_notebook
ws = tea_notebook.Workspace(sys.argv[1], embedder="hashing")
record = ws.tools.get("target")
ws.tools.register(record.model_copy(update={"description": "Repeat the text, changed by a process."}))
ws.close()
"""


def _child_redescribes(folder: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_REDESCRIBE_CHILD), str(folder)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr


def test_a_run_sees_a_tool_changed_by_another_process_at_its_next_step(tmp_path):
    ws = _workspace(tmp_path / "ws")
    try:
        _target(ws)
        offered = _run_redescribing(ws, lambda: _child_redescribes(tmp_path / "ws"))
        assert offered == ["Say the text back.", "Repeat the text, changed by a process."]
        assert ws.tools.current("target").description == "Repeat the text, changed by a process."
    finally:
        ws.close()


def test_a_closed_workspace_still_reads_the_newest_change(tmp_path):
    ws = _workspace(tmp_path / "ws")
    _target(ws)
    seq = ws.db.last_change("tool")
    ws.close()
    other = _workspace(tmp_path / "ws")
    try:
        _redescribe(other, "Repeat the text.")
        assert ws.db.last_change("tool") == other.db.last_change("tool") > seq
    finally:
        other.close()
