"""An evaluation's plan: :func:`aevaluate`'s options checked and resolved before anything runs.

Every problem (a bad limit, an unreadable task file, an unknown scorer or reducer, a resumed name
with another setup) is raised here, before a sample runs or a row is written. The plan's
``config`` is what the evaluation stores and what its results report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tea_notebook.errors import TeaError
from tea_notebook.eval.attempt import Limits
from tea_notebook.eval.checks import Check, resolve_checks
from tea_notebook.eval.results import sample_key
from tea_notebook.eval.scoring import resolve_scorer
from tea_notebook.eval.stats import resolve_reducer
from tea_notebook.eval.tasks import Task, fingerprint, load_tasks

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost

ENGINES = ("local", "ray")
#: what makes two evaluations' results comparable: resuming under a name must not change these
SAME_SETUP = ("agent", "model", "scorer", "prompt", "final_answer", "checks")


@dataclass
class EvalPlan:
    """What an evaluation runs, how it scores and when it stops (see :func:`aevaluate` for the options)."""

    name: str
    runner: Any
    tasks: list[Task]
    config: dict[str, Any]
    score: Any
    checks: list[Check]
    limits: Limits
    model: str | None = None
    model_display: str = ""
    prompt: str = "{question}"
    final_answer: bool = True
    engine: str = "local"
    address: str | None = None
    concurrency: int = 1
    epochs: int = 1
    cost_cap: float | None = None
    retry_errors: bool = False
    retries: int = 3
    backoff: float = 1.0
    backoff_cap: float = 30.0
    fail_on_error: Any = None
    error_budget: float | int | None = None
    inspect_log: str | None = None
    keys: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # epoch by epoch: stopped part-way, every task has its first samples before any has its last
        self.keys = list(dict.fromkeys(sample_key(t.id, e) for e in range(1, self.epochs + 1) for t in self.tasks))

    @property
    def unit(self) -> str:
        """What the progress notes count: tasks, or samples when each task runs more than once."""
        return "task(s)" if self.epochs == 1 else "sample(s)"

    def failure_budget(self) -> float | int | None:
        """How many provider failures stop the evaluation (None: never)."""
        budget = self.error_budget
        if budget is None or isinstance(budget, int):
            return budget
        return budget * len(self.keys)


def plan_evaluation(
    ws: "RunHost",
    agent: Any,
    tasks: Any,
    *,
    name: str | None,
    scorer: Any,
    model: str | None,
    concurrency: int,
    timeout: float | None,
    max_steps: int | None,
    max_tokens: int | None,
    cost_cap: float | None,
    retry_errors: bool,
    limit: int | None,
    engine: str,
    address: str | None,
    prompt: str,
    final_answer: bool,
    epochs: int,
    reducer: Any,
    checks: Any,
    retries: int,
    backoff: float,
    backoff_cap: float,
    fail_on_error: float | int | bool | None,
    member_of: tuple[str, str] | None,
    inspect_log: str | None,
) -> EvalPlan:
    """The options checked (TeaError for the first problem) and resolved: the tasks loaded, the
    agent, scorer, reducer and checks found, and the evaluation's stored configuration."""
    _check_numbers(engine, concurrency, timeout, max_steps, max_tokens, cost_cap, epochs, retries, backoff, backoff_cap)
    error_budget = _error_budget(fail_on_error)
    if inspect_log is not None:
        from tea_notebook.eval.inspect_log import check_log_path, require_inspect

        require_inspect()
        check_log_path(inspect_log)
    reducer_name, _ = resolve_reducer(reducer)
    check_list = resolve_checks(checks)
    task_list = load_tasks(tasks)  # every problem of the file is raised here, before anything starts
    if limit is not None:
        task_list = task_list[:limit]
    _check_sample_keys(task_list, epochs)
    runner = resolve_agent(ws, agent)
    score = resolve_scorer(scorer)
    model_name, model_display = _model_label(runner, model)
    agent_name = getattr(runner, "name", type(runner).__name__)
    eval_name = name or f"{agent_name}:{fingerprint(task_list)[:8]}"
    config = {
        "agent": agent_name,
        "kind": getattr(runner, "kind", ""),
        "model": model_name,
        "model_display": model_display,
        "scorer": score.described,
        "engine": engine,
        "concurrency": concurrency,
        "timeout": timeout,
        "max_steps": max_steps,
        "max_tokens": max_tokens,
        "cost_cap": cost_cap,
        "prompt": prompt,
        "final_answer": final_answer,
        "tasks": len(task_list),
        "fingerprint": fingerprint(task_list),
        "source": str(tasks) if not isinstance(tasks, list) else "(a list)",
        "epochs": epochs,
        "reducer": reducer_name,
        "checks": [c.describe() for c in check_list],
        "retries": retries,
        "fail_on_error": fail_on_error,
    }
    if member_of is not None:
        config["set"], config["set_label"] = member_of
    _check_same_setup(ws, eval_name, config)
    return EvalPlan(
        name=eval_name,
        runner=runner,
        tasks=task_list,
        config=config,
        score=score,
        checks=check_list,
        limits=Limits(timeout, max_steps, max_tokens),
        model=model,
        model_display=model_display,
        prompt=prompt,
        final_answer=final_answer,
        engine=engine,
        address=address,
        concurrency=concurrency,
        epochs=epochs,
        cost_cap=cost_cap,
        retry_errors=retry_errors,
        retries=retries,
        backoff=backoff,
        backoff_cap=backoff_cap,
        fail_on_error=fail_on_error,
        error_budget=error_budget,
        inspect_log=inspect_log,
    )


def resolve_agent(ws: "RunHost", agent: Any) -> Any:
    """The agent to evaluate: an object with an async ``run(task, files, *, context=...)``, or a name:
    a registered agent, a kind's shortcut (``orchestra``, ``researcher``...) or a new plain agent, as
    ``%%agent NAME`` builds them (:func:`tea_notebook.agents.kinds.resolve`)."""
    if not isinstance(agent, str):
        if not callable(getattr(agent, "run", None)):
            raise TeaError(f"{type(agent).__name__} has no run(task, files, context=...) to evaluate")
        return agent
    from tea_notebook.agents.kinds import resolve

    return resolve(ws, agent, instead="evaluate a planner that delegates to it")


def _check_numbers(
    engine: str,
    concurrency: int,
    timeout: float | None,
    max_steps: int | None,
    max_tokens: int | None,
    cost_cap: float | None,
    epochs: int,
    retries: int,
    backoff: float,
    backoff_cap: float,
) -> None:
    """The engine and every number option checked, in the order a person reads them."""
    if engine not in ENGINES:
        raise TeaError(f"unknown engine {engine!r}; use {' or '.join(ENGINES)}")
    if concurrency < 1:
        raise TeaError("concurrency must be at least 1")
    for label, value in (
        ("timeout", timeout),
        ("max_steps", max_steps),
        ("max_tokens", max_tokens),
        ("cost_cap", cost_cap),
    ):
        if value is not None and value <= 0:
            raise TeaError(f"{label} must be positive")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise TeaError(f"epochs must be a whole number of at least 1, not {epochs!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise TeaError(f"retries must be a whole number of at least 0, not {retries!r}")
    if backoff < 0 or backoff_cap < 0:
        raise TeaError("backoff and backoff_cap must not be negative")


def _model_label(agent: Any, model: str | None) -> tuple[str, str]:
    from tea_notebook.models.client import display_name

    resolved = getattr(agent, "resolved_model", None)
    name = resolved(model)[0] if callable(resolved) else (model or "")
    return name, display_name(name) if name else ""


def _error_budget(value: Any) -> float | int | None:
    """``fail_on_error`` checked: None / False (never stop), True (the first failure), a count of
    at least 1, or a proportion strictly between 0 and 1."""
    if value is None or value is False:
        return None
    if value is True:
        return 1
    if isinstance(value, int) and value >= 1:
        return value
    if isinstance(value, float) and 0 < value < 1:
        return value
    raise TeaError(
        f"fail_on_error must be a count of at least 1 (int), a proportion between 0 and 1 (float), True or None; "
        f"not {value!r}"
    )


def _check_sample_keys(tasks: list[Task], epochs: int) -> None:
    """With epochs, sample keys are ``task#epoch``: a task whose id looks like another's later epoch
    would share its row."""
    if epochs == 1:
        return
    ids = {t.id for t in tasks}
    for t in tasks:
        for e in range(2, epochs + 1):
            if sample_key(t.id, e) in ids:
                raise TeaError(
                    f"task id {sample_key(t.id, e)!r} is also the key of task {t.id!r}'s epoch {e}: rename it"
                )


def _check_same_setup(ws: "RunHost", name: str, config: dict[str, Any]) -> None:
    """Resuming ``name`` with another agent, model, scorer or prompt would mix two experiments in one
    table: refuse, naming what differs (limits, concurrency and the task set may change)."""
    stored = ws.db.evaluation(name)
    if stored is None:
        return
    before = stored["config"]
    changed = [k for k in SAME_SETUP if k in before and before.get(k) != config.get(k)]
    if changed:
        what = "; ".join(f"{k}: {before.get(k)!r} then, {config.get(k)!r} now" for k in changed)
        raise TeaError(
            f"evaluation {name!r} already has results with another setup ({what}): give this one another "
            f"name=, or delete the old one with ws.db.delete_evaluation({name!r})"
        )


__all__ = ["ENGINES", "SAME_SETUP", "EvalPlan", "plan_evaluation", "resolve_agent"]
