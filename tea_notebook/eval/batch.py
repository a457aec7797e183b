"""An evaluation's run: the samples still to do, run ``concurrency`` at a time, scored and stored.

:class:`Resume` reads what an earlier session of the evaluation stored (and so what is left);
:class:`EvalBatch` runs the rest on an executor — each sample's attempt retried while the model
provider fails transiently, scored (:func:`score_attempt`), and written to the workspace's SQLite
as soon as it is — stopping cleanly at the cost cap, the failure budget or the user's stop.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from tea_notebook.eval.attempt import Attempt
from tea_notebook.eval.checks import Check
from tea_notebook.eval.failures import ProviderFailure, backoff_delay, provider_failure
from tea_notebook.eval.progress import Progress
from tea_notebook.eval.results import TaskResult, sample_key
from tea_notebook.eval.scoring import extract_final_answer
from tea_notebook.eval.tasks import Task

if TYPE_CHECKING:
    from tea_notebook.eval.plan import EvalPlan
    from tea_notebook.runtime.host import RunHost


@dataclass
class Resume:
    """What is stored of an evaluation's samples, and which of them run (again) now."""

    stored: dict[str, dict[str, Any]]
    todo: list[tuple[int, Task, int]]  # (position in the task set, task, epoch)

    @classmethod
    def read(cls, ws: "RunHost", plan: "EvalPlan") -> "Resume":
        """The evaluation's configuration stored, and its samples' rows read: a sample runs when it
        has none, failed on the provider's side, or (``retry_errors``) ended in an error."""
        ws.db.put_evaluation(plan.name, plan.config)
        keys = set(plan.keys)
        stored = {r["task_id"]: r for r in ws.db.eval_results(plan.name) if r["task_id"] in keys}

        def wanted(key: str) -> bool:
            row = stored.get(key)
            return row is None or bool(row.get("infra_error")) or (plan.retry_errors and row["status"] == "error")

        todo = [
            (i, t, e)
            for e in range(1, plan.epochs + 1)
            for i, t in enumerate(plan.tasks)
            if wanted(sample_key(t.id, e))
        ]
        return cls(stored, todo)


class EvalBatch:
    """The samples of :class:`Resume` ``todo`` run on ``executor`` by ``concurrency`` workers."""

    def __init__(
        self,
        ws: "RunHost",
        plan: "EvalPlan",
        executor: Any,
        resume: Resume,
        *,
        stop: threading.Event | None,
        progress: str | bool,
    ):
        self.ws, self.plan, self.executor, self.stop = ws, plan, executor, stop
        self.stored = resume.stored
        self.pending = list(resume.todo)
        self.workers = min(plan.concurrency, max(len(resume.todo), 1))
        self.results: dict[str, TaskResult] = {key: TaskResult.from_row(r) for key, r in resume.stored.items()}
        self.skipped = len(plan.keys) - len(resume.todo)
        self.stopped: str | None = None
        self.running = 0
        self.failures = 0
        self.budget = plan.failure_budget()
        mode = progress if isinstance(progress, str) else ("auto" if progress else "off")
        self.bar = Progress(plan.name, len(plan.keys), mode=mode, model=plan.model_display)

    # -- what the progress bar and the cost cap read ----------------------------------------------
    def counts(self) -> dict[str, Any]:
        """The progress bar's numbers."""
        done = list(self.results.values())
        return {
            "done": len(done),
            "correct": sum(1 for r in done if r.correct),
            "errors": sum(1 for r in done if r.status == "error"),
            "cost": sum(r.cost + r.judge_cost for r in done),
            "running": self.running,
        }

    def spent(self) -> float:
        """What the recorded samples cost (earlier sessions too) and what the runs in flight will: each
        counted at the recorded samples' mean cost, or at what it has spent so far when that is more
        (a Ray worker's spending is known only when it returns; without this, a cap could be overshot by
        up to concurrency − 1 samples)."""
        recorded = sum(r.cost + r.judge_cost for r in self.results.values())
        expected = self.running * (recorded / len(self.results)) if self.results else 0.0
        return recorded + max(self.executor.running_cost(), expected)

    def _stop_requested(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    # -- one sample ---------------------------------------------------------------------------------
    async def attempt_once(self, task: Task) -> Attempt:
        """One attempt at ``task`` (the harness failing is that attempt's error)."""
        self.running += 1
        try:
            return await self.executor.run(task)
        except Exception as exc:  # noqa: BLE001 - the harness failing on one task is that task's error
            return Attempt(task.id, run_status="error", error=f"could not run it: {type(exc).__name__}: {exc}")
        finally:
            self.running -= 1

    async def run_sample(self, task: Task) -> tuple[Attempt, ProviderFailure | None, list[Attempt]]:
        """The sample's attempt, retried while the provider fails transiently (within ``retries``)."""
        plan, failed = self.plan, list[Attempt]()
        attempt = await self.attempt_once(task)
        failure = provider_failure(self.ws, attempt)
        while failure is not None and failure.transient and len(failed) < plan.retries:
            if self._stop_requested():
                break
            failed.append(attempt)
            await asyncio.sleep(backoff_delay(len(failed), plan.backoff, plan.backoff_cap))
            attempt = await self.attempt_once(task)
            failure = provider_failure(self.ws, attempt)
        return attempt, failure, failed

    async def score_and_store(
        self,
        position: int,
        task: Task,
        epoch: int,
        attempt: Attempt,
        failure: ProviderFailure | None,
        failed: list[Attempt],
    ) -> None:
        """The sample's result: scored (checks too, unless the provider failed), its retries counted,
        written to the store (replacing an earlier row of it) and kept."""
        plan = self.plan
        checks = [] if failure else plan.checks
        result = await score_attempt(self.ws, task, position, attempt, plan.score, plan.final_answer, checks)
        result.epoch = epoch
        result.retries = len(failed)
        result.retried_runs = [a.run_id for a in failed if a.run_id]
        result.cost += sum(a.cost for a in failed)
        if failure is not None:
            result.infra_error, result.status, result.correct = True, "error", False
            tried = f" after {len(failed)} retr{'y' if len(failed) == 1 else 'ies'}" if failed else ""
            kind = "" if failure.transient else " (not retried: asking again would not help)"
            result.error = f"the model provider failed{tried}{kind}: {attempt.error}"
            self.failures += 1
        key = sample_key(task.id, epoch)
        previous = self.stored.get(key)
        if previous is not None:
            result.attempts = int(previous.get("attempts") or 1) + 1
        self.ws.db.put_eval_result(plan.name, key, position, result.status, result.correct, result.to_row())
        self.results[key] = result

    # -- the workers ----------------------------------------------------------------------------------
    async def worker(self) -> None:
        """Take the next sample until none is left or the evaluation stops."""
        plan = self.plan
        while self.pending:
            if self.stopped:
                return
            if self._stop_requested():
                self.stopped = self.stopped or "stopped by the user"
                return
            if plan.cost_cap is not None and self.spent() >= plan.cost_cap:
                self.stopped = (
                    f"cost cap ${plan.cost_cap:g} reached (${self.spent():.4f} spent); "
                    f"{len(self.pending)} {plan.unit} not started"
                )
                self.bar.update(**self.counts(), note=self.stopped, force=True)
                return
            position, task, epoch = self.pending.pop(0)
            attempt, failure, failed = await self.run_sample(task)
            await self.score_and_store(position, task, epoch, attempt, failure, failed)
            if self.budget is not None and self.failures >= self.budget and not self.stopped:
                self.stopped = (
                    f"the model provider failed on {self.failures} sample(s) "
                    f"(fail_on_error={plan.fail_on_error!r}): infrastructure is broken, "
                    f"{len(self.pending)} {plan.unit} not started; rerun to resume"
                )
            self.bar.update(**self.counts(), note=self.stopped)

    async def watch_stop(self, workers: Sequence[asyncio.Future[None]]) -> None:
        """Cancel the workers when the user stops the evaluation (tasks in flight are not recorded)."""
        while not all(w.done() for w in workers):
            if self._stop_requested():
                self.stopped = "stopped by the user; tasks in flight were not recorded"
                for w in workers:
                    w.cancel()
                return
            await asyncio.sleep(0.05)

    async def run(self) -> None:
        """Run the workers to the end (or the stop); the executor is closed and the bar ended either way."""
        workers = [asyncio.ensure_future(self.worker()) for _ in range(self.workers)]
        watcher = asyncio.ensure_future(self.watch_stop(workers))
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
            await self.executor.close()
            if self.pending and self.stopped is None and self._stop_requested():
                self.stopped = "stopped by the user; tasks in flight were not recorded"
            self.bar.update(**self.counts(), note=self.stopped or "", force=True)
            self.bar.close()

    def ordered(self) -> list[TaskResult]:
        """The results in the task set's order, a task's epochs together."""
        keys = (sample_key(t.id, e) for t in self.plan.tasks for e in range(1, self.plan.epochs + 1))
        return [self.results[key] for key in keys if key in self.results]


# -- scoring one attempt ----------------------------------------------------------------------------
async def score_attempt(
    ws: "RunHost", task: Task, position: int, attempt: Attempt, score: Any, final_answer: bool, checks: list[Check]
) -> TaskResult:
    """The attempt as a result: scored, or an error (of the run, or of the scorer) with its reason;
    then the trajectory checks, when there is a run to read."""
    result = await _score_answer(task, position, attempt, score, final_answer)
    result.scores["correct"] = 1.0 if result.correct else 0.0
    if not checks or not attempt.run_id:
        return result
    from tea_notebook.runtime.trajectory import Trajectory

    trajectory = Trajectory.load(ws, attempt.run_id)
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
        # no answer to score: ``error`` says why, ``raw_answer`` keeps the text
        result.correct, result.answer = False, ""
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


__all__ = ["EvalBatch", "Resume", "score_attempt"]
