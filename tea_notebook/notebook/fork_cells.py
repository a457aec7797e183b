"""``%tea fork RUN --step N --edit``: the code of a cell that forks a run with an edit, prefilled with
the value to edit (a step's observation, its actions, the context the model saw, a CORAL message or
a ToolSelf stage's configuration).

The magic does not run anything: it puts this code in a new cell below, where a person changes the
value and runs it. The code runs as it is (``await ws.fork(...)``), names the workspace the magics
use, and writes every value as a Python literal that reads back exactly (checked with
:func:`ast.literal_eval`); texts of several lines are written as triple-quoted strings so that they
can be edited in place.
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
) -> ForkCell:
    """The prefilled cell that forks ``run`` at ``step`` (or ToolSelf ``stage``) with an edit of
    ``kind`` ('' = the natural one: the step's observation, the CORAL message, the stage's
    configuration). ``ws_name`` is the variable the code uses for the workspace; ``setup`` lines
    bind it first when needed. Nothing is written to the workspace."""
    from tea_notebook.runtime.trajectory import fork_unit

    row = ws.db.run_row(run)
    if row is None:
        raise ForkCellError(f"no run {run!r} in {ws.path}")
    if row["status"] == "running":
        raise ForkCellError(f"run {row['id']} is still running: wait for it to end before forking it")
    run_id = row["id"]
    events = ws.events.events(run_id, nested=False)
    unit = fork_unit(events)
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

    where = f"stage={stage}" if stage is not None else str(step)
    extra = ""
    if rerun_from is not None:
        extra += f", rerun_from={rerun_from}"
    if model:
        extra += f", model={model!r}"
    if task:
        extra += f", task={text_literal(task)}"

    def fork(edit: str) -> str:
        return f"await {ws_name}.fork({run_id!r}, {where}, edit={edit}{extra})"

    other = [k for k in allowed if k != kind]

    if kind == "stage":
        value, what = _stage_value(events, run_id, stage)
        body = "stage = {\n" + "".join(f"    {k!r}: {_literal(v, 4)},\n" for k, v in value.items()) + "}"
        call = fork("{'stage': stage}")
    elif kind == "message":
        value, what = _message_value(events, run_id, step)
        body = f"message = {text_literal(value)}"
        call = fork("{'message': message}")
    elif kind == "observation":
        number, tool, value = _observation_value(ws, events, run_id, step, action or 1)
        what = f"the observation of action {number} ({tool}) of step {step}"
        body = f"observation = {text_literal(value)}"
        call = fork(f"{{'observation': observation, 'action': {number}}}")
    elif kind == "actions":
        value = _actions_value(events, run_id, step)
        what = f"the actions of step {step} (run live, not asked of the model)"
        body = f"actions = {value_literal(value)}"
        call = fork("{'actions': actions}")
    else:
        messages = _context_value(ws, run_id, step)
        what = f"the context the model gets at step {step}"
        body = f"messages = {messages_literal(messages)}"
        call = fork("{'context': messages}")
    head = [f"# edit {what}, then run this cell: it forks run {run_id} with the edit"]
    if other:
        switches = " | ".join(f"--edit {k}" for k in other)
        head.append(f"# (other edits: %tea fork {run_id} --step {step} {switches})")
    if "json.loads(" in body:
        head.append("import json")
    if setup:
        head.append(setup)
    return ForkCell("\n".join([*head, body, call]), what)


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
