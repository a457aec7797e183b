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
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from tea_notebook.errors import TeaError

#: the normal quantile of a two-sided 95% interval (intervals here are mean ± Z95 · stderr)
Z95 = 1.959963984540054


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
class Estimate:
    """A mean with its standard error over ``n`` units (tasks); ``str()`` gives ``0.63 ± 0.04``."""

    mean: float
    stderr: float
    n: int

    @property
    def ci95(self) -> tuple[float, float]:
        """The 95% interval mean ± 1.96 · stderr (a normal approximation)."""
        half = Z95 * self.stderr
        return (self.mean - half, self.mean + half)

    def __str__(self) -> str:
        return f"{self.mean:.2f} ± {self.stderr:.2f}"

    @classmethod
    def of(cls, values: Sequence[float]) -> "Estimate":
        """The estimate of the mean of ``values``."""
        values = list(values)
        return cls(mean(values), stderr(values), len(values))


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
    """A paired bootstrap comparison of configuration A and B on the same tasks: the mean difference
    A − B, its 95% percentile interval, a two-sided p-value, the tasks compared and the resamples."""

    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    resamples: int
    seed: int

    def __str__(self) -> str:
        # no resample as extreme as the observed difference: p is below the resolution of the resampling
        p = f"p < {1 / self.resamples:g}" if self.p_value == 0 else f"p = {self.p_value:.3f}"
        return (
            f"A − B = {self.difference:+.3f} (95% CI {self.ci_low:+.3f} to {self.ci_high:+.3f}), "
            f"{p}, paired bootstrap over {self.n} tasks "
            f"({self.resamples} resamples, seed {self.seed})"
        )


def paired_bootstrap(
    a: Mapping[str, float], b: Mapping[str, float], *, resamples: int = 10_000, seed: int = 0
) -> PairedTest:
    """Resample the tasks both ``a`` and ``b`` scored (with replacement, ``resamples`` times, seeded)
    and look at the mean of the per-task differences. The interval is the 2.5–97.5 percentiles of
    the resampled means; the p-value is the share of resampled means, shifted to a mean of zero (the
    null hypothesis of no difference), at least as far from zero as the observed one."""
    import numpy as np

    common = sorted(set(a) & set(b))
    if len(common) < 2:
        raise TeaError(f"a paired test needs at least 2 tasks scored by both configurations, there are {len(common)}")
    if resamples < 100:
        raise TeaError("resamples must be at least 100")
    diffs = np.array([a[t] - b[t] for t in common], dtype=float)
    observed = float(diffs.mean())
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(diffs), size=(resamples, len(diffs)))
    means = diffs[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    centred = means - observed
    # a tolerance so that a resample equal to the observed difference counts despite float rounding
    p = float(np.mean(np.abs(centred) >= abs(observed) - 1e-12))
    return PairedTest(observed, float(low), float(high), p, len(common), resamples, seed)


__all__ = [
    "REDUCERS",
    "Z95",
    "Estimate",
    "PairedTest",
    "mean",
    "paired_bootstrap",
    "pass_at_k",
    "pass_hat_k",
    "reduce_scores",
    "resolve_reducer",
    "stderr",
]
