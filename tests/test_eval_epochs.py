"""Repeated runs (epochs) with their spread, retries that tell the provider's failures from the
agent's, and trajectory checks. Every model is scripted (``tea/script:...``, not an LLM); the numbers
asserted are worked out by hand in the comments, not by the code under test.
"""

from __future__ import annotations

import math
import random
import re

import litellm
import pytest

from tea_notebook.errors import TeaError
from tea_notebook.eval import evaluate
from tea_notebook.eval.checks import Rubric, cost_under, max_steps, no_tool_errors, tool_called, tool_not_called
from tea_notebook.eval.failures import backoff_delay, classify
from tea_notebook.eval.stats import pass_at_k, pass_hat_k
from tea_notebook.models.offline import ScriptedModel, call


# defined here, not imported from prompt_parts: the Ray engine ships this module's scripts by value, and
# a Ray worker cannot import the tests' helper modules
def _text(messages):
    return " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))


def _tasks(n):
    return [{"id": f"t{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(n)]


def _patterned(patterns):
    """A scripted solver right on the epochs ``patterns[task]`` says (1 right, 0 wrong), in call order per task."""
    seen: dict[str, int] = {}

    def script(messages, tools):
        i = int(re.search(r"What is (\d+) \+ 1", _text(messages)).group(1))
        n = seen.get(i, 0)
        seen[i] = n + 1
        right = patterns[f"t{i}"][n]
        return call("done", success=True, text=f"FINAL ANSWER: {i + 1 if right else i + 100}")

    return ScriptedModel(script)


PATTERNS = {"t0": [1, 1, 1], "t1": [1, 0, 1], "t2": [0, 0, 1], "t3": [0, 0, 0]}


@pytest.fixture
def quick_ws(ws):
    ws.model_retries = 0  # the client's own retry would sleep a second; the evaluation's retries are tested here
    return ws


def test_epochs_give_a_mean_with_its_standard_error_pass_at_k_and_pass_hat_k(quick_ws, warm_litellm):
    ws = quick_ws
    model = _patterned(PATTERNS)
    agent = ws.agent("patterned", model=model.name, tools=[])
    results = evaluate(ws, agent, _tasks(4), name="epochs", epochs=3, progress="off")
    assert len(results) == 12 and len(model.calls) == 12
    assert len({r.run_id for r in results}) == 12  # each sample is its own stored run
    assert [r.epoch for r in results if r.task_id == "t1"] == [1, 2, 3]
    assert [r.correct for r in results if r.task_id == "t1"] == [True, False, True]
    assert results[("t1", 2)].correct is False and results["t1#3"].correct is True
    # task means 1, 2/3, 1/3, 0 -> mean 0.5; deviations ±0.5, ±1/6 -> sd = sqrt((2·0.25 + 2/36)/3)
    sd = math.sqrt((2 * 0.25 + 2 / 36) / 3)
    est = results.estimate()
    assert est.mean == pytest.approx(0.5) and est.n == 4 and est.stderr == pytest.approx(sd / 2)
    t3 = 3.182446  # Student's t, 0.975 quantile, 3 df (4 tasks)
    assert est.ci95 == pytest.approx((0.5 - t3 * sd / 2, 0.5 + t3 * sd / 2), rel=1e-5)
    assert results.pass_at(3) == pytest.approx(0.75)  # n == k: any of the 3 (t0, t1, t2)
    assert results.pass_hat(3) == pytest.approx(0.25)  # all 3: t0 only
    # pass@2 unbiased: t0 1, t1 1 - C(1,2)/C(3,2) = 1, t2 1 - C(2,2)/C(3,2) = 2/3, t3 0
    assert results.pass_at(2) == pytest.approx((1 + 1 + 2 / 3 + 0) / 4)
    # pass^2: t0 C(3,2)/C(3,2) = 1, t1 C(2,2)/C(3,2) = 1/3, t2 0, t3 0
    assert results.pass_hat(2) == pytest.approx((1 + 1 / 3) / 4)
    assert results.pass_at(1) == pytest.approx(0.5)
    assert results.with_reducer("max").estimate().mean == pytest.approx(0.75)
    assert results.with_reducer("majority").estimate().mean == pytest.approx(0.5)  # t0, t1 have 2 of 3
    assert results.with_reducer(lambda xs: xs[0]).estimate().mean == pytest.approx(0.5)  # first epoch: 1,1,0,0
    per = {row["task_id"]: row for row in results.per_task()}
    assert per["t1"]["mean"] == pytest.approx(2 / 3) and per["t1"]["correct"] == 2
    assert per["t1"]["stderr"] == pytest.approx(math.sqrt((2 * (1 / 3) ** 2 + (2 / 3) ** 2) / 2) / math.sqrt(3))
    headline = results.headline()
    assert f"accuracy 0.50 ± {sd / 2:.2f} (k=3, 4 tasks)" in headline and "12/12 samples done" in headline
    summary = results.summary()
    assert summary["epochs"] == 3 and summary["pass@3"] == pytest.approx(0.75) and summary["mean"] == pytest.approx(0.5)
    stored = ws.evaluation("epochs")
    assert stored.epochs == 3 and stored.estimate() == est and len(stored) == 12


def test_a_seeded_fraction_of_successes_is_measured_as_computed_by_hand(quick_ws, warm_litellm):
    ws = quick_ws
    rng = random.Random(2026)

    def coin(messages, tools):  # right with probability 0.6, in call order
        i = int(re.search(r"What is (\d+) \+ 1", _text(messages)).group(1))
        return call("done", success=True, text=f"FINAL ANSWER: {i + 1 if rng.random() < 0.6 else -1}")

    agent = ws.agent("coin", model=ScriptedModel(coin).name, tools=[])
    results = evaluate(ws, agent, _tasks(6), name="coin", epochs=4, progress="off")
    replay = random.Random(2026)
    draws = [[0] * 4 for _ in range(6)]
    for e in range(4):  # one at a time, epoch by epoch, task by task
        for t in range(6):
            draws[t][e] = int(replay.random() < 0.6)
    means = [sum(d) / 4 for d in draws]
    mu = sum(means) / 6
    se = math.sqrt(sum((m - mu) ** 2 for m in means) / 5) / math.sqrt(6)
    assert results.estimate().mean == pytest.approx(mu) and results.estimate().stderr == pytest.approx(se)
    by_hand_pass2 = sum(1 - math.comb(4 - sum(d), 2) / math.comb(4, 2) for d in draws) / 6
    assert results.pass_at(2) == pytest.approx(by_hand_pass2)
    assert results.pass_hat(4) == pytest.approx(sum(all(d) for d in draws) / 6)


def test_more_epochs_later_run_only_the_new_ones_and_a_rerun_runs_nothing(quick_ws, warm_litellm):
    ws = quick_ws
    model = _patterned(PATTERNS)
    agent = ws.agent("patterned", model=model.name, tools=[])
    once = evaluate(ws, agent, _tasks(4), name="grow", progress="off")
    assert len(once) == 4 and "(k=1, 4 tasks)" in once.headline()
    first_runs = [r.run_id for r in once]
    more = evaluate(ws, agent, _tasks(4), name="grow", epochs=3, progress="off")
    assert len(model.calls) == 12 and more.skipped == 4 and len(more) == 12
    assert [more[(f"t{i}", 1)].run_id for i in range(4)] == first_runs  # the first epoch was kept
    again = evaluate(ws, agent, _tasks(4), name="grow", epochs=3, progress="off")
    assert len(model.calls) == 12 and again.skipped == 12 and again.estimate() == more.estimate()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"epochs": 0}, "epochs must be a whole number of at least 1, not 0"),
        ({"epochs": 2.5}, "epochs must be a whole number"),
        ({"reducer": "mode"}, "unknown reducer 'mode'"),
        ({"reducer": 3}, "a reducer is a name or a function"),
        ({"fail_on_error": 1.5}, "fail_on_error must be"),
        ({"fail_on_error": 0}, "fail_on_error must be"),
        ({"retries": -1}, "retries must be a whole number of at least 0"),
        ({"checks": [tool_called("x"), tool_called("x")]}, r"two scores would have the same name \(tool_called:x\)"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(quick_ws, options, message):
    ws = quick_ws
    model = ScriptedModel(lambda m, t: call("done", success=True, text="x"))
    agent = ws.agent("never", model=model.name, tools=[])
    with pytest.raises(TeaError, match=message):
        evaluate(ws, agent, _tasks(2), name="bad", progress="off", **options)
    assert model.calls == [] and ws.evaluations() == []


def test_task_ids_that_look_like_another_tasks_epoch_are_refused(quick_ws):
    tasks = [{"id": "a", "question": "q", "answer": "x"}, {"id": "a#2", "question": "q", "answer": "x"}]
    agent = quick_ws.agent("never", model=ScriptedModel(["x"]).name, tools=[])
    with pytest.raises(TeaError, match="task id 'a#2' is also the key of task 'a'"):
        evaluate(quick_ws, agent, tasks, name="keys", epochs=2, progress="off")


# -- retries: the provider's failures, not the agent's ---------------------------------------------------
def test_a_provider_failing_with_429_then_500_is_retried_and_not_scored_as_a_failure(quick_ws, warm_litellm):
    ws = quick_ws
    calls: list[str] = []

    def flaky(messages, tools):
        i = int(re.search(r"What is (\d+) \+ 1", _text(messages)).group(1))
        calls.append(f"t{i}")
        if i == 1 and calls.count("t1") == 1:
            raise litellm.RateLimitError("429 slow down", llm_provider="openai", model="x")
        if i == 1 and calls.count("t1") == 2:
            raise litellm.InternalServerError("500 upstream broke", llm_provider="openai", model="x")
        if i == 2:
            return call("done", success=True, text="FINAL ANSWER: wrong")  # the agent's own failure
        return call("done", success=True, text=f"FINAL ANSWER: {i + 1}")

    agent = ws.agent("flaky", model=ScriptedModel(flaky).name, tools=[])
    results = evaluate(ws, agent, _tasks(3), name="flaky", retries=3, backoff=0.01, progress="off")
    assert calls.count("t1") == 3 and calls.count("t2") == 1 and calls.count("t0") == 1  # wrong: never retried
    t1 = results["t1"]
    assert t1.correct and t1.status == "scored" and t1.retries == 2 and not t1.infra_error
    assert len(t1.retried_runs) == 2 and all(ws.db.run_row(r)["status"] == "error" for r in t1.retried_runs)
    assert t1.run_id not in t1.retried_runs
    assert results["t2"].status == "scored" and results["t2"].correct is False and results["t2"].retries == 0
    assert results.accuracy == pytest.approx(2 / 3) and results.infra_errors == 0


def test_a_provider_that_stays_down_stops_the_evaluation_cleanly_and_a_rerun_resumes(quick_ws, warm_litellm):
    ws = quick_ws
    down = [True]
    calls: list[int] = []

    def provider(messages, tools):
        calls.append(1)
        if down[0]:
            raise litellm.ServiceUnavailableError("503 overloaded", llm_provider="openai", model="x")
        i = int(re.search(r"What is (\d+) \+ 1", _text(messages)).group(1))
        return call("done", success=True, text=f"FINAL ANSWER: {i + 1}")

    agent = ws.agent("down", model=ScriptedModel(provider).name, tools=[])
    results = evaluate(ws, agent, _tasks(10), name="down", retries=1, backoff=0.0, fail_on_error=3, progress="off")
    assert len(results) == 3 and results.infra_errors == 3 and len(calls) == 6  # 3 samples, each tried twice
    assert results.stopped.startswith("the model provider failed on 3 sample(s) (fail_on_error=3)")
    assert "7 task(s) not started" in results.stopped
    assert all(r.error.startswith("the model provider failed after 1 retry") for r in results)
    assert results.estimate().n == 0 and results.accuracy == 0.0  # nothing was scored as the agent's failure
    assert "3 provider failures (not scored)" in results.headline()
    down[0] = False
    again = evaluate(ws, agent, _tasks(10), name="down", retries=1, backoff=0.0, fail_on_error=0.2, progress="off")
    assert len(again) == 10 and again.correct == 10 and again.infra_errors == 0 and again.stopped is None
    assert len(calls) == 16  # the three failed samples and the seven never started; nothing else


def test_a_wrong_key_is_a_provider_failure_that_is_not_retried(quick_ws, warm_litellm):
    ws = quick_ws
    calls: list[int] = []

    def locked(messages, tools):
        calls.append(1)
        raise litellm.AuthenticationError("401 invalid api key", llm_provider="openai", model="x")

    agent = ws.agent("locked", model=ScriptedModel(locked).name, tools=[])
    results = evaluate(ws, agent, _tasks(2), name="locked", retries=3, backoff=0.0, progress="off")
    assert len(calls) == 2 and results.infra_errors == 2
    assert "not retried" in results["t0"].error and "authentication failed" in results["t0"].error


def test_failure_classes_and_backoff():
    assert classify("model 'x': rate limited after retries. (429)").transient
    assert classify("model 'x': InternalServerError: 500 boom.").transient
    assert classify("model 'x': no answer from the provider within 60 s").transient
    assert not classify("model 'x': authentication failed. Check the API key.").transient
    assert classify("model 'x': BadRequestError: context length exceeded.") is None
    rng = random.Random(1)
    delays = [backoff_delay(n, 1.0, 5.0, rng) for n in range(1, 8)]
    assert 0.5 <= delays[0] < 1.5 and 1.0 <= delays[1] < 3.0 and all(d < 7.5 for d in delays)
    assert all(2.5 <= d for d in delays[3:])  # capped at 5 s, times a jitter in [0.5, 1.5)


def test_a_scorer_that_raises_is_that_samples_error_and_is_not_retried(quick_ws, warm_litellm):
    ws = quick_ws
    model = _patterned({"t0": [1, 1], "t1": [1, 1]})
    agent = ws.agent("p", model=model.name, tools=[])

    def picky(answer, expected, task):
        if task.id == "t1":
            raise ValueError("cannot judge")
        return answer == expected

    results = evaluate(ws, agent, _tasks(2), name="picky", scorer=picky, epochs=2, retries=3, progress="off")
    assert len(model.calls) == 4 and [r.status for r in results] == ["scored", "scored", "error", "error"]
    assert all(r.retries == 0 and not r.infra_error for r in results)
    assert results.estimate().mean == pytest.approx(0.5)  # t0: 1, t1: the scorer's errors count as 0


# -- trajectory checks ------------------------------------------------------------------------------------
def test_trajectory_checks_give_named_scores_beside_the_answer(quick_ws, warm_litellm):
    ws = quick_ws

    @ws.tools.tool
    def lookup(q: str) -> str:
        """Look something up."""
        if q == "boom":
            raise RuntimeError("lookup broke")
        return "found it"

    def script(messages, tools):
        text = _text(messages)
        i = int(re.search(r"What is (\d+) \+ 1", text).group(1))
        if i == 0:
            return call("done", success=True, text="FINAL ANSWER: 1")  # no tool
        if "found it" not in text and "lookup broke" not in text:
            return call("lookup", q="boom" if i == 2 else "sum")
        return call("done", success=True, text=f"FINAL ANSWER: {i + 1}")

    def judge(messages, tools):
        transcript = messages[-1]["content"]
        assert "Rubric: Looks the answer up before answering" in transcript
        return "PASS: it looked it up" if "lookup(" in transcript else "FAIL: answered from memory"

    judge_model = ScriptedModel(judge)
    rubric = Rubric(judge_model.name, "Looks the answer up before answering", name="looked_up")

    def short_answer(trajectory):
        return len(trajectory.answer) < 40

    agent = ws.agent("looker", model=ScriptedModel(script).name, tools=["lookup"])
    checks = [tool_called("lookup"), tool_not_called("delete"), max_steps(1), no_tool_errors(), cost_under(0.01)]
    results = evaluate(ws, agent, _tasks(3), name="checked", checks=[*checks, rubric, short_answer], progress="off")
    score = {r.task_id: r.scores for r in results}
    assert score["t0"] == {
        "correct": 1.0,
        "tool_called:lookup": 0.0,
        "tool_not_called:delete": 1.0,
        "max_steps:1": 1.0,
        "no_tool_errors": 1.0,
        "cost_under:0.01": 1.0,
        "looked_up": 0.0,
        "short_answer": 1.0,
    }
    assert score["t1"]["tool_called:lookup"] == 1.0 and score["t1"]["max_steps:1"] == 0.0
    assert score["t1"]["no_tool_errors"] == 1.0 and score["t1"]["looked_up"] == 1.0
    assert score["t2"]["no_tool_errors"] == 0.0 and score["t2"]["correct"] == 1.0
    assert results["t1"].extra["check_notes"]["looked_up"] == "PASS: it looked it up"
    assert len(judge_model.calls) == 3
    assert results.estimate("tool_called:lookup").mean == pytest.approx(2 / 3)
    assert results.score_names()[:2] == ["correct", "tool_called:lookup"]
    assert results.summary()["scores"]["no_tool_errors"]["mean"] == pytest.approx(2 / 3)
    stored = ws.evaluation("checked").config["checks"]
    assert {"check": "rubric", "name": "looked_up", "model": judge_model.name}.items() <= stored[5].items()
    assert "{transcript}" in stored[5]["prompt"] and stored[0] == {"check": "tool_called", "tool": "lookup", "times": 1}
    with pytest.raises(TeaError, match="another setup \\(checks: "):
        evaluate(ws, agent, _tasks(3), name="checked", checks=checks, progress="off")


def test_a_rubric_judge_that_does_not_say_pass_or_fail_is_that_samples_error(quick_ws, warm_litellm):
    ws = quick_ws
    replies = iter(["PASS fine", "maybe?", "FAIL no"])
    judge_model = ScriptedModel(lambda m, t: next(replies))
    agent = ws.agent("plain", model=_patterned({"t0": [1], "t1": [1], "t2": [1]}).name, tools=[])
    results = evaluate(ws, agent, _tasks(3), name="r", checks=[Rubric(judge_model.name, "Is terse")], progress="off")
    assert [r.status for r in results] == ["scored", "error", "scored"]
    assert "the check rubric raised TeaError: the rubric judge" in results["t1"].error
    assert results["t0"].scores["rubric"] == 1.0 and results["t2"].scores["rubric"] == 0.0


def test_pass_at_k_estimators_match_the_formulas():
    assert pass_at_k(5, 0, 1) == 0.0 and pass_at_k(5, 5, 3) == 1.0
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - (7 * 6) / (10 * 9))
    assert pass_hat_k(10, 3, 2) == pytest.approx((3 * 2) / (10 * 9))
    with pytest.raises(TeaError, match="pass@4 needs at least 4 samples"):
        pass_at_k(3, 1, 4)


def test_the_cost_cap_counts_the_samples_in_flight(ws):
    import asyncio

    from tea_notebook.runtime.agent import RunResult
    from tea_notebook.runtime.runlog import Process

    class SlowPriced:
        """Not an LLM agent: answers '42' after a pause, at $0.02 a run, as a recorded run."""

        kind, name = "priced", "slow-priced"

        def __init__(self):
            self.runs = 0

        async def run(self, task, files=None, *, context=None, model=None):
            self.runs += 1
            async with Process(ws, self.name, task, model="tea/test", context=context) as p:
                await asyncio.sleep(0.05)
                p.cost = 0.02
                p.step("answer", {}, "42")
                p.finish("success", "42")
            return RunResult(p.run_id, self.name, task, p.model, "success", "42", p.steps, 0, 0, p.cost, workspace=ws)

    agent = SlowPriced()
    tasks = [{"id": f"p{i}", "question": f"q{i}", "answer": "42"} for i in range(20)]
    capped = evaluate(ws, agent, tasks, name="inflight", cost_cap=0.10, concurrency=4, epochs=2, progress="off")
    # 4 start at once (nothing known yet); then each start counts the runs in flight at $0.02 each:
    # after the first returns, 0.02 + 3 × 0.02 < 0.10 starts one more; after that, none
    assert agent.runs == 5 and capped.cost == pytest.approx(0.10)
    assert capped.stopped.startswith("cost cap $0.1 reached") and "35 sample(s) not started" in capped.stopped


def _ray_flaky(messages, tools):
    """Scripted (runs inside Ray workers): the first attempt at each question fails with a 503 (counted in
    a file, since each Ray task gets its own copy of this function), later ones answer the sum."""
    import os as _os
    from pathlib import Path as _Path

    text = _text(messages)
    i = int(re.search(r"What is (\d+) \+ 1", text).group(1))
    marks = _Path(_os.environ["TEA_TEST_RAY_MARKS"])
    mark = marks / f"t{i}"
    with open(marks / "log", "a") as log:
        log.write(f"t{i}\n")
    try:  # exactly one attempt per question creates the mark (two epochs may run at the same time)
        _os.close(_os.open(mark, _os.O_CREAT | _os.O_EXCL | _os.O_WRONLY))
    except FileExistsError:
        return call("done", success=True, text=f"FINAL ANSWER: {i + 1}")
    raise litellm.ServiceUnavailableError("503 overloaded", llm_provider="openai", model="x")


@pytest.mark.slow
def test_epochs_and_retries_work_the_same_on_ray(ws, tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("TEA_TEST_RAY_MARKS", str(marks))
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"TEA_TEST_RAY_MARKS": str(marks)}},
    )
    try:
        ws.model_retries = 0
        agent = ws.agent("ray_flaky", model=ScriptedModel(_ray_flaky).name, tools=[])
        results = evaluate(
            ws,
            agent,
            _tasks(3),
            name="ray-epochs",
            engine="ray",
            concurrency=2,
            epochs=2,
            retries=2,
            backoff=0.0,
            progress="off",
        )
    finally:
        ray.shutdown()
    assert len(results) == 6 and results.correct == 6 and results.infra_errors == 0
    # the first attempt at each question (whichever epoch Ray ran first) failed on the provider's side
    # and was retried, its failed run imported here; the other epoch of that question was not retried
    for task in ("t0", "t1", "t2"):
        samples = [r for r in results if r.task_id.split("#")[0] == task]
        assert sorted(r.retries for r in samples) == [0, 1], [(r.task_id, r.epoch, r.retries) for r in samples]
        retried = next(r for r in samples if r.retries == 1)
        assert ws.db.run_row(retried.retried_runs[0])["status"] == "error"
    assert sorted((marks / "log").read_text().split()) == sorted(["t0", "t1", "t2"] * 3)
    assert results.estimate().mean == 1.0 and results.pass_hat(2) == 1.0


def test_the_tea_eval_magic_takes_epochs_and_a_reducer(ip, tmp_path, warm_litellm):
    import json

    ip.run_line_magic("tea", f"workspace {tmp_path / 'mws'}")
    ws = ip.magics_manager.registry["TeaMagics"].workspace
    ws.agent("patterned", model=_patterned({"t0": [1, 0], "t1": [0, 0]}).name, tools=[])
    tasks = tmp_path / "t.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in _tasks(2)))
    results = ip.run_line_magic("tea", f"eval patterned {tasks} --name m --epochs 2 --reducer max --quiet")
    assert len(results) == 4 and results.epochs == 2 and results.estimate().mean == pytest.approx(0.5)
    assert "accuracy 0.50 ± 0.50 (k=2, 2 tasks, max of epochs)" in results.headline()
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="epochs must be a whole number of at least 1"):
        ip.run_line_magic("tea", f"eval patterned {tasks} --name m2 --epochs 0 --quiet")
