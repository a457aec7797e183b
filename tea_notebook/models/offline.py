"""Offline models: scripted, test, demo and replayed. No network, no LLM.

Each is a function of the chat messages and the offered tools that returns one assistant turn
``{"content": str | None, "tool_calls": [{"id", "name", "arguments"}]}``. They are served to
litellm by the ``tea`` custom provider (``models.provider``), so agents reach them through the
same code path as real models: ``tea/test``, ``tea/demo``, ``tea/replay:PATH`` and
``tea/script:NAME`` for a :class:`ScriptedModel` built in Python.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import re
import threading
from pathlib import Path
from typing import Any, Callable, Iterable

from tea_notebook.errors import TeaError

Turn = dict[str, Any]


class ReplayDivergence(TeaError):
    """A replayed run sent a request that differs from the recorded one."""


class ScriptExhausted(TeaError):
    """A scripted model was asked for more turns than its script has."""


class ScriptError(TeaError):
    """A script item or a script function that is not a valid turn (or that raised)."""


def call(name: str, /, **arguments: Any) -> Turn:
    """One tool call, for scripts: ``call("add", a=1, b=2)``."""
    return {"name": name, "arguments": arguments}


def _as_turn(item: Any) -> Turn:
    """Normalise a script item: text, a call, a list of calls, or a full turn dict."""
    if isinstance(item, str):
        return {"content": item, "tool_calls": []}
    if isinstance(item, list):
        return {"content": None, "tool_calls": [_as_call(c) for c in item]}
    if isinstance(item, dict) and "name" in item and "arguments" in item:
        return {"content": None, "tool_calls": [_as_call(item)]}
    if isinstance(item, dict):
        turn = {"content": item.get("content"), "tool_calls": [_as_call(c) for c in item.get("tool_calls", [])]}
        if item.get("usage"):
            turn["usage"] = dict(item["usage"])
        return turn
    raise ScriptError(f"a script item must be text, a call(...) or a list of calls, not {type(item).__name__}")


_ids = itertools.count(1)


def _as_call(c: dict[str, Any]) -> dict[str, Any]:
    args = c.get("arguments", {})
    return {
        "id": c.get("id") or f"call_{next(_ids)}",
        "name": c["name"],
        "arguments": args if isinstance(args, str) else json.dumps(args),
    }


class ScriptedModel:
    """Replies from a list (one item per model call) or from a function ``f(messages, tools) -> item``.

    Items are text, ``call(name, **args)``, a list of calls, or ``{"content", "tool_calls"}``.
    Use ``model.name`` (``tea/script:ID``) wherever a model name goes.
    """

    _registry: dict[str, "ScriptedModel"] = {}
    _lock = threading.Lock()
    _counter = itertools.count(1)

    def __init__(self, script: Iterable[Any] | Callable[[list[dict], list[dict]], Any], name: str | None = None):
        self._fn = script if callable(script) else None
        self._items: list[Any] = [] if callable(script) else list(script)
        self.calls: list[list[dict]] = []
        with self._lock:
            if name is None:
                name = f"s{next(self._counter)}"
                while name in self._registry:
                    name = f"s{next(self._counter)}"
            self.id = name
            self._registry[self.id] = self

    @property
    def name(self) -> str:
        """The litellm model name that reaches this script."""
        return f"tea/script:{self.id}"

    @classmethod
    def get(cls, script_id: str) -> "ScriptedModel":
        try:
            return cls._registry[script_id]
        except KeyError:
            raise TeaError(f"no scripted model {script_id!r} in this process") from None

    def respond(self, messages: list[dict], tools: list[dict]) -> Turn:
        """The next turn."""
        self.calls.append(messages)
        if self._fn is not None:
            try:
                item = self._fn(messages, tools)
            except TeaError:
                raise
            except Exception as exc:  # noqa: BLE001 - a broken script is the script's error, not the network's
                if type(exc).__module__.startswith("litellm"):
                    raise  # scripted provider errors (rate limits…) keep their litellm type
                raise ScriptError(f"the script function of {self.id!r} raised {type(exc).__name__}: {exc}") from exc
            return _as_turn(item)
        index = len(self.calls) - 1
        if index >= len(self._items):
            raise ScriptExhausted(
                f"scripted model {self.id!r} has {len(self._items)} turns; turn {index + 1} was asked for"
            )
        return _as_turn(self._items[index])


def example_value(schema: dict[str, Any], name: str = "x", defs: dict | None = None, depth: int = 0) -> Any:
    """A value that satisfies a JSON Schema (what pydantic-ai's TestModel does for arguments).

    Honours enums, consts, defaults, numeric bounds, string and array lengths, tuples
    (``prefixItems``) and ``$ref``; deep inside recursive models arrays are left empty so they end.
    """
    defs = defs if defs is not None else schema.get("$defs", {})
    if depth > 12:
        return None
    if "$ref" in schema:
        return example_value(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), name, defs, depth + 1)
    if "default" in schema:
        return schema["default"]
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return example_value(options[0], name, defs, depth + 1)
    if "allOf" in schema and schema["allOf"]:
        return example_value(schema["allOf"][0], name, defs, depth + 1)
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        props = schema.get("properties", {})
        required = schema.get("required", list(props))
        return {k: example_value(v, k, defs, depth + 1) for k, v in props.items() if k in required}
    if kind == "array":
        if "prefixItems" in schema:
            return [example_value(item, name, defs, depth + 1) for item in schema["prefixItems"]]
        # one example item shows the tool something real; deep inside recursive models, none
        count = int(schema.get("minItems", 0 if depth > 3 else 1))
        if "maxItems" in schema:
            count = min(count, int(schema["maxItems"]))
        item_schema = schema.get("items", {})
        if schema.get("uniqueItems") and count > 1:
            return [_distinct(item_schema, i, name, defs, depth) for i in range(count)]
        return [example_value(item_schema, name, defs, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        return _number(schema, kind)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    text = f"example {name}"
    low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
    text = text.ljust(low, "x")
    return text[: int(high)] if high is not None else text


def _number(schema: dict[str, Any], kind: str) -> int | float:
    """1 when the bounds allow it, otherwise the nearest value inside them."""
    step = 1 if kind == "integer" else 0.5
    value: float = 1
    if "minimum" in schema and value < schema["minimum"]:
        value = schema["minimum"]
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        value = schema["exclusiveMinimum"] + step
    if "maximum" in schema and value > schema["maximum"]:
        value = schema["maximum"]
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        value = schema["exclusiveMaximum"] - step
    if "multipleOf" in schema:
        m = schema["multipleOf"]
        value = m * max(1, -(-value // m))
    return int(value) if kind == "integer" else float(value)


def _distinct(item_schema: dict[str, Any], i: int, name: str, defs: dict, depth: int) -> Any:
    base = example_value(item_schema, name, defs, depth + 1)
    if isinstance(base, bool):
        return [True, False][i % 2]
    if isinstance(base, (int, float)):
        return base + i
    return f"{base} {i}" if isinstance(base, str) else base


def _tool_names(tools: list[dict]) -> list[str]:
    return [t["function"]["name"] for t in tools]


_HISTORY_LINE = re.compile(r"^\[([A-Za-z0-9_\-]+)\] (.*?) -> (.*)$", re.M)


def history_calls(messages: list[dict]) -> list[tuple[str, str, str]]:
    """``(tool, arguments, result)`` of every action in the prompt's ``<agent_history>``, oldest first,
    plus any native tool-call / tool-result messages in the conversation."""
    out: list[tuple[str, str, str]] = []
    for m in messages:
        content = m.get("content")
        if m.get("role") == "user" and isinstance(content, str) and "<agent_history>" in content:
            block = content.split("<agent_history>", 1)[1].split("</agent_history>", 1)[0]
            out += [(a, b, c) for a, b, c in _HISTORY_LINE.findall(block)]
        if m.get("role") == "tool":
            out.append((m.get("name", ""), "", str(content)))
    return out


def _called_already(messages: list[dict]) -> set[str]:
    return {name for name, _, _ in history_calls(messages)}


class TestModel:
    """Calls every offered tool once with schema-valid arguments, one per turn, then calls ``done``
    (or answers in text when no ``done`` tool is offered). ``tea/test``."""

    __test__ = False  # not a pytest class

    def respond(self, messages: list[dict], tools: list[dict]) -> Turn:
        used = _called_already(messages)
        for tool in tools:
            fn = tool["function"]
            if fn["name"] != "done" and fn["name"] not in used:
                return {
                    "content": None,
                    "tool_calls": [
                        _as_call({"name": fn["name"], "arguments": example_value(fn.get("parameters", {}))})
                    ],
                }
        summary = f"(tea/test, scripted) called {len(used - {'done'})} tool(s)"
        if "done" in _tool_names(tools):
            return {
                "content": None,
                "tool_calls": [_as_call(call("done", success=True, text=summary, files_to_display=[]))],
            }
        return {"content": summary, "tool_calls": []}


class DemoModel:
    """The offline demo model (``tea/demo``): picks the offered tool whose name and description share
    most words with the task, fills its arguments from numbers and quoted text in the task, calls it,
    then reports the result with ``done``. It is a script, not an LLM, and says so.

    It never calls a tool that runs code or changes data (a ``code``/``script``/``command``
    parameter, or a ``run``/``exec``/``write``/``delete`` action such as ``kernel_run``): the task
    text is English, not code, and the person's data is not the demo's to change. It cannot tell
    whether a result answers the task, so its ``done`` never claims more than the tool returned
    (the agent loop records such a run as ``unverified``), and a failed tool is reported as failed.
    """

    label = "tea/demo (offline demo model: scripted, not an LLM — set TEA_MODEL or pass model= for a real one)"

    def respond(self, messages: list[dict], tools: list[dict]) -> Turn:
        task = _task_text(messages)
        offered = [t["function"] for t in tools if t["function"]["name"] != "done" and _harmless(t["function"])]
        results = [r for _, _, r in history_calls(messages)]
        words = set(re.findall(r"[a-z]+", task.lower()))

        def overlap(fn: dict) -> int:
            text = f"{fn['name'].replace('_', ' ')} {fn.get('description', '')}".lower()
            return len(words & set(re.findall(r"[a-z]+", text)))

        matching = [fn for fn in offered if overlap(fn) > 0]
        if results or not matching:
            if results:
                text, ok = results[-1], not _is_error(results[-1])
            elif offered:
                text, ok = "None of the offered tools matches the task, and the demo model cannot do it itself.", False
            else:
                text, ok = "I have no tools to use for this task.", False
            if "done" in _tool_names(tools):
                return {
                    "content": None,
                    "tool_calls": [
                        _as_call(call("done", success=ok, text=f"{text}\n\n— {self.label}", files_to_display=[]))
                    ],
                }
            return {"content": f"{text}\n\n— {self.label}", "tool_calls": []}
        best = max(matching, key=overlap)
        return {
            "content": None,
            "tool_calls": [_as_call({"name": best["name"], "arguments": _fill(best.get("parameters", {}), task)})],
        }


# what the demo model never calls: tools that run code or change data
_CODE_PARAMETERS = frozenset({"code", "source", "script", "command", "cmd", "python", "sql", "shell", "program"})
_CHANGING_ACTION = re.compile(r"(?:^|_)(?:run|exec|execute|eval|write|delete|remove|drop|kill)(?:_|$)")


def _harmless(fn: dict) -> bool:
    """True when a tool takes no code-like argument and its name is not a run / write / delete action."""
    props = (fn.get("parameters") or {}).get("properties") or {}
    return not (set(props) & _CODE_PARAMETERS) and not _CHANGING_ACTION.search(fn["name"].lower())


def _is_error(observation: str) -> bool:
    """Whether a tool's observation reports a failure (``Error (Type): …``, ``Error: …``)."""
    return observation.lstrip().startswith("Error")


def _task_text(messages: list[dict]) -> str:
    for m in messages:
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            found = re.search(r"<task>(.*?)</task>", m["content"], re.S)
            return found.group(1).strip() if found else m["content"]
    return ""


def _fill(schema: dict[str, Any], task: str) -> dict[str, Any]:
    numbers = iter(re.findall(r"-?\d+(?:\.\d+)?", task))
    quoted = iter(re.findall(r"(?:^|(?<=[\s(:]))[\"'“‘](.+?)[\"'”’](?=[\s.,;:!?)]|$)", task))
    out = {}
    props = schema.get("properties", {})
    for pname in schema.get("required", list(props)):
        p = props.get(pname, {})
        kind = p.get("type")
        if kind in ("integer", "number"):
            raw = next(numbers, None)
            out[pname] = (
                (int(float(raw)) if kind == "integer" else float(raw)) if raw is not None else example_value(p, pname)
            )
        elif kind == "string" and "enum" not in p:
            out[pname] = next(quoted, None) or task
        else:
            out[pname] = example_value(p, pname)
    return out


# -- record / replay ----------------------------------------------------------------------
def request_key(messages: list[dict], tools: list[dict] | None) -> str:
    """What identifies a request in a cassette: messages and tool schemas, not the model name."""
    blob = json.dumps({"messages": messages, "tools": tools or []}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class Cassette:
    """A JSONL file of recorded model calls, replayed in order (``tea/replay:PATH``)."""

    _open: dict[str, "Cassette"] = {}
    _lock = threading.Lock()

    def __init__(self, path: Path):
        self.path = path
        self.cursor = 0
        self.entries: list[dict] = []
        if path.exists():
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if line.strip():
                    try:
                        self.entries.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise TeaError(f"cassette {path} line {n} is not JSON: {exc}") from None

    @classmethod
    def open(cls, path: str | Path) -> "Cassette":
        """The shared cassette object for a path (reloaded when the file changed)."""
        p = Path(path).expanduser().resolve()
        with cls._lock:
            stamp = (p.stat().st_mtime_ns, p.stat().st_size) if p.exists() else None
            cached = cls._open.get(str(p))
            if cached is None or getattr(cached, "_stamp", None) != stamp:
                cached = cls(p)
                cached._stamp = stamp  # type: ignore[attr-defined]
                cls._open[str(p)] = cached
            return cached

    def record(self, messages: list[dict], tools: list[dict] | None, model: str, turn: Turn, usage: dict) -> None:
        """Append one call."""
        entry = {
            "key": request_key(messages, tools),
            "model": model,
            "messages": messages,
            "tools": tools or [],
            "turn": turn,
            "usage": usage,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(entry, default=str) + "\n")
        self.entries.append(entry)

    def respond(self, messages: list[dict], tools: list[dict]) -> Turn:
        """The recorded turn for this request; a clear diff when the request diverges."""
        if not self.entries:
            raise ReplayDivergence(f"cassette {self.path} is empty or missing; record it first (record=True)")
        key = request_key(messages, tools)
        with self._lock:
            if self.cursor < len(self.entries) and self.entries[self.cursor]["key"] == key:
                entry = self.entries[self.cursor]
                self.cursor += 1
            elif self.entries[0]["key"] == key:  # the run is being replayed again from the start
                entry = self.entries[0]
                self.cursor = 1
            else:
                # after a finished replay, a new run starts at the first recorded call
                at = 0 if self.cursor >= len(self.entries) else self.cursor
                raise ReplayDivergence(_divergence(self.path, at, self.entries[at], messages, tools))
        turn = dict(entry["turn"])
        turn["usage"] = entry.get("usage", {})
        return turn


def _divergence(path: Path, cursor: int, expected: dict, messages: list[dict], tools: list[dict] | None) -> str:
    def lines(msgs: list[dict], tls: list[dict] | None) -> list[str]:
        return json.dumps({"messages": msgs, "tools": tls or []}, indent=1, sort_keys=True).splitlines()

    diff = difflib.unified_diff(
        lines(expected["messages"], expected["tools"]), lines(messages, tools), "recorded", "this run", lineterm="", n=2
    )
    shown = "\n".join(list(diff)[:60])
    return f"replay of {path} diverged at call {cursor + 1}: the request differs from the recording\n{shown}"
