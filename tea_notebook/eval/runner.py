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
from typing import TYPE_CHECKING, Any

from tea_notebook.errors import TeaError
from tea_notebook.eval.attempt import Attempt, Limits, UsageWatcher, run_task
from tea_notebook.eval.progress import Progress
from tea_notebook.eval.results import EvalResults, TaskResult
from tea_notebook.eval.scoring import extract_final_answer, resolve_scorer
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
    task_list = load_tasks(tasks)  # every problem of the file is raised here, before anything starts
    if limit is not None:
        task_list = task_list[:limit]
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
    }
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
        ids = {t.id for t in task_list}
        stored = {r["task_id"]: r for r in ws.db.eval_results(eval_name) if r["task_id"] in ids}
    except BaseException:
        await executor.close()
        raise
    todo = [
        (i, t)
        for i, t in enumerate(task_list)
        if t.id not in stored or (retry_errors and stored[t.id]["status"] == "error")
    ]
    results: dict[str, TaskResult] = {tid: TaskResult.from_row(r) for tid, r in stored.items()}
    skipped = len(task_list) - len(todo)

    mode = progress if isinstance(progress, str) else ("auto" if progress else "off")
    bar = Progress(eval_name, len(task_list), mode=mode, model=model_display)
    state: dict[str, Any] = {"stopped": None, "running": 0}

    def counts() -> dict[str, Any]:
        done = list(results.values())
        return {
            "done": len(done),
            "correct": sum(1 for r in done if r.correct),
            "errors": sum(1 for r in done if r.status == "error"),
            "cost": sum(r.cost + r.judge_cost for r in done),
            "running": state["running"],
        }

    def spent() -> float:  # what the evaluation's recorded tasks cost (earlier sessions too), and runs in flight
        return sum(r.cost + r.judge_cost for r in results.values()) + executor.running_cost()

    pending = list(todo)

    async def worker() -> None:
        while pending:
            if stop is not None and stop.is_set():
                state["stopped"] = state["stopped"] or "stopped by the user"
                return
            if cost_cap is not None and spent() >= cost_cap:
                state["stopped"] = (
                    f"cost cap ${cost_cap:g} reached (${spent():.4f} spent); {len(pending)} task(s) not started"
                )
                bar.update(**counts(), note=state["stopped"], force=True)
                return
            position, task = pending.pop(0)
            state["running"] += 1
            try:
                attempt = await executor.run(task)
            except Exception as exc:  # noqa: BLE001 - the harness failing on one task is that task's error
                attempt = Attempt(task.id, run_status="error", error=f"could not run it: {type(exc).__name__}: {exc}")
            finally:
                state["running"] -= 1
            result = await _score(task, position, attempt, score, final_answer)
            previous = stored.get(task.id)
            if previous is not None:
                result.attempts = int(previous.get("attempts") or 1) + 1
            ws.db.put_eval_result(eval_name, task.id, position, result.status, result.correct, result.to_row())
            results[task.id] = result
            bar.update(**counts())

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
    ordered = [results[t.id] for t in task_list if t.id in results]
    return EvalResults(
        eval_name,
        ordered,
        workspace=ws,
        total=len(task_list),
        stopped=state["stopped"],
        config=config,
        skipped=skipped,
    )


async def _score(task: Task, position: int, attempt: Attempt, score: Any, final_answer: bool) -> TaskResult:
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
SAME_SETUP = ("agent", "model", "scorer", "prompt", "final_answer")


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
    from tea_notebook._sync import submit

    stop = options.pop("stop", None) or threading.Event()
    future = submit(aevaluate(ws, agent, tasks, stop=stop, **options))
    try:
        return future.result()
    except KeyboardInterrupt:
        stop.set()
        return future.result(timeout=60)


def load(ws: "Workspace", name: str) -> EvalResults:
    """The stored results of evaluation ``name``."""
    return EvalResults.load(ws, name)


__all__ = ["ENGINES", "LocalExecutor", "aevaluate", "evaluate", "load", "resolve_agent"]
