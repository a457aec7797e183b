"""The check made once per tool schema for the usual shape (an object of typed fields) accepts only
arguments jsonschema accepts, and every call that fails it still gets jsonschema's own verdict: the
problems reported for any arguments are exactly those the full check reports. A tool's validator
is kept per record while its registry is unchanged, and made again for a new version."""

from __future__ import annotations

import itertools

import pytest
from jsonschema import Draft202012Validator

from tea_notebook.protocol.context import Context
from tea_notebook.protocol.schema import ArgumentValidator, argument_problems

FLAT = {
    "type": "object",
    "title": "book",
    "properties": {
        "room": {"type": "string", "description": "the room"},
        "nights": {"type": "integer"},
        "rate": {"type": "number"},
        "late": {"type": "boolean", "default": False},
        "note": {"type": ["string", "null"]},
        "tags": {"type": "array"},
        "extra": {"type": "object"},
        "anything": {"description": "no type: any JSON value"},
    },
    "required": ["room", "nights"],
    "additionalProperties": False,
}
VALUES = ["a", "", 3, 0, -1, 2.5, 1.0, True, False, None, [], ["x"], {}, {"k": 1}, (1, 2), {1, 2}]


def _instances():
    """Arguments of every shape: each field with each value, fields missing, unknown fields."""
    base = {"room": "12", "nights": 2}
    yield base
    yield {"room": "12"}
    yield {"nights": 2}
    yield {}
    yield {**base, "unknown": 1}
    for field, value in itertools.product(FLAT["properties"], VALUES):
        yield {**base, field: value}


@pytest.mark.parametrize("extras", [False, True, None])
def test_the_quick_check_agrees_with_jsonschema(extras):
    schema = dict(FLAT)
    if extras is None:
        del schema["additionalProperties"]
    else:
        schema["additionalProperties"] = extras
    ours, full = ArgumentValidator(schema), Draft202012Validator(schema)
    assert ours._flat is not None  # the usual shape: checked by the quick check first
    quick = 0
    for args in _instances():
        if ours._flat(args):
            quick += 1
            assert full.is_valid(args), args  # accepted quickly: jsonschema accepts it too
        got = [p.as_dict() for p in argument_problems(ours, args)]
        want = [p.as_dict() for p in argument_problems(full, args)]
        assert got == want, args
    assert quick > 20


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}},
        {"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}, "$defs": {"N": {"type": "integer"}}},
        {"type": "object", "properties": {"n": {"type": "string"}}, "patternProperties": {"^x": {}}},
        {"type": "object", "properties": {"n": {"enum": [1, 2]}}},
        {"type": "object", "properties": {"n": {"type": "decimal"}}},
        {"type": ["object"], "properties": {}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "required": "n"},
        {"anyOf": [{"type": "object"}]},
    ],
)
def test_other_schemas_go_to_the_full_check(schema):
    assert ArgumentValidator(schema)._flat is None


def test_a_validator_is_kept_per_record_until_the_registry_changes(ws):
    @ws.tools.tool
    def shout(text: str) -> str:
        """Shout the text."""
        return str(text).upper()

    first = ws.tools.current("shout")
    assert ws.tools._validator(first.parameters) is ws.tools._validator(ws.tools.current("shout").parameters)
    bad = ws.tools.invoke("shout", {"text": 3}, Context())
    assert not bad.ok and bad.error["field"] == "text" and bad.error["type"] == "ValidationError"
    assert ws.tools.invoke("shout", {"text": "hi"}, Context()).value == "HI"
    # a new version with another schema: its own validator, its own verdicts
    integer = {"type": "object", "properties": {"text": {"type": "integer"}}, "required": ["text"]}
    ws.tools.register(first.model_copy(update={"parameters": integer}))
    second = ws.tools.current("shout")
    assert second.version == 2 and second.parameters is not first.parameters
    assert ws.tools._validator(second.parameters).schema["properties"]["text"]["type"] == "integer"
    wrong = ws.tools.invoke("shout", {"text": "loud"}, Context())
    assert not wrong.ok and wrong.error["field"] == "text" and wrong.error["expected"] == "integer"
