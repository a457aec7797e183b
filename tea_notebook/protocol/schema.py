"""JSON Schemas of tool parameters and returns, derived from type hints and docstrings.

Docstrings in Google (``Args:``), NumPy (``Parameters`` + dashes) and reST (``:param x:``) style are
read for the summary and per-parameter descriptions. Pydantic builds the schema, so nested models,
dataclasses, ``Literal`` enums, ``Optional`` and lists come out as standard JSON Schema.
"""

from __future__ import annotations

import inspect
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model
from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError

from tea_notebook.errors import SchemaError

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
    fname = name or getattr(fn, "__name__", repr(fn))
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
        model = create_model(  # type: ignore[call-overload]
            f"{fname}_arguments", __config__=ConfigDict(extra="forbid"), **fields
        )
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
