"""The model layer: resolution, the offline ``tea/*`` models served through litellm's custom
provider, replay cassettes, error mapping, retries and the cost ledger.

Every model call here goes through ``litellm.acompletion`` and the real ``tea`` provider; nothing
reaches the network (litellm's price list is read from its local copy).
"""

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # before anything imports litellm

import json  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
from typing import Annotated, Literal, Optional  # noqa: E402

import jsonschema  # noqa: E402
import litellm  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from order_models import Order  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook._sync import run_sync  # noqa: E402
from tea_notebook.errors import RunFailed, TeaError  # noqa: E402
from tea_notebook.models.client import (  # noqa: E402
    DEMO_MODEL,
    NO_MODEL_NOTE,
    ModelClient,
    ModelError,
    display_name,
    is_offline,
    resolve_model,
)
from tea_notebook.models.offline import (  # noqa: E402
    Cassette,
    DemoModel,
    ReplayDivergence,
    ScriptedModel,
    ScriptExhausted,
    TestModel,
    call,
    example_value,
    history_calls,
)
from tea_notebook.runtime.prompts import DONE_SCHEMA, DONE_TOOL, StepRecord, build_messages  # noqa: E402

Validator = jsonschema.Draft202012Validator


# --------------------------------------------------------------------------------------
# helpers and fixtures
# --------------------------------------------------------------------------------------


def run(coro):
    """Run a coroutine to completion on the library's long-lived background loop (what ``run_sync`` and
    notebooks use; one loop for the whole file keeps litellm's logging worker on a single loop)."""
    return run_sync(coro)


def complete(model, messages, tools=None, **client_options):
    return run(ModelClient(**client_options).complete(model, messages, tools))


def valid(schema, value):
    """Raise a jsonschema ValidationError when ``value`` does not satisfy ``schema``."""
    Validator(schema).validate(value)
    return True


def messages_for(task, tools, steps=(), step=None, native=True):
    """The messages the agent sends for one step (built exactly as the agent builds them)."""
    return build_messages(
        task=task,
        files=[],
        step=step or len(steps) + 1,
        max_steps=10,
        steps=list(steps),
        summaries=[],
        insights=[],
        todo="",
        environments=[],
        tools=tools,
        max_actions=3,
        native=native,
    )


def fn_tool(name, parameters, description=""):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def math_ws(ws):
    """A workspace with three deterministic tools."""

    @tea_notebook.tool(workspace=ws)
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    @tea_notebook.tool(workspace=ws)
    def multiply(a: float, b: float) -> float:
        """Multiply two numbers together."""
        return a * b

    @tea_notebook.tool(workspace=ws)
    def shout(text: str) -> str:
        """Turn text into upper case letters."""
        return text.upper()

    return ws


# A hand-written schema with the shapes tool schemas take in the wild.
RICH_SCHEMA = {
    "type": "object",
    "properties": {
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "limit": {"anyOf": [{"type": "integer", "minimum": 3}, {"type": "null"}]},
        "maybe": {"type": ["null", "boolean"]},
        "ratio": {"type": "number", "minimum": 0.25},
        "filters": {
            "type": "array",
            "minItems": 2,
            "items": {
                "type": "object",
                "properties": {
                    "field": {"type": "string"},
                    "op": {"enum": ["eq", "ne"]},
                    "value": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                },
                "required": ["field", "op", "value"],
                "additionalProperties": False,
            },
        },
        "point": {"$ref": "#/$defs/Point"},
        "path": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
        "kind": {"const": "v1"},
        "optional_thing": {"type": "string"},
    },
    "required": ["mode", "limit", "maybe", "ratio", "filters", "point", "path", "kind"],
    "additionalProperties": False,
    "$defs": {
        "Point": {
            "type": "object",
            "properties": {"x": {"type": "number"}, "y": {"type": "number"}, "label": {"type": "string"}},
            "required": ["x", "y"],
        }
    },
}


# --------------------------------------------------------------------------------------
# resolve_model / display_name
# --------------------------------------------------------------------------------------


def test_resolve_model_order(monkeypatch):
    monkeypatch.setenv("TEA_MODEL", "openai/from-env")
    assert resolve_model("x/explicit", "x/agent", "x/ws") == ("x/explicit", "argument")
    assert resolve_model(None, "x/agent", "x/ws") == ("x/agent", "agent")
    assert resolve_model(None, None, "x/ws") == ("x/ws", "workspace")
    assert resolve_model() == ("openai/from-env", "TEA_MODEL")
    assert resolve_model("", "", "") == ("openai/from-env", "TEA_MODEL")  # empty strings do not count
    monkeypatch.delenv("TEA_MODEL")
    assert resolve_model() == (DEMO_MODEL, "default") == ("tea/demo", "default")
    monkeypatch.setenv("TEA_MODEL", "")
    assert resolve_model() == ("tea/demo", "default")


def test_resolve_model_through_workspace_and_agent(tmp_path, monkeypatch):
    monkeypatch.setenv("TEA_MODEL", "openai/from-env")
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing", model="x/ws")
    try:
        plain = ws.agent("plain")
        own = ws.agent("own", model="x/agent")
        assert plain.resolved_model() == ("x/ws", "workspace")
        assert own.resolved_model() == ("x/agent", "agent")
        assert own.resolved_model("x/call") == ("x/call", "argument")
        ws.default_model = None
        assert plain.resolved_model() == ("openai/from-env", "TEA_MODEL")
        monkeypatch.delenv("TEA_MODEL")
        assert plain.resolved_model() == ("tea/demo", "default")
    finally:
        ws.close()


def test_default_model_run_says_it_is_the_demo_model(math_ws, monkeypatch):
    monkeypatch.delenv("TEA_MODEL", raising=False)
    result = math_ws.agent("calc", tools=["multiply"]).run_sync("multiply 6 by 7")
    assert result.model == "tea/demo"
    started = [e for e in math_ws.events.events(result.run_id) if e.type == "run_started"][0].data
    assert started["model_source"] == "default"
    assert started["note"] == NO_MODEL_NOTE and "TEA_MODEL" in started["note"]
    assert "scripted, not an LLM" in started["model_display"]


def test_display_name_labels_offline_models():
    assert display_name("tea/demo") == "tea/demo (scripted, not an LLM)"
    assert display_name("tea/test").endswith("(scripted, not an LLM)")
    assert display_name("tea/script:s9").endswith("(scripted, not an LLM)")
    replay = display_name("tea/replay:/tmp/c.jsonl")
    assert replay.startswith("tea/replay:/tmp/c.jsonl") and "replayed" in replay and "scripted" not in replay
    assert display_name("openai/gpt-4.1-mini") == "openai/gpt-4.1-mini"
    assert is_offline("tea/test") and not is_offline("openai/gpt-4.1-mini") and not is_offline("ollama/tea")


# --------------------------------------------------------------------------------------
# example_value
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, "example q"),
        ({}, "example q"),
        ({"type": "integer"}, 1),
        ({"type": "integer", "minimum": 5}, 5),
        ({"type": "integer", "minimum": -5}, 1),
        ({"type": "number"}, 1.0),
        ({"type": "number", "minimum": 0}, 1.0),
        ({"type": "number", "minimum": 2.5}, 2.5),
        ({"type": "boolean"}, True),
        ({"type": "null"}, None),
        ({"type": ["null", "integer"]}, 1),
        ({"enum": ["b", "a"]}, "b"),
        ({"type": "string", "enum": ["x", "y"], "default": "y"}, "y"),
        ({"const": 7}, 7),
        ({"anyOf": [{"type": "null"}, {"type": "integer"}]}, 1),
        ({"oneOf": [{"type": "boolean"}, {"type": "string"}]}, True),
        ({"anyOf": [{"type": "null"}]}, None),
        ({"type": "array", "items": {"type": "integer"}}, [1]),
        ({"type": "array", "items": {"type": "boolean"}, "minItems": 3}, [True, True, True]),
        (
            {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["b"]},
            {"b": "example b"},
        ),
        (
            {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}},
            {"a": 1, "b": "example b"},
        ),
        (
            {"$ref": "#/$defs/P", "$defs": {"P": {"type": "object", "properties": {"x": {"type": "number"}}}}},
            {"x": 1.0},
        ),
    ],
)
def test_example_value_shapes(schema, expected):
    value = example_value(schema, "q")
    assert value == expected and type(value) is type(expected)
    assert valid(schema, value)


def test_example_value_rich_schema_is_valid():
    value = example_value(RICH_SCHEMA)
    assert valid(RICH_SCHEMA, value)
    assert set(value) == set(RICH_SCHEMA["required"])  # optional properties are left out
    assert value["mode"] == "fast" and value["limit"] == 3 and value["kind"] == "v1"
    assert len(value["filters"]) == 2 and value["point"] == {"x": 1.0, "y": 1.0}


def _leaf():
    scalars = st.one_of(st.integers(-5, 5), st.booleans(), st.text(max_size=4), st.none())
    return st.one_of(
        st.sampled_from(["string", "integer", "number", "boolean", "null"]).map(lambda t: {"type": t}),
        st.integers(-100, 100).map(lambda m: {"type": "integer", "minimum": m}),
        st.floats(-100, 100, allow_nan=False).map(lambda m: {"type": "number", "minimum": m}),
        st.lists(scalars, min_size=1, max_size=3, unique_by=lambda v: (type(v).__name__, v)).map(lambda e: {"enum": e}),
        scalars.map(lambda c: {"const": c}),
        st.sampled_from(["string", "integer", "boolean"]).map(lambda t: {"type": [t, "null"]}),
    )


def _extend(children):
    names = st.text("abcdefgh", min_size=1, max_size=4)
    objects = st.dictionaries(names, children, max_size=4).flatmap(
        lambda props: st.sets(st.sampled_from(sorted(props)) if props else st.nothing(), max_size=len(props)).map(
            lambda req: {"type": "object", "properties": props, "required": sorted(req)}
        )
    )
    return st.one_of(
        st.builds(lambda s, n: {"type": "array", "items": s, "minItems": n}, children, st.integers(0, 3)),
        children.map(lambda s: {"anyOf": [{"type": "null"}, s]}),
        children.map(lambda s: {"anyOf": [s, {"type": "null"}]}),
        objects,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(_leaf(), _extend, max_leaves=12))
def test_example_value_satisfies_generated_schemas(schema):
    assert valid(schema, example_value(schema))


@settings(max_examples=60, deadline=None)
@given(st.recursive(_leaf(), _extend, max_leaves=8))
def test_example_value_follows_refs_to_generated_defs(schema):
    wrapped = {
        "type": "object",
        "properties": {"one": {"$ref": "#/$defs/Thing"}, "many": {"type": "array", "items": {"$ref": "#/$defs/Thing"}}},
        "$defs": {"Thing": schema},
    }
    value = example_value(wrapped)
    assert set(value) == {"one", "many"}
    assert valid(wrapped, value)


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"type": "integer", "exclusiveMinimum": 5}, id="exclusiveMinimum"),
        pytest.param({"type": "integer", "maximum": 0}, id="maximum"),
        pytest.param({"type": "number", "exclusiveMaximum": 0.5}, id="exclusiveMaximum"),
        pytest.param({"type": "string", "minLength": 12}, id="minLength"),
        pytest.param({"type": "string", "maxLength": 3}, id="maxLength"),
        pytest.param(
            {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 2, "maxItems": 2},
            id="tuple-prefixItems",
        ),
        pytest.param({"type": "array", "items": {"type": "integer"}, "minItems": 2, "uniqueItems": True}, id="set"),
    ],
)
def test_example_value_respects_constraints(schema):
    assert valid(schema, example_value(schema))


def test_example_value_constraints_come_from_real_tool_schemas(ws):
    """The constraint cases above are what ``@tool`` produces for ordinary hints."""

    @tea_notebook.tool(workspace=ws)
    def bounded(n: Annotated[int, Field(gt=5, le=10)], pair: tuple[int, str]) -> str:
        """Use a bounded number and a pair."""
        return "ok"

    params = ws.tools.get("bounded").parameters
    assert params["properties"]["n"]["exclusiveMinimum"] == 5
    assert "prefixItems" in params["properties"]["pair"]


class TreeNode(BaseModel):
    value: int
    children: list["TreeNode"]


def test_example_value_recursive_model(ws):
    @tea_notebook.tool(workspace=ws)
    def walk(root: TreeNode) -> int:
        """Walk a tree."""
        return root.value

    params = ws.tools.get("walk").parameters
    assert valid(params, example_value(params))


# --------------------------------------------------------------------------------------
# tea/test
# --------------------------------------------------------------------------------------


def test_tea_test_calls_each_tool_once_with_valid_arguments_then_done(ws):
    @tea_notebook.tool(workspace=ws)
    def place_order(
        order: Order,
        mode: Literal["fast", "slow"],
        note: Optional[str] = None,
        tags: list[str] = [],  # noqa: B006
    ) -> str:
        """Place an order."""
        return "placed"

    @tea_notebook.tool(workspace=ws)
    def maybe(limit: Optional[int], flags: list[Literal["a", "b"]]) -> str:
        """Takes an optional number and a list of enums."""
        return "ok"

    tools = [
        ws.tools.get("place_order").to_openai(),
        ws.tools.get("maybe").to_openai(),
        fn_tool("rich", RICH_SCHEMA),
        fn_tool("no_params", {"type": "object", "properties": {}}),
        DONE_TOOL,
    ]
    assert "$defs" in tools[0]["function"]["parameters"]  # the $ref / $defs path is exercised
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    steps, called, ids = [], [], set()
    for turn in range(1, 6):
        reply = complete("tea/test", messages_for("do everything", tools, steps), tools)
        assert reply.model == "tea/test" and reply.scripted is True
        assert reply.cost == 0.0 and reply.prompt_tokens > 0 and reply.completion_tokens > 0
        assert reply.content is None and len(reply.tool_calls) == 1
        tc = reply.tool_calls[0]
        assert tc.id not in ids
        ids.add(tc.id)
        assert json.loads(tc.raw_arguments) == tc.arguments
        assert valid(schemas[tc.name], tc.arguments), tc.name
        if tc.name == "done":
            break
        called.append(tc.name)
        steps.append(StepRecord(turn, results=[(tc.name, json.dumps(tc.arguments), "ok")]))
    assert called == ["place_order", "maybe", "rich", "no_params"]
    assert tc.name == "done" and turn == 5
    assert tc.arguments["success"] is True and "called 4 tool(s)" in tc.arguments["text"]
    assert "scripted" in tc.arguments["text"]
    args = [s.results[0][1] for s in steps]
    assert json.loads(args[0])["mode"] == "fast" and json.loads(args[0])["order"]["items"][0]["sku"]


def test_tea_test_reads_native_tool_messages_and_answers_in_text_without_done():
    tools = [fn_tool("one", {"type": "object", "properties": {}}), fn_tool("two", {"type": "object", "properties": {}})]
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None},
        {"role": "tool", "name": "one", "tool_call_id": "c1", "content": "1"},
    ]
    assert history_calls(history) == [("one", "", "1")]
    turn = TestModel().respond(history, tools)
    assert [c["name"] for c in turn["tool_calls"]] == ["two"]
    history.append({"role": "tool", "name": "two", "tool_call_id": "c2", "content": "2"})
    reply = complete("tea/test", history, tools)
    assert reply.tool_calls == [] and reply.content == "(tea/test, scripted) called 2 tool(s)"


def test_tea_test_agent_run_succeeds_with_valid_arguments(math_ws):
    result = math_ws.agent("t", tools=["add", "shout"], model="tea/test").run_sync("exercise the tools")
    assert result.status == "success" and result.steps == 3
    actions = [a for s in result.trajectory.steps for a in s.actions]
    assert [a["name"] for a in actions] == ["add", "shout", "done"]
    assert actions[0]["ok"] and actions[0]["arguments"] == {"a": 1, "b": 1} and actions[0]["observation"] == "2"
    assert actions[1]["ok"] and actions[1]["observation"] == "EXAMPLE TEXT"
    assert result.cost == 0.0 and result.prompt_tokens > 0


# --------------------------------------------------------------------------------------
# ScriptedModel
# --------------------------------------------------------------------------------------


def test_scripted_items_of_every_form(math_ws):
    tools = [math_ws.tools.get("add").to_openai(), DONE_TOOL]
    script = ScriptedModel(
        [
            "just text",
            call("add", a=1, b=2),
            [call("add", a=3, b=4), call("shout", text="hi")],
            {"content": '{"thinking": "t"}', "tool_calls": [{"id": "mine", "name": "done", "arguments": '{"x": 1}'}]},
            {"content": "dict with text only"},
        ]
    )
    assert script.name == f"tea/script:{script.id}" and ScriptedModel.get(script.id) is script
    r1 = complete(script.name, HI, tools)
    assert r1.content == "just text" and r1.tool_calls == [] and r1.scripted and r1.model == script.name
    r2 = complete(script.name, HI, tools)
    assert r2.content is None and [(c.name, c.arguments) for c in r2.tool_calls] == [("add", {"a": 1, "b": 2})]
    assert r2.tool_calls[0].id.startswith("call_")
    r3 = complete(script.name, HI, tools)
    assert [(c.name, c.arguments) for c in r3.tool_calls] == [("add", {"a": 3, "b": 4}), ("shout", {"text": "hi"})]
    assert len({c.id for c in r3.tool_calls}) == 2
    r4 = complete(script.name, HI, tools)
    assert r4.content == '{"thinking": "t"}'
    assert [(c.id, c.name, c.arguments, c.raw_arguments) for c in r4.tool_calls] == [
        ("mine", "done", {"x": 1}, '{"x": 1}')
    ]
    r5 = complete(script.name, HI, tools)
    assert r5.content == "dict with text only" and r5.tool_calls == []
    assert len(script.calls) == 5 and script.calls[0] == HI


def test_scripted_function_receives_messages_and_tools(math_ws):
    seen = []

    def brain(messages, tools):
        seen.append(([m["role"] for m in messages], [t["function"]["name"] for t in tools]))
        return call("add", a=len(messages), b=len(tools)) if len(seen) == 1 else "finished"

    script = ScriptedModel(brain)
    tools = [math_ws.tools.get("add").to_openai(), DONE_TOOL]
    msgs = [{"role": "system", "content": "s"}, *HI]
    first = complete(script.name, msgs, tools)
    assert seen == [(["system", "user"], ["add", "done"])]
    assert first.tool_calls[0].arguments == {"a": 2, "b": 2}
    assert complete(script.name, HI).content == "finished"
    assert seen[1] == (["user"], [])
    assert script.calls == [msgs, HI]


def test_scripted_model_drives_an_agent(math_ws):
    script = ScriptedModel([call("add", a=2, b=3), call("done", success=True, text="five")])
    result = math_ws.agent("s", tools=["add"]).run_sync("add 2 and 3", model=script.name)
    assert (result.status, result.answer, result.model) == ("success", "five", script.name)
    assert result.trajectory.steps[0].actions[0]["observation"] == "5"


def test_script_exhausted_surfaces_unwrapped_and_fast():
    script = ScriptedModel(["only turn"])
    assert complete(script.name, HI).content == "only turn"
    started = time.perf_counter()
    with pytest.raises(ScriptExhausted, match=r"has 1 turns; turn 2 was asked for") as info:
        complete(script.name, HI, retries=3, backoff=1.0)
    assert time.perf_counter() - started < 1.0
    assert type(info.value) is ScriptExhausted
    assert len(script.calls) == 2  # asked once, not retried


def test_script_exhausted_ends_an_agent_run_with_error(math_ws):
    script = ScriptedModel([call("add", a=1, b=1)])
    result = math_ws.agent("x", tools=["add"], model=script.name).run_sync("add", raise_on_error=False)
    assert result.status == "error" and "turn 2 was asked for" in result.error
    errors = [e.data for e in math_ws.events.events(result.run_id) if e.type == "error"]
    assert errors and errors[-1]["kind"] == "ScriptExhausted"


def test_unknown_script_and_unknown_offline_model_are_clear_errors():
    with pytest.raises(TeaError, match="no scripted model 'nope-404'"):
        complete("tea/script:nope-404", HI)
    with pytest.raises(TeaError, match="unknown offline model 'tea/gpt'"):
        complete("tea/gpt", HI)


def test_scripted_turn_usage_is_honoured():
    script = ScriptedModel([{"content": "hi", "usage": {"prompt_tokens": 100, "completion_tokens": 7}}])
    reply = complete(script.name, HI)
    assert (reply.prompt_tokens, reply.completion_tokens) == (100, 7)


def test_invalid_script_item_reports_the_item_problem():
    script = ScriptedModel([42])
    with pytest.raises(Exception, match="a script item must be text"):
        complete(script.name, HI, backoff=0.001)


def test_offline_model_crash_is_not_retried_as_network_error():
    calls = []

    def broken(messages, tools):
        calls.append(1)
        raise ValueError("boom in script")

    script = ScriptedModel(broken)
    with pytest.raises(Exception, match="boom in script") as info:
        complete(script.name, HI, retries=3, backoff=0.001)
    assert len(calls) == 1
    assert "cannot reach the provider" not in str(info.value)


def test_scripted_model_ids_never_collide(monkeypatch):
    # once ids collide every later auto id collides too, so keep the damage inside this test
    monkeypatch.setattr(ScriptedModel, "_registry", dict(ScriptedModel._registry))
    taken = len(ScriptedModel._registry) + 2
    named = ScriptedModel(["named"], name=f"s{taken}")
    ScriptedModel(["auto 1"])
    ScriptedModel(["auto 2"])
    assert ScriptedModel.get(named.id) is named


# --------------------------------------------------------------------------------------
# tea/demo
# --------------------------------------------------------------------------------------


@pytest.fixture
def demo_tools(math_ws):
    return [math_ws.tools.get(n).to_openai() for n in ("add", "multiply", "shout")] + [DONE_TOOL]


def test_demo_picks_the_matching_tool_and_fills_numbers(demo_tools):
    reply = complete("tea/demo", messages_for("Please multiply 6 by 7.5", demo_tools), demo_tools)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("multiply", {"a": 6.0, "b": 7.5})]
    assert reply.scripted and reply.cost == 0.0
    reply = complete("tea/demo", messages_for("add 2 and 40 as whole numbers", demo_tools), demo_tools)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("add", {"a": 2, "b": 40})]
    assert all(isinstance(v, int) for v in reply.tool_calls[0].arguments.values())


def test_demo_fills_quoted_strings_or_the_task(demo_tools):
    reply = complete("tea/demo", messages_for('shout "hello there" in upper case', demo_tools), demo_tools)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("shout", {"text": "hello there"})]
    reply = complete("tea/demo", messages_for("upper case letters please", demo_tools), demo_tools)
    assert reply.tool_calls[0].name == "shout"
    assert reply.tool_calls[0].arguments == {"text": "upper case letters please"}


def test_demo_reports_the_tool_result_with_done_and_its_label(demo_tools):
    task = "multiply 6 by 7"
    steps = [StepRecord(1, results=[("multiply", '{"a": 6.0, "b": 7.0}', "42.0")])]
    msgs = messages_for(task, demo_tools, steps)
    assert history_calls(msgs) == [("multiply", '{"a": 6.0, "b": 7.0}', "42.0")]
    reply = complete("tea/demo", msgs, demo_tools)
    (done,) = reply.tool_calls
    assert done.name == "done" and valid(DONE_SCHEMA, done.arguments)
    assert done.arguments["success"] is True
    assert done.arguments["text"] == f"42.0\n\n— {DemoModel.label}"
    assert "not an LLM" in done.arguments["text"]


def test_demo_without_tools_says_so():
    reply = complete("tea/demo", messages_for("anything", [DONE_TOOL]), [DONE_TOOL])
    (done,) = reply.tool_calls
    assert done.arguments["success"] is False and done.arguments["text"].startswith("I have no tools")
    reply = complete("tea/demo", [{"role": "user", "content": "anything"}])
    assert reply.tool_calls == [] and "not an LLM" in reply.content


def test_demo_agent_run_end_to_end(math_ws):
    result = math_ws.agent("d", tools=["multiply", "shout", "add"], model="tea/demo").run_sync("multiply 6 by 7")
    # the demo relays the tool's result without checking it: the run says so instead of 'success'
    assert result.status == "unverified" and not result.success
    assert result.answer.startswith("42.0") and "not an LLM" in result.answer
    assert [a["name"] for s in result.trajectory.steps for a in s.actions] == ["multiply", "done"]


def test_demo_quoted_text_ignores_apostrophes(demo_tools):
    reply = complete("tea/demo", messages_for("What's the upper case of 'abc'?", demo_tools), demo_tools)
    assert reply.tool_calls[0].arguments == {"text": "abc"}


# --------------------------------------------------------------------------------------
# replay cassettes
# --------------------------------------------------------------------------------------

TOOLS = [fn_tool("add", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})]


def _conversation():
    return [
        [{"role": "user", "content": "first request"}],
        [{"role": "user", "content": "second request"}],
        [{"role": "user", "content": "third request"}],
    ]


TURNS = [
    {"content": None, "tool_calls": [{"id": "r1", "name": "add", "arguments": '{"a": 1, "b": 2}'}]},
    {"content": "thinking out loud", "tool_calls": []},
    {"content": None, "tool_calls": [{"id": "r3", "name": "done", "arguments": '{"success": true, "text": "3"}'}]},
]
USAGE = [{"prompt_tokens": 101, "completion_tokens": 11}, {"prompt_tokens": 202, "completion_tokens": 22},
         {"prompt_tokens": 303, "completion_tokens": 33}]  # fmt: skip


@pytest.fixture
def cassette(tmp_path):
    path = tmp_path / "tapes" / "run.jsonl"
    tape = Cassette.open(path)
    for msgs, turn, usage in zip(_conversation(), TURNS, USAGE):
        tape.record(msgs, TOOLS, "openai/gpt-x", turn, usage)
    return path


def _replay_all(model):
    return [complete(model, msgs, TOOLS) for msgs in _conversation()]


def test_recorded_cassette_file_format(cassette):
    entries = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert len(entries) == 3
    assert [e["turn"] for e in entries] == TURNS and [e["usage"] for e in entries] == USAGE
    assert {e["model"] for e in entries} == {"openai/gpt-x"}
    assert len({e["key"] for e in entries}) == 3 and entries[0]["tools"] == TOOLS


def test_replay_returns_turns_and_usage_in_order_and_reruns(cassette):
    model = f"tea/replay:{cassette}"
    for _ in range(2):  # a second run from the start replays again
        replies = _replay_all(model)
        assert [(r.prompt_tokens, r.completion_tokens) for r in replies] == [(101, 11), (202, 22), (303, 33)]
        assert [(c.id, c.name, c.arguments) for c in replies[0].tool_calls] == [("r1", "add", {"a": 1, "b": 2})]
        assert replies[1].content == "thinking out loud" and replies[1].tool_calls == []
        assert replies[2].tool_calls[0].arguments == {"success": True, "text": "3"}
        assert all(r.scripted and r.cost == 0.0 and r.model == model for r in replies)


def test_replay_restarts_from_the_start_midway(cassette):
    model = f"tea/replay:{cassette}"
    first = _conversation()[0]
    assert complete(model, first, TOOLS).tool_calls[0].id == "r1"
    assert complete(model, first, TOOLS).tool_calls[0].id == "r1"  # rerun before finishing
    assert [r.prompt_tokens for r in _replay_all(model)[1:]] == [202, 303]


def test_replay_divergence_shows_a_diff(cassette):
    model = f"tea/replay:{cassette}"
    conv = _conversation()
    complete(model, conv[0], TOOLS)
    started = time.perf_counter()
    with pytest.raises(ReplayDivergence) as info:
        complete(model, [{"role": "user", "content": "a different second request"}], TOOLS)
    assert time.perf_counter() - started < 1.0
    text = str(info.value)
    assert str(cassette) in text and "diverged at call 2" in text
    assert "--- recorded" in text and "+++ this run" in text
    lines = text.splitlines()
    assert any(ln.startswith("-") and "second request" in ln and "different" not in ln for ln in lines)
    assert any(ln.startswith("+") and "a different second request" in ln for ln in lines)
    # the cursor did not move: the recorded request still replays
    assert complete(model, conv[1], TOOLS).content == "thinking out loud"


def test_replay_divergence_does_not_depend_on_earlier_replays(cassette):
    model = f"tea/replay:{cassette}"
    other = [{"role": "user", "content": "a new first request"}]
    with pytest.raises(ReplayDivergence) as fresh:
        Cassette(cassette).respond(other, TOOLS)  # what a fresh process reports
    assert "diverged at call 1" in str(fresh.value)
    _replay_all(model)
    with pytest.raises(ReplayDivergence) as again:
        complete(model, other, TOOLS)
    assert str(again.value) == str(fresh.value)


def test_replay_divergence_in_offered_tools(cassette):
    model = f"tea/replay:{cassette}"
    with pytest.raises(ReplayDivergence) as info:
        complete(model, _conversation()[0], [*TOOLS, fn_tool("extra_tool", {"type": "object"})])
    assert any(ln.startswith("+") and "extra_tool" in ln for ln in str(info.value).splitlines())


def test_replay_divergence_in_a_tool_schema_names_the_change(cassette):
    changed = [fn_tool("add", {"type": "object", "properties": {"a": {"type": "integer"}, "c": {"type": "integer"}}})]
    with pytest.raises(ReplayDivergence) as info:
        complete(f"tea/replay:{cassette}", _conversation()[0], changed)
    assert any(ln.startswith("+") and '"c"' in ln for ln in str(info.value).splitlines())


def test_replay_of_missing_or_empty_cassette(tmp_path):
    missing = tmp_path / "nothing.jsonl"
    with pytest.raises(ReplayDivergence, match="empty or missing; record it first"):
        complete(f"tea/replay:{missing}", HI)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(ReplayDivergence, match=re.escape(f"cassette {empty} is empty or missing")):
        complete(f"tea/replay:{empty}", HI)


def test_corrupt_cassette_names_the_line(cassette):
    lines = cassette.read_text().splitlines()
    cassette.write_text("\n".join([lines[0], "{not json", lines[2]]) + "\n")
    with pytest.raises(TeaError, match=r"line 2 is not JSON"):
        complete(f"tea/replay:{cassette}", _conversation()[0], TOOLS)


def test_record_skips_offline_models(tmp_path):
    path = tmp_path / "rec.jsonl"
    script = ScriptedModel(["x"])
    assert run(ModelClient(record=path).complete(script.name, HI)).content == "x"
    assert not path.exists()


def test_agent_run_replays_from_a_cassette(math_ws, tmp_path):
    script_turns = [
        {"content": '{"next_goal": "add"}', "tool_calls": [{"id": "t1", "name": "add", "arguments": {"a": 2, "b": 3}}]},
        {"content": None, "tool_calls": [{"id": "t2", "name": "shout", "arguments": {"text": "five"}}]},
        {"content": None, "tool_calls": [{"id": "t3", "name": "done", "arguments": {"success": True, "text": "FIVE"}}]},
    ]
    seen = []

    def brain(messages, tools):
        seen.append((messages, tools))
        return script_turns[len(seen) - 1]

    script = ScriptedModel(brain)
    first = math_ws.agent("a", tools=["add", "shout"], model=script.name).run_sync("add 2 and 3, then shout it")
    assert first.status == "success" and len(seen) == 3 and script.calls == [m for m, _ in seen]

    path = tmp_path / "agent.jsonl"
    tape = Cassette.open(path)
    for i, ((messages, tools), turn) in enumerate(zip(seen, script_turns)):
        turn = {**turn, "tool_calls": [{**c, "arguments": json.dumps(c["arguments"])} for c in turn["tool_calls"]]}
        tape.record(messages, tools, "openai/gpt-x", turn, {"prompt_tokens": 100 + i, "completion_tokens": 10})

    replay = f"tea/replay:{path}"
    second = math_ws.agent("a", tools=["add", "shout"], model=replay).run_sync("add 2 and 3, then shout it")
    assert (second.status, second.answer, second.model) == ("success", "FIVE", replay)

    def actions(result):
        return [
            [(a.get("id"), a["name"], a["arguments"], a.get("observation")) for a in s.actions]
            for s in result.trajectory.steps
        ]

    assert (
        actions(second)[:2]
        == actions(first)[:2]
        == [
            [("t1", "add", {"a": 2, "b": 3}, "5")],
            [("t2", "shout", {"text": "five"}, "FIVE")],
        ]
    )
    assert actions(second)[2][0][1] == actions(first)[2][0][1] == "done"
    # recorded usage comes back exactly
    assert (second.prompt_tokens, second.completion_tokens) == (100 + 101 + 102, 30)
    responses = [e.data for e in math_ws.events.events(second.run_id) if e.type == "model_response"]
    assert [r["prompt_tokens"] for r in responses] == [100, 101, 102] and all(r["scripted"] for r in responses)
    started = [e.data for e in math_ws.events.events(second.run_id) if e.type == "run_started"][0]
    assert "replayed cassette" in started["model_display"]

    # a changed task diverges: the run ends with an error that carries the diff
    third = math_ws.agent("a", tools=["add", "shout"], model=replay).run_sync(
        "add 2 and 4, then shout it", raise_on_error=False
    )
    assert third.status == "error" and "diverged at call" in third.error and "add 2 and 4" in third.error


# --------------------------------------------------------------------------------------
# error mapping and retries
# --------------------------------------------------------------------------------------


def test_missing_provider_key_is_one_clear_sentence(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    started = time.perf_counter()
    with pytest.raises(ModelError) as info:
        complete("openai/gpt-4.1-mini", HI, retries=3, backoff=1.0)
    assert time.perf_counter() - started < 2.0
    text = str(info.value)
    assert "openai/gpt-4.1-mini" in text and "OPENAI_API_KEY" in text


def test_missing_key_ends_agent_run_with_error(math_ws, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(RunFailed, match="OPENAI_API_KEY") as failed:  # no key: the run raises, stored
        math_ws.agent("k", tools=["add"], model="openai/gpt-4.1-mini").run_sync("add")
    result = failed.value.result
    assert result.status == "error" and "OPENAI_API_KEY" in result.error
    kinds = [e.data.get("kind") for e in math_ws.events.events(result.run_id) if e.type == "error"]
    assert kinds == ["model"]


def test_bogus_model_name_is_not_a_litellm_model():
    started = time.perf_counter()
    with pytest.raises(ModelError, match=r"'notamodel-xyz' is not a litellm model name"):
        complete("notamodel-xyz", HI, retries=3, backoff=1.0)
    assert time.perf_counter() - started < 2.0


def _flaky(failures):
    count = []

    def fn(messages, tools):
        count.append(1)
        if len(count) <= failures:
            raise litellm.RateLimitError("slow down please", llm_provider="openai", model="gpt-x")
        return "finally"

    return fn, count


def test_litellm_exception_from_provider_keeps_its_type():
    fn, _ = _flaky(99)
    script = ScriptedModel(fn)
    from tea_notebook.models.provider import ensure_registered

    ensure_registered()
    with pytest.raises(litellm.RateLimitError):
        run(litellm.acompletion(model=script.name, messages=HI, num_retries=0))


def test_rate_limits_are_retried():
    fn, count = _flaky(2)
    reply = complete(ScriptedModel(fn).name, HI, retries=3, backoff=0.01)
    assert reply.content == "finally" and len(count) == 3


def test_rate_limit_after_retries_is_a_model_error():
    fn, count = _flaky(2)
    model = ScriptedModel(fn).name
    with pytest.raises(ModelError, match="rate limited after retries") as info:
        complete(model, HI, retries=1, backoff=0.01)
    assert model in str(info.value) and "slow down please" in str(info.value)
    assert len(count) == 2


# --------------------------------------------------------------------------------------
# cost ledger
# --------------------------------------------------------------------------------------


def _responses(ws, run_id):
    return [e for e in ws.events.events(run_id) if e.type == "model_response"]


def test_run_totals_are_the_sum_of_model_responses(math_ws):
    script = ScriptedModel([call("add", a=1, b=2), call("shout", text="x"), call("done", success=True, text="ok")])
    result = math_ws.agent("c", tools=["add", "shout"], model=script.name).run_sync("three steps")
    assert result.status == "success" and result.steps == 3
    responses = _responses(math_ws, result.run_id)
    assert len(responses) == 3
    assert result.prompt_tokens == sum(e.data["prompt_tokens"] for e in responses) > 0
    assert result.completion_tokens == sum(e.data["completion_tokens"] for e in responses) > 0
    assert result.cost == sum(e.data["cost"] for e in responses) == 0.0
    finished = [e.data for e in math_ws.events.events(result.run_id) if e.type == "run_finished"][0]
    assert (finished["prompt_tokens"], finished["completion_tokens"]) == (
        result.prompt_tokens,
        result.completion_tokens,
    )
    traj = result.trajectory
    assert [s.prompt_tokens for s in traj.steps] == [e.data["prompt_tokens"] for e in responses]
    assert (traj.prompt_tokens, traj.completion_tokens) == (result.prompt_tokens, result.completion_tokens)
    ledger = traj.ledger()
    expected = {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
                "cost": 0.0, "calls": 3}  # fmt: skip
    assert ledger == {"by_agent": {"c": expected}, "by_model": {script.name: expected}}


@pytest.fixture
def planner_run(math_ws):
    sa = ScriptedModel([call("add", a=1, b=2), call("done", success=True, text="A3")])
    sb = ScriptedModel([call("add", a=10, b=20), call("shout", text="b"), call("done", success=True, text="B30")])
    math_ws.agent("a", tools=["add"], model=sa.name)
    math_ws.agent("b", tools=["add", "shout"], model=sb.name)
    sp = ScriptedModel(
        [[call("a_agent", task="T"), call("b_agent", task="T")], call("done", success=True, text="both")]
    )
    result = math_ws.planner(["a", "b"], model=sp.name).run_sync("T")
    return math_ws, result, {"planner": sp.name, "a": sa.name, "b": sb.name}


def test_planner_ledger_splits_by_agent_and_model(planner_run):
    ws, result, models = planner_run
    assert result.status == "success" and result.answer == "both"
    traj = result.trajectory
    assert sorted(c.agent for c in traj.children) == ["a", "b"]
    assert sorted(c.answer for c in traj.children) == ["A3", "B30"]
    events = _responses(ws, result.run_id)
    assert len(events) == 2 + 2 + 3
    expected_by_agent = {}
    for e in events:
        slot = expected_by_agent.setdefault(e.data["agent"], {"prompt_tokens": 0, "completion_tokens": 0,
                                                              "cost": 0.0, "calls": 0})  # fmt: skip
        slot["prompt_tokens"] += e.data["prompt_tokens"]
        slot["completion_tokens"] += e.data["completion_tokens"]
        slot["cost"] += e.data["cost"]
        slot["calls"] += 1
        assert e.data["model"] == models[e.data["agent"]]
    ledger = traj.ledger()
    assert ledger["by_agent"] == expected_by_agent
    assert ledger["by_model"] == {models[agent]: v for agent, v in expected_by_agent.items()}
    assert [ledger["by_agent"][a]["calls"] for a in ("planner", "a", "b")] == [2, 2, 3]
    assert traj.prompt_tokens == sum(e.data["prompt_tokens"] for e in events)
    assert traj.completion_tokens == sum(e.data["completion_tokens"] for e in events)
    # the planner's own model calls are its slot of the ledger
    own = [e for e in events if e.run_id == result.run_id]
    assert sum(e.data["prompt_tokens"] for e in own) == ledger["by_agent"]["planner"]["prompt_tokens"]


def test_planner_run_result_totals_include_sub_agents(planner_run):
    ws, result, _ = planner_run
    events = _responses(ws, result.run_id)
    assert result.prompt_tokens == sum(e.data["prompt_tokens"] for e in events) == result.trajectory.prompt_tokens


@pytest.mark.parametrize(
    "first_use",
    [
        "from tea_notebook.models.embedders import resolve_embedder\n"
        "try:\n    resolve_embedder('litellm:openai/text-embedding-3-small').embed(['x'])\n"
        "except Exception as exc:\n    print('failed as expected:', type(exc).__name__)",
        "from tea_notebook.models.provider import ensure_registered\nensure_registered()\n"
        "import litellm\ntry:\n    litellm.completion(model='openai/gpt-4o-mini', messages=[{'role': 'user', "
        "'content': 'hi'}], api_base='http://127.0.0.1:9/v1')\n"
        "except Exception as exc:\n    print('failed as expected:', type(exc).__name__)",
    ],
    ids=["embedder", "provider"],
)
def test_litellm_prints_nothing_into_a_cell_whichever_path_imports_it_first(first_use, tmp_path):
    """litellm's "Give Feedback / Get Help" banner, its debug hint and its price-list download warnings
    stay out of cells: every import of litellm in the package goes through one quiet function."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("LITELLM", "OPENAI"))}
    env.update(OPENAI_API_KEY="sk-not-a-key", OPENAI_API_BASE="http://127.0.0.1:9/v1")
    out = subprocess.run(
        [sys.executable, "-c", first_use], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("failed as expected:")
    printed = out.stdout + out.stderr
    for noise in ("Give Feedback", "turn_on_debug", "LiteLLM:WARNING", "model cost map"):
        assert noise not in printed, printed[-2000:]
