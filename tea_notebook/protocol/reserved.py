"""The tool names the runtime keeps for its own actions, in one list every floor can read.

The agent loop handles ``done`` and ``todo`` itself; ToolSelf adds ``reconfigure`` and ``finish``;
CORAL's members talk through the ``a2a`` toolkit's tools. A tool from outside (an MCP server) that
took one of these names would be offered to the model beside the real action, or replace it, so
imports refuse them (:func:`reserved_by`); so does every other registration, a person's ``%%tool``,
``ws.tools.register`` or A2T / E2T conversion (:func:`refused_name`): only the runtime registers
its own CORAL tools under these names.
"""

from __future__ import annotations

#: actions every agent loop handles itself (tea_notebook.runtime.agent)
RUNTIME_ACTIONS = ("done", "todo")
#: ToolSelf's management tools (tea_notebook.agents.toolself)
TOOLSELF_ACTIONS = ("reconfigure", "finish")
#: CORAL's agent-to-agent tools (tea_notebook.agents.a2a)
A2A_ACTIONS = (
    "send_message",
    "wait_for_mentions",
    "create_thread",
    "list_threads",
    "close_thread",
    "list_agents",
    "submit_answer",
)

_OWNERS = {
    **{name: "the agent loop's own action" for name in RUNTIME_ACTIONS},
    **{name: "ToolSelf's management tool" for name in TOOLSELF_ACTIONS},
    **{name: "CORAL's agent-to-agent tool" for name in A2A_ACTIONS},
}

#: every name above: no tool imported from outside may be registered under one of them
RESERVED_TOOL_NAMES = frozenset(_OWNERS)
#: the module whose tools the runtime registers under reserved names itself (CORAL's a2a toolkit)
RUNTIME_TOOL_MODULE = "tea_notebook.agents.a2a"


def reserved_by(name: str) -> str | None:
    """Whose action ``name`` is (``"the agent loop's own action"`` …), or None when it is free. Case
    does not matter: ``Done`` beside ``done`` would confuse a model as much."""
    return _OWNERS.get(name.lower())


def refused_name(name: str, entrypoint: str = "", origin: str = "python") -> str | None:
    """Whose action ``name`` is when a tool may not be registered under it, else None: every
    reserved name is refused except to the runtime's own CORAL tools (a Python tool whose entrypoint
    is the function of that name in :data:`RUNTIME_TOOL_MODULE`)."""
    owner = reserved_by(name)
    if owner is None:
        return None
    if origin == "python" and name in A2A_ACTIONS and entrypoint == f"{RUNTIME_TOOL_MODULE}:{name}":
        return None
    return owner


__all__ = [
    "A2A_ACTIONS",
    "RESERVED_TOOL_NAMES",
    "RUNTIME_ACTIONS",
    "RUNTIME_TOOL_MODULE",
    "TOOLSELF_ACTIONS",
    "refused_name",
    "reserved_by",
]
