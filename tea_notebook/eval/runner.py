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

:func:`aevaluate` is four named steps: the options checked and resolved into an
:class:`~tea_notebook.eval.plan.EvalPlan` (nothing runs before every problem is raised), the store
read for what is left (:class:`~tea_notebook.eval.batch.Resume`), the samples run, scored and stored
(:class:`~tea_notebook.eval.batch.EvalBatch`), and the results reported (:func:`report`).
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar

from tea_notebook.eval.attempt import Attempt, Limits, UsageWatcher, run_task
from tea_notebook.eval.batch import EvalBatch, Resume
from tea_notebook.eval.plan import ENGINES, EvalPlan, plan_evaluation, resolve_agent
from tea_notebook.eval.results import EvalResults
from tea_notebook.eval.tasks import Task

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost


class LocalExecutor:
    """Runs each task in this process, on the running event loop, in the driver's workspace."""

    name = "local"

    def __init__(self, ws: "RunHost", agent: Any, *, limits: Limits, model: str | None, prompt: str):
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


async def aevaluate(
    ws: "RunHost",
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
    plan = plan_evaluation(
        ws,
        agent,
        tasks,
        name=name,
        scorer=scorer,
        model=model,
        concurrency=concurrency,
        timeout=timeout,
        max_steps=max_steps,
        max_tokens=max_tokens,
        cost_cap=cost_cap,
        retry_errors=retry_errors,
        limit=limit,
        engine=engine,
        address=address,
        prompt=prompt,
        final_answer=final_answer,
        epochs=epochs,
        reducer=reducer,
        checks=checks,
        retries=retries,
        backoff=backoff,
        backoff_cap=backoff_cap,
        fail_on_error=fail_on_error,
        member_of=member_of,
        inspect_log=inspect_log,
    )
    executor = make_executor(ws, plan)
    try:
        resume = Resume.read(ws, plan)
    except BaseException:
        await executor.close()
        raise
    batch = EvalBatch(ws, plan, executor, resume, stop=stop, progress=progress)
    await batch.run()
    return await report(ws, plan, batch)


def make_executor(ws: "RunHost", plan: EvalPlan) -> Any:
    """Where the plan's samples run: this process (``"local"``) or a Ray cluster (``"ray"``)."""
    if plan.engine == "ray":
        from tea_notebook.eval.ray_engine import RayExecutor

        return RayExecutor(
            ws,
            plan.runner,
            limits=plan.limits,
            model=plan.model,
            prompt=plan.prompt,
            address=plan.address,
            concurrency=plan.concurrency,
        )
    return LocalExecutor(ws, plan.runner, limits=plan.limits, model=plan.model, prompt=plan.prompt)


async def report(ws: "RunHost", plan: EvalPlan, batch: EvalBatch) -> EvalResults:
    """The evaluation's results (every sample of the set that has one), also as an Inspect AI log
    when the plan asks for one."""
    out = EvalResults(
        plan.name,
        batch.ordered(),
        workspace=ws,
        total=len(plan.tasks),
        stopped=batch.stopped,
        config=plan.config,
        skipped=batch.skipped,
    )
    if plan.inspect_log is not None:
        await asyncio.to_thread(out.to_inspect, plan.inspect_log)
    return out


def evaluate(ws: "RunHost", agent: Any, tasks: Any, **options: Any) -> EvalResults:
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


def load(ws: "RunHost", name: str) -> EvalResults:
    """The stored results of evaluation ``name``."""
    return EvalResults.load(ws, name)


__all__ = ["ENGINES", "LocalExecutor", "aevaluate", "evaluate", "load", "make_executor", "report", "resolve_agent"]
