"""What an evaluation made of a run that was one of its samples, for the run's header: the scorer's
verdict beside the agent's own status (an agent can end in "success" with a wrong answer), the named
scores, the target, the scored answer and the scorer. Read from the workspace's evaluation results
(``Database.eval_sample_of_run``), so a trajectory opened from anywhere (a results table's row, the
sidebar, ``ws.trajectory(run_id)``) shows it.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Protocol

from tea_notebook.runtime.html_style import esc_str
from tea_notebook.store.blobs import FIELD_LIMIT, shorten


class LoadedRun(Protocol):
    """What this module reads of a trajectory (a :class:`~tea_notebook.runtime.trajectory.Trajectory`)."""

    run_id: str
    parent_id: str | None
    workspace: Any


#: the scorer's verdicts: the answer was right, wrong, the sample ended in an error of the agent's
#: (scored wrong), or the model provider failed (not scored)
VERDICTS = ("right", "wrong", "error", "not scored")

_COLOUR = {"right": "#1a7f37", "wrong": "#cf222e", "error": "#9a6700", "not scored": "#57606a"}
_MARK = {"right": "✓", "wrong": "✗", "error": "!", "not scored": "–"}


def _text(value: Any) -> str:
    return shorten(str(value or ""), FIELD_LIMIT)


def _scorer_name(config: dict[str, Any]) -> str:
    from tea_notebook.models.client import display_name

    scorer = config.get("scorer") or {}
    if not isinstance(scorer, dict):
        return str(scorer)
    name = str(scorer.get("scorer", ""))
    if scorer.get("model"):
        name += f" ({display_name(str(scorer['model']))})"
    return name


def evaluation_sample(traj: LoadedRun) -> dict[str, Any] | None:
    """The payload's ``evaluation`` of a run an evaluation scored: ``name``, ``task_id``, ``epoch``,
    ``verdict`` (one of :data:`VERDICTS`), ``scores`` (name -> value), ``target``, ``answer`` (as
    scored), ``scorer``, the scorer's ``note`` and the sample's ``error``. None for a run no
    evaluation scored, a sub-run, or a run not loaded from a workspace."""
    db = getattr(traj.workspace, "db", None)
    if traj.parent_id is not None or db is None or not hasattr(db, "eval_sample_of_run"):
        return None
    try:
        row = db.eval_sample_of_run(traj.run_id)
    except sqlite3.ProgrammingError:
        return None  # its workspace was closed since it was loaded: the run still shows, without its score
    if row is None:
        return None
    if row.get("infra_error"):
        verdict = "not scored"
    elif row["status"] == "error":
        verdict = "error"
    else:
        verdict = "right" if row["correct"] else "wrong"
    epoch = int(row.get("epoch") or 1)
    task = str(row["task_id"])
    if epoch > 1 and task.endswith(f"#{epoch}"):
        task = task[: -len(f"#{epoch}")]
    scores = {str(k): float(v) for k, v in (row.get("scores") or {}).items()}
    if not scores and verdict != "not scored":
        scores = {"correct": 1.0 if row["correct"] else 0.0}
    return {
        "name": str(row["evaluation"]),
        "task_id": task,
        "epoch": epoch,
        "verdict": verdict,
        "scores": {} if verdict == "not scored" else scores,
        "target": _text(row.get("expected")),
        "answer": _text(row.get("answer")),
        "scorer": _scorer_name(row["config"]),
        "note": _text(row.get("scorer_note")),
        "error": _text(row.get("error")),
    }


def evaluation_payload(traj: LoadedRun) -> dict[str, Any]:
    """``{"evaluation": …}`` for the trajectory payload when an evaluation scored the run, else ``{}``."""
    sample = evaluation_sample(traj)
    return {"evaluation": sample} if sample else {}


def evaluation_html(sample: dict[str, Any]) -> str:
    """The header lines of a scored sample (:func:`evaluation_sample`): the verdict and who gave it,
    then the target, the scored answer, the scores and the scorer's note or the error."""
    verdict = sample["verdict"]
    scorer = f" by {esc_str(sample['scorer'])}" if sample.get("scorer") else ""
    epoch = f" (epoch {sample['epoch']})" if sample.get("epoch", 1) > 1 else ""
    head = (
        f"<div class='h tea-score'><span class='st' style='color:{_COLOUR.get(verdict, '#57606a')}' "
        f"title='the scorer&#x27;s verdict'>{_MARK.get(verdict, '')} {esc_str(verdict)}</span>"
        f"<span class='muted'>scored{scorer} · evaluation <b>{esc_str(sample['name'])}</b>, task "
        f"{esc_str(sample['task_id'])}{epoch} · the status above is the agent&#x27;s own, not the score</span></div>"
    )
    line = [
        f"<span class='muted'>target:</span> <code>{esc_str(sample.get('target', ''))}</code>",
        f"<span class='muted'>scored answer:</span> <code>{esc_str(sample.get('answer', ''))}</code>",
    ]
    scores = sample.get("scores") or {}
    if scores:
        line.append("<span class='muted'>scores:</span> " + ", ".join(f"{esc_str(k)} {v:g}" for k, v in scores.items()))
    if sample.get("note"):
        line.append(f"<span class='muted'>scorer said:</span> {esc_str(sample['note'])}")
    if sample.get("error"):
        line.append(f"<span class='muted'>error:</span> {esc_str(sample['error'])}")
    return head + f"<div class='tea-score'>{' · '.join(line)}</div>"


__all__ = ["VERDICTS", "LoadedRun", "evaluation_html", "evaluation_payload", "evaluation_sample"]
