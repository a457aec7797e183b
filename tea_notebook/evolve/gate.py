"""The promotion gate: an evolved tool or experience is offered to agents only once it is shown to help.

A tool the tool manager makes with ``candidate=True`` is stored as a *candidate*: a version of its
record like any other, reachable by name (``routing: explicit``, so agents that route their tools
never see it), with ``metadata["evolution"]`` saying where it came from (the tasks and runs that
made it, the version it replaced). :class:`PromotionGate` evaluates an agent on held-out tasks twice,
with the candidate added to its tools and without it, with the same tasks, epochs, model and scorer
(the *cohort*), and pairs the two by task. The candidate is **promoted** — a new version of the
record, routed like any tool, pointing back at the candidate version and the decision — only when
the interval of the mean per-task gain at ``level`` lies above zero; otherwise it stays a candidate.
Either way the decision, its cohort and its evidence are stored (versions of kind
``promotion_gate``, one history per asset), so it can be looked at and measured again
(:func:`recheck`). Experiences (lessons) go the same way: a candidate entry is left out of
retrieval, and the gate gives it to the agent's "with" arm in its system prompt. Expert agents go as
kind ``"agent"``, and so do ToolSelf configurations kept for reuse
(:mod:`tea_notebook.evolve.kept_configurations`: their whole toolbox given, every tool registered).

The interval is that of the mean per-task difference (with − without) over the held-out tasks, from
:meth:`tea_notebook.eval.stats.Estimate.interval`: Student-t by default (right at small n), or a
seeded percentile bootstrap (``interval="bootstrap"``). A set too small for any paired test to
detect a gain at ``level`` — fewer than ``ceil(log2(2 / (1 − level)))`` tasks, the least n at which
the exact sign test can reject "no change" even when every task improves — still runs, but its
decision says *underpowered* and does not promote. A held-out set that shares a task with the ones
that made the asset is refused (leakage) before anything runs or is written.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import time
import uuid
from dataclasses import asdict, dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any

from tea_notebook._sync import run_sync
from tea_notebook.errors import TeaError
from tea_notebook.protocol.records import content_hash

if TYPE_CHECKING:
    from tea_notebook.eval.tasks import Task
    from tea_notebook.runtime.host import RunHost

#: the store kind of gate decisions (one history per asset, named ``tool:NAME``)
DECISION_KIND = "promotion_gate"
CANDIDATE, PROMOTED, UNMEASURED = "candidate", "promoted", "unmeasured"
UNMEASURED_NOTE = (
    "promotion unmeasured: no held-out set was given, so new tools are offered to agents without a measured "
    "gain (give Mem2Evolve a gate=ws.promotion_gate(held_out, agent=...) to measure it)"
)


class LeakageError(TeaError):
    """The held-out set shares tasks with the ones that made the asset; ``overlap`` names them."""

    def __init__(self, asset: str, overlap: list[str]):
        shown = ", ".join(repr(t[:80]) for t in overlap[:5]) + (" …" if len(overlap) > 5 else "")
        super().__init__(
            f"leakage: {len(overlap)} held-out task(s) also made {asset}: {shown}; "
            "hold out tasks the asset was not made from (nothing was run or written)"
        )
        self.overlap = overlap


# -- candidate metadata ------------------------------------------------------------------------------
def evolution_of(record: Any) -> dict[str, Any]:
    """The ``metadata["evolution"]`` of a record (empty when it was not made by evolution)."""
    evo = record.metadata.get("evolution")
    return evo if isinstance(evo, dict) else {}


def is_candidate(record: Any) -> bool:
    """Whether a record is a candidate waiting for the gate."""
    return evolution_of(record).get("status") == CANDIDATE


def evolution_metadata(
    metadata: dict[str, Any],
    *,
    candidate: bool,
    tasks: list[str],
    runs: list[str],
    parent: int | None,
    routed: bool = True,
) -> dict[str, Any]:
    """``metadata`` with the evolution entry of a new asset version: a candidate is offered only by
    name (a tool's routing before is kept, to be restored on promotion; ``routed=False`` for assets
    without routing, like experiences, which retrieval leaves out while they are candidates); without
    the gate the version is offered at once and marked *unmeasured*."""
    out = dict(metadata)
    evo: dict[str, Any] = {
        "status": CANDIDATE if candidate else UNMEASURED,
        "tasks": list(dict.fromkeys(t for t in tasks if t)),
        "runs": list(dict.fromkeys(r for r in runs if r)),
        "parent": parent,
    }
    if candidate and routed:
        evo["routing_before"] = metadata.get("routing")
        out["routing"] = "explicit"
    out["evolution"] = evo
    return out


#: the asset kinds the gate and the lineage know
KINDS = ("tool", "experience", "agent")


def registry_of(ws: "RunHost", kind: str) -> Any:
    """The registry of an asset kind the gate and the lineage know (:data:`KINDS`)."""
    if kind == "tool":
        return ws.tools
    if kind == "experience":
        return ws.experience
    if kind == "agent":
        return ws.agents
    raise TeaError(f"the gate knows tools, experiences and expert agents, not {kind!r} (kind= one of {KINDS})")


def enter_candidate(ws: "RunHost", name: str, *, kind: str = "tool", made_from: list[str] | None = None) -> Any:
    """Register asset ``name`` (a tool, or ``kind="experience"``) again as a candidate of the gate
    (written by hand, or made elsewhere): a new version, offered only by name (tools) or left out of
    retrieval (experiences) until promoted; ``made_from``: the tasks it was made for (a held-out set
    containing one is refused)."""
    registry = registry_of(ws, kind)
    record = registry.get(name)
    if is_candidate(record):
        raise TeaError(f"{kind} {name!r} v{record.version} is already a candidate")
    metadata = evolution_metadata(
        record.metadata,
        candidate=True,
        tasks=list(made_from or []),
        runs=[],
        parent=record.version,
        routed=kind == "tool",
    )
    return registry.register(record.model_copy(update={"metadata": metadata}), note="entered as a candidate")


def _norm(text: str) -> str:
    return " ".join(str(text).casefold().split())


def made_from(ws: "RunHost", record: Any) -> list[str]:
    """The task texts that made an asset version: the requests it records and the tasks of its runs
    (an experience's source runs too)."""
    evo = evolution_of(record)
    texts = list(evo.get("tasks") or [])
    runs = [*(evo.get("runs") or []), *(getattr(record, "source_runs", None) or [])]
    for run_id in dict.fromkeys(runs):
        row = ws.db.run_row(run_id)
        if row and row.get("task"):
            texts.append(str(row["task"]))
    return list(dict.fromkeys(texts))


def leaked(held_out: list["Task"], sources: list[str]) -> list[str]:
    """The held-out tasks (their questions) that are one of ``sources`` (by id or by text, compared
    case- and whitespace-insensitively), or that contain one of them whole."""
    wanted = {_norm(s) for s in sources if s and _norm(s)}
    out = []
    for task in held_out:
        question = _norm(task.question)
        if _norm(task.id) in wanted or question in wanted or any(len(s) > 20 and s in question for s in wanted):
            out.append(task.question or task.id)
    return out


def min_tasks(level: float) -> int:
    """The least number of paired tasks at which the exact sign test can detect a gain at ``level``
    (two-sided): ``2 · 0.5^n < 1 − level``."""
    return max(2, math.ceil(math.log2(2 / (1 - level)) + 1e-12))


# -- the decision ------------------------------------------------------------------------------------
@dataclass
class GateDecision:
    """What the gate decided for one asset version, with the frozen cohort and the evidence."""

    id: str
    kind: str
    name: str
    version: int
    status: str  # promoted | candidate
    gain: float
    ci_low: float
    ci_high: float
    level: float
    n: int
    underpowered: bool
    min_tasks: int
    cohort: dict[str, Any]
    evaluations: dict[str, str]
    per_task: dict[str, list[float]] = field(default_factory=dict)  # task -> [with, without]
    promoted_version: int | None = None
    at: float = 0.0

    @property
    def message(self) -> str:
        """One sentence: the decision and why."""
        pct = f"{100 * self.level:g}%"
        how = {"t": "Student-t", "bootstrap": "bootstrap", "normal": "normal"}.get(self.cohort.get("interval", ""), "")
        evidence = (
            f"gain {self.gain:+.2f} ({pct} interval {self.ci_low:+.2f} to {self.ci_high:+.2f}"
            f"{', ' + how if how else ''}) over "
            f"{self.n} held-out task(s) × {self.cohort.get('epochs', 1)} epoch(s)"
        )
        what = f"{self.kind} {self.name} v{self.version}"
        if self.cohort.get("recheck_of"):
            holds = "the gain holds" if self.status == PROMOTED else "the gain does not hold"
            weak = " (underpowered)" if self.underpowered else ""
            return f"re-check of decision {self.cohort['recheck_of']} on {what}: {holds}{weak}: {evidence}"
        if self.status == PROMOTED:
            return f"promoted {what} (as v{self.promoted_version}): {evidence}"
        if self.underpowered:
            return (
                f"{what} stays a candidate: underpowered — {evidence}; at level {self.level:g} a paired test "
                f"needs at least {self.min_tasks} tasks to detect any gain"
            )
        why = "includes zero" if self.ci_low <= 0 <= self.ci_high else "lies below zero"
        return f"{what} stays a candidate: {evidence} {why}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (what is stored)."""
        return asdict(self)

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"GateDecision({self.message})"

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.status == PROMOTED else "#9a6700"
        rows = "".join(
            f"<tr><td>{escape(t)}</td><td>{w:.2f}</td><td>{wo:.2f}</td><td>{w - wo:+.2f}</td></tr>"
            for t, (w, wo) in self.per_task.items()
        )
        cohort = escape(json.dumps({k: v for k, v in self.cohort.items() if k != "tasks"}, ensure_ascii=False))
        return (
            f'<div class="tea-gate"><b style="color:{colour}">{escape(self.status)}</b> — {escape(self.message)}'
            f"<details><summary>evidence ({self.n} tasks)</summary><table>"
            f"<tr><th>task</th><th>with</th><th>without</th><th>gain</th></tr>{rows}</table>"
            f"<div><small>cohort: {cohort}</small></div></details></div>"
        )


def decisions(ws: "RunHost", name: str | None = None, kind: str = "tool") -> list[GateDecision]:
    """The stored gate decisions, oldest first (of one asset when ``name`` is given)."""
    if name is not None:
        stored = ws.db.history(DECISION_KIND, f"{kind}:{name}")
    else:
        stored = [v for head in ws.db.heads(DECISION_KIND) for v in ws.db.history(DECISION_KIND, head.name)]
    out = [GateDecision(**json.loads(v.data)) for v in stored if v.name.startswith(f"{kind}:")]
    return sorted(out, key=lambda d: d.at)


def _store(ws: "RunHost", decision: GateDecision) -> None:
    data = decision.to_dict()
    with ws.db.transaction() as cur:
        ws.db.put_version(
            cur,
            DECISION_KIND,
            f"{decision.kind}:{decision.name}",
            content_hash(data),
            json.dumps(data),
            "",
            "[]",
            f"gate {decision.id}: {decision.status}",
        )


def promote(ws: "RunHost", record: Any, decision_id: str, kind: str = "tool") -> Any:
    """Register the promoted version of a candidate: offered like any asset of its kind again (a tool
    routed, an experience retrieved), pointing back at the candidate version and the decision."""
    evo = evolution_of(record)
    metadata = dict(record.metadata)
    before = evo.get("routing_before")
    if before is None:
        metadata.pop("routing", None)
    else:
        metadata["routing"] = before
    metadata["evolution"] = {
        **{k: v for k, v in evo.items() if k != "routing_before"},
        "status": PROMOTED,
        "promotes": record.version,
        "gate": decision_id,
    }
    return registry_of(ws, kind).register(
        record.model_copy(update={"metadata": metadata}),
        note=f"promoted by the gate (decision {decision_id}) from candidate v{record.version}",
    )


# -- the gate ----------------------------------------------------------------------------------------
class PromotionGate:
    """Promote candidate tools and experiences on a paired, held-out evaluation (``ws.promotion_gate(...)``).

    ``held_out``: the tasks (anything :func:`~tea_notebook.eval.tasks.load_tasks` reads) the gate
    evaluates on; ``agent``: the tool-calling agent (an ``Agent`` or a registered name) the candidate
    is given to — a tool added to its tools, an experience (lesson) added to its system prompt in an
    ``<experience>`` block; ``epochs``, ``model`` and ``scorer`` as for ``ws.evaluate``; ``level``: the
    level of the interval that must exclude zero (0.95); ``interval``: how it is made, ``"t"``
    (Student-t, the default), ``"bootstrap"`` or ``"normal"``; ``resamples`` and ``seed``: the
    bootstrap's.
    """

    def __init__(
        self,
        ws: "RunHost",
        held_out: Any,
        *,
        agent: Any,
        epochs: int = 1,
        model: str | None = None,
        scorer: Any = "exact",
        level: float = 0.95,
        interval: str = "t",
        resamples: int = 10_000,
        seed: int = 0,
        max_steps: int | None = None,
    ):
        from tea_notebook.eval.stats import INTERVAL_METHODS
        from tea_notebook.eval.tasks import load_tasks

        if not 0.5 <= level < 1:
            raise TeaError(f"level must be at least 0.5 and below 1 (0.95 is usual), not {level!r}")
        if interval not in INTERVAL_METHODS:
            raise TeaError(f"unknown interval {interval!r}; use {', '.join(INTERVAL_METHODS)}")
        if not isinstance(epochs, int) or epochs < 1:
            raise TeaError(f"epochs must be a whole number of at least 1, not {epochs!r}")
        self.ws = ws
        self.tasks = load_tasks(held_out)
        if not self.tasks:
            raise TeaError("the held-out set has no tasks")
        self.agent, self.epochs, self.model, self.scorer = agent, epochs, model, scorer
        self.level, self.resamples, self.seed, self.max_steps = level, resamples, seed, max_steps
        self.interval = interval

    def check(self, name: str, *, kind: str = "tool") -> GateDecision:
        """Evaluate the current candidate version of ``name`` (a tool, or ``kind="experience"``) with
        and without it; promote it when the gain's interval lies above zero. Raises
        :class:`LeakageError` (nothing run or written) when the held-out set shares tasks with the ones
        that made it."""
        return run_sync(self.acheck(name, kind=kind))

    async def acheck(self, name: str, *, kind: str = "tool") -> GateDecision:
        """:meth:`check`, awaited."""
        record = registry_of(self.ws, kind).get(name)
        if not is_candidate(record):
            status = evolution_of(record).get("status") or "not made by evolution"
            raise TeaError(
                f"{kind} {name!r} v{record.version} is not a candidate ({status}); the gate checks candidates"
            )
        decision = await self._measure(kind, name, record)
        if decision.status == PROMOTED:
            decision.promoted_version = promote(self.ws, record, decision.id, kind).version
        _store(self.ws, decision)
        return decision

    def recheck(self, decision: GateDecision) -> GateDecision:
        """Measure a stored decision again on its frozen cohort (see :func:`recheck`)."""
        return run_sync(self.arecheck(decision))

    async def arecheck(self, decision: GateDecision) -> GateDecision:
        """:meth:`recheck`, awaited: this gate's held-out tasks must be the cohort's (same ids and
        contents); the asset's current version is measured with the cohort's tools, and the new
        measurement is stored as a re-check of ``decision`` — nothing is promoted or demoted."""
        frozen = {t["id"]: t["sha256"] for t in decision.cohort.get("tasks", [])}
        mine = {t.id: _task_hash(t) for t in self.tasks}
        differ = sorted(set(frozen) ^ set(mine)) + sorted(t for t in set(frozen) & set(mine) if frozen[t] != mine[t])
        if differ:
            shown = ", ".join(map(repr, differ[:5])) + (" …" if len(differ) > 5 else "")
            raise TeaError(
                f"the held-out tasks are not decision {decision.id}'s cohort: {len(differ)} task(s) differ "
                f"({shown}); re-check with the same tasks"
            )
        record = registry_of(self.ws, decision.kind).get(decision.name)
        again = await self._measure(decision.kind, decision.name, record, tools=decision.cohort.get("tools"))
        again.cohort["recheck_of"] = decision.id
        _store(self.ws, again)
        return again

    async def _measure(self, kind: str, name: str, record: Any, *, tools: list[str] | None = None) -> GateDecision:
        """Both arms on the held-out tasks, paired: a decision whose status says whether the gain's
        interval lies above zero (nothing registered or stored here). ``tools``: the baseline tools
        (default: the agent's)."""
        from tea_notebook.eval.plan import resolve_agent
        from tea_notebook.eval.runner import aevaluate
        from tea_notebook.eval.stats import Estimate
        from tea_notebook.runtime.agent import Agent

        overlap = leaked(self.tasks, made_from(self.ws, record))
        if overlap:
            raise LeakageError(f"{kind} {name!r} v{record.version}", overlap)
        base = resolve_agent(self.ws, self.agent)
        if not isinstance(base, Agent):
            raise TeaError(f"the gate gives the candidate to a tool-calling Agent, not to a {type(base).__name__}")
        if tools is None:
            tools = self._baseline_tools(base, name if kind == "tool" else None)
        with_it, without = copy.copy(base), copy.copy(base)
        with_it.tools, without.tools = list(tools), list(tools)
        if kind == "tool":
            with_it.tools.append(name)
        elif kind == "experience":
            with_it.system_prompt = with_lesson(base.system_prompt, record)
        elif is_kept_configuration(record):  # a ToolSelf stage's configuration: all of its toolbox, registered
            with_it.system_prompt = with_configuration(base.system_prompt, record)
            with_it.tools += [t for t in configuration_tools(self.ws, record) if t not in with_it.tools]
        else:  # an expert: its role and suggestions in the prompt, its tools added
            with_it.system_prompt = with_expert(base.system_prompt, record)
            with_it.tools += [t for t in record.tools if t not in with_it.tools and t in self.ws.tools]
        decision_id = uuid.uuid4().hex[:12]
        model = self.model or base.resolved_model()[0]
        cohort = {
            "tasks": [{"id": t.id, "sha256": _task_hash(t)} for t in self.tasks],
            "epochs": self.epochs,
            "model": model,
            "agent": base.name,
            "tools": tools,
            "scorer": self.scorer if isinstance(self.scorer, str) else getattr(self.scorer, "__name__", "custom"),
            "level": self.level,
            "interval": self.interval,
            "resamples": self.resamples,
            "seed": self.seed,
            "candidate": {"kind": kind, "name": name, "version": record.version},
        }
        names = {"with": f"gate-{decision_id}-with", "without": f"gate-{decision_id}-without"}
        options: dict[str, Any] = {"scorer": self.scorer, "model": model, "epochs": self.epochs, "progress": False}
        if self.max_steps is not None:
            options["max_steps"] = self.max_steps
        scores = {}
        for label, arm in (("with", with_it), ("without", without)):
            results = await aevaluate(self.ws, arm, self.tasks, name=names[label], **options)
            scores[label] = results.task_scores()
        common = [t.id for t in self.tasks if t.id in scores["with"] and t.id in scores["without"]]
        per_task = {t: [scores["with"][t], scores["without"][t]] for t in common}
        diffs = [w - wo for w, wo in per_task.values()]
        n, need = len(diffs), min_tasks(self.level)
        gain = sum(diffs) / n if n else 0.0
        low, high = (0.0, 0.0)
        if n:
            spread = Estimate.of(diffs).interval(
                self.level, method=self.interval, resamples=self.resamples, seed=self.seed
            )
            low, high = spread.low, spread.high
        underpowered = n < need
        decision = GateDecision(
            decision_id, kind, name, record.version, CANDIDATE, gain, low, high, self.level, n,
            underpowered, need, cohort, names, per_task, at=time.time(),
        )  # fmt: skip
        if low > 0 and not underpowered:
            decision.status = PROMOTED
        return decision

    def _baseline_tools(self, agent: Any, candidate: str | None) -> list[str]:
        """The tools both arms get: the agent's named tools, or (a routed agent) every tool it could be
        routed to now — candidates and agent tools left out."""
        if agent.tools is not None:
            return [t for t in agent.tools if t != candidate]
        return [
            r.name
            for r in self.ws.tools.list(_usage=False)
            if r.name != candidate and r.origin != "agent" and r.metadata.get("routing") != "explicit"
        ]


def with_lesson(system_prompt: str | None, record: Any) -> str:
    """An agent's system prompt (a template: braces doubled) with an experience entry appended."""
    from tea_notebook.evolve.experience import ExperienceMemory
    from tea_notebook.runtime.prompts import SYSTEM_PROMPT

    lesson = ExperienceMemory.render_for_prompt([record]).replace("{", "{{").replace("}", "}}")
    return f"{system_prompt or SYSTEM_PROMPT}\n<experience>\n{lesson}\n</experience>"


def recheck(ws: "RunHost", decision: GateDecision, held_out: Any, *, agent: Any, scorer: Any = None) -> GateDecision:
    """Run a stored decision's frozen cohort again — the same held-out tasks (checked by id and
    content), epochs, model, baseline tools, scorer, level, interval and seed — on the asset's current
    version, and store the result as a re-check (nothing promoted or demoted). ``scorer``: needed when
    the cohort's was a function (only its name is stored)."""
    from tea_notebook.eval.scoring import BUILTIN

    cohort = decision.cohort
    stored_scorer = cohort.get("scorer")
    if scorer is None and stored_scorer not in BUILTIN:
        raise TeaError(f"decision {decision.id} was scored by {stored_scorer!r}: pass that scorer= to re-check it")
    gate = PromotionGate(
        ws,
        held_out,
        agent=agent,
        epochs=cohort.get("epochs", 1),
        model=cohort.get("model"),
        scorer=scorer if scorer is not None else stored_scorer,
        level=decision.level,
        interval=cohort.get("interval", "t"),
        resamples=cohort.get("resamples", 10_000),
        seed=cohort.get("seed", 0),
    )
    return gate.recheck(decision)


def with_expert(system_prompt: str | None, record: Any) -> str:
    """An agent's system prompt (a template: braces doubled) with an expert card's role, expertise and
    suggestions appended."""
    from tea_notebook.runtime.prompts import SYSTEM_PROMPT

    lines = [f"Role: {record.role or record.name}", record.description, *(f"- {c}" for c in record.competencies)]
    text = "\n".join(lines).replace("{", "{{").replace("}", "}}")
    return f"{system_prompt or SYSTEM_PROMPT}\n<expert>\n{text}\n</expert>"


#: the metadata key of an agent card that is a ToolSelf configuration kept for reuse
#: (:mod:`tea_notebook.evolve.kept_configurations` writes it)
KEPT_CONFIGURATION_KEY = "toolself_configuration"


def is_kept_configuration(record: Any) -> bool:
    """Whether an agent card is a ToolSelf configuration kept for reuse."""
    metadata = getattr(record, "metadata", None)
    return isinstance(metadata, dict) and isinstance(metadata.get(KEPT_CONFIGURATION_KEY), dict)


def configuration_tools(ws: "RunHost", record: Any) -> list[str]:
    """A kept configuration's toolbox, every tool registered (a clear error naming the missing ones)."""
    toolbox = [str(t) for t in record.metadata[KEPT_CONFIGURATION_KEY].get("toolbox") or []]
    missing = [t for t in toolbox if t not in ws.tools]
    if missing:
        raise TeaError(
            f"the kept configuration {record.name!r} v{record.version} needs tool(s) that are not registered: "
            f"{', '.join(missing)}; register them again before the gate measures it (nothing was run)"
        )
    return toolbox


def with_configuration(system_prompt: str | None, record: Any) -> str:
    """An agent's system prompt (a template: braces doubled) with a kept configuration's sub-goal,
    strategy, toolbox and knowledge appended in a ``<configuration>`` block."""
    from tea_notebook.runtime.prompts import SYSTEM_PROMPT

    kept = record.metadata[KEPT_CONFIGURATION_KEY]
    lines = [
        f"Sub-goal: {kept.get('sub_goal', '')}",
        f"Strategy: {kept.get('strategy', '')}",
        f"Toolbox: {', '.join(kept.get('toolbox') or [])}",
    ]
    if kept.get("knowledge_text"):
        lines.append(f"Knowledge: {kept['knowledge_text']}")
    text = "\n".join(lines).replace("{", "{{").replace("}", "}}")
    return f"{system_prompt or SYSTEM_PROMPT}\n<configuration>\n{text}\n</configuration>"


def _task_hash(task: "Task") -> str:
    blob = json.dumps([task.id, task.question, task.answer], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def unused_promotions(ws: "RunHost", kind: str = "tool") -> list[str]:
    """Assets promoted by the gate that no run has used since their promotion (a tool: called; an
    experience: retrieved; an expert agent: ran)."""
    registry = registry_of(ws, kind)
    heads = [r for r in registry.list(_usage=False) if evolution_of(r).get("status") == PROMOTED]
    if not heads:
        return []
    calls: dict[str, float] = {}
    if kind == "agent":
        for row in ws.db.runs(1_000_000, parent_id=None):
            calls[row["agent"]] = max(calls.get(row["agent"], 0.0), float(row.get("started") or 0.0))
    elif kind == "tool":
        ws.events.flush()
        for _run, _type, at, data in ws.db.events_of_type(["tool_call"]):
            tool = json.loads(data).get("name")
            calls[tool] = max(calls.get(tool, 0.0), at)
    else:
        registry.flush_usage()
        calls = {n: row[3] or 0.0 for n, row in ws.db.usage(registry.kind).items()}
    out = []
    for record in heads:
        stored = ws.db.version(registry.kind, record.name, record.version)
        since = stored.created_at if stored is not None else 0.0
        if calls.get(record.name, 0.0) <= since:
            out.append(record.name)
    return out


__all__ = [
    "CANDIDATE",
    "DECISION_KIND",
    "KEPT_CONFIGURATION_KEY",
    "KINDS",
    "PROMOTED",
    "UNMEASURED",
    "UNMEASURED_NOTE",
    "GateDecision",
    "LeakageError",
    "PromotionGate",
    "configuration_tools",
    "decisions",
    "enter_candidate",
    "evolution_metadata",
    "evolution_of",
    "is_candidate",
    "is_kept_configuration",
    "leaked",
    "made_from",
    "min_tasks",
    "promote",
    "recheck",
    "unused_promotions",
    "with_configuration",
]
