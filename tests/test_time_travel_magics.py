"""Time travel from magics (issue 22) in an in-process IPython shell: ``%tea context``, ``%tea fork``
with ``--edit`` (a prefilled cell that runs as it is), ``--stage``, ``--rerun-from``, ``%tea branches``,
``%tea compare`` and ``%tea resume``; the sidebar comm's ``context`` request. Scripted models only."""

from __future__ import annotations

import ast
import os

import pytest

pytest.importorskip("IPython")

from conftest import magics_workspace, tea  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.notebook.fork_cells import text_literal, value_literal  # noqa: E402
from tea_notebook.notebook.sidebar_comm import SidebarComms  # noqa: E402
from tea_notebook.runtime.agent import RunResult  # noqa: E402
from tea_notebook.runtime.contexts import StepContext  # noqa: E402

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

WORK = '''def work(n: int) -> str:
    """Do one unit of work."""
    return f"result {n}\\nline two of {n}"
'''


@pytest.fixture
def ws(ip, magics, tmp_path, monkeypatch):
    """A fresh workspace (hashing embedder) the magics use; ``work`` registered; no ``ws`` variable."""
    switched = magics_workspace(ip, tmp_path, monkeypatch)
    ip.run_cell_magic("tool", "", WORK)
    for name in ("ws", "tea_ws"):
        ip.user_ns.pop(name, None)
    ip.rl_next_input = None
    yield switched


def four_steps(ip) -> RunResult:
    script = ScriptedModel(
        [call("work", n=1), call("work", n=2), call("work", n=3), call("done", success=True, text="original")]
    )
    result = ip.run_cell_magic("agent", f"--model {script.name} --tools work --quiet", "Do the work.")
    assert result.success and result.steps == 4
    return result


def run_prefilled(ip) -> RunResult:
    """Run the cell ``%tea fork --edit`` put below, as it is; its value (the fork's RunResult)."""
    code = ip.rl_next_input
    assert code, "no cell was prefilled"
    ip.rl_next_input = None
    outcome = ip.run_cell(code, store_history=False)
    outcome.raise_error()
    return outcome.result


# -- literals -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "one line",
        "two\nlines",
        'ends with a quote"\n"',
        'has """ inside\nand \\ backslashes',
        "tab\tand\r\nCR",
        "",
        "\n",
    ],
)
def test_prefilled_texts_read_back_exactly(text):
    literal = text_literal(text)
    assert ast.literal_eval(literal) == text
    if "\n" in text and "\r" not in text:
        assert literal.startswith('"""')  # editable in place


def test_prefilled_values_read_back_exactly():
    value = [{"name": "work", "arguments": {"n": 3, "flag": True, "none": None, "text": "a\nb"}}]
    assert ast.literal_eval(value_literal(value)) == value


# -- %tea context ----------------------------------------------------------------------------------
def test_context_shows_what_the_model_saw_at_a_step(ip, ws):
    first = four_steps(ip)
    ctx = tea(ip, f"context {first.run_id} --step 3")
    assert isinstance(ctx, StepContext) and ctx.step == 3
    assert "result 2" in str(ctx.messages) and "history" in ctx.sizes()
    assert "context of step 3" in ctx._repr_html_()
    with pytest.raises(UsageError, match="no model request at step 9; steps with one: 1, 2, 3, 4"):
        tea(ip, f"context {first.run_id} --step 9")
    with pytest.raises(UsageError, match="needs --step N"):
        tea(ip, f"context {first.run_id}")
    with pytest.raises(UsageError, match="usage: %tea context"):
        tea(ip, "context")
    with pytest.raises(UsageError, match="no run"):
        tea(ip, "context nosuchrun --step 1")


# -- %tea fork --edit -----------------------------------------------------------------------------
def test_edit_observation_prefills_a_cell_that_forks_as_it_is(ip, ws):
    first = four_steps(ip)
    runs = len(ws.runs(100))
    shown = tea(ip, f"fork {first.run_id} --step 3 --edit")
    assert "observation of action 1 (work) of step 3" in shown
    assert len(ws.runs(100)) == runs  # nothing ran
    code = ip.rl_next_input
    assert 'observation = """result 3\nline two of 3"""' in code
    assert f"await ws.fork('{first.run_id}', 3, edit={{'observation': observation, 'action': 1}})" in code
    assert "tea_notebook.current_workspace()" in code  # no variable held the workspace: the cell binds one
    assert "--edit actions | --edit context" in code
    # a person edits the text and runs the cell
    after = ScriptedModel([call("done", success=True, text="forked")])
    ip.rl_next_input = code.replace("result 3\nline two of 3", "EDITED three").replace(
        "edit={", f"model={after.name!r}, edit={{"
    )
    forked = run_prefilled(ip)
    assert isinstance(forked, RunResult) and forked.success and forked.answer == "forked"
    assert "EDITED three" in str(after.calls[0]) and "result 3" not in str(after.calls[0])
    assert forked.trajectory.edit["kind"] == "observation" and forked.trajectory.forked_from == first.run_id


def test_edit_uses_a_variable_that_holds_the_workspace(ip, ws):
    first = four_steps(ip)
    ip.user_ns["my_ws"] = ws
    try:
        tea(ip, f"fork {first.run_id} --step 2 --edit observation")
        code = ip.rl_next_input
        assert "await my_ws.fork(" in code and "current_workspace" not in code
    finally:
        ip.user_ns.pop("my_ws")
    ip.user_ns["ws"] = "something else"
    try:
        tea(ip, f"fork {first.run_id} --step 2 --edit")
        assert "tea_ws = tea_notebook.current_workspace()" in ip.rl_next_input  # the person's ws is kept
    finally:
        ip.user_ns.pop("ws")


def test_edit_actions_and_context_prefill_runnable_cells(ip, ws):
    first = four_steps(ip)
    tea(ip, f"fork {first.run_id} --step 2 --edit actions --model tea/test")
    code = ip.rl_next_input
    assert "actions = [{'name': 'work', 'arguments': {'n': 2}}]" in code and "model='tea/test'" in code
    after = ScriptedModel([call("done", success=True, text="after the edit")])
    ip.rl_next_input = code.replace("{'n': 2}", "{'n': 20}").replace("tea/test", after.name)
    forked = run_prefilled(ip)
    assert forked.success and forked.trajectory.steps[1].note == "actions edited"
    assert "result 20" in str(after.calls[0])

    tea(ip, f"fork {first.run_id} --step 3 --edit context")
    code = ip.rl_next_input
    assert code.count("'role':") == len(first.context(3).messages) and "messages = [" in code
    ns: dict = {}
    exec(code.split("\nawait ")[0].replace("import tea_notebook\n", ""), {"tea_notebook": tea_notebook}, ns)
    assert ns["messages"] == first.context(3).messages  # the stored context, exactly
    stopper = ScriptedModel([call("done", success=True, text="stopped")])
    ip.rl_next_input = code.replace("result 2", "result 2 (hint: stop now)").replace(
        "edit={", f"model={stopper.name!r}, edit={{"
    )
    forked = run_prefilled(ip)
    assert forked.success and "hint: stop now" in str(stopper.calls[0])


@pytest.mark.parametrize(
    "line, message",
    [
        ("--step 3 --edit colour", "--edit colour: an edit is observation, actions or context"),
        ("--step 3 --edit observation --action 4", "has 1 action\\(s\\); there is no action 4"),
        ("--step 3 --action 1", "--action goes with --edit observation"),
        ("--step 3 --edit actions --action 1", "--action picks whose observation"),
        ("--step 3 --stage 1", "needs --step N or --stage K"),
        ("--step 9 --edit", "no stored step 9"),
        ("--step 3 --edit message", "takes edits of observation or actions or context, not message"),
        ("--stage 1 --edit", "has no stages: fork it by --step N"),
        ("--stage 0", "--stage must be 1 or more"),
        ("--step 2 --rerun-from x", "usage: %tea fork"),
    ],
)
def test_bad_fork_lines_are_usage_errors_and_write_nothing(ip, ws, line, message):
    first = four_steps(ip)
    runs = len(ws.runs(100))
    with pytest.raises(UsageError, match=message):
        tea(ip, f"fork {first.run_id} {line}")
    assert len(ws.runs(100)) == runs and ip.rl_next_input is None


def test_fork_rerun_from_runs_the_stored_tools_again(ip, ws):
    first = four_steps(ip)
    after = ScriptedModel([call("done", success=True, text="again")])
    forked = tea(ip, f"fork {first.run_id} --step 3 --rerun-from 2 --model {after.name} --quiet")
    assert forked.success and [s.note for s in forked.trajectory.steps][:3] == [
        "",
        "re-executed live",
        "re-executed live",
    ]


# -- a sub-agent's run ------------------------------------------------------------------------------
def test_a_sub_agents_step_has_its_context_and_forks_its_parent(ip, ws):
    helper = ScriptedModel([call("work", n=1), call("done", success=True, text="helper says 1")])
    ws.agent("helper", model=helper.name, tools=["work"], description="Helps.")
    boss = ScriptedModel(
        lambda messages, tools: (
            call("helper_agent", task="help")
            if "helper says" not in str(messages)
            else call("done", success=True, text="boss relays")
        )
    )
    first = ws.agent("boss", model=boss.name, sub_agents=["helper"], tools=[]).run_sync("get help")
    sub = first.trajectory.children[0]
    ctx = tea(ip, f"context {first.run_id} --step 1 --run {sub.run_id}")
    assert ctx.run_id == sub.run_id and "help" in str(ctx.messages)
    tea(ip, f"fork {sub.run_id} --step 1 --edit")
    code = ip.rl_next_input
    assert f"fork('{sub.run_id}', 1, edit={{'observation'" in code
    helper_after = ScriptedModel([call("done", success=True, text="helper says EDITED")])
    ip.rl_next_input = code.replace("result 1", "result 99").replace("edit={", f"model={helper_after.name!r}, edit={{")
    forked = run_prefilled(ip)
    assert forked.success and forked.trajectory.forked_from == first.run_id
    assert "result 99" in str(helper_after.calls[0])


# -- ToolSelf and CORAL ------------------------------------------------------------------------------
def test_a_toolself_run_forks_by_stage_from_the_magic(ip, ws):
    from test_toolself import TASK, Script, config, finish, green_times_seven, make, reconfigure, register_pool

    register_pool(ws)
    first = make(ws, green_times_seven()).run_sync(TASK)
    assert first.success and len(first.trajectory.stages) == 2
    with pytest.raises(UsageError, match="ToolSelf run: it is forked at a stage"):
        tea(ip, f"fork {first.run_id} --step 1 --edit")
    with pytest.raises(UsageError, match="stages 1 to 2; there is no stage 3"):
        tea(ip, f"fork {first.run_id} --stage 3 --quiet")
    tea(ip, f"fork {first.run_id} --stage 2 --edit")
    code = ip.rl_next_input
    assert "'sub_goal': 'multiply'" in code and "'toolbox': ['mul']" in code
    assert f"fork('{first.run_id}', stage=2, edit={{'stage': stage}})" in code
    again = Script([], [call("add", a=6, b=7), finish("13")])
    ip.rl_next_input = (
        code.replace("'multiply'", "'add the two numbers'", 1)
        .replace("['mul']", "['add']")
        .replace("edit={", f"model={again.name!r}, edit={{")
    )
    forked = run_prefilled(ip)
    assert forked.success and forked.answer == "13"
    assert forked.trajectory.stages[0]["toolbox"] == ["add"]
    onward = Script([config("multiply", ["mul"])], [reconfigure("added", "multiply"), call("mul", a=6, b=7), finish()])
    plain = tea(ip, f"fork {first.run_id} --stage 2 --model {onward.name} --quiet")
    assert plain.success and plain.trajectory.forked_from == first.run_id


def test_a_coral_run_forks_at_a_message_from_the_magic(ip, ws):
    from test_coral import TASK, paper_team

    first = paper_team(ws).team.run_sync(TASK)
    assert first.status == "success"
    original = first.trajectory.messages
    tea(ip, f"fork {first.run_id} --step 4 --edit")
    code = ip.rl_next_input
    assert "message = " in code and f"fork('{first.run_id}', 4, edit={{'message': message}})" in code
    assert ast.literal_eval(code.split("message = ", 1)[1].split("\nawait ")[0]) == original[3]["content"]
    ip.rl_next_input = code.replace("\nawait ", "\nmessage += ' (EDITED: answer in capitals)'\nawait ")
    forked = run_prefilled(ip)
    assert forked.trajectory.messages[3]["content"].endswith("(EDITED: answer in capitals)")
    with pytest.raises(UsageError, match="takes edits of message, not observation"):
        tea(ip, f"fork {first.run_id} --step 4 --edit observation")


# -- branches, compare, resume ---------------------------------------------------------------------
def test_branches_compare_and_resume(ip, ws):
    first = four_steps(ip)
    a = tea(
        ip, f"fork {first.run_id} --step 2 --model {ScriptedModel([call('done', success=True, text='a')]).name} --quiet"
    )
    family = tea(ip, f"branches {a.run_id}")
    assert [b.run_id for b in family][:2] == [first.run_id, a.run_id] and "<table>" in family._repr_html_()
    cmp = tea(ip, f"compare {first.run_id} {a.run_id}")
    assert cmp.diverges_at == 3 and "diverge at step 3" in cmp.text()
    with pytest.raises(UsageError, match="usage: %tea compare"):
        tea(ip, f"compare {first.run_id}")
    with pytest.raises(UsageError, match="usage: %tea branches"):
        tea(ip, "branches")
    with pytest.raises(UsageError, match="only an interrupted run or one that ended in error"):
        tea(ip, f"resume {first.run_id}")
    # an interrupted run goes on from its last finished step
    stopped = ScriptedModel([call("work", n=1), call("work", n=2), call("done", success=True, text="x")])
    run = ws.agent("stopper", model=stopped.name, tools=["work"]).run_sync("w")
    ws.db._conn.execute("UPDATE runs SET status='interrupted' WHERE id=?", (run.run_id,))
    finish = ScriptedModel([call("done", success=True, text="resumed")])
    ScriptedModel._registry[run.trajectory.model.split(":", 1)[1]] = finish
    resumed = tea(ip, f"resume {run.run_id} --quiet")
    assert resumed.success and resumed.answer == "resumed"
    assert resumed.trajectory.events[0].data["resumed_from"] == run.run_id
    help_text = tea(ip, "help")
    for sub in ("%tea context", "%tea branches", "%tea compare", "%tea resume", "--edit", "--stage K", "--rerun-from"):
        assert sub in help_text, sub


# -- the sidebar comm's context request -------------------------------------------------------------
class FakeComm:
    def __init__(self):
        self.sent: list[dict] = []

    def send(self, data):
        self.sent.append(data)


def test_the_sidebar_comm_answers_a_context_request(ip, ws):
    first = four_steps(ip)
    comms = SidebarComms(lambda: ws)
    comm = FakeComm()
    comms.handle(comm, {"request": "context", "run": first.run_id, "step": 3, "stage": ""})
    reply = comm.sent[-1]
    assert reply["type"] == "context" and reply["run"] == first.run_id and reply["step"] == 3
    ctx = reply["context"]
    assert ctx["step"] == 3 and ctx["previous_step"] == 2 and ctx["parts"]
    kinds = {p["kind"] for p in ctx["parts"]}
    assert {"system prompt", "task", "history", "tools"} <= kinds
    assert any(p["changed"] and "<step_2>" in p["text"] for p in ctx["parts"])
    assert not any(p["changed"] for p in ctx["parts"] if p["kind"] == "system prompt")
    comms.handle(comm, {"request": "context", "run": first.run_id, "step": 9})
    reply = comm.sent[-1]
    assert reply["type"] == "error" and reply["request"] == "context" and reply["step"] == 9
    assert "no model request at step 9" in reply["message"]
    comms.handle(comm, {"request": "context", "run": first.run_id, "step": "three"})
    assert comm.sent[-1]["type"] == "error" and "step" in comm.sent[-1]["message"]
    assert SidebarComms(lambda: None).context({"run": first.run_id, "step": 1})["type"] == "error"
