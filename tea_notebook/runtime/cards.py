"""An agent's ACP card: the settings it keeps, and the versions ``ws.agent(name, ...)`` stores.

A tool-calling agent is registered in ACP under its name with a card (an
:class:`~tea_notebook.protocol.records.AgentRecord`) that holds its settings, so another process or
a fork rebuilds the same agent (:func:`card_settings`). Opening a registered agent with other
settings stores them as a new version of its card, announced by :class:`AgentCardUpdated`
(:func:`changed_settings`, :func:`revised_card`, :func:`announce_version`).
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

from tea_notebook.errors import TeaError
from tea_notebook.protocol.records import AgentRecord

#: agent kinds whose runner is the tool-calling loop (others are rebuilt by tea_notebook.agents.kinds)
LOOP_KINDS = ("agent", "browser_use", "orchestra")
#: the :class:`~tea_notebook.runtime.agent.Agent` settings its card keeps (the record's fields and
#: ``metadata["config"]``)
PERSISTED_SETTINGS = frozenset(
    {"description", "role", "model", "max_steps", "tools", "sub_agents", "envs", "todo", "max_actions"}
    | {"tool_mode", "memory_budget", "keep_recent_steps", "max_consecutive_errors", "tool_timeout", "vision"}
    | {"system_prompt"}
)


class AgentCardUpdated(UserWarning):
    """``ws.agent(name, ...)`` stored a new version of an existing agent's card (the message says what changed)."""


def check_max_steps(value: Any, name: str = "max_steps") -> int:
    """``value`` if it is a usable step limit (a whole number, 1 or more), else ValueError naming
    ``name``: a run needs at least one step, so 0 is refused rather than read as "no limit"."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number of 1 or more (a run needs at least one step), not {value!r}")
    return value


def card_settings(rec: AgentRecord) -> dict[str, Any]:
    """The :class:`~tea_notebook.runtime.agent.Agent` settings an ACP card holds: its stored ``config``, or
    for a card made another way (T2A, registered by hand) its tool list; with its description, role, model
    and step limit."""
    config = dict(rec.metadata.get("config") or {"tools": list(rec.tools) or None})
    config.update(description=rec.description, role=rec.role, model=rec.model, max_steps=rec.max_steps or 20)
    return config


def loop_kind(rec: AgentRecord) -> str:
    """The kind of a registered agent that ``ws.agent(name)`` may open; TeaError for another kind."""
    kind = str(rec.metadata.get("kind") or "agent")
    if kind not in LOOP_KINDS:
        name = rec.name
        raise TeaError(
            f"agent {name!r} is registered as a {kind}, not a tool-calling agent: ws.agent({name!r}) would "
            f"replace it. Use it as it is (%%agent {name}, ws.agents.invoke({name!r}, ...)) or pick another name"
        )
    return kind


def changed_settings(agent_class: type, stored: dict[str, Any], options: dict[str, Any]) -> list[str]:
    """The persisted settings ``options`` change from those ``stored`` on a card (a setting the card
    does not hold counts as its default in ``agent_class``), sorted."""
    defaults = {k: p.default for k, p in inspect.signature(agent_class).parameters.items() if k in PERSISTED_SETTINGS}
    return sorted(k for k, v in options.items() if k in PERSISTED_SETTINGS and stored.get(k, defaults[k]) != v)


def revised_card(rec: AgentRecord, fields: dict[str, Any], role: str) -> AgentRecord:
    """``rec`` with an agent's card ``fields`` (see :meth:`~tea_notebook.runtime.agent.Agent.card_fields`)
    and ``role``: its other relations and metadata kept, its delegations replaced."""
    kept = [r for r in rec.relations if r.type != "delegates_to"]
    return rec.model_copy(
        update={
            **fields,
            "role": role,
            "relations": kept + list(fields["relations"]),
            "metadata": {**rec.metadata, **fields["metadata"]},
        }
    )


def announce_version(name: str, changed: list[str], previous: int, saved: int) -> None:
    """Warn (:class:`AgentCardUpdated`) that ``ws.agent(name, ...)`` stored version ``saved`` of the card,
    pointing at the line that called ``ws.agent``; nothing when no new version was stored."""
    if saved == previous:
        return
    warnings.warn(
        AgentCardUpdated(
            f"agent {name!r}: {', '.join(changed)} changed, stored as version {saved} of its card "
            f"(version {previous} is kept: ws.agents.rollback({name!r}, {previous}) restores it)"
        ),
        stacklevel=4,  # this function, Agent.open, Workspace.agent, the caller
    )


__all__ = [
    "LOOP_KINDS",
    "PERSISTED_SETTINGS",
    "AgentCardUpdated",
    "announce_version",
    "card_settings",
    "changed_settings",
    "check_max_steps",
    "loop_kind",
    "revised_card",
]
