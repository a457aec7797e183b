"""The approval modes of the ``notebook`` environment, carried as grants of the run tree.

A run works in the person's notebook (:mod:`tea_notebook.envs.notebook_cells`) in one of three modes:
``ask`` (every proposed cell, edit or run waits for the person), ``read`` (the same, and the run may
read the values of the notebook's variables: the ``kernel.read`` grant) or ``auto`` (proposals run as
proposed; needs ``kernel.write`` given up front). The mode travels as the grant ``cells.MODE``, so any
agent kind takes it through its ``grants``: ``%%agent NAME --cells MODE``, ``agent.run(task, cells=MODE)``
or ``grants=cell_grants(MODE, grants)``.
"""

from __future__ import annotations

from typing import Iterable

CELL_MODES = ("ask", "read", "auto")
"""The approval modes, the default first."""
PREFIX = "cells."
#: what ``auto`` needs up front, and ``read`` gives
WRITE_GRANT, READ_GRANT = "kernel.write", "kernel.read"
#: given to a run by the person's first approval in ``ask`` / ``read``: it may run the cells it proposes
RUN_GRANT = "cells.run"


def cell_grants(mode: str, grants: Iterable[str] = ()) -> list[str]:
    """``grants`` with the mode's grant (and ``kernel.read`` for ``read``); ValueError naming the mode
    when it is not one of :data:`CELL_MODES`, or when ``auto`` comes without ``kernel.write``."""
    given = list(grants)
    if mode not in CELL_MODES:
        raise ValueError(f"cells={mode!r}: the approval mode is one of {', '.join(CELL_MODES)}")
    if mode == "auto" and WRITE_GRANT not in given:
        raise ValueError(
            "cells='auto' runs the agent's cells without asking: it needs the kernel.write grant given up front "
            '(%%agent NAME --cells auto --grant kernel.write, or grants=["kernel.write"])'
        )
    extra = [PREFIX + mode] + ([READ_GRANT] if mode == "read" else [])
    return given + [g for g in extra if g not in given]


def mode_of(grants: Iterable[str]) -> str:
    """The approval mode a run's grants give (``ask`` when none does; the most careful when several do)."""
    present = {g[len(PREFIX) :] for g in grants if g.startswith(PREFIX)}
    return next((m for m in CELL_MODES if m in present), CELL_MODES[0])


__all__ = ["CELL_MODES", "READ_GRANT", "RUN_GRANT", "WRITE_GRANT", "cell_grants", "mode_of"]
