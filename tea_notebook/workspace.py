"""The Workspace: one folder holding everything persistent, and the registries that live in it."""

from __future__ import annotations

import contextvars
from pathlib import Path

from tea_notebook.errors import TeaError, WorkspaceError
from tea_notebook.models.embedders import Embedder, embedder_spec, resolve_embedder
from tea_notebook.protocol.acp import AgentRegistry
from tea_notebook.protocol.context import Context
from tea_notebook.protocol.ecp import EnvironmentRegistry
from tea_notebook.protocol.records import AgentRecord, EnvironmentRecord, ToolkitRecord, ToolRecord
from tea_notebook.protocol.tcp import ToolkitRegistry, ToolRegistry
from tea_notebook.store.database import Database

_current: contextvars.ContextVar["Workspace | None"] = contextvars.ContextVar("tea_workspace", default=None)
_DEFAULT_PATH = ".tea"


class Workspace:
    """A workspace folder: ``tea.db`` (SQLite, WAL) plus ``vectors/`` index files rebuilt from it.

    ``ws.tools`` (TCP), ``ws.toolkits``, ``ws.envs`` (ECP) and ``ws.agents`` (ACP) are registries.
    ``embedder`` is ``"minilm"`` (default, offline), ``"litellm:MODEL"`` for hosted embeddings,
    ``"hashing"`` (tests only) or an object; a named choice is remembered by the workspace.
    """

    def __init__(self, path: str | Path = _DEFAULT_PATH, *, embedder: "str | Embedder | None" = None):
        self.path = Path(path).expanduser().resolve()
        if self.path.exists() and not self.path.is_dir():
            raise WorkspaceError(f"workspace path {self.path} exists and is not a folder")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkspaceError(f"cannot create workspace folder {self.path}: {exc.strerror}") from None
        self.db = Database(self.path / "tea.db")
        stored = self.db.meta("embedder")
        self.embedder = resolve_embedder(embedder if embedder is not None else stored)
        spec = embedder_spec(self.embedder)
        if spec is not None and spec != stored:
            self.db.set_meta("embedder", spec)
        self.tools = ToolRegistry(self, ToolRecord)
        self.toolkits = ToolkitRegistry(self, ToolkitRecord)
        self.envs = EnvironmentRegistry(self, EnvironmentRecord)
        self.agents = AgentRegistry(self, AgentRecord)

    def context(self, name: str | None = None) -> Context:
        """A new run context for bind / route / invoke (``with ws.context() as ctx:``)."""
        return Context(name)

    def activate(self) -> "_Activation":
        """Make this the current workspace (``@tool`` registers here).

        As a statement it stays current; as ``with ws.activate():`` only inside the block.
        """
        return _Activation(_current.set(self))

    def close(self) -> None:
        """Write pending index files and close the database connection."""
        if _current.get() is self:
            _current.set(None)
        for registry in (self.tools, self.toolkits, self.envs, self.agents):
            registry.flush()
        self.db.close()

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Workspace({str(self.path)!r}, tools={len(self.tools)}, envs={len(self.envs)}, "
            f"agents={len(self.agents)}, embedder={self.embedder.id!r})"
        )


class _Activation:
    """Returned by :meth:`Workspace.activate`; as a context manager it restores the previous one."""

    def __init__(self, token: contextvars.Token):
        self._token = token

    def __enter__(self) -> "_Activation":
        return self

    def __exit__(self, *exc: object) -> None:
        _current.reset(self._token)


def current_workspace(required: bool = True) -> Workspace | None:
    """The active workspace; with ``required`` a clear error when none is active."""
    ws = _current.get()
    if ws is None and required:
        raise TeaError(
            "no current workspace: create one with ws = tea_notebook.Workspace(path) and call ws.activate()"
        )
    return ws
