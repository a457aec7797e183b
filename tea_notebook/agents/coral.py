"""CORAL (Ren et al.): an information-flow orchestrator and workers that coordinate only by A2A messages.

There is no workflow: every agent of the team runs concurrently on the event loop, each an ordinary
tool-calling agent of this project whose prompt carries its role (the paper's App. B prompts) and,
at every step, the message history ℋ of its threads. The orchestrator reads ℋ and decides whom to
inquire (reasoning: plan, critique, verify) or instruct (a concrete task) next, confirms the answer
and calls ``submit_answer``; workers answer only it (the asymmetric constraint, enforced by
:class:`~tea_notebook.agents.a2a.A2ASession`). A worker wraps registered agents of the workspace
(the deep researcher, the analyzer, any agent a user brings) as its tools, as the authors' code wraps
an inner assistant; a worker may also carry tools and environments directly.

Budgets: a wall-clock budget after which the orchestrator is told to submit its best answer (and
after a grace period the conversation is closed), a cap on messages, waits that time out, steps
per agent. A worker whose run ends (a crash included) is reported to the orchestrator as a message.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from tea_notebook.agents.a2a import (
    MAIN_THREAD,
    ORCHESTRATOR_TOOLS,
    SYSTEM_SENDER,
    WORKER_TOOLS,
    A2ASession,
    ensure_toolkit,
)
from tea_notebook.agents.kinds import agent_kind
from tea_notebook.errors import TeaError
from tea_notebook.models.client import ModelClient, resolve_model
from tea_notebook.protocol.context import Context
from tea_notebook.protocol.records import AgentRecord
from tea_notebook.runtime.agent import Agent, AgentRun, RunResult, sub_agent_answer
from tea_notebook.runtime.divergence import watch_messages
from tea_notebook.runtime.event_types import FinishedStatus
from tea_notebook.runtime.forking import ForkPlan, plan_resume, refuse_split_turn
from tea_notebook.runtime.jobs import Runnable, checked_result
from tea_notebook.runtime.replay_policy import ReplayPolicy, fresh_start, govern
from tea_notebook.runtime.replies import planned_calls
from tea_notebook.runtime.runlog import RunLog
from tea_notebook.runtime.stop_reason import stop_reason

if TYPE_CHECKING:
    from tea_notebook.runtime.events import Event
    from tea_notebook.runtime.host import RunHost

ORCHESTRATOR = "information_flow_orchestrator"
PLANNER = "planner_agent"

ORCHESTRATOR_RULES = """===== RULES OF INFORMATION FLOW ORCHESTRATOR =====
You are an advanced information_flow_orchestrator.
Core Responsibilities:
1. Inquiry and Relay Management
- MONITOR the task process and make sure it is reliable and healthy.
- INQUIRE proper agents to perform any additional reasoning required to support progress or resolve uncertainty. Reasoning means planning, critique, verification, assessing the reliability of intermediate results, replanning, reflection or questioning; it does not execute actions, it produces or assesses task instructions.
- RELAY task-level content and necessary previous results to proper agents as task instructions (retrieve information, inspect files, browse, run code), in small and manageable units. Relay only what the task or other agents actually said.
- Confirm the generated answer with proper agent(s) and reach a consistent consensus before it is submitted.
2. Communication with Other Agents
- Use send_message to communicate with other agents: mention the agent each message is for. Use wait_for_mentions to receive their replies.
- Inquire or instruct one agent at a time and wait for its reply; address several at once only for independent work.
- Everyone is in thread 'main'. Use create_thread for a focused conversation and close_thread when a thread is done or crowded (its summary stays visible).
3. Submit Final Answer
- Confirm the final answer with the planner or proper agent(s) and reach a consistent consensus.
- Call submit_answer to submit the final answer when it is generated and verified. When the time budget is spent, submit your current best answer at once.
The team:
{team}"""

PLANNER_RULES = """===== RULES OF PLANNER AGENT =====
You are an advanced planner_agent to decompose the task into subtasks, replan the task based on previous attempted trajectories and cooperate with other agents.
Core Responsibilities:
1. Task Decomposition
- You must send all decomposed subtasks to information_flow_orchestrator in the format of a numbered list within <tasks> tags:
<tasks>
<task>Subtask 1</task>
<task>Subtask 2</task>
</tasks>
- You MUST NOT explicitly mention what agents and what tools to use in the subtasks; let the agents decide what to do.
- Though it is not a must, try your best to make each subtask achievable for an agent.
2. Task Progress Reasoning
- When asked to perform verification, critique, assessing the reliability of intermediate results, replanning, reflection or questioning, provide the reasoning that supports task progress.
3. Communication with Other Agents
- You may communicate only with information_flow_orchestrator, via send_message. Use wait_for_mentions to receive messages.
- Start by calling wait_for_mentions until you receive a request. When you have been asked something, first answer with send_message, then wait again.
- If you simply need more information, ask information_flow_orchestrator."""

WORKER_RULES = """===== RULES OF {title} =====
You are an advanced {name} powered by {capability}.
Core Capabilities:
1. {description} - Call proper tools to solve the tasks you receive.{delegate}
2. Communication with Other Agents - Use send_message to report to information_flow_orchestrator, the only agent you may message. Use wait_for_mentions to receive tasks.
- Start by calling wait_for_mentions until you receive an instruction.
- After you receive results, always report your findings to information_flow_orchestrator with send_message, then wait again.
- If you are blocked, report it and recommend which agents should be involved, but NEVER message them directly."""

MEMBER_FRAME = """{rules}

<inputs>At every step you receive <agent_state> (step info, the team's task, your own recent steps) and <environment_state>, where the 'coral' environment holds the message history of your threads: it is the state you share with the team.</inputs>
<environment_state_rules>{{environments_rules}}</environment_state_rules>
<action_rules>Use only the available actions, at most {{max_actions}} per step; they run in order.</action_rules>
{{output_rules}}"""

#: the paper's roster built from this project's agents (Table 3): name → (agents wrapped, envs, capability, what it does)
DEFAULT_WORKERS: dict[str, dict[str, Any]] = {
    "web_agent": {
        "agents": ["deep_researcher", "browser_use"],
        "capability": "web browsing/searching capabilities, but you are not able to run code script",
        "description": "Searches the web, reads and operates web pages.",
    },
    "document_processing_agent": {
        "agents": ["deep_analyzer"],
        "capability": "documentation processing capabilities",
        "description": "Processes documents and multimodal data (PDF, Word, spreadsheets, slides, archives, images).",
    },
    "reasoning_coding_agent": {
        "envs": ["python"],
        "capability": "reasoning, coding and running code script capabilities",
        "description": "Reasons step by step and writes and runs Python code (sandboxed).",
    },
}
#: the specialists the default workers wrap, each made by its kind's shortcut when not registered
_SPECIALISTS = ("deep_researcher", "browser_use", "deep_analyzer")


#: what ``send_message`` returns when it posted message N, and a message line ``wait_for_mentions`` delivers
_SENT = re.compile(r"^Sent message #(\d+) ")
_DELIVERED = re.compile(r"^#(\d+) \[thread ", re.M)


def _cut(events: list["Event"], cut: int, upto: int) -> list["Event"]:
    """A member's own events as they stood when message ``upto`` was posted (event ``cut``): the
    model reply to a request made before (a function of what it was asked then), and the results of
    the ``send_message`` calls that posted messages 1..``upto`` (they are replayed, never sent again)."""
    kept = [e for e in events if e.seq < cut]
    asked = {e.step for e in kept if e.type == "model_request"} - {e.step for e in kept if e.type == "model_response"}
    for e in events:
        if e.seq < cut:
            continue
        sent = _SENT.match(str(e.data.get("observation", ""))) if e.type == "tool_result" else None
        if (e.type == "model_response" and e.step in asked and not e.data.get("stage")) or (
            sent is not None and int(sent.group(1)) <= upto
        ):
            kept.append(e)
    return kept


def member_forks(
    ws: "RunHost", run_id: str, upto: int, policy: ReplayPolicy | None = None
) -> tuple[dict[str, ForkPlan], dict[str, set[int]]]:
    """How each member of the CORAL run ``run_id`` goes on in a fork at message ``upto``: a plan that
    replays the steps it had finished when that message was posted and takes up the step it was in
    (its model's reply kept, the calls that had returned not run again, the others run); and the
    messages each member had been delivered by then (the rest of its mentions are still pending).
    Empty for a fork at message 0 (every member starts afresh) or a run without member runs. A replay
    ``policy`` answers the calls each member (and a sub-agent it was running) makes again from its
    own original run; at message 0 each member then starts afresh under it."""
    if upto < 1:
        if policy is None:
            return {}, {}
        rows = ws.db.runs(10_000, parent_id=run_id)
        return {r["agent"]: fresh_start(policy, ws.events.events(r["id"], nested=False), r["id"]) for r in rows}, {}
    source = ws.db.run_row(run_id) or {}
    if source.get("forked_from") and source.get("fork_step") is not None and upto <= source["fork_step"]:
        # a message it replayed: as its source stood there
        return member_forks(ws, source["forked_from"], upto, policy)
    team = ws.events.events(run_id, nested=False)
    cut = next((e.seq for e in team if e.type == "message" and e.data.get("seq") == upto), None)
    if cut is None:
        return {}, {}
    plans: dict[str, ForkPlan] = {}
    delivered: dict[str, set[int]] = {}
    for row in ws.db.runs(10_000, parent_id=run_id):
        plan, kept = _plan_at(ws, row, cut, upto, run_id, policy)
        plans[row["agent"]] = plan
        delivered[row["agent"]] = {int(n) for text in _waited(kept) for n in _DELIVERED.findall(text)}
    return plans, delivered


def _waited(events: list["Event"]) -> list[str]:
    """What the ``wait_for_mentions`` calls among a member's ``events`` returned (a step it replayed
    from the run it was forked from has no call events: its results say it)."""
    out = [
        str(e.data.get("observation", ""))
        for e in events
        if e.type == "tool_result" and e.data.get("name") == "wait_for_mentions"
    ]
    for e in events:
        if e.type == "step" and e.data.get("replayed"):
            out += [str(r[2]) for r in e.data.get("results") or [] if len(r) > 2 and r[0] == "wait_for_mentions"]
    return out


def _plan_at(
    ws: "RunHost", row: dict, cut: int, upto: int, team: str, policy: ReplayPolicy | None = None
) -> tuple[ForkPlan, list["Event"]]:
    """The plan that continues the run ``row`` (a member's, or a sub-agent's it was running) as it
    stood at event ``cut``, and its events kept; a sub-agent run still going at the cut goes on
    from its own plan (the call that started it continues it instead of starting afresh). A replay
    ``policy`` answers the calls it makes again from ``row``'s own recording."""
    events = ws.events.events(row["id"], nested=False)
    kept = _cut(events, cut, upto)
    plan = plan_resume(kept, row["id"])
    plan.resumed = False  # it goes on from its team's fork: no run of its own was stopped
    plan.model = row["model"] or None
    plan.max_steps = next((e.data.get("max_steps") for e in events if e.type == "run_started"), None)
    taken = plan.overrides.get(plan.last_step + 1)
    if taken is None:
        return govern(plan, policy, events), kept
    taken.note = f"taken up again at message {upto} of run {team}: {taken.note.removeprefix('taken up again: ')}"
    # the calls as the model chose them (the history shows those; a sub-agent's is delegated again as it was)
    reply = next(
        (
            e.data
            for e in kept
            if e.type == "model_response" and e.step == plan.last_step + 1 and not e.data.get("stage")
        ),
        None,
    )
    chosen = {c.id: c for c in planned_calls(reply)} if reply is not None else {}
    if taken.calls is not None and all(c.id in chosen for c in taken.calls):
        taken.calls = [chosen[c.id] for c in taken.calls]
        taken.verbatim = set()
    for child in ws.db.runs(10_000, parent_id=row["id"]):
        own = ws.events.events(child["id"], nested=False)
        ended = [e.seq for e in own if e.type == "run_finished"]
        if own and own[0].seq < cut and (not ended or ended[0] > cut):  # it was running at the cut
            sub, _ = _plan_at(ws, child, cut, upto, team, policy)
            taken.subforks.setdefault(child["agent"], []).append(sub)
    return govern(plan, policy, events), kept


def _worker_spec(name: str, value: Any, ws: "RunHost") -> dict[str, Any]:
    """A worker's settings from what the user gave: a registered agent's name, or a dict with
    ``agents`` (registered agents it wraps), ``tools``, ``envs``, ``description``, ``capability``."""
    if isinstance(value, str):
        value = {"agents": [value]}
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise TeaError(f"worker {name!r}: give a registered agent's name or a dict of settings, not {value!r}")
    unknown = set(value) - {"agents", "tools", "envs", "description", "capability", "model"}
    if unknown:
        raise TeaError(f"worker {name!r}: unknown settings {', '.join(sorted(unknown))}")
    spec = {
        "agents": list(value.get("agents") or []),
        "tools": list(value.get("tools") or []),
        "envs": list(value.get("envs") or []),
        "model": value.get("model"),
    }
    if not (spec["agents"] or spec["tools"] or spec["envs"]):
        raise TeaError(f"worker {name!r} has nothing to work with: give it agents, tools or envs")
    described = [ws.agents.get(a).description for a in spec["agents"] if a in ws.agents]
    spec["description"] = (
        value.get("description") or " ".join(described) or f"A worker with {', '.join(spec['tools'] + spec['envs'])}."
    )
    spec["capability"] = value.get("capability") or spec["description"].rstrip(".").lower()
    return spec


@agent_kind(
    "coral",
    shortcuts=("coral",),
    options=("max_steps",),
    refused_as="a CORAL team (set its workers instead)",
    fork="messages",
)
class CoralTeam(Runnable):
    """A CORAL team registered in ACP (kind ``coral``): the orchestrator, the planner (``planner=False``
    leaves it out) and ``workers``. ``model`` is every agent's model unless ``models`` names one for a
    member or a group (``"orchestrator"``, ``"planner"``, ``"workers"``).

    ``workers``: member name → a registered agent's name (wrapped as the worker's tool), or a dict of
    settings (``agents``, ``tools``, ``envs``, ``description``, ``capability``, ``model``); a list of
    registered agents' names makes one worker each. Default: the paper's web, document and
    reasoning & coding agents built on the deep researcher, the browser-use agent, the deep
    analyzer and the sandboxed python environment (the specialists are registered if missing).
    """

    kind = "coral"

    def __init__(
        self,
        workspace: "RunHost",
        name: str = "coral",
        *,
        workers: dict[str, Any] | list[str] | None = None,
        planner: bool = True,
        model: str | None = None,
        models: dict[str, str] | None = None,
        budget_seconds: float = 1800.0,
        max_messages: int = 200,
        max_steps: int = 60,
        wait_timeout_ms: int = 30000,
        description: str = "A CORAL team: an information-flow orchestrator coordinating agents by A2A messages.",
        client: ModelClient | None = None,
        register: bool = True,
    ):
        if budget_seconds <= 0 or max_messages < 1 or max_steps < 1:
            raise ValueError("budget_seconds, max_messages and max_steps must be positive")
        self.workspace, self.name, self.model = workspace, name, model
        self.models = dict(models or {})
        self.planner = planner
        self.budget_seconds, self.max_messages, self.max_steps = budget_seconds, max_messages, max_steps
        self.wait_timeout_ms = wait_timeout_ms
        self.description = description
        self.client = client or ModelClient()
        if workers is None:
            for agent in _SPECIALISTS:
                if agent not in workspace.agents:
                    from tea_notebook.agents.kinds import make, shortcut

                    by_name = shortcut(agent)
                    assert by_name is not None, agent  # the built-in kinds' shortcuts
                    make(workspace, by_name.name, agent, model=model)
            workers = {k: dict(v) for k, v in DEFAULT_WORKERS.items()}
        elif isinstance(workers, (list, tuple)):
            workers = {w: w for w in workers}
        self.workers = {n: _worker_spec(n, v, workspace) for n, v in workers.items()}
        clash = {ORCHESTRATOR, PLANNER, SYSTEM_SENDER} & set(self.workers)
        if clash:
            raise TeaError(f"worker names {', '.join(sorted(clash))} are reserved for the team's own agents")
        missing = [a for spec in self.workers.values() for a in spec["agents"] if a not in workspace.agents]
        if missing:
            raise TeaError(f"workers wrap agents that are not registered in ACP: {', '.join(missing)}")
        if register:
            workspace.live_agents.put(name, self)
            record = AgentRecord(
                name=name,
                description=description,
                role="coral",
                model=model,
                max_steps=max_steps,
                relations=[{"type": "delegates_to", "target": a} for s in self.workers.values() for a in s["agents"]],
                origin="runtime",
                metadata={"kind": "coral", "config": self._config()},
            )
            workspace.agents.register(record, runtime=self._runner)

    def _config(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "planner": self.planner,
            "models": self.models,
            "budget_seconds": self.budget_seconds,
            "max_messages": self.max_messages,
            "max_steps": self.max_steps,
            "wait_timeout_ms": self.wait_timeout_ms,
        }

    @classmethod
    def from_record(cls, workspace: "RunHost", name: str, **overrides: Any) -> "CoralTeam":
        """The team registered as ``name``: the live object, or rebuilt from its ACP card."""
        live = workspace.live_agents.get(name)
        if live is not None and not overrides:
            return live
        rec = workspace.agents.get(name)
        config = {**dict(rec.metadata.get("config") or {}), "model": rec.model, "description": rec.description}
        config.update(overrides)
        config.setdefault("register", False)
        return cls(workspace, name, **config)

    def __repr__(self) -> str:
        return f"CoralTeam({self.name!r}, members={self.member_names()})"

    def member_names(self) -> list[str]:
        """The orchestrator, the planner and the workers, in that order."""
        return [ORCHESTRATOR] + ([PLANNER] if self.planner else []) + list(self.workers)

    def resolved_model(self, explicit: str | None = None) -> tuple[str, str]:
        """The team's model and why (members may have their own, see ``models``)."""
        return resolve_model(explicit, self.model, self.workspace.default_model)

    # -- members --------------------------------------------------------------------------------
    def _member_model(self, member: str, group: str, run_model: str | None) -> str | None:
        spec_model = self.workers.get(member, {}).get("model")
        return self.models.get(member) or spec_model or self.models.get(group) or run_model or self.model

    def _descriptions(self) -> dict[str, str]:
        out = {ORCHESTRATOR: "Coordinates the team: inquires, instructs, confirms and submits the answer."}
        if self.planner:
            out[PLANNER] = "Decomposes the task into subtasks, replans, verifies and critiques. Cannot execute tasks."
        out.update({n: s["description"] for n, s in self.workers.items()})
        return out

    def _members(self, session: A2ASession, run_model: str | None) -> dict[str, "CoralMember"]:
        team = "\n".join(f"- {n}: {d}" for n, d in self._descriptions().items())
        ws = self.workspace
        members = {
            ORCHESTRATOR: CoralMember(
                ws,
                ORCHESTRATOR,
                session,
                rules=ORCHESTRATOR_RULES.format(team=team),
                tools=list(ORCHESTRATOR_TOOLS),
                model=self._member_model(ORCHESTRATOR, "orchestrator", run_model),
                max_steps=self.max_steps,
                client=self.client,
            )
        }
        if self.planner:
            members[PLANNER] = CoralMember(
                ws,
                PLANNER,
                session,
                rules=PLANNER_RULES,
                tools=list(WORKER_TOOLS),
                model=self._member_model(PLANNER, "planner", run_model),
                max_steps=self.max_steps,
                client=self.client,
            )
        for name, spec in self.workers.items():
            inner = [a if a.endswith("agent") else f"{a}_agent" for a in spec["agents"]]
            delegate = (
                f" You MUST use your agent tools ({', '.join(inner)}) to approach ALL received tasks; do not solve "
                "them on your own."
                if inner
                else ""
            )
            rules = WORKER_RULES.format(
                title=name.upper().replace("_", " "),
                name=name,
                capability=spec["capability"],
                description=spec["description"].rstrip("."),
                delegate=delegate,
            )
            members[name] = CoralMember(
                ws,
                name,
                session,
                rules=rules,
                tools=list(WORKER_TOOLS) + spec["tools"],
                sub_agents=spec["agents"],
                envs=spec["envs"],
                model=self._member_model(name, "workers", run_model),
                max_steps=self.max_steps,
                client=self.client,
            )
        return members

    # -- running --------------------------------------------------------------------------------
    async def run(
        self,
        task: str,
        files: list[str] | None = None,
        *,
        model: str | None = None,
        context: Context | None = None,
        grants: list[str] | tuple[str, ...] = (),
        raise_on_error: bool = True,
        _replay: list[dict[str, Any]] | None = None,  # thread and message events of a forked run
        _fork: tuple[str, int] | None = None,
        _edit: dict[str, Any] | None = None,  # what a fork changed (the last replayed message)
        _policy: ReplayPolicy | None = None,  # a fork's replay policy, for the members' calls
    ) -> RunResult:
        """Run the team on ``task``: its :class:`RunResult` (see ``status``); a run that ends in ``error``
        raises :class:`~tea_notebook.errors.RunFailed` unless ``raise_on_error=False``."""
        ws = self.workspace
        plans: dict[str, ForkPlan] = {}
        delivered: dict[str, set[int]] | None = None
        if _fork is not None:  # before anything is written: a fork point inside a member's turn is refused
            refuse_split_turn(ws.events.events(_fork[0]), _fork[0], _fork[1])
            plans, delivered = member_forks(ws, *_fork, _policy)
        ensure_toolkit(ws)
        resolved, source = self.resolved_model(model)
        log = RunLog(ws, self.name, task, resolved, source, context)
        log.ctx.grants.update(grants)
        attached = log.attach(list(files or []))
        log.start(
            fork=_fork,
            forked_from=_fork[0] if _fork else None,
            files=attached,
            coral=True,
            fork_unit="messages",
            members=self.member_names(),
            budget_seconds=self.budget_seconds,
            max_messages=self.max_messages,
            **({"edit": _edit} if _edit else {}),
            **({"replay": _policy.as_dict()} if _policy is not None else {}),
        )
        watch_messages(log, _fork)  # a fork says at which message it first departs from the original
        session = A2ASession(
            log,
            ORCHESTRATOR,
            self._descriptions(),
            max_messages=self.max_messages,
            budget_seconds=self.budget_seconds,
            wait_timeout_ms=self.wait_timeout_ms,
        )
        log.ctx.state("a2a")["session"] = session
        session.create_thread(SYSTEM_SENDER, MAIN_THREAD, self.member_names(), thread_id=MAIN_THREAD)
        if _replay:
            session.replay(_replay, delivered if plans else None)
        members = self._members(session, model)
        tasks = {
            name: asyncio.ensure_future(self._member(agent, task, attached, log.ctx, session, plans.get(name)))
            for name, agent in members.items()
        }
        try:
            outcome = await self._supervise(session, tasks)
        except asyncio.CancelledError:
            session.close("cancelled")
            for t in tasks.values():
                t.cancel()
            log.close("interrupted", "", "cancelled", len(session.messages))
            raise
        status, answer, error = outcome
        log.close(status, answer, error, len(session.messages))
        await log.release_sessions()
        result = RunResult(
            log.run_id,
            self.name,
            task,
            log.model,
            status,
            answer or (error or ""),
            len(session.messages),
            log.prompt_tokens,
            log.completion_tokens,
            log.cost,
            [],
            error,
            ws,
        )
        return checked_result(result, raise_on_error)

    async def _runner(self, task: str, files: list[str] | None = None, context: Context | None = None) -> str:
        """ACP runner: the team's run nested under the caller's; its answer, or an error."""
        return sub_agent_answer(self.name, await self.run(task, files, context=context, raise_on_error=False))

    @staticmethod
    async def _member(
        agent: "CoralMember",
        task: str,
        files: list[str],
        ctx: Context,
        session: A2ASession,
        plan: ForkPlan | None = None,
    ) -> RunResult | None:
        """One agent's run (in a fork, going on as ``plan`` says); when it ends the session learns its
        status (a crash is reported)."""
        status = "error"
        fork = (plan.source, plan.last_step) if plan is not None and plan.source is not None else None
        try:
            result = await agent.run(task, files or None, context=ctx, raise_on_error=False, _replay=plan, _fork=fork)
            status = result.status
            if status == "error":
                session.note(f"{agent.name} crashed: {result.error}")
            return result
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        except Exception as exc:  # noqa: BLE001 - a crash of one agent is the team's news, not the cell's
            session.note(f"{agent.name} crashed: {type(exc).__name__}: {exc}")
            return None
        finally:
            session.stopped(agent.name, status)

    async def _supervise(
        self, session: A2ASession, tasks: dict[str, "asyncio.Future[RunResult | None]"]
    ) -> tuple[FinishedStatus, str, str | None]:
        """Wait for the orchestrator (closing the conversation at the hard time limit), then let
        the others stop; returns the team's ``(status, answer, error)``."""
        grace = min(120.0, max(5.0, 0.1 * self.budget_seconds))
        orchestrator = tasks[ORCHESTRATOR]
        done, _ = await asyncio.wait({orchestrator}, timeout=self.budget_seconds + grace)
        if not done:
            session.close("the time budget and its grace period are spent")
            done, _ = await asyncio.wait({orchestrator}, timeout=60)
            if not done:
                orchestrator.cancel()
        if not session.closed:
            session.close("the orchestrator stopped")
        others = [t for name, t in tasks.items() if name != ORCHESTRATOR]
        if others:
            # the conversation is over: a member busy in a tool call gets a moment to end, then is cancelled
            _, late = await asyncio.wait(others, timeout=5)
            for t in late:
                t.cancel()
            if late:
                await asyncio.wait(late, timeout=5)
        result = orchestrator.result() if orchestrator.done() and not orchestrator.cancelled() else None
        if result is not None and result.status == "interrupted":
            return "interrupted", "", stop_reason()
        if session.answer is not None:
            if session.forced:
                return "max_steps", session.answer, None
            return "success", session.answer, None
        if result is not None and result.status == "error":
            return "error", "", result.error
        reason = result.status if result is not None else "no result"
        return "max_steps", "", f"the orchestrator stopped without submitting an answer ({reason})"


class CoralMember(Agent):
    """One agent of a CORAL team for one run: a tool-calling agent with the A2A tools, its own tools
    and the agents it wraps; not registered in ACP (the team is)."""

    def __init__(self, workspace: "RunHost", name: str, session: A2ASession, *, rules: str, **options: Any):
        self.session = session
        frame = MEMBER_FRAME.format(rules=rules.replace("{", "{{").replace("}", "}}"))
        super().__init__(workspace, name, system_prompt=frame, register=False, kind="coral_member", **options)

    def _new_run(self, *args: Any) -> "_MemberRun":
        return _MemberRun(self, *args)


class _MemberRun(AgentRun):
    """A member's loop: no 'done' — it ends when the conversation does; ℋ is in its environment state."""

    agent: CoralMember
    fork_unit = None  # a member runs only inside its team: the team's run is forked, by messages

    def __init__(self, agent: CoralMember, *args: Any):
        super().__init__(agent, *args)
        self.session = agent.session
        self.session.join(agent.name, self.run_id)

    def _controls(self) -> dict[str, dict[str, Any]]:
        return {}

    async def _before_step(self, step: int) -> "tuple[FinishedStatus, str] | None":
        session, me = self.session, self.agent.name
        if not session.closed:
            return None
        if me == ORCHESTRATOR:
            if session.answer is None:
                return "max_steps", f"The conversation was closed ({session.closed}) before an answer was submitted."
            return ("max_steps" if session.forced else "success"), session.answer
        mine = [m for m in session.messages if m.sender == me]
        # a worker's part succeeded when it answered every message that asked it something
        status = "success" if mine and not session.members[me].unanswered else "failed"
        return status, mine[-1].content if mine else "It sent no message."

    def _environments(self) -> list[dict[str, Any]]:
        coral = {
            "name": "coral",
            "rules": "The message history of your threads (ℋ), oldest first: #number [thread] sender → mentions.",
            "state": self.session.transcript(self.agent.name),
        }
        return [*super()._environments(), coral]


__all__ = ["CoralMember", "CoralTeam", "DEFAULT_WORKERS", "ORCHESTRATOR", "PLANNER", "member_forks"]
