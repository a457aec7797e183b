"""How far an evaluation's numbers can be trusted, beside its mean: consistency across epochs (the
share of tasks always right, always wrong, or sometimes each), the clustered standard error of the
samples' mean, and the calibration of the agent's stated confidence where the samples carry one.

    results.reliability()     # or reliability(results)

A sample states its confidence as ``extra["confidence"]``, a number from 0 to 1.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tea_notebook.errors import TeaError
from tea_notebook.eval.stats import Estimate, clustered_estimate


@dataclass(frozen=True)
class CalibrationBin:
    """Samples whose stated confidence fell in ``[low, high)``: how many, their mean confidence and
    the share of them that were right."""

    low: float
    high: float
    count: int
    confidence: float
    accuracy: float


@dataclass(frozen=True)
class Calibration:
    """How well stated confidence matches being right, over ``n`` samples:

    * ``brier``: ``mean((c − y)²)`` with c the confidence and y 1 when right (0 is perfect);
    * ``ece`` (expected calibration error): ``Σ_b (n_b / n) · |accuracy_b − confidence_b|`` over
      equal-width confidence bins."""

    n: int
    brier: float
    ece: float
    mean_confidence: float
    accuracy: float
    bins: tuple[CalibrationBin, ...]

    def __str__(self) -> str:
        return (
            f"calibration over {self.n} samples: stated confidence {self.mean_confidence:.2f} vs accuracy "
            f"{self.accuracy:.2f}, ECE {self.ece:.3f}, Brier {self.brier:.3f}"
        )


def calibration(pairs: Sequence[tuple[float, bool]], *, bins: int = 10) -> Calibration:
    """:class:`Calibration` of ``(stated confidence, right)`` pairs in ``bins`` equal-width bins."""
    if bins < 1:
        raise TeaError(f"calibration needs at least 1 bin, not {bins}")
    if not pairs:
        raise TeaError("calibration needs samples with a stated confidence, there are none")
    checked = []
    for confidence, right in pairs:
        c = float(confidence)
        if not 0.0 <= c <= 1.0:
            raise TeaError(f"a stated confidence is a number from 0 to 1, not {confidence!r}")
        checked.append((c, 1.0 if right else 0.0))
    n = len(checked)
    groups: dict[int, list[tuple[float, float]]] = {}
    for c, y in checked:
        groups.setdefault(min(int(c * bins), bins - 1), []).append((c, y))
    rows = []
    for index in sorted(groups):
        members = groups[index]
        conf = sum(c for c, _ in members) / len(members)
        acc = sum(y for _, y in members) / len(members)
        rows.append(CalibrationBin(index / bins, (index + 1) / bins, len(members), conf, acc))
    return Calibration(
        n=n,
        brier=sum((c - y) ** 2 for c, y in checked) / n,
        ece=sum(r.count / n * abs(r.accuracy - r.confidence) for r in rows),
        mean_confidence=sum(c for c, _ in checked) / n,
        accuracy=sum(y for _, y in checked) / n,
        bins=tuple(rows),
    )


@dataclass(frozen=True)
class Reliability:
    """Reliability figures of one evaluation.

    Of the ``repeated`` tasks (those with at least two scored samples), ``always_right`` were right
    in every epoch and ``always_wrong`` in none (a sample is right when its score is at least 0.5);
    ``consistency`` is their share. ``clustered`` is the mean over samples with a standard error
    clustered by task (None, with ``clustered_note`` saying why, when not estimable);
    ``calibration`` is None when no sample states a confidence."""

    tasks: int
    epochs: int
    repeated: int
    always_right: int
    always_wrong: int
    clustered: Estimate | None
    clustered_note: str
    calibration: Calibration | None
    notes: tuple[str, ...] = ()

    @property
    def mixed(self) -> int:
        """Repeated tasks right in some epochs and wrong in others."""
        return self.repeated - self.always_right - self.always_wrong

    @property
    def consistency(self) -> float | None:
        """The share of repeated tasks with the same outcome in every epoch (None without any)."""
        return (self.always_right + self.always_wrong) / self.repeated if self.repeated else None

    def lines(self) -> list[str]:
        """The figures as lines of text."""
        out = [f"reliability over {self.tasks} tasks (up to {self.epochs} epoch{'' if self.epochs == 1 else 's'})"]
        if self.repeated:
            out.append(
                f"  consistency across epochs {self.consistency:.0%} of {self.repeated} repeated tasks: "
                f"{self.always_right} always right ({self.always_right / self.repeated:.0%}), "
                f"{self.always_wrong} always wrong ({self.always_wrong / self.repeated:.0%}), {self.mixed} mixed"
            )
        else:
            out.append("  consistency across epochs: not estimable, no task has two scored samples (epochs=1)")
        if self.clustered is not None:
            low, high = self.clustered.ci95
            out.append(
                f"  mean over samples {self.clustered} (clustered by task; 95% CI {low:.2f} to {high:.2f}, "
                f"{self.clustered.df} df)"
            )
        else:
            out.append(f"  {self.clustered_note}")
        out.append(f"  {self.calibration}" if self.calibration else "  calibration: no sample states a confidence")
        out += [f"  note: {note}" for note in self.notes]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        first, *rest = self.lines()
        items = "".join(f"<li>{html.escape(line.strip())}</li>" for line in rest)
        return f"<div class='tea-reliability'><b>{html.escape(first)}</b><ul>{items}</ul></div>"


def reliability(results: Any, *, score: str = "correct", threshold: float = 0.5, bins: int = 10) -> Reliability:
    """The :class:`Reliability` of evaluation ``results`` (or a mapping task → sample scores): a
    sample is right when its ``score`` is at least ``threshold``; stated confidences are read from
    each sample's ``extra["confidence"]``."""
    if hasattr(results, "samples") and callable(results.samples):
        samples: Mapping[str, Sequence[float]] = results.samples(score)
    elif isinstance(results, Mapping):
        samples = results
    else:
        raise TeaError(f"reliability needs evaluation results or a mapping task → sample scores, not {type(results)}")
    scored = {task: [float(v) for v in values] for task, values in samples.items() if values}
    repeated = {task: values for task, values in scored.items() if len(values) >= 2}
    always_right = sum(1 for values in repeated.values() if all(v >= threshold for v in values))
    always_wrong = sum(1 for values in repeated.values() if all(v < threshold for v in values))
    clustered: Estimate | None = None
    try:
        clustered = clustered_estimate(scored)
        note = ""
    except TeaError as exc:
        note = str(exc)
    pairs, notes = _stated_confidences(results)
    return Reliability(
        tasks=len(scored),
        epochs=max((len(v) for v in scored.values()), default=0),
        repeated=len(repeated),
        always_right=always_right,
        always_wrong=always_wrong,
        clustered=clustered,
        clustered_note=note,
        calibration=calibration(pairs, bins=bins) if pairs else None,
        notes=tuple(notes),
    )


def _stated_confidences(results: Any) -> tuple[list[tuple[float, bool]], list[str]]:
    """``(confidence, right)`` of the samples that state a usable confidence, and a note on the others."""
    pairs: list[tuple[float, bool]] = []
    unusable = 0
    for sample in getattr(results, "results", ()):
        stated = (getattr(sample, "extra", None) or {}).get("confidence")
        if stated is None or getattr(sample, "infra_error", False):
            continue
        try:
            value = float(stated)
        except (TypeError, ValueError):
            unusable += 1
            continue
        if not 0.0 <= value <= 1.0:
            unusable += 1
            continue
        pairs.append((value, bool(sample.correct)))
    notes = [f"{unusable} samples state a confidence that is not a number from 0 to 1 (left out)"] if unusable else []
    return pairs, notes


__all__ = ["Calibration", "CalibrationBin", "Reliability", "calibration", "reliability"]
