"""Replay policies (issue 28): a fork, rerun or resume answers the tool calls it makes again from the
original run's recording (``recorded``), by running the tool (``live``) or not at all (``refuse``), per
tool. Real SQLite workspaces, tools that count their side effects in a file, models scripted as
functions of what they are sent (a list-scripted model would start its list again on a fork)."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import asyncio  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402

import pytest  # noqa: E402
from conftest import magics_workspace, tea  # noqa: E402

from tea_notebook._sync import run_sync  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.runtime.forking import ForkError  # noqa: E402
from tea_notebook.runtime.replay_policy import ReplayPolicy  # noqa: E402


def count(path) -> int:
    return int(path.read_text()) if path.exists() else 0


def bump(path) -> int:
    n = count(path) + 1
    path.write_text(str(n))
    return n


def run_count(ws) -> int:
    return len(ws.db.runs(10_000))


def event_count(ws) -> int:
    return ws.db._read("SELECT count(*) FROM events")[0][0]


def events(ws, run_id, kind):
    return [e for e in ws.events.events(run_id, nested=False) if e.type == kind]


def step_tokens(ws, run_id) -> dict[int, tuple[int, int]]:
    return {
        e.step: (e.data["prompt_tokens"], e.data["completion_tokens"]) for e in events(ws, run_id, "model_response")
    }


def step_of(messages) -> int:
    return int(re.search(r"Step (\d+) of", json.dumps(messages)).group(1))


@pytest.fixture
def counter(ws, tmp_path):
    """``work(n)``: returns a different text each call (a counter kept in a file); the file's path."""
    log = tmp_path / "work.count"

    @ws.tools.tool
    def work(n: int) -> str:
        """Do one unit of work."""
        return f"count {bump(log)} for {n}"

    return log


COUNTS = re.compile(r"count \d+")


def counting_model() -> ScriptedModel:
    """Calls ``work(n=k+1)`` while it has seen fewer than 3 counts, then ends; stops on a call not run."""

    def decide(messages, tools):
        text = json.dumps(messages)
        if "was not run" in text:
            return call("done", success=False, text="a call was not run")
        seen = text.count("count ")
        if seen >= 3:
            return call("done", success=True, text="saw " + ", ".join(COUNTS.findall(text)))
        return call("work", n=seen + 1)

    return ScriptedModel(decide)


def original(ws):
    result = ws.agent("worker", model=counting_model().name, tools=["work"]).run_sync("do the work")
    assert result.success and result.steps == 4
    return result


# -- recorded, live, refuse -----------------------------------------------------------------------
def test_a_recorded_fork_reproduces_the_run_without_running_its_tools(ws, counter):
    first = original(ws)
    assert count(counter) == 3
    whole = run_sync(ws.fork(first.run_id, 0, replay="recorded"))
    assert (whole.answer, whole.steps, whole.status) == (first.answer, first.steps, first.status)
    assert (whole.prompt_tokens, whole.completion_tokens) == (first.prompt_tokens, first.completion_tokens)
    assert count(counter) == 3  # no tool ran again
    results = [e.data for e in events(ws, whole.run_id, "tool_result")]
    assert [r["observation"] for r in results] == ["count 1 for 1", "count 2 for 2", "count 3 for 3"]
    assert all(r["replayed"] and r["policy"] == "recorded" for r in results)
    calls = [e.data for e in events(ws, whole.run_id, "tool_call")]
    assert all(c["replayed"] and c["policy"] == "recorded" for c in calls)
    assert events(ws, whole.run_id, "run_started")[0].data["replay"] == {"*": "recorded"}
    # a fork at step 1: the steps after it cost what the original's did
    later = run_sync(ws.fork(first.run_id, 1, replay="recorded"))
    assert (later.answer, later.steps) == (first.answer, first.steps) and count(counter) == 3
    original_tokens = step_tokens(ws, first.run_id)
    assert step_tokens(ws, later.run_id) == {s: original_tokens[s] for s in (2, 3, 4)}


def test_a_live_fork_runs_the_tools_again(ws, counter):
    first = original(ws)
    forked = run_sync(ws.fork(first.run_id, 1, replay="live"))
    assert forked.success and count(counter) == 5  # steps 2 and 3 ran work again
    results = [e.data for e in events(ws, forked.run_id, "tool_result")]
    assert [r["observation"] for r in results] == ["count 4 for 2", "count 5 for 3"]
    assert all(r["policy"] == "live" and not r.get("replayed") for r in results)
    assert events(ws, forked.run_id, "run_started")[0].data["replay"] == {"*": "live"}
    plain = run_sync(ws.fork(first.run_id, 1))  # no policy: today's behaviour, and no policy recorded
    assert count(counter) == 7 and "replay" not in events(ws, plain.run_id, "run_started")[0].data
    assert all("policy" not in e.data for e in events(ws, plain.run_id, "tool_result"))


def test_one_tool_refused_while_the_others_are_recorded(ws, counter, tmp_path):
    orders = tmp_path / "orders.count"

    @ws.tools.tool
    def place_order(tea: str) -> str:
        """Order a tea."""
        return f"order {bump(orders)}: {tea}"

    def shopper(messages, tools):
        step = step_of(messages)
        plan = {1: call("work", n=1), 2: call("place_order", tea="green"), 3: call("work", n=2)}
        return plan.get(step) or call("done", success=True, text="shopped")

    agent = ws.agent("shopper", model=ScriptedModel(shopper).name, tools=["work", "place_order"])
    first = agent.run_sync("shop")
    assert first.success and (count(counter), count(orders)) == (2, 1)
    forked = run_sync(ws.fork(first.run_id, 0, replay={"place_order": "refuse", "*": "recorded"}))
    assert forked.success and forked.steps == first.steps
    assert (count(counter), count(orders)) == (2, 1)  # nothing ran: work answered, place_order refused
    results = {e.data["name"]: e.data for e in events(ws, forked.run_id, "tool_result")}
    refused = results["place_order"]
    assert refused["observation"] == "Error: place_order was not run: the replay policy refuses it"
    assert (refused["ok"], refused["error_type"], refused["policy"]) == (False, "Refused", "refuse")
    assert not refused.get("replayed") and results["work"]["replayed"]
    started = events(ws, forked.run_id, "run_started")[0].data
    assert started["replay"] == {"place_order": "refuse", "*": "recorded"}
    assert forked.status == "success"  # a refused call is not a failed action


def test_rerun_from_is_live_replay_of_those_steps(ws, counter):
    first = original(ws)
    rerun = run_sync(ws.fork(first.run_id, 3, rerun_from=2))
    assert count(counter) == 5
    live = run_sync(ws.fork(first.run_id, 3, rerun_from=2, replay="live"))
    assert count(counter) == 7

    def shape(run_id):
        return [
            (e.step, e.data["name"], re.sub(r"count \d+", "count N", e.data["observation"]))
            for e in events(ws, run_id, "tool_result")
        ]

    assert shape(rerun.run_id) == shape(live.run_id) == [(2, "work", "count N for 2"), (3, "work", "count N for 3")]
    assert rerun.steps == live.steps == 4
    recorded = run_sync(ws.fork(first.run_id, 3, rerun_from=2, replay="recorded"))
    assert count(counter) == 7 and recorded.answer == first.answer  # the re-executed steps answered from the store
    assert [e.data["observation"] for e in events(ws, recorded.run_id, "tool_result")] == [
        "count 2 for 2",
        "count 3 for 3",
    ]


def test_a_recorded_fork_that_departs_says_where(ws, counter):
    first = original(ws)
    edited = run_sync(ws.fork(first.run_id, 1, edit={"observation": "nothing yet"}, replay="recorded"))
    assert count(counter) == 3  # the call with other arguments was not run either
    result = events(ws, edited.run_id, "tool_result")[0]
    assert result.step == 2 and result.data["error_type"] == "NotRecorded" and not result.data["ok"]
    text = result.data["observation"]
    assert text.startswith("Error: work was not run: the replay policy answers it from run ")
    assert f"run {first.run_id}'s recording" in text and "departed from the recording at step 2" in text
    assert edited.status == "failed" and edited.steps == 3  # the model stopped on it (its own choice)


def test_a_dict_policy_on_resume_refuses_a_tool(ws, counter, tmp_path):
    orders = tmp_path / "orders.count"
    broken = {"now": True}

    @ws.tools.tool
    def place_order(tea: str) -> str:
        """Order a tea."""
        return f"order {bump(orders)}: {tea}"

    def shopper(messages, tools):
        step = step_of(messages)
        if step == 2 and broken["now"]:
            raise RuntimeError("the provider fell over")
        return {1: call("work", n=1), 2: call("place_order", tea="green")}.get(step) or call(
            "done", success=True, text="shopped"
        )

    agent = ws.agent("shopper", model=ScriptedModel(shopper).name, tools=["work", "place_order"])
    first = agent.run_sync("shop", raise_on_error=False)
    assert first.status == "error" and count(counter) == 1
    broken["now"] = False
    resumed = run_sync(ws.resume(first.run_id, replay={"place_order": "refuse"}))
    assert resumed.success and (count(counter), count(orders)) == (1, 0)
    refused = next(e.data for e in events(ws, resumed.run_id, "tool_result") if e.data["name"] == "place_order")
    assert refused["error_type"] == "Refused" and "was not run" in refused["observation"]
    started = events(ws, resumed.run_id, "run_started")[0].data
    assert started["replay"] == {"place_order": "refuse", "*": "live"} and started["resumed_from"] == first.run_id


def test_a_recorded_resume_answers_nothing_past_the_original_end(ws, counter):
    broken = {"now": True}

    def worker_model(messages, tools):
        step = step_of(messages)
        if step == 2 and broken["now"]:
            raise RuntimeError("the provider fell over")
        return call("work", n=step) if step < 3 else call("done", success=True, text="worked")

    first = ws.agent("w2", model=ScriptedModel(worker_model).name, tools=["work"]).run_sync("go", raise_on_error=False)
    assert first.status == "error" and count(counter) == 1
    broken["now"] = False
    resumed = run_sync(ws.resume(first.run_id, replay="recorded"))
    result = events(ws, resumed.run_id, "tool_result")[0].data
    assert result["error_type"] == "NotRecorded" and count(counter) == 1
    assert f"run {first.run_id}'s recording, which ends at step 1: it has no step 2" in result["observation"]


def test_the_policy_reaches_a_sub_agents_fork(ws, counter):
    """A sub-agent's run forked with ``recorded``: its parent replays, the sub-agent's later steps and
    the parent's later steps are answered from their recordings (no tool runs again)."""
    ws.agent("helper", model=counting_model().name, tools=["work"], description="Helps.")

    def boss(messages, tools):
        plan = {1: call("helper_agent", task="help"), 2: call("work", n=100)}
        return plan.get(step_of(messages)) or call("done", success=True, text="boss done")

    first = ws.agent("boss", model=ScriptedModel(boss).name, sub_agents=["helper"], tools=["work"]).run_sync("all")
    assert first.success and count(counter) == 4
    sub = first.trajectory.children[0]
    forked = run_sync(ws.fork(sub.run_id, 1, replay="recorded"))
    assert forked.success and forked.answer == first.answer and forked.steps == first.steps
    assert count(counter) == 4  # neither the helper's steps 2-3 nor the boss's work(100) ran again
    child = forked.trajectory.children[0]
    assert child.forked_from == sub.run_id
    assert [e.data["policy"] for e in events(ws, child.run_id, "tool_result")] == ["recorded", "recorded"]
    boss_results = [e.data for e in events(ws, forked.run_id, "tool_result")]
    assert [(r["name"], r.get("policy")) for r in boss_results] == [("helper_agent", None), ("work", "recorded")]


# -- bad input: a ForkError naming the problem, nothing written -----------------------------------
@pytest.mark.parametrize(
    "replay, message",
    [
        ("sometimes", r"recorded, live or refuse, not 'sometimes'"),
        ({"work": "maybe"}, r"replay\['work'\]: a replay policy is recorded, live or refuse, not 'maybe'"),
        ({"*": "later"}, r"replay\['\*'\]: .* not 'later'"),
        ({"nope": "recorded"}, r"replay names 'nope': no such tool is registered"),
        ("work=recorded,oops", r"each part is TOOL=POLICY .* not 'oops'"),
        ("work=recorded,work=live", r"names 'work' twice"),
        (42, r"not int"),
        ({"": "live"}, r"a tool name is non-empty text"),
    ],
)
def test_bad_policies_are_refused_before_anything_is_written(ws, counter, replay, message):
    first = original(ws)
    runs, written = run_count(ws), event_count(ws)
    with pytest.raises(ForkError, match=message):
        run_sync(ws.fork(first.run_id, 1, replay=replay))
    with pytest.raises(ForkError, match=message):
        run_sync(ws.fork(first.run_id, 2, rerun_from=1, replay=replay))
    assert (run_count(ws), event_count(ws), count(counter)) == (runs, written, 3)


def test_controls_and_sub_agent_tools_may_be_named(ws, counter):
    first = original(ws)
    forked = run_sync(ws.fork(first.run_id, 0, replay={"done": "live", "todo": "refuse", "*": "recorded"}))
    assert forked.answer == first.answer and count(counter) == 3
    assert ReplayPolicy.of("work = refuse , * = recorded").as_dict() == {"work": "refuse", "*": "recorded"}


def test_recorded_on_a_resume_for_a_call_that_never_returned_is_refused(ws, tmp_path):
    orders, ctx = tmp_path / "orders.count", ws.context()

    @ws.tools.tool
    async def place_order(tea: str) -> str:
        """Order a tea (it takes a while)."""
        ctx.cancel.set()  # Stop is pressed while the order is on its way
        await asyncio.sleep(1.0)
        return f"order {bump(orders)}: {tea}"

    script = ScriptedModel(
        lambda messages, tools: (
            call("place_order", tea="green") if step_of(messages) == 1 else call("done", success=True, text="ordered")
        )
    )
    stopped = ws.agent("buyer", model=script.name, tools=["place_order"]).run_sync("order", context=ctx)
    assert stopped.status == "interrupted" and count(orders) == 0
    call_id = events(ws, stopped.run_id, "tool_call")[0].data["id"]
    runs, written = run_count(ws), event_count(ws)
    with pytest.raises(
        ForkError, match=rf"call {call_id} \(place_order\) of step 1 of run {stopped.run_id} has no stored"
    ):
        run_sync(ws.resume(stopped.run_id, replay="recorded"))
    with pytest.raises(ForkError, match="replay names 'missing'"):
        run_sync(ws.resume(stopped.run_id, replay={"missing": "refuse"}))
    assert (run_count(ws), event_count(ws), count(orders)) == (runs, written, 0)
    resumed = run_sync(ws.resume(stopped.run_id, replay="place_order=refuse"))  # the stopped call is not run
    assert resumed.success and count(orders) == 0


def test_a_policy_for_a_run_that_cannot_be_forked_is_refused(ws, counter):
    """Every kind that forks takes a policy (tests/test_fork_exact.py: ToolSelf stages, CORAL messages,
    the orchestra); a run that cannot be forked (a workflow's, a team member's) is refused as before."""
    first = original(ws)
    ws.db._conn.execute("UPDATE events SET data=json_set(data, '$.fork_unit', json('null')) WHERE type='run_started'")
    runs, written = run_count(ws), event_count(ws)
    with pytest.raises(ForkError, match="cannot be forked by step"):
        run_sync(ws.fork(first.run_id, 1, replay="recorded"))
    assert (run_count(ws), event_count(ws), count(counter)) == (runs, written, 3)


# -- the magic ------------------------------------------------------------------------------------
def test_tea_fork_takes_a_replay_spec(ip, tmp_path, monkeypatch):
    ws = magics_workspace(ip, tmp_path, monkeypatch)
    log = tmp_path / "work.count"

    @ws.tools.tool
    def work(n: int) -> str:
        """Do one unit of work."""
        return f"count {bump(log)} for {n}"

    first = original(ws)
    forked = tea(ip, f"fork {first.run_id} --step 2 --replay 'work=recorded,*=live' --quiet")
    assert forked.answer == first.answer and count(log) == 3
    started = events(ws, forked.run_id, "run_started")[0].data
    assert started["replay"] == {"work": "recorded", "*": "live"}
    from IPython.core.error import UsageError

    runs = run_count(ws)
    with pytest.raises(UsageError, match="replay names 'nope'"):
        tea(ip, f"fork {first.run_id} --step 2 --replay nope=live --quiet")
    ip.rl_next_input = None
    tea(ip, f"fork {first.run_id} --step 2 --edit observation --replay recorded")  # the cell below, nothing run
    assert "replay='recorded'" in ip.rl_next_input
    ip.rl_next_input = None
    assert run_count(ws) == runs


# -- the recording, read directly -------------------------------------------------------------------
def test_machinery_always_runs_and_a_settled_call_is_not_answered_twice():
    """A team's machinery (CORAL's message tools) is never answered by the policy, and a call of a
    step taken up again whose stored result the new run keeps is not given to a later identical call."""
    from tea_notebook.runtime.forking import ForkPlan
    from tea_notebook.runtime.replay_policy import RecordedCall, Recording, answer

    policy = ReplayPolicy.of("recorded").running({"send_message"})
    assert policy.as_dict() == {"*": "recorded"} and policy.text() == "recorded"
    recording = Recording("orig", 0)
    recording.steps[1] = [
        RecordedCall("tick", "{}", "tick 1", id="a"),
        RecordedCall("tick", "{}", "tick 2", id="b"),
    ]
    plan = ForkPlan(replay=policy, recording=recording)
    assert answer(plan, 1, "send_message", {"content": "hi"}) is None  # it runs
    recording.settle(1, ["a"])  # "a" returned before the cut: its stored result is kept as it is
    assert answer(plan, 1, "tick", {}).observation == "tick 2"
    missing = answer(plan, 1, "tick", {})
    assert missing.error_type == "NotRecorded" and recording.departed == 1
