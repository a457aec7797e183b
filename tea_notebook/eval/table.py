"""What an evaluation produced, as numbers and a table: one :class:`TaskResult` per task and
:class:`ResultsTable` (scores, per-level accuracy, HTML and text views, ``to_pandas()`` /
``to_list()``). :class:`~tea_notebook.eval.results.EvalResults` is a table that also opens the views
built on it (the browser, the Inspect AI log, the plots), which read it as a :class:`ResultsTable`."""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from tea_notebook.eval.stats import Estimate
    from tea_notebook.runtime.host import RunHost
    from tea_notebook.runtime.trajectory import Trajectory

#: the columns of the results table, in order
COLUMNS = (
    "task_id",
    "level",
    "status",
    "correct",
    "answer",
    "expected",
    "steps",
    "tokens",
    "cost",
    "seconds",
    "run_id",
    "error",
)


@dataclass
class TaskResult:
    """One task's outcome. ``status`` is ``"scored"`` (the agent answered and the answer was scored;
    ``correct`` says how) or ``"error"`` (``error`` says why: the run failed, timed out, went over
    its budget, its worker died, or the scorer raised). ``run_status`` is the agent run's own status."""

    task_id: str
    position: int
    status: str
    correct: bool | None
    answer: str = ""
    expected: str = ""
    level: str | None = None
    question: str = ""
    run_status: str = ""
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    judge_cost: float = 0.0
    seconds: float = 0.0
    run_id: str | None = None
    error: str | None = None
    raw_answer: str = ""
    scorer_note: str = ""
    model: str = ""
    attempts: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    #: which of the task's repeated runs this is (1 … epochs)
    epoch: int = 1
    #: named scores of the sample: ``correct`` (the answer's, 1.0 or 0.0) and one per trajectory check
    scores: dict[str, float] = field(default_factory=dict)
    #: the sample ended because the model provider failed (after ``retries``): not the agent's outcome,
    #: left out of every score and run again on resume
    infra_error: bool = False
    #: runs of this sample retried because the provider failed (their ids in ``retried_runs``)
    retries: int = 0
    retried_runs: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        """The sample's key in the store: the task id for epoch 1, ``task_id#epoch`` after."""
        return sample_key(self.task_id, self.epoch)

    @property
    def tokens(self) -> int:
        """Prompt plus completion tokens of the run (its sub-runs included)."""
        return self.prompt_tokens + self.completion_tokens

    def to_row(self) -> dict[str, Any]:
        """The stored form (everything but the keys the results table keeps in columns)."""
        data = asdict(self)
        for key in ("task_id", "position", "status", "correct", "attempts"):
            data.pop(key)
        return data

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "TaskResult":
        """A stored result back (unknown keys of newer versions are ignored)."""
        known = set(cls.__dataclass_fields__)
        data = {k: v for k, v in row.items() if k in known and k != "finished"}
        epoch = int(data.get("epoch") or 1)
        suffix = f"#{epoch}"
        if epoch > 1 and str(data.get("task_id", "")).endswith(suffix):
            data["task_id"] = data["task_id"][: -len(suffix)]
        return cls(**data)


def sample_key(task_id: str, epoch: int) -> str:
    """The store's key of one sample: the task id for the first epoch (so an evaluation run once
    and later repeated keeps its first runs), ``task_id#epoch`` for the others."""
    return task_id if epoch == 1 else f"{task_id}#{epoch}"


def _pct(n: int, d: int) -> str:
    return f"{100 * n / d:.1f}%" if d else "–"


class ResultsTable:
    """The results of one evaluation (as stored in the workspace): a table with one row per task.
    (Use it as :class:`~tea_notebook.eval.results.EvalResults`, which adds the views.)

    ``accuracy`` counts correct answers over all tasks with a result (errors count as wrong);
    ``stopped`` says why the evaluation ended early (cost cap, interrupt), if it did.
    """

    def __init__(
        self,
        name: str,
        results: list[TaskResult],
        *,
        workspace: "RunHost | None" = None,
        total: int | None = None,
        stopped: str | None = None,
        config: dict[str, Any] | None = None,
        skipped: int = 0,
    ):
        self.name = name
        self.results = sorted(results, key=lambda r: (r.position, r.task_id, r.epoch))
        self.workspace = workspace
        self.total = total if total is not None else len(results)
        self.stopped = stopped
        self.config = dict(config or {})
        self.skipped = skipped  # results that were already stored when this call started
        self._reducer: Any = None

    @classmethod
    def load(cls, workspace: "RunHost", name: str) -> Self:
        """The stored results of evaluation ``name`` in ``workspace``."""
        from tea_notebook.errors import NotFoundError

        record = workspace.db.evaluation(name)
        if record is None:
            raise NotFoundError(f"no evaluation {name!r} in {workspace.path}")
        rows = [TaskResult.from_row(r) for r in workspace.db.eval_results(name)]
        config = record["config"]
        return cls(name, rows, workspace=workspace, total=config.get("tasks"), config=config)

    # -- numbers ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.results)

    def __iter__(self):
        return iter(self.results)

    def __getitem__(self, key: int | str | tuple[str, int]) -> TaskResult:
        """A sample by position, by task id (its first epoch), by ``"task#epoch"`` or ``(task, epoch)``."""
        if isinstance(key, tuple):
            key = sample_key(*key)
        if isinstance(key, str):
            for r in self.results:
                if r.key == key:
                    return r
            raise KeyError(key)
        return self.results[key]

    @property
    def correct(self) -> int:
        """Tasks answered correctly."""
        return sum(1 for r in self.results if r.correct)

    @property
    def errors(self) -> int:
        """Tasks that ended in an error."""
        return sum(1 for r in self.results if r.status == "error")

    @property
    def infra_errors(self) -> int:
        """Samples that ended because the model provider failed (left out of every score)."""
        return sum(1 for r in self.results if r.infra_error)

    @property
    def agent_errors(self) -> int:
        """Samples that ended in an error of the agent's (a failed run, a timeout, a budget, a scorer
        that raised): scored wrong. Provider failures are not among them (see :attr:`infra_errors`)."""
        return sum(1 for r in self.results if r.status == "error" and not r.infra_error)

    @property
    def scored(self) -> int:
        """Samples with a score: all but the provider failures (the denominator of :attr:`accuracy`)."""
        return sum(1 for r in self.results if not r.infra_error)

    @property
    def accuracy(self) -> float:
        """Correct answers over the samples with a result, provider failures left out (0.0 when none)."""
        scored = [r for r in self.results if not r.infra_error]
        return sum(1 for r in scored if r.correct) / len(scored) if scored else 0.0

    # -- repeated runs: means with their spread ------------------------------------------------
    @property
    def epochs(self) -> int:
        """Samples asked per task (the ``epochs`` the evaluation was last run with)."""
        return int(self.config.get("epochs") or max((r.epoch for r in self.results), default=1))

    @property
    def reducer(self) -> Any:
        """How a task's samples become one score (``mean`` unless the evaluation said otherwise)."""
        return self._reducer or self.config.get("reducer") or "mean"

    def with_reducer(self, reducer: Any) -> Self:
        """The same results whose task scores are reduced with ``reducer`` (a name or a function)."""
        from tea_notebook.eval.stats import resolve_reducer

        resolve_reducer(reducer)
        other = type(self)(
            self.name,
            self.results,
            workspace=self.workspace,
            total=self.total,
            stopped=self.stopped,
            config=self.config,
            skipped=self.skipped,
        )
        other._reducer = reducer
        return other

    def score_names(self) -> list[str]:
        """The named scores of the samples: ``correct`` first, then each trajectory check's."""
        names = ["correct"]
        for r in self.results:
            names.extend(n for n in r.scores if n not in names)
        return names

    def samples(self, score: str = "correct") -> dict[str, list[float]]:
        """``task_id -> [score of each epoch]`` in task order; a sample that failed on the provider's
        side has no score, an agent's error scores 0 on ``correct`` and has no check scores."""
        out: dict[str, list[float]] = {}
        for r in self.results:
            values = out.setdefault(r.task_id, [])
            if r.infra_error:
                continue
            if score == "correct":
                values.append(1.0 if r.correct else 0.0)
            elif score in r.scores:
                values.append(float(r.scores[score]))
        return out

    def task_scores(self, score: str = "correct") -> dict[str, float]:
        """Each task's samples reduced to one score with :attr:`reducer`."""
        from tea_notebook.eval.stats import reduce_scores

        return reduce_scores(self.samples(score), self.reducer)

    def estimate(self, score: str = "correct") -> "Estimate":
        """The mean over tasks of their reduced scores, with its standard error over tasks."""
        from tea_notebook.eval.stats import Estimate

        return Estimate.of(list(self.task_scores(score).values()))

    def pass_at(self, k: int | None = None) -> float | None:
        """pass@k (default k = epochs) averaged over the tasks with at least k scored samples (None
        when none has): the unbiased estimator, which is "any of the k" when a task has exactly k."""
        return self._over_tasks(k, "pass_at_k")

    def pass_hat(self, k: int | None = None) -> float | None:
        """pass^k (default k = epochs): the chance that all k samples of a task are correct,
        averaged over the tasks with at least k scored samples (None when none has)."""
        return self._over_tasks(k, "pass_hat_k")

    def _over_tasks(self, k: int | None, which: str) -> float | None:
        from tea_notebook.eval import stats

        k = k or self.epochs
        fn = getattr(stats, which)
        values = [fn(len(v), int(sum(v)), k) for v in self.samples().values() if len(v) >= k]
        return stats.mean(values) if values else None

    def per_task(self) -> list[dict[str, Any]]:
        """One row per task: samples, correct ones, mean ± stderr over its epochs, pass@k, pass^k."""
        from tea_notebook.eval import stats

        k = self.epochs
        rows = []
        for task, values in self.samples().items():
            c = int(sum(values))
            rows.append(
                {
                    "task_id": task,
                    "samples": len(values),
                    "correct": c,
                    "mean": stats.mean(values),
                    "stderr": stats.stderr(values),
                    f"pass@{k}": stats.pass_at_k(len(values), c, k) if len(values) >= k else None,
                    f"pass^{k}": stats.pass_hat_k(len(values), c, k) if len(values) >= k else None,
                }
            )
        return rows

    def score_line(self) -> str:
        """``accuracy 0.63 ± 0.04 (k=5, 30 tasks)``: the mean never without its spread."""
        est = self.estimate()
        reducer = self.reducer if isinstance(self.reducer, str) else getattr(self.reducer, "__name__", "custom")
        how = "" if reducer == "mean" or self.epochs == 1 else f", {reducer} of epochs"
        return f"accuracy {est} (k={self.epochs}, {est.n} tasks{how})"

    @property
    def cost(self) -> float:
        """Dollars spent: the runs and any judge calls."""
        return sum(r.cost + r.judge_cost for r in self.results)

    @property
    def tokens(self) -> int:
        """Tokens of all runs."""
        return sum(r.tokens for r in self.results)

    def by_level(self) -> dict[str, dict[str, Any]]:
        """``level -> {tasks, correct, accuracy}`` (tasks without a level under ``"-"``)."""
        out: dict[str, dict[str, Any]] = {}
        for r in self.results:
            if r.infra_error:
                continue  # the provider failed: not a result of the agent's
            entry = out.setdefault(r.level or "-", {"tasks": 0, "correct": 0})
            entry["tasks"] += 1
            entry["correct"] += bool(r.correct)
        for entry in out.values():
            entry["accuracy"] = entry["correct"] / entry["tasks"]
        return dict(sorted(out.items()))

    def model_label(self) -> str:
        """The model as shown to people (scripted and replayed ones say so): the evaluation's, or
        those the runs recorded when the agent chose its own."""
        from tea_notebook.models.client import display_name

        if self.config.get("model_display"):
            return self.config["model_display"]
        seen = sorted({r.model for r in self.results if r.model})
        return ", ".join(display_name(m) for m in seen)

    def summary(self) -> dict[str, Any]:
        """The headline numbers as a dict (what ``tea eval --json`` prints)."""
        est = self.estimate()
        k = self.epochs
        return {
            "name": self.name,
            "tasks": self.total,
            "done": len(self.results),
            "correct": self.correct,
            "errors": self.errors,
            "infra_errors": self.infra_errors,
            "agent_errors": self.agent_errors,
            "scored": self.scored,
            "accuracy": self.accuracy,
            "epochs": k,
            "reducer": self.reducer if isinstance(self.reducer, str) else getattr(self.reducer, "__name__", "custom"),
            "mean": est.mean,
            "stderr": est.stderr,
            "ci95": list(est.ci95),
            "scored_tasks": est.n,
            f"pass@{k}": self.pass_at(k),
            f"pass^{k}": self.pass_hat(k),
            "scores": {n: {"mean": e.mean, "stderr": e.stderr} for n in self.score_names() for e in [self.estimate(n)]},
            "cost": self.cost,
            "tokens": self.tokens,
            "by_level": self.by_level(),
            "stopped": self.stopped,
            "model": self.model_label(),
        }

    # -- views --------------------------------------------------------------------------------
    def to_list(self) -> list[dict[str, Any]]:
        """One dict per task with the table's columns (plus question, run status and attempts)."""
        rows = []
        for r in self.results:
            row = {c: getattr(r, c) for c in COLUMNS}
            row.update(
                epoch=r.epoch,
                scores=dict(r.scores),
                retries=r.retries,
                provider_failure=r.infra_error,
                question=r.question,
                run_status=r.run_status,
                attempts=r.attempts,
                prompt_tokens=r.prompt_tokens,
                completion_tokens=r.completion_tokens,
            )
            rows.append(row)
        return rows

    def to_pandas(self) -> Any:
        """The table as a pandas DataFrame indexed by task id (pandas is imported here)."""
        try:
            import pandas as pd
        except ImportError:
            from tea_notebook.errors import TeaError

            raise TeaError("to_pandas needs pandas: pip install pandas") from None
        return pd.DataFrame(self.to_list()).set_index("task_id")

    def trajectory(self, task_id: str) -> "Trajectory":
        """The run of one task, rebuilt from its events (``ws.trajectory(run_id)``)."""
        from tea_notebook.errors import TeaError

        result = self[task_id]
        if not result.run_id or self.workspace is None:
            raise TeaError(f"task {task_id!r} has no run to show ({result.error or 'not run'})")
        from tea_notebook.runtime.trajectory import Trajectory

        return Trajectory.load(self.workspace, result.run_id)

    def headline(self) -> str:
        """One line: done / accuracy / correct of the scored samples / errors / cost. Every count
        names its denominator, the scored samples (provider failures are not scored); an agent's
        error is scored wrong and counted once, a provider failure only as one."""
        model = self.model_label()
        k = self.epochs
        done = f"{len(self.results)}/{self.total}" if k == 1 else f"{len(self.results)}/{self.total * k} samples"
        errors = self.agent_errors
        text = (
            f"evaluation {self.name}: {done} done · "
            f"{self.score_line()} · {self.correct} of {self.scored} scored samples correct · "
            f"{errors} error{'' if errors == 1 else 's'} (scored wrong) · ${self.cost:.4f}"
        )
        if self.infra_errors:
            n = self.infra_errors
            text += f" · {n} provider failure{'' if n == 1 else 's'} (not scored)"
        if model:
            text += f" · model {model}"
        if self.stopped:
            text += f" · stopped: {self.stopped}"
        return text

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def text(self, limit: int = 50) -> str:
        """The headline, accuracy by level and the first ``limit`` rows as plain text."""
        lines = [self.headline()]
        levels = self.by_level()
        if len(levels) > 1 or "-" not in levels:
            lines.append(
                "by level: "
                + ", ".join(
                    f"{k}: {v['correct']}/{v['tasks']} ({_pct(v['correct'], v['tasks'])})" for k, v in levels.items()
                )
            )
        for r in self.results[:limit]:
            mark = "✓" if r.correct else ("!" if r.status == "error" else "✗")
            shown = (r.error or "") if r.status == "error" else r.answer
            lines.append(f"  {mark} {r.task_id:<14} {shown[:48]!r:52} expected {r.expected[:24]!r} · {r.steps} steps")
        if len(self.results) > limit:
            lines.append(f"  … {len(self.results) - limit} more (to_pandas() has them all)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"EvalResults({self.name!r}, done={len(self.results)}/{self.total}, correct={self.correct}, "
            f"errors={self.errors})"
        )

    def _repr_html_(self, limit: int = 200) -> str:
        esc = html.escape
        levels = self.by_level()
        level_text = (
            " · ".join(
                f"L{esc(k)}: {v['correct']}/{v['tasks']} ({_pct(v['correct'], v['tasks'])})" for k, v in levels.items()
            )
            if (len(levels) > 1 or "-" not in levels)
            else ""
        )
        head = "".join(f"<th style='text-align:left'>{c}</th>" for c in COLUMNS)
        body = []
        for r in self.results[:limit]:
            colour = "#1a7f37" if r.correct else ("#9a6700" if r.status == "error" else "#cf222e")
            mark = "✓" if r.correct else ("error" if r.status == "error" else "✗")
            cells = [
                esc(r.key),
                esc(r.level or ""),
                esc(r.status),
                f"<span style='color:{colour}'>{mark}</span>",
                esc(r.answer[:120]),
                esc(r.expected[:80]),
                str(r.steps),
                str(r.tokens),
                f"${r.cost:.4f}",
                f"{r.seconds:.2f}s",
                f"<code data-run='{esc(r.run_id)}' title='open this run'>{esc(r.run_id)}</code>" if r.run_id else "",
                esc((r.error or "")[:160]),
            ]
            # the row opens its run (JupyterLab: the trajectory with its score, "context" and Fork)
            link = f" data-run='{esc(r.run_id)}' title='open the run of {esc(r.key)}'" if r.run_id else ""
            body.append(f"<tr{link}>" + "".join(f"<td style='text-align:left'>{c}</td>" for c in cells) + "</tr>")
        more = f"<p>… {len(self.results) - limit} more rows (to_pandas())</p>" if len(self.results) > limit else ""
        return (
            f"<div class='tea-eval'><b>{esc(self.headline())}</b>"
            + (f"<div>{level_text}</div>" if level_text else "")
            + f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}"
            + "<div style='font-size:85%;color:#57606a'>open a task's run: click its row (JupyterLab), "
            "<code>results.browse()</code> (pick a "
            "row, its trajectory renders below), <code>results.trajectory(task_id)</code> or "
            "<code>ws.trajectory(run_id)</code></div></div>"
        )


__all__ = ["COLUMNS", "ResultsTable", "TaskResult", "sample_key"]
