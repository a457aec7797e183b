"""How many tasks × epochs an evaluation needs to see a gain: the power of a paired t-test over tasks,
and a planner that reads the spread from a pilot evaluation.

    plan = plan_sample_size(pilot, effect=0.05, power=0.8, alpha=0.05)
    plan                      # tasks needed at 1, 2, 3, 5, 10 epochs for a 5-point gain
    plan.tasks_needed(3)      # at 3 epochs
    plan.enough(tasks=20, epochs=3)

The comparison planned is the paired one the evaluation tools make: two configurations on the same
tasks, the per-task difference of their mean scores tested with Student's t over tasks. A task's
difference has variance ``σ²_between + σ²_within / k`` with k epochs: the pilot gives the spread of
tasks' scores (between) and, when it ran several epochs, the spread of a task's samples (within).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tea_notebook.errors import TeaError
from tea_notebook.eval.distributions import noncentral_t_sf, normal_quantile, t_quantile

#: the epochs the plan shows tasks for (and the pilot's own, when it is not among them)
PLAN_EPOCHS = (1, 2, 3, 5, 10)
#: past this many tasks the planner says the gain is out of reach rather than searching on
MAX_TASKS = 1_000_000


def t_test_power(tasks: int, effect: float, sd: float, alpha: float = 0.05) -> float:
    """The power of a two-sided one-sample (paired) t-test over ``tasks`` units to detect a mean
    ``effect`` when the units' standard deviation is ``sd``: with df = n − 1, noncentrality
    ``δ = effect / sd · √n`` and ``c = t_{1−α/2, df}``, power = ``P(T_δ > c) + P(T_δ < −c)`` for the
    noncentral t ``T_δ`` (as statsmodels' ``TTestPower``)."""
    if tasks < 2:
        raise TeaError(f"a t-test needs at least 2 tasks, not {tasks}")
    if sd <= 0:
        raise TeaError(f"the standard deviation must be positive, not {sd}")
    _check_level("alpha", alpha)
    df = tasks - 1
    delta = effect / sd * math.sqrt(tasks)
    c = t_quantile(1 - alpha / 2, df)
    # P(T_δ < −c) = P(T_{−δ} > c)
    return min(1.0, noncentral_t_sf(c, df, delta) + noncentral_t_sf(c, df, -delta))


def tasks_for_power(effect: float, sd: float, power: float = 0.8, alpha: float = 0.05) -> int:
    """The fewest tasks (at least 2) whose paired t-test has ``power`` to detect ``effect`` when a
    task's difference has standard deviation ``sd`` (:func:`t_test_power`; a binary search started
    from the normal approximation ``n ≈ ((z_{1−α/2} + z_{power}) · sd / effect)²``)."""
    if effect == 0:
        raise TeaError("the effect to detect must not be 0")
    _check_level("power", power)
    _check_level("alpha", alpha)
    guess = ((normal_quantile(1 - alpha / 2) + normal_quantile(power)) * sd / abs(effect)) ** 2
    if guess > MAX_TASKS:
        raise TeaError(
            f"detecting {effect:+g} with a per-task spread of {sd:.3g} needs about {guess:,.0f} tasks: out of reach"
        )
    low, high = 2, max(4, int(guess) + 4)
    while t_test_power(high, effect, sd, alpha) < power:
        low, high = high, high * 2
    if t_test_power(low, effect, sd, alpha) >= power:
        return low
    while high - low > 1:  # power(low) < target ≤ power(high)
        middle = (low + high) // 2
        if t_test_power(middle, effect, sd, alpha) >= power:
            high = middle
        else:
            low = middle
    return high


@dataclass(frozen=True)
class PlanRow:
    """Tasks needed at ``epochs`` samples per task; ``sd`` is a task's difference's spread there."""

    epochs: int
    tasks: int
    sd: float

    @property
    def samples(self) -> int:
        """Runs of each configuration: tasks × epochs."""
        return self.tasks * self.epochs


@dataclass(frozen=True)
class SamplePlan:
    """What it takes to detect a gain of ``effect`` (a difference of mean scores, 0.05 = 5 points)
    with ``power`` at two-sided level ``alpha``: one :class:`PlanRow` per number of epochs. The
    spreads come from a pilot of ``pilot_tasks`` tasks at ``pilot_epochs`` epochs; ``notes`` say what
    had to be assumed."""

    effect: float
    power: float
    alpha: float
    sd_between: float
    sd_within: float | None
    paired: bool
    pilot_tasks: int
    pilot_epochs: int
    rows: tuple[PlanRow, ...]
    notes: tuple[str, ...] = ()

    def tasks_needed(self, epochs: int = 1) -> int:
        """Tasks needed at ``epochs`` samples per task."""
        for row in self.rows:
            if row.epochs == epochs:
                return row.tasks
        return tasks_for_power(self.effect, self._sd(epochs), self.power, self.alpha)

    def power_at(self, tasks: int, epochs: int = 1) -> float:
        """The power of ``tasks`` tasks at ``epochs`` epochs to detect the planned effect."""
        return t_test_power(tasks, self.effect, self._sd(epochs), self.alpha)

    def enough(self, tasks: int, epochs: int = 1) -> bool:
        """Whether ``tasks`` tasks at ``epochs`` epochs reach the planned power."""
        return tasks >= 2 and self.power_at(tasks, epochs) >= self.power

    def _sd(self, epochs: int) -> float:
        if epochs < 1:
            raise TeaError(f"epochs must be at least 1, not {epochs}")
        within = self.sd_within or 0.0
        return math.sqrt(self.sd_between**2 + within**2 / epochs)

    def _headline(self) -> str:
        what = "paired with the baseline pilot" if self.paired else "against a configuration like the pilot"
        return (
            f"to see a gain of {self.effect * 100:+.1f} points with {self.power:.0%} power "
            f"(two-sided alpha {self.alpha:g}, {what}; pilot: {self.pilot_tasks} tasks × {self.pilot_epochs} epochs)"
        )

    def __str__(self) -> str:
        lines = [self._headline()]
        lines += [
            f"  {row.epochs:>2} epoch{'s' if row.epochs > 1 else ' '}: {row.tasks:>6} tasks "
            f"({row.samples} runs per configuration, sd {row.sd:.3f})"
            for row in self.rows
        ]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><td>{r.epochs}</td><td>{r.tasks}</td><td>{r.samples}</td><td>{r.sd:.3f}</td></tr>" for r in self.rows
        )
        notes = "".join(f"<div style='font-size:85%;color:#57606a'>{html.escape(n)}</div>" for n in self.notes)
        return (
            f"<div class='tea-sample-plan'><b>{html.escape(self._headline())}</b><table><thead><tr><th>epochs</th>"
            f"<th>tasks</th><th>runs per configuration</th><th>sd of a task's difference</th></tr></thead>"
            f"<tbody>{body}</tbody></table>{notes}</div>"
        )


def plan_sample_size(
    pilot: Any,
    *,
    effect: float = 0.05,
    power: float = 0.8,
    alpha: float = 0.05,
    baseline: Any = None,
    score: str = "correct",
    epochs: Sequence[int] = PLAN_EPOCHS,
) -> SamplePlan:
    """Tasks × epochs needed to detect a gain of ``effect`` with ``power`` at level ``alpha``, from a
    pilot's spread (``pilot``: evaluation results, or a mapping task → its samples' scores).

    With ``baseline`` (a second pilot on the same tasks) the spread is that of the per-task
    differences: ``σ²_d = var(d̄) − mean(s²_a/k_a + s²_b/k_b)`` between tasks plus ``(s²_a + s²_b)/k``
    within, s² the pooled variance of a task's samples. Without one, the other configuration is
    assumed to spread like the pilot and independently of it: twice the pilot's variances (a
    conservative plan: configurations on the same tasks are usually positively correlated).
    Tasks per row come from :func:`tasks_for_power`."""
    if effect == 0:
        raise TeaError("the effect to detect must not be 0 (0.05 is a 5-point gain)")
    if abs(effect) > 1:
        raise TeaError(f"the effect is a difference of mean scores (0.05 = 5 points), not {effect}")
    _check_level("power", power)
    _check_level("alpha", alpha)
    wanted = sorted({int(k) for k in epochs})
    if not wanted or wanted[0] < 1:
        raise TeaError(f"epochs to plan for are whole numbers of at least 1, not {list(epochs)}")
    samples = _samples_of(pilot, score, "pilot")
    notes: list[str] = []
    if baseline is None:
        between, within, k = _components(samples)
        between, within = 2 * between, None if within is None else 2 * within
        tasks = len(samples)
        notes.append(
            "no baseline pilot: the other configuration is assumed to spread like this one and independently "
            "of it (twice the variance); pass baseline= for the paired spread"
        )
    else:
        other = _samples_of(baseline, score, "baseline")
        common = [t for t in samples if t in other]
        if len(common) < 2:
            raise TeaError(f"the pilot and the baseline share {len(common)} scored tasks; a paired plan needs 2")
        a_between, a_within, ka = _components({t: samples[t] for t in common})
        b_between, b_within, kb = _components({t: other[t] for t in common})
        diffs = [_mean(samples[t]) - _mean(other[t]) for t in common]
        noise = sum((a_within or 0.0) / len(samples[t]) + (b_within or 0.0) / len(other[t]) for t in common) / len(
            common
        )
        between = max(0.0, _variance(diffs) - noise)
        within = None if a_within is None or b_within is None else a_within + b_within
        tasks, k = len(common), max(ka, kb)
    if within is None:
        notes.append(
            "the pilot has one sample per task: the spread within a task is unknown and taken as part of the "
            "spread between tasks, so more epochs do not lower the tasks needed here (run the pilot with epochs=2+)"
        )
    if between + (within or 0.0) <= 0:
        raise TeaError(
            "the pilot's scores do not vary (every task scored alike), so it tells nothing about the spread; "
            "run the pilot on more tasks or with a configuration that sometimes fails"
        )
    if tasks < 5:
        notes.append(f"the pilot has only {tasks} tasks: its spread, and so this plan, is itself uncertain")
    sd_between, sd_within = math.sqrt(between), None if within is None else math.sqrt(within)
    if k not in wanted:
        wanted = sorted({*wanted, k})
    rows = []
    for epochs_here in wanted:
        sd = math.sqrt(between + (within or 0.0) / epochs_here)
        rows.append(PlanRow(epochs_here, tasks_for_power(effect, sd, power, alpha), sd))
    return SamplePlan(
        effect, power, alpha, sd_between, sd_within, baseline is not None, tasks, k, tuple(rows), tuple(notes)
    )


def _samples_of(source: Any, score: str, what: str) -> dict[str, list[float]]:
    if hasattr(source, "samples") and callable(source.samples):
        raw = source.samples(score)
    elif isinstance(source, Mapping):
        raw = source
    else:
        raise TeaError(
            f"the {what} is evaluation results or a mapping task → sample scores, not {type(source).__name__}"
        )
    out: dict[str, list[float]] = {}
    for task, values in raw.items():
        if isinstance(values, (int, float)):
            values = [values]
        try:
            scores = [float(v) for v in values]
        except (TypeError, ValueError):
            raise TeaError(f"the {what}'s task {task!r} has scores that are not numbers: {values!r}") from None
        if scores:
            out[str(task)] = scores
    if len(out) < 2:
        raise TeaError(f"the {what} needs at least 2 tasks with scored samples, it has {len(out)}")
    return out


def _components(samples: Mapping[str, list[float]]) -> tuple[float, float | None, int]:
    """``(σ²_between, σ²_within or None, typical epochs)``: the pooled within-task variance
    ``Σ Σ (y − ȳ_task)² / Σ (k_task − 1)`` and the variance of task means less its share ``σ²_w·mean(1/k)``."""
    sizes = [len(v) for v in samples.values()]
    dof = sum(k - 1 for k in sizes)
    within = None
    if dof > 0:
        within = sum(sum((y - _mean(v)) ** 2 for y in v) for v in samples.values()) / dof
    task_means = [_mean(v) for v in samples.values()]
    share = (within or 0.0) * sum(1 / k for k in sizes) / len(sizes)
    return max(0.0, _variance(task_means) - share), within, max(set(sizes), key=sizes.count)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _variance(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    m = _mean(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - 1)


def _check_level(name: str, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise TeaError(f"{name} is a probability between 0 and 1, not {value}")


__all__ = ["PLAN_EPOCHS", "PlanRow", "SamplePlan", "plan_sample_size", "t_test_power", "tasks_for_power"]
