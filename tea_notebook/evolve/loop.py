"""The Mem²Evolve co-evolution loop (§2.1): forward inference with asset reuse and creation, then
backward evolution of assets and experience.

For each task: **plan** (C.1) into dependent sub-tasks → per sub-task **recruit** (tools retrieved by
cosine > δ, then the tool manager decides: reuse first, create on demand; the top-1 expert agent
above δ from the agent bank, else a new one from C.5) → **execute** (a tool-calling agent with the
C.6 ReAct prompt: role, suggestions, results of the dependencies, retrieved success and failure
experiences, the recruited tools) → **aggregate** → **judge** (C.7; with the ground truth when one
is given) → **validate_assets** (tests written from the judge's critique, run in the confined
sandbox; a failing tool is fixed and registered as a new version — also when the task failed, as
the paper does) → **reflect** (C.8 for created tools, C.9 / C.10 per agent by the judge's verdict;
the retrieved entries learn how the run went).

:class:`Mem2Evolve` runs all of it as one recorded run (``run``: a Process ``mem2evolve`` whose
stages are steps and whose tool-manager and agent runs nest under it), or one stage per notebook
cell (``plan``, ``recruit``, ``execute``, ``aggregate``, ``judge``, ``validate_assets``,
``reflect``; each its own recorded run, sharing :attr:`Mem2Evolve.trace`). Every method has an
``a``-prefixed coroutine twin (``arun``, ``aplan``, …).

The executing agent's system prompt starts with ``Stage: react`` (C.6, then the runtime's loop
rules), so a scripted model can tell it from the other stages with ``stage_of``; it is the one
stage called with tools.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterable

from tea_notebook._sync import run_sync
from tea_notebook.agents.kinds import agent_kind
from tea_notebook.errors import EvolutionError, TeaError
from tea_notebook.evolve import prompts
from tea_notebook.evolve.agent_bank import AgentBank, ExpertSpec, check_spec
from tea_notebook.evolve.experience import experiences_of
from tea_notebook.evolve.gate import (
    PROMOTED,
    UNMEASURED,
    UNMEASURED_NOTE,
    GateDecision,
    LeakageError,
    evolution_metadata,
    is_candidate,
    leaked,
    registry_of,
)
from tea_notebook.evolve.judge import Judgement, check_judgement
from tea_notebook.evolve.llm import ask_json, require_model
from tea_notebook.evolve.trace import (
    EvolutionResult,
    Recruit,
    SubTask,
    SubTaskResult,
    ToolValidation,
    Trace,
    unique,
)
from tea_notebook.runtime.event_types import ErrorEvent
from tea_notebook.runtime.runlog import Process

if TYPE_CHECKING:
    from tea_notebook.evolve.gate import PromotionGate
    from tea_notebook.evolve.toolmaker import Creation, ToolMaker
    from tea_notebook.models.client import ModelClient
    from tea_notebook.protocol.context import Context
    from tea_notebook.protocol.records import AgentRecord, ExperienceRecord, ToolRecord
    from tea_notebook.runtime.agent import RunResult
    from tea_notebook.runtime.host import RunHost

PROCESS = "mem2evolve"


# -- the loop ---------------------------------------------------------------------------------
class Mem2Evolve:
    """The co-evolution loop over a workspace's tool bank, agent bank and experience memory.

    ``delta`` is δ for tool retrieval (cosine of the sub-task with a tool's name and description);
    ``agent_delta`` is δ for the agent bank (default: the bank's own, calibrated for whole agent
    cards); ``top_k`` is K; ``max_steps`` bounds each agent run; ``max_fixes`` bounds the tool
    manager's and the validation's fix loops; ``approval="manual"`` holds new tools and fixed
    versions for a person's ``accept()``; ``experience_k`` entries of each kind go into a prompt.

    ``gate``: a :class:`~tea_notebook.evolve.gate.PromotionGate` (``ws.promotion_gate(held_out, ...)``).
    With one, the tools a task creates are candidates, offered only by name, and so are the new
    experiences it writes and the experts it creates (left out of retrieval); after the task the
    gate evaluates each on its held-out tasks and promotes it only on a measured gain (the decisions
    are in :attr:`promotions` and the run's ``promotion_gate`` steps). Without one, tools are offered
    at once, as before, and the run says in a ``promotion`` step that promotion is unmeasured.
    """

    def __init__(
        self,
        ws: "RunHost",
        *,
        model: str | None = None,
        delta: float = 0.3,
        top_k: int = 5,
        max_steps: int = 8,
        max_fixes: int = 3,
        approval: str = "auto",
        agent_delta: float | None = None,
        experience_k: int = 2,
        max_subtasks: int = 6,
        retries: int = 2,
        client: "ModelClient | None" = None,
        gate: "PromotionGate | None" = None,
    ):
        from tea_notebook.evolve.toolmaker import ToolMaker

        if approval not in ("auto", "manual"):
            raise ValueError("approval must be 'auto' or 'manual'")
        self.ws, self.model, self.client = ws, model, client
        self.delta, self.top_k, self.max_steps, self.max_fixes = delta, top_k, max_steps, max_fixes
        self.approval, self.agent_delta, self.experience_k = approval, agent_delta, experience_k
        self.max_subtasks, self.retries = max_subtasks, retries
        self.gate = gate
        self.promotions: dict[str, GateDecision] = {}  # asset name -> the gate's latest decision
        self.maker: "ToolMaker" = ToolMaker(
            ws,
            model=model,
            client=client,
            max_fixes=max_fixes,
            approval=approval,
            retries=retries,
            candidate=gate is not None,
        )
        self.bank = AgentBank(ws) if agent_delta is None else AgentBank(ws, threshold=agent_delta)
        self.trace: Trace | None = None  # the task the step-by-step methods work on

    def __repr__(self) -> str:
        return (
            f"Mem2Evolve(model={self.model!r}, delta={self.delta}, top_k={self.top_k}, max_steps={self.max_steps}, "
            f"max_fixes={self.max_fixes}, approval={self.approval!r})"
        )

    # -- the whole loop ----------------------------------------------------------------------
    def run(self, task: str, ground_truth: Any = None, *, context: "Context | None" = None) -> EvolutionResult:
        """Synchronous :meth:`arun`."""
        return run_sync(self.arun(task, ground_truth, context=context))

    async def arun(self, task: str, ground_truth: Any = None, *, context: "Context | None" = None) -> EvolutionResult:
        """Every stage for ``task`` as one recorded run (``mem2evolve``), sub-runs nested under it.

        The run ends ``success`` when the judge says the task was completed, ``failed`` when not,
        ``error`` when a stage got no usable model answer (EvolutionError naming the stage is raised;
        the backward phase writes nothing before the judge has answered).
        """
        if not isinstance(task, str) or not task.strip():
            raise ValueError("Mem2Evolve.run needs a non-empty task")
        gt = None if ground_truth is None else str(ground_truth)
        require_model(self.ws, self.model, PROCESS)
        if self.gate is not None:  # refused before anything runs: its tools could never be measured fairly
            overlap = leaked(self.gate.tasks, [task])
            if overlap:
                raise LeakageError("the tools this task would make", overlap)
        self.maker.made_from = [task]
        async with Process(self.ws, PROCESS, task, model=self.model, context=context, client=self.client) as proc:
            trace = self.trace = Trace(task, run_id=proc.run_id)
            await self._plan(proc, trace)
            for sub in trace.subtasks:
                proc.check_stop()
                recruit = await self._recruit(proc, trace, sub)
                await self._execute(proc, trace, sub, recruit, None)
            proc.check_stop()
            await self._aggregate(proc, trace, task, None)
            judgement = await self._judge(proc, trace, task, gt)
            proc.check_stop()
            await self._validate(proc, trace, trace.created_tools, judgement)
            await self._reflect(proc, trace, judgement)
            await self._promote(proc, trace)
            result = self._result(trace)
            proc.finish("success" if judgement.success else "failed", result.answer)
        return result

    # -- one stage per cell --------------------------------------------------------------------
    def plan(self, task: str, *, context: "Context | None" = None) -> list[SubTask]:
        """Synchronous :meth:`aplan`."""
        return run_sync(self.aplan(task, context=context))

    async def aplan(self, task: str, *, context: "Context | None" = None) -> list[SubTask]:
        """Split ``task`` into sub-tasks (C.1) and start a new :attr:`trace` for it."""
        self.trace = Trace(task)
        async with self._stage("plan", task, context) as proc:
            return await self._plan(proc, self.trace)

    def recruit(self, subtask: SubTask | int | str, *, context: "Context | None" = None) -> Recruit:
        """Synchronous :meth:`arecruit`."""
        return run_sync(self.arecruit(subtask, context=context))

    async def arecruit(self, subtask: SubTask | int | str, *, context: "Context | None" = None) -> Recruit:
        """Tools (retrieved above δ, then the tool manager: reuse first, create on demand) and an expert
        agent (the bank's top-1 above δ, else a new C.5 spec added to the bank) for one sub-task."""
        sub = self._subtask(subtask)
        async with self._stage("recruit", sub.description, context) as proc:
            return await self._recruit(proc, self._trace_for(sub), sub)

    def execute(
        self,
        subtask: SubTask | int | str,
        recruit: Recruit | None = None,
        previous: Any = None,
        *,
        context: "Context | None" = None,
    ) -> "RunResult":
        """Synchronous :meth:`aexecute`."""
        return run_sync(self.aexecute(subtask, recruit, previous, context=context))

    async def aexecute(
        self,
        subtask: SubTask | int | str,
        recruit: Recruit | None = None,
        previous: Any = None,
        *,
        context: "Context | None" = None,
    ) -> "RunResult":
        """Run the recruited agent on the sub-task with the C.6 prompt. ``recruit`` defaults to the
        trace's recruit for it (recruiting when there is none); ``previous`` (``{number: result}``)
        defaults to the trace's results of its dependencies."""
        sub = self._subtask(subtask)
        trace = self._trace_for(sub)
        async with self._stage("execute", sub.description, context) as proc:
            if recruit is None:
                recruit = trace.recruits.get(sub.number) or await self._recruit(proc, trace, sub)
            return await self._execute(proc, trace, sub, recruit, previous)

    def aggregate(self, task: str | None = None, results: Any = None, *, context: "Context | None" = None) -> str:
        """Synchronous :meth:`aaggregate`."""
        return run_sync(self.aaggregate(task, results, context=context))

    async def aaggregate(
        self, task: str | None = None, results: Any = None, *, context: "Context | None" = None
    ) -> str:
        """Combine the sub-task results (default: the trace's) into the final answer."""
        trace = self._require_trace(task)
        async with self._stage("aggregate", trace.task, context) as proc:
            return await self._aggregate(proc, trace, task or trace.task, results)

    def judge(
        self,
        task: str | None = None,
        trace: Trace | None = None,
        ground_truth: Any = None,
        *,
        context: "Context | None" = None,
    ) -> Judgement:
        """Synchronous :meth:`ajudge`."""
        return run_sync(self.ajudge(task, trace, ground_truth, context=context))

    async def ajudge(
        self,
        task: str | None = None,
        trace: Trace | None = None,
        ground_truth: Any = None,
        *,
        context: "Context | None" = None,
    ) -> Judgement:
        """The judge's verdict on the trace (C.7); a ground truth, when given, goes into the prompt."""
        trace = trace or self._require_trace(task)
        gt = None if ground_truth is None else str(ground_truth)
        async with self._stage("judge", trace.task, context) as proc:
            return await self._judge(proc, trace, task or trace.task, gt)

    def validate_assets(
        self,
        new_tools: Iterable[Any] | None = None,
        judgement: Judgement | dict[str, Any] | None = None,
        *,
        context: "Context | None" = None,
    ) -> list[ToolValidation]:
        """Synchronous :meth:`avalidate_assets`."""
        return run_sync(self.avalidate_assets(new_tools, judgement, context=context))

    async def avalidate_assets(
        self,
        new_tools: Iterable[Any] | None = None,
        judgement: Judgement | dict[str, Any] | None = None,
        *,
        context: "Context | None" = None,
    ) -> list[ToolValidation]:
        """Check each created tool (names or records; default: the trace's) against tests written from
        the judge's critique, in the confined sandbox; fix failures (bounded) into a new version."""
        trace = self.trace or Trace("(validation)")
        judgement = self._judgement(judgement, trace)
        names = trace.created_tools if new_tools is None else [getattr(t, "name", t) for t in new_tools]
        async with self._stage("validate_assets", ", ".join(names) or "(no new tools)", context) as proc:
            return await self._validate(proc, trace, names, judgement)

    def reflect(
        self,
        trace: Trace | None = None,
        judgement: Judgement | dict[str, Any] | None = None,
        *,
        context: "Context | None" = None,
    ) -> list["ExperienceRecord"]:
        """Synchronous :meth:`areflect`."""
        return run_sync(self.areflect(trace, judgement, context=context))

    async def areflect(
        self,
        trace: Trace | None = None,
        judgement: Judgement | dict[str, Any] | None = None,
        *,
        context: "Context | None" = None,
    ) -> list["ExperienceRecord"]:
        """Write experience: a C.8 entry per created tool, a C.9 (success) or C.10 (failure) entry per
        agent by the judge's verdict; the entries retrieved for the task learn its outcome."""
        trace = trace or self._require_trace(None)
        judgement = self._judgement(judgement, trace)
        async with self._stage("reflect", trace.task, context) as proc:
            return await self._reflect(proc, trace, judgement)

    def result(self, trace: Trace | None = None) -> EvolutionResult:
        """The :class:`EvolutionResult` of a judged trace (default: the current one)."""
        return self._result(trace or self._require_trace(None))

    # -- stages -----------------------------------------------------------------------------
    async def _plan(self, proc: Process, trace: Trace) -> list[SubTask]:
        value = await ask_json(
            proc, prompts.PLAN, {"query": trace.task}, validate=self._check_plan, retries=self.retries
        )
        trace.subtasks = [
            SubTask(i, s["description"].strip(), list(s.get("dependencies") or []))
            for i, s in enumerate(value["sub_tasks"], 1)
        ]
        trace.recruits.clear()
        trace.results.clear()
        proc.step("plan", {"query": trace.task}, "\n".join(map(str, trace.subtasks)))
        return list(trace.subtasks)

    def _check_plan(self, value: dict[str, Any]) -> str | None:
        subs = value.get("sub_tasks")
        if not isinstance(subs, list) or not subs:
            return "'sub_tasks' must be a non-empty list"
        if len(subs) > self.max_subtasks:
            return f"there are {len(subs)} sub-tasks; use at most {self.max_subtasks}"
        for i, s in enumerate(subs, 1):
            if not isinstance(s, dict):
                return f"sub-task {i} must be an object with 'description' and 'dependencies'"
            if not isinstance(s.get("description"), str) or not s["description"].strip():
                return f"sub-task {i} needs a non-empty 'description'"
            deps = s.get("dependencies", [])
            if not isinstance(deps, list) or any(not isinstance(d, int) or isinstance(d, bool) for d in deps):
                return f"sub-task {i}: 'dependencies' must be a list of sub-task numbers"
            bad = [d for d in deps if not 1 <= d < i]
            if bad:
                allowed = f"1 to {i - 1}" if i > 1 else "none: the first sub-task has no dependencies"
                return f"sub-task {i} depends on {bad}: dependencies are numbers of EARLIER sub-tasks ({allowed})"
        return None

    async def _recruit(self, proc: Process, trace: Trace, sub: SubTask) -> Recruit:
        ws = self.ws
        retrieved = self._retrieve_tools(sub.description)
        proc.step(
            "retrieve_tools",
            {"subtask": sub.number, "delta": self.delta, "top_k": self.top_k},
            "\n".join(f"- {n} (cosine {s:.3f})" for n, s in retrieved) or f"(no tool above δ={self.delta})",
        )
        creation: "Creation | None" = None
        created: list[str] = []
        reused: list[str] = []
        try:
            creation = await self.maker.acreate(sub.description, context=proc.ctx)
        except EvolutionError as exc:  # the sub-task goes on with the tools that exist
            proc.step("tool_manager", {"subtask": sub.number}, f"the tool manager failed: {exc}", ok=False)
        else:
            created = [t.name for t in creation.tools]
            reused = [n for n in creation.reused if n in ws.tools]
            proc.step("tool_manager", {"subtask": sub.number, "run": creation.run_id}, creation.summary())
        tools = unique([*(n for n, _ in retrieved), *reused, *created])

        found = self.bank.find(sub.description)
        if found is not None:
            record, score = found
            spec = self.bank.spec(record.name)
            proc.step(
                "find_agent",
                {"subtask": sub.number, "threshold": self.bank.threshold},
                f"reusing {record.name} ({spec.role}), cosine {score:.3f}",
            )
        else:
            listing = self._tool_listing(tools)
            value = await ask_json(
                proc,
                prompts.AGENT_SPEC,
                {"sub_task": sub.description, "tools": "\n" + listing},
                validate=lambda v: check_spec(v, tools),
                retries=self.retries,
            )
            spec = ExpertSpec.from_dict(value, tools)
            record = self.bank.add(
                spec,
                source_run=proc.run_id,
                available_tools=tools,
                candidate=self.gate is not None,
                made_from=[trace.task],
            )
            score = None
            proc.step(
                "create_agent",
                {"subtask": sub.number, "agent": record.name},
                json.dumps(spec.to_dict(), indent=1, ensure_ascii=False),
            )
        tools += [t for t in spec.tools if t in ws.tools and t not in tools]
        recruit = Recruit(
            sub,
            record,
            spec,
            agent_created=found is None,
            agent_score=score,
            tools=tools,
            retrieved_tools=retrieved,
            reused_tools=reused,
            creation=creation,
        )
        trace.recruits[sub.number] = recruit
        return recruit

    async def _execute(self, proc: Process, trace: Trace, sub: SubTask, recruit: Recruit, previous: Any) -> "RunResult":
        from tea_notebook.runtime.agent import Agent
        from tea_notebook.runtime.prompts import SYSTEM_PROMPT

        ws = self.ws
        memory = experiences_of(ws)
        successes = memory.retrieve(sub.description, kind="success", k=self.experience_k)
        failures = memory.retrieve(sub.description, kind="failure", k=self.experience_k)
        retrieved = [r.name for r in [*successes, *failures]]
        proc.step(
            "retrieve_experience",
            {"subtask": sub.number, "k": self.experience_k},
            "\n".join(f"- {r.kind}: {r.title}" for r in [*successes, *failures]) or "(none)",
        )
        spec = recruit.spec
        tools = [t for t in recruit.tools if t in ws.tools]
        messages = prompts.REACT.render(
            role=spec.role,
            suggestions="\n".join(f"- {s}" for s in spec.suggestions) or "(none)",
            previous=self._previous(trace, sub, previous),
            success_experiences=memory.render_for_prompt(successes),
            failure_experiences=memory.render_for_prompt(failures),
            task=sub.description,
        )
        react = (
            f"{messages[0]['content']}\n# Expertise\n{spec.expertise}\n# Tools\n{self._tool_listing(tools)}\n"
            "Use the tools for what they do exactly; call 'done' with the sub-task's result."
        )
        system_prompt = react.replace("{", "{{").replace("}", "}}") + "\n\n" + SYSTEM_PROMPT
        agent = Agent(
            ws,
            recruit.agent.name,
            description=spec.expertise,
            role=spec.role,
            model=self.model,
            tools=tools,
            max_steps=self.max_steps,
            system_prompt=system_prompt,
            client=self.client,
            register=False,
        )
        result = await agent.run(messages[1]["content"], context=proc.ctx, raise_on_error=False)
        process, used = _run_text(ws, result.run_id)
        trace.results[sub.number] = SubTaskResult(sub, recruit, result, retrieved, used, process)
        trace.recruits.setdefault(sub.number, recruit)
        proc.step(
            "execute",
            # the experiences it was given: the lineage lists this run among their uses
            {
                "subtask": sub.number,
                "agent": recruit.agent.name,
                "run": result.run_id,
                "tools": tools,
                "experiences": retrieved,
            },
            f"{result.status}: {result.answer}",
            ok=result.status not in ("error", "interrupted"),
        )
        return result

    async def _aggregate(self, proc: Process, trace: Trace, task: str, results: Any) -> str:
        items = self._result_items(trace, results)
        text = "\n\n".join(f"{label} [{status}]\n{answer}" for label, status, answer in items) or "(no results)"

        def check(v: dict[str, Any]) -> str | None:
            answer = v.get("answer")
            if isinstance(answer, bool) or not isinstance(answer, (str, int, float)) or not str(answer).strip():
                return "'answer' must be the final answer (a non-empty string)"
            return None

        value = await ask_json(
            proc, prompts.AGGREGATE, {"query": task, "results": text}, validate=check, retries=self.retries
        )
        trace.answer, trace.reasoning = str(value["answer"]).strip(), str(value.get("reasoning", "")).strip()
        proc.step("aggregate", {"results": len(items)}, f"{trace.answer}\n\n{trace.reasoning}".strip())
        return trace.answer

    async def _judge(self, proc: Process, trace: Trace, task: str, ground_truth: str | None) -> Judgement:
        results = [trace.results[n] for n in sorted(trace.results)]
        created = []
        for name in trace.created_tools:
            rec = self.ws.tools.current(name)
            if rec is not None:
                created.append(
                    f"- {name} (v{rec.version}): {rec.description}\n```python\n{_clip(rec.source, 3000)}\n```"
                )
        gt = (
            f"Ground truth (the correct final answer, given for this evaluation; judge the final result against it): "
            f"{ground_truth}\n"
            if ground_truth is not None
            else ""
        )
        fields = {
            "query": task,
            "subtasks": _block(map(str, trace.subtasks)),
            "agent_assignments": _block(
                f"sub-task {r.subtask.number} → agent_id {r.recruit.agent.name} ({r.recruit.spec.role}; "
                f"{'newly created' if r.recruit.agent_created else 'from the agent bank'}); "
                f"tools: {', '.join(r.recruit.tools) or 'none'}"
                for r in results
            ),
            "agent_processes": "\n\n".join(
                f"## sub-task {r.subtask.number} ({r.recruit.agent.name})\n{r.process}" for r in results
            )
            or "(none)",
            "aggregation_process": trace.reasoning or "(no reasoning given)",
            "final_result": trace.answer or "(no answer)",
            "created_tools": _block(created),
            "ground_truth": gt,
        }
        value = await ask_json(proc, prompts.JUDGE, fields, validate=check_judgement, retries=self.retries)
        # with a ground truth the framework compares the answer itself; the judge's verdict is only its opinion
        judgement = trace.judgement = Judgement.from_dict(value, ground_truth, answer=trace.answer)
        checked = {"ground_truth": ground_truth is not None}
        if ground_truth is not None:
            checked.update(matches_ground_truth=judgement.success, judge_completed=judgement.judge_completed)
        proc.step("judge", checked, judgement.to_json())
        return judgement

    async def _validate(
        self, proc: Process, trace: Trace, names: list[str], judgement: Judgement
    ) -> list[ToolValidation]:
        from tea_notebook.evolve.toolmaker import Candidate, report_text

        out: list[ToolValidation] = []
        for name in unique(names):
            proc.check_stop()
            rec = self.ws.tools.current(name)
            if rec is None or rec.origin != "generated" or not rec.source:
                why = "no longer registered" if rec is None else "not a generated tool with source code"
                v = ToolValidation(name, "skipped", reason=why)
                proc.step("validate_tool", {"tool": name}, why, ok=False)
                out.append(v)
                continue
            provenance = dict(rec.metadata.get("provenance") or {})
            spec = dict(provenance.get("spec") or {"tool_name": name, "tool_description": rec.description})
            critique = judgement.critique_of(name)
            cand = Candidate(name, {**spec, "judge_critique": critique}, code=rec.source)
            try:
                tests = await self.maker._tests(proc, cand)
            except EvolutionError as exc:
                v = ToolValidation(name, "skipped", rec.version, reason=f"no usable tests from the critique: {exc}")
                proc.step("validate_tool", {"tool": name}, v.reason, ok=False)
                out.append(v)
                continue
            examples = spec.get("examples") or []
            code, fixes, report, output, reason = rec.source, 0, {}, "", ""
            for iteration in range(self.max_fixes + 1):
                report = await self.maker._check(
                    proc, name, code, tests, examples=examples, label=f"critique-{rec.version}-{iteration}"
                )
                output = report_text(report)
                proc.step(
                    "validate_tool",
                    {"tool": name, "version": rec.version, "iteration": iteration},
                    output,
                    ok=bool(report.get("ok")),
                )
                if report.get("ok") or iteration == self.max_fixes:
                    break
                fixes += 1
                try:
                    fixed = await ask_json(
                        proc,
                        prompts.TOOL_FIX,
                        {
                            "tool_name": name,
                            "spec": json.dumps({**spec, "judge_critique": critique}, ensure_ascii=False),
                            "code": code,
                            "failure": output,
                        },
                        validate=lambda v: (
                            None if isinstance(v.get("module_code"), str) else "'module_code' is missing"
                        ),
                        retries=self.retries,
                    )
                except EvolutionError as exc:
                    reason = str(exc)
                    break
                code = fixed["module_code"]
                proc.step("fix_tool", {"tool": name, "iteration": fixes}, code)
            v = ToolValidation(name, "failed", rec.version, tests, output, fixes, code=code)
            if report.get("ok") and fixes == 0:
                v.status = "passed"
            elif report.get("ok"):
                register = self._version_maker(proc, trace, rec, code, report, tests, output, fixes, critique)
                if self.approval == "manual":
                    v.status, v._register = "pending", register
                    proc.step("await_approval", {"tool": name}, "fixed; waiting for accept() or reject()")
                else:
                    v.status, v.version = "fixed", register().version
            else:
                v.reason = reason or (
                    f"still failing after {fixes} fixes: {report.get('error', 'checks failed')}; "
                    f"v{rec.version} is kept (roll back or edit it by hand)"
                )
                proc.step("validation_failed", {"tool": name}, v.reason, ok=False)
            out.append(v)
        trace.validations = out
        return out

    async def _promote(self, proc: Process, trace: Trace) -> None:
        """The gate on every candidate the task made (tools, then experiences); without a gate, say
        that promotion is unmeasured."""
        created = unique(trace.created_tools)
        if self.gate is None:
            if created:
                proc.step("promotion", {"tools": created}, UNMEASURED_NOTE)
            return
        lessons = unique(e.name for e in trace.experiences if is_candidate(e))
        for kind, names in (("tool", created), ("experience", lessons), ("agent", unique(trace.new_agents))):
            for name in names:
                proc.check_stop()
                record = registry_of(self.ws, kind).current(name)
                if record is None or not is_candidate(record):
                    continue
                decision = await self.gate.acheck(name, kind=kind)
                self.promotions[name] = decision
                proc.step("promotion_gate", {kind: name, "decision": decision.id}, decision.message)

    def _version_maker(
        self,
        proc: Process,
        trace: Trace,
        rec: "ToolRecord",
        code: str,
        report: dict[str, Any],
        tests: str,
        output: str,
        fixes: int,
        critique: dict[str, Any],
    ) -> Callable[[], "ToolRecord"]:
        """A function registering the fixed code as a new version of ``rec`` (with its provenance)."""

        def register() -> "ToolRecord":
            provenance = dict(rec.metadata.get("provenance") or {})
            provenance.update(
                run=proc.run_id,
                step=proc.steps,
                model=proc.model,
                validation={
                    "source": "judge critique",
                    "task_run": trace.run_id,
                    "critique": critique,
                    "tests": tests,
                    "test_output": output,
                    "fix_iterations": fixes,
                    "fixed_from_version": rec.version,
                },
            )
            function = report.get("function") or rec.entrypoint.partition(":")[2] or rec.name
            metadata = {**rec.metadata, "provenance": provenance}
            if isinstance(metadata.get("evolution"), dict):  # the lineage: this fix replaced rec's version
                metadata["evolution"] = {**metadata["evolution"], "parent": rec.version, "runs": [proc.run_id]}
                metadata["evolution"].pop("promotes", None)
                metadata["evolution"].pop("gate", None)
                if metadata["evolution"].get("status") == PROMOTED:  # a changed tool is not what was measured
                    metadata["evolution"]["status"] = UNMEASURED
            record = rec.model_copy(
                update={
                    "source": code,
                    "source_hash": hashlib.sha256(code.encode()).hexdigest(),
                    "entrypoint": f"source:{function}",
                    "metadata": metadata,
                }
            )
            stored = self.ws.tools.register(
                record, note=f"fixed after the judge's critique (run {proc.run_id}); was v{rec.version}"
            )
            proc.step(
                "register_version",
                {"tool": rec.name},
                f"registered {rec.name} v{stored.version} "
                f"(roll back with ws.tools.rollback({rec.name!r}, {rec.version}))",
            )
            return stored

        return register

    async def _reflect(self, proc: Process, trace: Trace, judgement: Judgement) -> list["ExperienceRecord"]:
        from tea_notebook.evolve.experience import parse_markdown

        drafts: list[tuple[str, str, str, str, dict[str, Any]]] = []  # kind, markdown, run, outcome, fields
        validated = {v.tool: v for v in trace.validations}
        for name in trace.created_tools:
            rec = self.ws.tools.current(name)
            if rec is None:
                continue
            provenance = rec.metadata.get("provenance") or {}
            spec = provenance.get("spec") or {}
            need = next(
                (r.creation.need for r in trace.recruits.values() if name in r.created_tools and r.creation), {}
            )
            calls = [
                line for r in trace.results.values() for line in r.process.splitlines() if f" {name}(" in f" {line}"
            ]
            usage = [json.dumps(e, ensure_ascii=False) for e in spec.get("examples") or []] + calls
            fields = {
                "tool_name": name,
                "tool_description": rec.description,
                "required_capabilities": ", ".join(need.get("required_capabilities") or []) or "(not stated)",
                "usage_examples": "\n".join(usage) or "(none)",
                "tool_code": rec.source,
            }
            markdown = await self._ask_markdown(proc, prompts.TOOL_MEMORY, fields)
            v = validated.get(name)
            ok = v.passed if v is not None and v.status != "skipped" else judgement.success
            drafts.append(
                ("tool", markdown, str(provenance.get("run") or proc.run_id), _outcome(ok), {"tool_name": name})
            )
        for number in sorted(trace.results):
            r = trace.results[number]
            spec = r.recruit.spec
            ok = judgement.performance(
                number, r.recruit.agent.name, spec.role, default=judgement.success and r.run.success
            )
            item = judgement.agent(number, r.recruit.agent.name, spec.role) or {}
            fields = {
                "agent_role": spec.role,
                "agent_skills": f"{spec.expertise} Suggestions: {'; '.join(spec.suggestions)}",
                "subtask_description": r.subtask.description,
                "task_context": trace.task,
                "tools_used": ", ".join(r.tools_used) or "none",
                "execution_process": r.process,
                "performance_rating": item.get("performance") or _outcome(ok),
            }
            if ok:
                fields.update(
                    final_result=r.answer,
                    strengths="; ".join(item.get("strengths") or []) or "(none listed)",
                    success_patterns=judgement.assessment or "(none stated)",
                )
                prompt, kind = prompts.SUCCESS_MEMORY, "success"
            else:
                tool_issues = [f"{t.get('tool_name')}: {i}" for t in judgement.tools for i in t.get("issues") or []]
                fields.update(
                    failure_outcome=f"{r.status}: {r.answer}",
                    issues="; ".join(item.get("issues") or []) or "(none listed)",
                    root_cause=judgement.assessment or "(not stated)",
                    suggested_fixes="; ".join(tool_issues) or "(none stated)",
                )
                prompt, kind = prompts.FAILURE_MEMORY, "failure"
            markdown = await self._ask_markdown(proc, prompt, fields)
            drafts.append((kind, markdown, r.run.run_id, _outcome(ok), {"agent_role": spec.role}))
        for _kind, markdown, _, _, _ in drafts:  # every entry parses before any is written
            parse_markdown(markdown)
        written: list["ExperienceRecord"] = []
        for kind, markdown, run, outcome, extra in drafts:
            metadata: dict[str, Any] = {"task": trace.task}
            if self.gate is not None:  # a new lesson is retrieved only once the gate promotes it
                metadata = evolution_metadata(
                    metadata, candidate=True, tasks=[trace.task], runs=[run], parent=None, routed=False
                )
            record, merged = experiences_of(self.ws).from_markdown(
                kind, markdown, source_run=run, outcome=outcome, metadata=metadata, **extra
            )
            written.append(record)
            if merged:
                trace.merged.append(record.name)
            proc.step(
                "write_experience",
                {"kind": kind, "entry": record.name, "merged": merged},
                experiences_of(self.ws).to_markdown(record),
            )
        retrieved = trace.retrieved_experiences
        if retrieved:
            experiences_of(self.ws).record_outcome(retrieved, judgement.success)
            proc.step(
                "record_outcome",
                {"success": judgement.success},
                "\n".join(f"- {n}" for n in retrieved),
            )
        trace.experiences = written
        return written

    async def _ask_markdown(self, proc: Process, prompt: prompts.Prompt, fields: dict[str, Any]) -> str:
        """A C.8–C.10 markdown entry; an answer that does not parse is sent back with the problem."""
        from tea_notebook.evolve.experience import ExperienceError, parse_markdown

        messages = prompt.render(**fields)
        problem = ""
        for attempt in range(self.retries + 1):
            reply = await proc.complete(messages, prompt.stage)
            text = (reply.content or "").strip()
            try:
                parse_markdown(text)
                return text
            except ExperienceError as exc:
                problem = str(exc)
            proc.emit(
                "error", ErrorEvent(kind="model_output", stage=prompt.stage, message=problem, attempt=attempt + 1)
            )
            messages = [
                *messages,
                {"role": "assistant", "content": text},
                {
                    "role": "user",
                    "content": f"That entry cannot be used: {problem}. Answer again with the markdown section only.",
                },
            ]
        raise EvolutionError(
            prompt.stage, f"no usable entry after {self.retries + 1} attempts; last problem: {problem}"
        )

    # -- helpers ----------------------------------------------------------------------------
    @asynccontextmanager
    async def _stage(self, stage: str, text: str, context: "Context | None") -> AsyncIterator[Process]:
        """A recorded run for one stage called on its own (a notebook cell)."""
        require_model(self.ws, self.model, stage)
        async with Process(
            self.ws, PROCESS, f"{stage}: {text}", model=self.model, context=context, client=self.client
        ) as proc:
            if self.trace is not None and not self.trace.run_id:
                self.trace.run_id = proc.run_id
            yield proc

    def _subtask(self, subtask: SubTask | int | str) -> SubTask:
        if isinstance(subtask, SubTask):
            return subtask
        if isinstance(subtask, int) and self.trace is not None:
            for s in self.trace.subtasks:
                if s.number == subtask:
                    return s
            raise TeaError(f"the plan has no sub-task {subtask}")
        if isinstance(subtask, str) and subtask.strip():
            number = len(self.trace.subtasks) + 1 if self.trace is not None else 1
            return SubTask(number, subtask.strip())
        raise TypeError(f"a sub-task is a SubTask, its number or its description, not {subtask!r}")

    def _trace_for(self, sub: SubTask) -> Trace:
        if self.trace is None:
            self.trace = Trace(sub.description, subtasks=[sub])
        elif all(s.number != sub.number for s in self.trace.subtasks):
            self.trace.subtasks.append(sub)
        return self.trace

    def _require_trace(self, task: str | None) -> Trace:
        if self.trace is None:
            if task is None:
                raise TeaError("nothing to work on yet: call plan(task) first (or run(task))")
            self.trace = Trace(task)
        return self.trace

    def _judgement(self, judgement: Judgement | dict[str, Any] | None, trace: Trace) -> Judgement:
        if isinstance(judgement, Judgement):
            return judgement
        if isinstance(judgement, dict):
            problem = check_judgement(judgement)
            if problem:
                raise EvolutionError("judge", problem)
            return Judgement.from_dict(judgement)
        if trace.judgement is None:
            raise TeaError("the task has not been judged yet: call judge(...) first")
        return trace.judgement

    def _retrieve_tools(self, query: str) -> list[tuple[str, float]]:
        """Top-K tools with cosine > δ (Eq. 13); agents offered as tools are not candidates."""
        if not len(self.ws.tools):
            return []
        hits = self.ws.tools.similar(query, k=self.top_k * 3 + 5, threshold=self.delta)
        return [(r.name, s) for r, s in hits if r.origin != "agent" and s > self.delta][: self.top_k]

    def _tool_listing(self, names: list[str]) -> str:
        lines = []
        for n in names:
            rec = self.ws.tools.current(n)
            if rec is not None:
                lines.append(f"- {n}: {rec.description}")
        return "\n".join(lines) or "(none)"

    def _previous(self, trace: Trace, sub: SubTask, previous: Any) -> str:
        """The C.6 "progress so far": the original query and the results this sub-task depends on."""
        if previous is None:
            items = [(n, trace.results[n]) for n in sub.dependencies if n in trace.results]
        elif isinstance(previous, dict):
            items = list(previous.items())
        else:
            items = list(enumerate(previous if isinstance(previous, (list, tuple)) else [previous], 1))
        lines = []
        for n, r in items:
            answer = getattr(r, "answer", r)
            if isinstance(r, SubTaskResult):
                desc = f" ({r.subtask.description})"
            else:
                desc = next((f" ({s.description})" for s in trace.subtasks if s.number == n), "")
            lines.append(f"Result of sub-task {n}{desc}: {answer}")
        if not lines:
            lines.append("(nothing yet: no earlier sub-task feeds this one)")
        if trace.task != sub.description:
            lines.insert(0, f"Original query: {trace.task}")
        return "\n".join(lines)

    @staticmethod
    def _result_items(trace: Trace, results: Any) -> list[tuple[str, str, str]]:
        if results is None:
            results = [trace.results[n] for n in sorted(trace.results)]
        elif isinstance(results, dict):
            results = [results[k] for k in sorted(results)]
        elif not isinstance(results, (list, tuple)):
            results = [results]
        items = []
        for i, r in enumerate(results, 1):
            if isinstance(r, SubTaskResult):
                items.append((f"{r.subtask.number}. {r.subtask.description}", r.status, r.answer))
            elif hasattr(r, "answer") and hasattr(r, "status"):
                items.append((f"{i}. {getattr(r, 'task', '')}", r.status, r.answer))
            else:
                items.append((f"{i}.", "given", str(r)))
        return items

    def _result(self, trace: Trace) -> EvolutionResult:
        if trace.judgement is None:
            raise TeaError("the task has not been judged yet: call judge(...) first")
        return EvolutionResult(
            task=trace.task,
            answer=trace.answer,
            success=trace.judgement.success,
            judgement=trace.judgement,
            subtasks=[trace.results[n] for n in sorted(trace.results)],
            created_tools=trace.created_tools,
            reused_tools=trace.reused_tools,
            new_agents=trace.new_agents,
            experiences=list(trace.experiences),
            validations=list(trace.validations),
            run_id=trace.run_id,
            trace=trace,
            workspace=self.ws,
        )


# -- agents in ACP ----------------------------------------------------------------------------
def _rebuild_evolution_agent(ws: "RunHost", name: str, card: "AgentRecord", overrides: dict[str, Any]) -> Any:
    """``tool_manager`` or ``mem2evolve`` again from its card (both are registered together)."""
    register_evolution_agents(ws, **dict(card.metadata.get("config") or {}))
    return ws.agents.runtime(name)


@agent_kind(
    "evolution",
    makes=False,
    rebuild=_rebuild_evolution_agent,
    fork=None,
    description="tool_manager and mem2evolve come with register_evolution_agents(ws, model)",
)
def register_evolution_agents(
    ws: "RunHost", model: str | None = None, *, approval: str = "auto", **options: Any
) -> list["AgentRecord"]:
    """Register ``tool_manager`` (the tool maker on a task; answer: what it created or reused) and
    ``mem2evolve`` (the whole loop; answer: the final answer) in ACP with runners in this process,
    so a planner can delegate to them (``ws.planner(["tool_manager", "mem2evolve"])``).

    ``approval`` holds for both, wherever the task comes from: with ``"manual"`` no generated tool
    (nor a fixed version) is registered until a person accepts it. What waits is kept on the
    runner: ``ws.agents.runtime("tool_manager").pending`` lists the :class:`Creation` objects
    (``creation.candidates[i].accept()``), ``ws.agents.runtime("mem2evolve").pending`` the
    :class:`EvolutionResult` objects. ``options`` go to :class:`Mem2Evolve` (δ, K, max_steps,
    max_fixes, retries, …); ``max_fixes`` and ``retries`` also to the tool manager. Bad options
    fail here, not at the first delegation.
    """
    from tea_notebook.evolve.render import evolution_pending
    from tea_notebook.evolve.toolmaker import ToolMaker
    from tea_notebook.protocol.records import AgentRecord

    Mem2Evolve(ws, model=model, approval=approval, **options)  # checks approval and every option now
    maker_options = {k: options[k] for k in ("max_fixes", "retries") if k in options}

    def with_files(task: str, files: list[str] | None) -> str:
        return task + (("\nAttached files (absolute paths): " + ", ".join(files)) if files else "")

    async def tool_manager(task: str, files: list[str] | None = None, context: "Context | None" = None) -> str:
        maker = ToolMaker(ws, model=model, approval=approval, **maker_options)
        creation = await maker.acreate(with_files(task, files), context=context)
        waiting = [c.name for c in creation.candidates if c.status == "pending"]
        if not waiting:
            return creation.summary()
        tool_manager.pending.append(creation)  # type: ignore[attr-defined]
        return f"{creation.summary()}\n{_waiting_note(waiting)}"

    async def mem2evolve(task: str, files: list[str] | None = None, context: "Context | None" = None) -> str:
        loop = Mem2Evolve(ws, model=model, approval=approval, **options)
        result = await loop.arun(with_files(task, files), context=context)
        waiting = evolution_pending(result)
        if waiting:
            mem2evolve.pending.append(result)  # type: ignore[attr-defined]
        note = f"\n{_waiting_note([line.split(':')[0] for line in waiting])}" if waiting else ""
        if result.success:
            return result.answer + note
        return f"(mem2evolve: the judge found the task not completed) {result.answer}{note}"

    tool_manager.pending = []  # type: ignore[attr-defined]
    mem2evolve.pending = []  # type: ignore[attr-defined]

    cards = [
        (
            AgentRecord(
                name="tool_manager",
                description=(
                    "Creates tools on demand: reuses an existing tool when one covers the task, otherwise writes "
                    "one, validates it with tests in a confined sandbox and registers it."
                ),
                role="Tool Manager",
                competencies=[
                    "find existing tools for a task",
                    "write, test and register a new Python tool",
                ],
                model=model,
                origin="runtime",
                category="evolution",
            ),
            tool_manager,
        ),
        (
            AgentRecord(
                name="mem2evolve",
                description=(
                    "Solves a task with self-evolving expert agents: plans sub-tasks, reuses or creates tools and "
                    "experts, judges the result and learns from it (Mem²Evolve)."
                ),
                role="Self-Evolving Problem Solver",
                competencies=[
                    "plan a task into sub-tasks",
                    "recruit or create expert agents and tools",
                    "learn from success and failure",
                ],
                model=model,
                origin="runtime",
                category="evolution",
            ),
            mem2evolve,
        ),
    ]
    rebuild = {"kind": "evolution", "config": {"model": model, "approval": approval, **options}}
    for card, _ in cards:  # another process rebuilds both from either card (agents.kinds.build)
        card.metadata = {**card.metadata, **rebuild}
    return [ws.agents.register(card, runtime=runner, note="evolution agent") for card, runner in cards]


# -- small helpers ----------------------------------------------------------------------------
def _waiting_note(names: list[str]) -> str:
    """What a delegating agent reads about assets held for a person's approval."""
    return (
        f"waiting for a person's approval (approval='manual'): {', '.join(names)}; "
        "not registered, so not callable until the person accepts it"
    )


def _block(lines: Iterable[str]) -> str:
    """Lines for a prompt slot that follows a label: on their own lines, or ``(none)``."""
    text = "\n".join(lines)
    return "\n" + text if text else "(none)"


def _outcome(ok: bool) -> str:
    return "success" if ok else "failure"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


def _args_text(args: Any) -> str:
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return args[:200]
    if isinstance(args, dict):
        return ", ".join(f"{k}={v!r}" for k, v in args.items())[:300]
    return str(args)[:200]


def _run_text(ws: "RunHost", run_id: str, limit: int = 6000) -> tuple[str, list[str]]:
    """An agent run as lines of ``step N: tool(args) -> observation``, and the tools it called."""
    from tea_notebook.protocol.reserved import RUNTIME_ACTIONS
    from tea_notebook.runtime.trajectory import Trajectory

    traj = Trajectory.load(ws, run_id)
    lines, used = [], []
    for s in traj.steps:
        if s.next_goal or s.thinking:
            lines.append(f"step {s.number} goal: {textwrap.shorten(s.next_goal or s.thinking, 200)}")
        for a in s.actions:
            if a["name"] not in RUNTIME_ACTIONS:
                used.append(a["name"])
            obs = " ".join(str(a.get("observation", "")).split())[:400]
            lines.append(f"step {s.number}: {a['name']}({_args_text(a.get('arguments'))}) -> {obs}")
        for err in s.errors:
            lines.append(f"step {s.number}: error: {err}")
    lines.append(f"status: {traj.status}; answer: {traj.answer}")
    return _clip("\n".join(lines), limit), unique(used)


__all__ = [
    "EvolutionResult",
    "Judgement",
    "Mem2Evolve",
    "Recruit",
    "SubTask",
    "SubTaskResult",
    "ToolValidation",
    "Trace",
    "register_evolution_agents",
]
