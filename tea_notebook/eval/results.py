"""What an evaluation produced: one :class:`TaskResult` per task and the :class:`EvalResults` table
(HTML and text views, ``to_pandas()`` / ``to_list()``, per-level accuracy, plots, comparison)."""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tea_notebook.runtime.trajectory import Trajectory
    from tea_notebook.workspace import Workspace

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
        return cls(**{k: v for k, v in row.items() if k in known and k != "finished"})


def _pct(n: int, d: int) -> str:
    return f"{100 * n / d:.1f}%" if d else "–"


class EvalResults:
    """The results of one evaluation (as stored in the workspace): a table with one row per task.

    ``accuracy`` counts correct answers over all tasks with a result (errors count as wrong);
    ``stopped`` says why the evaluation ended early (cost cap, interrupt), if it did.
    """

    def __init__(
        self,
        name: str,
        results: list[TaskResult],
        *,
        workspace: "Workspace | None" = None,
        total: int | None = None,
        stopped: str | None = None,
        config: dict[str, Any] | None = None,
        skipped: int = 0,
    ):
        self.name = name
        self.results = sorted(results, key=lambda r: (r.position, r.task_id))
        self.workspace = workspace
        self.total = total if total is not None else len(results)
        self.stopped = stopped
        self.config = dict(config or {})
        self.skipped = skipped  # results that were already stored when this call started

    @classmethod
    def load(cls, workspace: "Workspace", name: str) -> "EvalResults":
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

    def __getitem__(self, key: int | str) -> TaskResult:
        if isinstance(key, str):
            for r in self.results:
                if r.task_id == key:
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
    def accuracy(self) -> float:
        """Correct answers over tasks with a result (0.0 when none)."""
        return self.correct / len(self.results) if self.results else 0.0

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
        return {
            "name": self.name,
            "tasks": self.total,
            "done": len(self.results),
            "correct": self.correct,
            "errors": self.errors,
            "accuracy": self.accuracy,
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
        return self.workspace.trajectory(result.run_id)

    def headline(self) -> str:
        """One line: done / correct / errors / cost."""
        model = self.summary()["model"]
        text = (
            f"evaluation {self.name}: {len(self.results)}/{self.total} done · {self.correct} correct "
            f"({_pct(self.correct, len(self.results))}) · {self.errors} errors · ${self.cost:.4f}"
        )
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
                esc(r.task_id),
                esc(r.level or ""),
                esc(r.status),
                f"<span style='color:{colour}'>{mark}</span>",
                esc(r.answer[:120]),
                esc(r.expected[:80]),
                str(r.steps),
                str(r.tokens),
                f"${r.cost:.4f}",
                f"{r.seconds:.2f}s",
                f"<code>{esc(r.run_id or '')}</code>",
                esc((r.error or "")[:160]),
            ]
            body.append("<tr>" + "".join(f"<td style='text-align:left'>{c}</td>" for c in cells) + "</tr>")
        more = f"<p>… {len(self.results) - limit} more rows (to_pandas())</p>" if len(self.results) > limit else ""
        return (
            f"<div class='tea-eval'><b>{esc(self.headline())}</b>"
            + (f"<div>{level_text}</div>" if level_text else "")
            + f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}"
            + "<div style='font-size:85%;color:#57606a'>open a task's run: <code>results.trajectory(task_id)</code>"
            " or <code>ws.trajectory(run_id)</code></div></div>"
        )

    # -- plots --------------------------------------------------------------------------------
    def plot(self, window: int = 10) -> Any:
        """Accuracy by level, cost and steps distributions, and rolling accuracy over the tasks."""
        from tea_notebook.eval.plots import plot_evaluation

        return plot_evaluation(self, window=window)

    def compare(self, other: "EvalResults") -> Any:
        """A figure of this evaluation beside ``other``: accuracy by level, cost per task, rolling accuracy."""
        from tea_notebook.eval.plots import plot_comparison

        return plot_comparison(self, other)


__all__ = ["COLUMNS", "EvalResults", "TaskResult"]
