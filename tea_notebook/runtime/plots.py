"""Matplotlib plots read from the event stream: one run (tokens, cost and latency per step) and a
workspace's runs (runs over time by status, tool calls by tool). matplotlib is imported on use."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tea_notebook.runtime.trajectory import Trajectory
    from tea_notebook.workspace import Workspace


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        from tea_notebook.errors import TeaError

        raise TeaError("plots need matplotlib: pip install matplotlib") from None
    return plt


def plot_run(traj: "Trajectory") -> Any:
    """Tokens, cost and model latency per step of one run (sub-agents' calls on their own bars)."""
    plt = _pyplot()
    steps = [s for s in traj.steps if not s.replayed]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2), constrained_layout=True)
    numbers = [s.number for s in steps]
    axes[0].bar(numbers, [s.prompt_tokens for s in steps], label="prompt")
    axes[0].bar(
        numbers, [s.completion_tokens for s in steps], bottom=[s.prompt_tokens for s in steps], label="completion"
    )
    axes[0].set_title("tokens per step")
    axes[0].legend(fontsize=8)
    axes[1].bar(numbers, [s.cost for s in steps], color="#b35900")
    axes[1].set_title("cost per step (USD)")
    axes[2].plot(numbers, [1000 * s.latency for s in steps], marker="o")
    axes[2].set_title("model latency per step (ms)")
    for ax in axes:
        ax.set_xlabel("step")
    fig.suptitle(f"{traj.agent} · {traj.status} · run {traj.run_id}", fontsize=10)
    plt.close(fig)
    return fig


def plot_runs(workspace: "Workspace", limit: int = 200) -> Any:
    """Runs over time coloured by status, and tool calls by tool, across a workspace."""
    plt = _pyplot()
    runs = workspace.db.runs(limit, parent_id=None)
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.4), constrained_layout=True)
    colours = {
        "success": "#1a7f37",
        "failed": "#b35900",
        "max_steps": "#d4a72c",
        "interrupted": "#6e40c9",
        "error": "#cf222e",
        "running": "#0969da",
    }
    for status in sorted({r["status"] for r in runs}):
        mine = [r for r in runs if r["status"] == status]
        axes[0].scatter(
            [dt.datetime.fromtimestamp(r["started"]) for r in mine],
            [len(r["task"]) for r in mine],
            label=status,
            color=colours.get(status, "#57606a"),
        )
    axes[0].set_title(f"runs over time ({len(runs)})")
    axes[0].set_ylabel("task length (characters)")
    axes[0].legend(fontsize=8)
    fig.autofmt_xdate()
    calls = Counter(name for (name,) in workspace.db.tool_call_names())
    top = calls.most_common(15)
    axes[1].barh([n for n, _ in top][::-1], [c for _, c in top][::-1])
    axes[1].set_title("tool calls by tool")
    plt.close(fig)
    return fig
