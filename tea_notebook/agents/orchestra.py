"""The orchestra (AgentOrchestra §4): the planning agent over the deep researcher, the browser-use
agent, the deep analyzer and the tool manager, each offered to the planner as a tool through A2T.

``ws.orchestra(model=...)`` registers the specialists (each with its own model when ``models`` names
one) and returns the planner. When the planner calls several specialists in one step they run
concurrently, and their runs nest under its run in the live view and the trajectory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tea_notebook.agents.kinds import agent_kind
from tea_notebook.agents.planner import PLANNER_RULES
from tea_notebook.runtime.prompts import SYSTEM_PROMPT

if TYPE_CHECKING:
    from tea_notebook.runtime.agent import Agent
    from tea_notebook.runtime.host import RunHost

ROUTING_RULES = """
<team_rules>
Your team: deep_researcher_agent researches questions across web pages or a document corpus and answers with
cited sources; browser_use_agent operates a browser for pages that need interaction (forms, clicks, scrolling,
tabs); deep_analyzer_agent reads attached files (PDF, Word, spreadsheets, slides, archives, images);
tool_manager_agent finds or creates a tested tool when no existing tool fits. For information on the web, try
the browser first for a known page, the researcher to find and compare sources; for files, URLs of documents,
calculations over data, use the analyzer; use the python environment for small computations and to verify
results before 'done'.
</team_rules>
"""

ROLES = ("planner", "researcher", "browser", "analyzer", "tool_manager")


@agent_kind("orchestra", shortcuts=("orchestra",))
def make_orchestra(
    workspace: "RunHost",
    model: str | None = None,
    *,
    name: str = "orchestra",
    models: dict[str, str] | None = None,
    engines: list[Any] | tuple[Any, ...] = ("web",),
    researcher: dict[str, Any] | None = None,
    analyzer: dict[str, Any] | None = None,
    browser: dict[str, Any] | None = None,
    tool_manager: bool = True,
    **planner_options: Any,
) -> "Agent":
    """Register the specialists and return the planner (registered as ``name``).

    ``models``: a model per role (``planner``, ``researcher``, ``browser``, ``analyzer``,
    ``tool_manager``), ``model`` for the rest. ``engines``: the researcher's search engines.
    ``researcher`` / ``analyzer`` / ``browser``: more options for that specialist.
    ``tool_manager=False`` leaves the tool manager out.
    """
    from tea_notebook.agents.analyzer import DeepAnalyzer
    from tea_notebook.agents.browser_use import make_browser_agent
    from tea_notebook.agents.planner import make_planner
    from tea_notebook.agents.researcher import DeepResearcher

    models = dict(models or {})
    unknown = sorted(set(models) - set(ROLES))
    if unknown:
        raise ValueError(f"models= names unknown roles {', '.join(unknown)}; roles: {', '.join(ROLES)}")

    def pick(role: str) -> str | None:
        return models.get(role, model)

    DeepResearcher(workspace, "deep_researcher", model=pick("researcher"), engines=engines, **(researcher or {}))
    make_browser_agent(workspace, "browser_use", model=pick("browser"), **(browser or {}))
    DeepAnalyzer(workspace, "deep_analyzer", model=pick("analyzer"), **(analyzer or {}))
    team = ["deep_researcher", "browser_use", "deep_analyzer"]
    if tool_manager:
        from tea_notebook.evolve.loop import register_evolution_agents

        register_evolution_agents(workspace, model=pick("tool_manager"))
        team.append("tool_manager")
    planner_options.setdefault("system_prompt", SYSTEM_PROMPT + PLANNER_RULES + ROUTING_RULES)
    planner_options.setdefault("envs", ["python"])
    planner_options.setdefault("kind", "orchestra")
    planner_options.setdefault(
        "description", "AgentOrchestra's planning agent: plans with todo, delegates to the specialists, verifies."
    )
    return make_planner(workspace, team, name=name, model=pick("planner"), **planner_options)


__all__ = ["ROLES", "make_orchestra"]
