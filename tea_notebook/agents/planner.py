"""The planning agent (AgentOrchestra §4.2): decomposes the task with the todo tool and delegates to
sub-agents registered in ACP, offered to it as tools (A2T), passing the original task unmodified."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tea_notebook.runtime.prompts import SYSTEM_PROMPT

if TYPE_CHECKING:
    from tea_notebook.runtime.agent import Agent
    from tea_notebook.runtime.host import RunHost

PLANNER_RULES = """
<planning_rules>
You are the planning agent. You do not act on environments directly: you decompose the task, keep the plan in
todo.md with the 'todo' tool, delegate sub-tasks to your team members (the *_agent tools), aggregate their results,
and adapt the plan when results, errors or requirements change.
* When you call a team member, pass the ORIGINAL TASK unmodified as 'task', and absolute paths of attached files in 'files'.
* Team members that do not depend on each other may be called in the same step; they run concurrently.
* Run verification steps when needed before calling 'done'.
</planning_rules>
"""


def make_planner(workspace: "RunHost", sub_agents: list[str], *, name: str = "planner", **options: Any) -> "Agent":
    """A planning agent over ``sub_agents`` (names registered in ``workspace.agents``)."""
    from tea_notebook.runtime.agent import Agent

    missing = [a for a in sub_agents if a not in workspace.agents]
    if missing:
        raise ValueError(f"sub-agents not registered in ACP: {', '.join(missing)}")
    options.setdefault("description", "Plans the task, delegates sub-tasks to team members and aggregates results.")
    options.setdefault("role", "planner")
    options.setdefault("system_prompt", SYSTEM_PROMPT + PLANNER_RULES)
    options.setdefault("tools", [])
    return Agent(workspace, name, sub_agents=sub_agents, todo=True, **options)
