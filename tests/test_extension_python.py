"""The Python side of the JupyterLab extension: the live view's trajectory bundle, what the final
bundle carries for the renderer (timings, fork origin, the run's files and todo.md), ``%tea fork``
and the sidebar's comm target. The TypeScript renderer itself is tested by ``jlpm test`` (run here
too, when the extension's node_modules are installed) and in a real JupyterLab by test_extension_ui.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from event_factory import event

from tea_notebook.notebook.live import LiveView
from tea_notebook.notebook.sidebar_comm import TARGET, SidebarComms, register, workspace_state
from tea_notebook.runtime.render import MIME_TYPE, mimebundle

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "0b7e5f6a-1234-4abc-9def-0123456789ab"


# -- the live bundle --------------------------------------------------------------------------------
def test_the_live_view_sends_the_trajectory_payload_marked_live_with_its_kernel():
    view = LiveView(interval=0, display=False, kernel=KERNEL)
    assert MIME_TYPE not in view.bundle()._repr_mimebundle_()[0]  # nothing started yet: HTML only
    view(event("run_started", agent="planner", task="Plan <b>it</b>.", model="tea/test"))
    view(event("tool_call", step=1, id="c1", name="search", arguments={"q": "tea"}))
    view(event("tool_result", step=1, id="c1", ok=True, observation="found", latency=0.25))
    view(event("step", step=1, thinking="look it up", next_goal="answer"))
    view(event("run_started", run_id="r2", parent="r1", agent="helper", task="Help.", model="tea/test"))
    view(event("tool_call", run_id="r2", step=1, id="c2", name="lookup", arguments={}))
    data, meta = view.bundle()._repr_mimebundle_()
    payload = data[MIME_TYPE]
    assert payload["live"] is True and payload["status"] == "running"
    assert payload["task"] == "Plan <b>it</b>." and payload["agent"] == "planner"  # text, escaped by the renderer
    assert [s["number"] for s in payload["steps"]] == [1]
    assert payload["steps"][0]["actions"][0] == {
        "name": "search",
        "arguments": {"q": "tea"},
        "ok": True,
        "observation": "found",
    }
    assert (
        payload["children"][0]["agent"] == "helper"
        and payload["children"][0]["steps"][0]["actions"][0]["name"] == "lookup"
    )
    assert meta[MIME_TYPE] == {
        "run_id": "r1",
        "kernel": KERNEL,
        "live": True,
        "latency": {"steps": [0.0], "tools": [0.25], "children": [{"steps": [0.0], "tools": [0.0], "children": []}]},
    }
    assert "text/html" in data and "tea-stop" in data["text/html"]  # the plain fallback keeps its own button
    json.dumps(data)  # JSON-ready

    view(event("run_finished", status="interrupted"))
    ended = view.bundle()._repr_mimebundle_()[0][MIME_TYPE]
    assert ended["live"] is False and ended["status"] == "interrupted"


def test_the_live_coral_payload_folds_member_tool_calls_under_their_messages():
    view = LiveView(interval=0, display=False, kernel=KERNEL)
    view(event("run_started", run_id="team", agent="orchestrator", task="Capitals?", model="tea/test"))
    view(event("run_started", run_id="w1", parent="team", agent="w1", task="work", model="tea/test"))
    view(event("tool_call", run_id="w1", step=1, id="c1", name="wait_for_mentions", arguments={}))
    view(event("tool_call", run_id="w1", step=1, id="c2", name="geo_agent", arguments={"task": "France"}))
    view(event("tool_result", run_id="w1", step=1, id="c2", ok=True, observation="Paris"))
    view(event("message", run_id="team", seq=1, thread="main", sender="w1", mentions=["orchestrator"], content="Paris"))
    view(event("tool_call", run_id="w1", step=2, id="c3", name="geo_agent", arguments={"task": "later"}))
    payload = view.bundle()._repr_mimebundle_()[0][MIME_TYPE]
    assert payload["messages"] == [
        {
            "seq": 1,
            "thread": "main",
            "sender": "w1",
            "mentions": ["orchestrator"],
            "content": "Paris",
            "work": [[0, 1, 1]],
        }
    ]  # the conversation tool is not work, and the call after the message waits for the next one
    assert payload["children"][0]["steps"][0]["actions"][1]["name"] == "geo_agent"


def test_a_background_run_names_no_kernel_so_the_renderer_shows_no_stop():
    view = LiveView(interval=0, display=False, kernel=KERNEL, background=True)
    view(event("run_started", agent="a", task="t", model="tea/test"))
    _data, meta = view.bundle()._repr_mimebundle_()
    assert meta[MIME_TYPE]["kernel"] is None


# -- the final bundle -------------------------------------------------------------------------------
def test_the_final_bundle_carries_latency_fork_origin_files_and_todo(ws, worker, warm_litellm):
    from tea_notebook.models.offline import ScriptedModel, call

    script = ScriptedModel([call("work", n=1), call("work", n=2), call("done", success=True, text="ok")])
    first = ws.agent("worker", model=script.name, tools=["work"]).run_sync("do the work")
    folder = ws.path / "runs" / first.run_id
    (folder / "notes").mkdir(parents=True, exist_ok=True)
    (folder / "notes" / "a.txt").write_text("x")
    (folder / "todo.md").write_text("- [x] step one\n- [ ] step two\n")
    data, meta = mimebundle(ws.trajectory(first.run_id))
    payload, info = data[MIME_TYPE], meta[MIME_TYPE]
    assert "notes/a.txt" in payload["files"] and "todo.md" in payload["files"]
    assert payload["todo"].startswith("- [x] step one")
    assert first.run_id not in json.dumps(payload)  # ids stay in the metadata
    assert len(info["latency"]["steps"]) == 3 and all(x >= 0 for x in info["latency"]["steps"])
    assert info["folder"] == str(folder) and info["fork_step"] is None


# -- %tea fork --------------------------------------------------------------------------------------
def test_tea_fork_replays_then_goes_on_and_links_back(ip, tmp_path):
    import tea_notebook
    from tea_notebook.models.offline import ScriptedModel, call

    path = tmp_path / "ws"
    tea_notebook.Workspace(path, embedder="hashing").close()
    ip.run_line_magic("tea", f"workspace {path}")
    ip.run_cell_magic(
        "tool", "", 'def work(n: int) -> str:\n    """Do one unit of work."""\n    return f"result {n}"\n'
    )
    original = ScriptedModel([call("work", n=1), call("work", n=2), call("done", success=True, text="original")])
    first = ip.run_cell_magic("agent", f"--model {original.name} --tools work --quiet", "Do the work.")
    assert first.success

    seen: list[str] = []

    def brain(messages, tools):
        seen.append(messages[-1]["content"] if isinstance(messages[-1]["content"], str) else "")
        return call("done", success=True, text="forked")

    other = ScriptedModel(brain)
    forked = ip.run_line_magic("tea", f"fork {first.run_id} --step 1 --model {other.name} --quiet")
    assert forked.success and forked.answer == "forked" and forked.run_id != first.run_id
    traj = forked.trajectory
    assert traj.forked_from == first.run_id and traj.fork_step == 1
    assert [(s.number, s.replayed) for s in traj.steps][:1] == [(1, True)]
    _data, meta = mimebundle(traj)
    assert meta[MIME_TYPE]["forked_from"] == first.run_id and meta[MIME_TYPE]["fork_step"] == 1

    again = ScriptedModel([call("done", success=True, text="other task")])
    third = ip.run_line_magic(
        "tea", f"fork {first.run_id[:12]} --step 2 --model {again.name} --task Do something else --quiet"
    )
    assert third.success and third.trajectory.task == "Do something else"

    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="usage: %tea fork"):
        ip.run_line_magic("tea", f"fork {first.run_id}")
    with pytest.raises(UsageError, match="only 3 steps"):
        ip.run_line_magic("tea", f"fork {first.run_id} --step 9 --quiet")
    assert "%tea fork RUN --step N" in ip.run_line_magic("tea", "help")


# -- the sidebar's comm -----------------------------------------------------------------------------
class FakeComm:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.handler = None
        self.closer = None

    def send(self, data: dict[str, Any]) -> None:
        self.sent.append(json.loads(json.dumps(data)))  # what goes over the wire: JSON

    def on_msg(self, fn: Any) -> None:
        self.handler = fn

    def on_close(self, fn: Any) -> None:
        self.closer = fn


def test_the_sidebar_gets_the_workspace_state_and_trajectories(ws, warm_litellm):
    from tea_notebook.models.offline import ScriptedModel, call

    @ws.tools.tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    opened: list[Any] = [None]
    comms = SidebarComms(lambda: opened[0])
    comm = FakeComm()
    comms.open(comm, {"content": {"data": {"request": "state"}}})
    assert comm.sent[-1]["state"]["sections"] == {}  # no workspace open yet: nothing is created
    opened[0] = ws
    comms.post_run_cell()
    state = comm.sent[-1]["state"]
    assert state["workspace"] == str(ws.path)
    tool = next(t for t in state["sections"]["tools"] if t["name"] == "add")
    assert tool["details"]["schema"]["properties"].keys() == {"a", "b"}
    assert tool["details"]["versions"][0]["current"] is True and "def add" in tool["details"]["source"]
    assert set(state["sections"]) == {"tools", "agents", "envs", "runs", "memory"}

    sent = len(comm.sent)
    comms.post_run_cell()  # nothing changed: nothing sent
    assert len(comm.sent) == sent
    script = ScriptedModel([call("add", a=1, b=2), call("done", success=True, text="3")])
    run = ws.agent("adder", model=script.name, tools=["add"]).run_sync("Add 1 and 2.")
    comms.post_run_cell()  # a run ended: the new state goes out
    assert [r["name"] for r in comm.sent[-1]["state"]["sections"]["runs"]] == [run.run_id]
    assert "adder" in [a["name"] for a in comm.sent[-1]["state"]["sections"]["agents"]]

    comm.handler({"content": {"data": {"request": "trajectory", "run": run.run_id}}})
    reply = comm.sent[-1]
    assert reply["type"] == "trajectory" and reply["run"] == run.run_id
    assert reply["data"]["agent"] == "adder" and len(reply["data"]["steps"]) == 2
    assert reply["metadata"][MIME_TYPE]["run_id"] == run.run_id
    comm.handler({"content": {"data": {"request": "trajectory", "run": "no-such-run"}}})
    assert comm.sent[-1]["type"] == "error"
    comm.handler({"content": {"data": {"request": "rm -rf"}}})
    assert comm.sent[-1] == {"type": "error", "message": "unknown request 'rm -rf'"}

    comm.closer({})
    assert comms.comms == []
    assert workspace_state(ws)["sections"]["runs"][0]["title"] == "adder · success"


def test_the_sidebar_tells_two_runs_of_one_agent_apart(ws, warm_litellm):
    """Each run item has a line with its start time, the shortest unique id prefix, its steps (a team's
    counted over its members) and its task's first words, so two runs of one agent differ."""
    import re

    from tea_notebook.models.offline import ScriptedModel, call
    from tea_notebook.notebook.sidebar_comm import unique_prefixes

    @ws.tools.tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    adder = ws.agent("adder", tools=["add"])
    first = adder.run_sync(
        "Add 1 and 2.\nThen say it.",
        model=ScriptedModel([call("add", a=1, b=2), call("done", success=True, text="3")]).name,
    )
    second = adder.run_sync("Add 5 and 5.", model=ScriptedModel([call("done", success=True, text="10")]).name)
    runs = {r["name"]: r for r in workspace_state(ws)["sections"]["runs"]}
    one, two = runs[first.run_id], runs[second.run_id]
    assert one["title"] == two["title"] == "adder · success"
    assert one["subtitle"] != two["subtitle"]
    for item, run, steps, gist in ((one, first, "2 steps", "Add 1 and 2."), (two, second, "1 steps", "Add 5 and 5.")):
        when, prefix, shown_steps, shown_gist = item["subtitle"].split(" · ")
        assert re.fullmatch(r"\d\d:\d\d:\d\d", when) and item["details"]["started"] == when
        assert run.run_id.startswith(prefix) and len(prefix) >= 8
        assert shown_steps == steps == item["details"]["steps"] and shown_gist == gist
    assert one["subtitle"].split(" · ")[1] != two["subtitle"].split(" · ")[1]
    # ids of one session share their first characters: the prefix grows until it differs
    assert unique_prefixes(["1a2190abcd01", "1a2190abcd02", "ffff00001111"]) == {
        "1a2190abcd01": "1a2190abcd01",
        "1a2190abcd02": "1a2190abcd02",
        "ffff00001111": "ffff0000",
    }
    assert ws.db.step_counts([first.run_id, "no-such-run"]) == {first.run_id: (2, 2), "no-such-run": (0, 0)}


def test_the_comm_target_is_registered_only_in_a_kernel(ip):
    assert register(ip, lambda: None) is None  # a plain IPython shell has no kernel
    assert ip.magics_manager.registry["TeaMagics"].sidebar is None
    assert TARGET == "tea_notebook.sidebar"


# -- the TypeScript unit tests ------------------------------------------------------------------------
def test_the_renderer_unit_tests_pass():
    ext = ROOT / "extension"
    # the package's own test script: jlpm (JupyterLab's yarn) when installed, else npm
    jlpm = shutil.which("jlpm", path=str(Path(sys.executable).parent)) or shutil.which("jlpm")
    runner = [jlpm, "test"] if jlpm else [shutil.which("npm") or "npm", "test"]
    if not (ext / "node_modules" / "typescript").is_dir() or shutil.which(runner[0]) is None:
        if os.environ.get("TEA_REQUIRE_BROWSER"):  # CI (.ci/run): pip install -e . must have built the extension
            pytest.fail("the extension's node_modules are missing: pip install -e . should have installed them")
        pytest.skip("the extension's node_modules are not installed (pip install -e . installs them; it needs Node)")
    done = subprocess.run(runner, cwd=ext, capture_output=True, text=True, timeout=240)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "# fail 0" in out and "# pass" in out, out[-2000:]


def test_a_coral_payload_folds_each_members_tool_calls_under_its_message(ws, warm_litellm):
    from test_coral import TASK, paper_team

    from tea_notebook.runtime.render import payload

    result = paper_team(ws).team.run_sync(TASK)
    assert result.status == "success"
    data = payload(result.trajectory)
    by_sender = {m["sender"]: m for m in data["messages"] if m["sender"] in ("w1", "w2")}
    for worker in ("w1", "w2"):
        work = by_sender[worker]["work"]
        resolved = []
        for i, step, k in work:
            child = data["children"][i]
            assert child["agent"] == worker
            resolved.append(next(s for s in child["steps"] if s["number"] == step)["actions"][k]["name"])
        assert resolved == ["geo_agent"]  # the work, not the conversation tools
    assert all("work" not in m for m in data["messages"] if m["sender"] not in ("w1", "w2"))
