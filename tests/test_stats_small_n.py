"""Statistics that hold at small n: every statistic of tea_notebook.eval (its own t quantile, binomial
tail and noncentral t; Student-t and bootstrap intervals; the clustered standard error; the paired
t-test; McNemar's exact test; Holm and Benjamini–Hochberg; power and the sample-size planner; the
reliability figures) checked on fixed data against scipy / statsmodels, and wired into eval sets run
with scripted models (``tea/script:...``, not an LLM).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter

import pytest

from tea_notebook.errors import TeaError
from tea_notebook.eval import EvalResults, TaskResult, eval_set
from tea_notebook.eval.distributions import (
    binomial_cdf_half,
    incomplete_beta,
    noncentral_t_sf,
    t_cdf,
    t_quantile,
)
from tea_notebook.eval.planning import plan_sample_size, t_test_power, tasks_for_power
from tea_notebook.eval.reliability import calibration, reliability
from tea_notebook.eval.stats import (
    Estimate,
    adjust_p_values,
    clustered_estimate,
    compare_many,
    mcnemar,
    mcnemar_p_value,
    paired_t_test,
)
from tea_notebook.models.offline import ScriptedModel, call

scipy_stats = pytest.importorskip("scipy.stats", reason="the reference implementations: pip install scipy")
scipy_special = pytest.importorskip("scipy.special", reason="the reference implementations: pip install scipy")
sm_multitest = pytest.importorskip("statsmodels.stats.multitest", reason="pip install statsmodels")
sm_power = pytest.importorskip("statsmodels.stats.power", reason="pip install statsmodels")
sm_tables = pytest.importorskip("statsmodels.stats.contingency_tables", reason="pip install statsmodels")
sm_api = pytest.importorskip("statsmodels.api", reason="pip install statsmodels")

# four tasks' scores: the small n the normal interval gets wrong
FOUR = [0.25, 1.0, 0.5, 0.75]


# -- the distributions, computed without scipy -----------------------------------------------------------
@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 29, 120, 5000])
def test_the_t_quantile_and_distribution_match_scipy(df):
    for p in (1e-6, 0.005, 0.025, 0.1, 0.5, 0.8, 0.975, 0.995, 1 - 1e-6):
        expected = scipy_stats.t.ppf(p, df)
        assert t_quantile(p, df) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    for t in (-40.0, -3.2, -0.7, 0.0, 0.4, 2.1, 12.0):
        assert t_cdf(t, df) == pytest.approx(scipy_stats.t.cdf(t, df), rel=1e-9, abs=1e-14)


def test_the_incomplete_beta_binomial_tail_and_noncentral_t_match_scipy():
    for x, a, b in itertools.product((0.001, 0.2, 0.5, 0.9, 0.999), (0.5, 1.5, 40.0), (0.5, 3.0, 200.0)):
        assert incomplete_beta(x, a, b) == pytest.approx(scipy_special.betainc(a, b, x), rel=1e-9, abs=1e-14)
    for n, k in ((1, 0), (6, 1), (20, 3), (51, 25), (2000, 950)):
        assert binomial_cdf_half(k, n) == pytest.approx(scipy_stats.binom.cdf(k, n, 0.5), rel=1e-9)
    for df, nc, c in itertools.product((1, 3, 19, 400), (0.0, 1.3, 4.0), (-1.0, 0.5, 2.2)):
        assert noncentral_t_sf(c, df, nc) == pytest.approx(scipy_stats.nct.sf(c, df, nc), abs=1e-8)
    with pytest.raises(TeaError, match="between 0 and 1"):
        t_quantile(1.0, 3)
    with pytest.raises(TeaError, match="positive degrees of freedom"):
        t_cdf(1.0, 0)


# -- intervals ---------------------------------------------------------------------------------------------
def test_the_t_interval_at_n_4_matches_scipy_and_is_wider_than_the_normal_one():
    est = Estimate.of(FOUR)
    expected = scipy_stats.t.interval(0.95, 3, loc=sum(FOUR) / 4, scale=scipy_stats.sem(FOUR))
    assert est.ci95 == pytest.approx(expected, rel=1e-10)
    interval = est.interval(0.95)
    assert (interval.method, interval.df, interval.n) == ("t", 3, 4) and tuple(interval) == est.ci95
    assert "Student-t, 3 df" in str(interval)
    ninety = est.interval(0.9)
    assert tuple(ninety) == pytest.approx(scipy_stats.t.interval(0.9, 3, loc=0.625, scale=scipy_stats.sem(FOUR)))
    normal = est.interval(method="normal")
    assert tuple(normal) == pytest.approx(scipy_stats.norm.interval(0.95, loc=0.625, scale=scipy_stats.sem(FOUR)))
    # t_{0.975, 3} = 3.18 against 1.96: the normal interval is 38% too narrow at four tasks
    assert (est.ci95[1] - est.ci95[0]) / (normal.high - normal.low) == pytest.approx(3.182446 / 1.959964, rel=1e-6)
    assert Estimate.of([0.7]).ci95 == (0.7, 0.7)  # one task: no spread to estimate
    with pytest.raises(TeaError, match="unknown interval method 'wald'"):
        est.interval(method="wald")
    with pytest.raises(TeaError, match="level is between 0 and 1"):
        est.interval(95)


def test_the_bootstrap_interval_is_the_percentiles_of_the_exact_resampling_distribution():
    est = Estimate.of(FOUR)
    # every one of the 4^4 equally likely resamples of four tasks
    means = sorted(sum(FOUR[i] for i in pick) / 4 for pick in itertools.product(range(4), repeat=4))
    boot = est.interval(method="bootstrap", resamples=40_000, seed=3)
    assert boot.method == "bootstrap" and boot.df is None
    assert boot.low == pytest.approx(means[int(0.025 * 256)], abs=0.04)
    assert boot.high == pytest.approx(means[int(0.975 * 256)], abs=0.04)
    assert est.interval(method="bootstrap", resamples=40_000, seed=3) == boot  # seeded
    with pytest.raises(TeaError, match="needs the values themselves"):
        Estimate(0.5, 0.1, 4).interval(method="bootstrap")


def test_the_clustered_standard_error_matches_statsmodels_and_is_refused_at_one_epoch():
    samples = {"t0": [1, 1, 0], "t1": [0, 0], "t2": [1, 1, 1, 1], "t3": [0, 1, 0], "t4": [1]}
    y = [v for values in samples.values() for v in values]
    groups = [i for i, values in enumerate(samples.values()) for _ in values]
    fit = sm_api.OLS(y, [[1.0]] * len(y)).fit(cov_type="cluster", cov_kwds={"groups": groups})
    est = clustered_estimate(samples)
    assert est.mean == pytest.approx(fit.params[0]) and est.stderr == pytest.approx(fit.bse[0], rel=1e-10)
    assert (est.n, est.df) == (5, 4)
    low, high = est.ci95
    assert high - est.mean == pytest.approx(scipy_stats.t.ppf(0.975, 4) * fit.bse[0], rel=1e-9)
    with pytest.raises(TeaError, match=r"not estimable with one sample per task \(epochs=1\)") as refused:
        clustered_estimate({"t0": [1], "t1": [0], "t2": [1]})
    assert "results.estimate()" in str(refused.value)


# -- paired tests and many comparisons ----------------------------------------------------------------------
def test_the_paired_t_test_matches_scipy():
    a = {"t0": 1.0, "t1": 0.5, "t2": 1.0, "t3": 0.75, "t4": 0.0}
    b = {"t0": 0.5, "t1": 0.5, "t2": 0.25, "t3": 0.5, "t4": 0.25, "only_b": 1.0}
    test = paired_t_test(a, b)
    diffs = [a[t] - b[t] for t in sorted(a)]
    ref = scipy_stats.ttest_rel([a[t] for t in sorted(a)], [b[t] for t in sorted(a)])
    assert test.p_value == pytest.approx(ref.pvalue, rel=1e-9) and test.n == 5 and test.method == "t"
    ci = scipy_stats.t.interval(0.95, 4, loc=sum(diffs) / 5, scale=scipy_stats.sem(diffs))
    assert (test.ci_low, test.ci_high) == pytest.approx(ci, rel=1e-9)
    assert "paired t-test over 5 tasks (4 df)" in str(test)
    assert paired_t_test({"x": 1, "y": 1}, {"x": 1, "y": 1}).p_value == 1.0  # no difference at all


@pytest.mark.parametrize("table", [[[10, 5], [1, 4]], [[3, 0], [0, 2]], [[7, 9], [2, 1]], [[0, 13], [1, 0]]])
def test_mcnemar_exact_matches_statsmodels_on_a_2x2(table):
    # rows: A right / wrong; columns: B right / wrong
    (both, a_only), (b_only, neither) = table
    expected = sm_tables.mcnemar(table, exact=True).pvalue
    assert mcnemar_p_value(a_only, b_only) == pytest.approx(expected, rel=1e-12)
    a, b, i = {}, {}, 0
    for right_a, right_b, count in ((1, 1, both), (1, 0, a_only), (0, 1, b_only), (0, 0, neither)):
        for _ in range(count):
            a[f"t{i}"], b[f"t{i}"], i = float(right_a), float(right_b), i + 1
    test = mcnemar(a, b)
    assert (test.both, test.a_only, test.b_only, test.neither, test.n) == (both, a_only, b_only, neither, i)
    assert test.p_value == pytest.approx(expected, rel=1e-12) and f"p = {expected:.3f}" in str(test)


def test_holm_and_benjamini_hochberg_match_statsmodels_on_5_p_values():
    p = [0.01, 0.04, 0.03, 0.2, 0.005]
    for ours, theirs in (("holm", "holm"), ("bh", "fdr_bh")):
        expected = sm_multitest.multipletests(p, method=theirs)[1]
        assert adjust_p_values(p, ours) == pytest.approx(list(expected), rel=1e-12)
    ties = [0.02, 0.02, 0.5, 0.001, 0.04]
    assert adjust_p_values(ties, "holm") == pytest.approx(list(sm_multitest.multipletests(ties, method="holm")[1]))
    assert adjust_p_values(ties, "bh") == pytest.approx(list(sm_multitest.multipletests(ties, method="fdr_bh")[1]))
    assert adjust_p_values(p, "none") == p and adjust_p_values([], "holm") == []
    with pytest.raises(TeaError, match="unknown adjustment 'bonf'"):
        adjust_p_values(p, "bonf")
    with pytest.raises(TeaError, match="between 0 and 1, not 1.5"):
        adjust_p_values([0.1, 1.5])


def test_compare_many_adjusts_every_comparison_against_the_baseline():
    tasks = [f"t{i}" for i in range(8)]
    base = dict.fromkeys(tasks, 0.0)
    scores = {
        "base": base,
        "strong": dict.fromkeys(tasks, 1.0) | {"t0": 0.0},
        "weak": {t: float(i % 3 == 0) for i, t in enumerate(tasks)},
        "same": dict(base),
    }
    result = compare_many(scores, "base", test="t", adjustment="holm")
    raw = [result.tests[label].p_value for label in ("strong", "weak", "same")]
    expected = sm_multitest.multipletests(raw, method="holm")[1]
    assert [result.adjusted[label] for label in ("strong", "weak", "same")] == pytest.approx(list(expected))
    assert result.significant() == ["strong"]
    rows = {r["config"]: r for r in result.rows()}
    assert rows["weak"]["p_adjusted"] >= rows["weak"]["p_value"] and rows["same"]["difference"] == 0
    assert "holm-adjusted" in str(result) and "significant" in result._repr_html_()
    with pytest.raises(TeaError, match="the baseline 'nope' is not one of the configurations"):
        compare_many(scores, "nope")


# -- power and the planner ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("tasks", "effect", "sd"), [(2, 0.5, 0.4), (10, 0.05, 0.2), (30, 0.1, 0.35), (400, 0.05, 0.5)])
def test_power_for_a_given_effect_matches_statsmodels(tasks, effect, sd):
    expected = sm_power.TTestPower().power(effect_size=effect / sd, nobs=tasks, alpha=0.05, alternative="two-sided")
    assert t_test_power(tasks, effect, sd, 0.05) == pytest.approx(expected, abs=1e-8)


def test_tasks_for_power_is_the_smallest_n_statsmodels_solves_for():
    for effect, sd, power in ((0.05, 0.5, 0.8), (0.2, 0.4, 0.9), (0.1, 0.3, 0.8)):
        solved = sm_power.TTestPower().solve_power(effect_size=effect / sd, power=power, alpha=0.05)
        assert tasks_for_power(effect, sd, power, 0.05) == math.ceil(solved)
    with pytest.raises(TeaError, match="out of reach"):
        tasks_for_power(1e-5, 0.5)


def test_the_planner_reads_between_and_within_task_spread_from_a_pilot():
    pilot = {f"t{i}": ([1, 1, 1] if i % 3 == 0 else [1, 0, 1] if i % 3 == 1 else [0, 0, 0]) for i in range(12)}
    plan = plan_sample_size(pilot, effect=0.05, power=0.8, alpha=0.05)
    # pooled within-task variance: 4 tasks with [1, 0, 1] (var 1/3 each) over 12 tasks' 2 df each
    within = 4 * (1 / 3) * 2 / 24
    means = [sum(v) / 3 for v in pilot.values()]
    m = sum(means) / 12
    between = sum((x - m) ** 2 for x in means) / 11 - within / 3
    assert plan.sd_within == pytest.approx(math.sqrt(2 * within)) and plan.sd_between == pytest.approx(
        math.sqrt(2 * between)
    )
    assert (plan.pilot_tasks, plan.pilot_epochs, plan.paired) == (12, 3, False)
    tasks = [row.tasks for row in plan.rows]
    assert [row.epochs for row in plan.rows] == [1, 2, 3, 5, 10] and tasks == sorted(tasks, reverse=True)
    for row in plan.rows:
        sd = math.sqrt(2 * between + 2 * within / row.epochs)
        assert row.sd == pytest.approx(sd) and row.tasks == tasks_for_power(0.05, sd, 0.8, 0.05)
        assert row.samples == row.tasks * row.epochs
    assert plan.enough(tasks[2], epochs=3) and not plan.enough(tasks[2] - 1, epochs=3)
    assert plan.power_at(tasks[0]) >= 0.8 > plan.power_at(tasks[0] - 1)
    text = repr(plan)
    assert "+5.0 points with 80% power" in text and "12 tasks × 3 epochs" in text and "pass baseline=" in text
    assert "<table>" in plan._repr_html_()


def test_the_planner_pairs_with_a_baseline_and_says_what_it_cannot_know():
    pilot = {f"t{i}": [float(i % 2)] for i in range(10)}
    baseline = {f"t{i}": [float(i % 4 == 0)] for i in range(10)}
    paired = plan_sample_size(pilot, baseline=baseline, effect=0.1)
    diffs = [pilot[t][0] - baseline[t][0] for t in pilot]
    m = sum(diffs) / 10
    sd = math.sqrt(sum((d - m) ** 2 for d in diffs) / 9)
    assert paired.paired and paired.sd_within is None and paired.rows[0].tasks == tasks_for_power(0.1, sd)
    assert len({row.tasks for row in paired.rows}) == 1  # one epoch: more epochs cannot be planned to help
    assert any("one sample per task" in note for note in paired.notes)
    small = plan_sample_size({"a": [1], "b": [0], "c": [1]})
    assert any("only 3 tasks" in note for note in small.notes)
    with pytest.raises(TeaError, match="do not vary"):
        plan_sample_size({"a": [1, 1], "b": [1, 1]})
    with pytest.raises(TeaError, match="0.05 = 5 points"):
        plan_sample_size(pilot, effect=5)
    with pytest.raises(TeaError, match="power is a probability"):
        plan_sample_size(pilot, power=80)
    with pytest.raises(TeaError, match="share 0 scored tasks"):
        plan_sample_size(pilot, baseline={"x": [1], "y": [0]})


# -- reliability ----------------------------------------------------------------------------------------------
def _sample(task, epoch, correct, confidence=None):
    extra = {} if confidence is None else {"confidence": confidence}
    return TaskResult(task, int(task[1:]), "scored", correct, epoch=epoch, extra=extra)


def test_reliability_counts_consistency_and_calibration():
    outcomes = {"t0": [1, 1, 1], "t1": [0, 0, 0], "t2": [1, 0, 1], "t3": [1, 1, 1]}
    confidence = {"t0": 0.95, "t1": 0.15, "t2": 0.55, "t3": 0.85}
    rows = [_sample(t, e + 1, bool(v), confidence[t]) for t, values in outcomes.items() for e, v in enumerate(values)]
    rows.append(_sample("t4", 1, False, "very sure"))  # not a number: left out, and said so
    results = EvalResults("rel", rows)
    rel = results.reliability()
    assert (rel.tasks, rel.repeated, rel.always_right, rel.always_wrong, rel.mixed) == (5, 4, 2, 1, 1)
    assert rel.consistency == pytest.approx(0.75)
    assert rel.clustered is not None and rel.clustered.df == 4
    pairs = [(confidence[t], bool(v)) for t, values in outcomes.items() for v in values]
    assert rel.calibration.brier == pytest.approx(sum((c - y) ** 2 for c, y in pairs) / 12)
    # bins of width 0.1: 0.15 (3 wrong), 0.55 (2 of 3 right), 0.85 and 0.95 (all right)
    ece = (3 * 0.15 + 3 * abs(2 / 3 - 0.55) + 3 * 0.15 + 3 * 0.05) / 12
    assert rel.calibration.ece == pytest.approx(ece) and len(rel.calibration.bins) == 4
    assert "75% of 4 repeated tasks" in str(rel) and "1 samples state a confidence that is not a number" in str(rel)
    one_epoch = reliability({"t0": [1.0], "t1": [0.0], "t2": [1.0]})
    assert one_epoch.consistency is None and one_epoch.clustered is None and one_epoch.calibration is None
    text = str(one_epoch)
    assert "consistency across epochs: not estimable" in text and "not estimable with one sample per task" in text
    with pytest.raises(TeaError, match="from 0 to 1, not 1.4"):
        calibration([(1.4, True)])


# -- wired into eval sets -------------------------------------------------------------------------------------
def _text(messages):
    return " ".join(m["content"] for m in messages if isinstance(m.get("content"), str))


def _patterned(patterns):
    """A scripted solver right on the epochs ``patterns[task]`` says, in call order per task."""
    seen: Counter = Counter()

    def script(messages, tools):
        i = int(re.search(r"What is (\d+) \+ 1", _text(messages)).group(1))
        right = patterns[i][seen[i]]
        seen[i] += 1
        return call("done", success=True, text=f"FINAL ANSWER: {i + 1 if right else -1}")

    return ScriptedModel(script)


def test_an_eval_set_compares_all_against_a_baseline_with_holm_and_mcnemar(ws, warm_litellm):
    ws.model_retries = 0
    tasks = [{"id": f"t{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(6)]
    base = _patterned([[0, 0], [1, 0], [0, 0], [0, 0], [0, 1], [0, 0]])
    good = _patterned([[1, 1], [1, 1], [1, 1], [1, 0], [1, 1], [1, 1]])
    meh = _patterned([[0, 0], [1, 1], [0, 1], [0, 0], [0, 1], [1, 0]])
    ws.agent("solver", model=base.name, tools=[])
    s = eval_set(
        ws, "three", agents=["solver"], models=[base.name, good.name, meh.name], tasks=tasks, epochs=2, progress="off"
    )
    lb, lg, lm = list(s.members)
    all_vs_base = s.compare_all(test="t")
    assert all_vs_base.baseline == lb and set(all_vs_base.tests) == {lg, lm}
    raw = [all_vs_base.tests[label].p_value for label in (lg, lm)]
    holm = sm_multitest.multipletests(raw, method="holm")[1]
    assert [all_vs_base.adjusted[label] for label in (lg, lm)] == pytest.approx(list(holm))
    assert all_vs_base.significant() == [lg]
    assert s.compare(lg, lb, test="t") == all_vs_base.tests[lg]
    bh = s.compare_all(lb, adjustment="bh", resamples=2_000, seed=1)
    assert bh.adjustment == "bh" and bh.tests[lg].method == "bootstrap"
    # right/wrong per task (a task's mean of 2 epochs ≥ 0.5): good right on all 6, base on t1 and t4
    test = s.mcnemar(lg, lb)
    assert (test.a_only, test.b_only, test.both, test.neither) == (4, 0, 2, 0)
    assert test.p_value == pytest.approx(sm_tables.mcnemar([[2, 4], [0, 0]], exact=True).pvalue)
    row = {r["config"]: r for r in s.table()}[lb]
    scores = list(s[lb].task_scores().values())
    assert (row["ci95_low"], row["ci95_high"]) == pytest.approx(
        scipy_stats.t.interval(0.95, 5, loc=sum(scores) / 6, scale=scipy_stats.sem(scores))
    )
    assert "Student" in s._repr_html_() and "compare_all" in s._repr_html_()
    rel = s[lg].reliability()
    assert (rel.repeated, rel.always_right, rel.always_wrong) == (6, 5, 0)
    plan = plan_sample_size(s[lg], baseline=s[lb], effect=0.2)
    assert plan.paired and plan.pilot_tasks == 6 and plan.pilot_epochs == 2
    with pytest.raises(KeyError, match="'nope' is not a configuration"):
        s.compare_all("nope")
    with pytest.raises(TeaError, match="unknown paired test 'z'"):
        s.compare(lg, lb, test="z")
