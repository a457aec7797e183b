"""A run's trajectory, rebuilt from its events (never stored separately)."""

from __future__ import annotations

import functools
import heapq
import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from tea_notebook.errors import NotFoundError
from tea_notebook.models.client import display_name
from tea_notebook.runtime.event_types import RunStatus
from tea_notebook.runtime.events import Event
from tea_notebook.runtime.refusals import refusal_line
from tea_notebook.runtime.steps import StepRecord
from tea_notebook.store.blobs import shorten

if TYPE_CHECKING:
    from tea_notebook.runtime.contexts import StepContext
    from tea_notebook.runtime.divergence import Divergence
    from tea_notebook.runtime.host import RunHost


@dataclass
class StepView(StepRecord):
    """One step as it happened: its record (the model's thoughts, each action's result, a fork's
    ``note``), each action with its call id and observation, the cost, the errors."""

    actions: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    latency: float = 0.0
    replayed: bool = False
    errors: list[str] = field(default_factory=list)
    #: what a fork changed at this step (``{"kind": "observation", "before": ..., "after": ...}``), if anything
    edited: dict[str, Any] | None = None
    #: ``(start, end)`` times of the step's tool calls (see :attr:`tool_time`)
    tool_spans: list[tuple[float, float]] = field(default_factory=list, repr=False)

    def add_tool_result(self, ended: float, latency: Any) -> None:
        """Count a tool call that ended at ``ended`` (epoch seconds) after ``latency`` seconds."""
        if isinstance(latency, (int, float)) and latency >= 0:
            self.tool_spans.append((ended - latency, ended))

    @property
    def tool_time(self) -> float:
        """Seconds the step spent in its tool calls, by the clock: calls that ran at the same time
        count once (``latency`` is the model's time)."""
        total, reached = 0.0, float("-inf")
        for start, end in sorted(self.tool_spans):
            if end > reached:
                total += end - max(start, reached)
                reached = end
        return total

    @property
    def seconds(self) -> float:
        """The step's time: its model calls' and its tool calls'."""
        return self.latency + self.tool_time


class Trajectory:
    """A run with its steps and nested sub-agent runs.

    Loaded from a workspace (:meth:`load`), it reads the run tree's rows at once and its events on
    first use: :attr:`steps`, :attr:`children`, :attr:`events` and the other recorded lists are
    decoded when first asked for (the stored model requests, the bulk of a run, only with
    :attr:`events`), so ``ws.trajectory(run).context(n)`` reads no event of the run.
    """

    #: the recorded lists, built on first use from the run's events (see :class:`_RunTree`)
    _BUILT = ("steps", "children", "events", "memory", "stages", "threads", "messages")

    def __init__(
        self,
        run_id: str,
        agent: str,
        task: str,
        model: str,
        status: RunStatus,
        answer: str,
        steps: list[StepView] | None = None,
        children: list["Trajectory"] | None = None,
        events: list[Event] | None = None,
        parent_id: str | None = None,
        forked_from: str | None = None,
        memory: list[dict[str, Any]] | None = None,
        stages: list[dict[str, Any]] | None = None,
        threads: list[dict[str, Any]] | None = None,
        messages: list[dict[str, Any]] | None = None,
        fork_step: int | None = None,
        folder: str | None = None,
        workspace: Any = None,
    ):
        self.run_id, self.agent, self.task, self.model = run_id, agent, task, model
        self.status, self.answer = status, answer
        self.parent_id, self.forked_from, self.fork_step = parent_id, forked_from, fork_step
        #: the run's folder (its files, todo.md), when it was loaded from a workspace
        self.folder = folder
        #: the workspace it was loaded from (to read stored model requests)
        self.workspace = workspace
        self._tree: _RunTree | None = None
        given = dict(steps=steps, children=children, events=events, memory=memory)
        given.update(stages=stages, threads=threads, messages=messages)
        for name, value in given.items():  # a value given here is kept; the others start empty
            self.__dict__[name] = [] if value is None else value

    @classmethod
    def load(cls, workspace: "RunHost", run_id: str) -> "Trajectory":
        """A run (an id prefix is enough) of the workspace, with its nested runs; their events are
        read when first needed (and then as they are stored at that moment)."""
        row = workspace.db.run_row(run_id)
        if row is None:
            raise NotFoundError(f"no run {run_id!r} in {workspace.path}")
        return _RunTree(workspace, workspace.db.run_tree(row["id"])).trajectory(row)

    @functools.cached_property
    def steps(self) -> list[StepView]:
        """The run's steps in order."""
        return self._built().steps

    @functools.cached_property
    def children(self) -> list["Trajectory"]:
        """The nested sub-agent runs, oldest first."""
        assert self._tree is not None
        return [self._tree.trajectory(row) for row in self._tree.children_of(self.run_id)]

    @functools.cached_property
    def events(self) -> list[Event]:
        """The run's own events in order, its stored model requests included."""
        assert self._tree is not None
        return self._tree.events(self.run_id)

    @functools.cached_property
    def memory(self) -> list[dict[str, Any]]:
        """What the run wrote to memory (its ``memory_written`` records)."""
        return self._built().memory

    @functools.cached_property
    def stages(self) -> list[dict[str, Any]]:
        """A staged agent's stages (its ``stage`` records)."""
        return self._built().stages

    @functools.cached_property
    def threads(self) -> list[dict[str, Any]]:
        """A team's threads (the last state of each ``thread`` record)."""
        return self._built().threads

    @functools.cached_property
    def messages(self) -> list[dict[str, Any]]:
        """A team's messages with their times."""
        return self._built().messages

    def _built(self) -> "_Built":
        assert self._tree is not None, "a trajectory made without a workspace has all its lists"
        built = self.__dict__.get("_built_lists")
        if built is None:
            built = self.__dict__["_built_lists"] = build_lists(self._tree.records(self.run_id))
        return built

    def _light(self) -> list[Event]:
        """The run's own events without its stored model requests (what the properties read)."""
        if "events" in self.__dict__ or self._tree is None:
            return self.events
        return self._tree.light(self.run_id)

    def find(self, run_id: str) -> "Trajectory":
        """This run or the nested run ``run_id`` (an id prefix is enough)."""
        if self.run_id.startswith(run_id):
            return self
        for child in self.children:
            try:
                return child.find(run_id)
            except NotFoundError:
                continue
        raise NotFoundError(f"no run {run_id!r} in the trajectory of run {self.run_id}")

    def context(self, step: int, *, stage: str = "", run: str | None = None) -> "StepContext":
        """What the model saw at ``step``: the request as sent (after redaction), cut into parts with
        their sizes and what changed since the previous step (``run``: a nested sub-agent run's id;
        ``stage``: a call other than the step's own, e.g. ``"reconfigure"`` or ``"summary"``)."""
        from tea_notebook.runtime.contexts import load_context

        traj = self if run is None else self.find(run)
        if traj.workspace is None:
            raise NotFoundError("this trajectory was not loaded from a workspace: its stored requests cannot be read")
        return load_context(traj.workspace, traj.run_id, step, stage)

    @property
    def resumed(self) -> bool:
        """True when this run continues a stopped one (``ws.resume``) rather than forking it."""
        started = next((e.data for e in self._light() if e.type == "run_started"), {})
        return bool(started.get("resumed_from"))

    def lineage(self) -> str:
        """Where this run came from, in words ("" for a run started afresh): "resumed from RUN after
        step 4", "forked from RUN at stage 2", "forked from RUN at stocktaker's step 2"."""
        if not self.forked_from:
            return ""
        point = self.fork_point
        return f"{'resumed' if self.resumed else 'forked'} from {self.forked_from}{' ' + point if point else ''}"

    @property
    def fork_note(self) -> str:
        """What this fork or resume says of its start besides where it starts ("" when nothing): for a run
        that worked in the notebook, that the notebook's cells are not rewound."""
        started = next((e.data for e in self._light() if e.type == "run_started"), {})
        return str(started.get("fork_note") or "") if self.forked_from else ""

    @property
    def fork_point(self) -> str:
        """Where in the run it came from this run starts, in words without the run's id ("after step 4"
        for a resume, "at stage 2", "at message 3", "at stocktaker's step 2", "at step 3"); "" when
        it was started afresh."""
        if not self.forked_from:
            return ""
        started = next((e.data for e in self._light() if e.type == "run_started"), {})
        return fork_point(started, self.fork_step)

    @property
    def edit(self) -> dict[str, Any] | None:
        """What this run's fork edited (its ``run_started`` record), or None."""
        started = next((e.data for e in self._light() if e.type == "run_started"), {})
        return started.get("edit")

    @property
    def divergence(self) -> "Divergence | None":
        """Where this fork first departed from the run it was forked from (its ``diverged`` event: the
        step, how, what each run did there), or None when it reproduced it so far (or is no fork)."""
        from tea_notebook.runtime.divergence import Divergence

        data = next((e.data for e in self._light() if e.type == "diverged"), None)
        return None if data is None else Divergence.of(data, "message" if self.fork_unit == "messages" else "step")

    @property
    def change(self) -> dict[str, Any] | None:
        """What this run's fork changed, or None when it changed nothing: its edit, or for a fork from a
        sub-agent's step the edit made there (with ``agent``, the sub-agent whose run it changed)."""
        return fork_change(self.edit)

    @property
    def fork_unit(self) -> str | None:
        """What forking this run replays: ``"steps"`` (an agent-loop run), ``"messages"`` (a CORAL team),
        or None when it cannot be forked (ToolSelf, workflow agents, a team member): see :func:`fork_unit`."""
        return fork_unit(self._light())

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens of this run and its sub-runs."""
        return sum(s.prompt_tokens for s in self.steps) + sum(c.prompt_tokens for c in self.children)

    @property
    def completion_tokens(self) -> int:
        """Completion tokens of this run and its sub-runs."""
        return sum(s.completion_tokens for s in self.steps) + sum(c.completion_tokens for c in self.children)

    @property
    def cost(self) -> float:
        """Cost in USD of this run and its sub-runs."""
        return sum(s.cost for s in self.steps) + sum(c.cost for c in self.children)

    def ledger(self) -> dict[str, dict[str, dict[str, float]]]:
        """Tokens and cost summed ``{"by_agent": {...}, "by_model": {...}}`` over the run tree."""
        out: dict[str, dict[str, dict[str, float]]] = {"by_agent": {}, "by_model": {}}

        def add(t: "Trajectory") -> None:
            for key, name in (("by_agent", t.agent), ("by_model", t.model)):
                slot = out[key].setdefault(name, {"prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0, "calls": 0})
                for s in t.steps:
                    if s.replayed:
                        continue
                    slot["prompt_tokens"] += s.prompt_tokens
                    slot["completion_tokens"] += s.completion_tokens
                    slot["cost"] += s.cost
                    slot["calls"] += 1 if (s.prompt_tokens or s.completion_tokens) else 0
            for c in t.children:
                add(c)

        add(self)
        return out

    def agent_actions(self) -> dict[str, list[tuple[float, dict[str, Any]]]]:
        """Each sub-run's tool calls with their times, by agent (what a CORAL view folds under
        each agent's messages)."""
        out: dict[str, list[tuple[float, dict[str, Any]]]] = {}
        for child in self.children:
            calls: dict[str, tuple[float, dict[str, Any]]] = {}
            for e in child._light():
                if e.type == "tool_call":
                    calls[e.data["id"]] = (e.time, {"name": e.data["name"], "arguments": e.data["arguments"]})
                elif e.type == "tool_result" and e.data.get("id") in calls:
                    calls[e.data["id"]][1].update(ok=e.data.get("ok"), observation=e.data.get("observation", ""))
            out.setdefault(child.agent, []).extend(calls.values())
        return out

    def text(self, indent: str = "", ids: bool = True) -> str:
        """A readable plain-text rendering (what ``tea show`` prints; ``ids=False`` for notebooks)."""
        head = f"run {self.run_id} · " if ids else ""
        lines = [
            f"{indent}{head}{self.agent} · {display_name(self.model)} · {self.status}",
            f"{indent}task: {shorten(self.task)}",
        ]
        if self.forked_from:
            departed = self.divergence
            lines.append(f"{indent}{self.lineage()}" + (f"; {departed.first()}" if departed else ""))
            if self.fork_note:
                lines.append(f"{indent}{self.fork_note}")
        starts = {st.get("first_step"): st for st in self.stages}
        for s in self.steps:
            if s.number in starts:
                st = starts[s.number]
                lines.append(
                    f"{indent}  stage {st.get('index')}: {shorten(st.get('sub_goal', ''))} "
                    f"[toolbox: {', '.join(st.get('toolbox', []))}]"
                )
            tag = " (replayed)" if s.replayed else ""
            tag += f" ({s.note})" if s.note else ""
            if s.edited:
                tag += f" (edited: {s.edited.get('kind')})"
            gist = shorten(s.next_goal or s.thinking or s.evaluation)
            lines.append(f"{indent}  step {s.number}{tag}: {gist}".rstrip())
            for a in s.actions:
                obs = " ".join(str(a.get("observation", "")).split())[:160]
                lines.append(f"{indent}    {a['name']}({_args(a.get('arguments'))}) -> {obs}")
            for err in s.errors:
                lines.append(f"{indent}    ! {shorten(err)}")
        for m in self.messages:
            to = ", ".join(m.get("mentions") or [])
            lines.append(f"{indent}  [{m.get('thread')}] {m.get('sender')} → {to}: {shorten(m.get('content', ''))}")
        for child in self.children:
            lines.append(child.text(indent + "    ", ids))
        lines.append(f"{indent}answer: {shorten(self.answer)}")
        from tea_notebook.models.client import ESTIMATED, tokens_estimated

        note = f" ({ESTIMATED})" if tokens_estimated(self.model) else ""
        lines.append(f"{indent}tokens {self.prompt_tokens}+{self.completion_tokens}{note}, cost ${self.cost:.4f}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Trajectory({self.run_id!r}, agent={self.agent!r}, status={self.status!r}, steps={len(self.steps)})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict, dict]:
        from tea_notebook.runtime.render import mimebundle

        return mimebundle(self)

    def to_dict(self) -> dict[str, Any]:
        """The JSON payload of the trajectory MIME type."""
        from tea_notebook.runtime.render import payload

        return payload(self)


@dataclass
class _Built:
    """What a run's own events give a :class:`Trajectory` (see :func:`build_lists`)."""

    steps: list[StepView]
    memory: list[dict[str, Any]]
    stages: list[dict[str, Any]]
    threads: list[dict[str, Any]]
    messages: list[dict[str, Any]]


def build_lists(own: Iterable[tuple[str, int | None, float, dict[str, Any]]]) -> _Built:
    """A run's steps, memory writes, stages, threads and messages from ``(type, step, time, data)``
    of its own events in order (its stored model requests are not needed)."""
    steps: dict[int, StepView] = {}
    memory: list[dict[str, Any]] = []
    stages: list[dict[str, Any]] = []
    threads: dict[str, dict[str, Any]] = {}
    messages: list[dict[str, Any]] = []
    for type_, number, when, d in own:
        if type_ == "stage":
            stages.append(dict(d))
        elif type_ == "thread":
            threads.setdefault(d["id"], {}).update(d)
        elif type_ == "message":
            messages.append({**d, "time": when})
        if number is None:
            continue
        view = steps.get(number)
        if view is None:
            view = steps[number] = StepView(number)
        if type_ == "model_response":
            view.prompt_tokens += d.get("prompt_tokens", 0)
            view.completion_tokens += d.get("completion_tokens", 0)
            view.cost += d.get("cost", 0.0)
            view.latency += d.get("latency", 0.0)
        elif type_ == "tool_call":
            view.actions.append({"id": d["id"], "name": d["name"], "arguments": d["arguments"]})
        elif type_ == "tool_result":
            view.add_tool_result(when, d.get("latency"))
            for a in view.actions:
                if a["id"] == d["id"]:
                    a.update(
                        ok=d["ok"],
                        observation=d["observation"],
                        error_type=d.get("error_type"),
                        latency=d.get("latency"),
                    )
        elif type_ == "step":
            _read_step(view, d)
        elif type_ == "error":
            view.errors.append(d.get("message", ""))
        elif type_ == "egress_refused":
            view.errors.append(refusal_line(d))  # one line stands for a step's counted refusals
        elif type_ == "memory_written":
            memory.append(d)
    return _Built([steps[k] for k in sorted(steps)], memory, stages, list(threads.values()), messages)


def _read_step(view: StepView, d: dict[str, Any]) -> None:
    """Fill ``view`` from its ``step`` record (a replayed step's actions come from its results)."""
    view.read_event(d)
    view.replayed = bool(d.get("replayed"))
    view.edited = d.get("edited") or None
    view.note = d.get("note", "")
    if view.replayed or not view.actions:
        done = {a["name"] for a in view.actions}
        for tool, args, result in view.results:
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    pass
            if tool not in done and tool != "error":  # output errors are in view.errors
                view.actions.append(
                    {"name": tool, "arguments": args, "observation": result, "ok": not str(result).startswith("Error")}
                )


class _RunTree:
    """The run rows of one run tree (read at once) and their events: read in one query on first
    use, without the stored model requests, and decoded run by run when a run's lists are asked for
    (its :class:`Event` objects made only when they are asked for too)."""

    def __init__(self, workspace: "RunHost", rows: list[dict[str, Any]]):
        self.workspace = workspace
        self.rows = rows
        self._rows: dict[str, list[tuple]] | None = None
        self._decoded: dict[str, list[tuple[tuple, dict[str, Any]]]] = {}  # each row with its data
        self._events: dict[str, list[Event]] = {}
        self._lock = threading.Lock()  # a trajectory may be read from two threads (a view's, the cell's)

    def trajectory(self, row: dict[str, Any]) -> Trajectory:
        """The run of ``row``, its lists left to be built on first use."""
        traj = Trajectory(
            run_id=row["id"],
            agent=row["agent"],
            task=row["task"],
            model=row["model"],
            status=row["status"],
            answer=row["answer"] or "",
            parent_id=row["parent_id"],
            forked_from=row["forked_from"],
            fork_step=row.get("fork_step"),
            folder=str(self.workspace.path / "runs" / row["id"]),
            workspace=self.workspace,
        )
        for name in Trajectory._BUILT:
            del traj.__dict__[name]
        traj._tree = self
        return traj

    def children_of(self, run_id: str) -> list[dict[str, Any]]:
        """The rows of the runs nested directly under ``run_id``, oldest first."""
        return [r for r in self.rows if r["parent_id"] == run_id and r["id"] != run_id]

    def light(self, run_id: str) -> list[Event]:
        """``run_id``'s own events in order, without its stored model requests."""
        with self._lock:
            events = self._events.get(run_id)
            if events is None:
                events = self._events[run_id] = [
                    Event(id_, run, type_, when, data, parent_id, step, seq)
                    for (seq, id_, run, parent_id, type_, step, when, _), data in self._decode(run_id)
                ]
            return events

    def records(self, run_id: str) -> list[tuple[str, int | None, float, dict[str, Any]]]:
        """``(type, step, time, data)`` of ``run_id``'s own events in order, without its stored model
        requests (what :func:`build_lists` reads: no :class:`Event` is made)."""
        with self._lock:
            return [(row[4], row[5], row[6], data) for row, data in self._decode(run_id)]

    def _decode(self, run_id: str) -> list[tuple[tuple, dict[str, Any]]]:
        """``run_id``'s stored rows (lock held), each with its data decoded."""
        decoded = self._decoded.get(run_id)
        if decoded is None:
            if self._rows is None:
                self.workspace.events.flush()
                self._rows = {r["id"]: [] for r in self.rows}
                for raw in self.workspace.db.events_of(list(self._rows), without=("model_request",)):
                    self._rows[raw[2]].append(raw)
            rows = self._rows.pop(run_id, [])
            datas = json.loads("[" + ",".join(r[7] for r in rows) + "]")  # one parse for them all
            decoded = self._decoded[run_id] = list(zip(rows, datas))
        return decoded

    def events(self, run_id: str) -> list[Event]:
        """``run_id``'s own events in order, its stored model requests included."""
        requests = decode(self.workspace.db.events_of([run_id], only=("model_request",)))
        return list(heapq.merge(self.light(run_id), requests, key=lambda e: e.seq))


def decode(rows: list[tuple]) -> list[Event]:
    """Events from their stored rows (as :meth:`Event.from_row` makes them; one JSON parse for all)."""
    if not rows:
        return []
    datas = json.loads("[" + ",".join(r[7] for r in rows) + "]")
    return [
        Event(id_, run_id, type_, when, data, parent_id, step, seq)
        for (seq, id_, run_id, parent_id, type_, step, when, _), data in zip(rows, datas)
    ]


def fork_change(edit: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a fork changed (see :attr:`Trajectory.change`): ``edit`` (a ``run_started`` record) itself,
    the innermost edit of a fork from a sub-agent's step, or None when nothing was edited."""
    agent = None
    while edit and edit.get("kind") == "sub_agent":
        agent, edit = edit.get("agent"), edit.get("sub_edit")
    if not edit:
        return None
    return {**edit, "agent": agent} if agent else edit


def fork_point(started: dict[str, Any], fork_step: int | None) -> str:
    """Where a fork or resume starts, in words (see :attr:`Trajectory.fork_point`), from its
    ``run_started`` record and the step it was made at."""
    if started.get("resumed_from"):
        return f"after step {fork_step}" if fork_step else "from its start"
    stage = started.get("fork_stage")
    if isinstance(stage, dict) and stage.get("index") is not None:
        return f"at stage {stage['index']}"
    edit = started.get("edit") or {}
    if edit.get("kind") == "sub_agent":
        while (edit.get("sub_edit") or {}).get("kind") == "sub_agent":
            edit = edit["sub_edit"]
        return f"at {edit.get('agent')}'s step {edit.get('sub_step')}"
    if fork_step is None:
        return ""
    return f"at message {fork_step}" if started.get("fork_unit") == "messages" else f"at step {fork_step}"


def fork_unit(events: list[Event]) -> str | None:
    """What ``ws.fork`` replays of the run whose own events are ``events``: ``"steps"``, ``"messages"``,
    or None when it cannot be forked. The run says so in its ``run_started`` event; runs stored before
    it did are told apart by what their start recorded (the agent loop's ``native_tools``, CORAL's
    ``coral``) and by ToolSelf's stage events. The Fork buttons and ``ws.fork`` both ask this."""
    started = next((e.data for e in events if e.type == "run_started"), None)
    if started is None:
        return None
    if "fork_unit" in started:
        return started["fork_unit"] or None
    if started.get("coral"):
        return "messages"
    if "native_tools" in started and not any(e.type == "stage" for e in events):
        return "steps"
    return None


def _args(args: Any) -> str:
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    if isinstance(args, dict):
        return ", ".join(f"{k}={v!r}" for k, v in args.items())[:120]
    return str(args)[:120]
