"""``%tea fork RUN --step N --edit``: the code of a cell that forks a run with an edit, prefilled with
the value to edit (a step's observation, its actions, the context the model saw, a CORAL message or
a ToolSelf stage's configuration).

The magic does not run anything: it puts this code in a new cell below, where a person changes the
value and runs it. The renderer's "edit and fork" asks :func:`edit_targets` for the values a step,
message or stage offers, lets the person edit one in place, and gets the complete cell (the edited
value given as ``value``) to insert and run in one gesture. The code runs as it is
(``await ws.fork(...)``), names the workspace the magics use, and writes every value as a Python
literal that reads back exactly (checked with :func:`ast.literal_eval`); texts of several lines are
written as triple-quoted strings so that they can be edited in place.
"""

from __future__ import annotations

import ast
import json
import pprint
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tea_notebook.errors import TeaError

if TYPE_CHECKING:
    from tea_notebook.runtime.events import Event

#: the edit kinds each kind of run takes (the first one is the default of a bare ``--edit``)
KINDS = {
    "steps": ("observation", "actions", "context"),
    "messages": ("message",),
    "stages": ("stage",),
}
#: the fields of a ToolSelf stage's configuration an edit may change
STAGE_FIELDS = ("sub_goal", "strategy", "toolbox", "knowledge_text")


class ForkCellError(TeaError):
    """The prefilled fork cell cannot be made as asked (no such run, step, action or stored value)."""


#: the default of ``fork_cell(value=...)``: take the stored value (a person edits it in the cell)
STORED: Any = object()
#: a ToolSelf stage's fields as "edit and fork" names them
STAGE_LABELS = {
    "sub_goal": "the sub-goal",
    "strategy": "the strategy",
    "toolbox": "the toolbox (a list of tool names)",
    "knowledge_text": "the knowledge",
}


@dataclass
class ForkCell:
    """The code of a prefilled fork cell and one line saying what it edits."""

    code: str
    what: str


def text_literal(text: str) -> str:
    """``text`` as a Python string literal: triple-quoted when it has several lines (readable and
    editable in a cell), else ``repr``; either way ``ast.literal_eval`` gives ``text`` back."""
    if "\n" in text and not any(ord(c) < 32 and c not in "\n\t" for c in text):
        body = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
        if body.endswith('"'):
            body = body[:-1] + '\\"'
        literal = f'"""{body}"""'
        try:
            if ast.literal_eval(literal) == text:
                return literal
        except (SyntaxError, ValueError):
            pass
    return repr(text)


def value_literal(value: Any, indent: int = 0) -> str:
    """A JSON-like value (dicts, lists, texts, numbers) as a Python literal that reads back equal."""
    literal = pprint.pformat(value, width=100, sort_dicts=False)
    try:
        if ast.literal_eval(literal) == value:
            return literal.replace("\n", "\n" + " " * indent)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        pass
    return f"json.loads({text_literal(json.dumps(value, ensure_ascii=False))})"


def messages_literal(messages: list[dict[str, Any]]) -> str:
    """A list of chat messages, one per line group, each text content triple-quoted when long."""
    lines = ["["]
    for m in messages:
        if set(m) == {"role", "content"} and isinstance(m.get("content"), str):
            lines.append(f"    {{'role': {m['role']!r}, 'content': {text_literal(m['content'])}}},")
        else:
            lines.append(f"    {value_literal(m, 4)},")
    lines.append("]")
    return "\n".join(lines)


def fork_cell(
    ws: Any,
    run: str,
    *,
    step: int | None = None,
    stage: int | None = None,
    kind: str = "",
    action: int | None = None,
    rerun_from: int | None = None,
    model: str | None = None,
    task: str | None = None,
    ws_name: str = "ws",
    setup: str = "",
    value: Any = STORED,
    field: str = "",
    replay: str | None = None,
) -> ForkCell:
    """The prefilled cell that forks ``run`` at ``step`` (or ToolSelf ``stage``) with an edit of
    ``kind`` ('' = the natural one: the step's observation, the CORAL message, the stage's
    configuration). ``ws_name`` is the variable the code uses for the workspace; ``setup`` lines
    bind it first when needed. With ``value`` the cell holds that value (already edited: "edit and
    fork" runs the cell as it is) instead of the stored one; for a stage, ``field`` names the one
    field ``value`` replaces. ``replay``: how the fork answers the tool calls it makes again
    (``"live"``, ``"recorded"``, ``"refuse"`` or a per-tool text such as ``"work=recorded,*=live"``;
    see :mod:`tea_notebook.runtime.replay_policy`), written into the call as ``replay=...``; None
    writes none (the fork's default, live). Nothing is written to the workspace."""
    row, events, unit = _forkable(ws, run)
    run_id = row["id"]
    if stage is not None:
        if unit != "stages":
            raise ForkCellError(f"run {run_id} ({row['agent']}) has no stages: fork it by --step N")
    elif unit == "stages":
        raise ForkCellError(f"run {run_id} is a ToolSelf run: it is forked at a stage (--stage K)")
    if unit not in KINDS:
        raise ForkCellError(
            f"run {run_id} ({row['agent']}) cannot be forked: forks replay an agent loop's steps, a CORAL "
            "team's messages or a ToolSelf run's stages (not a workflow agent's rounds, nor a team member's run)"
        )
    allowed = KINDS[unit]
    kind = kind or allowed[0]
    if kind not in allowed:
        raise ForkCellError(f"run {run_id} ({row['agent']}) takes edits of {' or '.join(allowed)}, not {kind}")
    if action is not None and kind != "observation":
        raise ForkCellError("--action picks whose observation is edited: it goes with --edit observation")
    if step is not None and (isinstance(step, bool) or step < 0):
        raise ForkCellError("--step must be 0 or more")
    if field and kind != "stage":
        raise ForkCellError(f"a field ({field!r}) is edited in a ToolSelf stage, not in an edit of {kind}")
    if field and field not in STAGE_FIELDS:
        raise ForkCellError(f"a stage has no field {field!r}: it has {', '.join(STAGE_FIELDS)}")
    given = value is not STORED
    policy = _checked_replay(replay)

    where = f"stage={stage}" if stage is not None else str(step)
    extra = ""
    if rerun_from is not None:
        extra += f", rerun_from={rerun_from}"
    if model:
        extra += f", model={model!r}"
    if task:
        extra += f", task={text_literal(task)}"
    if policy is not None:
        extra += f", replay={policy!r}"

    def fork(edit: str) -> str:
        return f"await {ws_name}.fork({run_id!r}, {where}, edit={edit}{extra})"

    other = [k for k in allowed if k != kind]

    if kind == "stage":
        config, what = _stage_value(events, run_id, stage)
        if given:
            if not field:
                raise ForkCellError(f"say which field of stage {stage} the value replaces ({', '.join(STAGE_FIELDS)})")
            config[field] = _checked_stage_field(field, value)
            what = f"{STAGE_LABELS[field]} of stage {stage}"
        body = "stage = {\n" + "".join(f"    {k!r}: {_literal(v, 4)},\n" for k, v in config.items()) + "}"
        call = fork("{'stage': stage}")
    elif kind == "message":
        text, what = _message_value(events, run_id, step)
        body = f"message = {text_literal(_checked_text(value, 'a message') if given else text)}"
        call = fork("{'message': message}")
    elif kind == "observation":
        number, tool, text = _observation_value(ws, events, run_id, step, action or 1)
        what = f"the observation of action {number} ({tool}) of step {step}"
        body = f"observation = {text_literal(_checked_text(value, 'an observation') if given else text)}"
        call = fork(f"{{'observation': observation, 'action': {number}}}")
    elif kind == "actions":
        actions = _checked_actions(value) if given else _actions_value(events, run_id, step)
        what = f"the actions of step {step} (run live, not asked of the model)"
        body = f"actions = {value_literal(actions)}"
        call = fork("{'actions': actions}")
    else:
        if given:
            raise ForkCellError("a context edit is made in a cell (%tea fork RUN --step N --edit context)")
        messages = _context_value(ws, run_id, step)
        what = f"the context the model gets at step {step}"
        body = f"messages = {messages_literal(messages)}"
        call = fork("{'context': messages}")
    at = f"stage {stage}" if stage is not None else f"step {step}"
    if given:
        head = [f"# fork run {run_id} at {at}: {what}, edited (change the value and run again for another fork)"]
    else:
        head = [f"# edit {what}, then run this cell: it forks run {run_id} with the edit"]
    if other and not given:
        switches = " | ".join(f"--edit {k}" for k in other)
        head.append(f"# (other edits: %tea fork {run_id} --step {step} {switches})")
    if "json.loads(" in body:
        head.append("import json")
    if setup:
        head.append(setup)
    return ForkCell("\n".join([*head, body, call]), what)


def edit_targets(ws: Any, run: str, *, step: int | None = None, stage: int | None = None) -> dict[str, Any]:
    """What "edit and fork" offers at a step (each action's observation, the actions), a CORAL message
    (its text) or a ToolSelf stage (each field of its configuration): ``{"run", "step", "stage",
    "targets"}``, each target ``{"kind", "label", "value", "format"}`` ("text" or "json") with its
    ``action`` or ``field`` where it has one. Raises :class:`ForkCellError` where no edit fits."""
    row, events, unit = _forkable(ws, run)
    run_id = row["id"]
    targets: list[dict[str, Any]] = []
    if unit == "stages":
        if stage is None:
            raise ForkCellError(f"run {run_id} is a ToolSelf run: it is forked at a stage")
        config, _ = _stage_value(events, run_id, stage)
        for key, label in STAGE_LABELS.items():
            fmt = "json" if key == "toolbox" else "text"
            targets.append({"kind": "stage", "field": key, "label": label, "value": config[key], "format": fmt})
    elif unit == "messages":
        text, what = _message_value(events, run_id, step)
        targets.append({"kind": "message", "label": what, "value": text, "format": "text"})
    elif unit == "steps":
        stored = _stored(events, run_id, step)
        for number in range(1, len(stored.record.results if stored.complete else []) + 1):
            _, tool, text = _observation_value(ws, events, run_id, step, number)
            label = f"the observation of action {number} ({tool})"
            targets.append({"kind": "observation", "action": number, "label": label, "value": text, "format": "text"})
        if stored.calls:
            label = "the actions (names and arguments; they run live)"
            targets.append({"kind": "actions", "label": label, "value": _actions_value(events, run_id, step)})
            targets[-1]["format"] = "json"
        if not targets:
            raise ForkCellError(
                f"step {step} of run {run_id} made no tool call: there is nothing to edit in place "
                f"(%tea fork {run_id} --step {step} --edit context edits what the model saw)"
            )
    else:
        raise ForkCellError(f"run {run_id} ({row['agent']}) cannot be forked with an edit")
    return {"run": run_id, "step": step, "stage": stage, "targets": targets}


def _forkable(ws: Any, run: str) -> tuple[dict[str, Any], list[Any], str | None]:
    """The row, own events and fork unit of a stored run that has ended (ForkCellError otherwise)."""
    from tea_notebook.runtime.trajectory import fork_unit

    row = ws.db.run_row(run)
    if row is None:
        raise ForkCellError(f"no run {run!r} in {ws.path}")
    if row["status"] == "running":
        raise ForkCellError(f"run {row['id']} is still running: wait for it to end before forking it")
    events = ws.events.events(row["id"], nested=False)
    return row, events, fork_unit(events)


def _checked_replay(replay: Any) -> str | None:
    """A replay policy as the fork call takes it (its text form), checked; None when none is given."""
    from tea_notebook.runtime.forking import ForkError
    from tea_notebook.runtime.replay_policy import ReplayPolicy

    if replay is None:
        return None
    if not isinstance(replay, str):
        raise ForkCellError(f"a replay policy is a text such as 'recorded' or 'work=recorded,*=live', not {replay!r}")
    try:
        policy = ReplayPolicy.of(replay)
    except ForkError as exc:
        raise ForkCellError(str(exc)) from None
    assert policy is not None
    return policy.text()


def _checked_text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ForkCellError(f"{what} is a text, not {type(value).__name__}")
    return value


def _checked_actions(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise ForkCellError('the actions are a list such as [{"name": "work", "arguments": {"n": 1}}]')
    for i, a in enumerate(value, 1):
        if not isinstance(a, dict) or not isinstance(a.get("name"), str) or not a["name"]:
            raise ForkCellError(f'action {i} needs a "name" (a tool\'s name): {a!r}')
        if not isinstance(a.get("arguments", {}), dict):
            raise ForkCellError(f'the "arguments" of action {i} ({a["name"]}) are an object, not {a["arguments"]!r}')
        unknown = sorted(set(a) - {"name", "arguments"})
        if unknown:
            raise ForkCellError(f"action {i} ({a['name']}) has {', '.join(unknown)}: an action has name and arguments")
    return [{"name": a["name"], "arguments": a.get("arguments", {})} for a in value]


def _checked_stage_field(field: str, value: Any) -> Any:
    if field == "toolbox":
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise ForkCellError(f'the toolbox is a list of tool names such as ["search"], not {value!r}')
        return value
    return _checked_text(value, STAGE_LABELS[field])


def workspace_name(user_ns: dict[str, Any], ws: Any) -> tuple[str, str]:
    """How a prefilled cell names the magics' workspace ``ws``: a variable of ``user_ns`` already bound
    to it, else ``ws`` (or ``tea_ws`` when ``ws`` is something else) bound by a setup line."""
    bound = [k for k, v in user_ns.items() if v is ws and k.isidentifier() and not k.startswith("_")]
    if bound:
        return ("ws" if "ws" in bound else sorted(bound)[0]), ""
    name = "ws" if "ws" not in user_ns else "tea_ws"
    from tea_notebook.protocol.current import current_workspace

    if current_workspace(required=False) is ws:
        return name, f"import tea_notebook\n{name} = tea_notebook.current_workspace()  # the workspace %tea uses"
    return name, f"{name} = get_ipython().magics_manager.registry['TeaMagics'].workspace  # the one %tea uses"


def _literal(value: Any, indent: int) -> str:
    return text_literal(value) if isinstance(value, str) else value_literal(value, indent)


def _stage_value(events: list["Event"], run_id: str, stage: int | None) -> tuple[dict[str, Any], str]:
    stages = [e.data for e in events if e.type == "stage"]
    if stage is None or isinstance(stage, bool) or not 1 <= stage <= len(stages):
        raise ForkCellError(f"run {run_id} has stages 1 to {len(stages)}; there is no stage {stage}")
    chosen = stages[stage - 1]
    value = {k: chosen.get(k) if k == "toolbox" else str(chosen.get(k) or "") for k in STAGE_FIELDS}
    value["toolbox"] = list(value["toolbox"] or [])
    return value, f"the configuration of stage {stage}"


def _message_value(events: list["Event"], run_id: str, step: int | None) -> tuple[str, str]:
    messages = [e.data for e in events if e.type == "message"]
    if step is None or not 1 <= step <= len(messages):
        raise ForkCellError(f"run {run_id} has messages 1 to {len(messages)}; there is no message {step} to edit")
    chosen = messages[step - 1]
    return str(chosen.get("content", "")), f"message {step} (from {chosen.get('sender', '?')})"


def _stored(events: list["Event"], run_id: str, step: int | None) -> Any:
    from tea_notebook.runtime.forking import stored_steps

    steps = stored_steps(events, run_id)
    if step is None or step not in steps:
        known = sorted(steps)
        shown = f"1 to {known[-1]}" if known else "none"
        raise ForkCellError(f"run {run_id} has no stored step {step} (its steps: {shown})")
    return steps[step]


def _observation_value(
    ws: Any, events: list["Event"], run_id: str, step: int | None, action: int
) -> tuple[int, str, str]:
    stored = _stored(events, run_id, step)
    results = stored.record.results if stored.complete else []
    if not results:
        raise ForkCellError(
            f"step {step} of run {run_id} has no action whose observation could be edited "
            "(try --edit actions or --edit context)"
        )
    if isinstance(action, bool) or not 1 <= action <= len(results):
        raise ForkCellError(f"step {step} of run {run_id} has {len(results)} action(s); there is no action {action}")
    tool, _args, observation = results[action - 1]
    text = str(observation)
    try:
        text = ws.events.full_text(text)  # a clipped observation: the whole text, to edit
    except TeaError:
        pass
    return action, str(tool), text


def _actions_value(events: list["Event"], run_id: str, step: int | None) -> list[dict[str, Any]]:
    stored = _stored(events, run_id, step)
    if not stored.calls:
        raise ForkCellError(
            f"step {step} of run {run_id} made no tool call (write the actions yourself, or --edit context)"
        )
    return [{"name": c.name, "arguments": c.arguments} for c in stored.calls]


def _context_value(ws: Any, run_id: str, step: int | None) -> list[dict[str, Any]]:
    if step is None or step < 1:
        raise ForkCellError("a context edit needs the step whose prompt changes (1 or more)")
    ctx = ws.trajectory(run_id).context(step)
    if ctx.clipped:
        raise ForkCellError(
            f"the stored context of step {step} of run {run_id} was clipped (an image too large to keep): "
            "it cannot be sent again; edit the observation or the actions instead"
        )
    return [dict(m) for m in ctx.messages]
