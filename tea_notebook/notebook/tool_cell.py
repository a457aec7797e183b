"""``%%tool``: the functions a cell defines registered as tools, their source kept exactly as written
(with the imports from other cells their bodies read, so a stored tool rebuilds after a restart).

``%%tool --process``: each call runs in a child process of the run (as generated tools do, but
without their sandbox's boundary), so Stop can end it; the tool then sees no kernel variables, so
a cell whose functions read any, or take a ``ToolContext``, is refused."""

from __future__ import annotations

import argparse
import ast
import shlex
import textwrap
from typing import Any, NoReturn

from IPython.core.error import UsageError

from tea_notebook.errors import TeaError


class _LineParser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"%%tool: {message}")


def parse_tool_line(line: str) -> argparse.Namespace:
    """The options on a ``%%tool`` line (:data:`tea_notebook.flags.TOOL_CELL`); UsageError naming what
    is wrong."""
    from tea_notebook.flags import TOOL_CELL

    parser = _LineParser(prog="%%tool", add_help=False)
    for flag in TOOL_CELL:
        flag.add_to(parser)
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"%%tool: {exc}") from None
    return parser.parse_args(words)


def register_cell_tools(
    shell: Any,
    workspace: Any,
    cell: str,
    name: str | None,
    toolkit: str | None,
    category: str,
    *,
    idempotent: bool = False,
    process: bool = False,
) -> list[Any]:
    """Run ``cell`` in ``shell`` and register each function it defines (``name`` only when it defines
    one; ``idempotent``: ``%%tool --idempotent``; ``process``: ``%%tool --process``, each call in a child
    process); the registered records. UsageError for a cell that is not valid Python, defines none,
    raises, or (with ``process``) has a function that reads kernel variables or takes a
    ``ToolContext``; nothing is registered then."""
    try:
        tree = ast.parse(cell)
    except SyntaxError as exc:
        raise UsageError(f"the cell is not valid Python: {exc}") from None
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs:
        raise UsageError("%%tool needs a cell that defines at least one function")
    if name and len(defs) > 1:
        raise UsageError("--name works only when the cell defines one function")
    result = shell.run_cell(cell, silent=True, store_history=False)
    if not result.success:
        raise UsageError(f"the cell raised {type(result.error_in_exec).__name__}: {result.error_in_exec}")
    from tea_notebook.protocol.tools import make_tool

    built = []
    try:
        for node in defs:
            fn = shell.user_ns[node.name]
            # whole lines, decorators and trailing comments included, exactly as written
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            source = textwrap.dedent("\n".join(cell.splitlines()[first - 1 : node.end_lineno]))
            source, missing = source_with_imports(shell, node, source)
            if process and missing:
                raise UsageError(
                    f"%%tool --process: {node.name} uses {', '.join(missing)} from the notebook, which its process "
                    "cannot see; define them inside the function, pass them as arguments or import them"
                )
            if missing:
                warn_missing(node.name, missing)
            metadata = {"process": True} if process else None
            tool = make_tool(
                fn,
                name=name,
                toolkit=toolkit,
                category=category,
                source=source,
                idempotent=idempotent,
                metadata=metadata,
            )
            if process and tool.context_param:
                raise UsageError(
                    f"%%tool --process: {node.name} takes a ToolContext ({tool.context_param}), which exists only "
                    "in the kernel; drop the parameter or --process"
                )
            built.append(tool)
        return [workspace.tools.register(tool) for tool in built]
    except TeaError as exc:
        raise UsageError(str(exc)) from None


def with_imports(shell: Any, node: ast.FunctionDef | ast.AsyncFunctionDef, source: str) -> str:
    """The tool's source preceded by the imports (from other cells) its body reads, so the stored
    record rebuilds it after a restart; names no import brings back are warned about."""
    source, missing = source_with_imports(shell, node, source)
    if missing:
        warn_missing(node.name, missing)
    return source


def source_with_imports(shell: Any, node: ast.FunctionDef | ast.AsyncFunctionDef, source: str) -> tuple[str, list[str]]:
    """The tool's source preceded by the imports (from other cells) its body reads, and the notebook
    names it reads that no import brings back."""
    from tea_notebook.notebook.cell_imports import needed_imports

    history = list(getattr(getattr(shell, "history_manager", None), "input_hist_parsed", None) or [])
    imports, missing = needed_imports(node, shell.user_ns, history)
    return ("\n".join(imports) + "\n\n\n" + source if imports else source), list(missing)


def warn_missing(function: str, missing: list[str]) -> None:
    """Warn that ``function`` reads notebook names its stored source does not bring back."""
    import warnings

    warnings.warn(
        f"%%tool {function}: it uses {', '.join(missing)} from the notebook, which the stored tool does not "
        "include: after a kernel restart (or in another process) it fails with NameError. Define them inside "
        "the function, pass them as arguments, or import them.",
        stacklevel=2,
    )


__all__ = ["parse_tool_line", "register_cell_tools", "source_with_imports", "warn_missing", "with_imports"]
