"""Replay policies: how a fork, rerun or resume answers the tool calls it makes again.

A policy is given per tool, with ``"*"`` for every other one: ``recorded`` answers a call from the
ORIGINAL run's stored result for a call at the same step with the same tool and arguments (the tool
is not run), ``live`` runs the tool again, ``refuse`` does not run it. It governs every call the new
run makes that is not copied from the store: the steps a ``rerun_from`` takes again and every step
after the fork point. The loop's own controls (``done``, ``todo``; ToolSelf's ``reconfigure`` and
``finish``) are never governed: they act only on the run itself (its ending, its todo.md, its stage).
Nor is a team's machinery (:attr:`ReplayPolicy.machinery`: CORAL's message tools), which acts only on
the new run's own conversation: answering ``send_message`` from the recording would post nothing, so
the member it was for would never read it and the fork would depart from the original at once.

:meth:`ReplayPolicy.of` reads what a person wrote (``"recorded"``, ``"work=recorded,*=live"`` or a
dict); :class:`Recording` holds the original's calls of the steps the new run takes again and answers
them in order, noting the step where the replay first departed from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterable, cast, get_args

from tea_notebook.runtime.action_tally import FAILED_CALL, NOT_RUN
from tea_notebook.runtime.event_types import ReplayChoice
from tea_notebook.runtime.forking import RERUN_NOTE, ForkError, ForkPlan, stored_steps

if TYPE_CHECKING:
    from tea_notebook.runtime.events import Event

Policy = ReplayChoice
"""What a replay does with one tool's calls."""
POLICIES: tuple[Policy, ...] = get_args(ReplayChoice)
#: the tools the agent loop handles itself: a policy may name them, but they always run (see the module)
CONTROLS = frozenset({"done", "todo"})


def _policy(value: Any, where: str) -> Policy:
    if value not in POLICIES:
        raise ForkError(f"{where}: a replay policy is recorded, live or refuse, not {value!r}")
    return cast(Policy, value)


@dataclass(frozen=True)
class ReplayPolicy:
    """A policy per tool (``tools``) and for every other tool (``default``); the tools of the run's
    own ``machinery`` always run (see the module)."""

    tools: dict[str, Policy] = field(default_factory=dict)
    default: Policy = "live"
    machinery: frozenset[str] = frozenset()

    @classmethod
    def of(cls, value: Any) -> "ReplayPolicy | None":
        """The policy ``value`` says: None (none given), ``"recorded"``/``"live"``/``"refuse"`` (every
        tool), the text form ``"place_order=refuse,*=recorded"``, or a dict ``{tool: policy, "*": policy}``.
        :class:`ForkError` naming what is wrong otherwise."""
        if value is None or isinstance(value, ReplayPolicy):
            return value
        if isinstance(value, str):
            text = value.strip()
            if "=" not in text:
                return cls({}, _policy(text, "replay"))
            pairs: dict[str, Any] = {}
            for part in text.split(","):
                name, sep, policy = (p.strip() for p in part.partition("="))
                if not sep or not name:
                    raise ForkError(
                        f"replay {value!r}: each part is TOOL=POLICY (or *=POLICY), as in 'work=recorded,*=live'; "
                        f"not {part.strip()!r}"
                    )
                if name in pairs:
                    raise ForkError(f"replay {value!r} names {name!r} twice")
                pairs[name] = policy
            value = pairs
        if not isinstance(value, dict):
            raise ForkError(
                "replay is 'recorded', 'live' or 'refuse', a text such as 'work=recorded,*=live', or a dict "
                f"{{tool: policy, '*': policy}}; not {type(value).__name__}"
            )
        tools: dict[str, Policy] = {}
        for name, policy in value.items():
            if not isinstance(name, str) or not name.strip():
                raise ForkError(f"replay: a tool name is non-empty text, not {name!r}")
            tools[name] = _policy(policy, f"replay[{name!r}]")
        default = tools.pop("*", "live")
        return cls(tools, default)

    def running(self, names: Iterable[str]) -> "ReplayPolicy":
        """This policy with the tools ``names`` always run: the machinery of the runs it governs (a
        CORAL team's message tools), whatever the policy says of them."""
        return replace(self, machinery=self.machinery | frozenset(names))

    def for_tool(self, name: str) -> Policy:
        """The policy of calls of ``name``."""
        return self.tools.get(name, self.default)

    def text(self) -> str:
        """The policy as ``%tea fork --replay`` takes it: ``recorded`` or ``work=recorded,*=live``."""
        return (
            ",".join([*(f"{n}={p}" for n, p in self.tools.items()), f"*={self.default}"])
            if self.tools
            else self.default
        )

    def as_dict(self) -> dict[str, Policy]:
        """The normalised policy: ``{tool: policy, ..., "*": policy}`` (what ``run_started`` records)."""
        return {**self.tools, "*": self.default}

    @property
    def needs_recording(self) -> bool:
        """Whether some tool is answered from the original run's recording."""
        return "recorded" in (self.default, *self.tools.values())

    def check_names(self, known: Iterable[str], controls: Iterable[str] = CONTROLS) -> None:
        """ForkError naming each tool of the policy that is neither in ``known`` (the registered tools
        and the agents' sub-agent tools) nor one of the ``controls`` of the runs forked (the agent
        loop's ``done`` and ``todo`` by default; they may be named, and always run)."""
        shown = sorted(set(controls))
        allowed = set(known) | set(shown)
        unknown = sorted(n for n in self.tools if n not in allowed)
        if unknown:
            raise ForkError(
                f"replay names {', '.join(map(repr, unknown))}: no such tool is registered, nor is it a control "
                f"({', '.join(shown)}) or a sub-agent of the agent forked; '*' stands for every other tool"
            )


def _canonical(arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)


@dataclass
class RecordedCall:
    """One call of the original run: its tool and arguments, what it returned (None: it never did)."""

    name: str
    arguments: str
    observation: str | None
    ok: bool = True
    error_type: str | None = None
    used: bool = False
    id: str = ""


@dataclass
class Recording:
    """The calls of the original run ``source`` from the step after ``after`` on, by step, answered in
    order (the first unused call of a step with the same tool and arguments); ``departed`` is the first
    step at which the new run made a call the original did not make."""

    source: str
    after: int
    steps: dict[int, list[RecordedCall]] = field(default_factory=dict)
    departed: int | None = None

    @classmethod
    def of_events(cls, events: list["Event"], run_id: str, after: int) -> "Recording":
        """The recording of run ``run_id``'s steps after step ``after`` from its own ``events``
        (with the tool calls and results of those steps)."""
        outcome: dict[str, tuple[bool, str | None]] = {}
        for e in events:
            if e.run_id == run_id and e.type == "tool_result" and e.data.get("error_type") != "Interrupted":
                outcome[e.data["id"]] = (bool(e.data.get("ok")), e.data.get("error_type"))
        out = cls(run_id, after)
        for number, step in sorted(stored_steps(events, run_id).items()):
            if number <= after:
                continue
            calls = []
            for c in step.calls:
                observation = step.results.get(c.id)
                ok, error = outcome.get(c.id) or _judged(observation)
                calls.append(RecordedCall(c.name, _canonical(c.arguments), observation, ok, error, id=c.id))
            out.steps[number] = calls
        return out

    def settle(self, step: int, call_ids: Iterable[str]) -> None:
        """Mark the calls ``call_ids`` of ``step`` used: the new run takes their stored results as they
        are (a step taken up again), so a later call with the same tool and arguments is answered by
        the original's next such call, not by theirs."""
        ids = set(call_ids)
        for recorded in self.steps.get(step, []):
            if recorded.id in ids:
                recorded.used = True

    def take(self, step: int, name: str, arguments: Any) -> RecordedCall | None:
        """The original's first unused call of ``name`` with ``arguments`` at ``step``, now used; None
        when it made none (the replay departed there, unless it had already)."""
        wanted = _canonical(arguments)
        for recorded in self.steps.get(step, []):
            if not recorded.used and recorded.name == name and recorded.arguments == wanted:
                recorded.used = True
                return recorded
        if self.departed is None or step < self.departed:
            self.departed = step
        return None

    def not_recorded(self, step: int, name: str, recorded: RecordedCall | None) -> str:
        """The observation of a call of ``name`` at ``step`` the recording cannot answer."""
        head = f"Error: {name} was not run: the replay policy answers it from run {self.source}'s recording"
        if recorded is not None:
            return f"{head}, where this call (step {step}) never returned"
        last = max(self.steps, default=self.after)
        if step > last:
            return f"{head}, which ends at step {last}: it has no step {step}"
        return (
            f"{head}, which has no call of {name} with these arguments at step {step}: the replay departed "
            f"from the recording at step {self.departed}"
        )


def _judged(observation: str | None) -> tuple[bool, str | None]:
    """Whether a stored observation is a failure, and its error type, from its words (a step kept
    without its call events: a replayed step of the original)."""
    failed = FAILED_CALL.match(observation or "")
    return (failed is None, failed["type"] if failed else None)


def refused(name: str) -> str:
    """The observation of a call the policy refuses."""
    return f"Error: {name} was not run: the replay policy refuses it"


def govern(plan: ForkPlan, policy: ReplayPolicy | None, events: list["Event"]) -> ForkPlan:
    """``plan`` with ``policy``, and (when the policy answers some tool from the recording) the forked
    run's calls after the plan's last replayed step, read from ``events`` (its own, with those steps'
    tool calls and results)."""
    plan.replay = policy
    if policy is None:
        return plan
    if policy.needs_recording and plan.source is not None:
        plan.recording = Recording.of_events(events, plan.source, plan.last_step)
    for number, override in plan.overrides.items():  # the steps a rerun takes again say how their tools answered
        if override.note == RERUN_NOTE and policy.text() != "live":
            override.note = f"re-executed, replay {policy.text()}"
        if plan.recording is not None:
            plan.recording.settle(number, override.stored)
    return plan


def fresh_start(policy: ReplayPolicy, events: list["Event"], source: str) -> ForkPlan:
    """A plan that replays no step and answers the new run's calls by ``policy``, from run ``source``'s
    recording (its own ``events``) where it says so: a CORAL member starting afresh in a fork of its
    team at message 0 (it is no fork of its original run, which it reproduces from the start)."""
    plan = ForkPlan(replay=policy)
    if policy.needs_recording:
        plan.recording = Recording.of_events(events, source, 0)
    return plan


@dataclass
class Answer:
    """How the policy answers one call: ``observation`` None runs the tool (``live``); otherwise the
    call is not run and this is its observation (from the recording, or why it was not run)."""

    policy: Policy
    observation: str | None = None
    ok: bool = False
    error_type: str | None = None

    @property
    def from_recording(self) -> bool:
        """Whether the answer is the original run's stored result."""
        return self.policy == "recorded" and self.error_type not in NOT_RUN


def answer(plan: ForkPlan, step: int, name: str, arguments: Any, *, continued: bool = False) -> Answer | None:
    """What the agent loop asks before running a call of ``name`` with ``arguments`` at ``step`` of a
    run started from ``plan`` (a call not copied from the store): None when no policy applies (none was
    given, a control or the run's machinery, a call that ``continued`` a sub-agent's fork), else the
    :class:`Answer`."""
    policy = plan.replay
    if policy is None or name in CONTROLS or name in policy.machinery or continued:
        return None
    chosen = policy.for_tool(name)
    recording = plan.recording
    recorded = recording.take(step, name, arguments) if recording is not None else None
    if chosen == "live":
        return Answer("live")
    if chosen == "refuse":
        return Answer("refuse", refused(name), False, "Refused")
    if recording is None:  # a plan without a source: nothing was recorded to answer from
        return Answer(
            "recorded", f"Error: {name} was not run: the replay policy finds no recording", False, "NotRecorded"
        )
    if recorded is None or recorded.observation is None:
        return Answer("recorded", recording.not_recorded(step, name, recorded), False, "NotRecorded")
    return Answer("recorded", recorded.observation, recorded.ok, recorded.error_type)


__all__ = [
    "CONTROLS",
    "POLICIES",
    "Answer",
    "Policy",
    "RecordedCall",
    "Recording",
    "ReplayPolicy",
    "answer",
    "fresh_start",
    "govern",
    "refused",
]
