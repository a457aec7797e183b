"""The statistics of repeated runs: a mean with its standard error, pass@k and pass^k, the reducers
that turn a task's k samples into one score, and a paired bootstrap test of two configurations.

One agent run is a sample of a random variable. With ``epochs=k`` every task has k samples; the
overall score is the mean over tasks of each task's reduced score (``mean`` by default), and its
standard error is taken over tasks (the tasks are the independent units, the epochs of one task
are not), as Inspect AI does.

* ``pass@k``: the chance that at least one of k samples drawn without replacement from a task's n
  samples is correct — the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` (Chen et al., 2021) for
  n samples with c correct; when n == k it is simply "any of the k was correct".
* ``pass^k``: the chance that all k drawn samples are correct, ``C(c, k) / C(n, k)`` (τ-bench);
  when n == k it is "all k were correct".

Both are averaged over the tasks that have at least k scored samples.

Intervals hold at small n: a mean over n tasks gets the Student-t interval
``mean ± t_{1−α/2, n−1} · stderr`` (with 4 tasks t = 3.18, not 1.96), or a percentile bootstrap on
request; samples that share a task (epochs > 1) get a cluster-robust standard error. Two
configurations on the same tasks are compared by a paired bootstrap or paired t-test of the per-task
differences, or by McNemar's exact test of right/wrong; several comparisons at once get Holm or
Benjamini–Hochberg adjusted p-values. The distributions are computed in
:mod:`tea_notebook.eval.distributions` (no scipy); the sample-size planner is
:mod:`tea_notebook.eval.planning`, the reliability figures :mod:`tea_notebook.eval.reliability`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from tea_notebook.errors import TeaError
from tea_notebook.eval.distributions import binomial_cdf_half, normal_quantile, t_cdf, t_quantile

#: the normal quantile of a two-sided 95% interval (kept for callers; intervals here use Student's t)
Z95 = 1.959963984540054

#: how an interval of a mean is made: ``t`` (Student-t), ``bootstrap`` (percentile), ``normal``
INTERVAL_METHODS = ("t", "bootstrap", "normal")


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean (0.0 for no values)."""
    return sum(values) / len(values) if values else 0.0


def stderr(values: Sequence[float]) -> float:
    """The standard error of the mean: the sample standard deviation (n − 1) over √n; 0.0 below
    two values."""
    n = len(values)
    if n < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) / math.sqrt(n)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate that at least one of ``k`` of ``n`` samples (``c`` correct) is correct."""
    _check_nck(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate that all ``k`` of ``k`` samples drawn from ``n`` (``c`` correct) are correct."""
    _check_nck(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_nck(n: int, c: int, k: int) -> None:
    if k < 1:
        raise TeaError(f"k must be at least 1, not {k}")
    if not 0 <= c <= n:
        raise TeaError(f"{c} correct of {n} samples is not possible")
    if k > n:
        raise TeaError(f"pass@{k} needs at least {k} samples of the task, it has {n}")


@dataclass(frozen=True)
class Interval:
    """A two-sided interval of a mean at ``level`` (0.95 for 95%), made by ``method`` (``t``,
    ``bootstrap`` or ``normal``) from ``n`` units; ``df`` is the t's degrees of freedom."""

    low: float
    high: float
    level: float
    method: str
    n: int
    df: int | None = None

    def __iter__(self) -> Iterator[float]:
        return iter((self.low, self.high))

    def __str__(self) -> str:
        how = {"t": f"Student-t, {self.df} df", "bootstrap": "percentile bootstrap", "normal": "normal"}[self.method]
        return f"{self.level:.0%} CI {self.low:.3f} to {self.high:.3f} ({how}, n={self.n})"


@dataclass(frozen=True)
class Estimate:
    """A mean with its standard error over ``n`` units (tasks); ``str()`` gives ``0.63 ± 0.04``.

    ``df`` is the degrees of freedom of its t interval (``n − 1`` unless set: a clustered estimate
    has one less than its clusters); ``values`` are the units' values when known (the bootstrap
    resamples them)."""

    mean: float
    stderr: float
    n: int
    df: int | None = None
    values: tuple[float, ...] = field(default=(), repr=False, compare=False)

    @property
    def ci95(self) -> tuple[float, float]:
        """The 95% Student-t interval ``mean ± t_{0.975, n−1} · stderr`` (see :meth:`interval`);
        ``(mean, mean)`` below two units, where there is no spread to estimate."""
        low, high = self.interval(0.95)
        return (low, high)

    def interval(self, level: float = 0.95, *, method: str = "t", resamples: int = 10_000, seed: int = 0) -> Interval:
        """The two-sided interval at ``level``:

        * ``t``: ``mean ± t_{(1+level)/2, df} · stderr`` with df = n − 1 (Student; right at small n);
        * ``normal``: ``mean ± z_{(1+level)/2} · stderr`` (too narrow below ~30 units);
        * ``bootstrap``: the ``(1−level)/2`` and ``(1+level)/2`` percentiles of the means of
          ``resamples`` resamples of the values with replacement (seeded).

        Below two units the interval is the mean itself."""
        if not 0.0 < level < 1.0:
            raise TeaError(f"an interval's level is between 0 and 1 (0.95 for 95%), not {level}")
        if method not in INTERVAL_METHODS:
            raise TeaError(f"unknown interval method {method!r}; use {', '.join(INTERVAL_METHODS)}")
        df = self.df if self.df is not None else self.n - 1
        if self.n < 2 or df < 1:
            return Interval(self.mean, self.mean, level, method, self.n, max(df, 0) if method == "t" else None)
        upper = (1 + level) / 2
        if method == "bootstrap":
            low, high = _bootstrap_interval(self.values, level, resamples, seed)
            return Interval(low, high, level, method, self.n)
        q = t_quantile(upper, df) if method == "t" else normal_quantile(upper)
        half = q * self.stderr
        return Interval(self.mean - half, self.mean + half, level, method, self.n, df if method == "t" else None)

    def __str__(self) -> str:
        return f"{self.mean:.2f} ± {self.stderr:.2f}"

    @classmethod
    def of(cls, values: Sequence[float]) -> "Estimate":
        """The estimate of the mean of ``values``: their mean, ``s / √n`` (s with n − 1), n − 1 df."""
        values = [float(v) for v in values]
        return cls(mean(values), stderr(values), len(values), values=tuple(values))


def _bootstrap_interval(values: Sequence[float], level: float, resamples: int, seed: int) -> tuple[float, float]:
    import numpy as np

    if not values:
        raise TeaError("a bootstrap interval needs the values themselves: make the estimate with Estimate.of(values)")
    if resamples < 100:
        raise TeaError(f"resamples must be at least 100, not {resamples}")
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    low, high = np.percentile(means, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(low), float(high)


def clustered_estimate(samples: Mapping[str, Sequence[float]]) -> Estimate:
    """The mean of all samples with a cluster-robust standard error, the clusters being tasks (the
    epochs of one task are not independent):

    ``SE² = G/(G−1) · Σ_g (Σ_i (y_gi − ȳ))² / N²`` over G tasks and N samples (the CR1 sandwich of a
    regression on a constant, as statsmodels' ``cov_type="cluster"``), with G − 1 degrees of freedom.

    Refused (a clear :class:`TeaError`) when no task has more than one sample: with one epoch there
    are no shared tasks, the clustered error is not estimable, and the plain :meth:`Estimate.of` over
    tasks is the right one."""
    groups = {task: [float(v) for v in values] for task, values in samples.items() if values}
    if len(groups) < 2:
        raise TeaError(f"a clustered standard error needs at least 2 tasks with samples, there are {len(groups)}")
    if all(len(v) == 1 for v in groups.values()):
        raise TeaError(
            "a clustered standard error is not estimable with one sample per task (epochs=1): no samples "
            "share a task; the standard error over tasks (results.estimate()) is the right one"
        )
    everything = [v for values in groups.values() for v in values]
    n, g = len(everything), len(groups)
    overall = mean(everything)
    spread = sum(sum(v - overall for v in values) ** 2 for values in groups.values())
    se = math.sqrt(g / (g - 1) * spread) / n
    return Estimate(overall, se, g, df=g - 1, values=())


def _majority(values: Sequence[float]) -> float:
    """The most common score; a tie between scores goes to the lower one (a 2–2 split of right and
    wrong is not a majority for right)."""
    counts = Counter(values)
    top = max(counts.values())
    return min(v for v, n in counts.items() if n == top)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


REDUCERS: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": mean,
    "max": max,
    "min": min,
    "median": _median,
    "majority": _majority,
}


def resolve_reducer(reducer: Any = "mean") -> tuple[str, Callable[[Sequence[float]], float]]:
    """``(name, function)`` for a reducer name (``mean``, ``max``, ``min``, ``median``, ``majority``)
    or a function of a task's sample scores (a list of floats) to one float."""
    if isinstance(reducer, str):
        if reducer not in REDUCERS:
            raise TeaError(f"unknown reducer {reducer!r}; use {', '.join(REDUCERS)} or a function of a list of scores")
        return reducer, REDUCERS[reducer]
    if callable(reducer):
        return getattr(reducer, "__name__", type(reducer).__name__), reducer
    raise TeaError(f"a reducer is a name or a function, not {type(reducer).__name__}")


def reduce_scores(samples: Mapping[str, Sequence[float]], reducer: Any = "mean") -> dict[str, float]:
    """Each task's samples reduced to one score (tasks without samples are left out)."""
    name, fn = resolve_reducer(reducer)
    out = {}
    for task, values in samples.items():
        if not values:
            continue
        value = fn(list(values))
        try:
            out[task] = float(value)
        except (TypeError, ValueError):
            raise TeaError(f"reducer {name} returned {value!r} for task {task!r}, not a number") from None
    return out


@dataclass(frozen=True)
class PairedTest:
    """A paired comparison of configuration A and B on the same tasks: the mean difference A − B,
    its 95% interval, a two-sided p-value and the tasks compared, by ``method``: ``bootstrap``
    (``resamples`` resamples, ``seed``) or ``t`` (Student's paired t-test)."""

    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    resamples: int = 0
    seed: int = 0
    method: str = "bootstrap"

    def __str__(self) -> str:
        if self.method == "t":
            p, how = f"p = {self.p_value:.3f}", f"paired t-test over {self.n} tasks ({self.n - 1} df)"
        else:
            # no resample as extreme as the observed difference: p is below the resolution of the resampling
            p = f"p < {1 / self.resamples:g}" if self.p_value == 0 else f"p = {self.p_value:.3f}"
            how = f"paired bootstrap over {self.n} tasks ({self.resamples} resamples, seed {self.seed})"
        return f"A − B = {self.difference:+.3f} (95% CI {self.ci_low:+.3f} to {self.ci_high:+.3f}), {p}, {how}"


def _paired_differences(a: Mapping[str, float], b: Mapping[str, float]) -> list[float]:
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        raise TeaError(f"a paired test needs at least 2 tasks scored by both configurations, there are {len(common)}")
    return [float(a[t]) - float(b[t]) for t in common]


def paired_bootstrap(
    a: Mapping[str, float], b: Mapping[str, float], *, resamples: int = 10_000, seed: int = 0
) -> PairedTest:
    """Resample the tasks both ``a`` and ``b`` scored (with replacement, ``resamples`` times, seeded)
    and look at the mean of the per-task differences. The interval is the 2.5–97.5 percentiles of
    the resampled means; the p-value is the share of resampled means, shifted to a mean of zero (the
    null hypothesis of no difference), at least as far from zero as the observed one."""
    import numpy as np

    differences = _paired_differences(a, b)
    if resamples < 100:
        raise TeaError("resamples must be at least 100")
    diffs = np.array(differences, dtype=float)
    observed = float(diffs.mean())
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(diffs), size=(resamples, len(diffs)))
    means = diffs[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    centred = means - observed
    # a tolerance so that a resample equal to the observed difference counts despite float rounding
    p = float(np.mean(np.abs(centred) >= abs(observed) - 1e-12))
    return PairedTest(observed, float(low), float(high), p, len(diffs), resamples, seed)


def paired_t_test(a: Mapping[str, float], b: Mapping[str, float]) -> PairedTest:
    """Student's paired t-test of the per-task differences d = a − b over the tasks both scored:
    ``t = mean(d) / (s_d / √n)`` with n − 1 df, p = ``2 · P(T > |t|)``, and the 95% interval
    ``mean(d) ± t_{0.975, n−1} · s_d / √n``. Differences that do not vary give p = 1 when they are all
    zero and p = 0 otherwise."""
    differences = _paired_differences(a, b)
    est = Estimate.of(differences)
    low, high = est.ci95
    if est.stderr == 0:
        p = 1.0 if est.mean == 0 else 0.0
    else:
        p = min(1.0, 2 * (1 - t_cdf(abs(est.mean / est.stderr), est.n - 1)))
    return PairedTest(est.mean, low, high, p, est.n, method="t")


@dataclass(frozen=True)
class McNemarTest:
    """McNemar's exact test of paired right/wrong outcomes: of the tasks A and B both scored,
    ``a_only`` A got right and B wrong, ``b_only`` the reverse; ``both`` and ``neither`` carry no
    information about a difference. ``p_value`` is two-sided."""

    a_only: int
    b_only: int
    both: int
    neither: int
    p_value: float

    @property
    def n(self) -> int:
        """The tasks compared."""
        return self.a_only + self.b_only + self.both + self.neither

    def __str__(self) -> str:
        return (
            f"McNemar exact: A right where B wrong on {self.a_only} tasks, B right where A wrong on "
            f"{self.b_only} (both right {self.both}, both wrong {self.neither}), p = {self.p_value:.3f}"
        )


def mcnemar_p_value(a_only: int, b_only: int) -> float:
    """The exact two-sided McNemar p-value of ``a_only`` and ``b_only`` discordant pairs:
    ``min(1, 2 · P(X ≤ min(a_only, b_only)))`` with X ~ Binomial(a_only + b_only, ½)."""
    if a_only < 0 or b_only < 0:
        raise TeaError(f"discordant counts cannot be negative ({a_only}, {b_only})")
    return min(1.0, 2 * binomial_cdf_half(min(a_only, b_only), a_only + b_only))


def mcnemar(a: Mapping[str, float], b: Mapping[str, float], *, threshold: float = 0.5) -> McNemarTest:
    """McNemar's exact test of ``a`` against ``b`` over the tasks both scored, a task's score counting
    as right at ``threshold`` or above (see :func:`mcnemar_p_value` for the formula)."""
    common = sorted(set(a) & set(b))
    if not common:
        raise TeaError("McNemar's test needs tasks scored by both configurations, there are none")
    right_a = {t: float(a[t]) >= threshold for t in common}
    right_b = {t: float(b[t]) >= threshold for t in common}
    a_only = sum(1 for t in common if right_a[t] and not right_b[t])
    b_only = sum(1 for t in common if right_b[t] and not right_a[t])
    both = sum(1 for t in common if right_a[t] and right_b[t])
    neither = len(common) - a_only - b_only - both
    return McNemarTest(a_only, b_only, both, neither, mcnemar_p_value(a_only, b_only))


#: multiple-comparison adjustments: ``holm`` (family-wise error) and ``bh`` (false discovery rate)
ADJUSTMENTS = ("holm", "bh", "none")


def adjust_p_values(p_values: Sequence[float], method: str = "holm") -> list[float]:
    """p-values adjusted for testing them together, in the order given. With m p-values sorted
    ascending p₍₁₎ ≤ … ≤ p₍ₘ₎:

    * ``holm`` (Holm–Bonferroni, controls the family-wise error): ``p̃₍ᵢ₎ = max_{j≤i} min(1, (m−j+1)·p₍ⱼ₎)``;
    * ``bh`` (Benjamini–Hochberg, controls the false discovery rate): ``p̃₍ᵢ₎ = min_{j≥i} min(1, m·p₍ⱼ₎/j)``;
    * ``none``: unchanged."""
    if method not in ADJUSTMENTS:
        raise TeaError(f"unknown adjustment {method!r}; use {', '.join(ADJUSTMENTS)}")
    ps = [float(p) for p in p_values]
    bad = [p for p in ps if not 0.0 <= p <= 1.0]
    if bad:
        raise TeaError(f"p-values are between 0 and 1, not {bad[0]}")
    m = len(ps)
    if method == "none" or m == 0:
        return ps
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted = [0.0] * m
    if method == "holm":
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, (m - rank) * ps[i]))
            adjusted[i] = running
    else:
        running = 1.0
        for rank in range(m - 1, -1, -1):
            i = order[rank]
            running = min(running, min(1.0, m * ps[i] / (rank + 1)))
            adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Comparisons:
    """Several paired comparisons made at once (each configuration against ``baseline``), their
    p-values adjusted by ``adjustment`` (:func:`adjust_p_values`); a comparison is significant when
    its adjusted p-value is below ``alpha``."""

    baseline: str
    tests: dict[str, PairedTest]
    adjusted: dict[str, float]
    adjustment: str
    alpha: float

    def significant(self) -> list[str]:
        """The configurations whose difference from the baseline holds after the adjustment."""
        return [label for label, p in self.adjusted.items() if p < self.alpha]

    def rows(self) -> list[dict[str, Any]]:
        """One row per comparison: difference, interval, raw and adjusted p, significant or not."""
        return [
            {
                "config": label,
                "baseline": self.baseline,
                "difference": t.difference,
                "ci_low": t.ci_low,
                "ci_high": t.ci_high,
                "p_value": t.p_value,
                "p_adjusted": self.adjusted[label],
                "significant": self.adjusted[label] < self.alpha,
                "tasks": t.n,
            }
            for label, t in self.tests.items()
        ]

    def __str__(self) -> str:
        method = next(iter(self.tests.values())).method if self.tests else "bootstrap"
        lines = [
            f"{len(self.tests)} comparisons against {self.baseline} ({method} test, {self.adjustment}-adjusted, "
            f"alpha {self.alpha:g}):"
        ]
        for row in self.rows():
            lines.append(
                f"  {row['config']:<32} {row['difference']:+.3f} "
                f"(95% CI {row['ci_low']:+.3f} to {row['ci_high']:+.3f}) "
                f"p = {row['p_value']:.3f}, adjusted {row['p_adjusted']:.3f}" + (" *" if row["significant"] else "")
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        import html

        head = "".join(
            f"<th style='text-align:left'>{h}</th>"
            for h in ("configuration", f"− {html.escape(self.baseline)}", "95% CI", "p", f"p ({self.adjustment})", "")
        )
        body = "".join(
            "<tr>"
            + "".join(
                f"<td style='text-align:left'>{c}</td>"
                for c in (
                    html.escape(r["config"]),
                    f"{r['difference']:+.3f}",
                    f"{r['ci_low']:+.3f} to {r['ci_high']:+.3f}",
                    f"{r['p_value']:.3f}",
                    f"{r['p_adjusted']:.3f}",
                    "significant" if r["significant"] else "",
                )
            )
            + "</tr>"
            for r in self.rows()
        )
        return (
            f"<div class='tea-comparisons'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<div style='font-size:85%;color:#57606a'>{len(self.tests)} comparisons at once: p-values "
            f"{self.adjustment}-adjusted, significant below {self.alpha:g}</div></div>"
        )


def compare_many(
    scores: Mapping[str, Mapping[str, float]],
    baseline: str,
    *,
    test: str = "bootstrap",
    adjustment: str = "holm",
    alpha: float = 0.05,
    resamples: int = 10_000,
    seed: int = 0,
) -> Comparisons:
    """Every configuration of ``scores`` (label → task → score) against ``baseline`` by a paired
    ``test`` (``bootstrap`` or ``t``), the p-values adjusted together (``holm``, ``bh``, ``none``)."""
    if baseline not in scores:
        raise TeaError(f"the baseline {baseline!r} is not one of the configurations: {', '.join(scores)}")
    if test not in ("bootstrap", "t"):
        raise TeaError(f"unknown paired test {test!r}; use 'bootstrap' or 't'")
    if adjustment not in ADJUSTMENTS:
        raise TeaError(f"unknown adjustment {adjustment!r}; use {', '.join(ADJUSTMENTS)}")
    if not 0.0 < alpha < 1.0:
        raise TeaError(f"alpha is between 0 and 1, not {alpha}")
    others = [label for label in scores if label != baseline]
    if not others:
        raise TeaError("comparing needs at least one configuration besides the baseline")
    tests = {
        label: paired_t_test(scores[label], scores[baseline])
        if test == "t"
        else paired_bootstrap(scores[label], scores[baseline], resamples=resamples, seed=seed)
        for label in others
    }
    adjusted = adjust_p_values([t.p_value for t in tests.values()], adjustment)
    return Comparisons(baseline, tests, dict(zip(tests, adjusted)), adjustment, alpha)


__all__ = [
    "ADJUSTMENTS",
    "INTERVAL_METHODS",
    "REDUCERS",
    "Z95",
    "Comparisons",
    "Estimate",
    "Interval",
    "McNemarTest",
    "PairedTest",
    "adjust_p_values",
    "clustered_estimate",
    "compare_many",
    "mcnemar",
    "mcnemar_p_value",
    "mean",
    "paired_bootstrap",
    "paired_t_test",
    "pass_at_k",
    "pass_hat_k",
    "reduce_scores",
    "resolve_reducer",
    "stderr",
]
