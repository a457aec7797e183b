"""The TEA tool-calling agent (AgentOrchestra App. I): its settings, its ACP card, and its runs.

:class:`Agent` holds the settings; each :meth:`Agent.run` is an :class:`~tea_notebook.runtime.loop.AgentRun`,
the ReAct loop (:mod:`tea_notebook.runtime.loop`). The agent's card (the settings another process or a
fork rebuilds it from, and the versions ``ws.agent(name, ...)`` stores) is handled by
:mod:`tea_notebook.runtime.cards`; what a run returns and records by :mod:`tea_notebook.runtime.records`.
The names of those modules that callers use are importable from here too (``X as X``: re-exported).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tea_notebook.models.client import ModelClient, resolve_model
from tea_notebook.protocol.context import Context
from tea_notebook.protocol.records import AgentRecord, Relation
from tea_notebook.runtime.cards import LOOP_KINDS as LOOP_KINDS
from tea_notebook.runtime.cards import AgentCardUpdated as AgentCardUpdated
from tea_notebook.runtime.cards import (
    announce_version,
    card_settings,
    changed_settings,
    check_max_steps,
    loop_kind,
    revised_card,
)
from tea_notebook.runtime.cell_modes import cell_grants
from tea_notebook.runtime.jobs import Runnable, checked_result
from tea_notebook.runtime.loop import STOP_GRACE as STOP_GRACE
from tea_notebook.runtime.loop import TODO_SCHEMA as TODO_SCHEMA
from tea_notebook.runtime.loop import TODO_TOOL as TODO_TOOL
from tea_notebook.runtime.loop import AgentRun, pending_subforks
from tea_notebook.runtime.loop import Outcome as Outcome
from tea_notebook.runtime.loop import routable as routable
from tea_notebook.runtime.prompts import DONE_TOOL as DONE_TOOL
from tea_notebook.runtime.records import RunResult, StepRecord, sub_agent_answer
from tea_notebook.runtime.replies import parse_json_object as parse_json_object

if TYPE_CHECKING:
    from tea_notebook.runtime.forking import ForkPlan
    from tea_notebook.runtime.host import RunHost


class Agent(Runnable):
    """A tool-calling agent bound to a workspace.

    ``tools``: tool names to offer (default: routed from the registry by the task). ``sub_agents``:
    ACP agents offered as tools (A2T). ``todo``: give it the todo tool (the planner has it).
    The agent is registered in ACP under ``name`` with itself as runner, so other agents can call it.
    """

    def __init__(
        self,
        workspace: "RunHost",
        name: str = "agent",
        *,
        description: str = "A general tool-calling agent.",
        model: str | None = None,
        tools: list[str] | None = None,
        sub_agents: list[str] | None = None,
        envs: list[str] | None = None,
        todo: bool = False,
        max_steps: int = 20,
        max_actions: int = 3,
        tool_mode: str = "auto",
        memory_budget: int = 3000,
        keep_recent_steps: int = 4,
        max_consecutive_errors: int = 3,
        tool_timeout: float = 300.0,
        vision: bool | None = None,
        system_prompt: str | None = None,
        client: ModelClient | None = None,
        role: str = "",
        kind: str = "agent",
        register: bool = True,
    ):
        if tool_mode not in ("auto", "native", "json"):
            raise ValueError("tool_mode must be 'auto', 'native' or 'json'")
        check_max_steps(max_steps)
        self.workspace = workspace
        self.name = name
        self.kind = kind
        self.description = description
        self.model = model
        self.tools = tools
        self.sub_agents = list(sub_agents or [])
        self.envs = list(envs or [])
        self.todo = todo
        self.max_steps = max_steps
        self.max_actions = max_actions
        self.tool_mode = tool_mode
        self.memory_budget = memory_budget
        self.keep_recent_steps = keep_recent_steps
        self.max_consecutive_errors = max_consecutive_errors
        self.tool_timeout = tool_timeout
        self.vision = vision
        self.system_prompt = system_prompt
        self.client = client or ModelClient()
        if register:
            workspace.live_agents.put(name, self)
            record = AgentRecord(name=name, role=role, origin="runtime", **self.card_fields())
            workspace.agents.register(record, runtime=self._runner)

    # -- the card -----------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        """Settings that rebuild this agent from its ACP record (another process, a fork)."""
        return {
            "tools": self.tools,
            "sub_agents": self.sub_agents,
            "envs": self.envs,
            "todo": self.todo,
            "max_actions": self.max_actions,
            "tool_mode": self.tool_mode,
            "memory_budget": self.memory_budget,
            "keep_recent_steps": self.keep_recent_steps,
            "max_consecutive_errors": self.max_consecutive_errors,
            "tool_timeout": self.tool_timeout,
            "vision": self.vision,
            "system_prompt": self.system_prompt,
        }

    def card_fields(self) -> dict[str, Any]:
        """The fields of this agent's ACP card that its settings make (all but name, role and origin)."""
        return {
            "description": self.description,
            "model": self.model,
            "tools": list(self.tools or []),
            "max_steps": self.max_steps,
            "relations": [Relation(type="delegates_to", target=a) for a in self.sub_agents],
            "metadata": {"kind": self.kind, "config": self._config()},
        }

    @classmethod
    def from_record(cls, workspace: "RunHost", name: str, **overrides: Any) -> "Agent":
        """The agent registered as ``name``: the live object in this process, or rebuilt from its card."""
        live = workspace.live_agents.get(name)
        if live is not None and not overrides:
            return live
        config = card_settings(workspace.agents.get(name))
        config.update(overrides)
        config.setdefault("register", False)
        return cls(workspace, name, **config)

    @classmethod
    def open(cls, workspace: "RunHost", name: str, **options: Any) -> "Agent":
        """What ``ws.agent(name, **options)`` returns (see :meth:`tea_notebook.workspace.Workspace.agent`):
        a new agent, or the registered one loaded from its card with ``options`` applied as a new,
        announced version of the card when they change it."""
        rec = workspace.agents.current(name)
        if rec is None:
            return cls(workspace, name, **options)
        kind = loop_kind(rec)
        stored = card_settings(rec)
        changed = changed_settings(cls, stored, options)
        agent = cls(workspace, name, **{**stored, **options, "kind": kind, "register": False})
        record = revised_card(rec, agent.card_fields(), options.get("role", rec.role)) if changed else rec
        # identical content stores no new version: this only attaches the runner to the card
        saved = workspace.agents.register(record, runtime=agent._runner, note="ws.agent: " + ", ".join(changed))
        announce_version(name, changed, rec.version, saved.version)
        workspace.live_agents.put(name, agent)
        return agent

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, model={self.resolved_model()[0]!r}, max_steps={self.max_steps})"

    # -- running --------------------------------------------------------------------------------
    def resolved_model(self, explicit: str | None = None) -> tuple[str, str]:
        """The model this agent would use, and why."""
        return resolve_model(explicit, self.model, self.workspace.default_model)

    async def run(
        self,
        task: str,
        files: list[str] | None = None,
        *,
        model: str | None = None,
        context: Context | None = None,
        max_steps: int | None = None,
        grants: list[str] | tuple[str, ...] = (),
        cells: str | None = None,
        raise_on_error: bool = True,
        _replay: "ForkPlan | list[StepRecord] | None" = None,
        _fork: tuple[str, int] | None = None,
    ) -> RunResult:
        """Run the agent on ``task``. A run that ends in ``error`` raises :class:`~tea_notebook.errors.RunFailed`
        (its ``.result`` is this result; ``raise_on_error=False`` returns it instead); every other ending
        is returned: see ``status``.

        ``grants``: permissions for this run only, e.g. ``["kernel.write"]`` lets the kernel
        environment write variables and run code in the user's namespace.

        ``cells``: the approval mode of the ``notebook`` environment (``"ask"``, ``"read"`` or ``"auto"``,
        see :mod:`tea_notebook.runtime.cell_modes`); the agent must have it (``envs=["notebook"]``).

        ``context``: a :meth:`Workspace.context` whose ``cancel`` event stops the run (and its
        sub-agents) cooperatively: ``ctx.cancel.set()`` from another thread or a Stop button.
        """
        steps = self.max_steps if max_steps is None else check_max_steps(max_steps)
        if cells is not None:
            if "notebook" not in self.envs:
                raise ValueError(
                    f'cells={cells!r} needs the notebook environment: ws.agent({self.name!r}, envs=["notebook"])'
                )
            grants = cell_grants(cells, grants)
        if self.tools is not None:
            self.workspace.tools.require(self.tools, f"agent {self.name!r}'s tools")  # before the run exists
        run = self._new_run(task, list(files or []), model, context, steps, _replay, _fork)
        run.ctx.grants.update(grants)
        return checked_result(await run.execute(), raise_on_error)

    def _new_run(self, *args: Any) -> AgentRun:
        """The state of one run (agent kinds with their own loop rules return a subclass)."""
        return AgentRun(self, *args)

    async def _runner(self, task: str, files: list[str] | None = None, context: Context | None = None) -> str:
        """ACP runner: a sub-agent run nested under the caller's run; its answer, or an error. When
        the caller is a fork that continues this agent's run from a fork of it, the fork runs instead."""
        pending = pending_subforks(context, self.name)
        if pending:
            plan = pending.pop(0)
            result = await self.run(
                task,
                files,
                model=plan.model,
                max_steps=plan.max_steps,
                context=context,
                raise_on_error=False,
                _replay=plan,
                _fork=(plan.source, plan.step) if plan.source is not None else None,
            )
            return sub_agent_answer(self.name, result)
        return sub_agent_answer(self.name, await self.run(task, files, context=context, raise_on_error=False))


__all__ = ["Agent"]
