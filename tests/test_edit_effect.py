"""``ws.edit_effect`` (issue 30): a step forked k times with an edit and k times without, the paired
difference of the outcomes with its interval and McNemar's p. Real SQLite workspaces and tools; the
model is scripted as a function of what it is sent, its outcome drawn from a list per arm (the edited
observation in its prompt says which), so the share of epochs the edit flips is known."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import asyncio  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402

import pytest  # noqa: E402

from tea_notebook._sync import run_sync  # noqa: E402
from tea_notebook.agents.edit_effect import EditEffect, summarize  # noqa: E402
from tea_notebook.errors import TeaError  # noqa: E402
from tea_notebook.eval.distributions import t_quantile  # noqa: E402
from tea_notebook.eval.stats import Estimate, mcnemar_p_value  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.runtime.forking import ForkError  # noqa: E402

FIX = "the shelf has 5 tins of oolong"


def run_count(ws) -> int:
    return len(ws.db.runs(10_000))


def event_count(ws) -> int:
    return ws.db._read("SELECT count(*) FROM events")[0][0]


@pytest.fixture
def shelf(ws, tmp_path):
    """``look()`` reads the shelf (counting its calls in a file): it is empty."""
    log = tmp_path / "look.count"

    @ws.tools.tool
    def look() -> str:
        """Look at the shelf."""
        log.write_text(str(int(log.read_text()) + 1 if log.exists() else 1))
        return "the shelf is empty"

    return log


def flipping_model(with_edit: list[bool], without_edit: list[bool]) -> ScriptedModel:
    """Looks once, then ends with success as the next item of ``with_edit`` (when the fixed observation
    is in its prompt) or of ``without_edit`` (when not) says; the original run (neither list) fails."""
    draws = {True: list(with_edit), False: list(without_edit)}
    original = [True]

    def decide(messages, tools):
        text = json.dumps(messages)
        if "the shelf" not in text:
            return call("look")
        if original[0]:  # the run being measured: it failed
            original[0] = False
            return call("done", success=False, text="no tins")
        ok = draws[FIX in text].pop(0)
        return call("done", success=ok, text="5 tins" if ok else "no tins")

    return ScriptedModel(decide)


def measured(ws, with_edit, without_edit):
    model = flipping_model(with_edit, without_edit)
    result = ws.agent("stocker", model=model.name, tools=["look"]).run_sync("how many tins of oolong?")
    assert result.status != "success" and result.steps == 2
    return result


def t_interval(values, level=0.95):
    est = Estimate.of(values)
    half = t_quantile((1 + level) / 2, len(values) - 1) * est.stderr
    return est.mean - half, est.mean + half


def test_edit_flips_outcome_in_known_share_of_epochs(ws, shelf):
    # with the edit: right in 3 of 4 epochs; without: in 1 of 4; paired by epoch (one fork at a time)
    with_edit, without_edit = [True, True, False, True], [False, False, False, True]
    result = measured(ws, with_edit, without_edit)
    before = run_count(ws)
    effect = run_sync(ws.edit_effect(result.run_id, 1, {"observation": FIX}, k=4, concurrency=1, progress=False))
    assert isinstance(effect, EditEffect)
    assert run_count(ws) == before + 8 and int(shelf.read_text()) == 1  # the forks replay step 1's look
    assert effect.with_scores == (1.0, 1.0, 0.0, 1.0) and effect.without_scores == (0.0, 0.0, 0.0, 1.0)
    assert (effect.with_mean, effect.without_mean, effect.difference) == (0.75, 0.25, 0.5)
    differences = [1.0, 1.0, 0.0, 0.0]
    low, high = t_interval(differences)
    assert math.isclose(effect.interval.low, low) and math.isclose(effect.interval.high, high)
    assert (effect.interval.method, effect.interval.df, effect.interval.n) == ("t", 3, 4)
    assert effect.interval.low < 0 < effect.interval.high and not effect.significant
    # McNemar: right only with the edit in epochs 1 and 2, only without in none; both right in 4
    m = effect.mcnemar
    assert (m.a_only, m.b_only, m.both, m.neither) == (2, 0, 1, 1)
    assert effect.test == "McNemar exact" and effect.p_value == mcnemar_p_value(2, 0) == 0.5
    # each arm's runs are forks of the measured run at step 1, the edited ones carrying the edit
    for run_id, score in zip(effect.with_runs, effect.with_scores, strict=True):
        forked = ws.trajectory(run_id)
        assert forked.edit["after"] == FIX and (forked.status == "success") == (score == 1.0)
    for run_id in effect.without_runs:
        assert ws.trajectory(run_id).edit is None
        assert ws.branches(result.run_id).get(run_id) is not None
    text = effect.text()
    assert "difference +0.500" in text and "McNemar exact: p = 0.500" in text and effect.with_runs[0] in text
    assert "no effect shown" in text and "tools live" in text
    page = effect._repr_html_()
    assert all(r in page for r in effect.with_runs + effect.without_runs) and "<svg" in page


def test_scipy_t_interval_and_a_clear_effect(ws, shelf):
    scipy_stats = pytest.importorskip("scipy.stats")
    with_edit, without_edit = [True] * 6, [False, False, True, False, False, False]
    result = measured(ws, with_edit, without_edit)
    effect = run_sync(
        ws.edit_effect(result.run_id, 1, {"observation": FIX}, k=6, concurrency=1, level=0.9, progress=False)
    )
    differences = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    est = Estimate.of(differences)
    low, high = scipy_stats.t.interval(0.9, 5, loc=est.mean, scale=est.stderr)
    assert math.isclose(effect.difference, 5 / 6)
    assert math.isclose(effect.interval.low, low, rel_tol=1e-9) and math.isclose(effect.interval.high, high)
    assert effect.significant and "the edit helps" in effect.verdict()
    exact = scipy_stats.binomtest(0, 5, 0.5).pvalue  # McNemar exact: 5 discordant pairs, all one way
    assert math.isclose(effect.p_value, exact)


def test_concurrent_forks_and_the_bootstrap(ws, shelf):
    # three forks at a time: which epoch draws which outcome is not fixed, the share in each arm is
    with_edit, without_edit = [True, True, True, False], [True, False, False, False]
    result = measured(ws, with_edit, without_edit)
    effect = run_sync(
        ws.edit_effect(
            result.run_id, 1, {"observation": FIX}, k=4, concurrency=3, interval="bootstrap", seed=7, progress="off"
        )
    )
    assert sorted(effect.with_scores) == [0.0, 1.0, 1.0, 1.0] and sorted(effect.without_scores) == [0, 0, 0, 1]
    assert effect.difference == 0.5 and effect.interval.method == "bootstrap"
    differences = [a - b for a, b in zip(effect.with_scores, effect.without_scores, strict=True)]
    expected = Estimate.of(differences).interval(0.95, method="bootstrap", seed=7)
    assert (effect.interval.low, effect.interval.high) == (expected.low, expected.high)
    assert len(set(effect.with_runs + effect.without_runs)) == 8


def test_a_score_function_and_an_evaluation_scorer(ws, shelf):
    result = measured(ws, [True, False, True, False, True, True], [False, True, False, False, False, True])
    tins = run_sync(
        ws.edit_effect(
            result.run_id,
            1,
            {"observation": FIX},
            k=3,
            concurrency=1,
            progress=False,
            score=lambda run: 0.5 if "5 tins" in run.answer else 0.0,
        )
    )
    assert tins.with_scores == (0.5, 0.0, 0.5) and tins.without_scores == (0.0, 0.5, 0.0)
    assert tins.mcnemar is None and tins.test == "paired t-test" and "<lambda>" in tins.scored_by
    assert math.isclose(tins.difference, 1 / 6)
    exact = run_sync(
        ws.edit_effect(
            result.run_id, 1, {"observation": FIX}, k=3, concurrency=1, progress=False, scorer="contains", expected="5"
        )
    )
    assert exact.with_scores == (0.0, 1.0, 1.0) and exact.without_scores == (0.0, 0.0, 1.0)  # the lists go on
    assert exact.scored_by == "contains" and exact.mcnemar is not None


def test_summarize_paired_t_p_value_against_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    a, b = [0.9, 0.4, 0.7, 0.8, 0.6], [0.5, 0.5, 0.3, 0.6, 0.2]
    effect = summarize("r", 1, {"observation": "x"}, list("abcde"), list("fghij"), a, b)
    reference = scipy_stats.ttest_rel(a, b)
    assert math.isclose(effect.p_value, reference.pvalue, rel_tol=1e-6) and effect.test == "paired t-test"


def test_bad_input_writes_nothing(ws, shelf):
    result = measured(ws, [], [])
    runs, events = run_count(ws), event_count(ws)

    def refused(exc, match, **kw):
        args = {"run_id": result.run_id, "step": 1, "edit": {"observation": FIX}, "k": 4, "progress": False} | kw
        with pytest.raises(exc, match=match):
            run_sync(ws.edit_effect(**args))
        assert (run_count(ws), event_count(ws)) == (runs, events)

    refused(TeaError, r"k, the epochs per arm, must be 2 or more", k=1)
    refused(TeaError, r"k, the epochs per arm", k=True)
    refused(TeaError, r"concurrency is how many forks", concurrency=0)
    refused(TeaError, r"level is between 0 and 1", level=95)
    refused(TeaError, r"unknown interval 'normal'", interval="normal")
    refused(TeaError, r"an effect needs an edit", edit=None)
    refused(TeaError, r"not both", score=len, scorer="exact", expected="5")
    refused(TeaError, r"give the expected answer", scorer="exact")
    refused(TeaError, r"give scorer= too", expected="5")
    refused(ForkError, r"no run 'nope'", run_id="nope")
    refused(ForkError, r"has 1 action\(s\); there is no action 3", edit={"observation": FIX, "action": 3})
    refused(ForkError, r"has only 2 steps finished; cannot fork from step 5", step=5)
    refused(ForkError, r"an edit names exactly one of", edit={"obs": FIX})
    refused(ForkError, r"replay", replay="sometimes")
    refused(ForkError, r"agent 'stocker' has no tool 'order'", edit={"actions": [{"name": "order", "arguments": {}}]})
    assert int(shelf.read_text()) == 1


def test_a_run_still_running_is_refused(ws, shelf):
    gate = asyncio.Event()

    @ws.tools.tool
    async def wait_for_delivery() -> str:
        """Wait until the delivery comes."""
        await gate.wait()
        return "delivered"

    model = ScriptedModel(
        lambda messages, tools: (
            call("done", success=True, text="ok") if "delivered" in json.dumps(messages) else call("wait_for_delivery")
        )
    )

    async def scenario():
        running = asyncio.ensure_future(
            ws.agent("waiter", model=model.name, tools=["wait_for_delivery"]).run("wait for it")
        )
        for _ in range(200):
            rows = [r for r in ws.db.runs(10) if r["agent"] == "waiter"]
            if rows and ws.events.events(rows[0]["id"], nested=False):
                break
            await asyncio.sleep(0.02)
        assert rows and rows[0]["status"] == "running"
        count = run_count(ws)
        try:
            with pytest.raises(ForkError, match="is still running: wait for it to end"):
                await ws.edit_effect(rows[0]["id"], 1, {"observation": "x"}, k=2, progress=False)
            assert run_count(ws) == count
        finally:
            gate.set()
            finished = await running
        assert finished.success

    run_sync(scenario())


def test_a_sub_agents_step_forks_within_its_parent(ws, shelf):
    """A sub-agent's run is measured through its parent's forks (no plan to check up front: the first
    edited fork runs alone first, so an edit it refuses stops everything before anything is written)."""

    def helper(messages, tools):
        text = json.dumps(messages)
        if "the shelf" not in text:
            return call("look")
        return call("done", success=True, text="5 tins" if FIX in text else "no tins")

    def boss(messages, tools):
        text = json.dumps(messages)
        if "tins" not in text:
            return call("helper_agent", task="count the oolong")
        return call("done", success="5 tins" in text, text="counted")

    ws.agent("helper", model=ScriptedModel(helper).name, tools=["look"], description="Counts.")
    first = ws.agent("boss", model=ScriptedModel(boss).name, sub_agents=["helper"]).run_sync("count the oolong")
    assert first.status != "success"
    sub = first.trajectory.children[0].run_id
    runs, events = run_count(ws), event_count(ws)
    with pytest.raises(ForkError, match="no action 2"):
        run_sync(ws.edit_effect(sub, 1, {"observation": FIX, "action": 2}, k=2, progress=False))
    assert (run_count(ws), event_count(ws)) == (runs, events)
    effect = run_sync(ws.edit_effect(sub, 1, {"observation": FIX}, k=3, concurrency=2, progress=False))
    assert effect.with_scores == (1.0, 1.0, 1.0) and effect.without_scores == (0.0, 0.0, 0.0)
    assert (effect.difference, tuple(effect.interval)) == (1.0, (1.0, 1.0)) and effect.significant
    assert effect.mcnemar.a_only == 3 and math.isclose(effect.p_value, 0.25)
    assert all(ws.trajectory(r).agent == "boss" for r in effect.with_runs)  # the parent's forks


def test_a_prompt_edits_control_asks_the_model_again_at_that_step(ws, shelf):
    result = measured(ws, [True, True], [False, False])
    messages = [dict(m) for m in result.context(2).messages]
    messages[-1]["content"] = messages[-1]["content"] + f"\nNote: {FIX}."
    effect = run_sync(ws.edit_effect(result.run_id, 2, {"context": messages}, k=2, concurrency=1, progress=False))
    assert effect.with_scores == (1.0, 1.0) and effect.without_scores == (0.0, 0.0)
    for run_id in effect.with_runs + effect.without_runs:  # both arms: step 1 replayed, step 2 asked live
        assert [s.replayed for s in ws.trajectory(run_id).steps] == [True, False]
    assert effect.edit == {"context": messages}
