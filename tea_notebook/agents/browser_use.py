"""The browser-use agent (AgentOrchestra §4.3.2, App. E.4): an agent that operates the browser
environment step by step.

It is the tool-calling loop of :mod:`tea_notebook.runtime.agent` bound to the ``browser``
environment (lifted to a toolkit by E2T): each step it sees the page state — URL, title, tabs, the
interactive elements with their ``[index]``, and a screenshot when its model takes images — judges
its last action, keeps a short memory of what it did and found, chooses the next browser actions
(goto, click, input, scroll, back, tabs, extract) and ends with ``done`` carrying what it extracted.
The paper's five stages map onto the loop: environment preparation (a fresh browser per run), action
generation, execution through ECP, result evaluation (``evaluation_previous_goal``) and state
recording (``memory``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tea_notebook.agents.kinds import agent_kind
from tea_notebook.runtime.prompts import SYSTEM_PROMPT

if TYPE_CHECKING:
    from tea_notebook.runtime.agent import Agent
    from tea_notebook.runtime.host import RunHost

BROWSER_RULES = """
<browser_rules>
You are the browser use agent. You operate a real web browser to complete the task: open pages, fill in and
submit forms, click buttons and links, scroll to load more, use tabs, and read pages.
* The environment state lists the tabs, the current page (URL, title, scroll position) and its interactive
  elements as "[index] selector kind 'text'". Click and type by index (e.g. click with selector "4"); indexes
  change after every action, so use the ones in the latest state.
* After each action, check the state: did the page change as expected? If not, try another way (a different
  element, scrolling, going back) instead of repeating the same action.
* Content can appear only after a click or a scroll; read the page with 'extract' to see its text.
* When a screenshot is attached, do not ignore what it shows.
* Keep in 'memory' what you have done and the facts you have found (with the URL they came from).
* Finish with 'done': put everything you extracted in 'text' and set 'success' only if the task is complete.
</browser_rules>
"""


@agent_kind("browser_use", shortcuts=("browser_use", "browser"))
def make_browser_agent(workspace: "RunHost", name: str = "browser_use", **options: Any) -> "Agent":
    """The browser-use agent: an :class:`~tea_notebook.runtime.agent.Agent` with the browser bound."""
    from tea_notebook.runtime.agent import Agent

    options.setdefault(
        "description",
        "Operates a web browser: opens pages, fills in and submits forms, clicks, scrolls, uses tabs and "
        "extracts what the task asks for.",
    )
    options.setdefault("role", "browser use")
    options.setdefault("system_prompt", SYSTEM_PROMPT + BROWSER_RULES)
    options.setdefault("tools", [])
    options.setdefault("max_steps", 15)
    options.setdefault("kind", "browser_use")
    envs = list(options.pop("envs", None) or [])
    return Agent(workspace, name, envs=["browser", *[e for e in envs if e != "browser"]], **options)


__all__ = ["BROWSER_RULES", "make_browser_agent"]
