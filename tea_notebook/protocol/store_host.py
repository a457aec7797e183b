"""What every registry needs of the workspace that holds it: :class:`StoreHost`.

It names no registry, so the modules the registries are built from (``registry``, ``context``,
``current``) can type their workspace without reaching back up to the registries themselves;
:class:`~tea_notebook.protocol.host.RegistryHost` adds the four registries on top of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tea_notebook.models.embedders import Embedder
    from tea_notebook.store.database import Database


class StoreHost(Protocol):
    """A workspace as a registry's storage sees it: its folder, database and embedder."""

    @property
    def path(self) -> Path:
        """The workspace folder (vector index files live under it)."""
        ...

    @property
    def db(self) -> "Database":
        """The workspace database (``tea.db``)."""
        ...

    @property
    def embedder(self) -> "Embedder":
        """The embedder of every registry's vector index."""
        ...


__all__ = ["StoreHost"]
