"""The tool names the runtime keeps for its own actions, in one list every floor can read.

The agent loop handles ``done`` and ``todo`` itself; ToolSelf adds ``reconfigure`` and ``finish``;
CORAL's members talk through the ``a2a`` toolkit's tools. A tool from outside (an MCP server) that
took one of these names would be offered to the model beside the real action, or replace it, so
imports refuse them (:func:`reserved_by`).
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


def reserved_by(name: str) -> str | None:
    """Whose action ``name`` is (``"the agent loop's own action"`` …), or None when it is free. Case
    does not matter: ``Done`` beside ``done`` would confuse a model as much."""
    return _OWNERS.get(name.lower())


__all__ = ["A2A_ACTIONS", "RESERVED_TOOL_NAMES", "RUNTIME_ACTIONS", "TOOLSELF_ACTIONS", "reserved_by"]
