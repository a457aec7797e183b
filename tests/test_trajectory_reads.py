"""Fast reads where notebook runs live (issue 32): a loaded trajectory reads the run tree's rows at
once and its events only when its lists are asked for (the stored model requests only with
``events``), giving what reading every event gives; a routed agent's count of tools offered only by
name reads an index, kept right as the registry changes."""

from __future__ import annotations

import re

from prompt_parts import user_text

from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.protocol.records import ToolRecord
from tea_notebook.runtime.contexts import load_context
from tea_notebook.runtime.trajectory import Trajectory, build_lists
from tea_notebook.store.database import COUNTED_PATHS, Database


def work(n: int) -> str:
    """Do a piece of work."""
    return f"result {n}"


def boss_and_helper(ws) -> str:
    """A boss run that calls a helper sub-agent (two steps of ``work``); its run id."""
    ws.tools.tool(work)

    def counting(messages, tools):
        found = re.findall(r"-> result (\d+)", user_text(messages))
        return call("work", n=len(found) + 1) if len(found) < 2 else call("done", success=True, text="2")

    ws.agent("helper", model=ScriptedModel(counting).name, tools=["work"], description="Helps.")
    boss = ScriptedModel(
        lambda m, t: (
            call("helper_agent", task="help")
            if "[helper_agent]" not in user_text(m)
            else call("done", success=True, text="done")
        )
    )
    return ws.agent("boss", model=boss.name, sub_agents=["helper"], tools=["work"]).run_sync("do it").run_id


def test_a_loaded_trajectory_reads_events_only_when_asked_and_gives_what_all_of_them_give(ws):
    run_id = boss_and_helper(ws)
    traj = Trajectory.load(ws, run_id)
    assert not {"steps", "children", "events"} & set(traj.__dict__)  # nothing decoded yet
    assert traj.context(1).to_dict() == load_context(ws, run_id, 1).to_dict()
    assert "events" not in traj.__dict__  # a context view reads the stored request only
    every = ws.events.events(run_id, nested=True)
    for t in (traj, traj.children[0]):
        own = [e for e in every if e.run_id == t.run_id]
        assert [s.number for s in t.steps] and t.steps == build_lists(
            (e.type, e.step, e.time, e.data) for e in own
        ).steps
        assert "events" not in t.__dict__  # the steps needed no model request
        assert t.events == own and any(e.type == "model_request" for e in t.events)
    assert [c.run_id for c in traj.children] == [r["id"] for r in ws.db.runs(parent_id=run_id)]
    assert traj.children[0].children == [] and traj.children[0].agent == "helper"
    assert traj.find(traj.children[0].run_id) is traj.children[0]
    assert "helper" in traj.text() and traj.ledger()["by_agent"]["helper"]["calls"] == 3


def test_a_trajectory_made_by_hand_keeps_the_lists_it_was_given():
    traj = Trajectory("r1", "a", "task", "tea/test", "success", "ok")
    assert traj.steps == [] and traj.children == [] and traj.events == [] and traj.memory == []
    assert "r1" in repr(traj) and traj.fork_unit is None


def test_counted_heads_read_an_index_and_follow_the_registry(ws):
    ws.tools.register_many(
        ToolRecord(
            name=f"tool_{i}",
            description=f"Tool number {i}.",
            parameters={"type": "object", "properties": {}},
            metadata={"routing": "explicit"} if i % 3 == 0 else {},
        )
        for i in range(30)
    )
    kind = ws.tools.kind
    assert ws.db.count_heads(kind, "$.metadata.routing", "explicit") == 10
    for path in COUNTED_PATHS:
        plan = ws.db._read(
            "EXPLAIN QUERY PLAN SELECT count(*) FROM versions v JOIN heads h "
            "ON h.kind=v.kind AND h.name=v.name AND h.version=v.version "
            f"WHERE v.kind=? AND json_extract(v.data, '{path}') = ?",
            (kind, "x"),
        )
        assert any("versions_counted_" in row[-1] for row in plan), plan
    ws.tools.unregister("tool_0")
    ws.tools.register(
        ToolRecord(name="tool_1", description="Now by name only.", parameters={}, metadata={"routing": "explicit"})
    )
    assert ws.db.count_heads(kind, "$.metadata.routing", "explicit") == 10  # one gone, one new
    # a path without an index is counted all the same
    assert ws.db.count_heads(kind, "$.description", "Tool number 2.") == 1


def test_a_workspace_made_before_the_index_gets_it_when_opened(tmp_path):
    db = Database(tmp_path / "tea.db")
    with db.transaction() as cur:
        cur.execute("DROP INDEX versions_counted_0")
    db.close()
    db = Database(tmp_path / "tea.db")
    names = {r[0] for r in db._read("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"versions_counted_0", "versions_counted_1"} <= names
    db.close()
