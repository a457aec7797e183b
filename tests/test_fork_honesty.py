"""Forks that say what happened and refuse what they cannot reproduce (issue 28): a ``done`` mixed
with other actions is refused as an edit; headers say "resumed from RUN after step N", "forked from
RUN at stage K", "forked from RUN at helper's step N" (no "edited" when nothing was); a CORAL fork
point inside one member's turn is refused, naming the message that ends the turn, and not offered; a run
that a kernel restart interrupts records "interrupted: the kernel restarted", not the user's Stop."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import pytest  # noqa: E402
from prompt_parts import user_text as user  # noqa: E402
from test_coral import ORC, TASK, paper_team  # noqa: E402
from test_toolself import green_times_seven, make  # noqa: E402
from test_toolself import pool as pool  # noqa: E402, F401 - the fixture

from tea_notebook._sync import run_sync  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.runtime.forking import ForkError, turn_ends  # noqa: E402
from tea_notebook.runtime.render import payload, trajectory_html  # noqa: E402

pytestmark = pytest.mark.usefixtures("warm_litellm")


def written(ws) -> tuple[int, int]:
    """Runs and events stored (a refused fork changes neither)."""
    return len(ws.db.runs(10_000, parent_id=None)), ws.db._read("SELECT count(*) FROM events")[0][0]


def two_steps(ws, worker):
    script = ScriptedModel([call("work", n=1), call("work", n=2), call("done", success=True, text="two")])
    return ws.agent("worker", model=script.name, tools=["work"]).run_sync("do the work")


# -- a done beside other actions ----------------------------------------------------------------
@pytest.mark.parametrize(
    "actions",
    [
        [{"name": "done", "arguments": {"success": True, "text": "x"}}, {"name": "work", "arguments": {"n": 3}}],
        [{"name": "work", "arguments": {"n": 3}}, {"name": "done", "arguments": {"success": True, "text": "x"}}],
    ],
)
def test_done_beside_other_actions_is_refused_before_anything_is_written(ws, worker, actions):
    first = two_steps(ws, worker)
    before = written(ws)
    with pytest.raises(ForkError, match="'done' must be the only action of its step, not beside work"):
        run_sync(ws.fork(first.run_id, 2, edit={"actions": actions}))
    assert written(ws) == before and worker == [1, 2]
    # done alone is still a good edit
    alone = run_sync(ws.fork(first.run_id, 2, edit={"actions": [a for a in actions if a["name"] == "done"]}))
    assert alone.success and alone.answer == "x"


# -- honest labels --------------------------------------------------------------------------------
def test_a_resume_says_resumed_after_the_step_it_continues(ws):
    ctx = ws.context()

    def brain(messages, tools):
        step = int(user(messages).split("Step ")[1].split(" ")[0])
        if step == 2:
            ctx.cancel.set()
            return call("echo_n", n=2)
        return call("echo_n", n=step) if step < 3 else call("done", success=True, text="went on")

    @ws.tools.tool
    def echo_n(n: int) -> str:
        """Echo a number."""
        return f"n={n}"

    stopped = ws.agent("stepper", model=ScriptedModel(brain).name, tools=["echo_n"]).run_sync("go", context=ctx)
    assert stopped.status == "interrupted"
    resumed = run_sync(ws.resume(stopped.run_id)).trajectory
    assert resumed.lineage() == f"resumed from {stopped.run_id} after step 1"
    shown = payload(resumed)
    assert (shown["resumed"], shown["fork_point"], shown["edit"]) == (True, "after step 1", None)
    assert f"resumed from {stopped.run_id} after step 1" in trajectory_html(resumed)
    assert "forked" not in trajectory_html(resumed) and "edited" not in trajectory_html(resumed)


def test_a_toolself_stage_fork_says_at_which_stage(ws, pool):
    first = make(ws, green_times_seven()).run_sync("What is green times seven?")
    assert first.success and len(first.trajectory.stages) == 2
    forked = run_sync(ws.fork(first.run_id, stage=2, model=green_times_seven().name)).trajectory
    assert forked.lineage() == f"forked from {first.run_id} at stage 2"
    assert payload(forked)["fork_point"] == "at stage 2" and payload(forked)["edit"] is None
    assert "at step" not in forked.text() and "edited" not in trajectory_html(forked)


def test_a_plain_sub_agent_fork_says_where_and_claims_no_edit(ws, worker):
    ws.agent(
        "stocktaker",
        model=ScriptedModel([call("work", n=1), call("work", n=2), call("done", success=True, text="19")]).name,
        tools=["work"],
        description="Counts.",
    )
    boss = ScriptedModel(
        lambda m, t: (
            call("stocktaker_agent", task="count")
            if "-> " not in user(m)
            else call("done", success=True, text="counted")
        )
    )
    first = ws.agent("boss", model=boss.name, sub_agents=["stocktaker"], tools=[]).run_sync("count the stock")
    sub = first.trajectory.children[0]
    again = ScriptedModel([call("done", success=True, text="20")])
    plain = run_sync(ws.fork(sub.run_id, 2, model=again.name)).trajectory
    assert plain.lineage() == f"forked from {first.run_id} at stocktaker's step 2"
    assert plain.edit["kind"] == "sub_agent" and plain.change is None  # where, not what was changed
    assert payload(plain)["edit"] is None and "edited" not in trajectory_html(plain)
    # with an edit there, the header names it and whose run it changed
    edited = run_sync(
        ws.fork(
            sub.run_id,
            1,
            edit={"observation": "result 7"},
            model=ScriptedModel([call("done", success=True, text="7")]).name,
        )
    ).trajectory
    assert edited.lineage() == f"forked from {first.run_id} at stocktaker's step 1"
    assert edited.change["kind"] == "observation" and edited.change["agent"] == "stocktaker"
    assert payload(edited)["edit"]["agent"] == "stocktaker"
    assert "edited: observation in stocktaker" in trajectory_html(edited)


# -- CORAL: no fork point inside a member's turn ------------------------------------------------------
def test_a_coral_fork_reproduces_at_turn_ends_and_is_refused_inside_a_turn(ws):
    """The orchestrator sends messages 3 and 4 in one step: an unedited fork at 3 is refused (naming 4,
    nothing written) and not offered; at every other message it ends like the original."""
    paper = paper_team(ws)
    first = paper.team.run_sync(TASK)
    assert first.status == "success"
    original = first.trajectory.messages
    assert [m["sender"] for m in original[2:4]] == [ORC, ORC]
    inside = turn_ends(ws.events.events(first.run_id))
    assert set(inside) == {3} and inside[3][0] == [3, 4]
    shown = payload(first.trajectory)["messages"]
    assert [m.get("forkable", True) for m in shown] == [n != 3 for n in range(1, len(original) + 1)]

    before = written(ws)
    with pytest.raises(
        ForkError,
        match=r"message 3 of run \w+ is not the end of information_flow_orchestrator's turn.*"
        r"also sent message 4.*fork at message 4 \(the end of that turn\) or at message 2",
    ):
        run_sync(ws.fork(first.run_id, step=3))
    with pytest.raises(ForkError, match="not the end of"):
        run_sync(ws.fork(first.run_id, step=3, edit={"message": "changed"}))
    assert written(ws) == before

    for n in range(0, len(original) + 1):
        if n == 3:
            continue
        forked = run_sync(ws.fork(first.run_id, step=n))
        assert (forked.status, forked.answer) == (first.status, first.answer), n
        assert len(forked.trajectory.messages) == len(original), n
        flow = [(m["sender"], sorted(m["mentions"])) for m in forked.trajectory.messages]
        assert sorted(flow) == sorted((m["sender"], sorted(m["mentions"])) for m in original), n
        assert forked.trajectory.lineage() == f"forked from {first.run_id} at message {n}"


# -- a kernel restart is not the user's Stop ------------------------------------------------------------
SLOW_AGENT = """
%load_ext tea_notebook
%tea workspace {folder}
import tea_notebook
from tea_notebook.models.offline import ScriptedModel, call
ws = tea_notebook.Workspace({folder!r}, embedder="hashing")

@ws.tools.tool
def slow(n: int) -> str:
    \"\"\"A tool that takes its time, writing down that it started.\"\"\"
    import time
    with open({log!r}, "a") as f:
        f.write(f"{{n}}\\n")
    time.sleep(5)
    return f"did {{n}}"

ws.agent("sleepy", model=ScriptedModel(lambda m, t: call("slow", n=1), name="sleepy").name, tools=["slow"])
"""


def test_a_kernel_restart_is_recorded_as_such_and_a_stop_as_the_users(tmp_path):
    import time

    from kernel_driver import make_kernel_specs, start_kernel

    import tea_notebook

    folder, log = tmp_path / "ws", tmp_path / "calls.log"
    (tmp_path / "specs").mkdir()
    kernel = start_kernel(make_kernel_specs(tmp_path / "specs"), tmp_path)

    def start_and_wait(lines: int) -> None:
        kernel.send("%%agent sleepy\ndo it")
        deadline = time.time() + 60
        while time.time() < deadline and len(log.read_text().split() if log.exists() else []) < lines:
            time.sleep(0.05)
        assert len(log.read_text().split()) == lines, "the run never reached its tool"

    try:
        kernel.ok(SLOW_AGENT.format(folder=str(folder), log=str(log)))
        start_and_wait(1)
        kernel.km.interrupt_kernel()  # ■: the user's Stop
        deadline = time.time() + 30
        while time.time() < deadline and kernel.json("ws.runs(1)[0]['status']") == "running":
            time.sleep(0.1)
        start_and_wait(2)
        kernel.km.restart_kernel(now=False)  # what JupyterLab's restart does: ■, then a shutdown request
    finally:
        kernel.kc.stop_channels()
        kernel.km.shutdown_kernel(now=True)
    ws = tea_notebook.Workspace(folder, embedder="hashing")
    try:
        restarted, stopped = ws.runs(2)
        ended = {
            r["id"]: e.data for r in (restarted, stopped) for e in ws.events.events(r["id"]) if e.type == "run_finished"
        }
        assert (stopped["status"], ended[stopped["id"]]["error"]) == ("interrupted", "stopped by the user")
        assert (restarted["status"], ended[restarted["id"]]["error"]) == (
            "interrupted",
            "interrupted: the kernel restarted",
        )
    finally:
        ws.close()
