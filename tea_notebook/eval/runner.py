"""The batch runner: an agent over a task set, scored, stored as each task ends, resumable.

:func:`aevaluate` (and its sync twin :func:`evaluate`) runs up to ``concurrency`` tasks at a time
on an engine — ``"local"``, an asyncio pool in this process, or ``"ray"``, tasks on a Ray cluster
(:mod:`tea_notebook.eval.ray_engine`) — and writes each task's result to the workspace's SQLite as
soon as it is scored. Running the same evaluation ``name`` again skips the tasks already done
(errored ones too, unless ``retry_errors``); a task's row is replaced, never added twice, so a killed
evaluation loses at most the tasks that were in flight.

A cost cap stops *starting* tasks once the evaluation (earlier sessions included) has spent it;
the result says so in ``stopped``. Tasks whose agent failed, timed out, went over budget, whose
worker died or whose scorer raised are recorded as errors with the reason; the evaluation goes on.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar

from tea_notebook.errors import TeaError
from tea_notebook.eval.attempt import Attempt, Limits, UsageWatcher, run_task
from tea_notebook.eval.checks import Check, resolve_checks
from tea_notebook.eval.failures import ProviderFailure, backoff_delay, provider_failure
from tea_notebook.eval.progress import Progress
from tea_notebook.eval.results import EvalResults, TaskResult, sample_key
from tea_notebook.eval.scoring import extract_final_answer, resolve_scorer
from tea_notebook.eval.stats import resolve_reducer
from tea_notebook.eval.tasks import Task, fingerprint, load_tasks

if TYPE_CHECKING:
    from tea_notebook.workspace import Workspace

ENGINES = ("local", "ray")


def resolve_agent(ws: "Workspace", agent: Any) -> Any:
    """The agent to evaluate: an object with an async ``run(task, files, *, context=...)``, or a name:
    a registered agent, a shortcut (``orchestra``, ``researcher``...) or a new plain agent, as
    ``%%agent NAME`` builds them."""
    if not isinstance(agent, str):
        if not callable(getattr(agent, "run", None)):
            raise TeaError(f"{type(agent).__name__} has no run(task, files, context=...) to evaluate")
        return agent
    from tea_notebook.agents.kinds import SHORTCUTS, build, make

    name, kind = agent, None
    if name not in ws.agents and name in SHORTCUTS:
        kind, name = SHORTCUTS[name]
    if name not in ws.agents:
        make(ws, kind or "agent", name)  # as %%agent NAME does: a new plain agent, or the shortcut's kind
    built = build(ws, name)
    if not callable(getattr(built, "run", None)):
        raise TeaError(f"agent {name!r} runs only as a sub-agent: evaluate a planner that delegates to it")
    return built


class LocalExecutor:
    """Runs each task in this process, on the running event loop, in the driver's workspace."""

    name = "local"

    def __init__(self, ws: "Workspace", agent: Any, *, limits: Limits, model: str | None, prompt: str):
        self.ws, self.agent, self.limits, self.model, self.prompt = ws, agent, limits, model, prompt
        self.watcher = UsageWatcher(ws)
        self.live: dict[str, Any] = {}

    def running_cost(self) -> float:
        """Dollars the runs in flight have spent so far."""
        return sum(slot.cost for slot in list(self.live.values()))

    async def run(self, task: Task) -> Attempt:
        """One task's attempt."""
        return await run_task(
            self.ws,
            self.agent,
            task,
            watcher=self.watcher,
            limits=self.limits,
            model=self.model,
            prompt=self.prompt,
            live=self.live,
        )

    async def close(self) -> None:
        """Stop following events."""
        self.watcher.close()


def _model_label(agent: Any, model: str | None) -> tuple[str, str]:
    from tea_notebook.models.client import display_name

    resolved = getattr(agent, "resolved_model", None)
    name = resolved(model)[0] if callable(resolved) else (model or "")
    return name, display_name(name) if name else ""


async def aevaluate(
    ws: "Workspace",
    agent: Any,
    tasks: Any,
    *,
    name: str | None = None,
    scorer: Any = "gaia",
    model: str | None = None,
    concurrency: int = 1,
    timeout: float | None = None,
    max_steps: int | None = None,
    max_tokens: int | None = None,
    cost_cap: float | None = None,
    retry_errors: bool = False,
    limit: int | None = None,
    engine: str = "local",
    address: str | None = None,
    prompt: str = "{question}",
    final_answer: bool = True,
    progress: str | bool = "auto",
    stop: threading.Event | None = None,
    epochs: int = 1,
    reducer: Any = "mean",
    checks: Any = None,
    retries: int = 3,
    backoff: float = 1.0,
    backoff_cap: float = 30.0,
    fail_on_error: float | int | bool | None = None,
    member_of: tuple[str, str] | None = None,
    inspect_log: str | None = None,
) -> EvalResults:
    """Evaluate ``agent`` on ``tasks`` (a path, see :func:`~tea_notebook.eval.tasks.load_tasks`, or a
    list) and return the :class:`EvalResults` of every task of the set that has a result.

    ``name``: the evaluation's name; running it again resumes (default: the agent's name and a hash
    of the tasks). ``model``: the model for this evaluation (default: the agent's own).
    ``scorer``: ``"gaia"`` (default), ``"exact"``, ``"contains"``, an :class:`LLMJudge` or a function.
    ``prompt``: the task text, ``{question}`` filled in (``GAIA_PROMPT`` asks for ``FINAL ANSWER:``).
    ``final_answer``: score only what follows ``FINAL ANSWER:`` when the answer has it.
    ``timeout`` (s), ``max_steps`` and ``max_tokens`` limit each task; ``cost_cap`` (USD) the evaluation.
    ``engine="ray"`` runs tasks on Ray (``address`` joins a cluster; default a local one).
    ``stop``: set it (from another thread) to stop cooperatively; tasks in flight are not recorded.
    ``progress``: ``"auto"`` (a bar in a notebook or a terminal), ``"notebook"``, ``"terminal"``,
    ``"lines"``, or False.

    ``epochs``: runs of each task (each its own stored run); the headline is the mean over tasks of
    each task's samples reduced by ``reducer`` (``mean``, ``max``, ``min``, ``median``, ``majority`` or
    a function of a list of scores), with its standard error; rerunning with more epochs runs only the
    new ones. ``checks``: trajectory scorers (:mod:`tea_notebook.eval.checks`), each one more named score.
    ``retries``: a sample whose run ended because the model provider failed (rate limit, 5xx, timeout,
    lost connection: :mod:`tea_notebook.eval.failures`) runs again up to this many times, after
    ``backoff · 2^(n-1)`` seconds (capped at ``backoff_cap``, with jitter); a wrong answer is never
    retried. A sample still failing is recorded as a provider failure, scored nowhere, run again on
    resume. ``fail_on_error``: stop cleanly once that many samples (an int) or that share of the
    set's samples (a float below 1) failed on the provider's side; what was done is kept.
    ``member_of``: ``(set name, label)`` when run as a configuration of an eval set (:mod:`.sets`).
    ``inspect_log``: also write the results as an Inspect AI log there (``.eval``; its path is checked
    before anything runs).
    """
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
    if engine == "ray":
        from tea_notebook.eval.ray_engine import RayExecutor

        executor: Any = RayExecutor(
            ws,
            runner,
            limits=Limits(timeout, max_steps, max_tokens),
            model=model,
            prompt=prompt,
            address=address,
            concurrency=concurrency,
        )
    else:
        executor = LocalExecutor(ws, runner, limits=Limits(timeout, max_steps, max_tokens), model=model, prompt=prompt)
    try:
        ws.db.put_evaluation(eval_name, config)
        keys = {sample_key(t.id, e) for t in task_list for e in range(1, epochs + 1)}
        stored = {r["task_id"]: r for r in ws.db.eval_results(eval_name) if r["task_id"] in keys}
    except BaseException:
        await executor.close()
        raise

    def wanted(key: str) -> bool:
        row = stored.get(key)
        return row is None or bool(row.get("infra_error")) or (retry_errors and row["status"] == "error")

    # epoch by epoch: stopped part-way, every task has its first samples before any has its last
    todo = [(i, t, e) for e in range(1, epochs + 1) for i, t in enumerate(task_list) if wanted(sample_key(t.id, e))]
    results: dict[str, TaskResult] = {key: TaskResult.from_row(r) for key, r in stored.items()}
    skipped = len(keys) - len(todo)

    mode = progress if isinstance(progress, str) else ("auto" if progress else "off")
    bar = Progress(eval_name, len(keys), mode=mode, model=model_display)
    state: dict[str, Any] = {"stopped": None, "running": 0, "failures": 0}
    budget = (
        None if error_budget is None else (error_budget if isinstance(error_budget, int) else error_budget * len(keys))
    )

    def counts() -> dict[str, Any]:
        done = list(results.values())
        return {
            "done": len(done),
            "correct": sum(1 for r in done if r.correct),
            "errors": sum(1 for r in done if r.status == "error"),
            "cost": sum(r.cost + r.judge_cost for r in done),
            "running": state["running"],
        }

    def spent() -> float:
        """What the recorded samples cost (earlier sessions too) and what the runs in flight will: each
        counted at the recorded samples' mean cost, or at what it has spent so far when that is more
        (a Ray worker's spending is known only when it returns; without this, a cap could be overshot by
        up to concurrency − 1 samples)."""
        recorded = sum(r.cost + r.judge_cost for r in results.values())
        expected = state["running"] * (recorded / len(results)) if results else 0.0
        return recorded + max(executor.running_cost(), expected)

    pending = list(todo)
    unit = "task(s)" if epochs == 1 else "sample(s)"

    async def attempt_once(task: Task) -> Attempt:
        state["running"] += 1
        try:
            return await executor.run(task)
        except Exception as exc:  # noqa: BLE001 - the harness failing on one task is that task's error
            return Attempt(task.id, run_status="error", error=f"could not run it: {type(exc).__name__}: {exc}")
        finally:
            state["running"] -= 1

    async def run_sample(task: Task) -> tuple[Attempt, ProviderFailure | None, list[Attempt]]:
        """The sample's attempt, retried while the provider fails transiently (within ``retries``)."""
        failed: list[Attempt] = []
        attempt = await attempt_once(task)
        failure = provider_failure(ws, attempt)
        while failure is not None and failure.transient and len(failed) < retries:
            if stop is not None and stop.is_set():
                break
            failed.append(attempt)
            await asyncio.sleep(backoff_delay(len(failed), backoff, backoff_cap))
            attempt = await attempt_once(task)
            failure = provider_failure(ws, attempt)
        return attempt, failure, failed

    async def worker() -> None:
        while pending:
            if state["stopped"]:
                return
            if stop is not None and stop.is_set():
                state["stopped"] = state["stopped"] or "stopped by the user"
                return
            if cost_cap is not None and spent() >= cost_cap:
                state["stopped"] = (
                    f"cost cap ${cost_cap:g} reached (${spent():.4f} spent); {len(pending)} {unit} not started"
                )
                bar.update(**counts(), note=state["stopped"], force=True)
                return
            position, task, epoch = pending.pop(0)
            attempt, failure, failed = await run_sample(task)
            result = await _score(ws, task, position, attempt, score, final_answer, [] if failure else check_list)
            result.epoch = epoch
            result.retries = len(failed)
            result.retried_runs = [a.run_id for a in failed if a.run_id]
            result.cost += sum(a.cost for a in failed)
            if failure is not None:
                result.infra_error, result.status, result.correct = True, "error", False
                tried = f" after {len(failed)} retr{'y' if len(failed) == 1 else 'ies'}" if failed else ""
                kind = "" if failure.transient else " (not retried: asking again would not help)"
                result.error = f"the model provider failed{tried}{kind}: {attempt.error}"
                state["failures"] += 1
            key = sample_key(task.id, epoch)
            previous = stored.get(key)
            if previous is not None:
                result.attempts = int(previous.get("attempts") or 1) + 1
            ws.db.put_eval_result(eval_name, key, position, result.status, result.correct, result.to_row())
            results[key] = result
            if budget is not None and state["failures"] >= budget and not state["stopped"]:
                state["stopped"] = (
                    f"the model provider failed on {state['failures']} sample(s) (fail_on_error={fail_on_error!r}): "
                    f"infrastructure is broken, {len(pending)} {unit} not started; rerun to resume"
                )
            bar.update(**counts(), note=state["stopped"])

    async def watch_stop(workers: list[asyncio.Task]) -> None:
        while not all(w.done() for w in workers):
            if stop is not None and stop.is_set():
                state["stopped"] = "stopped by the user; tasks in flight were not recorded"
                for w in workers:
                    w.cancel()
                return
            await asyncio.sleep(0.05)

    workers = [asyncio.ensure_future(worker()) for _ in range(min(concurrency, max(len(todo), 1)))]
    watcher = asyncio.ensure_future(watch_stop(workers))
    try:
        outcome = await asyncio.gather(*workers, return_exceptions=True)
        for item in outcome:
            if isinstance(item, BaseException) and not isinstance(item, asyncio.CancelledError):
                raise item
    except asyncio.CancelledError:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await executor.close()
        if pending and state["stopped"] is None and stop is not None and stop.is_set():
            state["stopped"] = "stopped by the user; tasks in flight were not recorded"
        bar.update(**counts(), note=state["stopped"] or "", force=True)
        bar.close()
    ordered = [results[key] for t in task_list for e in range(1, epochs + 1) if (key := sample_key(t.id, e)) in results]
    out = EvalResults(
        eval_name,
        ordered,
        workspace=ws,
        total=len(task_list),
        stopped=state["stopped"],
        config=config,
        skipped=skipped,
    )
    if inspect_log is not None:
        await asyncio.to_thread(out.to_inspect, inspect_log)
    return out


async def _score(
    ws: "Workspace", task: Task, position: int, attempt: Attempt, score: Any, final_answer: bool, checks: list[Check]
) -> TaskResult:
    """The attempt as a result: scored, or an error (of the run, or of the scorer) with its reason;
    then the trajectory checks, when there is a run to read."""
    result = await _score_answer(task, position, attempt, score, final_answer)
    result.scores["correct"] = 1.0 if result.correct else 0.0
    if not checks or not attempt.run_id:
        return result
    trajectory = ws.trajectory(attempt.run_id)
    for check in checks:
        try:
            outcome = await check(trajectory)
        except Exception as exc:  # noqa: BLE001 - a broken check is that sample's error, the evaluation goes on
            result.status, result.correct = "error", False
            result.error = f"the check {check.name} raised {type(exc).__name__}: {exc}"
            return result
        result.scores[check.name] = outcome.value
        result.judge_cost += outcome.cost
        if outcome.note:
            result.extra.setdefault("check_notes", {})[check.name] = outcome.note
    return result


async def _score_answer(task: Task, position: int, attempt: Attempt, score: Any, final_answer: bool) -> TaskResult:
    """The attempt as a result: scored, or an error (of the run, or of the scorer) with its reason."""
    answer = extract_final_answer(attempt.answer) if final_answer else attempt.answer.strip()
    result = TaskResult(
        task.id,
        position,
        "error",
        None,
        answer=answer,
        expected=task.answer,
        level=task.level,
        question=task.question,
        run_status=attempt.run_status,
        steps=attempt.steps,
        prompt_tokens=attempt.prompt_tokens,
        completion_tokens=attempt.completion_tokens,
        cost=attempt.cost,
        seconds=attempt.seconds,
        run_id=attempt.run_id,
        error=attempt.error,
        raw_answer=attempt.answer,
        model=attempt.model,
    )
    if attempt.error is not None:
        result.correct, result.answer = (
            False,
            "",
        )  # no answer to score: ``error`` says why, ``raw_answer`` keeps the text
        return result
    try:
        verdict = await score(answer, task.answer, task)
    except Exception as exc:  # noqa: BLE001 - a broken scorer is that task's error, the evaluation goes on
        result.correct = False
        result.error = f"the scorer {score.name} raised {type(exc).__name__}: {exc}"
        return result
    result.status, result.correct = "scored", verdict.correct
    result.judge_cost, result.scorer_note = verdict.cost, verdict.note
    return result


#: what makes two evaluations' results comparable: resuming under a name must not change these
SAME_SETUP = ("agent", "model", "scorer", "prompt", "final_answer", "checks")


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


def _check_same_setup(ws: "Workspace", name: str, config: dict[str, Any]) -> None:
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


def evaluate(ws: "Workspace", agent: Any, tasks: Any, **options: Any) -> EvalResults:
    """:func:`aevaluate` from synchronous code, also inside a running event loop (a notebook cell);
    a KeyboardInterrupt (the kernel's ■) stops it cooperatively and returns what was recorded."""
    stop = options.pop("stop", None)
    return run_stoppable(lambda event: aevaluate(ws, agent, tasks, stop=event, **options), stop)


T = TypeVar("T")


def run_stoppable(start: Callable[[threading.Event], Awaitable[T]], stop: threading.Event | None = None) -> T:
    """Run ``start(stop)`` on the background loop and wait for it from synchronous code (a notebook cell
    too); a KeyboardInterrupt (the kernel's ■) sets ``stop`` and waits for what was recorded."""
    from tea_notebook._sync import submit

    stop = stop or threading.Event()
    future = submit(start(stop))
    try:
        return future.result()
    except KeyboardInterrupt:
        stop.set()
        return future.result(timeout=60)


def load(ws: "Workspace", name: str) -> EvalResults:
    """The stored results of evaluation ``name``."""
    return EvalResults.load(ws, name)


__all__ = ["ENGINES", "LocalExecutor", "aevaluate", "evaluate", "load", "resolve_agent"]
