"""Make the small workspace ``tests/test_event_types.py`` opens as one written by the previous release.

Run it with that release's code on the path (``git archive <tag> | tar -x -C /tmp/prev``), from any
folder::

    PYTHONPATH=/tmp/prev python tests/data/workspace_prev_release/make_workspace.py

It writes ``tea.db`` (checkpointed: one file) beside itself, and ``expected.json``: how that release
reads each run back (status, answer, steps, stages, messages), which the current code must read the
same after it migrates the workspace. Scripted models only: no network, a few seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

HERE = Path(__file__).resolve().parent


def thoughts(**fields: str) -> str:
    return json.dumps(fields)


def turn(content: str | None, *calls: dict) -> dict:
    return {"content": content, "tool_calls": list(calls)}


def summary(traj) -> dict:
    """What a reader sees of a run: the fields the test compares."""
    return {
        "agent": traj.agent,
        "task": traj.task,
        "status": traj.status,
        "answer": traj.answer,
        "forked_from": traj.forked_from,
        "fork_unit": traj.fork_unit,
        "steps": [
            {
                "number": s.number,
                "thinking": s.thinking,
                "memory": s.memory,
                "replayed": s.replayed,
                "errors": s.errors,
                "note": s.note,
                "actions": [
                    {"name": a.get("name"), "ok": a.get("ok"), "observation": a.get("observation")} for a in s.actions
                ],
            }
            for s in traj.steps
        ],
        "stages": [{k: st.get(k) for k in ("index", "first_step", "sub_goal", "toolbox")} for st in traj.stages],
        "messages": [{k: m.get(k) for k in ("seq", "thread", "sender", "content")} for m in traj.messages],
        "threads": [{k: t.get(k) for k in ("id", "status", "participants")} for t in traj.threads],
        "children": [summary(c) for c in traj.children],
    }


def make(folder: Path) -> dict:
    import tea_notebook
    from tea_notebook._sync import run_sync
    from tea_notebook.models.offline import ScriptedModel, call
    from tea_notebook.runtime.runlog import Process

    ws = tea_notebook.Workspace(folder, embedder="hashing")
    runs: dict[str, str] = {}

    @ws.tools.tool
    def work(n: int) -> str:
        """Do one unit of work."""
        return f"result {n}"

    # an agent run with a tool, finished by done
    script = ScriptedModel(
        [
            turn(thoughts(thinking="start", memory="did 1"), call("work", n=1)),
            turn(thoughts(memory="did 2"), call("work", n=2)),
            call("done", success=True, text="original"),
        ]
    )
    first = ws.agent("worker", model=script.name, tools=["work"]).run_sync("do the work")
    runs["agent"] = first.run_id

    # a failed run: malformed model outputs until the loop gives up
    bad = ScriptedModel(["not json", "still not json", "no"])
    failed = ws.agent("broken", model=bad.name, tools=["work"], max_consecutive_errors=2).run_sync(
        "fail", raise_on_error=False
    )
    runs["failed"] = failed.run_id

    # a fork of the first run at step 2, with an edited observation
    after = ScriptedModel([call("done", success=True, text="forked")])
    forked = run_sync(ws.fork(first.run_id, 2, edit={"observation": "EDITED one"}, model=after.name))
    runs["fork"] = forked.run_id

    # a Process run: named stages, one model call
    async def process() -> str:
        proc_model = ScriptedModel(["a plain answer"])
        async with Process(ws, "tool_manager", "make a tool", model=proc_model.name) as p:
            p.step("assess", {"need": "a tool"}, "nothing to make")
            reply = await p.complete([{"role": "user", "content": "hello"}], stage="judge")
            p.finish("success", reply.content or "")
            return p.run_id

    runs["process"] = run_sync(process())

    # a ToolSelf run: one stage, one tool call, finish
    engine = json.dumps(
        {
            "next_sub_goal": "work once",
            "execution_strategy": "call work",
            "toolbox": ["work"],
            "inter_agent_knowledge": "NONE",
        }
    )

    def toolself_script(messages: list[dict], tools: list[dict]):
        if "Agent Configuration Engineer" in messages[0]["content"]:
            return engine
        if not any(m["role"] == "tool" or "result 7" in str(m.get("content")) for m in messages):
            return call("work", n=7)
        summary_ = {"detailed_execution": ["worked"], "tools_used": ["work"]}
        return call("finish", task_completion_status="complete", final_result="7", execution_summary=summary_)

    ts_model = ScriptedModel(toolself_script)
    ts = ws.toolself("ts", model=ts_model.name, tools=["work"]).run_sync("work once", raise_on_error=False)
    runs["toolself"] = ts.run_id

    # a CORAL team: the orchestrator asks the planner, then submits what it said
    from tea_notebook.agents.coral import ORCHESTRATOR, PLANNER

    def said(messages: list[dict], sender: str) -> bool:
        return any(f"] {sender} →" in str(m.get("content")) for m in messages)

    def orchestrator(messages: list[dict], tools: list[dict]):
        if not said(messages, PLANNER):
            return [call("send_message", content="Plan: what is 6 times 7?", mentions=[PLANNER]), wait()]
        return call("submit_answer", answer="42")

    def planner(messages: list[dict], tools: list[dict]):
        if not said(messages, PLANNER) and said(messages, ORCHESTRATOR):
            return call("send_message", content="It is 42.", mentions=[ORCHESTRATOR])
        return wait()

    def wait() -> dict:
        return call("wait_for_mentions", timeout_ms=3000)

    models = {"orchestrator": ScriptedModel(orchestrator).name, "planner": ScriptedModel(planner).name}
    team = ws.coral("team", workers={}, models=models, budget_seconds=20, wait_timeout_ms=3000)
    runs["coral"] = team.run_sync("What is 6 times 7?", raise_on_error=False).run_id

    expected = {name: summary(ws.trajectory(run_id)) for name, run_id in runs.items()}
    ws.close()
    return {"runs": runs, "trajectories": expected}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "ws"
        expected = make(folder)
        db = folder / "tea.db"
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode=DELETE")
        conn.close()
        with sqlite3.connect(db) as conn:
            conn.execute("VACUUM")
        conn.close()
        shutil.copyfile(db, HERE / "tea.db")
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print(f"wrote {HERE / 'tea.db'} ({(HERE / 'tea.db').stat().st_size // 1024} KB) and expected.json", file=sys.stderr)


if __name__ == "__main__":
    main()
