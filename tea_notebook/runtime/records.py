"""The records of a run, declared once: :class:`StepRecord` (what one step did) and
:class:`RunSummary` / :class:`RunResult` (how a run ended).

:class:`StepRecord` lives in :mod:`tea_notebook.runtime.steps`, under the views that read steps
(which this module's :class:`RunResult` opens), and is re-exported here. A run's figures (status,
answer, steps, tokens, cost) are a :class:`RunSummary`: what a run returns (:class:`RunResult`)
and a branch of a run's family (:class:`~tea_notebook.runtime.branches.Branch`) are both one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tea_notebook.runtime.event_types import RunStatus
from tea_notebook.runtime.steps import THOUGHT_KEYS, VALIDATION_LIMIT, VALIDATION_PREFIX, StepRecord

if TYPE_CHECKING:
    from tea_notebook.runtime.trajectory import Trajectory


@dataclass
class RunSummary:
    """A run's figures: who ran what with which model, how it ended, its steps, tokens and cost."""

    run_id: str
    agent: str
    task: str
    model: str
    status: RunStatus
    answer: str
    steps: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0


@dataclass(repr=False)
class RunResult(RunSummary):
    """What a run produced. ``trajectory`` is rebuilt from the stored events on first access."""

    files: list[str] = field(default_factory=list)
    error: str | None = None
    workspace: Any = field(default=None, repr=False)

    @property
    def success(self) -> bool:
        """True when the agent finished the task and said it succeeded."""
        return self.status == "success"

    @property
    def trajectory(self) -> "Trajectory":
        """The run (with nested sub-agent runs) rebuilt from events."""
        from tea_notebook.runtime.trajectory import Trajectory

        return Trajectory.load(self.workspace, self.run_id)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict, dict]:
        return self.trajectory._repr_mimebundle_(include, exclude)

    def context(self, step: int, *, stage: str = "", run: str | None = None) -> Any:
        """What the model saw at ``step``: see
        :meth:`Trajectory.context <tea_notebook.runtime.trajectory.Trajectory.context>`."""
        from tea_notebook.runtime.contexts import load_context

        if run is not None:
            return self.trajectory.context(step, stage=stage, run=run)
        return load_context(self.workspace, self.run_id, step, stage)

    def plot(self) -> Any:
        """A matplotlib figure: tokens, cost and latency per step."""
        from tea_notebook.runtime.plots import plot_run

        return plot_run(self.trajectory)

    def _tokens_text(self) -> str:
        from tea_notebook.models.client import tokens_estimated

        total = self.prompt_tokens + self.completion_tokens
        return f"~{total} (estimated: scripted model)" if tokens_estimated(self.model) else str(total)

    def __repr__(self) -> str:
        # the status first: a run that did not succeed must not read like one that did
        return (
            f"RunResult(status={self.status!r}, agent={self.agent!r}, run_id={self.run_id!r}, steps={self.steps}, "
            f"tokens={self._tokens_text()}, cost={self.cost:.4f}, answer={self.answer[:200]!r})"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(
            f"RunResult({self.status}: {self.answer[:200]!r}, steps={self.steps}, tokens={self._tokens_text()}, "
            f"run_id={self.run_id!r})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (what ``tea run --json`` prints)."""
        return {
            "run_id": self.run_id,
            "agent": self.agent,
            "status": self.status,
            "success": self.success,
            "answer": self.answer,
            "steps": self.steps,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost": self.cost,
            "model": self.model,
            "files": self.files,
            "error": self.error,
        }


def sub_agent_answer(name: str, result: RunResult) -> str:
    """What a delegating agent reads of a sub-agent's run: its answer, marked when it did not
    succeed; a run that ended in error or was interrupted raises instead."""
    if result.status in ("error", "interrupted"):
        raise RuntimeError(f"sub-agent {name} ended with status {result.status}: {result.error or result.answer}")
    if result.success:
        return result.answer
    return f"(sub-agent {name} did not succeed: {result.status}) {result.answer}"


__all__ = [
    "THOUGHT_KEYS",
    "VALIDATION_LIMIT",
    "VALIDATION_PREFIX",
    "RunResult",
    "RunSummary",
    "StepRecord",
    "sub_agent_answer",
]
