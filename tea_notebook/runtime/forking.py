"""Forks of agent-loop runs: replay a stored run up to a step, with an edit, then go on live.

:func:`plan_fork` reads a run's events and returns a :class:`ForkPlan`: the steps the new run
replays (as stored, the edited one changed), the memory folds of those steps as they were, and the
steps it runs again without asking the model (actions edited by a person, steps re-executed live,
the step a stopped run was in). Everything is checked before anything is written: a step that does
not exist, an edit that does not fit the step, a run still running are :class:`ForkError`.

Edits (:class:`Edit`, or a dict): ``{"observation": text, "action": i}`` replaces what action ``i``
(1-based) of the step returned; ``{"actions": [{"name": ..., "arguments": {...}}]}`` replaces what
the model chose at the step (run live); ``{"context": messages}`` replaces the prompt the model gets
at the step; ``{"message": text}`` replaces a CORAL message; ``{"stage": {...}}`` a ToolSelf stage's
configuration.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tea_notebook.errors import TeaError
from tea_notebook.models.client import ToolCall
from tea_notebook.runtime.replies import planned_calls, thoughts_in
from tea_notebook.runtime.steps import StepRecord

if TYPE_CHECKING:
    from tea_notebook.runtime.events import Event
    from tea_notebook.runtime.folder_snapshots import FolderStart
    from tea_notebook.runtime.replay_policy import Recording, ReplayPolicy

EDIT_KINDS = ("observation", "actions", "context", "message", "stage")
#: actions an agent loop takes only alone in their step (the loop refuses them beside others)
ALONE_ACTIONS = ("done",)
#: characters of an edited text's former value kept in the fork's record of the edit
EDIT_RECORD_LIMIT = 2000
#: the note of a step ``rerun_from`` takes again (its tools run live unless a replay policy says otherwise)
RERUN_NOTE = "re-executed live"


class ForkError(TeaError):
    """A fork or resume that cannot be made as asked (nothing was written)."""


@dataclass
class Edit:
    """What a fork changes at its step: ``kind`` is one of :data:`EDIT_KINDS`; ``value`` the new
    observation text, action list, messages, CORAL message text or stage configuration; ``action``
    which action's observation (1-based)."""

    kind: str
    value: Any
    action: int = 1

    @classmethod
    def of(cls, edit: Any) -> "Edit | None":
        """An :class:`Edit` from an Edit, a dict such as ``{"observation": "...", "action": 2}``, or None."""
        if edit is None or isinstance(edit, Edit):
            return edit
        from tea_notebook.runtime.contexts import StepContext

        if isinstance(edit, StepContext):
            return cls("context", edit)
        if not isinstance(edit, dict):
            raise ForkError(f"an edit is a dict such as {{'observation': 'new text'}}, not {type(edit).__name__}")
        kinds = [k for k in EDIT_KINDS if k in edit]
        unknown = sorted(set(edit) - set(EDIT_KINDS) - {"action"})
        if len(kinds) != 1 or unknown:
            what = f"unknown keys {', '.join(map(repr, unknown))}; " if unknown else ""
            raise ForkError(f"{what}an edit names exactly one of {', '.join(EDIT_KINDS)} (got {sorted(edit)})")
        action = edit.get("action", 1)
        if isinstance(action, bool) or not isinstance(action, int) or action < 1:
            raise ForkError(
                f"'action' is the number of the action whose observation is edited (1 or more), not {action!r}"
            )
        return cls(kinds[0], edit[kinds[0]], action)


@dataclass
class StoredStep:
    """A step of a stored run: its record as the history shows it, and its calls with their ids."""

    record: StepRecord
    calls: list[ToolCall]
    results: dict[str, str]
    content: str | None = None
    complete: bool = True
    #: ids of the calls that were started (their recorded arguments are the ones the tool got)
    started: set[str] = field(default_factory=set)


@dataclass
class StepOverride:
    """A step the new run takes without asking the model: ``calls`` in order (with ``thoughts``);
    calls whose id is in ``stored`` are not run (their stored observation is used), the others run
    live; ``subforks`` maps an agent name to fork plans its delegated calls continue instead of
    starting afresh. Or, when ``messages`` is set, the model is asked with these messages."""

    calls: list[ToolCall] | None = None
    thoughts: dict[str, str] = field(default_factory=dict)
    stored: dict[str, str] = field(default_factory=dict)
    verbatim: set[str] = field(default_factory=set)
    subforks: dict[str, list["ForkPlan"]] = field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None
    note: str = ""
    #: ids of the calls that continue a sub-agent's fork (they run it: no replay policy answers them)
    continued: set[str] = field(default_factory=set)


@dataclass
class ForkPlan:
    """How a new agent-loop run starts from a stored one (see the module's docstring)."""

    source: str | None = None
    step: int = 0
    #: the steps replayed, each with what its ``step`` event adds (``{"edited": ...}`` at an edited one)
    shown: list[tuple[StepRecord, dict[str, Any]]] = field(default_factory=list)
    live: list[StepRecord] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    insights: list[str] = field(default_factory=list)
    #: the insights the source run recalled from memory at its start (in :attr:`insights` already): a
    #: fork or resume takes them from its source instead of recalling again (the memory has grown since)
    recalled: list[str] = field(default_factory=list)
    folded: list[int] = field(default_factory=list)
    overrides: dict[int, StepOverride] = field(default_factory=dict)
    edit: dict[str, Any] | None = None
    rerun_from: int | None = None
    resumed: bool = False
    stage: dict[str, Any] | None = None
    #: the model and step limit of the run forked (a sub-agent's fork keeps its own)
    model: str | None = None
    max_steps: int | None = None
    #: how the calls the new run makes again are answered (None: they run live)
    replay: "ReplayPolicy | None" = None
    #: the forked run's calls after :attr:`last_step`, when the policy answers some from them
    recording: "Recording | None" = None
    #: a resume's run folder (as the stop left it, or as it is when forced); None: the source's at the step
    folder: "FolderStart | None" = None
    #: what the new run's view says of its start besides the fork point (a notebook's cells are not rewound)
    fork_note: str = ""

    @classmethod
    def of_steps(cls, steps: list[StepRecord]) -> "ForkPlan":
        """A plan that replays ``steps`` as they are (no memory folds, no edit)."""
        return cls(shown=[(s, {}) for s in steps], live=list(steps), step=len(steps))

    @property
    def last_step(self) -> int:
        """The last step replayed."""
        return self.shown[-1][0].number if self.shown else 0

    def started(self) -> dict[str, Any]:
        """What the new run's ``run_started`` event records of its fork."""
        out: dict[str, Any] = {}
        if self.edit:
            out["edit"] = self.edit
        if self.rerun_from is not None:
            out["rerun_from"] = self.rerun_from
        if self.resumed:
            out["resumed_from"] = self.source
        if self.summaries or self.folded:
            out["memory"] = {"summaries": self.summaries, "insights": self.insights, "folded": self.folded}
        if self.recalled:
            out["recalled"] = self.recalled
        if self.stage is not None:
            out["fork_stage"] = {k: v for k, v in self.stage.items() if k != "pool"}
        if self.replay is not None:
            out["replay"] = self.replay.as_dict()
        if self.folder is not None:
            out.update(self.folder.started())
        if self.fork_note:
            out["fork_note"] = self.fork_note
        return out


# -- reading a stored run -------------------------------------------------------------------------
def stored_steps(events: list["Event"], run_id: str) -> dict[int, StoredStep]:
    """Every step of a run from its own events: finished steps, and the one it was in when it stopped
    (``complete=False``: the model's reply and the calls that returned, if they were recorded)."""
    calls: dict[int, list[ToolCall]] = {}
    planned: dict[int, list[ToolCall]] = {}
    results: dict[int, dict[str, str]] = {}
    content: dict[int, str | None] = {}
    out: dict[int, StoredStep] = {}
    for e in events:
        if e.run_id != run_id or e.step is None:
            continue
        d = e.data
        if e.type == "model_response" and not d.get("stage"):
            content[e.step] = d.get("content")
            calls[e.step] = []
            results[e.step] = {}
            planned[e.step] = planned_calls(d)
        elif e.type == "tool_call":
            calls.setdefault(e.step, []).append(ToolCall(d["id"], d["name"], d.get("arguments")))
        elif e.type == "tool_result":
            if d.get("error_type") != "Interrupted":
                results.setdefault(e.step, {})[d["id"]] = d.get("observation", "")
            elif "returned" in d:  # stopped while it ran, but it ended on its own: it did return
                results.setdefault(e.step, {})[d["id"]] = d["returned"]
        elif e.type == "step":
            record = StepRecord.from_event(e.step, d)
            own = calls.get(e.step) or []
            if not own or d.get("replayed"):  # a replayed step has no call events: rebuilt from its results
                own = [ToolCall(f"r{e.step}_{i}", r[0], _loads(r[1])) for i, r in enumerate(record.results)]
            out[e.step] = StoredStep(record, own, {**results.get(e.step, {})}, content.get(e.step))
            if d.get("replayed") or not results.get(e.step):
                out[e.step].results = {c.id: r[2] for c, r in zip(own, record.results)}
    for step, made in calls.items():
        if step in out or not (made or step in content):
            continue
        # the calls the model chose (the reply is kept before any tool starts), with the arguments
        # of those that started as they were recorded (a sub-agent's task as delegated)
        started = {c.id: c for c in made}
        chosen = [started.get(c.id, c) for c in planned.get(step, [])]
        chosen += [c for c in made if c.id not in {p.id for p in chosen}]
        out[step] = StoredStep(
            StepRecord(step), chosen, results.get(step, {}), content.get(step), complete=False, started=set(started)
        )
    return out


def _loads(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _restore_memory(
    events: list["Event"], run_id: str, upto: int, first_edit: int | None
) -> tuple[list[str], list[str], list[int]]:
    """The summaries, insights and folded steps of a run as they were after step ``upto``, leaving out
    every fold from the first one that folded the edited step (``first_edit``) or a later one: a
    summary written from an observation that the fork changes would leak it."""
    limit = first_edit if first_edit is not None else upto + 1
    started = next((e.data for e in events if e.run_id == run_id and e.type == "run_started"), {})
    restored = started.get("memory") or {}
    recalled = list(started.get("recalled") or [])
    folded = [int(s) for s in restored.get("folded", [])]
    if folded and max(folded) >= limit:
        return [], recalled, []
    summaries = list(restored.get("summaries", []))
    # the run's insights began as what it recalled from memory (a fork's memory holds them already)
    insights = list(restored.get("insights", [])) if restored else recalled
    for e in events:
        if e.run_id != run_id or e.type != "memory_written" or e.step is None or e.step > upto:
            continue
        d = e.data
        steps = [int(s) for s in d.get("folded_steps") or []]
        if d.get("merged"):
            summaries = [d.get("summary", "")]
            continue
        if any(s >= limit for s in steps) or e.step >= limit:
            break
        summaries.append(d.get("summary", ""))
        insights = [i for i in insights if i not in d.get("insights", [])] + list(d.get("insights", []))
        folded.extend(steps)
    return summaries, insights[-8:], folded


def recalled_at_start(events: list["Event"], run_id: str) -> list[str]:
    """The insights run ``run_id`` recalled from memory at its start (``run_started.recalled``: a
    fork's or resume's are its source's); none for a run recorded before they were kept."""
    started = next((e.data for e in events if e.run_id == run_id and e.type == "run_started"), {})
    return list(started.get("recalled") or [])


# -- making a plan --------------------------------------------------------------------------------
def plan_fork(
    events: list["Event"],
    run_id: str,
    step: int,
    edit: Edit | None,
    *,
    rerun_from: int | None = None,
    check_action: Any = None,
    steps: dict[int, StoredStep] | None = None,
) -> ForkPlan:
    """The plan of a fork of an agent-loop run at ``step`` (see the module's docstring).
    ``check_action(name, arguments)`` returns what is wrong with an edited action, or None; ``steps``:
    :func:`stored_steps` of ``events`` when the caller has them already."""
    steps = stored_steps(events, run_id) if steps is None else steps
    finished = sorted(s for s, v in steps.items() if v.complete)
    last = finished[-1] if finished else 0
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ForkError(f"step must be a whole number of 0 or more, not {step!r}")
    replay_to = step
    overrides: dict[int, StepOverride] = {}
    record_edit: dict[str, Any] | None = None
    first_edit: int | None = None
    if edit is not None and edit.kind in ("actions", "context"):
        if step < 1 or step > last + 1:
            raise ForkError(f"run {run_id} has steps 1 to {last}; cannot edit step {step}")
        replay_to = step - 1
        first_edit = step
        if edit.kind == "actions":
            calls = _edited_actions(edit.value, step, check_action)
            overrides[step] = StepOverride(calls=calls, note="actions edited")
            record_edit = {
                "kind": "actions",
                "step": step,
                "actions": [{"name": c.name, "arguments": c.arguments} for c in calls],
            }
            if step in steps:
                record_edit["before"] = [{"name": c.name, "arguments": c.arguments} for c in steps[step].calls]
        else:
            messages = _edited_context(edit.value, step)
            overrides[step] = StepOverride(messages=messages, note="context edited")
            record_edit = {"kind": "context", "step": step, "chars": sum(len(json.dumps(m)) for m in messages)}
    elif step > last:
        raise ForkError(f"run {run_id} has only {last} steps finished; cannot fork from step {step}")
    shown: list[tuple[StepRecord, dict[str, Any]]] = []
    for n in range(1, replay_to + 1):
        if n not in steps or not steps[n].complete:
            raise ForkError(f"run {run_id} has no stored step {n}; cannot replay it")
        shown.append((steps[n].record, {}))
    if edit is not None and edit.kind == "observation":
        if step < 1:
            raise ForkError("an observation edit needs the step whose observation changes (1 or more)")
        record = steps[step].record
        if not record.results:
            raise ForkError(f"step {step} of run {run_id} has no action whose observation could be edited")
        if edit.action > len(record.results):
            raise ForkError(
                f"step {step} of run {run_id} has {len(record.results)} action(s); there is no action {edit.action}"
            )
        if not isinstance(edit.value, str):
            raise ForkError(f"the edited observation must be text, not {type(edit.value).__name__}")
        tool, args, before = record.results[edit.action - 1]
        results = list(record.results)
        results[edit.action - 1] = (tool, args, edit.value)
        changed = replace(record, results=results)
        record_edit = {
            "kind": "observation",
            "step": step,
            "action": edit.action,
            "tool": tool,
            "before": str(before)[:EDIT_RECORD_LIMIT],
            "after": edit.value[:EDIT_RECORD_LIMIT],
        }
        shown[-1] = (changed, {"edited": record_edit})
        first_edit = step
    elif edit is not None and edit.kind not in ("actions", "context"):
        raise ForkError(
            f"a {edit.kind} edit does not apply to an agent loop's steps (use observation, actions or context)"
        )
    if rerun_from is not None:
        if isinstance(rerun_from, bool) or not isinstance(rerun_from, int) or not 1 <= rerun_from <= replay_to:
            raise ForkError(f"rerun_from must be a step from 1 to {replay_to} (the steps replayed), not {rerun_from!r}")
        for n in range(rerun_from, replay_to + 1):
            stored = steps[n]
            if edit is not None and edit.kind == "observation" and n == step:
                raise ForkError(
                    "an edited observation cannot be re-executed: rerun_from must come after the edited step"
                )
            overrides[n] = StepOverride(
                calls=list(stored.calls),
                thoughts=stored.record.thoughts(),
                verbatim={c.id for c in stored.calls},
                note=RERUN_NOTE,
            )
        shown = shown[: rerun_from - 1]
        first_edit = rerun_from if first_edit is None else min(first_edit, rerun_from)
    upto = shown[-1][0].number if shown else 0
    summaries, insights, folded = _restore_memory(events, run_id, upto, first_edit)
    live = [r for r, _ in shown if r.number not in set(folded)]
    return ForkPlan(
        source=run_id,
        step=step,
        shown=shown,
        live=live,
        summaries=summaries,
        insights=insights,
        recalled=recalled_at_start(events, run_id),
        folded=folded,
        overrides=overrides,
        edit=record_edit,
        rerun_from=rerun_from,
    )


def plan_resume(events: list["Event"], run_id: str, steps: dict[int, StoredStep] | None = None) -> ForkPlan:
    """The plan that continues a stopped run: its finished steps replayed, and the step it was in
    taken up again without asking the model again and without running again the calls that returned
    (``steps``: :func:`stored_steps` of ``events`` when the caller has them already)."""
    steps = stored_steps(events, run_id) if steps is None else steps
    finished = sorted(s for s, v in steps.items() if v.complete)
    last = finished[-1] if finished else 0
    plan = plan_fork(events, run_id, last, None, steps=steps)
    plan.resumed = True
    partial = steps.get(last + 1)
    if partial is not None and not partial.complete and partial.calls:
        thoughts = thoughts_in(partial.content) if partial.content else {}
        plan.overrides[last + 1] = StepOverride(
            calls=list(partial.calls),
            thoughts=thoughts,
            stored=dict(partial.results),
            verbatim=set(partial.started),
            note=f"taken up again: {len(partial.results)} of {len(partial.calls)} call(s) had returned",
        )
    return plan


# -- CORAL: where a fork may start -----------------------------------------------------------
#: what ``send_message`` returns when it posted message number N
_SENT = re.compile(r"^Sent message #(\d+) ")


def turn_ends(events: Iterable["Event"]) -> dict[int, tuple[list[int], int]]:
    """The messages of a CORAL run sent in the middle of their sender's turn (one step of a member
    that sent more messages after it): message number -> (the numbers of the messages that turn sent,
    in order; the sender's step). ``events`` are the team run's with its members' runs (nested). A
    fork at such a message would start that member again with half of its turn sent: the rest is
    never sent again (the member's model sees the messages, not its unfinished step)."""
    turns: dict[tuple[str, int], list[int]] = {}
    for e in events:
        if e.type != "tool_result" or e.step is None or e.data.get("name") != "send_message":
            continue
        sent = _SENT.match(str(e.data.get("observation", "")))
        if sent:
            turns.setdefault((e.run_id, e.step), []).append(int(sent.group(1)))
    out: dict[int, tuple[list[int], int]] = {}
    for (_, step), numbers in turns.items():
        numbers.sort()
        out.update({n: (numbers, step) for n in numbers[:-1]})
    return out


def refuse_split_turn(events: list["Event"], run_id: str, step: int) -> None:
    """Raise :class:`ForkError` when message ``step`` of the CORAL run ``run_id`` is inside one
    member's turn (see :func:`turn_ends`), naming the message that ends that turn. Nothing is written."""
    inside = turn_ends(events).get(step)
    if inside is None:
        return
    numbers, at = inside
    later = [n for n in numbers if n > step]
    sender = next(
        (
            e.data.get("sender")
            for e in events
            if e.run_id == run_id and e.type == "message" and e.data.get("seq") == step
        ),
        "its sender",
    )
    raise ForkError(
        f"message {step} of run {run_id} is not the end of {sender}'s turn: the same step ({at}) also sent "
        f"message{'s' if len(later) > 1 else ''} {', '.join(map(str, later))}, which a fork at message {step} "
        f"would never send again; fork at message {numbers[-1]} (the end of that turn) or at message "
        f"{numbers[0] - 1} (before it began)"
    )


def _edited_actions(value: Any, step: int, check: Any) -> list[ToolCall]:
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ForkError("edited actions are a non-empty list of {'name': tool, 'arguments': {...}}")
    calls = []
    for i, item in enumerate(value, 1):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ForkError(f"edited action {i} must be a dict with a tool 'name' and 'arguments', not {item!r:.200}")
        args = item.get("arguments", item.get("args", {}))
        if check is not None:
            problem = check(item["name"], args)
            if problem:
                raise ForkError(f"edited action {i} ({item['name']}): {problem}")
        calls.append(ToolCall(f"edit{step}_{i}", item["name"], args))
    alone = [c.name for c in calls if c.name in ALONE_ACTIONS]
    if alone and len(calls) > 1:
        others = ", ".join(c.name for c in calls if c.name not in ALONE_ACTIONS) or alone[0]
        raise ForkError(
            f"edited actions: {alone[0]!r} must be the only action of its step, not beside {others}; "
            f"edit the step to [{alone[0]}(...)] alone, or leave {alone[0]} out"
        )
    return calls


def _edited_context(value: Any, step: int) -> list[dict[str, Any]]:
    from tea_notebook.runtime.contexts import ContextClipped, StepContext

    if isinstance(value, StepContext):
        if value.clipped:
            raise ContextClipped(
                f"the stored context of step {value.step} of run {value.run_id} was clipped (an image too large "
                "to keep): it is not what the model received, so it cannot be sent again; pass messages instead"
            )
        value = value.messages
    if not isinstance(value, list) or not value:
        raise ForkError("an edited context is a non-empty list of messages ({'role': ..., 'content': ...})")
    for i, m in enumerate(value, 1):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise ForkError(
                f"message {i} of the edited context needs a role (system, user, assistant or tool): {m!r:.200}"
            )
        if not isinstance(m.get("content"), (str, list)):
            raise ForkError(f"message {i} of the edited context needs a 'content' (text or a list of parts)")
    return [dict(m) for m in value]
