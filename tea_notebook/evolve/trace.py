"""What the stages of the co-evolution loop produce: sub-tasks, recruits, results, validations,
the trace of one task and its result."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from tea_notebook.errors import TeaError
from tea_notebook.evolve.agent_bank import ExpertSpec
from tea_notebook.evolve.judge import Judgement

if TYPE_CHECKING:
    from tea_notebook.evolve.toolmaker import Creation
    from tea_notebook.protocol.records import AgentRecord, ExperienceRecord, ToolRecord
    from tea_notebook.runtime.agent import RunResult


# -- what the stages produce ------------------------------------------------------------------
@dataclass
class SubTask:
    """One step of the plan (C.1): its 1-based number, what to do, the earlier steps it needs."""

    number: int
    description: str
    dependencies: list[int] = field(default_factory=list)

    def __str__(self) -> str:
        deps = f" (after {', '.join(map(str, self.dependencies))})" if self.dependencies else ""
        return f"{self.number}. {self.description}{deps}"


@dataclass
class Recruit:
    """The assets recruited for one sub-task: an expert agent and the tools it gets."""

    subtask: SubTask
    agent: "AgentRecord"
    spec: ExpertSpec
    agent_created: bool
    agent_score: float | None  # cosine of the sub-task with the reused expert (None: created)
    tools: list[str]  # offered to the agent
    retrieved_tools: list[tuple[str, float]] = field(default_factory=list)  # top-K above δ
    reused_tools: list[str] = field(default_factory=list)  # existing tools the tool manager chose
    creation: "Creation | None" = None  # what the tool manager did (None when it failed)

    @property
    def created_tools(self) -> list[str]:
        """Tools the tool manager registered for this sub-task (accepted ones included)."""
        return [t.name for t in self.creation.tools] if self.creation is not None else []

    @property
    def pending_tools(self) -> list[str]:
        """Tools that passed and wait for approval (``approval="manual"``): ``creation.candidates[i].accept()``."""
        if self.creation is None:
            return []
        return [c.name for c in self.creation.candidates if c.status == "pending"]

    def __repr__(self) -> str:
        how = "new" if self.agent_created else f"found, cosine {self.agent_score:.2f}"
        tools = ", ".join(self.tools) or "none"
        made = f"; created {', '.join(self.created_tools)}" if self.created_tools else ""
        return f"Recruit(sub-task {self.subtask.number}: {self.spec.role} [{how}]; tools: {tools}{made})"


@dataclass
class SubTaskResult:
    """A sub-task's execution: who did it, with what, how it went."""

    subtask: SubTask
    recruit: Recruit
    run: "RunResult"
    experiences: list[str] = field(default_factory=list)  # names of the entries retrieved into its prompt
    tools_used: list[str] = field(default_factory=list)
    process: str = ""  # the run as text (what the judge and the reflection read)

    @property
    def answer(self) -> str:
        return self.run.answer

    @property
    def status(self) -> str:
        return self.run.status

    def __repr__(self) -> str:
        return (
            f"SubTaskResult({self.subtask.number}. {self.recruit.spec.role}: {self.status}, "
            f"answer={textwrap.shorten(self.answer, 80)!r}, tools used={self.tools_used})"
        )


@dataclass
class ToolValidation:
    """A created tool checked against tests written from the judge's critique (Eq. 8)."""

    tool: str
    status: str  # passed | fixed | pending | failed | skipped
    version: int | None = None  # the version that stands after the validation
    tests: str = ""
    output: str = ""
    fix_iterations: int = 0
    reason: str = ""
    code: str = ""
    _register: Callable[[], "ToolRecord"] | None = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        """True when the tool (as first created, or fixed) passes the critique's tests."""
        return self.status in ("passed", "fixed", "pending")

    def accept(self) -> "ToolRecord":
        """Register a fixed version that waits for approval (``approval="manual"``)."""
        if self.status != "pending" or self._register is None:
            raise TeaError(f"the validation of {self.tool!r} is {self.status}, not waiting for approval")
        record = self._register()
        self.status, self.version, self._register = "fixed", record.version, None
        return record

    def reject(self, reason: str = "rejected by the person") -> None:
        """Keep the current version and drop the fix that waits for approval."""
        if self.status != "pending":
            raise TeaError(f"the validation of {self.tool!r} is {self.status}, not waiting for approval")
        self.status, self.reason, self._register = "failed", reason, None

    def __repr__(self) -> str:
        version = f" v{self.version}" if self.version is not None else ""
        fixes = f" after {self.fix_iterations} fixes" if self.fix_iterations else ""
        why = f" — {self.reason}" if self.reason else ""
        return f"ToolValidation({self.tool}{version}: {self.status}{fixes}{why})"


@dataclass
class Trace:
    """Everything one task went through, stage by stage (τ_t: what the judge and reflection read)."""

    task: str
    subtasks: list[SubTask] = field(default_factory=list)
    recruits: dict[int, Recruit] = field(default_factory=dict)
    results: dict[int, SubTaskResult] = field(default_factory=dict)
    answer: str = ""
    reasoning: str = ""
    judgement: Judgement | None = None
    validations: list[ToolValidation] = field(default_factory=list)
    experiences: list["ExperienceRecord"] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    run_id: str = ""

    @property
    def created_tools(self) -> list[str]:
        """Tools the tool manager registered for this task."""
        return unique(n for r in self.recruits.values() for n in r.created_tools)

    @property
    def reused_tools(self) -> list[str]:
        """Tools that existed before this task and were recruited for it."""
        created = set(self.created_tools)
        names = (n for r in self.recruits.values() for n in [*(t for t, _ in r.retrieved_tools), *r.reused_tools])
        return [n for n in unique(names) if n not in created]

    @property
    def new_agents(self) -> list[str]:
        """Expert agents created for this task."""
        return unique(r.agent.name for r in self.recruits.values() if r.agent_created)

    @property
    def retrieved_experiences(self) -> list[str]:
        """Experience entries retrieved into this task's prompts."""
        return unique(n for r in self.results.values() for n in r.experiences)

    def __repr__(self) -> str:
        done = f", judged {'success' if self.judgement.success else 'failure'}" if self.judgement else ""
        return (
            f"Trace({self.task[:60]!r}: {len(self.subtasks)} sub-tasks, {len(self.results)} executed{done}, "
            f"created {self.created_tools}, new agents {self.new_agents})"
        )


@dataclass
class EvolutionResult:
    """What one Mem²Evolve task produced and changed."""

    task: str
    answer: str
    success: bool  # the judge's verdict (r_t)
    judgement: Judgement
    subtasks: list[SubTaskResult]
    created_tools: list[str]
    reused_tools: list[str]
    new_agents: list[str]
    experiences: list["ExperienceRecord"]  # written (or merged into) by the reflection
    validations: list[ToolValidation]
    run_id: str
    trace: Trace = field(repr=False)
    workspace: Any = field(default=None, repr=False)

    @property
    def trajectory(self) -> Any:
        """The recorded run with its nested tool-manager and agent runs."""
        from tea_notebook.runtime.trajectory import Trajectory

        return Trajectory.load(self.workspace, self.run_id)

    def summary(self) -> str:
        """A readable account of the task: sub-tasks, assets, verdict, memory written."""
        verdict = "success" if self.success else "FAILURE"
        gt = " (with ground truth)" if self.judgement.ground_truth is not None else ""
        lines = [
            f"Mem²Evolve run {self.run_id}: {verdict}{gt}",
            f"task: {textwrap.shorten(self.task, 160)}",
            f"answer: {textwrap.shorten(self.answer, 300)}",
            "sub-tasks:",
        ]
        for r in self.subtasks:
            how = "new agent" if r.recruit.agent_created else "agent from the bank"
            tools = ", ".join(r.recruit.tools) or "no tools"
            lines.append(
                f"  {r.subtask.number}. {textwrap.shorten(r.subtask.description, 90)} → {r.recruit.spec.role} "
                f"({how}; {tools}): {r.status}"
            )
        lines.append(f"tools created: {', '.join(self.created_tools) or 'none'}")
        lines.append(f"tools reused: {', '.join(self.reused_tools) or 'none'}")
        lines.append(f"agents created: {', '.join(self.new_agents) or 'none'}")
        for v in self.validations:
            lines.append(f"  validated {v!r}")
        if self.experiences:
            lines.append("experience written:")
            for e in self.experiences:
                merged = " (merged into an existing entry)" if e.name in self.trace.merged else ""
                lines.append(f"  + {e.kind}: {e.title}{merged}")
        lines.append(f"judge: {textwrap.shorten(self.judgement.assessment, 300) or '(no assessment)'}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        from tea_notebook.evolve.render import evolution_html

        return evolution_html(self)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.summary())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "run_id": self.run_id,
            "task": self.task,
            "answer": self.answer,
            "success": self.success,
            "judgement": self.judgement.raw,
            "subtasks": [
                {
                    "number": r.subtask.number,
                    "description": r.subtask.description,
                    "dependencies": r.subtask.dependencies,
                    "agent": r.recruit.agent.name,
                    "agent_created": r.recruit.agent_created,
                    "tools": r.recruit.tools,
                    "status": r.status,
                    "answer": r.answer,
                    "run_id": r.run.run_id,
                    "experiences": r.experiences,
                }
                for r in self.subtasks
            ],
            "created_tools": self.created_tools,
            "reused_tools": self.reused_tools,
            "new_agents": self.new_agents,
            "experiences": [e.name for e in self.experiences],
            "validations": [{"tool": v.tool, "status": v.status, "version": v.version} for v in self.validations],
        }


def unique(items: Iterable[str]) -> list[str]:
    """``items`` without repeats, in first-seen order."""
    return list(dict.fromkeys(items))
