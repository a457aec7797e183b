"""Matplotlib plots of evaluations: accuracy by level, cost and steps distributions, accuracy over the
tasks in order (a rolling mean: does memory help as tasks go by?), and two evaluations side by side.
matplotlib is imported on use; figures are closed before they are returned (they show once)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tea_notebook.runtime.plots import subplots, whole_numbers

if TYPE_CHECKING:
    from tea_notebook.eval.table import ResultsTable


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        from tea_notebook.errors import TeaError

        raise TeaError("plots need matplotlib: pip install matplotlib") from None
    return plt


def rolling_accuracy(results: "ResultsTable", window: int = 10) -> list[float]:
    """Accuracy of the last ``window`` tasks (fewer at the start) after each task, in task order."""
    marks = [1.0 if r.correct else 0.0 for r in results.results]
    out = []
    for i in range(len(marks)):
        part = marks[max(0, i + 1 - window) : i + 1]
        out.append(sum(part) / len(part))
    return out


def _levels(
    ax: Any,
    results: "ResultsTable",
    offset: float = 0.0,
    width: float = 0.8,
    label: str | None = None,
    keys: list[str] | None = None,
) -> None:
    levels = results.by_level()
    keys = keys or list(levels)
    values = [100 * levels[k]["accuracy"] if k in levels else 0.0 for k in keys]
    xs = [i + offset for i in range(len(keys))]
    bars = ax.bar(xs, values, width=width, label=label)
    for bar, k in zip(bars, keys):
        entry = levels.get(k)
        if entry:
            ax.annotate(
                f"{entry['correct']}/{entry['tasks']}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    ax.set_xticks(range(len(keys)), [f"L{k}" if k != "-" else "all" for k in keys])
    ax.set_ylim(0, 110)
    ax.set_ylabel("accuracy (%)")


def plot_evaluation(results: "ResultsTable", window: int = 10) -> Any:
    """Four panels: accuracy by level, cost per task, steps per task, rolling accuracy over tasks."""
    plt = _pyplot()
    fig, axes = subplots(1, 4, figsize=(15, 3.4), constrained_layout=True)
    _levels(axes[0], results)
    axes[0].set_title("accuracy by level")
    rows = results.results
    axes[1].hist([r.cost + r.judge_cost for r in rows] or [0], bins=min(20, max(len(rows), 1)), color="#b35900")
    axes[1].set_title("cost per task (USD)")
    axes[1].set_xlabel("USD")
    axes[2].hist([r.steps for r in rows] or [0], bins=min(20, max(len(rows), 1)), color="#0969da")
    axes[2].set_title("steps per task")
    axes[2].set_xlabel("steps")
    axes[3].plot(range(1, len(rows) + 1), [100 * v for v in rolling_accuracy(results, window)], marker=".")
    axes[3].set_ylim(-5, 105)
    axes[3].set_title(f"accuracy over tasks (last {window})")
    axes[3].set_xlabel("task (in order)")
    whole_numbers(axes[2], y=True)  # steps and task counts
    whole_numbers(axes[1], x=False, y=True)
    whole_numbers(axes[3])
    errors = [i + 1 for i, r in enumerate(rows) if r.status == "error"]
    if errors:
        axes[3].scatter(errors, [0] * len(errors), marker="x", color="#9a6700", label="error")
        axes[3].legend(fontsize=8)
    fig.suptitle(results.headline(), fontsize=10)
    plt.close(fig)
    return fig


def plot_comparison(a: "ResultsTable", b: "ResultsTable", window: int = 10) -> Any:
    """Two evaluations side by side: accuracy by level, cost per task, rolling accuracy."""
    plt = _pyplot()
    fig, axes = subplots(1, 3, figsize=(14, 3.4), constrained_layout=True)
    keys = sorted(set(a.by_level()) | set(b.by_level()))
    _levels(axes[0], a, -0.2, 0.4, a.name, keys)
    _levels(axes[0], b, 0.2, 0.4, b.name, keys)
    axes[0].legend(fontsize=8)
    axes[0].set_title("accuracy by level")
    axes[1].boxplot([[r.cost + r.judge_cost for r in x.results] or [0] for x in (a, b)])
    axes[1].set_xticks([1, 2], [a.name, b.name])
    axes[1].set_title("cost per task (USD)")
    for x in (a, b):
        axes[2].plot(range(1, len(x) + 1), [100 * v for v in rolling_accuracy(x, window)], label=x.name)
    axes[2].set_ylim(-5, 105)
    axes[2].set_title(f"accuracy over tasks (last {window})")
    axes[2].set_xlabel("task (in order)")
    whole_numbers(axes[2])
    axes[2].legend(fontsize=8)
    fig.suptitle(
        " · ".join(
            f"{x.name}: {x.correct}/{len(x)} ({100 * x.accuracy:.1f}%)"
            + (f", {x.model_label()}" if x.model_label() else "")
            for x in (a, b)
        ),
        fontsize=10,
    )
    plt.close(fig)
    return fig


def plot_set(eval_set: Any, score: str = "correct") -> Any:
    """An eval set's configurations: each one's mean ``score`` with its 95% Student-t interval as an error bar."""
    plt = _pyplot()
    rows = eval_set.table(score)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(rows) + 2), 3.4), constrained_layout=True)
    means = [r["mean"] for r in rows]
    errs = [[r["mean"] - r["ci95_low"] for r in rows], [r["ci95_high"] - r["mean"] for r in rows]]
    ax.bar(range(len(rows)), means, yerr=errs, capsize=6, color="#0969da", alpha=0.85)
    for i, r in enumerate(rows):
        ax.annotate(f"{r['mean']:.2f}±{r['stderr']:.2f}", (i, r["ci95_high"]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), [r["config"] for r in rows], rotation=15 if len(rows) > 3 else 0)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel(f"{score} (mean over tasks)")
    ks = sorted({r["epochs"] for r in rows})
    ax.set_title(f"eval set {eval_set.name}: 95% CI (k={', '.join(map(str, ks))})", fontsize=10)
    plt.close(fig)
    return fig


__all__ = ["plot_comparison", "plot_evaluation", "plot_set", "rolling_accuracy"]
