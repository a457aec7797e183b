"""Asking a model for one JSON object, with the error fed back on a bad answer."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Callable

from tea_notebook.errors import EvolutionError
from tea_notebook.runtime.event_types import ErrorEvent

if TYPE_CHECKING:
    from tea_notebook.evolve.prompts import Prompt
    from tea_notebook.runtime.runlog import Process

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def require_model(ws: Any, model: str | None, what: str) -> str:
    """The model self-evolution uses; the offline demo model cannot write specs, code or judgements,
    so having no model configured is an error that says how to set one."""
    from tea_notebook.models.client import resolve_model

    resolved, source = resolve_model(model, None, ws.default_model)
    if source == "default":
        raise EvolutionError(
            what,
            "needs a model that writes JSON and code (the offline demo model cannot): pass model=..., "
            "set Workspace(..., model=...) / ws.default_model, or the TEA_MODEL environment variable",
        )
    return resolved


def stage_of(messages: list[dict[str, Any]]) -> str:
    """The stage a prompt belongs to (its system message starts with ``Stage: NAME``)."""
    first = str(messages[0].get("content", "")) if messages else ""
    return first.split("\n", 1)[0].removeprefix("Stage: ").strip() if first.startswith("Stage: ") else ""


def parse_object(text: str | None) -> dict[str, Any]:
    """The one JSON object in ``text`` (code fences and surrounding prose tolerated)."""
    if not text or not text.strip():
        raise ValueError("the answer was empty")
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        start, end = body.find("{"), body.rfind("}")
        if start < 0 or end <= start:
            raise ValueError("the answer contains no JSON object") from None
        try:
            value = json.loads(body[start : end + 1])
        except json.JSONDecodeError as exc:
            raise ValueError(f"the JSON is not valid ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(value, dict):
        raise ValueError(f"the answer is a JSON {type(value).__name__}, not an object")
    return value


async def ask_json(
    proc: "Process",
    prompt: "Prompt",
    fields: dict[str, Any],
    *,
    validate: Callable[[dict[str, Any]], str | None] | None = None,
    retries: int = 2,
) -> dict[str, Any]:
    """Ask for one JSON object; a malformed or invalid answer is sent back with the problem, up to
    ``retries`` times, then :class:`EvolutionError` names the stage and the last problem."""
    messages = prompt.render(**fields)
    problem = ""
    for attempt in range(retries + 1):
        reply = await proc.complete(messages, prompt.stage)
        try:
            value = parse_object(reply.content)
            problem = (validate(value) if validate else None) or ""
        except ValueError as exc:
            problem = str(exc)
        if not problem:
            return value
        proc.emit("error", ErrorEvent(kind="model_output", stage=prompt.stage, message=problem, attempt=attempt + 1))
        messages = [
            *messages,
            {"role": "assistant", "content": reply.content or ""},
            {
                "role": "user",
                "content": f"That answer cannot be used: {problem}. Answer again with ONE valid JSON object.",
            },
        ]
    raise EvolutionError(prompt.stage, f"no usable answer after {retries + 1} attempts; last problem: {problem}")


async def ask_text(proc: "Process", prompt: "Prompt", fields: dict[str, Any], *, starts_with: str = "") -> str:
    """Ask for free text (markdown); one retry when it does not start with ``starts_with``."""
    messages = prompt.render(**fields)
    reply = await proc.complete(messages, prompt.stage)
    text = (reply.content or "").strip()
    if starts_with and not text.startswith(starts_with):
        messages = [
            *messages,
            {"role": "assistant", "content": text},
            {"role": "user", "content": f"The answer must start with '{starts_with}'. Answer again."},
        ]
        text = ((await proc.complete(messages, prompt.stage)).content or "").strip()
        if not text.startswith(starts_with):
            raise EvolutionError(prompt.stage, f"the answer does not start with {starts_with!r}")
    return text
