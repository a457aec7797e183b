"""ToolSelf (Zhou et al.): one agent that reconfigures itself by calling a tool.

A run is a chain of **stages**. Stage i runs under a configuration C_i = (sub-goal, execution
strategy, toolbox ⊂ the global tool pool, knowledge), sees only that toolbox plus the two
management tools of App. A.6.4, and starts with an empty history. ``reconfigure`` archives the
agent's own summary of the stage in the global history pool, discards the stage's history and asks
the reconfiguration engine μ (the same or another model, under the "Agent Configuration Engineer"
prompt of A.6.3) for the next configuration as JSON; ``finish`` ends the run. The first
configuration comes from μ too. μ's JSON is checked (fields, a non-empty toolbox of pool tools)
and sent back with the problem a bounded number of times; when it stays wrong the stage goes on
under its old configuration and the agent is told so.

Every stage is a ``stage`` event of the run (its configuration, the reason, μ's input and output),
so views, plots and :func:`tea_notebook.agents.training_data.export_training_data` read it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from tea_notebook.agents.kinds import agent_kind
from tea_notebook.agents.workflow import Checked, ask_checked
from tea_notebook.models.client import ModelReply, ToolCall
from tea_notebook.protocol.reserved import TOOLSELF_ACTIONS
from tea_notebook.protocol.schema import arguments_problem
from tea_notebook.runtime.agent import Agent, AgentRun, Outcome, routable
from tea_notebook.runtime.event_types import MemoryWrittenEvent, StageEvent
from tea_notebook.runtime.prompts import JSON_OUTPUT, NATIVE_OUTPUT, StepRecord, tool_line
from tea_notebook.runtime.runlog import RunInterrupted

if TYPE_CHECKING:
    from tea_notebook.runtime.event_types import FinishedStatus
    from tea_notebook.runtime.host import RunHost

RECONFIGURE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "execution_summary": {
            "type": "string",
            "description": "Step-by-step detailed summary of current Agent's task execution process",
        },
        "update_content": {
            "type": "string",
            "enum": ["sub_goal", "toolbox", "knowledge", "execution_strategy"],
            "description": "What needs to be updated",
        },
        "update_reason": {"type": "string", "description": "Why this update is needed"},
        "new_sub_goal": {
            "type": "string",
            "description": "The new sub_goal that the updated Agent needs to execute. If the current task is "
            "complete, set to 'Task completed, use finish tool next'",
        },
        "additional_details": {
            "type": "object",
            "properties": {
                "toolbox_requirements": {
                    "type": "string",
                    "description": "Requirements for the new toolbox based on current limitations",
                },
                "knowledge_requirements": {
                    "type": "string",
                    "description": "Requirements for the new knowledge based on missing information",
                },
                "execution_strategy_requirements": {
                    "type": "string",
                    "description": "Requirements for the new execution strategy based on current limitations",
                },
            },
            "additionalProperties": False,
            "description": "Additional details for specific update types",
        },
    },
    # the paper puts this list inside "properties" (a JSON-Schema slip); here it is where it belongs
    "required": ["execution_summary", "update_content", "update_reason", "new_sub_goal"],
    "additionalProperties": False,
}

_STRINGS = {"type": "array", "items": {"type": "string"}}
FINISH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task_completion_status": {"type": "string", "enum": ["complete", "partial", "incomplete"]},
        "final_result": {"type": "string", "description": "The final answer of the main task"},
        "execution_summary": {
            "type": "object",
            "properties": {"detailed_execution": _STRINGS, "tools_used": _STRINGS, "key_achievements": _STRINGS},
            "required": ["detailed_execution", "tools_used"],
        },
        "results_details": {
            "type": "object",
            "properties": {
                "deliverables": _STRINGS,
                "evidence": _STRINGS,
                "confidence_level": {"type": "string", "enum": ["High", "Medium", "Low"]},
            },
        },
        "issues_encountered": {
            "type": "object",
            "properties": {"blocking_issues": _STRINGS, "workarounds_used": _STRINGS, "unresolved_issues": _STRINGS},
        },
    },
    "required": ["task_completion_status", "final_result", "execution_summary"],
    "additionalProperties": False,
}

RECONFIGURE_TOOL = {
    "type": "function",
    "function": {
        "name": "reconfigure",
        "description": (
            "Update current Agent's components including sub_goal, toolbox, knowledge, or execution strategy. Use "
            "when the current sub-task is completed but main task isn't, when current sub-task execution fails, when "
            "current toolset is insufficient, when knowledge lacks necessary information or contains irrelevant "
            "information, or when the execution strategy no longer fits the task requirements."
        ),
        "parameters": RECONFIGURE_SCHEMA,
    },
}
FINISH_TOOL = {
    "type": "function",
    "function": {
        "name": "finish",
        "description": (
            "Signal the completion of the main task and end the entire task execution. Use only when the current "
            "Agent has completely finished the main task."
        ),
        "parameters": FINISH_SCHEMA,
    },
}
MANAGEMENT_TOOLS = TOOLSELF_ACTIONS  # the one list of reserved names (tea_notebook.protocol.reserved)
CONFIG_KEYS = ("next_sub_goal", "execution_strategy", "toolbox", "inter_agent_knowledge")

INFERENCE_SYSTEM = """## Role and Core Objective
You are a professional task execution agent. Your core objective is to efficiently complete the specified task using the given main task, sub-goal, and available toolset.

## Input Information
1. Main Task '<main_task>': the overall task. Use it ONLY to understand the broader context.
<main_task>{task}</main_task>
2. Current Sub_goal '<sub_goal>': what you must achieve now.
<sub_goal>{sub_goal}</sub_goal>
3. Execution Strategy '<strategy>': the plan to follow for the sub-goal.
<strategy>{strategy}</strategy>
4. Toolbox '<toolbox>': the tools you may use in this stage.
<toolbox>{toolbox}</toolbox>
5. Knowledge Information '<knowledge>': what earlier stages established.
<knowledge>{knowledge}</knowledge>

## Tool Usage Guidelines
- Precision: call tools with exact, complete arguments.
- Efficiency: avoid redundant calls; combine what can be combined.
- Completeness: check that results actually answer the sub-goal before moving on.

## Agent Management Tools
Reconfiguration Tool ('reconfigure') - use when the agent needs configuration updates:
- Current sub-task completed but main task not finished -> update sub_goal
- Current sub-task execution failed -> try a new sub-task approach
- Current toolbox insufficient -> update toolbox
- Knowledge lacks necessary information -> update knowledge
- Execution strategy no longer fits -> update execution_strategy
Termination Tool ('finish') - use only when:
- The main task is completely finished (not just the sub-goal)
- All objectives have been achieved and no further work is needed

## Execution Requirements
1. CRITICAL - Focus ONLY on the Sub_goal. DO NOT attempt to complete the entire main task in this stage.
2. Main Task Usage: use the main task ONLY to understand the broader context.
3. Tool Selection: choose appropriate tools from the toolbox.
4. Result Reporting: use the termination tool only when the MAIN TASK is completely finished. Use the reconfiguration tool when you need to update the agent configuration.
5. Error Handling: when you meet problems, use the reconfiguration tool to modify the configuration rather than simply reporting errors.
'reconfigure' and 'finish' must each be the only action of their step.

{output_rules}"""

USER_PROMPT_PREFIX = (
    "A conversation between User and Assistant. The user asks a question, and the assistant solves it by calling "
    "one or more of the following tools."
)
USER_PROMPT_SUFFIX = (
    "The assistant starts with one or more cycles of (thinking about which tool to use -> performing tool call -> "
    "waiting for tool response), and ends by calling the 'finish' tool with a final summary and completion status."
)

ENGINE_SYSTEM = """## Role and Core Objective
You are a professional "Agent Configuration Engineer". Your core objective is to generate the next-step configuration for a ReAct-based inference agent executing a complex main task. You must:
1. Mentally plan the overall task execution to understand the big picture
2. Identify the immediate next step based on current progress
3. Generate the appropriate configuration (sub_goal, strategy, toolbox, knowledge)

## Input Information (in the user message)
1. Main Task <main_task>
2. Available Tools <available_tools>: the global tool pool
3. Execution History <execution_history>: the sub-goal and summary of every finished stage (can be "NONE")
4. Update Requirement <update_requirement>: the agent's proposed sub-goal, the reason and details (can be "NONE")

## Configuration Generation Process
### Step 1: Determine the Next Sub-Goal
Adopt the proposed sub-goal whenever possible; re-plan only if the proposal is entirely irrelevant to the task. With no proposal, choose the first sub-goal of your plan.
### Step 2: Generate the Other Configuration Components
2.1 Execution Strategy: design a heuristic algorithm for the next sub_goal: (1) define a persona (e.g. "Senior Software Engineer", "Data Analyst"), (2) create a step-by-step plan, (3) identify decision points, (4) link each step to a concrete tool.
2.2 Toolbox Selection: CRITICAL - choose the tools needed for the NEXT sub_goal ONLY (at least three when the pool allows); the toolbox must be a strict subset of <available_tools>, named exactly as listed.
2.3 Inter-Agent Knowledge: at the initial step use ""; if the history is concise and relevant use "ALL" (the whole execution history); otherwise write a concise summary of what the next stage needs.

## Output Format
Return ONLY a strict JSON object, no code fences:
{"next_sub_goal": "Detailed description of the next step to execute", "execution_strategy": "As a [expert persona], I will follow these steps to accomplish the NEXT sub_goal: 1. [first step and tool] 2. [second step and tool] 3. [key decision points]...", "toolbox": ["ToolName1", "ToolName2", "ToolName3"], "inter_agent_knowledge": "a summary, 'ALL', or ''"}"""


def format_history(pool: list[tuple[str, str]]) -> str:
    """The global history pool in the paper's A.6.5 format ("NONE" when empty)."""
    if not pool:
        return "NONE"
    items = [f"Iteration {i}:\nSub-goal: {goal}\nSummary: {summary}" for i, (goal, summary) in enumerate(pool, 1)]
    return "<execution_history>\n" + "\n\n".join(items) + "\n</execution_history>"


def render_requirement(request: dict[str, Any] | None) -> str:
    """The reconfiguration request r_i = (proposed sub-goal, reason, details) as μ reads it.
    ``update_content`` is left out on purpose: the paper keeps it for analysis, not for μ."""
    if not request:
        return "NONE"
    lines = [
        f"Proposed Sub_goal: {request.get('new_sub_goal', '')}",
        f"Update Reason: {request.get('update_reason', '')}",
    ]
    labels = {
        "toolbox_requirements": "Toolbox Requirements",
        "knowledge_requirements": "Knowledge Requirements",
        "execution_strategy_requirements": "Execution Strategy Requirements",
    }
    for key, label in labels.items():
        value = (request.get("additional_details") or {}).get(key)
        if value:
            lines.append(f"{label}: {value}")
    return "\n".join(lines)


def engine_messages(task: str, available_tools: str, history: str, requirement: str) -> list[dict[str, str]]:
    """μ's prompt: the A.6.3 system prompt and its four inputs."""
    user = (
        f"<main_task>{task}</main_task>\n<available_tools>\n{available_tools}\n</available_tools>\n"
        f"<execution_history>{history}</execution_history>\n<update_requirement>{requirement}</update_requirement>"
    )
    return [{"role": "system", "content": ENGINE_SYSTEM}, {"role": "user", "content": user}]


def inference_messages(
    task: str,
    stage: dict[str, Any],
    *,
    native: bool,
    tools: list[dict[str, Any]],
    history: list[StepRecord],
    stage_info: str = "",
    files: list[str] | None = None,
    environments: str = "",
) -> list[dict[str, str]]:
    """π's prompt for one step of a stage: the A.6.1 system prompt filled with the stage's
    configuration, and the tools, stage info and the stage's own history (nothing older)."""
    system = INFERENCE_SYSTEM.format(
        task=task,
        sub_goal=stage["sub_goal"],
        strategy=stage["strategy"],
        toolbox=", ".join(stage["toolbox"]),
        knowledge=stage["knowledge_text"],
        output_rules=NATIVE_OUTPUT if native else JSON_OUTPUT,
    )
    actions = "(offered as callable tools)" if native else "\n".join(tool_line(t) for t in tools)
    parts = [USER_PROMPT_PREFIX, f"<tools>\n{actions}\n</tools>", USER_PROMPT_SUFFIX]
    if files:
        parts.append("Attached files (absolute paths): " + ", ".join(files))
    if stage_info:
        parts.append(f"<stage_info>{stage_info}</stage_info>")
    if environments:
        parts.append(f"<environment_state>{environments}</environment_state>")
    parts.append(
        "<history>\n" + ("\n".join(s.render() for s in history) or "(no steps yet in this stage)") + "\n</history>"
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(parts)}]


@agent_kind("toolself", shortcuts=("toolself",), fork="stages")
class ToolSelfAgent(Agent):
    """A ToolSelf agent: ``tools`` (plus the tools of ``envs`` and ``sub_agents``) is the global tool
    pool T_all; each stage sees the toolbox μ picked from it, plus ``reconfigure`` and ``finish``.

    ``engine_model``: μ's model (default: the agent's own). ``max_steps`` counts steps over the whole
    run (the paper's 200), ``max_stages`` the reconfigurations (30; more ends the run),
    ``max_stage_steps`` the steps of one stage (at the limit the stage is reconfigured for it),
    ``engine_retries`` how often a bad configuration goes back to μ, ``context_window`` the tokens
    of a stage's history past 80 % of which only the last ``keep_recent_steps`` steps are kept.
    """

    def __init__(
        self,
        workspace: "RunHost",
        name: str = "toolself",
        *,
        description: str = "A ToolSelf agent: runs in stages and reconfigures its own sub-goal, strategy, toolbox "
        "and knowledge through the 'reconfigure' tool.",
        engine_model: str | None = None,
        max_steps: int = 200,
        max_stages: int = 30,
        max_stage_steps: int = 30,
        engine_retries: int = 2,
        context_window: int = 32_000,
        keep_recent_steps: int = 10,
        **options: Any,
    ):
        for label, value in (("max_stages", max_stages), ("max_stage_steps", max_stage_steps)):
            if value < 1:
                raise ValueError(f"{label} must be at least 1, not {value}")
        if engine_retries < 0:
            raise ValueError(f"engine_retries must be 0 or more, not {engine_retries}")
        self.engine_model = engine_model
        self.max_stages = max_stages
        self.max_stage_steps = max_stage_steps
        self.engine_retries = engine_retries
        self.context_window = context_window
        options.setdefault("role", "toolself")
        super().__init__(
            workspace,
            name,
            description=description,
            max_steps=max_steps,
            keep_recent_steps=keep_recent_steps,
            kind="toolself",
            **options,
        )

    def _config(self) -> dict[str, Any]:
        return {
            **super()._config(),
            "engine_model": self.engine_model,
            "max_stages": self.max_stages,
            "max_stage_steps": self.max_stage_steps,
            "engine_retries": self.engine_retries,
            "context_window": self.context_window,
        }

    def _new_run(self, *args: Any) -> "_StageRun":
        return _StageRun(self, *args)


class _StageRun(AgentRun):
    """One ToolSelf run: the agent loop with stage-local history and the two management tools."""

    agent: ToolSelfAgent
    fork_unit = "stages"  # forked at the start of a stage (ws.fork(run, stage=K)), not at any step

    def __init__(self, agent: ToolSelfAgent, *args: Any):
        super().__init__(agent, *args)
        self.engine_model = agent.engine_model or self.model
        self.pool = self._pool()
        self.stage: dict[str, Any] | None = None
        self.history: list[tuple[str, str]] = []  # the global history pool: (sub-goal, summary)
        self.stage_steps = 0
        self.reconfigurations = 0
        self._engine_step = 1
        self._next: dict[str, Any] | None = None

    # -- the pool and μ ---------------------------------------------------------------------------
    def _pool(self) -> list[str]:
        ws = self.ws
        if self.agent.tools is not None:
            names = list(self.agent.tools)
        else:
            names = [r.name for r in ws.tools.list() if r.origin not in ("agent", "environment") and routable(r)]
        names += self._environment_tools()
        for sub in self.agent.sub_agents:
            tool_name = sub if sub.endswith("agent") else f"{sub}_agent"
            if tool_name not in ws.tools:
                from tea_notebook.protocol.transformations import a2t

                a2t(ws, sub)
            names.append(tool_name)
        missing = [n for n in names if n not in ws.tools]
        if missing:
            raise ValueError(f"the tool pool names tools that are not registered: {', '.join(missing)}")
        return [n for n in dict.fromkeys(names) if n not in MANAGEMENT_TOOLS]

    def _pool_text(self) -> str:
        """The pool as μ reads it: one ``- name: first line of the description`` per tool."""
        lines = []
        for name in self.pool:
            description = (self.ws.tools.get(name).prompt_description() or "").strip().splitlines()
            lines.append(f"- {name}: {description[0] if description else ''}")
        return "\n".join(lines)

    async def complete(self, messages: list[dict[str, Any]], stage: str = "") -> ModelReply:
        """One call of the reconfiguration engine μ, recorded in this run (for :func:`ask_checked`)."""
        if self.ctx.cancel.is_set():
            raise RunInterrupted("the run was stopped")
        return await self._cancellable(
            self.logged_call(self.agent.client, self.engine_model, messages, stage, self._engine_step)
        )

    def _check_config(self, data: dict[str, Any]) -> str | None:
        """What is wrong with μ's configuration, or None; tidies the toolbox in place."""
        for key in ("next_sub_goal", "execution_strategy", "inter_agent_knowledge"):
            if not isinstance(data.get(key), str):
                return f"'{key}' must be a string"
        if not data["next_sub_goal"].strip():
            return "'next_sub_goal' is empty"
        toolbox = data.get("toolbox")
        if not isinstance(toolbox, list) or not all(isinstance(t, str) for t in toolbox):
            return "'toolbox' must be a list of tool names"
        # the management tools are always there; naming them is not an error
        toolbox = [t.strip() for t in toolbox if t.strip() not in MANAGEMENT_TOOLS]
        unknown = [t for t in toolbox if t not in self.pool]
        if unknown:
            return f"the toolbox names tools that are not in <available_tools>: {', '.join(unknown)}; choose from: {', '.join(self.pool)}"
        if not toolbox:
            return f"the toolbox is empty; choose the tools of the next sub_goal from: {', '.join(self.pool)}"
        data["toolbox"] = list(dict.fromkeys(toolbox))
        return None

    async def _configure(self, history: str, requirement: str, step: int) -> tuple[Checked, list[dict[str, str]]]:
        messages = engine_messages(self.task, self._pool_text(), history, requirement)
        self._engine_step = step
        checked = await ask_checked(
            self,
            messages[0]["content"],
            messages[1]["content"],
            "reconfigure",
            required=CONFIG_KEYS,
            check=self._check_config,
            retries=self.agent.engine_retries,
        )
        return checked, messages

    def _stage_from(self, data: dict[str, Any]) -> dict[str, Any]:
        knowledge = data["inter_agent_knowledge"].strip()
        text = format_history(self.history) if knowledge.upper() == "ALL" else knowledge
        return {
            "sub_goal": data["next_sub_goal"].strip(),
            "strategy": data["execution_strategy"].strip(),
            "toolbox": list(data["toolbox"]),
            "knowledge": "ALL" if knowledge.upper() == "ALL" else knowledge,
            "knowledge_text": "" if text == "NONE" else text,
        }

    def _begin_stage(self, stage: dict[str, Any], first_step: int, **why: Any) -> None:
        """Start a stage: empty history, the new configuration, and its ``stage`` event."""
        self.stage = stage
        self.steps, self.summaries = [], []
        self.stage_steps = 0
        index = self.reconfigurations + 1
        # the configuration comes from the engine's JSON or a fork's record: a plain dict
        self.emit("stage", cast(StageEvent, {"index": index, "first_step": first_step, **stage, **why}))

    def _engine_record(self, checked: Checked, history: str, requirement: str) -> dict[str, Any]:
        return {
            "model": self.engine_model,
            "ok": checked.data is not None,
            "attempts": checked.attempts,
            "problem": checked.problem,
            "output": checked.text,
            "history": history,
            "requirement": requirement,
            "available_tools": self._pool_text(),
        }

    # -- loop hooks -------------------------------------------------------------------------------
    def _controls(self) -> dict[str, dict[str, Any]]:
        return {"reconfigure": RECONFIGURE_TOOL, "finish": FINISH_TOOL}

    def _offered(self) -> tuple[list[dict[str, Any]], set[str]]:
        assert self.stage is not None
        records = self.ws.tools.prune([self.ws.tools.get(n) for n in self.stage["toolbox"]], self.ctx)
        agent_tools = {r.name for r in records if r.origin == "agent"}
        return [r.to_openai() for r in records] + list(self._controls().values()), agent_tools

    def _messages(self, step: int, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        assert self.stage is not None
        info = (
            f"Stage {self.reconfigurations + 1}; step {self.stage_steps + 1} of at most "
            f"{self.agent.max_stage_steps} in this stage; step {step} of {self.max_steps} overall"
        )
        if self.stage_steps + 1 >= self.agent.max_stage_steps:
            info += ". This is the stage's LAST step: call 'reconfigure' or 'finish'"
        if step >= self.max_steps:
            info += ". This is the FINAL step of the run: call 'finish' now"
        envs = "".join(
            f'<environment name="{e["name"]}"><state>{e.get("state", "")}</state></environment>'
            for e in self._environments()
        )
        return inference_messages(
            self.task,
            self.stage,
            native=self.native,
            tools=tools,
            history=self.steps,
            stage_info=info,
            files=self.files,
            environments=envs,
        )

    async def _before_step(self, step: int) -> "tuple[FinishedStatus, str] | None":
        if self.stage is None and self.plan.stage is not None:  # a fork: the stage starts as recorded (or edited)
            fork = self.plan.stage
            self.history = [(str(g), str(s)) for g, s in fork["pool"]]
            self.reconfigurations = fork["index"] - 1
            why = f"forked from stage {fork['index']} of run {self.plan.source}"
            self._begin_stage(dict(fork["config"]), step, reason=why, edited=fork.get("record"))
            return None
        if self.stage is None:
            checked, _ = await self._configure("NONE", "NONE", step)
            engine = self._engine_record(checked, "NONE", "NONE")
            if checked.data is not None:
                self._begin_stage(self._stage_from(checked.data), step, reason="initial configuration", engine=engine)
            else:
                fallback = {
                    "sub_goal": self.task,
                    "strategy": "",
                    "toolbox": list(self.pool),
                    "knowledge": "",
                    "knowledge_text": "",
                }
                note = (
                    f"the configuration engine gave no valid configuration ({checked.problem}); the first stage "
                    "works on the whole task with the whole tool pool"
                )
                self._begin_stage(fallback, step, reason="initial configuration", engine=engine, note=note)
            return None
        if self.stage_steps >= self.agent.max_stage_steps:
            if self.reconfigurations >= self.agent.max_stages:
                return "max_steps", (
                    f"Stage {self.reconfigurations + 1} reached its step limit and the run has used its "
                    f"{self.agent.max_stages} reconfigurations."
                )
            recent = " ".join(" ".join(s.render(200).split()) for s in self.steps[-3:])
            summary = (
                f"(written by the framework: the stage used its {self.agent.max_stage_steps} steps without calling "
                f"'reconfigure' or 'finish') Last steps: {recent}"
            )
            request = {
                "new_sub_goal": self.stage["sub_goal"],
                "update_reason": f"stage {self.reconfigurations + 1} reached its limit of {self.agent.max_stage_steps} steps",
            }
            if not await self._reconfigure(summary, request, "sub_goal", step, forced=True):
                return "max_steps", (
                    f"Stage {self.reconfigurations + 1} reached its step limit and the configuration engine gave no "
                    "valid configuration for a new stage."
                )
            self._apply_next()
        return None

    async def _reconfigure(
        self, summary: str, request: dict[str, Any], update_content: str, first_step: int, *, forced: bool = False
    ) -> Checked | None:
        """Ask μ for the next stage; on success it starts when the current step is recorded."""
        pool = [*self.history, (self.stage["sub_goal"], summary)]
        history, requirement = format_history(pool), render_requirement(request)
        checked, _ = await self._configure(history, requirement, first_step)
        if checked.data is None:
            return None
        self.history = pool
        self.reconfigurations += 1
        stage = self._stage_from(checked.data)
        self._next = {
            "stage": stage,
            "first_step": first_step,
            "pool_entry": [self.stage["sub_goal"], summary],  # what a fork from this stage restores
            "reason": request.get("update_reason", ""),
            "update_content": update_content,
            "proposed_sub_goal": request.get("new_sub_goal", ""),
            "details": request.get("additional_details") or {},
            "forced": forced,
            "engine": self._engine_record(checked, history, requirement),
        }
        return checked

    def _apply_next(self) -> None:
        if self._next is not None:
            pending, self._next = self._next, None
            self._begin_stage(pending.pop("stage"), pending.pop("first_step"), **pending)

    async def _control(self, call: ToolCall, step: int) -> Outcome:
        schema = RECONFIGURE_SCHEMA if call.name == "reconfigure" else FINISH_SCHEMA
        problem = arguments_problem(schema, call.arguments)
        if problem:
            return Outcome("invalid", f"{call.name}: {problem}")
        args = call.arguments
        if call.name == "finish":
            status: FinishedStatus = "success" if args["task_completion_status"] == "complete" else "failed"
            return Outcome("end", f"finished ({args['task_completion_status']})", status, args["final_result"])
        if self.reconfigurations >= self.agent.max_stages:
            answer = f"Stopped: the run asked for more than {self.agent.max_stages} reconfigurations (the limit)."
            return Outcome("end", f"Error: {answer}", "max_steps", answer)
        request = {k: args[k] for k in ("new_sub_goal", "update_reason") if k in args}
        request["additional_details"] = args.get("additional_details") or {}
        checked = await self._reconfigure(args["execution_summary"], request, args["update_content"], step + 1)
        if checked is None:
            return Outcome(
                "go_on",
                "Error: the reconfiguration engine gave no valid configuration "
                f"({self.agent.engine_retries + 1} attempts). You continue under the current configuration "
                f"(stage {self.reconfigurations + 1}) with this stage's history kept.",
            )
        stage = self._next["stage"] if self._next else {}
        return Outcome(
            "go_on",
            f"Reconfigured: stage {self.reconfigurations + 1} starts with a fresh history. Sub-goal: "
            f"{stage.get('sub_goal', '')}. Toolbox: {', '.join(stage.get('toolbox', []))}.",
        )

    def _finish_step(self, record: StepRecord) -> None:
        super()._finish_step(record)
        self.stage_steps += 1
        self._apply_next()  # the step that asked for it stays in the old stage

    async def _fold_memory(self, step: int) -> None:
        """The paper's context safety net inside a stage: past 80 % of ``context_window`` tokens,
        keep only the last ``keep_recent_steps`` steps."""
        keep = self.agent.keep_recent_steps
        if sum(s.size() for s in self.steps) > 0.8 * self.agent.context_window and len(self.steps) > keep:
            dropped = self.steps[:-keep] if keep else list(self.steps)
            self.steps = self.steps[len(dropped) :]
            folded = [s.number for s in dropped]
            note = f"context cleanup: the stage's history passed 80% of {self.agent.context_window:,} tokens"
            self.emit("memory_written", MemoryWrittenEvent(summary=note, insights=[], folded_steps=folded), step)


def stage_of(stages: list[dict[str, Any]], step: int) -> int:
    """The index (1-based) of the stage a step belongs to (0 before the first)."""
    index = 0
    for s in stages:
        if s.get("first_step", 1) <= step:
            index = s.get("index", index + 1)
    return index


__all__ = [
    "FINISH_SCHEMA",
    "FINISH_TOOL",
    "RECONFIGURE_SCHEMA",
    "RECONFIGURE_TOOL",
    "ToolSelfAgent",
    "engine_messages",
    "format_history",
    "inference_messages",
    "render_requirement",
    "stage_of",
]
