"""``ws.fork`` and ``ws.resume``: new runs that start from a stored one.

An agent loop's run is forked at a step (:mod:`tea_notebook.runtime.forking` makes the plan); a
sub-agent's run is forked by forking its parent at the step that called it, the call continuing
with the sub-agent's fork (and so on up to the run a person started); a CORAL team's run at a
message; a ToolSelf run at a stage. Every check happens before the new run is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tea_notebook.models.client import ToolCall
from tea_notebook.runtime.agent import Agent
from tea_notebook.runtime.forking import (
    Edit,
    ForkError,
    ForkPlan,
    StepOverride,
    StoredStep,
    plan_fork,
    plan_resume,
    stored_steps,
)
from tea_notebook.runtime.replay_policy import CONTROLS, ReplayPolicy, govern

if TYPE_CHECKING:
    from tea_notebook.protocol.context import Context
    from tea_notebook.runtime.events import Event
    from tea_notebook.runtime.host import RunHost
    from tea_notebook.runtime.records import RunResult


def _row(ws: "RunHost", run_id: str) -> dict[str, Any]:
    row = ws.db.run_row(run_id)
    if row is None:
        raise ForkError(f"no run {run_id!r} in {ws.path}")
    if row["status"] == "running":
        raise ForkError(
            f"run {row['id']} is still running: wait for it to end (or stop it) before forking or resuming it"
        )
    return row


def notebook_note(ws: "RunHost", run_id: str) -> str:
    """What a fork or resume of ``run_id`` says of the notebook when that run made cell actions (the
    ``notebook`` environment's proposals): its cells are not rewound; "" for a run that made none."""
    if not ws.db.run_events_of_type([run_id], ["cell_proposed"]):
        return ""
    return (
        f"the notebook's cells are not rewound: the cells run {run_id} proposed and ran stay as they are, and a "
        "live replay proposes its cells again as new cells (replay='recorded' answers them from the recording)"
    )


def _tool_name(agent: str) -> str:
    return agent if agent.endswith("agent") else f"{agent}_agent"


def action_checker(ws: "RunHost", runner: Any) -> Any:
    """``check(name, arguments)``: what is wrong with an edited action for ``runner`` (an agent), or None."""
    from tea_notebook.protocol.schema import arguments_problem
    from tea_notebook.runtime.loop import TODO_SCHEMA
    from tea_notebook.runtime.prompts import DONE_SCHEMA

    controls = {"done": DONE_SCHEMA}
    if getattr(runner, "todo", False):
        controls["todo"] = TODO_SCHEMA
    subs = {_tool_name(s) for s in getattr(runner, "sub_agents", []) or []}
    named = getattr(runner, "tools", None)

    def check(name: str, args: Any) -> str | None:
        if name in controls:
            return arguments_problem(controls[name], args)
        allowed = (set(named) | subs) if named is not None else None
        if (allowed is not None and name not in allowed) or name not in ws.tools:
            offered = sorted((allowed or set()) | set(controls)) if allowed is not None else None
            listing = f"; it has: {', '.join(offered)}" if offered else " (no such tool is registered)"
            return f"agent {runner.name!r} has no tool {name!r}{listing}"
        return arguments_problem(ws.tools.get(name).parameters or {"type": "object"}, args)

    return check


def check_policy(
    ws: "RunHost",
    policy: ReplayPolicy | None,
    runners: list[Any],
    agents: list[str],
    controls: frozenset[str] = CONTROLS,
) -> None:
    """ForkError naming each tool of ``policy`` that is not registered, nor one of the ``controls``,
    nor a sub-agent tool of ``runners`` or the agent of one of the runs in ``agents`` (a nested fork's chain)."""
    if policy is None:
        return
    subs = {_tool_name(s) for r in runners for s in getattr(r, "sub_agents", []) or []}
    known = {n for n in policy.tools if n in ws.tools} | subs | {_tool_name(a) for a in agents}
    policy.check_names(known, controls)


async def fork_run(
    ws: "RunHost",
    run_id: str,
    step: int | None = None,
    *,
    edit: Any = None,
    stage: int | None = None,
    rerun_from: int | None = None,
    model: str | None = None,
    agent: Any = None,
    task: str | None = None,
    context: "Context | None" = None,
    raise_on_error: bool = True,
    replay: Any = None,
) -> "RunResult":
    """See :meth:`tea_notebook.workspace.Workspace.fork`."""
    from tea_notebook.runtime.events import Event
    from tea_notebook.runtime.trajectory import fork_unit

    row = _row(ws, run_id)
    change = Edit.of(edit)
    policy = ReplayPolicy.of(replay)
    if stage is None and not row["parent_id"] and isinstance(step, int) and not isinstance(step, bool):
        # a long run's fork reads only what it replays (its step events) and the steps it takes again
        ws.events.flush()
        again = min(step, rerun_from) if isinstance(rerun_from, int) and not isinstance(rerun_from, bool) else step
        events = [Event.from_row(r) for r in ws.db.fork_events(row["id"], again)]
    else:
        events = ws.events.events(row["id"], nested=False)
    unit = fork_unit(events)
    if stage is not None:
        if unit != "stages":
            raise ForkError(f"run {row['id']} ({row['agent']}) has no stages: fork it by step")
        return await _fork_stage(ws, row, events, stage, change, model, agent, task, context, raise_on_error, policy)
    if step is None:
        raise ForkError("say where to fork: step=N (for a CORAL team, the message number; for ToolSelf, stage=K)")
    if row["parent_id"] and unit == "steps":
        if agent is not None or task is not None:
            raise ForkError(
                "a sub-agent's run is forked with its parent's agents and task: agent= and task= do not apply"
            )
        return await _fork_nested(ws, row, events, step, change, rerun_from, model, context, raise_on_error, policy)
    if unit is None or (unit == "stages" and step is not None):
        what = (
            "a ToolSelf run is forked at a stage (stage=K)"
            if unit == "stages"
            else (
                "forking replays an agent loop's steps, a CORAL team's messages or a ToolSelf run's stages "
                "(not a workflow agent's rounds, nor a team member's run: fork its team)"
            )
        )
        raise ForkError(f"run {row['id']} ({row['agent']}) cannot be forked by step: {what}")
    from tea_notebook.agents.kinds import build

    runner = agent or build(ws, row["agent"])
    options: dict[str, Any] = {
        "model": model or row["model"] or None,  # the run's own model, not today's default
        "context": context,
        "raise_on_error": raise_on_error,
        "_fork": (row["id"], step),
    }
    if unit == "messages":
        return await _fork_messages(ws, runner, row, events, step, change, task, options, policy)
    if not isinstance(runner, Agent):
        raise ForkError(f"run {row['id']} cannot be forked: its agent {row['agent']!r} is no agent loop now")
    plan = plan_fork(events, row["id"], step, change, rerun_from=rerun_from, check_action=action_checker(ws, runner))
    check_policy(ws, policy, [runner], [])
    govern(plan, policy, events)
    plan.fork_note = notebook_note(ws, row["id"])
    started = _started(events)
    if started.get("max_steps"):
        options["max_steps"] = max(started["max_steps"], plan.last_step + 1)
    return await runner.run(task or row["task"], _replay=plan, **options)


def _started(events: list["Event"]) -> dict[str, Any]:
    return next((e.data for e in events if e.type == "run_started"), {})


async def _fork_messages(
    ws: "RunHost",
    runner: Any,
    row: dict,
    events: list["Event"],
    step: int,
    change: Edit | None,
    task: str | None,
    options: dict,
    policy: ReplayPolicy | None = None,
) -> "RunResult":
    """A CORAL team's run from its first ``step`` messages (the last one edited when asked); a replay
    ``policy`` answers the calls each member makes again from that member's own original run (the
    team's message tools always run: they are its conversation, see ``CoralTeam.run``)."""
    from tea_notebook.agents.coral import CoralTeam

    if not isinstance(runner, CoralTeam):
        raise ForkError(
            f"run {row['id']} is a CORAL team's run: it is forked with a CORAL team, not {type(runner).__name__}"
        )
    if change is not None and change.kind != "message":
        raise ForkError(
            f"a CORAL team's run is forked at a message: the edit is {{'message': text}}, not {change.kind}"
        )
    if change is not None and not isinstance(change.value, str):
        raise ForkError(f"the edited message must be text, not {type(change.value).__name__}")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ForkError(f"a CORAL fork's step is a message number (0 or more), not {step!r}")
    history: list[dict[str, Any]] = []
    count = 0
    for e in events:
        if e.type == "message" and count < step:
            count += 1
            history.append({"type": "message", **e.data})
        elif e.type == "thread" and count < step:
            history.append({"type": "thread", **e.data})
    if count < step:
        raise ForkError(f"run {row['id']} has only {count} messages; cannot fork from message {step}")
    record = None
    if change is not None:
        if step < 1:
            raise ForkError("a message edit needs the number of the message to change (1 or more)")
        last = next(h for h in reversed(history) if h["type"] == "message")
        record = {
            "kind": "message",
            "step": step,
            "sender": last.get("sender"),
            "before": str(last.get("content", ""))[:2000],
            "after": change.value[:2000],
        }
        last["content"] = change.value
    if policy is not None:
        from tea_notebook.protocol.reserved import A2A_ACTIONS

        wrapped = [a for spec in runner.workers.values() for a in spec.get("agents") or []]
        machinery = frozenset(A2A_ACTIONS)
        check_policy(ws, policy, [], wrapped, CONTROLS | machinery)
        options["_policy"] = policy.running(machinery)
    return await runner.run(task or row["task"], _replay=history, _edit=record, **options)


def _dispatch(ws: "RunHost", child: dict, parent_events: list["Event"]) -> tuple[int, str]:
    """The step of the parent run that started the sub-run ``child``, and the id of that call."""
    name = _tool_name(child["agent"])
    calls = [e for e in parent_events if e.type == "tool_call" and e.data.get("name") in (name, child["agent"])]
    before = [e for e in calls if e.time <= child["started"] + 1e-6]
    if not before:
        raise ForkError(
            f"run {child['id']} is nested under run {child['parent_id']}, but no call of {name} there started it"
        )
    step = before[-1].step
    if step is None:
        raise ForkError(f"the call of {name} that started run {child['id']} has no step in run {child['parent_id']}")
    in_step = [e for e in calls if e.step == step]
    siblings = [
        r["id"]
        for r in ws.db.runs(parent_id=child["parent_id"])
        if r["agent"] == child["agent"] and r["started"] >= in_step[0].time - 1e-6
    ]
    index = siblings.index(child["id"]) if child["id"] in siblings else len(in_step) - 1
    return step, in_step[min(index, len(in_step) - 1)].data["id"]


def _as_chosen(stored: StoredStep) -> tuple[list[ToolCall], set[str]]:
    """The calls of a stored step as the model chose them (the arguments its history shows, so the
    prompts after it are the original's; a sub-agent's call is delegated again as it was), and the ids
    of those whose chosen arguments are not recorded (taken verbatim, as they ran)."""
    import json

    calls: list[ToolCall] = []
    verbatim: set[str] = set()
    for i, c in enumerate(stored.calls):
        shown = stored.record.results[i] if i < len(stored.record.results) else None
        if shown is None or shown[0] != c.name:
            calls.append(c)
            verbatim.add(c.id)
            continue
        try:
            chosen = json.loads(shown[1])
        except ValueError:
            chosen = shown[1]
        calls.append(ToolCall(c.id, c.name, chosen))
    return calls, verbatim


async def _fork_nested(
    ws: "RunHost",
    row: dict,
    events: list["Event"],
    step: int,
    change: Edit | None,
    rerun_from: int | None,
    model: str | None,
    context: "Context | None",
    raise_on_error: bool,
    policy: ReplayPolicy | None = None,
) -> "RunResult":
    """A sub-agent's run forked: its parent forked at the step that called it, that call continuing
    with the sub-agent's fork and the step's other calls replayed; up to the run a person started.
    A replay ``policy`` governs the calls every run of the chain makes again."""
    from tea_notebook.agents.kinds import build
    from tea_notebook.runtime.trajectory import fork_unit

    runner = build(ws, row["agent"])
    plan = plan_fork(events, row["id"], step, change, rerun_from=rerun_from, check_action=action_checker(ws, runner))
    plan.model = model or row["model"] or None
    plan.max_steps = _started(events).get("max_steps")
    govern(plan, policy, events)
    chain = [row["agent"]]
    child, child_plan = row, plan
    while child["parent_id"]:
        parent = _row(ws, child["parent_id"])
        parent_events = ws.events.events(parent["id"], nested=False)
        if fork_unit(parent_events) != "steps":  # a ToolSelf stage or a CORAL member goes on by other rules
            raise ForkError(
                f"run {child['id']} was started by run {parent['id']} ({parent['agent']}), which is not an agent "
                "loop forked by steps: fork that run (a ToolSelf run at a stage, a CORAL team at a message)"
            )
        at, call_id = _dispatch(ws, child, parent_events)
        stored = stored_steps(parent_events, parent["id"]).get(at)
        if stored is None:
            raise ForkError(f"run {parent['id']} has no stored step {at}, the one that started run {child['id']}")
        parent_plan = plan_fork(parent_events, parent["id"], at - 1, None)
        parent_plan.step = at
        parent_plan.model = parent["model"] or None
        parent_plan.max_steps = _started(parent_events).get("max_steps")
        others = {c.id: stored.results[c.id] for c in stored.calls if c.id != call_id and c.id in stored.results}
        calls, verbatim = _as_chosen(stored)
        parent_plan.overrides[at] = StepOverride(
            calls=calls,
            thoughts=stored.record.thoughts(),
            stored=others,
            verbatim=verbatim,
            subforks={child["agent"]: [child_plan]},
            note=f"{child['agent']} continued from its fork at step {step}",
            continued={call_id},
        )
        govern(parent_plan, policy, parent_events)
        chain.append(parent["agent"])
        parent_plan.edit = {
            "kind": "sub_agent",
            "step": at,
            "run": child["id"],
            "agent": child["agent"],
            "sub_step": step,
            "sub_edit": child_plan.edit,
        }
        child, child_plan = parent, parent_plan
    root_runner = build(ws, child["agent"])
    if not isinstance(root_runner, Agent):
        raise ForkError(f"run {child['id']} ({child['agent']}) is no agent loop: its sub-runs cannot be forked")
    check_policy(ws, policy, [runner, root_runner], chain)
    options: dict[str, Any] = {
        "model": child_plan.model,
        "context": context,
        "raise_on_error": raise_on_error,
        "_fork": (child["id"], child_plan.step),
    }
    if child_plan.max_steps:
        options["max_steps"] = child_plan.max_steps
    return await root_runner.run(child["task"], _replay=child_plan, **options)


async def _fork_stage(
    ws: "RunHost",
    row: dict,
    events: list["Event"],
    stage: int,
    change: Edit | None,
    model: str | None,
    agent: Any,
    task: str | None,
    context: "Context | None",
    raise_on_error: bool,
    policy: ReplayPolicy | None = None,
) -> "RunResult":
    """A ToolSelf run from the start of stage ``stage`` (its configuration edited when asked); a replay
    ``policy`` answers the calls of that stage and the later ones (``reconfigure`` and ``finish``, the
    run's controls, always run)."""
    from tea_notebook.agents.kinds import build
    from tea_notebook.protocol.reserved import TOOLSELF_ACTIONS

    stages = [e.data for e in events if e.type == "stage"]
    if isinstance(stage, bool) or not isinstance(stage, int) or not 1 <= stage <= len(stages):
        raise ForkError(f"run {row['id']} has stages 1 to {len(stages)}; there is no stage {stage!r}")
    chosen = stages[stage - 1]
    if stage > 1 and any("pool_entry" not in s for s in stages[1:stage]):
        raise ForkError(f"run {row['id']} was recorded before ToolSelf stages could be forked (no stage history kept)")
    config = {k: chosen.get(k) for k in ("sub_goal", "strategy", "toolbox", "knowledge", "knowledge_text")}
    record = None
    if change is not None:
        if change.kind != "stage" or not isinstance(change.value, dict):
            raise ForkError(
                "a ToolSelf stage's fork edits its configuration: {'stage': {'sub_goal': ..., 'toolbox': [...]}}"
            )
        unknown = sorted(set(change.value) - {"sub_goal", "strategy", "toolbox", "knowledge_text"})
        if unknown:
            raise ForkError(
                f"a stage's configuration has sub_goal, strategy, toolbox and knowledge_text; not {', '.join(unknown)}"
            )
        record = {
            "kind": "stage",
            "stage": stage,
            "before": {k: config[k] for k in change.value},
            "after": dict(change.value),
        }
        config.update(change.value)
    runner = agent or build(ws, row["agent"])
    check_policy(ws, policy, [runner], [], CONTROLS | frozenset(TOOLSELF_ACTIONS))
    first = int(chosen.get("first_step") or 1)
    plan = plan_fork(events, row["id"], first - 1, None)
    plan.step = first
    plan.edit = record
    plan.stage = {
        "index": stage,
        "config": config,
        "pool": [tuple(s["pool_entry"]) for s in stages[1:stage]],
        "record": record,
    }
    plan.live = []  # a stage starts with a fresh history
    plan.summaries = []
    govern(plan, policy, events)
    started = _started(events)
    options: dict[str, Any] = {
        "model": model or row["model"] or None,
        "context": context,
        "raise_on_error": raise_on_error,
        "_fork": (row["id"], first),
    }
    if started.get("max_steps"):
        options["max_steps"] = started["max_steps"]
    return await runner.run(task or row["task"], _replay=plan, **options)


#: seconds ``ws.resume`` waits for a call of the stopped run that still runs in this kernel
RESUME_WAIT = 30.0
#: runs being resumed now in this process (a second resume started meanwhile is refused)
_RESUMING: set[str] = set()


def _resumed_by(ws: "RunHost", run_id: str) -> str | None:
    """The run that resumed ``run_id`` already, if one did."""
    import json

    forks = [r["id"] for r in ws.db.forks_of([run_id])]
    for rid, _, _, data in ws.db.run_events_of_type(forks, ["run_started"]):
        if json.loads(data).get("resumed_from") == run_id:
            return rid
    return None


def _stop_states(events: list["Event"], run_id: str, step: int) -> dict[str, str]:
    """Where the stop left each call of ``step`` that reported it (``stop_state`` of its last
    ``tool_result``; a result written before that field existed read from its words)."""
    states: dict[str, str] = {}
    for e in events:
        if e.run_id != run_id or e.step != step or e.type != "tool_result" or e.data.get("error_type") != "Interrupted":
            continue
        state = e.data.get("stop_state")
        if state is None and "it was stopped" in str(e.data.get("observation", "")):
            state = "stopped"
        if state is not None:
            states[e.data["id"]] = state
    return states


async def _await_late_calls(
    ws: "RunHost", run_id: str, events: list["Event"], wait: float
) -> tuple[list["Event"], dict[int, StoredStep]]:
    """Wait (up to ``wait`` seconds) for the calls of the stopped run ``run_id`` that still run in this
    kernel, whose results are then recorded on their step; the run's events (read again if any was)
    and its :func:`stored_steps`. ForkError naming a call that is still running after the wait
    (nothing is written)."""
    from tea_notebook.runtime.inflight import STILL_RUNNING

    steps = stored_steps(events, run_id)
    pending = {
        call_id: number
        for number, step in steps.items()
        if not step.complete
        for call_id in sorted(step.started - set(step.results))
    }
    if not pending:
        return events, steps
    open_calls = [late for call_id in pending if (late := STILL_RUNNING.get(run_id, call_id)) is not None]
    if open_calls:
        left = await STILL_RUNNING.wait(open_calls, wait)
        if left:
            late = left[0]
            raise ForkError(
                f"{late.describe()} is still running in this kernel, {late.after:.1f} s after the stop (waited "
                f"{wait:g} s): a resume does not run it a second time. Resume again once it returns (what it "
                "returns is recorded on its step), or wait longer: ws.resume(run, wait=SECONDS)"
            )
    else:
        # none runs here now; one may have returned since the first read (a call is forgotten only once its
        # result is written): the whole run is read again only when a result was written since
        after = min(pending.values()) - 1
        known = sum(1 for e in events if e.run_id == run_id and e.type == "tool_result" and (e.step or 0) > after)
        ws.events.flush()
        if len(ws.db.step_events_after(run_id, ["tool_result"], after)) == known:
            return events, steps
    # read again: the late results recorded since the first read
    events = _resume_events(ws, run_id)
    return events, stored_steps(events, run_id)


def _resume_events(ws: "RunHost", run_id: str) -> list["Event"]:
    """The stopped run's own events that a resume reads, in order: all but its model requests, and
    its model replies, tool calls and results only from the step it was in on (its finished steps
    replay from their ``step`` events; a long run's calls are never decoded)."""
    from tea_notebook.runtime.events import Event

    ws.events.flush()
    finished = [step for _, _, step, _ in ws.db.run_events_of_type([run_id], ["step"]) if step is not None]
    return [Event.from_row(r) for r in ws.db.fork_events(run_id, max(finished, default=0) + 1)]


def _outcome_unknown(events: list["Event"], run_id: str, step: int, calls: list[Any]) -> list[Any]:
    """The calls of the stopped ``step`` that started and may have acted, with no result stored and
    nothing in this process running them (the kernel died mid-call): their outcome is unknown."""
    from tea_notebook.runtime.inflight import STILL_RUNNING

    states = _stop_states(events, run_id, step)
    return [
        c
        for c in calls
        if states.get(c.id) not in ("stopped", "not_started") and STILL_RUNNING.get(run_id, c.id) is None
    ]


def _refuse_unknown(ws: "RunHost", run_id: str, step: int, calls: list[Any]) -> list[str]:
    """The unknown-outcome ``calls`` a resume runs again (their tools are idempotent); ForkError
    naming the first one whose tool is not (nothing is written)."""
    again = []
    for c in calls:
        record = ws.tools.current(c.name) if c.name in ws.tools else None
        if record is None or record.origin == "agent" or record.idempotent:
            again.append(c.name)
            continue
        raise ForkError(
            f"call {c.id} ({c.name}) of step {step} of run {run_id} started but its result was never recorded (the "
            f"kernel died while it ran): it may have acted, and {c.name} is not declared idempotent, so a resume "
            f"does not run it again. Check whether it did, then resume with rerun_unknown=True "
            f"(%tea resume {run_id} --rerun-unknown) to run it again, or declare the tool idempotent "
            "(@tool(idempotent=True), %%tool --idempotent) if running it twice is harmless"
        )
    return again


def _runs_live(policy: ReplayPolicy | None, name: str) -> bool:
    """Whether a resume's ``policy`` runs calls of ``name`` (the loop's controls always run)."""
    return policy is None or name in CONTROLS or policy.for_tool(name) == "live"


def _refuse_unrecorded(run_id: str, step: int, taken: StepOverride, policy: ReplayPolicy | None) -> None:
    """ForkError naming the first call of the stopped ``step`` that ``policy`` answers from the
    recording although it has no stored result (it never returned, or never started)."""
    if policy is None:
        return
    for c in taken.calls or []:
        if c.id not in taken.stored and c.name not in CONTROLS and policy.for_tool(c.name) == "recorded":
            raise ForkError(
                f"call {c.id} ({c.name}) of step {step} of run {run_id} has no stored result (it did not return "
                f"before the stop): replay 'recorded' cannot answer it; give {c.name} the policy live or refuse"
            )


async def resume_run(
    ws: "RunHost",
    run_id: str,
    *,
    context: "Context | None" = None,
    raise_on_error: bool = True,
    rerun_unknown: bool = False,
    wait: float = RESUME_WAIT,
    replay: Any = None,
    force: bool = False,
) -> "RunResult":
    """See :meth:`tea_notebook.workspace.Workspace.resume`."""
    from tea_notebook.agents.kinds import build
    from tea_notebook.runtime.trajectory import fork_unit

    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait >= 0:
        raise ForkError(f"wait is the seconds to wait for a call still running (0 or more), not {wait!r}")
    if not isinstance(rerun_unknown, bool):
        raise ForkError(f"rerun_unknown is True or False, not {rerun_unknown!r}")
    if not isinstance(force, bool):
        raise ForkError(f"force is True or False (resume a run whose folder was changed by hand), not {force!r}")
    policy = ReplayPolicy.of(replay)
    row = _row(ws, run_id)
    if row["status"] not in ("interrupted", "error"):
        raise ForkError(
            f"run {row['id']} ended {row['status']}: only an interrupted run or one that ended in error can be "
            "resumed (fork it to go on from a step)"
        )
    if row["parent_id"]:
        raise ForkError(f"run {row['id']} is a sub-agent's run: resume the run that started it ({row['parent_id']})")
    if row["id"] in _RESUMING:
        raise ForkError(f"run {row['id']} is being resumed now in this kernel: a run is resumed once")
    resumed = _resumed_by(ws, row["id"])
    if resumed is not None:
        raise ForkError(
            f"run {row['id']} was already resumed by run {resumed}: a run is resumed once (its stopped calls must "
            f"not run twice); resume or fork {resumed} instead"
        )
    events = _resume_events(ws, row["id"])
    if fork_unit(events) != "steps":
        raise ForkError(f"run {row['id']} ({row['agent']}) is not an agent loop's run: it cannot be resumed")
    runner = build(ws, row["agent"])
    if not isinstance(runner, Agent):
        raise ForkError(f"run {row['id']} cannot be resumed: its agent {row['agent']!r} is no agent loop now")
    check_policy(ws, policy, [runner], [])
    _RESUMING.add(row["id"])
    try:
        events, steps = await _await_late_calls(ws, row["id"], events, wait)
        plan = govern(plan_resume(events, row["id"], steps), policy, events)
        plan.fork_note = notebook_note(ws, row["id"])
        taken = plan.overrides.get(plan.last_step + 1)
        if taken is not None and taken.calls:
            step = plan.last_step + 1
            _refuse_unrecorded(row["id"], step, taken, policy)
            pending = [
                c
                for c in taken.calls
                if c.id in taken.verbatim and c.id not in taken.stored and _runs_live(policy, c.name)
            ]
            unknown = _outcome_unknown(events, row["id"], step, pending)
            again = [c.name for c in unknown] if rerun_unknown else _refuse_unknown(ws, row["id"], step, unknown)
            if again:
                taken.note += f"; run again, their outcome unknown: {', '.join(again)}"
        from tea_notebook.runtime.folder_snapshots import resume_start

        plan.folder = resume_start(ws, row["id"], plan.last_step, force=force)
        if plan.folder.refusal is not None:  # its folder was changed by hand since the stop
            raise ForkError(plan.folder.refusal)
        started = _started(events)
        options: dict[str, Any] = {
            "model": row["model"] or None,
            "context": context,
            "raise_on_error": raise_on_error,
            "_fork": (row["id"], plan.last_step),
        }
        if started.get("max_steps"):
            options["max_steps"] = started["max_steps"]
        files = started.get("files") or None
        return await runner.run(row["task"], files, _replay=plan, **options)
    finally:
        _RESUMING.discard(row["id"])


__all__ = ["RESUME_WAIT", "ForkError", "ForkPlan", "action_checker", "fork_run", "notebook_note", "resume_run"]
