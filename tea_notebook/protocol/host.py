"""What the protocol layer needs of a workspace: :class:`RegistryHost`.

Registries and transformations are handed the object that holds them (the ``Workspace`` façade, or
anything shaped like it in a test); they reach only these few attributes, so ``protocol/`` never
names the façade that sits floors above it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tea_notebook.protocol.store_host import StoreHost

if TYPE_CHECKING:
    from tea_notebook.protocol.acp import AgentRegistry
    from tea_notebook.protocol.ecp import EnvironmentRegistry
    from tea_notebook.protocol.tcp import ToolkitRegistry, ToolRegistry


class RegistryHost(StoreHost, Protocol):
    """The holder of the TEA registries: its folder, database and embedder (a :class:`StoreHost`) and
    the four registries (tools, toolkits, environments, agents) that reach one another through it."""

    @property
    def tools(self) -> "ToolRegistry":
        """TCP: the tool registry."""
        ...

    @property
    def toolkits(self) -> "ToolkitRegistry":
        """The toolkit registry (groups of tools with rules and state)."""
        ...

    @property
    def envs(self) -> "EnvironmentRegistry":
        """ECP: the environment registry."""
        ...

    @property
    def agents(self) -> "AgentRegistry":
        """ACP: the agent registry."""
        ...


__all__ = ["RegistryHost", "StoreHost"]
