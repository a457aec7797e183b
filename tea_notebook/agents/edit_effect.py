"""``ws.edit_effect``: did an edit of a step cause the outcome? Measured with its spread.

One fork with an edit that ends well says little when the model is stochastic: the fork without the
edit might have ended well too. So the step is forked ``k`` times with the edit and ``k`` times without
it (an unedited fork of the same step, so both arms sample again from the same point on), each fork's
outcome is scored, and the difference of the arms is reported with a paired interval (epoch i of one
arm paired with epoch i of the other: Student-t on the k differences by default, the percentile
bootstrap on request) and, when the scores are right/wrong, McNemar's exact p-value.

The tool calls the forks make run ``live`` by default: the question is usually "does the edit help in
the world the agent acts in". ``replay="recorded"`` answers them from the original run instead, which
makes the arms identical up to the edit for tools that answer the same call the same way (what is left
is the model's own sampling): the pure effect of the edit on the model.
"""

from __future__ import annotations

import asyncio
import html
import inspect
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from tea_notebook.agents.forks import action_checker, check_policy, fork_run
from tea_notebook.errors import TeaError
from tea_notebook.eval.distributions import t_cdf
from tea_notebook.eval.progress import Progress
from tea_notebook.eval.scoring import resolve_scorer
from tea_notebook.eval.stats import Estimate, Interval, McNemarTest, mcnemar
from tea_notebook.runtime.agent import Agent
from tea_notebook.runtime.forking import Edit, ForkError, plan_fork
from tea_notebook.runtime.replay_policy import ReplayPolicy, govern

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost
    from tea_notebook.runtime.records import RunResult

#: how the interval of the paired difference is made
EFFECT_INTERVALS = ("t", "bootstrap")


@dataclass(frozen=True)
class EditEffect:
    """The effect of ``edit`` at ``step`` of run ``run_id``: ``k`` forks with it (``with_runs``, their
    ``with_scores``) and ``k`` without (``without_runs``, ``without_scores``), epoch i of each paired.

    ``difference`` is the mean of the paired differences (with − without), ``interval`` its two-sided
    interval at ``interval.level``; ``p_value`` is McNemar's exact p when every score is 0 or 1 (then
    ``mcnemar`` holds the 2×2 counts), else the paired t-test's; ``test`` names which."""

    run_id: str
    step: int
    edit: dict[str, Any]
    k: int
    scored_by: str
    replay: str
    with_runs: tuple[str, ...]
    without_runs: tuple[str, ...]
    with_scores: tuple[float, ...]
    without_scores: tuple[float, ...]
    difference: float
    interval: Interval
    p_value: float
    test: str
    mcnemar: McNemarTest | None = field(default=None, repr=False)

    @property
    def with_mean(self) -> float:
        """The mean score of the forks with the edit (their success rate for right/wrong scores)."""
        return sum(self.with_scores) / self.k

    @property
    def without_mean(self) -> float:
        """The mean score of the forks without the edit."""
        return sum(self.without_scores) / self.k

    @property
    def significant(self) -> bool:
        """True when the interval excludes zero."""
        return self.interval.low > 0 or self.interval.high < 0

    def verdict(self) -> str:
        """One sentence: what the interval says about the edit."""
        if self.interval.low > 0:
            return "the edit helps: the interval lies above zero"
        if self.interval.high < 0:
            return "the edit hurts: the interval lies below zero"
        return "no effect shown: the interval includes zero (more epochs narrow it)"

    def text(self) -> str:
        """The report as plain text."""
        edit = ", ".join(f"{key}={str(value)[:60]!r}" for key, value in self.edit.items())
        lines = [
            f"Effect of an edit at step {self.step} of run {self.run_id} ({edit}); "
            f"k={self.k} epochs per arm, scored by {self.scored_by}, tools {self.replay}",
            f"  with the edit:    {self.with_mean:.3f}  runs {', '.join(self.with_runs)}",
            f"  without the edit: {self.without_mean:.3f}  runs {', '.join(self.without_runs)}",
            f"  difference {self.difference:+.3f}, {self.interval}",
            f"  {self.test}: p = {self.p_value:.3f}" + (f" ({self._counts()})" if self.mcnemar else ""),
            f"  {self.verdict()}",
        ]
        return "\n".join(lines)

    def _counts(self) -> str:
        m = self.mcnemar
        assert m is not None
        return (
            f"only with the edit right in {m.a_only} pairs, only without in {m.b_only}, "
            f"both right {m.both}, both wrong {m.neither}"
        )

    def __str__(self) -> str:
        return self.text()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        esc = html.escape
        edit = esc(", ".join(f"{key}={str(value)[:80]!r}" for key, value in self.edit.items()))

        def arm(label: str, mean: float, runs: tuple[str, ...], scores: tuple[float, ...]) -> str:
            cells = " ".join(
                f"<code title='score {s:g}' style='color:{'#1a7f37' if s >= 0.5 else '#cf222e'}'>{esc(r)}</code>"
                for r, s in zip(runs, scores, strict=True)
            )
            return f"<tr><td>{label}</td><td>{mean:.3f}</td><td>{cells}</td></tr>"

        tested = f"{esc(self.test)}: p = {self.p_value:.3f}"
        if self.mcnemar:
            tested += f" ({esc(self._counts())})"
        return (
            "<div class='tea-edit-effect'>"
            f"<b>Effect of an edit</b> at step {self.step} of <code>{esc(self.run_id)}</code> ({edit}); "
            f"k={self.k} per arm, scored by {esc(self.scored_by)}, tools {esc(self.replay)}"
            "<table><tr><th>arm</th><th>mean score</th><th>runs (green: scored right)</th></tr>"
            + arm("with the edit", self.with_mean, self.with_runs, self.with_scores)
            + arm("without", self.without_mean, self.without_runs, self.without_scores)
            + "</table>"
            f"<div>difference <b>{self.difference:+.3f}</b>, {esc(str(self.interval))} {self._svg()}</div>"
            f"<div>{tested}</div><div><i>{esc(self.verdict())}</i></div></div>"
        )

    def _svg(self) -> str:
        """The interval on a −1 … +1 axis (scores beyond that range are clipped), zero marked."""

        def x(v: float) -> float:
            return 10 + 100 * (max(-1.0, min(1.0, v)) + 1)

        low, high, mid = x(self.interval.low), x(self.interval.high), x(self.difference)
        return (
            "<svg width='220' height='16' style='vertical-align:middle'>"
            "<line x1='10' y1='8' x2='210' y2='8' stroke='#d0d7de'/>"
            "<line x1='110' y1='2' x2='110' y2='14' stroke='#57606a'/>"
            f"<line x1='{low:.1f}' y1='8' x2='{high:.1f}' y2='8' stroke='#0969da' stroke-width='3'/>"
            f"<circle cx='{mid:.1f}' cy='8' r='3.5' fill='#0969da'/></svg>"
        )


def _check_arguments(k: Any, concurrency: Any, level: Any, interval: str, edit: Any) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise TeaError(f"k, the epochs per arm, must be 2 or more (an interval needs two pairs), not {k!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise TeaError(f"concurrency is how many forks run at once (1 or more), not {concurrency!r}")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise TeaError(f"level is between 0 and 1 (0.95 for a 95% interval), not {level!r}")
    if interval not in EFFECT_INTERVALS:
        raise TeaError(f"unknown interval {interval!r}; use {' or '.join(EFFECT_INTERVALS)}")
    if edit is None:
        raise TeaError("an effect needs an edit, such as {'observation': 'new text'} (ws.fork without one forks as is)")


def _outcome_scorer(score: Any, scorer: Any, expected: Any) -> tuple[str, Callable[["RunResult"], Any]]:
    """What turns a finished fork into a number, and its name."""
    if score is not None and scorer is not None:
        raise TeaError("give score= (a function of the run) or scorer= with expected= (an evaluation scorer), not both")
    if scorer is not None:
        if expected is None:
            raise TeaError("an evaluation scorer compares the answer with expected=: give the expected answer")
        resolved = resolve_scorer(scorer)

        async def by_scorer(result: "RunResult") -> float:
            verdict = await resolved(result.answer or "", str(expected))
            return 1.0 if verdict.correct else 0.0

        return resolved.name, by_scorer
    if expected is not None:
        raise TeaError("expected= is compared by an evaluation scorer: give scorer= too (e.g. scorer='exact')")
    if score is None:
        return "status (success = 1)", lambda result: 1.0 if result.status == "success" else 0.0
    if not callable(score):
        raise TeaError(f"score is a function of the finished run returning a number, not {type(score).__name__}")
    return getattr(score, "__name__", type(score).__name__), score


async def _number(fn: Callable[["RunResult"], Any], result: "RunResult", name: str) -> float:
    value = fn(result)
    if inspect.isawaitable(value):
        value = await value
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TeaError(f"score {name} returned {value!r} for run {result.run_id}, not a number")
    return float(value)


def _control_step(edit: Edit, step: int) -> int:
    """Where the fork without the edit starts so that both arms sample again from the same point: a
    prompt edit has the model choose again at ``step`` itself, so its control forks at ``step − 1``
    (the model asked at ``step`` with the original prompt); the other edits keep what the model chose
    at ``step`` and go on live after it, as the unedited fork at ``step`` does."""
    return step - 1 if edit.kind == "context" else step


def _plan_check(ws: "RunHost", row: dict, step: int, change: Edit, policy: ReplayPolicy | None) -> bool:
    """Plan the edited fork of an agent-loop run (True; ForkError when it cannot be made, nothing
    written), or False for the kinds whose fork is only checked by making it."""
    from tea_notebook.agents.kinds import build
    from tea_notebook.runtime.trajectory import fork_unit

    if row["parent_id"]:
        return False
    events = ws.events.events(row["id"], nested=False)
    if fork_unit(events) != "steps":
        return False
    runner = build(ws, row["agent"])
    if not isinstance(runner, Agent):
        return False
    plan = plan_fork(events, row["id"], step, change, check_action=action_checker(ws, runner))
    check_policy(ws, policy, [runner], [])
    govern(plan, policy, events)
    return True


async def edit_effect(
    ws: "RunHost",
    run_id: str,
    step: int,
    edit: Any,
    *,
    k: int = 8,
    score: Callable[["RunResult"], Any] | None = None,
    scorer: Any = None,
    expected: Any = None,
    level: float = 0.95,
    interval: str = "t",
    concurrency: int = 4,
    replay: "str | dict[str, str] | None" = "live",
    model: str | None = None,
    progress: str | bool = True,
    seed: int = 0,
) -> EditEffect:
    """See :meth:`tea_notebook.workspace.Workspace.edit_effect`."""
    _check_arguments(k, concurrency, level, interval, edit)
    scored_by, outcome = _outcome_scorer(score, scorer, expected)
    row = ws.db.run_row(run_id)
    if row is None:
        raise ForkError(f"no run {run_id!r} in {ws.path}")
    if row["status"] == "running":
        raise ForkError(f"run {row['id']} is still running: wait for it to end (or stop it) before measuring an edit")
    if isinstance(step, bool) or not isinstance(step, int):
        raise ForkError(f"step is the number of the step to edit, not {step!r}")
    change = Edit.of(edit)
    assert change is not None
    policy = ReplayPolicy.of(replay)
    planned = _plan_check(ws, row, step, change, policy)
    control = _control_step(change, step)
    edit_record = dict(edit) if isinstance(edit, dict) else {change.kind: change.value}

    async def fork(edited: bool) -> "RunResult":
        return await fork_run(
            ws,
            row["id"],
            step if edited else control,
            edit=edit if edited else None,
            model=model,
            raise_on_error=False,
            replay=replay,
        )

    mode = progress if isinstance(progress, str) else ("auto" if progress else "off")
    bar = Progress(f"effect of the edit at step {step}", 2 * k, mode=mode)
    results: dict[tuple[bool, int], "RunResult"] = {}
    scores: dict[tuple[bool, int], float] = {}
    gate = asyncio.Semaphore(concurrency)
    running = 0

    def show(force: bool = False) -> None:
        done = list(results.values())
        bar.update(
            done=len(done),
            correct=sum(1 for v in scores.values() if v >= 0.5),
            errors=sum(1 for r in done if r.status == "error"),
            cost=sum(r.cost for r in done),
            running=running,
            force=force,
        )

    async def one(edited: bool, epoch: int) -> None:
        nonlocal running
        async with gate:
            running += 1
            try:
                result = await fork(edited)
            finally:
                running -= 1
            scores[(edited, epoch)] = await _number(outcome, result, scored_by)
            results[(edited, epoch)] = result
            show()

    pending = [(edited, epoch) for epoch in range(1, k + 1) for edited in (True, False)]
    try:
        if not planned:  # a kind checked only by forking: the first edited fork alone, before the rest
            await one(*pending.pop(0))
        outcome_of = await asyncio.gather(*(one(e, i) for e, i in pending), return_exceptions=True)
        for item in outcome_of:
            if isinstance(item, BaseException):
                raise item
    finally:
        show(force=True)
        bar.close()
    return summarize(
        row["id"],
        step,
        edit_record,
        [results[(True, i)].run_id for i in range(1, k + 1)],
        [results[(False, i)].run_id for i in range(1, k + 1)],
        [scores[(True, i)] for i in range(1, k + 1)],
        [scores[(False, i)] for i in range(1, k + 1)],
        scored_by=scored_by,
        replay=policy.text() if policy is not None else "live",
        level=level,
        interval=interval,
        seed=seed,
    )


def summarize(
    run_id: str,
    step: int,
    edit: dict[str, Any],
    with_runs: list[str],
    without_runs: list[str],
    with_scores: list[float],
    without_scores: list[float],
    *,
    scored_by: str = "status (success = 1)",
    replay: str = "live",
    level: float = 0.95,
    interval: str = "t",
    seed: int = 0,
) -> EditEffect:
    """The :class:`EditEffect` of paired scores (epoch i of ``with_scores`` with epoch i of
    ``without_scores``): the mean difference, its interval (``Estimate.interval`` of the k
    differences) and McNemar's exact p for right/wrong scores, else the paired t-test's
    ``2 · P(T > |mean / stderr|)`` with k − 1 df."""
    k = len(with_scores)
    if k != len(without_scores) or k < 2:
        raise TeaError(f"paired scores need two arms of the same length, 2 or more (got {k} and {len(without_scores)})")
    differences = [a - b for a, b in zip(with_scores, without_scores, strict=True)]
    estimate = Estimate.of(differences)
    band = estimate.interval(level, method=interval, seed=seed)
    binary = all(s in (0.0, 1.0) for s in (*with_scores, *without_scores))
    paired_mcnemar = None
    if binary:
        keys = [str(i) for i in range(1, k + 1)]
        right_with = dict(zip(keys, with_scores, strict=True))
        paired_mcnemar = mcnemar(right_with, dict(zip(keys, without_scores, strict=True)))
        p, test = paired_mcnemar.p_value, "McNemar exact"
    elif estimate.stderr == 0:
        p, test = (1.0 if estimate.mean == 0 else 0.0), "paired t-test"
    else:
        p, test = min(1.0, 2 * (1 - t_cdf(abs(estimate.mean / estimate.stderr), k - 1))), "paired t-test"
    return EditEffect(
        run_id,
        step,
        edit,
        k,
        scored_by,
        replay,
        tuple(with_runs),
        tuple(without_runs),
        tuple(float(s) for s in with_scores),
        tuple(float(s) for s in without_scores),
        estimate.mean,
        band,
        p,
        test,
        paired_mcnemar,
    )


__all__ = ["EFFECT_INTERVALS", "EditEffect", "edit_effect", "summarize"]
