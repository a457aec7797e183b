"""The current workspace: a context variable the protocol layer can read (``@tool`` registers there)
without importing the Workspace, which lives above it. ``Workspace.activate`` sets it."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from tea_notebook.errors import TeaError

if TYPE_CHECKING:
    from tea_notebook.protocol.store_host import StoreHost

CURRENT: contextvars.ContextVar["StoreHost | None"] = contextvars.ContextVar("tea_workspace", default=None)
"""The active workspace of this context (thread, task), or None."""


def current_workspace(required: bool = True) -> "StoreHost | None":
    """The active workspace; with ``required`` a clear error when none is active. (Typed as a
    :class:`~tea_notebook.protocol.store_host.StoreHost`, which names no registry, so that the
    modules the registries are built from can read it; it is the whole workspace.)"""
    ws = CURRENT.get()
    if ws is None and required:
        raise TeaError("no current workspace: create one with ws = tea_notebook.Workspace(path) and call ws.activate()")
    return ws


__all__ = ["CURRENT", "current_workspace"]
