"""``%%agent``'s rules: which agent a cell runs, and which of the cell's options reach it.

What a name builds (a kind's shortcut), which options a kind takes and what it calls them all
come from the agent kinds' registration (:mod:`tea_notebook.agents.kinds`); this module turns the
cell's flags into that call (and ``--interpolate``'s variables into its task) and its errors
into ``UsageError``.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError

from tea_notebook.errors import TeaError


def agent_help() -> str:
    """The help of ``%%agent``'s AGENT argument, naming the built-in shortcuts."""
    from tea_notebook.agents.kinds import shortcut_names

    return (
        f"agent name (registered ones keep their settings); {', '.join(shortcut_names())} build an agent of "
        "their kind on first use"
    )


def kind_help() -> str:
    """The help of ``%%agent --kind``, naming the built-in kinds."""
    from tea_notebook.agents.kinds import names

    return f"build a new agent of this kind: {', '.join(names())}"


def checked_steps(max_steps: int, flag: str) -> int:
    """A step limit from a flag, checked as the Python API checks ``max_steps`` (0 is refused)."""
    from tea_notebook.runtime.agent import check_max_steps

    try:
        return check_max_steps(max_steps, flag)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def cell_options(ws: Any, args: Any) -> dict[str, Any]:
    """The agent settings the cell's ``--max-steps``, ``--tools`` and ``--env`` give, checked
    (a tool name's typo fails here, before a run is started and stored)."""
    options: dict[str, Any] = {}
    if args.max_steps is not None:
        options["max_steps"] = checked_steps(args.max_steps, "--max-steps")
    if args.tools:
        options["tools"] = [t.strip() for t in args.tools.split(",") if t.strip()]
        try:
            ws.tools.require(options["tools"], "--tools")
        except TeaError as exc:
            raise UsageError(str(exc)) from None
    if args.env:
        options["envs"] = args.env
    return options


def attached_files(paths: list[str]) -> list[str]:
    """``--file`` paths, resolved; UsageError naming the ones that are not files."""
    files = [str(Path(f).expanduser().resolve()) for f in paths]
    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        raise UsageError(f"--file: no such file {', '.join(missing)}")
    return files


def interpolate(task: str, user_ns: dict[str, Any]) -> str:
    """``--interpolate``: ``{name}`` in the task replaced by the notebook variable ``name``."""
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(task) if f is not None]
        if any(not n.isidentifier() for n in names):
            raise ValueError("only {name} of a variable can be interpolated")
        missing = [n for n in names if n not in user_ns]
        if missing:
            raise UsageError(f"--interpolate: no variable named {', '.join(missing)}")
        return task.format_map({n: user_ns[n] for n in names})
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise UsageError(f"--interpolate: {exc} (write {{{{ and }}}} for literal braces)") from None


def agent_for(ws: Any, name: str, kind: str | None, options: dict[str, Any]) -> Any:
    """The agent ``%%agent NAME`` runs: a registered one (this cell's options apply to this run
    only), a new one of ``--kind``, one of a kind by its shortcut name, or a new plain agent."""
    from tea_notebook.agents.kinds import resolve

    try:
        return resolve(ws, name, kind, options)
    except (TeaError, ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None


__all__ = ["agent_for", "agent_help", "attached_files", "cell_options", "checked_steps", "interpolate", "kind_help"]
