"""Matplotlib plots read from the event stream: one run (tokens, cost and latency per step), a
workspace's runs (runs over time by status, tool calls by tool) and its self-evolution (memory growth
over tasks, tools created vs reused, first-pass validity and fix iterations). matplotlib is imported
on use."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost
    from tea_notebook.runtime.trajectory import Trajectory


def token_label(model: str, what: str = "tokens") -> str:
    """An axis label for token counts, marked as estimates for a scripted offline model."""
    from tea_notebook.models.client import tokens_estimated

    return f"{what} (estimated: scripted model)" if tokens_estimated(model) else what


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        from tea_notebook.errors import TeaError

        raise TeaError("plots need matplotlib: pip install matplotlib") from None
    return plt


def subplots(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``plt.subplots`` making an :class:`~tea_notebook.runtime.figures.ImageFigure`: it shows as an
    image under any matplotlib backend (``matplotlib.use("Agg")`` included)."""
    plt = _pyplot()
    from tea_notebook.runtime.figures import ImageFigure

    return plt.subplots(*args, FigureClass=ImageFigure, **kwargs)


def whole_numbers(*axes: Any, x: bool = True, y: bool = False) -> None:
    """Ticks at whole numbers only on the ``x`` (and ``y``) axes of ``axes`` (steps, counts), even when
    the view holds a single one (MaxNLocator falls back to fractions below ``min_n_ticks`` integers)."""
    from matplotlib.ticker import MaxNLocator

    for ax in axes:
        if x:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        if y:
            ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def plot_run(traj: "Trajectory") -> Any:
    """Tokens, cost and time per step of one run (the model's and the tool calls' time stacked;
    sub-agents' calls on their own bars); for a run in stages (ToolSelf), tokens per step coloured
    by stage, tokens per stage and toolbox size per stage; for a conversation (CORAL),
    :func:`plot_conversation`."""
    if traj.stages:
        return plot_stages(traj)
    if traj.messages:
        return plot_conversation(traj)
    plt = _pyplot()
    steps = [s for s in traj.steps if not s.replayed]
    fig, axes = subplots(1, 3, figsize=(12, 3.2), constrained_layout=True)
    numbers = [s.number for s in steps]
    axes[0].bar(numbers, [s.prompt_tokens for s in steps], label="prompt")
    axes[0].bar(
        numbers, [s.completion_tokens for s in steps], bottom=[s.prompt_tokens for s in steps], label="completion"
    )
    axes[0].set_title("tokens per step")
    axes[0].set_ylabel(token_label(traj.model))
    axes[0].legend(fontsize=8)
    axes[1].bar(numbers, [s.cost for s in steps], color="#b35900")
    axes[1].set_title("cost per step (USD)")
    axes[2].bar(numbers, [s.latency for s in steps], label="model", color="#0969da")
    axes[2].bar(
        numbers, [s.tool_time for s in steps], bottom=[s.latency for s in steps], label="tools", color="#8250df"
    )
    axes[2].set_title("time per step (s)")
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.set_xlabel("step")
    whole_numbers(*axes)
    fig.suptitle(f"{traj.agent} · {traj.status} · run {traj.run_id}", fontsize=10)
    plt.close(fig)
    return fig


def stage_totals(traj: "Trajectory") -> list[dict[str, Any]]:
    """Per stage of a ToolSelf run: index, sub-goal, steps, prompt and completion tokens (the
    engine's call that made the stage included), toolbox size."""
    ordered = sorted(traj.stages, key=lambda st: st.get("first_step", 0))
    out = []
    for i, st in enumerate(ordered):
        end = ordered[i + 1].get("first_step", 0) if i + 1 < len(ordered) else None
        mine = [s for s in traj.steps if s.number >= st.get("first_step", 0) and (end is None or s.number < end)]
        out.append(
            {
                "index": st.get("index", i + 1),
                "sub_goal": st.get("sub_goal", ""),
                "steps": len(mine),
                "prompt_tokens": sum(s.prompt_tokens for s in mine),
                "completion_tokens": sum(s.completion_tokens for s in mine),
                "toolbox": len(st.get("toolbox", [])),
            }
        )
    return out


def plot_stages(traj: "Trajectory") -> Any:
    """A ToolSelf run: prompt tokens per step coloured by stage (each reset shows as a drop), tokens
    per stage, and toolbox size per stage."""
    plt = _pyplot()
    totals = stage_totals(traj)
    ordered = sorted(traj.stages, key=lambda st: st.get("first_step", 0))
    fig, axes = subplots(1, 3, figsize=(13, 3.4), constrained_layout=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["#0969da"])
    for i, st in enumerate(ordered):
        end = ordered[i + 1].get("first_step", 0) if i + 1 < len(ordered) else None
        mine = [s for s in traj.steps if s.number >= st.get("first_step", 0) and (end is None or s.number < end)]
        axes[0].bar(
            [s.number for s in mine],
            [s.prompt_tokens for s in mine],
            color=colours[i % len(colours)],
            label=f"stage {st.get('index', i + 1)}",
        )
    axes[0].set_title("prompt tokens per step, by stage")
    axes[0].set_xlabel("step")
    axes[0].set_ylabel(token_label(traj.model, "prompt tokens"))
    if len(ordered) <= 8:
        axes[0].legend(fontsize=8)
    labels = [str(t["index"]) for t in totals]
    axes[1].bar(labels, [t["prompt_tokens"] for t in totals], label="prompt")
    axes[1].bar(
        labels,
        [t["completion_tokens"] for t in totals],
        bottom=[t["prompt_tokens"] for t in totals],
        label="completion",
    )
    axes[1].set_title("tokens per stage")
    axes[1].set_ylabel(token_label(traj.model))
    axes[1].legend(fontsize=8)
    axes[2].bar(labels, [t["toolbox"] for t in totals], color="#1a7f37")
    axes[2].set_title("toolbox size per stage")
    for ax in axes[1:]:
        ax.set_xlabel("stage")
    whole_numbers(axes[0])
    whole_numbers(axes[2], x=False, y=True)
    fig.suptitle(f"{traj.agent} · {traj.status} · {len(totals)} stages · run {traj.run_id}", fontsize=10)
    plt.close(fig)
    return fig


def plot_conversation(traj: "Trajectory") -> Any:
    """A CORAL run: each message on a timeline by sender (lines from sender to recipient), and
    tokens per agent."""
    plt = _pyplot()
    fig, axes = subplots(1, 2, figsize=(13, 3.6), constrained_layout=True)
    messages = sorted(traj.messages, key=lambda m: m.get("seq", 0))
    start = min((m.get("time", 0.0) for m in messages), default=0.0)
    agents = list(dict.fromkeys([c.agent for c in traj.children] + [m.get("sender", "") for m in messages]))
    row = {a: i for i, a in enumerate(agents)}
    for m in messages:
        x = m.get("time", 0.0) - start
        for target in m.get("mentions") or []:
            if target in row:
                axes[0].plot([x, x], [row[m["sender"]], row[target]], color="#8c959f", linewidth=0.8)
        axes[0].scatter([x], [row[m.get("sender", "")]], color="#0969da", zorder=3, s=18)
    axes[0].set_yticks(range(len(agents)), agents, fontsize=8)
    axes[0].set_xlabel("seconds since the first message")
    axes[0].set_title(f"messages ({len(messages)}): sender → mentioned agents")
    ledger = traj.ledger()["by_agent"]
    names = [a for a in agents if a in ledger]
    axes[1].barh(names, [ledger[a]["prompt_tokens"] for a in names], label="prompt")
    axes[1].barh(
        names,
        [ledger[a]["completion_tokens"] for a in names],
        left=[ledger[a]["prompt_tokens"] for a in names],
        label="completion",
    )
    axes[1].set_title("tokens per team agent (own model calls)")
    axes[1].set_xlabel(token_label(traj.model))
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{traj.agent} · {traj.status} · run {traj.run_id}", fontsize=10)
    plt.close(fig)
    return fig


def plot_runs(workspace: "RunHost", limit: int = 200) -> Any:
    """Runs over time coloured by status, and tool calls by tool, across a workspace."""
    plt = _pyplot()
    runs = workspace.db.runs(limit, parent_id=None)
    fig, axes = subplots(1, 2, figsize=(12, 3.4), constrained_layout=True)
    colours = {
        "success": "#1a7f37",
        "failed": "#b35900",
        "max_steps": "#d4a72c",
        "unverified": "#9a6700",
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


# -- self-evolution ------------------------------------------------------------------------------
_STAGE_COLOURS = {"first pass": "#1a7f37", "after fixes": "#d4a72c", "discarded": "#cf222e"}


def evolution_data(workspace: "RunHost") -> dict[str, Any]:
    """The numbers :func:`plot_evolution` draws, read from the event store and the change log.

    Tasks are the top-level runs, oldest first (a ``%tea create-tool`` request, an ``%%agent`` cell,
    a Mem²Evolve task …); what happened between one task's start and the next's counts for it.

    - ``tasks``: ``[{"run", "agent", "task"}]``;
    - ``experience`` / ``tools``: experience entries in memory and tools created by the tool manager,
      after each task (index 0: before the first);
    - ``created`` / ``reused``: per task, tools the tool manager registered, and tools it created in an
      earlier task that were used again (called, or chosen instead of a new one);
    - ``candidates``: every validated tool candidate in order, ``{"tool", "fix_iterations", "outcome"}``
      with outcome ``first pass``, ``after fixes`` or ``discarded``;
    - ``first_pass_validity`` and ``mean_fix_iterations`` as :func:`~tea_notebook.evolve.stats.tool_stats`
      computes them.
    """
    import json

    db = workspace.db
    workspace.events.flush()
    runs = sorted(db.runs(10**9, parent_id=None), key=lambda r: r["started"])
    parent = {r["id"]: r["parent_id"] for r in runs}

    def root(run_id: str) -> str:
        seen = set()
        while parent.get(run_id) and run_id not in seen:
            seen.add(run_id)
            run_id = parent[run_id]
        return run_id

    tasks = [r for r in runs if not r["parent_id"]]
    index = {r["id"]: i for i, r in enumerate(tasks)}
    starts = [r["started"] for r in tasks]

    def task_at(when: float) -> int:
        """The task whose window [its start, the next start) holds ``when`` (-1: before the first)."""
        lo = -1
        for i, start in enumerate(starts):
            if start <= when:
                lo = i
            else:
                break
        return lo

    n = len(tasks)
    created = [0] * n
    reused_sets: list[set[str]] = [set() for _ in range(n)]
    born: dict[str, float] = {}  # generated tool -> when it was first registered
    born_in: dict[str, int] = {}  # ... and in which task
    candidates: list[dict[str, Any]] = []
    events = db.events_of_type(["tool_created", "tool_discarded", "tool_reused", "tool_call"])
    for run_id, kind, when, raw in events:
        data = json.loads(raw)
        task = index.get(root(run_id), task_at(when))
        if kind == "tool_created":
            candidates.append(
                {
                    "tool": data.get("tool", ""),
                    "fix_iterations": int(data.get("fix_iterations") or 0),
                    "outcome": "first pass" if data.get("first_pass") else "after fixes",
                }
            )
            born.setdefault(data.get("tool", ""), when)
            born_in.setdefault(data.get("tool", ""), task)
            if task >= 0:
                created[task] += 1
        elif kind == "tool_discarded":
            candidates.append(
                {
                    "tool": data.get("tool", ""),
                    "fix_iterations": int(data.get("fix_iterations") or 0),
                    "outcome": "discarded",
                }
            )
        else:
            name = data.get("tool") if kind == "tool_reused" else data.get("name")
            if name in born and born[name] <= when and born_in[name] < task:
                reused_sets[task].add(name)  # used again in a later task than the one that made it

    def counts_after(times: list[tuple[float, int]]) -> list[int]:
        """Running totals of ``(time, +1/-1)`` changes at the end of each task's window."""
        out, total, j = [], 0, 0
        times = sorted(times)
        bounds = starts[1:] + [float("inf")] if starts else []
        before = starts[0] if starts else float("inf")
        while j < len(times) and times[j][0] < before:
            total += times[j][1]
            j += 1
        out.append(total)
        for bound in bounds:
            while j < len(times) and times[j][0] < bound:
                total += times[j][1]
                j += 1
            out.append(total)
        return out

    live: set[str] = set()
    changes: list[tuple[float, int]] = []
    for change in db.changes_since("experience", 0):
        if change.op == "unregister":
            if change.name in live:
                live.discard(change.name)
                changes.append((change.at, -1))
        elif change.name not in live:
            live.add(change.name)
            changes.append((change.at, +1))
    tool_births = [(when, +1) for when in born.values()]
    registered = [c for c in candidates if c["outcome"] != "discarded"]
    return {
        "tasks": [{"run": r["id"], "agent": r["agent"], "task": r["task"]} for r in tasks],
        "experience": counts_after(changes),
        "tools": counts_after(tool_births),
        "created": created,
        "reused": [len(s) for s in reused_sets],
        "candidates": candidates,
        "first_pass_validity": (
            sum(c["outcome"] == "first pass" for c in registered) / len(registered) if registered else 0.0
        ),
        "mean_fix_iterations": (sum(c["fix_iterations"] for c in candidates) / len(candidates) if candidates else 0.0),
    }


def _candidate_label(candidate: dict[str, Any]) -> str:
    fixes = candidate["fix_iterations"]
    if candidate["outcome"] == "first pass":
        return "first pass"
    counted = f"{fixes} fix{'es' if fixes != 1 else ''}"
    return f"discarded after {counted}" if candidate["outcome"] == "discarded" else counted


def plot_evolution(workspace: "RunHost") -> Any:
    """Self-evolution over tasks: memory growth (experience entries and created tools after each
    task), tools created vs reused per task, and each tool candidate's fix iterations coloured by
    how it ended (first pass, after fixes, discarded) with first-pass validity in the title.

    The figure's data is :func:`evolution_data`'s (it is also ``fig.evolution``).
    """
    plt = _pyplot()
    from matplotlib.patches import Patch

    data = evolution_data(workspace)
    n = len(data["tasks"])
    fig, axes = subplots(1, 3, figsize=(13, 3.4), constrained_layout=True)
    steps = list(range(n + 1))
    axes[0].plot(steps, data["experience"], marker="o", label="experience entries")
    axes[0].plot(steps, data["tools"], marker="s", label="tools created")
    axes[0].set_title("memory growth")
    axes[0].set_xlabel("after task")
    axes[0].set_xticks(steps)
    axes[0].legend(fontsize=8)
    numbers = list(range(1, n + 1))
    width = 0.4
    axes[1].bar([x - width / 2 for x in numbers], data["created"], width, label="created", color="#0969da")
    axes[1].bar([x + width / 2 for x in numbers], data["reused"], width, label="reused", color="#1a7f37")
    axes[1].set_title("tools created vs reused")
    axes[1].set_xlabel("task")
    axes[1].set_xticks(numbers)
    axes[1].set_ylim(0, max(data["created"] + data["reused"] + [1]) * 1.3)  # room for the legend
    axes[1].legend(fontsize=8)
    cands = data["candidates"]
    bars = axes[2].bar(
        range(1, len(cands) + 1),
        [c["fix_iterations"] for c in cands],
        color=[_STAGE_COLOURS[c["outcome"]] for c in cands],
    )
    axes[2].bar_label(bars, labels=[_candidate_label(c) for c in cands], fontsize=7, padding=2)
    axes[2].set_xticks(range(1, len(cands) + 1), [c["tool"] for c in cands], rotation=30, ha="right", fontsize=8)
    axes[2].set_ylim(0, max([c["fix_iterations"] for c in cands] + [1]) * 1.25)
    axes[2].legend(handles=[Patch(color=c, label=o) for o, c in _STAGE_COLOURS.items()], fontsize=8)
    axes[2].set_ylabel("fix iterations")
    axes[2].set_title(
        f"first-pass validity {data['first_pass_validity']:.0%} · mean fixes {data['mean_fix_iterations']:.2f}"
    )
    for ax in axes[1:]:
        ax.yaxis.get_major_locator().set_params(integer=True)
    axes[0].yaxis.get_major_locator().set_params(integer=True)
    if not n:
        axes[0].text(0.5, 0.5, "no tasks yet", transform=axes[0].transAxes, ha="center", color="#57606a")
    if not cands:
        axes[2].text(0.5, 0.5, "no tools created yet", transform=axes[2].transAxes, ha="center", color="#57606a")
    fig.suptitle(f"self-evolution over {n} task{'s' if n != 1 else ''}", fontsize=10)
    fig.evolution = data
    plt.close(fig)
    return fig
