"""What a model's reply says: its thoughts and the actions it chose, or what is wrong with it.

A step's reply comes in one of two protocols: *native* tool calls (the thoughts as a JSON object in
the text), or the paper's JSON (thoughts and an ``action`` list in one object). :func:`read_reply`
reads either and raises :class:`MalformedReply` saying what the model got wrong (the loop shows it
to the model and counts it); :func:`parse_json_object`, :func:`thoughts_in` and :func:`planned_calls`
read stored replies the same way (a fork's and a resume's plan).
"""

from __future__ import annotations

import json
import re
from typing import Any

from tea_notebook.models.client import ModelReply, ToolCall


class MalformedReply(ValueError):
    """A reply the loop cannot act on; the message says what to do instead (the model reads it)."""


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a model's text (code fences and prose around it tolerated); ValueError
    when there is none."""
    cleaned = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip())
    start, end = cleaned.find("{"), cleaned.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object found")
    value = json.loads(cleaned[start : end + 1])
    if not isinstance(value, dict):
        raise ValueError("the JSON is not an object")
    return value


def thoughts_in(text: str) -> dict[str, str]:
    """The thoughts of a native-protocol reply's text: its JSON object's keys other than ``action``,
    or the whole text as ``thinking`` when it is not one."""
    try:
        return {k: str(v) for k, v in parse_json_object(text).items() if k != "action"}
    except ValueError:  # json.JSONDecodeError is one
        return {"thinking": text}


def read_reply(reply: ModelReply, native: bool) -> tuple[dict[str, str], list[ToolCall]]:
    """``(thoughts, actions)`` of a step's reply; :class:`MalformedReply` with what the model got wrong."""
    if native:
        return (thoughts_in(reply.content) if reply.content else {}), list(reply.tool_calls)
    if not reply.content:
        raise MalformedReply("the reply was empty; answer with the JSON object described in <output>")
    try:
        data = parse_json_object(reply.content)
    except ValueError as exc:
        raise MalformedReply(f"the reply is not valid JSON ({exc}); answer with ONLY the JSON object") from None
    thoughts = {k: str(v) for k, v in data.items() if k != "action"}
    raw = data.get("action") or []
    if not isinstance(raw, list):
        raise MalformedReply("'action' must be a list of {name, args}")
    calls = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or "name" not in item:
            raise MalformedReply(f"action {i + 1} must be an object with 'name' and 'args'")
        calls.append(ToolCall(f"json_{i}", str(item["name"]), item.get("args", {})))
    return thoughts, calls


def planned_calls(response: dict[str, Any]) -> list[ToolCall]:
    """The calls of a stored ``model_response``: its tool calls, or the paper's JSON action list in
    its text (leniently: items that are not actions are left out)."""
    made = [ToolCall(c["id"], c["name"], c.get("arguments")) for c in response.get("tool_calls") or []]
    if made or not response.get("content"):
        return made
    try:
        actions = parse_json_object(response["content"]).get("action") or []
    except ValueError:
        return []
    return [
        ToolCall(f"json_{i}", str(a["name"]), a.get("args", {}))
        for i, a in enumerate(actions if isinstance(actions, list) else [])
        if isinstance(a, dict) and "name" in a
    ]


__all__ = ["MalformedReply", "parse_json_object", "planned_calls", "read_reply", "thoughts_in"]
