"""Clear errors for notebook slips IPython reports cryptically (registered by ``%load_ext tea_notebook``).

A comment line above ``%%agent`` makes IPython read ``%%agent`` as a line magic and say
"Line magic function `%%agent` not found". IPython's rule is that a cell magic must be the cell's
first line; :func:`cell_magic_below_comments` says so, naming the magic, before the cell runs.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from IPython.core.error import UsageError

_CELL_MAGIC = re.compile(r"^\s*%%([A-Za-z_][\w.]*)")


def cell_magic_below_comments(shell: Any) -> Callable[[list[str]], list[str]]:
    """An input transformer (IPython's cleanup stage) that raises a :class:`UsageError` with the fix
    when a cell's first code line is a cell magic of ``shell`` below comment lines."""

    def transform(lines: list[str]) -> list[str]:
        above: list[str] = []
        for line in lines:
            if not line.strip() or line.lstrip().startswith("#"):
                above.append(line)
                continue
            found = _CELL_MAGIC.match(line)
            if found and any(x.strip() for x in above):
                name = found.group(1)
                cell_magics = getattr(getattr(shell, "magics_manager", None), "magics", {}).get("cell", {})
                if name in cell_magics:
                    raise UsageError(
                        f"%%{name} must be the first line of the cell (IPython's rule for cell magics); "
                        f"this cell has {len([x for x in above if x.strip()])} comment line(s) above it. "
                        f"Move the comment below the %%{name} line (for %%agent it becomes part of the task), "
                        "or into the cell's tags (e.g. nbval-ignore-output)."
                    )
            return lines
        return lines

    transform.has_side_effects = True  # type: ignore[attr-defined] - IPython skips it in is-complete checks
    transform.tea_hint = True  # type: ignore[attr-defined] - how load() finds it again
    return transform


def register(shell: Any) -> None:
    """Add the hints to ``shell`` once (a second ``%load_ext`` / ``%reload_ext`` replaces them)."""
    cleanup = shell.input_transformers_cleanup
    cleanup[:] = [t for t in cleanup if not getattr(t, "tea_hint", False)]
    cleanup.append(cell_magic_below_comments(shell))
