"""``%%tool``: the functions a cell defines registered as tools, their source kept exactly as written
(with the imports from other cells their bodies read, so a stored tool rebuilds after a restart)."""

from __future__ import annotations

import ast
import textwrap
from typing import Any

from IPython.core.error import UsageError

from tea_notebook.errors import TeaError


def register_cell_tools(
    shell: Any,
    workspace: Any,
    cell: str,
    name: str | None,
    toolkit: str | None,
    category: str,
    *,
    idempotent: bool = False,
) -> list[Any]:
    """Run ``cell`` in ``shell`` and register each function it defines (``name`` only when it defines
    one; ``idempotent``: ``%%tool --idempotent``); the registered records. UsageError for a cell that is
    not valid Python, defines none, raises."""
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

    registered = []
    try:
        for node in defs:
            fn = shell.user_ns[node.name]
            # whole lines, decorators and trailing comments included, exactly as written
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            source = textwrap.dedent("\n".join(cell.splitlines()[first - 1 : node.end_lineno]))
            source = with_imports(shell, node, source)
            built = make_tool(fn, name=name, toolkit=toolkit, category=category, source=source, idempotent=idempotent)
            registered.append(workspace.tools.register(built))
    except TeaError as exc:
        raise UsageError(str(exc)) from None
    return registered


def with_imports(shell: Any, node: ast.FunctionDef | ast.AsyncFunctionDef, source: str) -> str:
    """The tool's source preceded by the imports (from other cells) its body reads, so the stored
    record rebuilds it after a restart; names no import brings back are warned about."""
    import warnings

    from tea_notebook.notebook.cell_imports import needed_imports

    history = list(getattr(getattr(shell, "history_manager", None), "input_hist_parsed", None) or [])
    imports, missing = needed_imports(node, shell.user_ns, history)
    if missing:
        warnings.warn(
            f"%%tool {node.name}: it uses {', '.join(missing)} from the notebook, which the stored tool does not "
            "include: after a kernel restart (or in another process) it fails with NameError. Define them inside "
            "the function, pass them as arguments, or import them.",
            stacklevel=2,
        )
    return "\n".join(imports) + "\n\n\n" + source if imports else source


__all__ = ["register_cell_tools", "with_imports"]
