"""Where a replay departs (issue 28): a fork compares each step it takes with the original's step of the
same number and says, once, at which step it first departed and how. Real SQLite, real tools, scripted
models that are functions of their input (so the step where a fork departs can be checked against the
messages the model received)."""

from __future__ import annotations

import json
import re

import pytest
from prompt_parts import user_text

from tea_notebook._sync import run_sync
from tea_notebook.errors import NotFoundError
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.protocol.context import ToolContext
from tea_notebook.runtime.divergence import RunNames, input_hash

STEP = re.compile(r"<step_(\d+)>")


def steps_seen(messages: list[dict]) -> int:
    """How many steps the prompt's history shows."""
    return len(STEP.findall(user_text(messages)))


def counter(last: int = 4, pick=None):
    """A model that is a function of its input: at each step it works on the next number (``pick(k)``
    chooses it; k is the step) and notes it, and after ``last - 1`` steps it answers with the last work's result."""

    def brain(messages: list[dict], tools: list[dict]):
        k = steps_seen(messages) + 1
        if k >= last:
            observed = re.findall(r"\[work\] .*? -> (.*)", user_text(messages))
            return call("done", success=True, text=observed[-1] if observed else "nothing")
        return [call("work", n=pick(k) if pick else k), call("note", text=f"step {k}")]

    return ScriptedModel(brain)


@pytest.fixture
def tools(ws):
    """``work(n)`` returns "result <n>"; ``note(text)`` writes it into the run's folder and returns the
    file's path (so the prompt holds the run's own folder)."""

    @ws.tools.tool
    def work(n: int) -> str:
        """Do one unit of work."""
        return f"result {n}"

    @ws.tools.tool
    def note(text: str, tc: ToolContext) -> str:
        """Write a note into the run folder."""
        return f"wrote {tc.write('note.txt', text)}"

    return ["work", "note"]


def first_run(ws, tools, model):
    agent = ws.agent("counter", model=model.name, tools=tools)
    result = agent.run_sync("count to three")
    assert result.status == "success" and result.steps == 4
    return result


def diverged_events(ws, run_id: str) -> list[dict]:
    return [e.data for e in ws.events.events(run_id, nested=False) if e.type == "diverged"]


def hashes(ws, run_id: str) -> dict[int, str]:
    return {
        e.step: e.data["input_hash"]
        for e in ws.events.events(run_id, nested=False)
        if e.type == "model_request" and e.step is not None
    }


def first_input_difference(ws, model: ScriptedModel, original: dict[int, list], forked) -> int | None:
    """The first step whose messages the model received in the fork ``forked`` differ from those it
    received at that step of the original run (``original``: step -> messages), each run's own folder
    and id aside (the model's last calls were the fork's)."""
    taken = [e.step for e in ws.events.events(forked.run_id, nested=False) if e.type == "model_request"]
    names = RunNames.of(ws, forked.run_id)
    for step, messages in zip(taken, model.calls[-len(taken) :]):
        if step not in original or names.normal(json.dumps(original[step])) != names.normal(json.dumps(messages)):
            return step
    return None


# -- no departure ---------------------------------------------------------------------------------
def test_an_unedited_fork_of_a_deterministic_run_reports_no_departure(ws, tools):
    model = counter()
    first = first_run(ws, tools, model)
    original = hashes(ws, first.run_id)
    assert sorted(original) == [1, 2, 3, 4]
    prompts = {}
    for at in (0, 1, 2, 3):
        forked = run_sync(ws.fork(first.run_id, at))
        assert (forked.status, forked.answer, forked.steps) == ("success", first.answer, 4)
        assert forked.trajectory.divergence is None, at
        assert diverged_events(ws, forked.run_id) == []
        mine = hashes(ws, forked.run_id)
        assert mine == {n: original[n] for n in range(at + 1, 5)}  # the same prompts, by their hash
        prompts[at] = (forked.run_id, model.calls[-1])
    # the prompts held each run's own folder: different texts, the same hash once the run's ids are replaced
    fork_id, last = prompts[1]
    assert fork_id in json.dumps(last) and json.dumps(last) != json.dumps(model.calls[3])
    assert input_hash(last, RunNames([fork_id, first.run_id])) == original[4]
    assert ws.branches(first.run_id).get(fork_id).departs == "none"


# -- departures -----------------------------------------------------------------------------------
def test_an_edited_observation_departs_where_the_model_input_first_differs(ws, tools):
    model = counter()
    first = first_run(ws, tools, model)
    original = {n: model.calls[n - 1] for n in range(1, 5)}
    forked = run_sync(ws.fork(first.run_id, 2, edit={"observation": "result 22", "action": 1}))
    departure = forked.trajectory.divergence
    assert departure is not None
    assert (departure.source, departure.step, departure.how) == (first.run_id, 3, "model input")
    assert departure.step == first_input_difference(ws, model, original, forked)
    assert departure.text() == "step 3: different model input"
    assert "sha256" in departure.original and "sha256" in departure.replay
    assert len(diverged_events(ws, forked.run_id)) == 1  # the first departure only
    assert forked.answer == first.answer == "result 3"


def test_an_edit_the_model_never_sees_is_no_departure(ws, tools):
    @ws.tools.tool
    def work(n: int) -> str:  # noqa: F811 - a long result: a step shows the model its first 600 characters
        """Do one unit of work."""
        return f"result {n} " + "." * 700

    model = counter()
    first = first_run(ws, tools, model)
    original = {n: model.calls[n - 1] for n in range(1, 5)}
    shown = first.trajectory.steps[1].actions[0]["observation"]
    forked = run_sync(ws.fork(first.run_id, 2, edit={"observation": shown[:-1] + "!"}))  # past what is shown
    assert first_input_difference(ws, model, original, forked) is None
    assert forked.trajectory.divergence is None and forked.answer == first.answer


def test_edited_actions_are_the_edit_and_the_next_step_departs(ws, tools):
    model = counter()
    first = first_run(ws, tools, model)
    original = {n: model.calls[n - 1] for n in range(1, 5)}
    forked = run_sync(ws.fork(first.run_id, 2, edit={"actions": [{"name": "work", "arguments": {"n": 9}}]}))
    departure = forked.trajectory.divergence
    assert (departure.step, departure.how) == (3, "model input")
    assert departure.step == first_input_difference(ws, model, original, forked)


def test_a_model_that_picks_other_arguments_departs_by_its_arguments(ws, tools):
    first = first_run(ws, tools, counter())
    other = counter(pick=lambda k: 7 if k == 3 else k)
    forked = run_sync(ws.fork(first.run_id, 1, model=other.name))
    departure = forked.trajectory.divergence
    assert (departure.step, departure.how) == (3, "arguments")
    assert departure.original == 'work({"n": 3})' and departure.replay == 'work({"n": 7})'
    assert ws.branches(first.run_id).get(forked.run_id).departs == "step 3: different arguments"


def test_a_fork_that_ends_earlier_departs_where_the_original_went_on(ws, tools):
    first = first_run(ws, tools, counter())
    forked = run_sync(
        ws.fork(first.run_id, 2, edit={"actions": [{"name": "done", "arguments": {"success": True, "text": "x"}}]})
    )
    assert forked.steps == 2
    departure = forked.trajectory.divergence
    assert (departure.step, departure.how) == (3, "ended")
    assert departure.original.startswith("step 3: work(") and departure.replay == "ended after step 2 (success)"


def test_a_live_tool_that_answers_differently_departs_by_its_observation(ws, tools):
    calls = []

    @ws.tools.tool
    def work(n: int) -> str:  # noqa: F811 - a tool that answers differently each time it runs
        """Do one unit of work."""
        calls.append(n)
        return f"result {n} (call {len(calls)})"

    first = first_run(ws, tools, counter())
    forked = run_sync(ws.fork(first.run_id, 2, rerun_from=1))
    departure = forked.trajectory.divergence
    assert (departure.step, departure.how) == (1, "observation")
    assert departure.original == "work → result 1 (call 1)" and departure.replay.startswith("work → result 1 (call 4)")


def test_a_sub_agent_fork_compares_the_sub_agent_and_the_run_that_called_it(ws, tools):
    def counting(messages, tools):
        found = [int(n) for n in re.findall(r"-> result (\d+)", user_text(messages))]
        return call("work", n=len(found) + 1) if len(found) < 2 else call("done", success=True, text=str(sum(found)))

    ws.agent("stocktaker", model=ScriptedModel(counting).name, tools=["work"], description="Counts.")
    boss = ScriptedModel(
        lambda m, t: (
            call("stocktaker_agent", task="count")
            if "[stocktaker_agent]" not in user_text(m)
            else call("done", success=True, text=re.findall(r"\[stocktaker_agent\] .*? -> (.*)", user_text(m))[-1])
        )
    )
    first = ws.agent("boss", model=boss.name, sub_agents=["stocktaker"], tools=[]).run_sync("count the stock")
    assert first.answer == "3"
    sub = first.trajectory.children[0]
    plain = run_sync(ws.fork(sub.run_id, 1))
    assert plain.answer == "3" and plain.trajectory.divergence is None
    assert plain.trajectory.children[0].divergence is None
    edited = run_sync(ws.fork(sub.run_id, 1, edit={"observation": "result 7"}))
    assert edited.answer == "9"
    inner = edited.trajectory.children[0].divergence
    assert (inner.source, inner.step, inner.how) == (sub.run_id, 2, "model input")
    outer = edited.trajectory.divergence
    assert (outer.source, outer.step, outer.how) == (first.run_id, 1, "observation")
    assert outer.original.endswith("→ 3") and outer.replay.endswith("→ 9")


# -- CORAL ------------------------------------------------------------------------------------------
def test_a_coral_fork_compares_its_messages(ws):
    from test_coral import ARRIVALS, ORC, TASK, paper_team

    ARRIVALS.clear()  # the workers' `meet` pairs arrivals in order
    paper = paper_team(ws)
    first = paper.team.run_sync(TASK)
    assert first.status == "success"
    original = first.trajectory.messages
    # unedited: no departure (at 5 to 7 one worker goes on while its twin had answered: the workers' `meet`
    # tool then finds no partner, a real difference of a live tool; message 3 is inside a turn)
    for n in (0, 1, 2, 4, 8):
        same = run_sync(ws.fork(first.run_id, step=n))
        assert same.trajectory.divergence is None, (n, same.trajectory.divergence)
    assert original[3]["content"] == "Find the capital of Italy"
    forked = run_sync(ws.fork(first.run_id, step=4, edit={"message": "Find the capital of Germany"}))
    departure = forked.trajectory.divergence
    mine = next(m for m in forked.trajectory.messages if m["sender"] == "w2" and not m["replayed"])
    theirs = next(m for m in original if m["sender"] == "w2")
    assert (departure.how, departure.step) == ("message", mine["seq"])
    assert departure.text() == f"message {mine['seq']}: different message"
    assert departure.original == f"#{theirs['seq']} w2 → @{ORC}: {theirs['content']}"
    assert departure.replay == f"#{mine['seq']} w2 → @{ORC}: {mine['content']}" and "unknown" in mine["content"]
    assert len(diverged_events(ws, forked.run_id)) == 1
    family = ws.branches(first.run_id)
    assert family.get(forked.run_id).departs == departure.text()
    assert family.get(same.run_id).departs == "none"


# -- where it shows -----------------------------------------------------------------------------------
def test_branches_and_compare_show_where_a_fork_departs(ws, tools):
    first = first_run(ws, tools, counter())
    forked = run_sync(ws.fork(first.run_id, 1, model=counter(pick=lambda k: 7 if k == 3 else k).name))
    family = ws.branches(forked.run_id)
    text = family.text()
    assert "departs step 3: different arguments" in text
    page = family._repr_html_()
    assert "<th>departs</th>" in page and "step 3: different arguments" in page
    assert "original: work({&quot;n&quot;: 3})" in page
    assert f"forked from {first.run_id} at step 1; first departs in step 3 (different arguments)" in (
        forked.trajectory.text()
    )
    cmp = ws.compare(first.run_id, forked.run_id)
    assert cmp.diverges_at == 3 and cmp.departure.how == "arguments"
    assert "they diverge at step 3 (different arguments)" in cmp.text()
    assert "diverge at step 3 (different arguments)" in cmp._repr_html_()
    same = ws.compare(first.run_id, first.run_id)
    assert same.diverges_at is None and "nowhere" in same.text()


def test_a_bad_run_id_is_a_clear_error(ws, tools):
    first = first_run(ws, tools, counter())
    for ask in (
        lambda: ws.branches("no-such-run"),
        lambda: ws.compare(first.run_id, "no-such-run"),
        lambda: ws.trajectory("no-such-run").divergence,
    ):
        with pytest.raises(NotFoundError, match="no run 'no-such-run'"):
            ask()
