"""Generate the JupyterLab extension's event types from the Python definitions.

``tea_notebook/runtime/event_types.py`` declares each event type's ``TypedDict``; this script makes
from them a JSON Schema of the event union (pydantic), ``extension/src/events.schema.json``, and from
that schema TypeScript types, ``extension/src/events.ts``. Both are checked in;
``tests/test_event_types.py`` regenerates them and fails when they differ. Run it after changing an
event definition::

    python scripts/gen_event_types.py

The TypeScript generator covers the JSON Schema subset pydantic makes of these definitions: ``$defs``
and ``$ref``, objects with ``properties`` / ``required`` / ``additionalProperties``, arrays,
``anyOf``, ``oneOf`` with a ``discriminator``, ``const`` and ``enum`` of strings, the scalar types,
and ``{}`` (any value). Anything else is an error, so a new construct cannot slip through unnoticed.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = ROOT / "extension" / "src" / "events.schema.json"
TS_PATH = ROOT / "extension" / "src" / "events.ts"

# the named kinds besides the event types: TypeScript aliases of the same names
ALIASES = ("EventType", "RunStatus", "FinishedStatus", "ForkUnit", "ThreadStatus", "ErrorKind")


def event_schema() -> dict[str, Any]:
    """The JSON Schema of one stored event: ``type`` and the matching ``data``, a union told apart by
    ``type`` (with the named kinds as extra ``$defs``)."""
    from pydantic import Field, TypeAdapter
    from typing_extensions import TypedDict

    from tea_notebook.runtime import event_types

    # made at run time from the definitions, so typed as Any for a checker
    make_typed_dict: Any = TypedDict
    variants = []
    for type_, shape in event_types.EVENT_DATA.items():
        fields: dict[str, Any] = {
            "type": Literal[type_],
            "data": shape,
            "id": str,
            "run_id": str,
            "parent_id": Union[str, None],
            "step": Union[int, None],
            "time": float,
            "seq": int,
        }
        variant = make_typed_dict("Stored" + shape.__name__, fields)
        variant.__doc__ = f"A ``{type_}`` event as the workspace stores it (its data: ``{shape.__name__}``)."
        variants.append(variant)
    union: Any = Annotated[Union[tuple(variants)], Field(discriminator="type")]
    schema = _untitled(TypeAdapter(union).json_schema())
    schema["title"] = "TeaEvent"
    schema["description"] = "One event of the stream, as the workspace stores it and views receive it."
    for name in ALIASES:
        alias = getattr(event_types, name)
        schema["$defs"][name] = {
            "enum": list(get_args(alias)),
            "type": "string",
            "description": _doc_of(event_types, name),
        }
    return schema


def _untitled(schema: Any) -> Any:
    """The schema without pydantic's generated ``title`` entries (field names in title case: they
    say nothing the names do not, and vary between pydantic releases); a field named ``title`` stays."""
    if isinstance(schema, dict):
        return {k: _untitled(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [_untitled(v) for v in schema]
    return schema


def _doc_of(module: Any, name: str) -> str:
    """The docstring written under a module-level alias (read from the source: aliases keep none)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(module))
    body = tree.body
    for node, after in zip(body, body[1:]):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                return " ".join(str(after.value.value).split())
    return ""


# -- TypeScript from the schema -------------------------------------------------------------------
def _comment(text: str | None, indent: str = "") -> list[str]:
    if not text:
        return []
    words = " ".join(re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`").split())
    return [f"{indent}/** {words} */"]


def _ts(schema: dict[str, Any], indent: str = "") -> str:
    """The TypeScript type of one schema."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[1]
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema or "oneOf" in schema:
        parts = [_ts(s, indent) for s in schema.get("anyOf") or schema["oneOf"]]
        return " | ".join(parts)
    kind = schema.get("type")
    if kind is None:
        unknown = set(schema) - {"title", "description", "default"}
        if unknown:
            raise ValueError(f"unsupported JSON Schema construct: {sorted(unknown)}")
        return "unknown"
    if kind == "string":
        return "string"
    if kind in ("integer", "number"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "null":
        return "null"
    if kind == "array":
        items = _ts(schema.get("items", {}), indent)
        return f"({items})[]" if "|" in items else f"{items}[]"
    if kind == "object":
        if "properties" in schema:
            return _object(schema, indent)
        extra = schema.get("additionalProperties", True)
        value = "unknown" if extra is True else _ts(extra, indent)
        return f"Record<string, {value}>"
    raise ValueError(f"unsupported JSON Schema type: {kind!r}")


def _object(schema: dict[str, Any], indent: str) -> str:
    required = set(schema.get("required", []))
    lines = ["{"]
    for name, prop in schema["properties"].items():
        lines += _comment(prop.get("description"), indent + "  ")
        optional = "" if name in required else "?"
        lines.append(f"{indent}  {name}{optional}: {_ts(prop, indent + '  ')};")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def _plural(alias: str) -> str:
    """The constant holding an alias's values: ``RunStatus`` -> ``RUN_STATUSES``."""
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", alias).upper()
    return snake + ("ES" if snake.endswith("S") else "S")


def typescript(schema: dict[str, Any]) -> str:
    """TypeScript declarations of the schema: an alias or interface per ``$defs`` entry, and the union."""
    out = [
        "// Generated by scripts/gen_event_types.py from tea_notebook/runtime/event_types.py",
        "// (through events.schema.json): do not edit; change the Python definitions and run the script.",
        "/* eslint-disable */",
        "",
    ]
    for name, definition in schema["$defs"].items():
        out += _comment(definition.get("description"))
        if definition.get("type") == "object" and "properties" in definition:
            out.append(f"export interface {name} {_object(definition, '')}")
        else:
            out.append(f"export type {name} = {_ts(definition)};")
        if name in ALIASES:  # the values too, for code that checks a string it received
            values = ", ".join(json.dumps(v) for v in definition["enum"])
            out.append(f"export const {_plural(name)}: readonly {name}[] = [{values}];")
        out.append("")
    out += _comment(schema.get("description"))
    out.append(f"export type {schema['title']} = {_ts({k: v for k, v in schema.items() if k != '$defs'})};")
    out.append("")
    out.append("/** The data of each event type. */")
    out.append("export interface EventData {")
    for ref in schema["oneOf"]:
        record = schema["$defs"][ref["$ref"].rsplit("/", 1)[1]]
        type_ = record["properties"]["type"]["const"]
        out.append(f"  {type_}: {_ts(record['properties']['data'])};")
    out.append("}")
    return "\n".join(out) + "\n"


def generate() -> tuple[str, str]:
    """The texts of ``events.schema.json`` and ``events.ts``."""
    schema = event_schema()
    return json.dumps(schema, indent=2, sort_keys=False) + "\n", typescript(schema)


def main() -> None:
    schema, ts = generate()
    for path, text in ((SCHEMA_PATH, schema), (TS_PATH, ts)):
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
