"""Agent kinds: rebuilding any registered agent from its ACP card, in any process.

Every agent records its kind and settings in its card's metadata (``{"kind": ..., "config": ...}``),
so after a kernel restart (or in a worker process) ``build(ws, name)`` makes it again, and the
workspace hands ACP :func:`restore_runner` to re-attach runners to stored cards on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tea_notebook.errors import TeaError

if TYPE_CHECKING:
    from tea_notebook.workspace import Workspace

#: what ``%%agent NAME`` builds when no agent NAME is registered: kind, and the agent's usual name
SHORTCUTS = {
    "researcher": ("researcher", "deep_researcher"),
    "deep_researcher": ("researcher", "deep_researcher"),
    "analyzer": ("analyzer", "deep_analyzer"),
    "deep_analyzer": ("analyzer", "deep_analyzer"),
    "browser_use": ("browser_use", "browser_use"),
    "browser": ("browser_use", "browser_use"),
    "orchestra": ("orchestra", "orchestra"),
    "toolself": ("toolself", "toolself"),
    "coral": ("coral", "coral"),
}
KINDS = ("agent", "researcher", "analyzer", "browser_use", "orchestra", "toolself", "coral", "evolution")


def make(ws: "Workspace", kind: str, name: str, **options: Any) -> Any:
    """A new agent of ``kind`` registered as ``name`` (what ``ws.researcher()`` and friends call)."""
    if kind == "researcher":
        from tea_notebook.agents.researcher import DeepResearcher

        return DeepResearcher(ws, name, **options)
    if kind == "analyzer":
        from tea_notebook.agents.analyzer import DeepAnalyzer

        return DeepAnalyzer(ws, name, **options)
    if kind == "browser_use":
        from tea_notebook.agents.browser_use import make_browser_agent

        return make_browser_agent(ws, name, **options)
    if kind == "orchestra":
        from tea_notebook.agents.orchestra import make_orchestra

        return make_orchestra(ws, name=name, **options)
    if kind == "toolself":
        from tea_notebook.agents.toolself import ToolSelfAgent

        return ToolSelfAgent(ws, name, **options)
    if kind == "coral":
        from tea_notebook.agents.coral import CoralTeam

        return CoralTeam(ws, name, **options)
    if kind == "agent":
        return ws.agent(name, **options)
    raise TeaError(f"unknown agent kind {kind!r}; kinds: {', '.join(KINDS)}")


def build(ws: "Workspace", name: str, **overrides: Any) -> Any:
    """The agent registered as ``name``: the live object in this process, or rebuilt from its card
    (``overrides`` change settings for the returned object only; it is not re-registered)."""
    live = ws._live_agents.get(name)
    if live is not None and not overrides:
        return live
    rec = ws.agents.get(name)
    kind = rec.metadata.get("kind") or "agent"
    config = dict(rec.metadata.get("config") or {})
    if kind in ("researcher", "analyzer"):
        config.update(overrides)
        if live is not None and kind == "researcher" and "engines" not in overrides:
            config["engines"] = list(live.engines)  # a user engine object may not rebuild from its spec string
        config.setdefault("model", rec.model)
        config.setdefault("description", rec.description)
        return make(ws, kind, name, register=False, **config)
    if kind == "evolution":
        from tea_notebook.evolve.loop import register_evolution_agents

        register_evolution_agents(ws, **config)
        return ws.agents.runtime(name)
    if kind == "toolself":
        from tea_notebook.agents.toolself import ToolSelfAgent

        return ToolSelfAgent.from_record(ws, name, **overrides)
    if kind == "coral":
        from tea_notebook.agents.coral import CoralTeam

        return CoralTeam.from_record(ws, name, **overrides)
    from tea_notebook.runtime.agent import Agent

    return Agent.from_record(ws, name, **overrides)


def restore_runner(ws: "Workspace", name: str) -> Any:
    """The runner of a stored card that has none in this process (None when the card says nothing
    about how to build it: an agent registered by hand without a runner)."""
    rec = ws.agents.get(name)
    if not rec.metadata.get("kind") and not rec.metadata.get("config"):
        return None
    agent = build(ws, name)
    return getattr(agent, "_runner", agent)


__all__ = ["KINDS", "SHORTCUTS", "build", "make", "restore_runner"]
