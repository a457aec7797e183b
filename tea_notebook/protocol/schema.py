"""JSON Schemas of tool parameters and returns, derived from type hints and docstrings.

Docstrings in Google (``Args:``), NumPy (``Parameters`` + dashes) and reST (``:param x:``) style are
read for the summary and per-parameter descriptions. Pydantic builds the schema, so nested models,
dataclasses, ``Literal`` enums, ``Optional`` and lists come out as standard JSON Schema.
"""

from __future__ import annotations

import inspect
import itertools
import json
import re
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from tea_notebook.errors import SchemaError

if TYPE_CHECKING:
    from pydantic import BaseModel

_GOOGLE_SECTIONS = {
    "args": "params",
    "arguments": "params",
    "parameters": "params",
    "params": "params",
    "keyword args": "params",
    "keyword arguments": "params",
    "returns": "returns",
    "return": "returns",
    "yields": "returns",
    "raises": "other",
    "examples": "other",
    "example": "other",
    "notes": "other",
    "note": "other",
    "see also": "other",
    "attributes": "other",
    "references": "other",
}


@dataclass
class Docstring:
    """What a docstring says: a summary, per-parameter text and the return text."""

    summary: str = ""
    params: dict[str, str] = field(default_factory=dict)
    returns: str = ""


def parse_docstring(doc: str | None) -> Docstring:
    """Read a Google-, NumPy- or reST-style docstring."""
    out = Docstring()
    if not doc:
        return out
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    section: str | None = None
    current: str | None = None
    param_indent: int | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        rest = re.match(r"^:param\s+(?:[^:]*\s)?(\*{0,2}\w+)\s*:\s*(.*)$", stripped)
        if rest:
            section, current = "rest", rest.group(1).lstrip("*")
            out.params[current] = rest.group(2).strip()
            i += 1
            continue
        rest_ret = re.match(r"^:returns?\s*:\s*(.*)$", stripped)
        if rest_ret:
            section, current = "rest-returns", None
            out.returns = rest_ret.group(1).strip()
            i += 1
            continue
        if stripped.startswith(":") and section in ("rest", "rest-returns"):
            section, current = "other", None
            i += 1
            continue
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if stripped and nxt and set(nxt) == {"-"} and stripped.lower() in _GOOGLE_SECTIONS:
            section, current = "numpy-" + _GOOGLE_SECTIONS[stripped.lower()], None
            i += 2
            continue
        head = re.match(r"^([A-Za-z ]+):\s*$", stripped)
        if head and head.group(1).lower() in _GOOGLE_SECTIONS and not line.startswith(" "):
            section, current = "google-" + _GOOGLE_SECTIONS[head.group(1).lower()], None
            param_indent = None
            i += 1
            continue
        if section is None:
            summary.append(stripped)
        elif section == "google-params":
            m = re.match(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", stripped)
            indent = len(line) - len(line.lstrip())
            if stripped and param_indent is None:
                param_indent = indent
            if m and indent == param_indent:
                current = m.group(1).lstrip("*")
                out.params[current] = m.group(2).strip()
            elif current and stripped:
                out.params[current] = (out.params[current] + " " + stripped).strip()
        elif section == "numpy-params":
            m = re.match(r"^(\*{0,2}\w+)\s*(?::\s*.*)?$", stripped)
            if m and not line.startswith(" "):
                current = m.group(1).lstrip("*")
                out.params[current] = ""
            elif current and stripped:
                out.params[current] = (out.params[current] + " " + stripped).strip()
        elif section == "numpy-returns" and stripped and not line.startswith(" "):
            pass  # the type line of a NumPy "Returns" entry
        elif section in ("google-returns", "numpy-returns", "rest-returns"):
            if stripped:
                out.returns = (out.returns + " " + stripped).strip()
        elif section == "rest" and current and stripped:
            out.params[current] = (out.params[current] + " " + stripped).strip()
        i += 1
    out.summary = " ".join(p for p in " ".join(summary).split("  ") if p).strip()
    return out


def strip_titles(schema: Any) -> Any:
    """Drop pydantic's auto-generated ``title`` keys (noise for a model), keeping properties named title."""
    if isinstance(schema, list):
        return [strip_titles(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {k: strip_titles(v) for k, v in value.items()}
        else:
            out[key] = strip_titles(value)
    return out


def _is_context_param(annotation: Any) -> bool:
    from tea_notebook.protocol.context import ToolContext

    return annotation is ToolContext or (isinstance(annotation, str) and annotation.split(".")[-1] == "ToolContext")


@dataclass
class FunctionSchema:
    """Everything derived from a function's signature and docstring."""

    name: str
    description: str
    parameters: dict[str, Any]
    returns: dict[str, Any]
    args_model: type[BaseModel]
    context_param: str | None
    is_async: bool


def function_schema(fn: Callable[..., Any], name: str | None = None, description: str | None = None) -> FunctionSchema:
    """Build the JSON Schemas of ``fn``; raise :class:`SchemaError` naming the function and parameter."""
    # pydantic loads with the first tool made, not with the workspace
    from pydantic import ConfigDict, Field, TypeAdapter, create_model
    from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError

    fname: str = name or getattr(fn, "__name__", None) or repr(fn)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise SchemaError(fname, None, f"has no inspectable signature ({exc})") from None
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # noqa: BLE001 - unresolved forward references and friends
        raise SchemaError(fname, None, f"type hints cannot be resolved: {exc}") from None
    doc = parse_docstring(inspect.getdoc(fn))
    fields: dict[str, Any] = {}
    context_param = None
    for pname, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise SchemaError(fname, pname, "*args and **kwargs cannot be described to a model")
        if pname in ("self", "cls") and pname not in hints:
            continue
        if pname not in hints:
            raise SchemaError(fname, pname, "has no type hint; every tool parameter needs one")
        annotation = hints[pname]
        if _is_context_param(annotation):
            context_param = pname
            continue
        try:
            TypeAdapter(annotation).json_schema()
        except (PydanticSchemaGenerationError, PydanticUserError, TypeError, ValueError) as exc:
            reason = str(exc).splitlines()[0]
            raise SchemaError(
                fname, pname, f"type {annotation!r} cannot be expressed as JSON Schema ({reason})"
            ) from None
        desc = doc.params.get(pname) or None
        default = ... if param.default is inspect.Parameter.empty else param.default
        if pname.startswith(("_", "model_")):
            # pydantic reserves these names (model_config, private attributes): store the field
            # under another name; schema and validation still use the parameter's name (alias).
            fields[f"param_{len(fields)}"] = (annotation, Field(default, description=desc, alias=pname))
        else:
            fields[pname] = (annotation, Field(default, description=desc))
    unknown = sorted(set(doc.params) - set(sig.parameters))
    if unknown:
        raise SchemaError(fname, unknown[0], "is described in the docstring but is not a parameter of the function")
    try:
        model = create_model(f"{fname}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        parameters = strip_titles(model.model_json_schema())
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError, ValueError) as exc:
        raise SchemaError(fname, None, f"parameters cannot be expressed as JSON Schema ({exc})") from None
    parameters.setdefault("properties", {})
    parameters["additionalProperties"] = False
    returns: dict[str, Any] = {}
    ret = hints.get("return", inspect.Signature.empty)
    if ret is not inspect.Signature.empty:
        try:
            returns = strip_titles(TypeAdapter(ret).json_schema())
        except (PydanticSchemaGenerationError, PydanticUserError, TypeError, ValueError) as exc:
            raise SchemaError(fname, "return", f"type {ret!r} cannot be expressed as JSON Schema ({exc})") from None
        if doc.returns:
            returns["description"] = doc.returns
    description = description or doc.summary
    if not description:
        raise SchemaError(fname, None, "has no docstring; the first line tells the model what the tool does")
    return FunctionSchema(
        name=fname,
        description=description,
        parameters=parameters,
        returns=returns,
        args_model=model,
        context_param=context_param,
        is_async=inspect.iscoroutinefunction(fn),
    )


# -- explaining invalid arguments ----------------------------------------------------------------
MAX_LISTED_PROBLEMS = 12
"""At most this many problems are listed in one validation error (the rest are counted)."""
MAX_COUNTED_PROBLEMS = 1000
"""Schema errors are read up to this many (a huge hostile value is not explained item by item)."""
MAX_MESSAGE = 3500
"""Characters of a validation error's message, at most (whatever a model sends)."""

_JSON_TYPES = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string"}
_PHRASES = {
    "minimum": "a number ≥ {}",
    "maximum": "a number ≤ {}",
    "exclusiveMinimum": "a number > {}",
    "exclusiveMaximum": "a number < {}",
    "multipleOf": "a multiple of {}",
    "minLength": "at least {} characters",
    "maxLength": "at most {} characters",
    "pattern": "a string matching the pattern {}",
    "format": "a string in {} format",
    "minItems": "at least {} items",
    "maxItems": "at most {} items",
    "uniqueItems": "items without duplicates",
    "minProperties": "at least {} fields",
    "maxProperties": "at most {} fields",
}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_type(value: Any) -> str:
    """The JSON Schema type name of a Python value (``array``, ``object``, ``string`` …)."""
    for kind, name in _JSON_TYPES.items():
        if type(value) is kind:
            return name
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _short_json(value: Any, budget: int, depth: int = 0) -> str:
    """JSON text of ``value``, built from at most a few items per level (the cost stays small for a
    value of any size; the caller clips the text)."""
    if isinstance(value, str):
        return json.dumps(value[: budget + 1], ensure_ascii=False)
    if isinstance(value, dict):
        if depth > 3:
            return "{…}"
        first = list(value.items())[:6]
        items = [f"{_short_json(str(k), budget)}: {_short_json(v, budget, depth + 1)}" for k, v in first]
        return "{" + ", ".join(items) + (", …" if len(value) > 6 else "") + "}"
    if isinstance(value, (list, tuple)):
        if depth > 3:
            return "[…]"
        items = [_short_json(v, budget, depth + 1) for v in list(value[:6])]
        return "[" + ", ".join(items) + (", …" if len(value) > 6 else "") + "]"
    try:
        return json.dumps(value, default=repr)
    except (TypeError, ValueError):
        return repr(value)[:budget]


def describe_value(value: Any, limit: int = 48) -> str:
    """A short description of a value a model sent: its JSON type and a clipped JSON rendering
    (``string "one"``, ``array [1, 2]``, ``null``); bounded in size and cost whatever the value."""
    if value is None:
        return "null"
    return f"{json_type(value)} {_clip(_short_json(value, limit), limit)}"


def _field_path(parts: Any) -> str:
    """``order.items[2].name``: keys joined by dots, array positions in brackets; odd or long keys
    (a model chose them) quoted and clipped."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier() and len(part) <= 64:
            out += f".{part}" if out else part
        else:
            out += f"[{_clip(json.dumps(str(part), ensure_ascii=False), 64)}]"
    return out or "(arguments)"


def _schema_label(schema: Any, root: dict[str, Any], depth: int = 0) -> str:
    """What a (sub)schema accepts, in a few words: ``integer``, ``Order (object)``, ``one of "a", "b"``."""
    if not isinstance(schema, dict) or depth > 4:
        return "a value"
    if "const" in schema:
        return _clip(json.dumps(schema["const"], ensure_ascii=False, default=repr), 60)
    if "enum" in schema:
        values = (json.dumps(v, ensure_ascii=False, default=repr) for v in schema["enum"][:20])
        return "one of " + _clip(", ".join(values), 120)
    if "$ref" in schema:
        ref = str(schema["$ref"])
        name = ref.rsplit("/", 1)[-1]
        target = root.get("$defs", {}).get(name) if ref.startswith("#/$defs/") else None
        kind = target.get("type") if isinstance(target, dict) else None
        return f"{name} ({kind})" if isinstance(kind, str) else name
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " or ".join(_schema_label(s, root, depth + 1) for s in schema[key])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(map(str, kind))
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array of {_schema_label(schema['items'], root, depth + 1)}"
    return str(kind) if isinstance(kind, str) else "a value"


@dataclass
class ArgumentProblem:
    """One bad argument: where (``field``), what the schema wanted, what the model sent."""

    field: str
    expected: Any
    got: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        """``{field, expected, got, message}``."""
        return {"field": self.field, "expected": self.expected, "got": self.got, "message": self.message}


def _fits_shape(errors: list[Any]) -> bool:
    """Whether an ``anyOf`` branch matched the value's shape (its errors are all further inside)."""
    return not any(e.validator in ("type", "enum", "const") and not e.path for e in errors)


def _problems(error: Any, root: dict[str, Any]) -> list[tuple[list[Any], ArgumentProblem]]:
    """Turn one jsonschema error into ``(path, problem)`` pairs a model should read (one per field
    of a missing or unknown group, the inner errors of the one alternative that fits for ``anyOf``)."""
    path = list(error.absolute_path)
    where = _field_path(path)
    kind = error.validator
    if kind == "required":
        instance = error.instance if isinstance(error.instance, dict) else {}
        missing = [p for p in error.validator_value if p not in instance]
        return [
            (
                [*path, name],
                ArgumentProblem(
                    _field_path([*path, name]),
                    "a value (required)",
                    "nothing",
                    f"argument '{_field_path([*path, name])}': missing; it is required",
                ),
            )
            for name in missing
        ]
    if kind == "additionalProperties":
        instance = error.instance if isinstance(error.instance, dict) else {}
        known = list(error.schema.get("properties", {}))
        patterns = list(error.schema.get("patternProperties", {}))
        extra = [k for k in instance if k not in known and not any(re.search(p, k) for p in patterns)]
        allowed = _clip(", ".join(known[:12]) + (", …" if len(known) > 12 else ""), 160)
        if path:
            what = f"not a field of '{where}'"
            hint = f"; its fields are: {allowed}" if known else "; it takes no fields"
        else:
            what = "not an argument of this tool"
            hint = f"; the accepted arguments here are: {allowed}" if known else "; it takes no arguments"
        return [
            (
                [*path, key],
                ArgumentProblem(
                    _field_path([*path, key]),
                    "no such field",
                    describe_value(instance[key]),
                    f"argument '{_field_path([*path, key])}': {what}{hint}",
                ),
            )
            for key in extra
        ]
    if kind in ("anyOf", "oneOf") and error.context:
        branches: dict[Any, list[Any]] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        fitting = [errs for errs in branches.values() if _fits_shape(errs)]
        if len(fitting) == 1 and len(branches) == len(error.validator_value):
            return [p for sub in fitting[0] for p in _problems(sub, root)]
    got = describe_value(error.instance)
    if kind == "type":
        expected: Any = error.validator_value
        wanted = " or ".join(expected) if isinstance(expected, list) else str(expected)
    elif kind == "enum":
        expected = error.validator_value
        wanted = _schema_label({"enum": expected}, root)
    elif kind == "const":
        expected = error.validator_value
        wanted = _schema_label({"const": expected}, root)
    elif kind in ("anyOf", "oneOf"):
        wanted = expected = _schema_label({kind: error.validator_value}, root)
        if kind == "oneOf" and not error.context:
            wanted = expected = f"exactly one of: {expected} (it matches several)"
    elif kind in _PHRASES:
        value = json.dumps(error.validator_value, ensure_ascii=False, default=repr)
        wanted = expected = _PHRASES[kind].format(_clip(value, 80))
    elif kind is None:  # a ``false`` subschema: nothing is accepted here
        wanted = expected = "no value (the schema forbids one here)"
    else:
        wanted = expected = f"{kind} {_clip(json.dumps(error.validator_value, default=repr), 80)}"
    return [(path, ArgumentProblem(where, expected, got, f"argument '{where}': expected {wanted}, got {got}"))]


def argument_problems(validator: Any, args: Any) -> list[ArgumentProblem]:
    """Every way ``args`` breaks the schema of ``validator`` (a jsonschema validator), one problem
    per bad field, grouped by top-level argument in schema order (unknown ones last); [] when valid."""
    errors = iter(validator.iter_errors(args))
    first = next(errors, None)
    if first is None:  # valid (every call of a tool that was called right): nothing more to work out
        return []
    root = validator.schema if isinstance(validator.schema, dict) else {}
    order = {name: i for i, name in enumerate(root.get("properties", {}))}
    seen: set[tuple[str, str]] = set()
    out: list[tuple[tuple[int, int], ArgumentProblem]] = []
    for n, error in enumerate(itertools.chain((first,), errors)):
        if n >= MAX_COUNTED_PROBLEMS:
            break
        for path, problem in _problems(error, root):
            key = (problem.field, str(problem.expected))
            if key in seen:
                continue
            seen.add(key)
            head = order.get(path[0], len(order)) if path else -1
            out.append(((head, len(path)), problem))
    out.sort(key=lambda item: item[0])
    return [p for _, p in out]


def arguments_problem(schema: dict[str, Any], args: Any) -> str | None:
    """One message naming every way ``args`` breaks ``schema`` (a JSON Schema), or None when valid."""
    if not isinstance(args, dict):
        return not_an_object(schema, args).message
    problems = argument_problems(ArgumentValidator(schema), args)
    return validation_error(problems)["message"] if problems else None


class ArgumentValidator:
    """A JSON Schema (Draft 2020-12) validator of tool arguments that imports jsonschema only when
    it has something to report.

    Where JupyterLab is installed, ``import jsonschema`` costs over a second (its format checkers
    pull in ``rfc3987_syntax``, which builds a grammar at import). A first check that covers the
    keywords tool schemas use (type, properties, required, additionalProperties, items, enum,
    const, anyOf, allOf, local ``$ref``, bounds and lengths) accepts arguments it can prove valid;
    anything else (a violation, a keyword it does not know, a malformed schema) goes to jsonschema's
    ``Draft202012Validator``, so every error, and every exception of a broken schema, is jsonschema's
    own. Same interface as that validator for :func:`argument_problems`: ``schema`` and
    ``iter_errors``.
    """

    def __init__(self, schema: Any):
        self.schema = schema
        self._full: Any = None
        # the usual tool schema (an object of typed fields) checked by a few set lookups, made once
        self._flat = _flat_check(schema)

    def iter_errors(self, instance: Any) -> Any:
        """jsonschema's errors of ``instance`` (none, without importing jsonschema, when the first
        check proves it valid)."""
        if self._flat is not None and self._flat(instance):
            return iter(())
        try:
            if _fits(self.schema, instance, self.schema, 0):
                return iter(())
        except _Unsure:
            pass
        return self.jsonschema().iter_errors(instance)

    def jsonschema(self) -> Any:
        """The full ``jsonschema.Draft202012Validator`` of this schema (imported on first need)."""
        if self._full is None:
            from jsonschema import Draft202012Validator

            self._full = Draft202012Validator(self.schema)
        return self._full


_PYTHON_TYPES: dict[str, frozenset[type]] = {
    "null": frozenset({type(None)}),
    "boolean": frozenset({bool}),
    "integer": frozenset({int}),
    "number": frozenset({int, float}),
    "string": frozenset({str}),
    "array": frozenset({list}),
    "object": frozenset({dict}),
}
_FLAT_KEYS = frozenset({"type", "properties", "required", "additionalProperties"})


def _flat_check(schema: Any) -> Callable[[Any], bool] | None:
    """A check of the usual tool schema made once (an object whose fields have a ``type`` and
    annotations only; ``required``; ``additionalProperties`` true or false): True means valid, as
    :func:`_fits` would find it, at the cost of a few set lookups a field. False proves nothing (the
    full check decides). None for any other schema."""
    if type(schema) is not dict or schema.get("type") != "object":
        return None
    if any(key not in _FLAT_KEYS and key not in _ANNOTATIONS for key in schema):
        return None
    properties, required = schema.get("properties", {}), schema.get("required", [])
    extras_allowed = schema.get("additionalProperties", True)
    if type(properties) is not dict or type(required) is not list or type(extras_allowed) is not bool:
        return None
    if any(type(name) is not str for name in required):
        return None
    allowed: dict[str, frozenset[type]] = {}
    for name, sub in properties.items():
        if type(sub) is not dict or any(key != "type" and key not in _ANNOTATIONS for key in sub):
            return None
        names = sub.get("type", list(_PYTHON_TYPES))
        names = names if type(names) is list else [names]
        if not names or any(type(n) is not str or n not in _PYTHON_TYPES for n in names):
            return None
        allowed[name] = frozenset().union(*(_PYTHON_TYPES[n] for n in names))
    needed = tuple(required)

    def check(instance: Any) -> bool:
        if type(instance) is not dict:
            return False
        for name in needed:
            if name not in instance:
                return False
        for name, value in instance.items():
            types = allowed.get(name)
            if types is None:
                if not extras_allowed:
                    return False
            elif type(value) not in types:
                return False
        return True

    return check


class _Unsure(Exception):
    """The first check cannot decide (a keyword it does not cover, a malformed schema): ask jsonschema."""


# keywords that never fail validation under Draft202012Validator without a format checker
_ANNOTATIONS = frozenset(
    {
        "title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
        "writeOnly", "format", "contentMediaType", "contentEncoding", "contentSchema", "$defs",
        "definitions",
    }
)  # fmt: skip
_MAX_DEPTH = 64


def _kind(value: Any) -> str:
    """The JSON type of a value as parsed from JSON (exact Python types only; anything else is unsure)."""
    kind = _KINDS.get(type(value))
    if kind is None:
        raise _Unsure
    return kind


_KINDS = {
    type(None): "null",
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}
_TYPE_NAMES = frozenset({"null", "boolean", "integer", "number", "string", "array", "object"})


def _same(a: Any, b: Any) -> bool:
    """Equal as jsonschema compares (``true`` is not ``1``, ``1`` is ``1.0``), where that is certain."""
    ta, tb = type(a), type(b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta in (int, float) and tb in (int, float):
        return a == b
    if ta is str and tb is str:
        return a == b
    if a is None and b is None:
        return True
    if ta is list and tb is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if ta is dict and tb is dict:
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return False


def _number(value: Any) -> Any:
    if type(value) not in (int, float):
        raise _Unsure
    return value


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise _Unsure
    return value


def _resolve(ref: Any, root: Any) -> Any:
    """The subschema a local ``#/...`` JSON pointer names in the root schema."""
    from urllib.parse import unquote

    if type(ref) is not str or not (ref == "#" or ref.startswith("#/")) or type(root) is not dict:
        raise _Unsure
    target: Any = root
    for part in ref[2:].split("/") if ref != "#" else ():
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if type(target) is not dict or part not in target:
            raise _Unsure
        target = target[part]
    return target


def _fits(schema: Any, instance: Any, root: Any, depth: int) -> bool:
    """Whether ``instance`` is valid under ``schema``. Every keyword is evaluated (as jsonschema
    does), so a False is jsonschema's verdict too, not a guess; :class:`_Unsure` otherwise."""
    if schema is True:
        return True
    if schema is False:
        return False
    if type(schema) is not dict or depth > _MAX_DEPTH:
        raise _Unsure
    kind = _kind(instance)
    ok = True
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key == "type":
            names = value if type(value) is list else [value]
            if not names or any(type(n) is not str or n not in _TYPE_NAMES for n in names):
                raise _Unsure
            ok &= kind in names or (kind == "integer" and "number" in names)
        elif key == "properties":
            if type(value) is not dict:
                raise _Unsure
            if kind == "object":
                for name, sub in value.items():
                    if name in instance:
                        ok &= _fits(sub, instance[name], root, depth + 1)
        elif key == "required":
            if type(value) is not list or any(type(n) is not str for n in value):
                raise _Unsure
            if kind == "object":
                ok &= all(name in instance for name in value)
        elif key == "additionalProperties":
            if "patternProperties" in schema:
                raise _Unsure
            if kind == "object":
                known = schema.get("properties", {})
                if type(known) is not dict:
                    raise _Unsure
                extras = [name for name in instance if name not in known]
                if type(value) is dict:
                    for name in extras:
                        ok &= _fits(value, instance[name], root, depth + 1)
                elif type(value) is bool:
                    ok &= value or not extras
                else:
                    raise _Unsure
        elif key == "items":
            if "prefixItems" in schema or type(value) not in (dict, bool):
                raise _Unsure
            if kind == "array":
                for item in instance:
                    ok &= _fits(value, item, root, depth + 1)
        elif key == "enum":
            if type(value) is not list:
                raise _Unsure
            ok &= any(_same(choice, instance) for choice in value)
        elif key == "const":
            ok &= _same(value, instance)
        elif key in ("anyOf", "allOf"):
            if type(value) is not list or not value:
                raise _Unsure
            if key == "allOf":
                for sub in value:
                    ok &= _fits(sub, instance, root, depth + 1)
            else:  # in order, up to the first branch that fits, as jsonschema does
                ok &= any(_fits(sub, instance, root, depth + 1) for sub in value)
        elif key == "$ref":
            ok &= _fits(_resolve(value, root), instance, root, depth + 1)
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            bound = _number(value)
            if kind in ("integer", "number"):
                if key == "minimum":
                    ok &= instance >= bound
                elif key == "maximum":
                    ok &= instance <= bound
                elif key == "exclusiveMinimum":
                    ok &= instance > bound
                else:
                    ok &= instance < bound
        elif key in ("minLength", "maxLength"):
            limit = _count(value)
            if kind == "string":
                ok &= len(instance) >= limit if key == "minLength" else len(instance) <= limit
        elif key in ("minItems", "maxItems"):
            limit = _count(value)
            if kind == "array":
                ok &= len(instance) >= limit if key == "minItems" else len(instance) <= limit
        else:  # a keyword this check does not cover ($id, pattern, oneOf, not, if, ...)
            raise _Unsure
    return ok


def not_an_object(schema: dict[str, Any] | None, args: Any) -> ArgumentProblem:
    """The problem of arguments that are not a JSON object at all (a list, a string, a number)."""
    names = list((schema or {}).get("properties", {}))
    listed = _clip(", ".join(names[:12]) + (", …" if len(names) > 12 else ""), 160)
    shape = f" with the named arguments {listed}" if names else ""
    got = describe_value(args)
    return ArgumentProblem("(arguments)", "object", got, f"the arguments must be one JSON object{shape}; got {got}")


def validation_error(problems: list[ArgumentProblem]) -> dict[str, Any]:
    """The structured error of a call with bad arguments: ``type`` ``ValidationError``, every
    problem in ``errors`` (``[{field, expected, got, message}]``), the first one's ``field``,
    ``expected`` and ``got`` at the top (for a quick look), and a one-paragraph ``message``
    listing them all so the model can fix every field in its next call."""
    listed = problems[:MAX_LISTED_PROBLEMS]
    first = problems[0]
    if len(problems) == 1:
        message = first.message
    else:
        parts = "; ".join(f"({i}) {p.message}" for i, p in enumerate(listed, 1))
        more = len(problems) - len(listed)
        at_least = "at least " if len(problems) >= MAX_COUNTED_PROBLEMS else ""
        tail = f"; … and {at_least}{more} more" if more else ""
        message = f"{len(problems)} problems with the arguments; fix all of them in the next call: {parts}{tail}."
    message = _clip(message, MAX_MESSAGE)
    return {
        "type": "ValidationError",
        "field": first.field,
        "expected": first.expected,
        "got": first.got,
        "errors": [p.as_dict() for p in listed],
        "count": len(problems),
        "message": message,
    }
