"""Docstring parsing and JSON Schema derivation (tea_notebook.protocol.schema)."""

import keyword
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from tea_notebook.errors import SchemaError
from tea_notebook.protocol.context import ToolContext
from tea_notebook.protocol.schema import function_schema, parse_docstring

# --------------------------------------------------------------------------------------
# parse_docstring
# --------------------------------------------------------------------------------------

GOOGLE = """Convert an amount between currencies.

    Uses the daily reference rate.

    Args:
        amount (float): How much money to convert,
            in the source currency.
        target: ISO code of the currency
            to convert into.
        *extras: Ignored extras.

    Returns:
        The converted amount,
        rounded to cents.

    Raises:
        ValueError: when the currency is unknown.
    """

NUMPY = """Convert an amount between currencies.

    Parameters
    ----------
    amount : float
        How much money to convert,
        in the source currency.
    target : str
        ISO code of the currency
        to convert into.

    Returns
    -------
    float
        The converted amount.

    Notes
    -----
    Not part of the parameters.
    """

REST = """Convert an amount between currencies.

    :param amount: How much money to convert,
        in the source currency.
    :param str target: ISO code of the currency
        to convert into.
    :returns: The converted amount.
    :raises ValueError: when the currency is unknown.
    """


def test_parse_google_summary_params_continuation_and_returns():
    doc = parse_docstring(GOOGLE)
    assert doc.summary.startswith("Convert an amount between currencies.")
    assert "Uses the daily reference rate." in doc.summary
    assert doc.params == {
        "amount": "How much money to convert, in the source currency.",
        "target": "ISO code of the currency to convert into.",
        "extras": "Ignored extras.",
    }
    assert doc.returns == "The converted amount, rounded to cents."
    # the Raises section is not mistaken for a parameter or the return text
    assert "ValueError" not in doc.params
    assert "unknown" not in doc.returns


def test_parse_numpy_summary_params_continuation_and_returns():
    doc = parse_docstring(NUMPY)
    assert doc.summary == "Convert an amount between currencies."
    assert doc.params == {
        "amount": "How much money to convert, in the source currency.",
        "target": "ISO code of the currency to convert into.",
    }
    assert doc.returns.endswith("The converted amount.")
    assert "Not part" not in doc.returns


def test_parse_numpy_returns_without_type_line():
    assert parse_docstring(NUMPY).returns == "The converted amount."


def test_parse_rest_summary_params_continuation_and_returns():
    doc = parse_docstring(REST)
    assert doc.summary == "Convert an amount between currencies."
    assert doc.params == {
        "amount": "How much money to convert, in the source currency.",
        "target": "ISO code of the currency to convert into.",
    }
    assert doc.returns == "The converted amount."


@pytest.mark.parametrize("doc", [None, ""])
def test_parse_empty_docstring(doc):
    out = parse_docstring(doc)
    assert (out.summary, out.params, out.returns) == ("", {}, "")


def test_parse_summary_only_joins_paragraphs():
    out = parse_docstring("First line\n    continues here.\n\n    Second paragraph.")
    assert out.summary == "First line continues here. Second paragraph."
    assert out.params == {} and out.returns == ""


# --------------------------------------------------------------------------------------
# function_schema: types
# --------------------------------------------------------------------------------------


class Address(BaseModel):
    street: str
    number: int = 1


class Person(BaseModel):
    name: str
    address: Address
    tags: list[str] = []


@dataclass
class Size:
    width: int
    height: float


def test_scalars_defaults_and_descriptions():
    def book(city: str, nights: int, budget: float = 100.0, pets: bool = False) -> str:
        """Book a hotel room.

        Args:
            city: Where to stay.
            nights: How many nights.
            budget: Maximum price per night.
        """
        return city

    spec = function_schema(book)
    params = spec.parameters
    Draft202012Validator.check_schema(params)
    assert spec.name == "book"
    assert spec.description == "Book a hotel room."
    assert params["type"] == "object"
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert list(props) == ["city", "nights", "budget", "pets"]
    assert props["city"] == {"type": "string", "description": "Where to stay."}
    assert props["nights"] == {"type": "integer", "description": "How many nights."}
    assert props["budget"] == {"type": "number", "default": 100.0, "description": "Maximum price per night."}
    assert props["pets"] == {"type": "boolean", "default": False}
    assert sorted(params["required"]) == ["city", "nights"]
    assert spec.returns == {"type": "string"}
    assert spec.is_async is False
    assert spec.context_param is None
    # no auto-generated pydantic titles
    assert "title" not in params and all("title" not in p for p in props.values())


def test_return_description_from_docstring():
    def area(side: float) -> float:
        """Area of a square.

        Returns:
            The area in square units.
        """
        return side * side

    assert function_schema(area).returns == {"type": "number", "description": "The area in square units."}


def test_literal_optional_list_and_dict():
    def search(
        mode: Literal["fast", "exact"],
        lang: Optional[str] = None,
        words: list[str] = [],  # noqa: B006
        weights: dict[str, int] = {},  # noqa: B006
    ) -> list[str]:
        """Search something."""
        return words

    params = function_schema(search).parameters
    Draft202012Validator.check_schema(params)
    props = params["properties"]
    assert props["mode"]["enum"] == ["fast", "exact"]
    assert props["lang"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert props["lang"]["default"] is None
    assert props["words"]["type"] == "array" and props["words"]["items"] == {"type": "string"}
    assert props["weights"]["type"] == "object"
    assert props["weights"]["additionalProperties"] == {"type": "integer"}
    assert params["required"] == ["mode"]

    v = Draft202012Validator(params)
    assert v.is_valid({"mode": "fast", "lang": None, "words": ["a"], "weights": {"x": 1}})
    assert not v.is_valid({"mode": "slow"})
    assert not v.is_valid({"mode": "fast", "lang": 3})
    assert not v.is_valid({"mode": "fast", "words": [1]})
    assert not v.is_valid({"mode": "fast", "weights": {"x": "heavy"}})
    assert not v.is_valid({"mode": "fast", "unknown": 1})
    assert not v.is_valid({})


def test_nested_pydantic_model_and_dataclass_use_defs_and_refs():
    def register(person: Person, size: Size, note: str = "") -> bool:
        """Register a person and their size."""
        return True

    spec = function_schema(register)
    params = spec.parameters
    Draft202012Validator.check_schema(params)
    assert {"Person", "Address", "Size"} <= set(params["$defs"])
    assert params["properties"]["person"] == {"$ref": "#/$defs/Person"}
    assert params["properties"]["size"] == {"$ref": "#/$defs/Size"}
    assert params["$defs"]["Person"]["properties"]["address"] == {"$ref": "#/$defs/Address"}
    assert sorted(params["required"]) == ["person", "size"]

    good = {
        "person": {"name": "Ada", "address": {"street": "Main", "number": 3}, "tags": ["x"]},
        "size": {"width": 3, "height": 1.5},
    }
    jsonschema.validate(good, params, cls=Draft202012Validator)
    v = Draft202012Validator(params)
    # missing nested required field, wrong nested type
    assert not v.is_valid({"person": {"name": "Ada", "address": {}}, "size": {"width": 1, "height": 1}})
    assert not v.is_valid({"person": good["person"], "size": {"width": "wide", "height": 1}})
    # the pydantic model built beside the schema turns the same data into instances
    parsed = spec.args_model.model_validate(good)
    assert isinstance(parsed.person, Person) and isinstance(parsed.person.address, Address)
    assert isinstance(parsed.size, Size) and parsed.size.height == 1.5


def test_async_function_is_async():
    async def fetch(url: str) -> str:
        """Fetch a page."""
        return url

    def fetch_sync(url: str) -> str:
        """Fetch a page."""
        return url

    assert function_schema(fetch).is_async is True
    assert function_schema(fetch_sync).is_async is False
    assert function_schema(fetch).parameters == function_schema(fetch_sync).parameters


def test_tool_context_parameter_is_not_in_schema():
    def count(step: int, ctx: ToolContext) -> int:
        """Count up.

        Args:
            step: How far to count.
            ctx: Injected by the runtime.
        """
        return step

    spec = function_schema(count)
    assert spec.context_param == "ctx"
    assert list(spec.parameters["properties"]) == ["step"]
    assert spec.parameters["required"] == ["step"]
    assert "ctx" not in spec.args_model.model_fields


def test_string_annotations_and_string_tool_context_are_resolved():
    ns: dict[str, Any] = {}
    exec(  # noqa: S102
        textwrap.dedent(
            '''
            from __future__ import annotations
            from typing import Optional
            from tea_notebook.protocol.context import ToolContext

            def later(x: int, y: Optional[str], ctx: ToolContext) -> list[int]:
                """Uses postponed annotations."""
                return [x]
            '''
        ),
        ns,
    )
    spec = function_schema(ns["later"])
    assert spec.context_param == "ctx"
    assert spec.parameters["properties"]["x"] == {"type": "integer"}
    assert sorted(spec.parameters["required"]) == ["x", "y"]
    assert spec.returns == {"type": "array", "items": {"type": "integer"}}


def test_name_and_description_overrides():
    def undocumented(x: int) -> int:
        return x

    spec = function_schema(undocumented, name="renamed", description="Given from outside.")
    assert spec.name == "renamed"
    assert spec.description == "Given from outside."
    assert spec.parameters["properties"] == {"x": {"type": "integer"}}


def test_keyword_only_parameters():
    def f(a: int, *, b: str, c: bool = True) -> None:
        """Keyword-only parameters."""

    params = function_schema(f).parameters
    assert list(params["properties"]) == ["a", "b", "c"]
    assert sorted(params["required"]) == ["a", "b"]


# --------------------------------------------------------------------------------------
# function_schema: bad input
# --------------------------------------------------------------------------------------


def test_missing_type_hint_names_function_and_parameter():
    def lookup(key: str, fallback) -> str:  # noqa: ANN001
        """Look something up."""
        return key

    with pytest.raises(SchemaError) as info:
        function_schema(lookup)
    assert info.value.function == "lookup"
    assert info.value.parameter == "fallback"
    assert "lookup" in str(info.value) and "'fallback'" in str(info.value)
    assert "type hint" in str(info.value)


class NotSerialisable:
    pass


@pytest.mark.parametrize("annotation", [NotSerialisable, Callable[[int], int]], ids=["plain-class", "Callable"])
def test_unsupported_annotation_names_parameter(annotation):
    def run(count: int, handler: int) -> None:
        """Run something."""

    run.__annotations__["handler"] = annotation
    with pytest.raises(SchemaError) as info:
        function_schema(run)
    assert info.value.parameter == "handler"
    assert "'handler'" in str(info.value) and "run" in str(info.value)
    assert "JSON Schema" in str(info.value)


def test_docstring_documenting_unknown_parameter():
    def greet(name: str) -> str:
        """Greet someone.

        Args:
            name: Who to greet.
            salutation: Not a parameter.
        """
        return name

    with pytest.raises(SchemaError) as info:
        function_schema(greet)
    assert info.value.parameter == "salutation"
    assert "'salutation'" in str(info.value) and "greet" in str(info.value)


def test_rest_docstring_documenting_unknown_parameter():
    def greet(name: str) -> str:
        """Greet someone.

        :param name: Who to greet.
        :param loud: Not a parameter.
        """
        return name

    with pytest.raises(SchemaError) as info:
        function_schema(greet)
    assert info.value.parameter == "loud"


@pytest.mark.parametrize("source", ["def f(x: int, *rest: int):", "def f(x: int, **options: int):"])
def test_var_args_are_rejected(source):
    ns: dict[str, Any] = {}
    exec(source + '\n    """Variadic."""\n', ns)  # noqa: S102
    with pytest.raises(SchemaError) as info:
        function_schema(ns["f"])
    assert info.value.parameter in ("rest", "options")
    assert info.value.parameter in str(info.value)


def test_no_docstring_and_no_description():
    def bare(x: int) -> int:
        return x

    with pytest.raises(SchemaError) as info:
        function_schema(bare)
    assert info.value.function == "bare"
    assert "docstring" in str(info.value)


def test_unresolvable_forward_reference():
    def f(x: "DoesNotExist") -> None:  # noqa: F821
        """Forward reference to nothing."""

    with pytest.raises(SchemaError) as info:
        function_schema(f)
    assert "DoesNotExist" in str(info.value)


def test_unsupported_return_type_names_return():
    def f(x: int) -> NotSerialisable:
        """Returns something odd."""
        return NotSerialisable()

    with pytest.raises(SchemaError) as info:
        function_schema(f)
    assert info.value.parameter == "return"


def test_leading_underscore_parameter_keeps_its_name():
    ns: dict[str, Any] = {}
    exec('def f(_hidden: int, model_x: str = "a"):\n    """Has private-looking parameters."""\n', ns)  # noqa: S102
    spec = function_schema(ns["f"])
    assert list(spec.parameters["properties"]) == ["_hidden", "model_x"]
    assert spec.parameters["required"] == ["_hidden"]
    parsed = spec.args_model.model_validate({"_hidden": 3})
    assert [getattr(parsed, n) for n in spec.args_model.model_fields] == [3, "a"]


def test_parameter_named_model_config_is_kept():
    ns: dict[str, Any] = {}
    exec('def f(model_config: int, y: int):\n    """Two parameters."""\n', ns)  # noqa: S102
    spec = function_schema(ns["f"])
    assert list(spec.parameters["properties"]) == ["model_config", "y"]
    assert spec.parameters["required"] == ["model_config", "y"]


# --------------------------------------------------------------------------------------
# property-based: random signatures built with exec
# --------------------------------------------------------------------------------------

identifiers = st.one_of(
    st.from_regex(r"_?[A-Za-z][A-Za-z0-9_]{0,11}", fullmatch=True),
    st.sampled_from(["model_config", "model_fields", "_private", "self_"]),
).filter(lambda n: not keyword.iskeyword(n))
words = st.lists(st.from_regex(r"[a-z]{1,8}", fullmatch=True), min_size=1, max_size=6).map(" ".join)
short_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
finite_floats = st.floats(allow_nan=False, allow_infinity=False, width=64)


@st.composite
def param_types(draw):
    """(annotation object, label, strategy of valid JSON values, a clearly invalid value)."""
    kind = draw(st.sampled_from(["int", "str", "float", "bool", "list[int]", "Optional[str]", "Literal"]))
    if kind == "int":
        return int, kind, st.integers(-(2**53), 2**53), "not-an-int"
    if kind == "str":
        return str, kind, short_text, 12345
    if kind == "float":
        return float, kind, finite_floats, "not-a-number"
    if kind == "bool":
        return bool, kind, st.booleans(), "yes"
    if kind == "list[int]":
        return list[int], kind, st.lists(st.integers(-1000, 1000), max_size=4), ["a"]
    if kind == "Optional[str]":
        return Optional[str], kind, st.none() | short_text, 7
    values = draw(st.lists(st.from_regex(r"[a-z]{1,5}", fullmatch=True), min_size=1, max_size=4, unique=True))
    return Literal[tuple(values)], f"Literal{values}", st.sampled_from(values), "NOT-A-MEMBER"


@st.composite
def signatures(draw):
    names = draw(st.lists(identifiers, max_size=6, unique=True))
    params = []
    for name in names:
        annotation, label, values, invalid = draw(param_types())
        has_default = draw(st.booleans())
        default = draw(values) if has_default else None
        example = draw(values)
        described = draw(st.booleans())
        desc = draw(words) if described else None
        params.append(
            dict(name=name, annotation=annotation, label=label, has_default=has_default,
                 default=default, example=example, invalid=invalid, desc=desc)
        )  # fmt: skip
    keyword_only = draw(st.booleans())
    if not keyword_only:  # positional parameters: those without defaults must come first
        params.sort(key=lambda p: p["has_default"])
    style = draw(st.sampled_from(["google", "numpy", "rest"]))
    summary = draw(words)
    return params, keyword_only, style, summary


def _docstring(summary: str, params: list[dict], style: str) -> str:
    documented = [p for p in params if p["desc"]]
    lines = [summary, ""]
    if documented and style == "google":
        lines.append("Args:")
        for p in documented:
            first, _, rest = p["desc"].partition(" ")
            lines.append(f"    {p['name']}: {first}")
            if rest:  # a continuation line
                lines.append(f"        {rest}")
    elif documented and style == "numpy":
        lines += ["Parameters", "----------"]
        for p in documented:
            first, _, rest = p["desc"].partition(" ")
            lines.append(f"{p['name']} : {p['label']}")
            lines.append(f"    {first}")
            if rest:
                lines.append(f"    {rest}")
    elif documented:
        for p in documented:
            first, _, rest = p["desc"].partition(" ")
            lines.append(f":param {p['name']}: {first}")
            if rest:
                lines.append(f"    {rest}")
    return "\n".join(lines)


def _build(params: list[dict], keyword_only: bool, doc: str) -> Callable[..., Any]:
    ns: dict[str, Any] = {}
    parts = ["*"] if keyword_only and params else []
    for i, p in enumerate(params):
        ns[f"__t{i}"] = p["annotation"]
        part = f"{p['name']}: __t{i}"
        if p["has_default"]:
            ns[f"__d{i}"] = p["default"]
            part += f" = __d{i}"
        parts.append(part)
    ns["__doc_text"] = doc
    source = f"def generated({', '.join(parts)}):\n    pass\ngenerated.__doc__ = __doc_text\n"
    exec(source, ns)  # noqa: S102
    return ns["generated"]


@pytest.mark.filterwarnings("ignore:Field name .* shadows an attribute")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(signatures())
def test_random_signatures_give_valid_exact_schemas(sig):
    params, keyword_only, style, summary = sig
    fn = _build(params, keyword_only, _docstring(summary, params, style))
    spec = function_schema(fn)
    schema = spec.parameters

    Draft202012Validator.check_schema(schema)
    assert spec.description == summary
    names = [p["name"] for p in params]
    assert list(schema["properties"]) == names
    assert set(schema.get("required", [])) == {p["name"] for p in params if not p["has_default"]}
    assert schema["additionalProperties"] is False

    for p in params:
        prop = schema["properties"][p["name"]]
        if p["has_default"]:
            assert prop["default"] == p["default"]
        else:
            assert "default" not in prop
        assert prop.get("description") == p["desc"]

    validator = Draft202012Validator(schema)
    full = {p["name"]: p["default"] if p["has_default"] else p["example"] for p in params}
    assert validator.is_valid(full), list(validator.iter_errors(full))
    required_only = {p["name"]: p["example"] for p in params if not p["has_default"]}
    assert validator.is_valid(required_only)
    # the pydantic model used at invocation accepts what the schema accepts
    parsed = spec.args_model.model_validate(full)
    assert {f.alias or n for n, f in type(parsed).model_fields.items()} == set(names)

    extra = "zz_" + "_".join(names) + "_extra"
    assert not validator.is_valid({**full, extra: 1})
    for p in params:
        assert not validator.is_valid({**full, p["name"]: p["invalid"]}), p["label"]
        if not p["has_default"]:
            assert not validator.is_valid({k: v for k, v in full.items() if k != p["name"]})


@settings(max_examples=150, deadline=None)
@given(
    names=st.lists(identifiers, min_size=1, max_size=5, unique_by=str.lower),
    descs=st.data(),
    style=st.sampled_from(["google", "numpy", "rest"]),
    summary=words,
)
def test_random_docstrings_round_trip(names, descs, style, summary):
    params = [dict(name=n, desc=descs.draw(words), label="int") for n in names]
    doc = parse_docstring(_docstring(summary, params, style))
    assert doc.summary == summary
    assert doc.params == {p["name"]: p["desc"] for p in params}
