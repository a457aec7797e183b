"""The kernel side of the renderer's one-gesture "edit and fork" (issue 28): the sidebar comm's
``edit_targets`` (each action's observation and the actions of a step, a CORAL message, a ToolSelf
stage's fields) and ``fork_cell`` (the one complete cell that forks with the edited value, which the
renderer inserts and runs); bad values refused with a reason and nothing written; and the context
parts' readable summaries (no raw ``<agent_history>``)."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest  # noqa: E402
from test_time_travel_magics import FakeComm, four_steps, ws  # noqa: E402, F401 - the fixture

from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.notebook.fork_cells import workspace_name  # noqa: E402
from tea_notebook.notebook.sidebar_comm import SidebarComms  # noqa: E402
from tea_notebook.runtime.contexts import part_summary  # noqa: E402


def comms_for(ip, ws) -> tuple[SidebarComms, FakeComm]:  # noqa: F811 - the fixture's value
    return SidebarComms(lambda: ws, lambda w: workspace_name(ip.user_ns, w)), FakeComm()


def ask(comms: SidebarComms, comm: FakeComm, **data) -> dict:
    comms.handle(comm, data)
    return comm.sent[-1]


def run_code(ip, code: str, answer: str = "forked"):
    """Run a fork cell as it is, but with a scripted model for the steps after the fork (the original's
    script is used up)."""
    onward = ScriptedModel([call("done", success=True, text=answer)])
    code = code.replace("edit={", f"model={onward.name!r}, edit={{", 1)
    outcome = ip.run_cell(code, store_history=False)
    outcome.raise_error()
    return outcome.result


def test_a_step_offers_each_observation_and_its_actions(ip, ws):  # noqa: F811
    first = four_steps(ip)
    comms, comm = comms_for(ip, ws)
    reply = ask(comms, comm, request="edit_targets", run=first.run_id[:10], step=3)
    assert reply["type"] == "edit_targets" and reply["run"] == first.run_id and reply["step"] == 3
    obs, actions = reply["targets"]
    assert obs == {
        "kind": "observation",
        "action": 1,
        "label": "the observation of action 1 (work)",
        "value": "result 3\nline two of 3",
        "format": "text",
    }
    assert actions["kind"] == "actions" and actions["format"] == "json"
    assert actions["value"] == [{"name": "work", "arguments": {"n": 3}}]


def test_fork_cell_is_one_complete_cell_that_forks_with_the_edited_observation(ip, ws):  # noqa: F811
    first = four_steps(ip)
    comms, comm = comms_for(ip, ws)
    runs = len(ws.runs())
    reply = ask(
        comms, comm, request="fork_cell", run=first.run_id, step=3, kind="observation", action=1, value="EDITED\nthree"
    )
    assert reply["type"] == "fork_cell" and len(ws.runs()) == runs  # nothing ran yet
    code = reply["code"]
    assert code.splitlines()[0].startswith(f"# fork run {first.run_id} at step 3: the observation of action 1 (work)")
    assert 'observation = """EDITED\nthree"""' in code
    assert code.rstrip().endswith(
        f"await ws.fork('{first.run_id}', 3, edit={{'observation': observation, 'action': 1}})"
    )
    assert "ws = " in code  # no variable holds the workspace: the cell binds one
    forked = run_code(ip, code)
    assert forked.success and forked.trajectory.forked_from == first.run_id
    assert forked.trajectory.edit["kind"] == "observation" and forked.trajectory.edit["after"] == "EDITED\nthree"


def test_fork_cell_with_edited_actions_runs_them_live(ip, ws, monkeypatch):  # noqa: F811
    first = four_steps(ip)
    comms, comm = comms_for(ip, ws)
    ip.user_ns["mine"] = ws
    reply = ask(
        comms, comm, request="fork_cell", run=first.run_id, step=3, kind="actions",
        value=[{"name": "work", "arguments": {"n": 30}}],
    )  # fmt: skip
    code = reply["code"]
    assert "actions = [{'name': 'work', 'arguments': {'n': 30}}]" in code
    assert f"await mine.fork('{first.run_id}', 3, edit={{'actions': actions}})" in code and "mine = " not in code
    forked = run_code(ip, code)
    assert forked.success and forked.trajectory.steps[2].note == "actions edited"
    assert "result 30" in str(forked.trajectory.steps[2].results)


def test_fork_cell_takes_the_replay_choice(ip, ws):  # noqa: F811
    """The panel's replay choice goes into the cell's fork call; "recorded" answers the edited fork's
    tools from the original's results (an edited observation then departs at the next step)."""
    first = four_steps(ip)
    comms, comm = comms_for(ip, ws)
    reply = ask(
        comms, comm, request="fork_cell", run=first.run_id, step=2, kind="observation", action=1,
        value="EDITED two", replay="recorded",
    )  # fmt: skip
    code = reply["code"]
    assert code.rstrip().endswith(
        f"await ws.fork('{first.run_id}', 2, edit={{'observation': observation, 'action': 1}}, replay='recorded')"
    )
    live = ask(comms, comm, request="fork_cell", run=first.run_id, step=2, kind="observation", value="x", replay="live")
    assert live["code"].rstrip().endswith("replay='live')")
    onward = ScriptedModel([call("work", n=3), call("done", success=True, text="forked")])
    outcome = ip.run_cell(code.replace("edit={", f"model={onward.name!r}, edit={{", 1), store_history=False)
    outcome.raise_error()
    forked = outcome.result
    assert forked.success and forked.trajectory.divergence.step == 3
    recorded = [e.data for e in ws.events.events(forked.run_id, nested=False) if e.type == "tool_result"]
    assert recorded[-1].get("policy") == "recorded" and recorded[-1]["observation"].startswith("result 3")


@pytest.mark.parametrize(
    "data, message",
    [
        ({"kind": "observation", "value": "x", "replay": "sometimes"}, "recorded, live or refuse, not 'sometimes'"),
        ({"kind": "observation", "value": "x", "replay": 3}, "a replay policy is a text"),
        ({"kind": "actions", "value": {"name": "work"}}, "the actions are a list"),
        ({"kind": "actions", "value": [{"arguments": {"n": 1}}]}, 'action 1 needs a "name"'),
        ({"kind": "actions", "value": [{"name": "work", "arguments": [1]}]}, '"arguments" of action 1 (work)'),
        ({"kind": "actions", "value": [{"name": "work", "args": {}}]}, "action 1 (work) has args"),
        ({"kind": "observation", "value": 3}, "an observation is a text, not int"),
        ({"kind": "observation", "action": 2, "value": "x"}, "has 1 action(s); there is no action 2"),
        ({"kind": "stage", "field": "strategy", "value": "x"}, "takes edits of observation or actions or context"),
        ({"kind": "observation", "field": "strategy", "value": "x"}, "is edited in a ToolSelf stage"),
        ({"kind": "context", "value": []}, "a context edit is made in a cell"),
        ({"kind": "observation"}, "no edited value was sent"),
        ({"kind": "observation", "value": "x", "step": "three"}, "the step is a whole number"),
        ({"kind": "observation", "value": "x", "stage": 1}, "a step or a stage (one of them)"),
        ({"kind": "observation", "value": "x", "run": "nope"}, "no run 'nope'"),
    ],
)
def test_bad_edits_are_refused_with_a_reason_and_nothing_is_written(ip, ws, data, message):  # noqa: F811
    first = four_steps(ip)
    comms, comm = comms_for(ip, ws)
    runs = len(ws.runs())
    reply = ask(comms, comm, **{"request": "fork_cell", "run": first.run_id, "step": 3, **data})
    assert reply["type"] == "error" and reply["request"] == "fork_cell", reply
    assert message in reply["message"], reply["message"]
    assert len(ws.runs()) == runs


def test_a_step_that_is_not_stored_offers_nothing(ip, ws):  # noqa: F811
    first = four_steps(ip)
    comms, comm = comms_for(ip, ws)
    reply = ask(comms, comm, request="edit_targets", run=first.run_id, step=9)
    assert reply["type"] == "error" and reply["request"] == "edit_targets"
    assert f"run {first.run_id} has no stored step 9 (its steps: 1 to 4)" in reply["message"]


def test_a_toolself_stage_offers_its_fields_and_forks_with_one_changed(ip, ws):  # noqa: F811
    from test_toolself import TASK, Script, finish, green_times_seven, make, register_pool

    register_pool(ws)
    first = make(ws, green_times_seven()).run_sync(TASK)
    comms, comm = comms_for(ip, ws)
    reply = ask(comms, comm, request="edit_targets", run=first.run_id, stage=2)
    fields = {t["field"]: t for t in reply["targets"]}
    assert list(fields) == ["sub_goal", "strategy", "toolbox", "knowledge_text"]
    assert fields["sub_goal"]["value"] == "multiply" and fields["toolbox"] == {
        "kind": "stage", "field": "toolbox", "label": "the toolbox (a list of tool names)", "value": ["mul"],
        "format": "json",
    }  # fmt: skip
    bad = ask(comms, comm, request="fork_cell", run=first.run_id, stage=2, kind="stage", field="toolbox", value="add")
    assert bad["type"] == "error" and "the toolbox is a list of tool names" in bad["message"]
    reply = ask(
        comms, comm, request="fork_cell", run=first.run_id, stage=2, kind="stage", field="toolbox", value=["add"]
    )
    code = reply["code"]
    assert "'sub_goal': 'multiply'" in code and "'toolbox': ['add']" in code
    assert code.splitlines()[0].endswith(
        "the toolbox (a list of tool names) of stage 2, edited (change the value and run again for another fork)"
    )
    again = Script([], [call("add", a=6, b=7), finish("13")])
    outcome = ip.run_cell(code.replace("edit={", f"model={again.name!r}, edit={{"), store_history=False)
    outcome.raise_error()
    forked = outcome.result
    assert forked.success and forked.trajectory.stages[0]["toolbox"] == ["add"]


def test_a_coral_message_is_offered_as_its_text(ip, ws):  # noqa: F811
    from test_coral import TASK, paper_team

    first = paper_team(ws).team.run_sync(TASK)
    comms, comm = comms_for(ip, ws)
    reply = ask(comms, comm, request="edit_targets", run=first.run_id, step=4)
    [target] = reply["targets"]
    assert target["kind"] == "message" and target["value"] == first.trajectory.messages[3]["content"]
    assert target["label"].startswith("message 4 (from ")
    cell = ask(comms, comm, request="fork_cell", run=first.run_id, step=4, kind="message", value="EDITED")
    assert (
        "message = 'EDITED'" in cell["code"]
        and f"fork('{first.run_id}', 4, edit={{'message': message}})" in cell["code"]
    )
    recorded = ask(
        comms, comm, request="fork_cell", run=first.run_id, step=4, kind="message", value="E", replay="recorded"
    )
    assert "replay='recorded'" in recorded["code"]  # a CORAL fork takes a replay policy too
    refused = ask(
        comms, comm, request="fork_cell", run=first.run_id, step=4, kind="message", value="E", replay="sometimes"
    )
    assert refused["type"] == "error" and "sometimes" in refused["message"]


def test_context_parts_have_a_readable_summary(ip, ws):  # noqa: F811
    first = four_steps(ip)
    comms, comm = comms_for(ip, ws)
    parts = ask(comms, comm, request="context", run=first.run_id, step=3, stage="")["context"]["parts"]
    history = [p["summary"] for p in parts if p["kind"] == "history"]
    assert history == [f'step {n}: [work] {{"n": {n}}} -> result {n} line two of {n}' for n in (1, 2)], history
    assert not any("<" in p["summary"] for p in parts if p["kind"] in ("history", "task", "step info"))
    assert "tool work: Do one unit of work." in [p["summary"] for p in parts]


@pytest.mark.parametrize(
    "text, summary",
    [
        (
            "\n<agent_history>\n<step_1>\nEvaluation of Previous Step: \nMemory: \nNext Goal: go on\n",
            "step 1: Next Goal: go on",
        ),
        ("<task>boil water</task>", "boil water"),
        ("\n</agent_history>\n", "</agent_history>"),  # only a tag (such parts are folded into others)
        ("plain " * 40, ("plain " * 40).strip()[:99] + "…"),
    ],
)
def test_part_summary(text, summary):
    assert part_summary(text) == summary
