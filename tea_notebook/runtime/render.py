"""Plain renderings of a trajectory: a JSON payload (the ``application/vnd.tea.trajectory+json``
MIME type), self-contained HTML (every model or tool string escaped) and text.

They depend on nothing but the standard library, so a ``Trajectory`` or ``RunResult`` displays
richly in any front end (JupyterLab, VS Code, nbconvert, GitHub) without the notebook layer.
The payload holds no ids, times or durations: executed notebooks stay diffable; those go to the
bundle's metadata. Every text is cut to :data:`FIELD_LIMIT` characters (observations to
:data:`OBSERVATION_MAX`), keeping the mark that says where the full text of a clipped one is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tea_notebook.runtime.contexts import context_html as context_html
from tea_notebook.runtime.html_style import CSS as CSS
from tea_notebook.runtime.html_style import esc as esc
from tea_notebook.runtime.html_style import esc_str
from tea_notebook.runtime.sample_score import evaluation_html, evaluation_payload, evaluation_sample
from tea_notebook.store.blobs import FIELD_LIMIT, blob_ref, shorten

if TYPE_CHECKING:
    from tea_notebook.runtime.trajectory import StepView, Trajectory

MIME_TYPE = "application/vnd.tea.trajectory+json"
OBSERVATION_PREVIEW = 600
OBSERVATION_MAX = 20_000

_STATUS_COLOUR = {
    "success": "#1a7f37",
    "failed": "#b35900",
    "max_steps": "#b35900",
    "unverified": "#9a6700",
    "interrupted": "#6e40c9",
    "error": "#cf222e",
    "running": "#0969da",
}


def step_payload(step: "StepView") -> dict[str, Any]:
    """One step of the trajectory payload (its text fields clipped, long arguments as text)."""
    return {
        "number": step.number,
        "thinking": field_text(step.thinking),
        "evaluation": field_text(step.evaluation),
        "memory": field_text(step.memory),
        "next_goal": field_text(step.next_goal),
        "replayed": step.replayed,
        "edited": _edit_payload(step.edited),
        "note": step.note,
        "errors": [field_text(e) for e in step.errors],
        "prompt_tokens": step.prompt_tokens,
        "completion_tokens": step.completion_tokens,
        "cost": step.cost,
        "actions": [
            {
                "name": a.get("name"),
                "arguments": a.get("arguments") if _fits(a.get("arguments")) else _args_text(a.get("arguments")),
                "ok": a.get("ok"),
                "observation": _clip(str(a.get("observation", "")), OBSERVATION_MAX),
            }
            for a in step.actions
        ],
    }


def _edit_payload(edit: dict[str, Any] | None) -> dict[str, Any] | None:
    if not edit:
        return None
    return {k: (_clip(v, 2000) if isinstance(v, str) else v) for k, v in edit.items() if k in EDIT_FIELDS}


#: what the view shows of a fork's edit
EDIT_FIELDS = ("kind", "step", "action", "tool", "before", "after", "agent", "sub_step", "stage", "message")


def payload(traj: "Trajectory") -> dict[str, Any]:
    """The JSON document of the custom MIME type (nested sub-runs included)."""
    from tea_notebook.models.client import display_name, tokens_estimated

    return {
        "version": 1,
        "agent": traj.agent,
        "task": field_text(traj.task),
        "model": display_name(traj.model),
        "status": traj.status,
        "answer": field_text(traj.answer),
        "tokens_estimated": tokens_estimated(traj.model),
        "prompt_tokens": traj.prompt_tokens,
        "completion_tokens": traj.completion_tokens,
        "cost": traj.cost,
        "steps": [step_payload(s) for s in traj.steps],
        # "steps": a Fork button on each step of the run; "messages" (CORAL) or "": none on steps
        "forkable": traj.fork_unit or "",
        # what the fork changed (a sub-agent's edit for a fork from its step); None when nothing was
        "edit": _edit_payload(traj.change),
        "resumed": traj.resumed,
        # where it was forked or resumed, in words ("after step 4", "at stage 2", "at helper's step 2")
        "fork_point": traj.fork_point,
        "stages": [stage_payload(st) for st in traj.stages],
        "threads": thread_items(traj.threads),
        "messages": _messages_payload(traj),
        "children": [payload(c) for c in traj.children],
        **_folder_payload(traj.folder),
        **_stop_payload(traj),
        **_divergence_payload(traj),
        **evaluation_payload(traj),  # the scorer's verdict, scores and target when an evaluation scored it
    }


def divergence_item(source: str, unit: str, departed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The payload's ``divergence`` of a fork of ``source`` (a step-by-step fork's ``unit`` is
    ``"step"``, a CORAL team's ``"message"``): where it first departed (``departed``: a ``diverged``
    event's data: step, how, original, replay; texts already short), or only ``source`` and ``unit``
    while it reproduces it. Small on purpose: the live view sends it once, when it changes."""
    out: dict[str, Any] = {"source": source, "unit": unit}
    if departed is not None:
        out.update(
            step=departed.get("step"),
            how=str(departed.get("how", "")),
            original=shorten(str(departed.get("original", "")), DEPARTURE_TEXT),
            replay=shorten(str(departed.get("replay", "")), DEPARTURE_TEXT),
        )
    return out


#: characters of what the original and the replay did where a fork departed, in the payload
DEPARTURE_TEXT = 400


def compared_fork(started: Mapping[str, Any]) -> str | None:
    """The run a run's ``run_started`` data says it was forked from, when the fork compares its
    steps (or messages) with that run's: a fork, not a resume, of a run that forks."""
    source = started.get("forked_from")
    if not source or started.get("resumed_from") or not started.get("fork_unit"):
        return None
    return str(source)


def _divergence_payload(traj: "Trajectory") -> dict[str, Any]:
    """A fork's ``divergence`` (see :func:`divergence_item`); nothing for a run that is no compared
    fork, nor for a step-by-step fork recorded before model inputs were hashed (nothing was compared)."""
    started = next((e.data for e in traj.events if e.type == "run_started" and e.run_id == traj.run_id), {})
    source = compared_fork(started)
    if source is None:
        return {}
    unit = "message" if started.get("fork_unit") == "messages" else "step"
    found = traj.divergence
    if found is not None:
        return {"divergence": divergence_item(source, unit, found.event())}
    own = (e for e in traj.events if e.run_id == traj.run_id)
    hashed = any(e.type == "model_request" and e.data.get("input_hash") for e in own)
    return {"divergence": divergence_item(source, unit)} if unit == "message" or hashed else {}


def _stop_payload(traj: "Trajectory") -> dict[str, Any]:
    """Why an interrupted run stopped (its ``run_finished`` error: "interrupted: the kernel restarted"), if said."""
    if traj.status != "interrupted":
        return {}
    ends = (e.data.get("error") for e in traj.events if e.type == "run_finished" and e.run_id == traj.run_id)
    reason = next(ends, "")
    return {"stop_reason": str(reason)} if reason else {}


def _messages_payload(traj: "Trajectory") -> list[dict[str, Any]]:
    """A CORAL run's messages; each with ``work``, the tool calls its sender made since its previous
    message, as ``[child index, step number, action index]`` into ``children`` (not copied)."""
    from tea_notebook.runtime.forking import turn_ends

    inside = turn_ends([e for t in (traj, *traj.children) for e in t.events]) if traj.messages else {}
    return message_items(traj.messages, _message_work(traj) if traj.messages and traj.children else {}, set(inside))


def thread_items(threads: Any) -> list[dict[str, Any]]:
    """The payload's CORAL threads (the stored trajectory's and the live view's)."""
    return [
        {
            "id": t.get("id"),
            "name": field_text(t.get("name")),
            "participants": t.get("participants", []),
            "status": t.get("status", "open"),
            "summary": field_text(t.get("summary", "")),
        }
        for t in threads
    ]


def message_items(
    messages: list[dict[str, Any]],
    work: dict[Any, list[list[int]]],
    inside_turn: "set[int] | frozenset[int]" = frozenset(),
) -> list[dict[str, Any]]:
    """The payload's messages (the stored trajectory's and the live view's): ``work`` maps a message's
    ``seq`` to the tool calls folded under it; a message whose ``seq`` is in ``inside_turn`` (sent in
    the middle of its sender's turn) is marked ``"forkable": False`` (no Fork button: see
    :func:`~tea_notebook.runtime.forking.turn_ends`)."""
    out = []
    for m in messages:
        item = {
            "seq": m.get("seq"),
            "thread": m.get("thread"),
            "sender": m.get("sender"),
            "mentions": m.get("mentions", []),
            "content": field_text(m.get("content")),
        }
        if work.get(m.get("seq")):
            item["work"] = work[m.get("seq")]
        if m.get("seq") in inside_turn:
            item["forkable"] = False
        out.append(item)
    return out


def _message_work(traj: "Trajectory") -> dict[Any, list[list[int]]]:
    """The folding :func:`threads_html` does, as references: each sub-run's tool calls go under the
    first later message of its agent."""
    by_sender: dict[str, list[dict[str, Any]]] = {}
    for m in sorted(traj.messages, key=lambda m: m.get("seq", 0)):
        by_sender.setdefault(m.get("sender", ""), []).append(m)
    out: dict[Any, list[list[int]]] = {}
    for i, child in enumerate(traj.children):
        mine = by_sender.get(child.agent, [])
        where = {
            a.get("id"): (s.number, k) for s in child.steps for k, a in enumerate(s.actions) if a.get("id") is not None
        }
        for e in child.events:
            if e.type != "tool_call" or e.data.get("name") in CONVERSATION_TOOLS or e.data.get("id") not in where:
                continue
            target = next((m for m in mine if m.get("time", 0) >= e.time), None)
            if target is not None:
                step, k = where[e.data["id"]]
                out.setdefault(target.get("seq"), []).append([i, step, k])
    return out


#: at most this many of a run's files are listed in its payload
FILES_LISTED = 200
#: at most this many of a run's files are looked at to list them (the sandbox's entry quota)
FILES_WALKED = 100_000


def _folder_payload(folder: str | None) -> dict[str, Any]:
    """The run folder's regular files (names relative to it, sorted) and its todo.md, when there
    are any. Read beneath the folder's descriptor: sandboxed code writes in the run folder, and a
    link it left there (todo.md -> a host file) must not bring a host file into the view."""
    import os
    import stat

    from tea_notebook._safe_open import Beneath, read_beneath
    from tea_notebook.errors import EnvironmentFailure
    from tea_notebook.runtime.todo import MAX_BYTES

    if not folder or not os.path.isdir(folder):
        return {}
    root = Beneath(folder)
    try:
        names = []
        with root.open(".", "any") as top:
            for entry in root.walk(top, folders_first=False):
                if stat.S_ISREG(entry.stat.st_mode):
                    names.append(entry.rel)
                    if len(names) >= FILES_WALKED:
                        break
        out: dict[str, Any] = {}
        if names:
            out["files"] = sorted(names)[:FILES_LISTED]
        try:
            todo = read_beneath(root, "todo.md", MAX_BYTES)
        except EnvironmentFailure as exc:
            out["todo"] = field_text(f"(todo.md is not shown: {exc})")
        else:
            if todo is not None:
                out["todo"] = field_text(todo.decode("utf-8", "replace"))
        return out
    finally:
        root.close()


def latency_tree(traj: "Trajectory") -> dict[str, Any]:
    """Seconds per step, nested like the run tree: ``steps`` the model's time, ``tools`` the tool
    calls' (wall clock). Kept in the bundle's metadata, out of the payload, so that stored notebooks
    stay diffable."""
    return step_times(traj.steps, [latency_tree(c) for c in traj.children])


def step_times(steps: list["StepView"], children: list[dict[str, Any]]) -> dict[str, Any]:
    """One node of :func:`latency_tree` (the stored trajectory's and the live view's)."""
    return {
        "steps": [round(s.latency, 3) for s in steps],
        "tools": [round(s.tool_time, 3) for s in steps],
        "children": children,
    }


def stage_payload(stage: dict[str, Any]) -> dict[str, Any]:
    """One stage of the trajectory payload (its text fields clipped)."""
    return {
        "index": stage.get("index"),
        "first_step": stage.get("first_step"),
        "sub_goal": field_text(stage.get("sub_goal")),
        "strategy": field_text(stage.get("strategy")),
        "toolbox": list(stage.get("toolbox", [])),
        "knowledge": field_text(stage.get("knowledge")),
        "reason": field_text(stage.get("reason")),
        "note": field_text(stage.get("note", "")),
    }


def _clip(text: str, limit: int) -> str:
    return shorten(text, limit)


def field_text(value: Any) -> str:
    """A text field as shown: at most ``FIELD_LIMIT`` characters."""
    return shorten("" if value is None else str(value), FIELD_LIMIT)


def _fits(args: Any) -> bool:
    return len(json.dumps(args, ensure_ascii=False, default=str)) <= FIELD_LIMIT


def _observation_html(text: str) -> str:
    """An observation, escaped; long ones show a preview with the rest behind an expander."""
    if len(text) <= OBSERVATION_PREVIEW:
        return f"<pre>{esc_str(text)}</pre>"
    rest = _clip(text, OBSERVATION_MAX)
    return (
        f"<pre>{esc_str(text[:OBSERVATION_PREVIEW])}…</pre><details><summary class='muted'>show all "
        f"({len(text):,} characters)</summary><pre>{esc_str(rest)}</pre></details>"
    )


def _args_text(args: Any) -> str:
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return shorten(args)
    text = json.dumps(args, ensure_ascii=False, default=str)
    if len(text) <= FIELD_LIMIT:
        return text
    # cut as a whole; the marks of clipped values inside would be cut off, so they are named after
    kept = [ref for ref in map(blob_ref, _strings(args)) if ref]
    return shorten(text) + "".join(f"\n… full text: ws.events.full_text('sha256:{ref}')" for ref in kept[:8])


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def step_html(step: "StepView") -> str:
    """One step card."""
    parts = [f"<div class='step'><div><b>step {step.number}</b>"]
    if step.replayed:
        parts.append(" <span class='badge'>replayed</span>")
    if step.note:
        parts.append(f" <span class='badge'>{esc_str(step.note)}</span>")
    if step.edited:
        parts.append(" <span class='badge'>edited</span>")
    parts.append("</div>")
    if step.edited and step.edited.get("kind") == "observation":
        parts.append(
            f"<div class='muted'>observation of action {esc_str(step.edited.get('action'))} was: "
            f"<s>{esc_str(_clip(str(step.edited.get('before', '')), 400))}</s></div>"
        )
    for label, value in (("thinking", step.thinking), ("evaluation", step.evaluation), ("next goal", step.next_goal)):
        if value:
            parts.append(f"<div><span class='muted'>{label}:</span> {esc_str(field_text(value))}</div>")
    if step.memory:
        parts.append(f"<div><span class='muted'>memory:</span> {esc_str(field_text(step.memory))}</div>")
    for a in step.actions:
        if a.get("name") == "done" and str(a.get("observation", "")) == "finished":
            args = a.get("arguments")
            args = json.loads(args) if isinstance(args, str) and args.startswith("{") else args
            ok = args.get("success") if isinstance(args, dict) else None
            parts.append(
                f"<div class='act'><code>done</code> <span class='muted'>(success: {esc_str(ok)})</span></div>"
            )
            continue
        mark = "" if a.get("ok", True) else " class='err'"
        parts.append(
            f"<div class='act'><code{mark}>{esc_str(a.get('name'))}({esc_str(_args_text(a.get('arguments')))})</code>"
            f"{_observation_html(str(a.get('observation', '')))}</div>"
        )
    for err in step.errors:
        parts.append(f"<div class='err'>{esc_str(field_text(err))}</div>")
    parts.append("</div>")
    return "".join(parts)


def stage_summary_html(stage: dict[str, Any]) -> str:
    """What a ToolSelf stage runs under: sub-goal, toolbox, strategy, knowledge and why it began."""
    tools = " ".join(f"<span class='badge'>{esc_str(t)}</span>" for t in stage.get("toolbox", []))
    knowledge = stage.get("knowledge", "")
    shown = {"": "(none)", "ALL": "ALL (the whole history pool)"}.get(knowledge, knowledge)
    parts = [
        f"<summary><b>stage {esc_str(stage.get('index'))}</b> · {esc_str(field_text(stage.get('sub_goal')))}</summary>",
        f"<div><span class='muted'>toolbox:</span> {tools}</div>",
        f"<div><span class='muted'>why:</span> {esc_str(field_text(stage.get('reason')))}</div>",
    ]
    if stage.get("strategy"):
        parts.append(f"<div><span class='muted'>strategy:</span> {esc_str(field_text(stage['strategy']))}</div>")
    parts.append(f"<div><span class='muted'>knowledge:</span> {esc_str(field_text(shown))}</div>")
    if stage.get("note"):
        parts.append(f"<div class='err'>{esc_str(field_text(stage['note']))}</div>")
    return "".join(parts)


def staged_steps_html(stages: list[dict[str, Any]], steps: list["StepView"]) -> str:
    """Steps grouped into their ToolSelf stages, each a nested section headed by its configuration."""
    ordered = sorted(stages, key=lambda st: st.get("first_step", 0))
    out = [step_html(s) for s in steps if not ordered or s.number < ordered[0].get("first_step", 0)]
    for i, stage in enumerate(ordered):
        end = ordered[i + 1].get("first_step", 0) if i + 1 < len(ordered) else None
        inside = [s for s in steps if s.number >= stage.get("first_step", 0) and (end is None or s.number < end)]
        out.append(
            f"<details open class='stage'>{stage_summary_html(stage)}{''.join(step_html(s) for s in inside)}</details>"
        )
    return "".join(out)


#: tools whose calls are the messages of a conversation (not folded under them as work)
CONVERSATION_TOOLS = frozenset(
    {"send_message", "wait_for_mentions", "create_thread", "list_threads", "list_agents", "close_thread"}
)


def threads_html(
    threads: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    actions: dict[str, list[tuple[float, dict[str, Any]]]],
    orchestrator: str = "",
) -> str:
    """A CORAL run as chat transcripts, one per thread; under each message the tool calls its sender
    made since its previous message, folded."""
    folded: dict[int, list[dict[str, Any]]] = {}
    pending: dict[str, list[dict[str, Any]]] = {}
    by_sender: dict[str, list[dict[str, Any]]] = {}
    for m in sorted(messages, key=lambda m: m.get("seq", 0)):
        by_sender.setdefault(m.get("sender", ""), []).append(m)
    for agent, calls in actions.items():
        mine = by_sender.get(agent, [])
        for when, action in sorted(calls, key=lambda c: c[0]):
            if action.get("name") in CONVERSATION_TOOLS:
                continue
            target = next((m for m in mine if m.get("time", 0) >= when), None)
            if target is None:
                pending.setdefault(agent, []).append(action)
            else:
                folded.setdefault(target.get("seq", 0), []).append(action)
    start = min((m.get("time", 0) for m in messages), default=0)
    out = []
    known = {t.get("id") for t in threads}
    listed = list(threads) + [
        {"id": tid, "name": tid, "participants": []}
        for tid in dict.fromkeys(m.get("thread") for m in messages)
        if tid not in known
    ]
    for t in listed:
        mine = [m for m in messages if m.get("thread") == t.get("id")]
        status = t.get("status", "open")
        head = (
            f"<summary>thread <b>{esc_str(t.get('name') or t.get('id'))}</b> · {len(mine)} messages · "
            f"<span class='muted'>{esc_str(', '.join(t.get('participants', [])))}</span>"
            + (f" · <i>{esc_str(status)}</i>" if status != "open" else "")
            + "</summary>"
        )
        body = []
        if t.get("summary"):
            body.append(f"<div class='muted'>summary: {esc_str(field_text(t['summary']))}</div>")
        for m in mine:
            cls = "msg orch" if m.get("sender") == orchestrator else "msg"
            to = ", ".join(f"@{x}" for x in m.get("mentions") or [])
            replayed = " <span class='badge'>replayed</span>" if m.get("replayed") else ""
            body.append(
                f"<div class='{cls}'><b>{esc_str(m.get('sender'))}</b> <span class='muted'>→ {esc_str(to)} · "
                f"+{m.get('time', 0) - start:.1f} s</span>{replayed}<div>{esc_str(field_text(m.get('content')))}</div>"
            )
            work = folded.get(m.get("seq", 0), [])
            if work:
                body.append(
                    f"<details><summary class='muted'>{len(work)} tool calls</summary>{_actions_html(work)}</details>"
                )
            body.append("</div>")
        out.append(f"<details open class='thread'>{head}{''.join(body)}</details>")
    for agent, work in pending.items():
        out.append(
            f"<details><summary class='muted'><b>{esc_str(agent)}</b> is working: {len(work)} tool calls "
            f"since its last message</summary>{_actions_html(work)}</details>"
        )
    return "".join(out)


def _actions_html(actions: list[dict[str, Any]]) -> str:
    parts = []
    for a in actions:
        mark = "" if a.get("ok", True) else " class='err'"
        parts.append(
            f"<div class='act'><code{mark}>{esc_str(a.get('name'))}({esc_str(_args_text(a.get('arguments')))})</code>"
            f"{_observation_html(str(a.get('observation', '…')))}</div>"
        )
    return "".join(parts)


def steps_label(own: int, total: int) -> str:
    """How many steps a run took: its own, and with its sub-agents' when they add any (a CORAL team
    takes none itself: all its steps are its members')."""
    if total <= own:
        return f"{own} steps"
    if own == 0:
        return f"{total} steps (by sub-agents)"
    return f"{own} steps ({total} with sub-agents)"


def tree_steps(traj: "Trajectory") -> int:
    """Steps of a run and all its sub-runs."""
    return len(traj.steps) + sum(tree_steps(c) for c in traj.children)


def header_html(
    agent: str, model: str, status: str, steps: int, tokens: int, cost: float, extra: str = "", total: int = 0
) -> str:
    """The header line: agent, model, status and running totals (``steps`` the run's own, ``total``
    with its sub-runs'; token counts of a scripted offline model are marked as estimates)."""
    from tea_notebook.models.client import ESTIMATED, tokens_estimated

    colour = _STATUS_COLOUR.get(status, "#57606a")
    shown = f"<span>{tokens:,} tokens</span>"
    if tokens_estimated(model):
        shown = f"<span title='{esc_str(ESTIMATED)}'>~{tokens:,} tokens (estimated)</span>"
    return (
        f"<div class='h'><span class='st' style='color:{colour}'>{esc_str(status)}</span>"
        f"<span><b>{esc_str(agent)}</b></span><span class='muted'>{esc_str(model)}</span>"
        f"<span>{steps_label(steps, total)}</span>{shown}<span>${cost:.4f}</span>{extra}</div>"
    )


def trajectory_html(traj: "Trajectory", nested: bool = False) -> str:
    """A self-contained HTML rendering; sub-runs nest in collapsible blocks."""
    from tea_notebook.models.client import display_name

    body = [
        header_html(
            traj.agent,
            display_name(traj.model),
            traj.status,
            len(traj.steps),
            traj.prompt_tokens + traj.completion_tokens,
            traj.cost,
            total=tree_steps(traj),
        ),
        f"<div><span class='muted'>task:</span> {esc_str(field_text(traj.task))}</div>",
    ]
    sample = None if nested else evaluation_sample(traj)
    if sample:
        body.insert(1, evaluation_html(sample))
    if traj.forked_from and not nested:
        edit = traj.change
        where = f" in {edit['agent']}'s run" if edit and edit.get("agent") else ""
        what = f"; edited: {esc_str(edit.get('kind'))}{esc_str(where)}" if edit else ""
        body.append(f"<div class='muted'>{esc_str(traj.lineage())}{what}</div>")
        if traj.fork_note:
            body.append(f"<div class='muted'>{esc_str(traj.fork_note)}</div>")
    if traj.stages:
        body.append(staged_steps_html(traj.stages, traj.steps))
    else:
        body += [step_html(s) for s in traj.steps]
    if traj.messages or traj.threads:
        orchestrator = next((t["orchestrator"] for t in traj.threads if t.get("orchestrator")), "")
        body.append(threads_html(traj.threads, traj.messages, traj.agent_actions(), orchestrator))
    for child in traj.children:
        body.append(
            f"<details><summary>sub-agent <b>{esc_str(child.agent)}</b> · {esc_str(child.status)} · "
            f"{len(child.steps)} steps</summary>{trajectory_html(child, nested=True)}</details>"
        )
    if traj.answer:
        body.append(f"<div><span class='muted'>answer:</span><pre>{esc_str(field_text(traj.answer))}</pre></div>")
    inner = "".join(body)
    return inner if nested else f"{CSS}<div class='tea-t'>{inner}</div>"


def mimebundle(traj: "Trajectory") -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, metadata)`` for IPython: the custom MIME type, HTML and text; ids in metadata."""
    data = {MIME_TYPE: payload(traj), "text/html": trajectory_html(traj), "text/plain": traj.text(ids=False)}
    metadata = {
        MIME_TYPE: {
            "run_id": traj.run_id,
            "parent_id": traj.parent_id,
            "forked_from": traj.forked_from,
            "fork_step": traj.fork_step,
            "folder": traj.folder,
            "latency": latency_tree(traj),
            "runs": run_ids(traj),
        }
    }
    return data, metadata


def run_ids(traj: "Trajectory") -> dict[str, Any]:
    """The run's id and its sub-runs' ids, nested like the payload's ``children`` (in the bundle's
    metadata: the renderer's Fork and context buttons of a sub-agent's step name its own run)."""
    return {"id": traj.run_id, "children": [run_ids(c) for c in traj.children]}
