"""The TEA tool-calling agent (AgentOrchestra App. I): a ReAct loop readable in one sitting.

Each step: assemble the prompt from agent state, bound environments and routed tools → call the
model → parse actions (native tool calls, or the paper's JSON) → run them in order (sub-agent
dispatches concurrently) → record the step → fold old steps into summaries when over budget.
Everything that happens is an event in the workspace store.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable

from tea_notebook.errors import TeaError
from tea_notebook.models.client import (
    DEMO_MODEL,
    ModelClient,
    ModelError,
    ModelReply,
    ToolCall,
    is_offline,
    resolve_model,
    takes_images,
)
from tea_notebook.protocol.context import Context
from tea_notebook.protocol.records import AgentRecord, Relation
from tea_notebook.runtime.forking import ForkPlan, StepOverride
from tea_notebook.runtime.jobs import Runnable
from tea_notebook.runtime.prompts import DONE_TOOL, StepRecord, build_messages
from tea_notebook.runtime.runlog import RunInterrupted, RunLog
from tea_notebook.runtime.todo import TodoList

if TYPE_CHECKING:
    from tea_notebook.runtime.trajectory import Trajectory
    from tea_notebook.workspace import Workspace

TODO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["add", "complete", "update", "list", "clear", "show", "export"]},
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "description": {"type": "string"},
                    "priority": {"type": "string", "enum": ["high", "medium", "low"]},
                    "category": {"type": "string"},
                    "parameters": {"type": "object"},
                },
                "required": ["description"],
            },
        },
        "step_id": {"type": "integer"},
        "status": {"type": "string", "enum": ["success", "failed"]},
        "result": {"type": "string"},
        "description": {"type": "string"},
        "priority": {"type": "string", "enum": ["high", "medium", "low"]},
    },
    "required": ["action"],
    "additionalProperties": False,
}
#: error types of a call that never reached the tool (the model's malformed call, not a tool failure)
_INVALID_CALL = frozenset({"ValidationError", "NotFoundError", "NotBoundError"})
#: seconds a stopped run waits for the tools it was running to end (synchronous ones cannot be killed)
STOP_GRACE = 1.0
TODO_TOOL = {
    "type": "function",
    "function": {
        "name": "todo",
        "description": (
            "Keep the plan in todo.md: add steps, complete/update a step, list, clear finished, show, export."
        ),
        "parameters": TODO_SCHEMA,
    },
}


@dataclass
class RunResult:
    """What a run produced. ``trajectory`` is rebuilt from the stored events on first access."""

    run_id: str
    agent: str
    task: str
    model: str
    status: str
    answer: str
    steps: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    files: list[str] = field(default_factory=list)
    error: str | None = None
    workspace: Any = field(default=None, repr=False)

    @property
    def success(self) -> bool:
        """True when the agent finished the task and said it succeeded."""
        return self.status == "success"

    @property
    def trajectory(self) -> "Trajectory":
        """The run (with nested sub-agent runs) rebuilt from events."""
        from tea_notebook.runtime.trajectory import Trajectory

        return Trajectory.load(self.workspace, self.run_id)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict, dict]:
        return self.trajectory._repr_mimebundle_(include, exclude)

    def context(self, step: int, *, stage: str = "", run: str | None = None) -> Any:
        """What the model saw at ``step``: see
        :meth:`Trajectory.context <tea_notebook.runtime.trajectory.Trajectory.context>`."""
        from tea_notebook.runtime.contexts import load_context

        if run is not None:
            return self.trajectory.context(step, stage=stage, run=run)
        return load_context(self.workspace, self.run_id, step, stage)

    def plot(self) -> Any:
        """A matplotlib figure: tokens, cost and latency per step."""
        from tea_notebook.runtime.plots import plot_run

        return plot_run(self.trajectory)

    def _tokens_text(self) -> str:
        from tea_notebook.models.client import tokens_estimated

        total = self.prompt_tokens + self.completion_tokens
        return f"~{total} (estimated: scripted model)" if tokens_estimated(self.model) else str(total)

    def __repr__(self) -> str:
        # the status first: a run that did not succeed must not read like one that did
        return (
            f"RunResult(status={self.status!r}, agent={self.agent!r}, run_id={self.run_id!r}, steps={self.steps}, "
            f"tokens={self._tokens_text()}, cost={self.cost:.4f}, answer={self.answer[:200]!r})"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(
            f"RunResult({self.status}: {self.answer[:200]!r}, steps={self.steps}, tokens={self._tokens_text()}, "
            f"run_id={self.run_id!r})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (what ``tea run --json`` prints)."""
        return {
            "run_id": self.run_id,
            "agent": self.agent,
            "status": self.status,
            "success": self.success,
            "answer": self.answer,
            "steps": self.steps,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost": self.cost,
            "model": self.model,
            "files": self.files,
            "error": self.error,
        }


def _content_chars(message: dict[str, Any]) -> int:
    content = message["content"]
    if isinstance(content, str):
        return len(content)
    return sum(len(part.get("text", "")) for part in content)


def _parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a model's text (code fences and prose around it tolerated)."""
    cleaned = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip())
    start, end = cleaned.find("{"), cleaned.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object found")
    value = json.loads(cleaned[start : end + 1])
    if not isinstance(value, dict):
        raise ValueError("the JSON is not an object")
    return value


class Agent(Runnable):
    """A tool-calling agent bound to a workspace.

    ``tools``: tool names to offer (default: routed from the registry by the task). ``sub_agents``:
    ACP agents offered as tools (A2T). ``todo``: give it the todo tool (the planner has it).
    The agent is registered in ACP under ``name`` with itself as runner, so other agents can call it.
    """

    def __init__(
        self,
        workspace: "Workspace",
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
            workspace._live_agents[name] = self
            record = AgentRecord(
                name=name,
                description=description,
                role=role,
                model=model,
                tools=list(tools or []),
                max_steps=max_steps,
                relations=[{"type": "delegates_to", "target": a} for a in self.sub_agents],
                origin="runtime",
                metadata={"kind": kind, "config": self._config()},
            )
            workspace.agents.register(record, runtime=self._runner)

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

    @classmethod
    def from_record(cls, workspace: "Workspace", name: str, **overrides: Any) -> "Agent":
        """The agent registered as ``name``: the live object in this process, or rebuilt from its card."""
        live = workspace._live_agents.get(name)
        if live is not None and not overrides:
            return live
        config = card_settings(workspace.agents.get(name))
        config.update(overrides)
        config.setdefault("register", False)
        return cls(workspace, name, **config)

    @classmethod
    def open(cls, workspace: "Workspace", name: str, **options: Any) -> "Agent":
        """What ``ws.agent(name, **options)`` returns (see :meth:`tea_notebook.workspace.Workspace.agent`):
        a new agent, or the registered one loaded from its card with ``options`` applied as a new,
        announced version of the card when they change it."""
        rec = workspace.agents.current(name)
        if rec is None:
            return cls(workspace, name, **options)
        kind = rec.metadata.get("kind") or "agent"
        if kind not in LOOP_KINDS:
            raise TeaError(
                f"agent {name!r} is registered as a {kind}, not a tool-calling agent: ws.agent({name!r}) would "
                f"replace it. Use it as it is (%%agent {name}, ws.agents.invoke({name!r}, ...)) or pick another name"
            )
        stored = card_settings(rec)
        defaults = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items() if k in _PERSISTED}
        changed = sorted(k for k, v in options.items() if k in _PERSISTED and stored.get(k, defaults[k]) != v)
        agent = cls(workspace, name, **{**stored, **options, "kind": kind, "register": False})
        record = rec
        if changed:
            delegation = [r for r in rec.relations if r.type != "delegates_to"]
            record = rec.model_copy(
                update={
                    "description": agent.description,
                    "role": options.get("role", rec.role),
                    "model": agent.model,
                    "tools": list(agent.tools or []),
                    "max_steps": agent.max_steps,
                    "relations": delegation + [Relation(type="delegates_to", target=a) for a in agent.sub_agents],
                    "metadata": {**rec.metadata, "kind": kind, "config": agent._config()},
                }
            )
        # identical content stores no new version: this only attaches the runner to the card
        saved = workspace.agents.register(record, runtime=agent._runner, note="ws.agent: " + ", ".join(changed))
        if saved.version != rec.version:
            warnings.warn(
                AgentCardUpdated(
                    f"agent {name!r}: {', '.join(changed)} changed, stored as version {saved.version} of its card "
                    f"(version {rec.version} is kept: ws.agents.rollback({name!r}, {rec.version}) restores it)"
                ),
                stacklevel=3,
            )
        workspace._live_agents[name] = agent
        return agent

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, model={self.resolved_model()[0]!r}, max_steps={self.max_steps})"

    # -- public API -----------------------------------------------------------------------
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
        _replay: "ForkPlan | list[StepRecord] | None" = None,
        _fork: tuple[str, int] | None = None,
    ) -> RunResult:
        """Run the agent on ``task``. A run that ends in ``error`` raises :class:`~tea_notebook.errors.RunFailed`
        (its ``.result`` is this result; ``raise_on_error=False`` returns it instead); every other ending
        is returned: see ``status``.

        ``grants``: permissions for this run only, e.g. ``["kernel.write"]`` lets the kernel
        environment write variables and run code in the user's namespace.

        ``context``: a :meth:`Workspace.context` whose ``cancel`` event stops the run (and its
        sub-agents) cooperatively: ``ctx.cancel.set()`` from another thread or a Stop button.
        """
        steps = self.max_steps if max_steps is None else check_max_steps(max_steps)
        if self.tools is not None:
            self.workspace.tools.require(self.tools, f"agent {self.name!r}'s tools")  # before the run exists
        run = self._new_run(task, list(files or []), model, context, steps, _replay, _fork)
        run.ctx.grants.update(grants)
        return await run.execute()

    def _new_run(self, *args: Any) -> "_Run":
        """The state of one run (agent kinds with their own loop rules return a subclass)."""
        return _Run(self, *args)

    async def _runner(self, task: str, files: list[str] | None = None, context: Context | None = None) -> str:
        """ACP runner: a sub-agent run nested under the caller's run; its answer, or an error. When
        the caller is a fork that continues this agent's run from a fork of it, the fork runs instead."""
        pending = (getattr(context, "subforks", None) or {}).get(self.name)
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
                _fork=(plan.source, plan.step),
            )
            return sub_agent_answer(self.name, result)
        return sub_agent_answer(self.name, await self.run(task, files, context=context, raise_on_error=False))


def check_max_steps(value: Any, name: str = "max_steps") -> int:
    """``value`` if it is a usable step limit (a whole number, 1 or more), else ValueError naming
    ``name``: a run needs at least one step, so 0 is refused rather than read as "no limit"."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number of 1 or more (a run needs at least one step), not {value!r}")
    return value


#: agent kinds whose runner is this class's loop (others are rebuilt by tea_notebook.agents.kinds)
LOOP_KINDS = ("agent", "browser_use", "orchestra")
#: the :class:`Agent` settings its card keeps (the record's fields and ``metadata["config"]``)
_PERSISTED = frozenset(
    {"description", "role", "model", "max_steps", "tools", "sub_agents", "envs", "todo", "max_actions"}
    | {"tool_mode", "memory_budget", "keep_recent_steps", "max_consecutive_errors", "tool_timeout", "vision"}
    | {"system_prompt"}
)


class AgentCardUpdated(UserWarning):
    """``ws.agent(name, ...)`` stored a new version of an existing agent's card (the message says what changed)."""


def card_settings(rec: AgentRecord) -> dict[str, Any]:
    """The :class:`Agent` settings an ACP card holds: its stored ``config``, or for a card made another way
    (T2A, registered by hand) its tool list; with its description, role, model and step limit."""
    config = dict(rec.metadata.get("config") or {"tools": list(rec.tools) or None})
    config.update(description=rec.description, role=rec.role, model=rec.model, max_steps=rec.max_steps or 20)
    return config


def routable(record: Any) -> bool:
    """Whether a tool may be offered to an agent that did not name it (tools marked
    ``metadata["routing"] == "explicit"``, like CORAL's message tools, are offered only by name)."""
    return record.metadata.get("routing") != "explicit"


def sub_agent_answer(name: str, result: RunResult) -> str:
    """What a delegating agent reads of a sub-agent's run: its answer, marked when it did not
    succeed; a run that ended in error or was interrupted raises instead."""
    if result.status in ("error", "interrupted"):
        raise RuntimeError(f"sub-agent {name} ended with status {result.status}: {result.error or result.answer}")
    if result.success:
        return result.answer
    return f"(sub-agent {name} did not succeed: {result.status}) {result.answer}"


@dataclass
class Outcome:
    """What a control tool (one the loop handles itself: ``done``, ToolSelf's ``finish`` and
    ``reconfigure``, CORAL's ``submit_answer``) did: ``end`` the run with ``status``, ``go_on`` with
    ``observation``, or was ``invalid`` (``observation`` says why; it counts as a malformed output)."""

    kind: str
    observation: str = ""
    status: str = ""
    answer: str = ""
    files: list[str] = field(default_factory=list)


class _Run(RunLog):
    """The state of one run; ``execute`` is the loop. Subclasses change the rules through the hooks
    ``_controls``/``_control`` (loop-handled tools), ``_messages`` (the prompt) and ``_before_step``."""

    #: what ``ws.fork`` replays of such a run (recorded in ``run_started``; None: it cannot be forked)
    fork_unit: str | None = "steps"

    def __init__(
        self,
        agent: Agent,
        task: str,
        files: list[str],
        model: str | None,
        parent: Context | None,
        max_steps: int,
        replay: "ForkPlan | list[StepRecord] | None",
        fork: tuple[str, int] | None,
    ):
        resolved, source = agent.resolved_model(model)
        super().__init__(agent.workspace, agent.name, task, resolved, source, parent)
        self.agent, self.max_steps = agent, max_steps
        self.files = self.attach(files) if files else []
        self.todo = TodoList(self.folder / "todo.md") if agent.todo else None
        #: how this run starts from a stored one (a fork, a resume); empty for a fresh run
        self.plan = replay if isinstance(replay, ForkPlan) else ForkPlan.of_steps(list(replay or []))
        self.steps: list[StepRecord] = list(self.plan.live)
        self.last_step = self.plan.last_step
        self.summaries: list[str] = list(self.plan.summaries)
        recalled = self.ws.memory_store.recall(task) if len(self.ws.memory) else []
        self.insights: list[str] = list(self.plan.insights) + [i for i in recalled if i not in self.plan.insights]
        #: the step being taken without asking the model (see :class:`StepOverride`), if any
        self.override: StepOverride | None = None
        self.fork = fork
        self.agent_tools: set[str] = set()
        #: tools whose call failed since the last action that succeeded (see :meth:`_decided_status`)
        self.unrecovered: list[str] = []
        #: tool calls running now, by call id: ``(name, step)`` (a stop names those still running)
        self.in_flight: dict[str, tuple[str, int]] = {}
        self.reported_stops: set[str] = set()  # call ids already reported as cut short by a stop
        self.native = self._native()
        self._offer_cache: tuple[tuple, list[dict[str, Any]], set[str]] | None = None
        self._hidden: tuple[int, int] | None = None

    def _native(self) -> bool:
        if self.agent.tool_mode != "auto":
            return self.agent.tool_mode == "native"
        if is_offline(self.model):
            return True
        if "litellm" not in sys.modules:
            return False  # decided again in execute(), once litellm is imported off the event loop
        try:
            from tea_notebook.models.client import _litellm

            return bool(_litellm().supports_function_calling(model=self.model))
        except Exception:  # noqa: BLE001 - unknown model: the JSON protocol works everywhere
            return False

    # -- tools ----------------------------------------------------------------------------
    def _offered(self) -> tuple[list[dict[str, Any]], set[str]]:
        """OpenAI tool definitions offered this step, and which of them are sub-agents.

        Named tools are worked out again only when the tool or toolkit registries or the tools bound
        to the run changed (routed ones every step: the router weighs how calls went)."""
        key = self._offer_key()
        if key is not None and self._offer_cache is not None and self._offer_cache[0] == key:
            return list(self._offer_cache[1]), set(self._offer_cache[2])
        tools, agent_tools = self._offer()
        if key is not None:
            self._offer_cache = (key, list(tools), set(agent_tools))
        return tools, agent_tools

    def _offer_key(self) -> tuple | None:
        """What the named tools offered depend on (None: not cached, see :meth:`_offered`)."""
        if self.agent.tools is None or self.agent.envs:  # routed, or environments checked every step
            return None
        db = self.ws.db
        return (
            db.last_change(self.ws.tools.kind),
            db.last_change(self.ws.toolkits.kind),
            tuple(self.ctx.bound(self.ws.tools.kind)),
            tuple(self._controls()),
        )

    def _hidden_tools(self) -> int:
        """How many registered tools are offered only by name (counted once per registry change)."""
        seq = self.ws.db.last_change(self.ws.tools.kind)
        if self._hidden is None or self._hidden[0] != seq:
            # the store counts them (``routable`` reads this field) instead of every record being loaded
            self._hidden = (seq, self.ws.db.count_heads(self.ws.tools.kind, "$.metadata.routing", "explicit"))
        return self._hidden[1]

    def _offer(self) -> tuple[list[dict[str, Any]], set[str]]:
        ws = self.ws
        if self.agent.tools is not None:
            records = ws.tools.prune([ws.tools.get(n) for n in self.agent.tools], self.ctx)
        else:
            hidden = self._hidden_tools()
            k = 20 + hidden
            routed = (
                ws.tools.route(context=self.ctx, k=k)
                if len(ws.tools) <= k
                else ws.tools.route(self.task, self.ctx, k=k)
            )
            records = [r for r in routed if routable(r)][:20]
        offered_names = {r.name for r in records}
        extra = [ws.tools.get(n) for n in dict.fromkeys(self._environment_tools()) if n not in offered_names]
        records.extend(ws.tools.prune(extra, self.ctx))  # preconditions and conflicts apply to them too
        agent_tools: set[str] = set()
        for sub in self.agent.sub_agents:
            tool_name = sub if sub.endswith("agent") else f"{sub}_agent"
            if tool_name not in ws.tools:
                from tea_notebook.protocol.transformations import a2t

                a2t(ws, sub)
            if tool_name not in {r.name for r in records}:
                records.append(ws.tools.get(tool_name))
            agent_tools.add(tool_name)
        records = [r for r in records if r.origin != "agent" or r.name in agent_tools]
        tools = [r.to_openai() for r in records]
        if self.todo is not None:
            tools.append(TODO_TOOL)
        tools.extend(self._controls().values())
        return tools, agent_tools

    # -- hooks ----------------------------------------------------------------------------
    def _controls(self) -> dict[str, dict[str, Any]]:
        """The tools this loop handles itself, by name (OpenAI definitions); a run ends through one."""
        return {"done": DONE_TOOL}

    async def _control(self, call: ToolCall, step: int) -> Outcome:
        """Handle a call of one of :meth:`_controls` (the only action of its step)."""
        bad = self._done_problem(call.arguments)
        if bad is not None:
            return Outcome("invalid", bad)
        args = call.arguments
        status, note = self._decided_status(bool(args.get("success")))
        return Outcome(
            "end", "finished" + note, status, str(args.get("text", "")), list(args.get("files_to_display") or [])
        )

    def _decided_status(self, claimed: bool) -> tuple[str, str]:
        """The run's status when the model ends it claiming ``claimed`` success, and a note on why it
        differs. A scripted / offline model is not taken at its word: a tool that failed with no later
        action succeeding makes the run ``failed``; the demo model, which relays a tool's result
        without knowing whether it answers the task, ends ``unverified``."""
        if not claimed:
            return "failed", ""
        if is_offline(self.model) and self.unrecovered:
            failed = ", ".join(dict.fromkeys(self.unrecovered))
            return "failed", f" (marked failed: {failed} failed and no later action succeeded)"
        if self.model == DEMO_MODEL:
            return "unverified", " (unverified: the demo model cannot check that the result answers the task)"
        return "success", ""

    async def _before_step(self, step: int) -> tuple[str, str] | None:
        """Called before each step: ``(status, answer)`` ends the run there, None goes on (ToolSelf
        configures its stages here; CORAL members stop when their session is over)."""
        return None

    def _messages(self, step: int, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The prompt of one step."""
        return build_messages(
            task=self.task,
            files=self.files,
            step=step,
            max_steps=self.max_steps,
            steps=self.steps,
            summaries=self.summaries,
            insights=self.insights,
            todo=self.todo.render() if self.todo else "",
            environments=self._environments(),
            tools=tools,
            max_actions=self.agent.max_actions,
            native=self.native,
            system_prompt=self.agent.system_prompt,
            final_tool=next(iter(self._controls()), ""),
        )

    def _environment_tools(self) -> list[str]:
        """The tools of every bound environment (lifted by E2T into a toolkit on first use)."""
        from tea_notebook.protocol.transformations import e2t

        names: list[str] = []
        for env in self.agent.envs:
            self.ws.envs.ensure(env)
            if env not in self.ws.toolkits:
                e2t(self.ws, env)
            names.extend(self.ws.toolkits.get(env).tools)
        return names

    def _delegation(self, call: ToolCall) -> ToolCall:
        """A sub-agent always receives the ORIGINAL task unmodified (AgentOrchestra's rule), with the
        caller's own wording kept as an instruction, and absolute file paths."""
        args = dict(call.arguments)
        given = str(args.get("task", "")).strip()
        task = (
            self.task
            if given in ("", self.task.strip())
            else f"{self.task}\n\nInstruction from {self.agent.name}: {given}"
        )
        files = [str(Path(f).expanduser().resolve()) for f in args.get("files") or [] if isinstance(f, str)]
        return ToolCall(call.id, call.name, {**args, "task": task, "files": files}, call.raw_arguments)

    def _not_an_object(self, call: ToolCall) -> str:
        """The observation for a call whose arguments are not one JSON object (a list, a number,
        text that is not JSON): what came, and the named arguments the tool takes."""
        from tea_notebook.protocol.schema import not_an_object

        record = self.ws.tools.current(call.name)
        problem = not_an_object(record.parameters if record is not None else None, call.arguments)
        return f"Error: arguments of {call.name} are not a JSON object: {problem.message}"

    async def _run_action(self, call: ToolCall, step: int) -> tuple[str, bool, str | None]:
        """Run one action; returns ``(observation, ok, error type)``."""
        override = self.override
        verbatim = override is not None and call.id in override.verbatim
        if call.name in self.agent_tools and isinstance(call.arguments, dict) and not verbatim:
            call = self._delegation(call)
        if override is not None and call.id in override.stored:  # it returned before the run stopped
            obs = override.stored[call.id]
            ok = not str(obs).startswith("Error")
            self.emit(
                "tool_call", {"id": call.id, "name": call.name, "arguments": call.arguments, "replayed": True}, step
            )
            result = {"id": call.id, "name": call.name, "ok": ok, "error_type": None, "observation": obs}
            self.emit("tool_result", {**result, "latency": None, "replayed": True}, step)
            return obs, ok, None
        self.emit("tool_call", {"id": call.id, "name": call.name, "arguments": call.arguments}, step)
        # what the step did so far is durable before a tool acts: a run resumed after a crash
        # repeats no call that returned (nor the model call that chose them)
        self.events.flush()
        started = time.perf_counter()
        returned = None
        if not isinstance(call.arguments, dict):
            obs, ok, err = self._not_an_object(call), False, "ValidationError"
        elif call.name == "todo" and self.todo is not None:
            try:
                obs, ok, err = self.todo.apply(**call.arguments), True, None
            except (TypeError, ValueError) as exc:
                obs, ok, err = f"Error (todo): {exc}", False, "ValidationError"
        else:
            self.in_flight[call.id] = (call.name, step)
            try:
                result = await asyncio.wait_for(
                    self.ws.tools.ainvoke(call.name, call.arguments, self.ctx), self.agent.tool_timeout
                )
                obs, ok = result.to_observation(), result.ok
                err = None if result.ok else result.error.get("type")
            except asyncio.TimeoutError:
                obs, ok, err = f"Error: {call.name} timed out after {self.agent.tool_timeout:g}s", False, "Timeout"
            finally:
                self.in_flight.pop(call.id, None)
            if self.ctx.cancel.is_set() and call.id not in self.reported_stops:
                # stopped while it ran, and it ended on its own (a sync tool that saw ToolContext.cancelled)
                self.reported_stops.add(call.id)
                returned = obs  # what a resumed run takes as this call's result (it is not run again)
                obs = f"Error: {call.name} was interrupted when the run was stopped; it ended: {obs}"
                ok, err = False, "Interrupted"
                message = f"stopped while running {call.name}; none of them is still running"
                stopped = {"kind": "tools_interrupted", "message": message, "tools": [call.name], "still_running": []}
                self.emit("error", stopped)
        if ok:
            self.unrecovered.clear()
        elif err not in _INVALID_CALL:  # the tool ran and failed (a call it refused is the model's mistake)
            self.unrecovered.append(call.name)
        self.emit(
            "tool_result",
            {
                "id": call.id,
                "name": call.name,
                "ok": ok,
                "error_type": err,
                "observation": obs,
                "latency": time.perf_counter() - started,
                **({"returned": returned} if returned is not None else {}),
            },
            step,
        )
        return obs, ok, err

    # -- the loop -------------------------------------------------------------------------
    async def _call_model(
        self, step: int, tools: list[dict[str, Any]], messages: list[dict[str, Any]] | None = None
    ) -> ModelReply:
        messages = self._messages(step, tools) if messages is None else messages
        client = self.agent.client
        chars = sum(map(_content_chars, messages))
        offered = tools if self.native else None
        context = self.contexts.record(messages, offered, {"model": self.model, **client.params})
        request = self.request_event(client, self.model, messages=len(messages), prompt_chars=chars, context=context)
        self.emit("model_request", request, step)
        reply = await self._cancellable(
            client.complete(self.model, messages, tools if self.native else None, defaults=self.model_defaults())
        )
        self.count(reply)
        self.emit(
            "model_response",
            {
                "model": self.model,
                "content": reply.content,
                "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls],
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "cost": reply.cost,
                "latency": reply.latency,
                "scripted": reply.scripted,
            },
            step,
        )
        return reply

    def _environments(self) -> list[dict[str, Any]]:
        out = []
        for name in self.agent.envs:
            rec = self.ws.envs.ensure(name)
            entry: dict[str, Any] = {"name": name, "rules": rec.rules, "state": self.ws.envs.state(name, self.ctx)}
            png = self.ws.envs.vision(name, self.ctx)
            if png:
                entry["vision"] = f"a screenshot of {name} is attached ({len(png) // 1024} KB PNG)"
                if self._sees_images():
                    entry["image"] = "data:image/png;base64," + base64.b64encode(png).decode()
            elif rec.screenshot:
                entry["vision"] = rec.screenshot
            out.append(entry)
        return out

    def _sees_images(self) -> bool:
        return takes_images(self.model, self.agent.vision)

    def _actions(self, reply: ModelReply) -> tuple[dict[str, str], list[ToolCall]]:
        """``(thoughts, actions)`` from a reply; raises ValueError with what the model got wrong."""
        thoughts: dict[str, str] = {}
        if self.native:
            if reply.content:
                try:
                    thoughts = {k: str(v) for k, v in _parse_json_object(reply.content).items() if k != "action"}
                except (ValueError, json.JSONDecodeError):
                    thoughts = {"thinking": reply.content}
            return thoughts, list(reply.tool_calls)
        if not reply.content:
            raise ValueError("the reply was empty; answer with the JSON object described in <output>")
        try:
            data = _parse_json_object(reply.content)
        except (ValueError, json.JSONDecodeError) as exc:
            raise ValueError(f"the reply is not valid JSON ({exc}); answer with ONLY the JSON object") from None
        thoughts = {k: str(v) for k, v in data.items() if k != "action"}
        raw = data.get("action") or []
        if not isinstance(raw, list):
            raise ValueError("'action' must be a list of {name, args}")
        calls = []
        for i, item in enumerate(raw):
            if not isinstance(item, dict) or "name" not in item:
                raise ValueError(f"action {i + 1} must be an object with 'name' and 'args'")
            calls.append(ToolCall(f"json_{i}", str(item["name"]), item.get("args", {})))
        return thoughts, calls

    async def _cancellable(self, coro: Awaitable[Any]) -> Any:
        """Await ``coro`` while watching the stop signal; cancelling the run cancels it too."""
        task = asyncio.ensure_future(coro)
        try:
            while not task.done():
                if self.ctx.cancel.is_set():
                    await self._stop_in_flight(task)
                    raise RunInterrupted("the run was stopped")
                await asyncio.wait({task}, timeout=0.05)
        except asyncio.CancelledError:
            running = dict(self.in_flight)
            task.cancel()
            if running:
                self._report_stopped(running, sorted({name for name, _ in running.values()}))
            raise
        return task.result()

    async def _stop_in_flight(self, task: "asyncio.Future[Any]") -> None:
        """The run was stopped: cancel what ``task`` runs (in-process async tools are cancelled,
        sandboxed ones killed), wait up to :data:`STOP_GRACE` seconds for synchronous tools, which
        see ``ToolContext.cancelled`` and should return, then say in the trajectory which tools were
        running and which still are."""
        from tea_notebook._threads import ACTION_THREADS

        running = dict(self.in_flight)
        task.cancel()
        deadline = time.monotonic() + STOP_GRACE
        names = {name for name, _ in running.values()}
        while time.monotonic() < deadline:
            if task.done() and not any(ACTION_THREADS.running(f"tool {n}") for n in names):
                break
            await asyncio.sleep(0.02)
        if running:
            still = sorted(n for n in names if not task.done() or ACTION_THREADS.running(f"tool {n}"))
            self._report_stopped(running, still)

    def _report_stopped(self, running: dict[str, tuple[str, int]], still: list[str]) -> None:
        """One ``tool_result`` per tool call the stop cut short, and an ``error`` event naming them
        (calls that ended and reported it themselves meanwhile are left out)."""
        running = {k: v for k, v in running.items() if k not in self.reported_stops}
        self.reported_stops.update(running)
        if not running:
            return
        still = [n for n in still if n in {name for name, _ in running.values()}]
        for call_id, (name, step) in running.items():
            state = (
                "it is still running (a synchronous tool that did not check its cancel flag)"
                if name in still
                else "it was stopped"
            )
            self.emit(
                "tool_result",
                {
                    "id": call_id,
                    "name": name,
                    "ok": False,
                    "error_type": "Interrupted",
                    "observation": f"Error: {name} was interrupted when the run was stopped; {state}",
                    "latency": None,
                },
                step,
            )
        tools = sorted({name for name, _ in running.values()})
        message = f"stopped while running {', '.join(tools)}" + (
            f"; still running: {', '.join(still)}" if still else "; none of them is still running"
        )
        self.emit("error", {"kind": "tools_interrupted", "message": message, "tools": tools, "still_running": still})

    async def execute(self) -> RunResult:
        first_hosted = self.agent.tool_mode == "auto" and not is_offline(self.model) and "litellm" not in sys.modules
        self.start(
            fork=self.fork,
            files=self.files,
            max_steps=self.max_steps,
            native_tools=self.native,
            forked_from=self.fork[0] if self.fork else None,
            fork_unit=self.fork_unit,
            **self.plan.started(),
        )
        if first_hosted:
            await self._import_litellm()
        for replayed, extra in self.plan.shown:  # one transaction for all of them, not one each
            self.emit("step", {**_step_data(replayed), "replayed": True, **extra}, replayed.number, durable=False)
        self.events.flush()
        self._replay_todo()
        status, answer, error, files = "max_steps", "", None, []
        consecutive = 0
        try:
            for step in range(self.last_step + 1, self.max_steps + 1):
                if self.ctx.cancel.is_set():
                    raise RunInterrupted("the run was stopped")
                stop = await self._before_step(step)
                if stop is not None:
                    status, answer = stop
                    break
                tools, agent_tools = self._offered()
                self.agent_tools = agent_tools
                offered = {t["function"]["name"] for t in tools}
                self.override = override = self.plan.overrides.get(step)
                self.ctx.subforks = override.subforks if override is not None else {}
                taken = override is not None and override.calls is not None
                reply = None if taken else await self._call_model(step, tools, override and override.messages)
                record = StepRecord(step)
                if override is not None and override.note:
                    record.note = override.note
                try:
                    thoughts, calls = (dict(override.thoughts), list(override.calls)) if taken else self._actions(reply)
                    record.thinking = thoughts.get("thinking", "")
                    record.evaluation = thoughts.get("evaluation_previous_goal", "")
                    record.memory = thoughts.get("memory", "")
                    record.next_goal = thoughts.get("next_goal", "")
                    problem = self._check(calls, offered)
                except ValueError as exc:
                    calls, problem = [], str(exc)
                if problem:
                    consecutive += 1
                    record.results.append(("error", "{}", f"Error: {problem}"))
                    self.emit("error", {"kind": "model_output", "message": problem, "consecutive": consecutive}, step)
                    self._finish_step(record)
                    if consecutive >= self.agent.max_consecutive_errors:
                        status, error = "error", f"{consecutive} consecutive malformed model outputs; last: {problem}"
                        break
                    continue
                if calls[0].name in self._controls():
                    call = calls[0]
                    shown_args = json.dumps(call.arguments, ensure_ascii=False, default=str)
                    outcome = (
                        await self._control(call, step)
                        if isinstance(call.arguments, dict)
                        else Outcome("invalid", self._not_an_object(call).removeprefix("Error: "))
                    )
                    if outcome.kind == "invalid":
                        consecutive += 1
                        record.results.append((call.name, shown_args, f"Error: {outcome.observation}"))
                        self.emit(
                            "error",
                            {"kind": "model_output", "message": outcome.observation, "consecutive": consecutive},
                            step,
                        )
                        self._finish_step(record)
                        if consecutive >= self.agent.max_consecutive_errors:
                            status = "error"
                            error = f"{consecutive} consecutive malformed model outputs; last: {outcome.observation}"
                            break
                        continue
                    record.results.append((call.name, shown_args, outcome.observation))
                    self._finish_step(record)
                    if outcome.kind == "end":
                        status, answer, files = outcome.status, outcome.answer, outcome.files
                        break
                    consecutive = 0
                    continue
                calls = calls[: self.agent.max_actions]
                if len(calls) > 1 and all(c.name in agent_tools for c in calls):
                    outcomes = await self._cancellable(asyncio.gather(*(self._run_action(c, step) for c in calls)))
                else:
                    outcomes = []
                    for c in calls:
                        if self.ctx.cancel.is_set():
                            raise RunInterrupted("the run was stopped")
                        outcomes.append(await self._cancellable(self._run_action(c, step)))
                for c, (obs, _ok, _err) in zip(calls, outcomes):
                    record.results.append((c.name, json.dumps(c.arguments, ensure_ascii=False, default=str), obs))
                schema_failures = [err for _, _, err in outcomes if err in _INVALID_CALL]
                consecutive = consecutive + 1 if len(schema_failures) == len(outcomes) else 0
                self._finish_step(record)
                if consecutive >= self.agent.max_consecutive_errors:
                    status, error = "error", f"{consecutive} consecutive steps whose every action was invalid"
                    break
                await self._fold_memory(step)
            else:
                answer = answer or "The step limit was reached before the task was done."
        except RunInterrupted:
            status, error = "interrupted", "stopped by the user"
        except ModelError as exc:
            status, error = "error", str(exc)
            self.emit("error", {"kind": "model", "message": str(exc)})
        except TeaError as exc:
            status, error = "error", str(exc)
            self.emit("error", {"kind": type(exc).__name__, "message": str(exc)})
        except asyncio.CancelledError:
            status, error = "interrupted", "cancelled"
            self._close(status, answer, error)
            self._release_sessions_later()
            raise
        result = self._close(status, answer, error, files)
        await self.release_sessions()
        return result

    async def _import_litellm(self) -> None:
        """The first hosted model call of a kernel imports litellm (seconds, once): off the shared
        loop, and said in the run's view while it lasts (a ``notice`` event), then how long it took."""
        from tea_notebook.models.client import _litellm

        self.emit("notice", {"message": "importing litellm for the first hosted model call (a few seconds, once)"})
        started = time.perf_counter()
        await asyncio.to_thread(_litellm)
        self.native = self._native()
        seconds = time.perf_counter() - started
        done = f"litellm imported in {seconds:.1f} s (once per kernel)" if seconds >= 1 else ""
        self.emit("notice", {"message": done, "seconds": round(seconds, 2)}, durable=True)

    def _replay_todo(self) -> None:
        """A fork's todo.md as it was after the replayed steps: their todo calls applied again (the
        list is this run's own file; nothing outside the run folder changes)."""
        if self.todo is None:
            return
        for replayed, _ in self.plan.shown:
            for tool, args, observation in replayed.results:
                if tool != "todo" or str(observation).startswith("Error"):
                    continue
                try:
                    arguments = json.loads(args)
                    if isinstance(arguments, dict):
                        self.todo.apply(**arguments)
                except (TypeError, ValueError):
                    continue  # the original call failed the same way: nothing to rebuild

    def _release_sessions_later(self) -> None:
        """On cancellation: the stop is scheduled on the background loop, not awaited here."""
        if self.owns_sessions():
            from tea_notebook._sync import submit

            submit(self.ws.envs.arelease(self.run_id))

    def _close(self, status: str, answer: str, error: str | None, files: list[str] | None = None) -> RunResult:
        self.close(status, answer, error, self.last_step, files)
        return RunResult(
            self.run_id,
            self.agent.name,
            self.task,
            self.model,
            status,
            answer or (error or ""),
            self.last_step,
            self.prompt_tokens,
            self.completion_tokens,
            self.cost,
            files or [],
            error,
            self.ws,
        )

    def _check(self, calls: list[ToolCall], offered: set[str]) -> str | None:
        if not calls:
            return "the action list is empty; call at least one tool (or 'done')"
        names = [c.name for c in calls]
        control = [n for n in names if n in self._controls()]
        if control and len(names) > 1:
            return f"'{control[0]}' must be the only action in its step"
        unknown = [n for n in names if n not in offered]
        if unknown:
            return f"unknown action(s) {', '.join(unknown)}; available: {', '.join(sorted(offered))}"
        return None

    @staticmethod
    def _done_problem(args: Any) -> str | None:
        if not isinstance(args, dict):
            return "done needs an object {success, text, files_to_display}"
        if not isinstance(args.get("success"), bool):
            return "done needs 'success' (true or false)"
        if not isinstance(args.get("text"), str):
            return "done needs 'text' (the final answer)"
        return None

    def _finish_step(self, record: StepRecord) -> None:
        self.steps.append(record)
        self.last_step = record.number
        # the step's events and its tools' usage counts: one transaction
        self.emit("step", _step_data(record), record.number, uses=[(self.ws.tools.kind, self.ws.tools.take_usage())])

    async def _fold_memory(self, step: int) -> None:
        """Keep the history within ``memory_budget`` tokens: fold the oldest steps into a summary,
        and once the summaries themselves pass half the budget, fold them into one."""
        budget = self.agent.memory_budget
        live = self.steps[: -self.agent.keep_recent_steps] if self.agent.keep_recent_steps else list(self.steps)
        if live and sum(s.size() for s in self.steps) > budget:
            from tea_notebook.runtime.memory import summarise_steps

            summary, insights = await summarise_steps(self, live)
            self.steps = self.steps[len(live) :]
            self.summaries.append(summary)
            self.insights = [i for i in self.insights if i not in insights] + insights
            self.ws.memory_store.save(self.run_id, self.task, summary, insights)
            folded = [s.number for s in live]
            self.emit("memory_written", {"summary": summary, "insights": insights, "folded_steps": folded}, step)
        if sum(len(s) for s in self.summaries) // 4 > budget // 2:
            from tea_notebook.runtime.memory import merge_summaries

            self.summaries = [await merge_summaries(self, self.summaries, budget // 2)]
            self.emit("memory_written", {"summary": self.summaries[0], "insights": [], "merged": True}, step)
        self.insights = self.insights[-8:]


def _step_data(record: StepRecord) -> dict[str, Any]:
    return {
        "thinking": record.thinking,
        "evaluation": record.evaluation,
        "memory": record.memory,
        "next_goal": record.next_goal,
        "results": [list(r) for r in record.results],
        **({"note": record.note} if record.note else {}),
    }
