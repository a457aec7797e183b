"""The person's side of the agent's cells: ``%%agent NAME --cells [MODE]``, ``%tea proposals``,
``%tea approve P`` / ``%%tea approve P`` + code, ``%tea reject P [reason]`` and ``%tea fix`` ("send
error to agent").

A ``--cells`` run goes on in the background (the kernel stays free: the page's decisions arrive and an
approved cell runs as the notebook's own cell) with the ``notebook`` environment bound and its mode
given as a grant (:mod:`tea_notebook.runtime.cell_modes`); its live view stays in the ``%%agent``
cell, and new cells go below it. ``%tea fix [CELL_ID]`` starts such a run whose task is the failing
cell: its code, its traceback and the names it uses that are in scope (types; values too with
``--grant kernel.read``), asking for an edit of that cell.
"""

from __future__ import annotations

import ast
import asyncio
import reprlib
from typing import Any, Callable

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicArgumentParser

from tea_notebook.envs.cell_proposals import cell_error, outputs_text
from tea_notebook.errors import TeaError
from tea_notebook.notebook.listing import Text
from tea_notebook.redaction import redact
from tea_notebook.runtime.cell_modes import CELL_MODES, READ_GRANT, cell_grants

SUBCOMMANDS = ("proposals", "approve", "reject", "fix")
"""The ``%tea`` subcommands of this module."""
FIX_AGENT = "fixer"
"""The agent ``%tea fix`` hands a failing cell to, unless ``--agent`` names another."""
CELLS_HELP = (
    "work in this notebook: propose cells the person approves (MODE ask, the default; read: values of "
    "variables readable too; auto: run as proposed, needs --grant kernel.write); runs in the background"
)
USAGE = {
    "approve": "usage: %tea approve P (runs proposal P as proposed) · %%tea approve P + the code to run",
    "reject": "usage: %tea reject P [reason]",
    "fix": "usage: %tea fix [CELL_ID] [--agent NAME] [--model M] [--grant PERM] [--quiet]",
}
_VALUE = reprlib.Repr()
_VALUE.maxstring = _VALUE.maxother = 200


def notebook_of(magics: Any) -> Any:
    """The kernel's :class:`~tea_notebook.notebook.cells_comm.LabCells` (set by ``%load_ext``)."""
    cells = getattr(magics, "cells", None)
    if cells is None:
        raise UsageError("the agent's cells need %load_ext tea_notebook in this kernel")
    return cells


# -- %%agent --cells ---------------------------------------------------------------------------------
def cells_envs(mode: str, envs: list[str]) -> list[str]:
    """The environments a ``--cells MODE`` run binds: ``notebook`` (and ``kernel`` in ``read``, whose
    values it may read)."""
    wanted = ["notebook"] + (["kernel"] if mode == "read" else [])
    return list(envs) + [e for e in wanted if e not in envs]


def checked_grants(mode: str, grants: list[str]) -> list[str]:
    """The run's grants with the mode's; UsageError naming the flag when the mode is unknown or ``auto``
    lacks ``--grant kernel.write``."""
    if mode not in CELL_MODES:
        raise UsageError(f"--cells {mode}: the approval mode is one of {', '.join(CELL_MODES)}")
    try:
        return cell_grants(mode, grants)
    except ValueError:
        raise UsageError(
            "--cells auto runs the agent's cells without asking: it needs the kernel.write grant given up front "
            "(add --grant kernel.write)"
        ) from None


def start_in_notebook(
    magics: Any,
    agent: Any,
    task: str,
    *,
    model: str | None,
    grants: list[str],
    quiet: bool,
    files: list[str] | None = None,
    api_base: str | None = None,
    build_task: Callable[[], str] | None = None,
    wait_started: bool = True,
) -> Any:
    """Start ``agent`` in the background working in this notebook, its origin the current cell (new
    cells go below it); ``build_task`` (run in the background, where the page can answer) makes the
    task when it needs the page's cells (then the run starts after this cell: ``wait_started=False``).
    Returns the run's handle."""
    from tea_notebook.notebook.live import LiveView, cell_id, follow_in_view

    cells = notebook_of(magics)
    origin = cell_id()
    view = None if quiet or not magics.live else LiveView(magics.update_interval, background=True)

    async def run(ctx: Any) -> Any:
        text = task if build_task is None else await asyncio.to_thread(build_task)
        return await agent.run(text, files or None, model=model, context=ctx, grants=grants, raise_on_error=False)

    def start(ctx: Any) -> Any:
        cells.fallback.remember(ctx.id, origin, agent.name)  # before the run can propose anything
        return run(ctx)

    handle = agent.workspace.jobs.start(
        agent.name, task, start, on_event=view, model_options={"api_base": api_base} if api_base else None
    )
    if view is not None:
        follow_in_view(handle, view)
    if wait_started:
        handle.wait_started()  # milliseconds: so the cell's value names the run
    return handle


# -- %tea proposals / approve / reject / fix ------------------------------------------------------------
def run_subcommand(magics: Any, cmd: str, words: list[str], cell: str | None) -> Any:
    """``%tea proposals``, ``%tea approve P`` (``%%tea approve P`` + code), ``%tea reject P [reason]``,
    ``%tea fix ...``."""
    cells = notebook_of(magics)
    fallback = cells.fallback
    if cell is not None and cmd != "approve":
        raise UsageError(f"%%tea is only for %%tea approve P + code, not {cmd!r}: use %tea {cmd} on one line")
    try:
        if cmd == "proposals":
            pending = cells.board.pending()
            waiting = [p for p in pending if not p.decided.is_set()]
            if waiting and magics.shell is not None:
                first = waiting[0]
                magics.shell.set_next_input(f"%%tea approve {first.id}\n{first.code}", replace=False)
            return Text(fallback.listing())
        if cmd == "approve":
            if len(words) != 1:
                raise UsageError(USAGE["approve"])
            fallback.approve(words[0], cell)
            return None
        if cmd == "reject":
            if not words:
                raise UsageError(USAGE["reject"])
            proposal = fallback.reject(words[0], " ".join(words[1:]))
            return Text(f"proposal {proposal.id} rejected: it will not run")
        return fix(magics, words)
    except ValueError as exc:
        raise UsageError(f"%tea {cmd}: {exc}") from None


def fix(magics: Any, words: list[str]) -> Any:
    """``%tea fix [CELL_ID] [--agent NAME] [--model M] [--grant PERM] [--quiet]``: an agent in ``ask``
    mode gets the failing cell and proposes an edit of it; returns the run's handle."""
    from tea_notebook.notebook.agent_cell import agent_for

    parser = MagicArgumentParser(prog="%tea fix", add_help=False)
    parser.add_argument("cell", nargs="?")
    parser.add_argument("--agent", default=FIX_AGENT)
    parser.add_argument("--model")
    parser.add_argument("--grant", action="append", default=[])
    parser.add_argument("--quiet", action="store_true")
    try:
        args = parser.parse_args(words)
    except (UsageError, SystemExit) as exc:
        raise UsageError(f"%tea fix: {exc}; {USAGE['fix']}") from None
    cells = notebook_of(magics)
    shell = magics.shell
    grants = checked_grants("ask", list(args.grant))
    readable = READ_GRANT in grants or "kernel.write" in grants

    def build() -> str:
        return fix_task(cells.cells(), args.cell, shell, readable)

    task = f"fix the failing cell {args.cell or '(the last one)'}"
    build_later = None
    if cells.comm is None:  # the fallback reads the history here: a bad CELL_ID fails this cell at once
        task = build()
    else:
        build_later = build  # the page answers only once this cell has ended
    ws = magics.workspace
    agent = agent_for(ws, args.agent, None, {"envs": ["notebook"]})
    try:
        return start_in_notebook(
            magics,
            agent,
            task,
            model=args.model or magics.default_model,
            grants=grants,
            quiet=args.quiet,
            build_task=build_later,
            wait_started=build_later is None,
        )
    except TeaError as exc:
        raise UsageError(f"%tea fix: {exc}") from None


def fix_task(cells: list[dict[str, Any]], cell_id: str | None, shell: Any, readable: bool) -> str:
    """The task of ``%tea fix``: the failing cell's code, its traceback and the names it uses that are
    in scope; ValueError when the cell is not there or did not fail."""
    if cell_id:
        found = [c for c in cells if c.get("id") == cell_id]
        if not found:
            known = ", ".join(str(c.get("id")) for c in cells[-10:]) or "none"
            raise ValueError(f"no cell {cell_id!r} in the notebook (last ones: {known})")
        target = found[0]
    else:
        failing = [c for c in cells if cell_error(c.get("outputs") or [])]
        if not failing:
            raise ValueError("no cell of this notebook has failed: nothing to fix (name one: %tea fix CELL_ID)")
        target = max(failing, key=lambda c: (c.get("execution_count") or 0, c.get("index") or 0))
    outputs = target.get("outputs") or []
    error = cell_error(outputs)
    if error is None:
        raise ValueError(f"cell {target.get('id')} did not fail (its last run raised no error)")
    code = str(target.get("source") or "")
    trace = outputs_text([o for o in outputs if o.get("output_type") == "error"])
    trace = trace if len(trace) <= 3000 else "…" + trace[-3000:]
    scope = names_in_scope(code, shell, readable)
    lines = [
        f"Cell {target.get('id')} of the notebook failed with {error['ename']}: {error['evalue']}",
        "",
        "Its code:",
        code,
        "",
        "The traceback:",
        trace,
    ]
    if scope:
        lines += ["", "Names it uses that exist in the notebook:", *scope]
    lines += [
        "",
        f"Fix it: propose an edit of cell {target.get('id')} with notebook_propose_edit (the cell's whole new source; "
        "read it with notebook_read_cell first). The person approves it and the cell runs; if it still fails, "
        "propose again. Finish once it ran without an error or the person rejected the fix.",
    ]
    return str(redact("\n".join(lines)))


def names_in_scope(code: str, shell: Any, readable: bool) -> list[str]:
    """``name: type …`` of each name ``code`` reads that the namespace holds (no value's code runs
    unless ``readable``: the ``kernel.read`` grant)."""
    from tea_notebook.envs.kernel import describe, describe_static

    try:
        source = shell.transform_cell(code) if shell is not None else code
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    ns = getattr(shell, "user_ns", {}) or {}
    seen: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in seen:
            seen.append(node.id)
    lines = []
    for name in seen[:30]:
        if name not in ns or name.startswith("_"):
            continue
        value = ns[name]
        if readable:
            lines.append(f"{name}: {describe(value)} = {_VALUE.repr(value)}")
        else:
            lines.append(f"{name}: {describe_static(value)}")
    if lines and not readable:
        lines.append("(types only: values need --grant kernel.read)")
    return lines


__all__ = [
    "CELLS_HELP",
    "CELL_MODES",
    "FIX_AGENT",
    "SUBCOMMANDS",
    "cells_envs",
    "checked_grants",
    "fix",
    "fix_task",
    "names_in_scope",
    "notebook_of",
    "run_subcommand",
    "start_in_notebook",
]
