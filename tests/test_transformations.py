"""The six TEA transformations (A2T, T2A, E2T, T2E, A2E, E2A), interface consistency and composition."""

from __future__ import annotations

import pytest

import tea_notebook
from tea_notebook.errors import NotFoundError, TransformationError
from tea_notebook.protocol.acp import AGENT_TASK_SCHEMA
from tea_notebook.protocol.records import AgentRecord, EnvironmentRecord, ToolkitRecord, ToolRecord
from tea_notebook.protocol.transformations import (
    Lifted,
    a2e,
    a2t,
    action_set,
    check_interface,
    compose,
    e2a,
    e2t,
    t2a,
    t2e,
)

LOGIN_SCHEMA = {
    "type": "object",
    "properties": {"user": {"type": "string", "description": "Who logs in"}},
    "required": ["user"],
    "additionalProperties": False,
}
BUY_SCHEMA = {
    "type": "object",
    "properties": {"item": {"type": "string"}, "qty": {"type": "integer", "minimum": 1, "default": 1}},
    "required": ["item"],
}


class ShopRuntime:
    """An environment runtime that records every action that reaches it."""

    def __init__(self):
        self.log: list[tuple] = []
        self.user: str | None = None

    def login(self, user):
        self.user = user
        self.log.append(("login", user))
        return f"welcome {user}"

    def browse(self):
        self.log.append(("browse",))
        return ["tea", "cups"]

    async def buy(self, item, qty=1):
        self.log.append(("buy", item, qty))
        return f"{self.user} bought {qty} {item}"

    def state(self):
        return f"user={self.user} actions={len(self.log)}"


SHOP = {
    "name": "shop",
    "description": "An online tea shop",
    "rules": "log in before buying",
    "category": "commerce",
    "constraints": ["never spend more than 100"],
    "actions": [
        {"name": "login", "description": "Log in to the shop", "parameters": LOGIN_SCHEMA},
        {"name": "browse", "description": "List the products"},
        {
            "name": "buy",
            "description": "Buy an item",
            "parameters": BUY_SCHEMA,
            "returns": {"type": "string"},
            "preconditions": ["login"],
            "postconditions": ["browse"],
        },
    ],
}


@pytest.fixture
def shop(ws):
    runtime = ShopRuntime()
    ws.envs.register(SHOP, runtime=runtime)
    return runtime


@pytest.fixture
def researcher(ws):
    calls: list[tuple[str, list[str]]] = []

    def runner(task, files):
        calls.append((task, files))
        return f"answer to {task!r} using {len(files)} file(s)"

    ws.agents.register(
        {
            "name": "researcher",
            "description": "Researches questions on the web",
            "role": "research assistant",
            "capabilities": ["web research", "summaries"],
            "safety_constraints": ["cite sources"],
            "category": "research",
        },
        runtime=runner,
    )
    return calls


@pytest.fixture
def calc(ws):
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first number
            b: second number
        """
        return a + b

    def mul(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    ws.tools.register(tea_notebook.tool(add, category="math", toolkit="calc"))
    ws.tools.register(tea_notebook.tool(mul, category="math", toolkit="calc"))
    ws.toolkits.register(
        {"name": "calc", "description": "Arithmetic", "rules": "integers only", "tools": ["add", "mul"]}
    )
    return ["add", "mul"]


def op(record) -> str:
    return record.metadata["transformation"]["op"]


# ---------------------------------------------------------------------------------------------
# A2T
# ---------------------------------------------------------------------------------------------
def test_a2t_record(ws, researcher):
    tool = a2t(ws, "researcher")
    assert isinstance(tool, ToolRecord)
    assert tool.name == "researcher_agent"
    assert tool.origin == "agent" and tool.entrypoint == "agent:researcher"
    assert tool.parameters == AGENT_TASK_SCHEMA
    assert tool.category == "research"
    assert "Researches questions on the web" in tool.description
    assert "web research" in tool.description
    assert op(tool) == "A2T"
    assert tool.metadata["transformation"]["from"] == "agent:researcher"
    assert tool.metadata["transformation"]["from_version"] == 1
    assert ws.tools.get("researcher_agent").version == 1


def test_a2t_invocation_passes_task_unmodified(ws, researcher):
    a2t(ws, "researcher")
    task = "  Find the 3 best green teas;\nreturn JSON  "
    res = ws.tools.invoke("researcher_agent", {"task": task, "files": ["/abs/notes.txt", "/abs/b.pdf"]})
    assert res.ok, res.error
    assert researcher == [(task, ["/abs/notes.txt", "/abs/b.pdf"])]
    assert res.value == f"answer to {task!r} using 2 file(s)"
    res = ws.tools.invoke("researcher_agent", {"task": "no files"})
    assert res.ok and researcher[-1] == ("no files", [])


def test_a2t_validation_and_errors(ws, researcher):
    a2t(ws, "researcher", name="ask_researcher")
    assert "ask_researcher" in ws.tools and "researcher_agent" not in ws.tools
    res = ws.tools.invoke("ask_researcher", {"files": []})
    assert not res.ok and res.error["type"] == "ValidationError" and res.error["field"] == "task"
    res = ws.tools.invoke("ask_researcher", {"task": "x", "extra": 1})
    assert not res.ok and res.error["field"] == "extra"
    assert researcher == []

    def broken(task, files):
        raise LookupError("no sources for " + task)

    ws.agents.register({"name": "broken_agent", "description": "Always fails"}, runtime=broken)
    tool = a2t(ws, "broken_agent")
    assert tool.name == "broken_agent"  # already ends with 'agent'
    res = ws.tools.invoke("broken_agent", {"task": "tea"})
    assert not res.ok
    assert res.error == {"type": "LookupError", "message": "no sources for tea"}

    with pytest.raises(NotFoundError, match="ghost"):
        a2t(ws, "ghost")


# ---------------------------------------------------------------------------------------------
# T2A
# ---------------------------------------------------------------------------------------------
def test_t2a_lists_tools(ws, calc):
    agent = t2a(ws, ["add", "mul"], name="math_agent", description="Does arithmetic", model="gpt-test")
    assert isinstance(agent, AgentRecord)
    assert agent.tools == ["add", "mul"]
    assert agent.capabilities == [ws.tools.get("add").description, ws.tools.get("mul").description]
    assert "add" in agent.role and "mul" in agent.role
    assert agent.model == "gpt-test"
    assert agent.category == "math"
    assert op(agent) == "T2A"
    assert agent.metadata["transformation"]["from"] == ["tool:add", "tool:mul"]
    assert ws.agents.get("math_agent").tools == ["add", "mul"]


def test_t2a_from_toolkit_name(ws, calc):
    agent = t2a(ws, "calc", name="calc_agent", description="Uses the calculator", role="calculator")
    assert agent.tools == ["add", "mul"]
    assert agent.role == "calculator"


def test_t2a_unknown_tool_is_error(ws, calc):
    with pytest.raises(NotFoundError, match="divide"):
        t2a(ws, ["add", "divide"], name="bad_agent", description="Broken")
    assert "bad_agent" not in ws.agents


# ---------------------------------------------------------------------------------------------
# E2T
# ---------------------------------------------------------------------------------------------
def test_e2t_toolkit_and_tools(ws, shop):
    lifted = e2t(ws, "shop")
    assert isinstance(lifted, Lifted)
    assert isinstance(lifted.toolkit, ToolkitRecord)
    assert lifted.toolkit.name == "shop"
    assert lifted.toolkit.tools == ["shop_login", "shop_browse", "shop_buy"]
    assert lifted.toolkit.rules == "log in before buying"
    assert op(lifted.toolkit) == "E2T"
    by_name = {t.name: t for t in lifted.tools}
    assert set(by_name) == {"shop_login", "shop_browse", "shop_buy"}
    env = ws.envs.get("shop")
    for action in env.actions:
        tool = by_name[f"shop_{action.name}"]
        assert tool.parameters == action.parameters
        assert tool.returns == action.returns
        assert tool.description == action.description
        assert tool.toolkit == "shop" and tool.category == "commerce"
        assert tool.origin == "environment" and tool.entrypoint == f"environment:shop.{action.name}"
        assert tool.metadata["action"] == action.name
        assert op(tool) == "E2T"
    # pre/post-conditions became relations between the tools
    assert by_name["shop_buy"].related("precondition") == ["shop_login"]
    assert by_name["shop_buy"].related("postcondition") == ["shop_browse"]
    assert by_name["shop_login"].relations == []
    assert ("shop_buy", "precondition", "shop_login") in ws.tools.graph()
    assert sorted(ws.tools.members("shop")) == ["shop_browse", "shop_buy", "shop_login"]


def test_e2t_prefix(ws, shop):
    lifted = e2t(ws, "shop", prefix="store_")
    assert lifted.toolkit.name == "store"
    assert [t.name for t in lifted.tools] == ["store_login", "store_browse", "store_buy"]
    assert lifted.tools[2].related("precondition") == ["store_login"]


def test_e2t_tool_invocation_reaches_runtime(ws, shop):
    e2t(ws, "shop")
    res = ws.tools.invoke("shop_login", {"user": "ann"})
    assert res.ok and res.value == "welcome ann"
    assert shop.log == [("login", "ann")]
    res = ws.tools.invoke("shop_login", {"user": 7})
    assert not res.ok and res.error["type"] == "ValidationError"
    assert shop.log == [("login", "ann")]


def test_e2t_toolkit_binding_and_precondition_routing(ws, shop):
    e2t(ws, "shop")
    ws.tools.register({"name": "unrelated", "description": "Not part of the shop"})
    with ws.context() as ctx:
        ws.tools.bind("shop", ctx)
        assert ctx.bound("toolkit") == ["shop"]
        assert [t.name for t in ws.tools.route(context=ctx)] == ["shop_browse", "shop_login"]
        # buying before logging in fails in the environment, and keeps the environment's error
        early = ws.tools.invoke("shop_buy", {"item": "tea"}, ctx)
        assert not early.ok and "login" in early.error["message"]
        assert ("buy", "tea", 1) not in shop.log
        assert ws.tools.invoke("shop_login", {"user": "bo"}, ctx).ok
        assert [t.name for t in ws.tools.route(context=ctx)] == ["shop_browse", "shop_buy", "shop_login"]
        res = ws.tools.invoke("shop_buy", {"item": "tea", "qty": 2}, ctx)
        assert res.ok and res.value == "bo bought 2 tea"
    assert shop.log == [("login", "bo"), ("buy", "tea", 2)]


def test_e2t_rejects_invalid_action_schema_and_registers_nothing(ws):
    ws.envs.register({
        "name": "weird", "description": "Bad schema env",
        "actions": [{"name": "go", "description": "Go", "parameters": {"type": "object", "properties": {"x": {"type": "nosuchtype"}}}}],
    })  # fmt: skip
    with pytest.raises(TransformationError, match="weird_go"):
        e2t(ws, "weird")
    assert "weird_go" not in ws.tools and "weird" not in ws.toolkits


# ---------------------------------------------------------------------------------------------
# T2E
# ---------------------------------------------------------------------------------------------
def test_t2e_keeps_schemas_and_runs_tools(ws, calc):
    env = t2e(ws, ["add", "mul"], name="calc_env", description="A calculator environment", rules="be exact")
    assert isinstance(env, EnvironmentRecord)
    assert [a.name for a in env.actions] == ["add", "mul"]
    assert env.action("add").parameters == ws.tools.get("add").parameters
    assert env.action("mul").parameters == ws.tools.get("mul").parameters
    assert env.action("add").description == ws.tools.get("add").description
    assert env.rules == "be exact" and env.category == "math"
    assert op(env) == "T2E"
    assert env.metadata["transformation"]["from"] == ["tool:add", "tool:mul"]

    res = ws.envs.invoke("calc_env", "add", {"a": 2, "b": 3})
    assert res.ok and res.value == 5
    assert ws.envs.invoke("calc_env", "mul", {"a": 4, "b": 5}).value == 20
    bad = ws.envs.invoke("calc_env", "add", {"a": "two", "b": 3})
    assert not bad.ok and bad.error["type"] == "ValidationError" and bad.error["field"] == "a"
    assert ws.tools.get("add").usage.calls == 1  # the env action ran the tool once


def test_t2e_from_toolkit_uses_kit_rules(ws, calc):
    env = t2e(ws, "calc", name="calc_env", description="Calculator")
    assert env.rules == "integers only"
    assert {a.name for a in env.actions} == {"add", "mul"}


def test_t2e_keeps_precondition_links(ws, shop):
    e2t(ws, "shop")
    env = t2e(ws, ["shop_login", "shop_buy"], name="mini_shop", description="Login and buy")
    assert [a.name for a in env.actions] == ["login", "buy"]
    assert env.action("buy").preconditions == ["login"]
    assert env.action("buy").parameters == BUY_SCHEMA
    # the new environment enforces its own ordering
    res = ws.envs.invoke("mini_shop", "buy", {"item": "tea"}, ws.context())
    assert not res.ok and "login" in res.error["message"]


def test_t2e_of_lifted_env_propagates_context(ws, shop):
    e2t(ws, "shop")
    t2e(ws, "shop", name="shop_again", description="The shop again")
    ctx = ws.context()
    assert ws.envs.invoke("shop_again", "login", {"user": "cy"}, ctx).ok
    res = ws.envs.invoke("shop_again", "buy", {"item": "cups"}, ctx)
    assert res.ok, res.error
    assert res.value == "cy bought 1 cups"


def test_t2e_duplicate_action_names(ws, shop):
    ws.envs.register({**SHOP, "name": "shop2", "description": "Another shop"})
    e2t(ws, "shop")
    e2t(ws, "shop2")
    with pytest.raises(TransformationError) as exc:
        t2e(ws, ["shop_login", "shop2_login", "shop_buy"], name="merged", description="Both shops")
    assert "login" in str(exc.value) and "merged" in str(exc.value)
    clashes = str(exc.value).split("same action", 1)[1].split(";", 1)[0]
    assert clashes.strip() == "login"  # only the clashing name, not 'buy'
    assert "merged" not in ws.envs


def test_t2e_unknown_tool(ws, calc):
    with pytest.raises(NotFoundError, match="sqrt"):
        t2e(ws, ["add", "sqrt"], name="e", description="E")
    assert "e" not in ws.envs


# ---------------------------------------------------------------------------------------------
# A2E / E2A
# ---------------------------------------------------------------------------------------------
def test_a2e_ask_reaches_agent_and_state_tracks_transcript(ws, researcher):
    env = a2e(ws, "researcher")
    assert env.name == "researcher_env"
    assert [a.name for a in env.actions] == ["ask"]
    assert op(env) == "A2E"
    assert "research assistant" in env.rules and "cite sources" in env.rules
    assert "no messages yet" in ws.envs.state("researcher_env")

    res = ws.envs.invoke("researcher_env", "ask", {"message": "Which tea is best?"})
    assert res.ok
    assert researcher == [("Which tea is best?", [])]
    assert res.value == "answer to 'Which tea is best?' using 0 file(s)"
    state = ws.envs.state("researcher_env")
    assert "1 exchanges" in state and "Which tea is best?" in state and res.value in state

    ws.envs.invoke("researcher_env", "ask", {"message": "And the cheapest?"})
    state = ws.envs.state("researcher_env")
    assert "2 exchanges" in state and "And the cheapest?" in state

    bad = ws.envs.invoke("researcher_env", "ask", {})
    assert not bad.ok and bad.error["field"] == "message"
    assert len(researcher) == 2


def test_a2e_agent_failure_is_not_recorded_in_transcript(ws):
    def runner(task, files):
        raise RuntimeError("agent down")

    ws.agents.register({"name": "flaky", "description": "Flaky agent"}, runtime=runner)
    a2e(ws, "flaky", name="flaky_env")
    res = ws.envs.invoke("flaky_env", "ask", {"message": "hello"})
    assert not res.ok and res.error["message"] == "agent down"
    assert "no messages yet" in ws.envs.state("flaky_env")


def test_e2a_agent_uses_lifted_tools(ws, shop):
    agent = e2a(ws, "shop", model="m-1")
    assert agent.name == "shop_agent"
    assert agent.tools == ["shop_login", "shop_browse", "shop_buy"]
    assert all(t in ws.tools for t in agent.tools)
    assert "shop" in ws.toolkits
    assert agent.capabilities == ["Log in to the shop", "List the products", "Buy an item"]
    assert agent.safety_constraints == ["never spend more than 100"]
    assert agent.model == "m-1" and agent.category == "commerce"
    assert op(agent) == "E2A"
    assert ws.agents.get("shop_agent").tools == agent.tools


def test_e2a_reuses_existing_lift(ws, shop):
    e2t(ws, "shop")
    before = {n: ws.tools.get(n).version for n in ("shop_login", "shop_buy")}
    agent = e2a(ws, "shop", name="clerk")
    assert agent.name == "clerk"
    assert agent.tools == ["shop_login", "shop_browse", "shop_buy"]
    assert {n: ws.tools.get(n).version for n in before} == before


# ---------------------------------------------------------------------------------------------
# interface consistency
# ---------------------------------------------------------------------------------------------
def test_check_interface_rejects_environment_without_actions(ws):
    env = EnvironmentRecord(name="empty_env", description="Nothing to do")
    with pytest.raises(TransformationError, match="empty_env.*no actions"):
        check_interface(ws, env)


@pytest.mark.parametrize(
    "schema, message",
    [
        ({"type": "object", "properties": {"x": {"type": "nosuchtype"}}}, "not valid JSON Schema"),
        ({"type": "object", "required": "x"}, "not valid JSON Schema"),
        ({"type": "array", "items": {"type": "string"}}, "JSON object schema"),
    ],
)
def test_check_interface_rejects_bad_schemas(ws, schema, message):
    with pytest.raises(TransformationError, match=message) as exc:
        check_interface(ws, ToolRecord(name="t_bad", description="Bad", parameters=schema))
    assert "t_bad" in str(exc.value)
    env = EnvironmentRecord(
        name="e_bad", description="Bad", actions=[{"name": "act", "description": "A", "parameters": schema}]
    )
    with pytest.raises(TransformationError, match=message) as exc:
        check_interface(ws, env)
    assert "e_bad.act" in str(exc.value)


def test_check_interface_rejects_agent_with_unregistered_tools(ws, calc):
    good = AgentRecord(name="ok_agent", description="Fine", tools=["add"])
    check_interface(ws, good)  # does not raise
    bad = AgentRecord(name="bad_agent", description="Refers to ghosts", tools=["add", "ghost1", "ghost2"])
    with pytest.raises(TransformationError) as exc:
        check_interface(ws, bad)
    assert "bad_agent" in str(exc.value) and "ghost1, ghost2" in str(exc.value)
    assert "add," not in str(exc.value)
    kit = ToolkitRecord(name="kit", description="Kit", tools=["mul", "nope"])
    with pytest.raises(TransformationError, match="nope"):
        check_interface(ws, kit)


def test_check_interface_rejects_record_broken_after_construction(ws):
    broken = ToolRecord(name="fine", description="ok").model_copy(update={"name": "not valid!"})
    with pytest.raises(TransformationError, match="not a valid record"):
        check_interface(ws, broken)


def test_t2e_rejects_tool_with_invalid_schema(ws):
    ws.tools.register({"name": "odd", "description": "Odd schema", "parameters": {"type": "string"}})
    with pytest.raises(TransformationError, match="odd"):
        t2e(ws, ["odd"], name="odd_env", description="Odd")
    assert "odd_env" not in ws.envs


# ---------------------------------------------------------------------------------------------
# composition
# ---------------------------------------------------------------------------------------------
def test_action_set_env_roundtrip(ws, shop):
    env = ws.envs.get("shop")
    lifted = e2t(ws, "shop")
    assert action_set(lifted.tools) == action_set(env)
    back = t2e(ws, lifted.toolkit.name, name="shop_back", description="Round trip")
    assert action_set(back) == action_set(env)
    assert len(action_set(env)) == 3


def test_action_set_tools_roundtrip(ws, calc):
    tools = [ws.tools.get(n) for n in calc]
    env = t2e(ws, calc, name="calc_env", description="Calculator")
    lifted = e2t(ws, "calc_env")
    assert [t.name for t in lifted.tools] == ["calc_env_add", "calc_env_mul"]
    assert action_set(tools) == action_set(lifted.tools) == action_set(env)
    # the lifted tools still compute through two transformation layers
    res = ws.tools.invoke("calc_env_mul", {"a": 6, "b": 7})
    assert res.ok and res.value == 42


def test_action_set_distinguishes_schemas(ws, calc):
    tools = [ws.tools.get(n) for n in calc]
    changed = [tools[0], tools[1].model_copy(update={"parameters": {"type": "object", "properties": {}}})]
    assert action_set(changed) != action_set(tools)


def test_compose_env_tools_env(ws, shop):
    result = compose(ws, "shop", ["E2T", "T2E"], source_kind="environment")
    assert isinstance(result, EnvironmentRecord)
    assert result.name == "shop_e2t_t2e"
    assert action_set(result) == action_set(ws.envs.get("shop"))
    assert op(result) == "T2E"
    assert op(ws.toolkits.get("shop_e2t")) == "E2T"


def test_compose_tools_env_tools(ws, calc):
    result = compose(ws, "calc", ["T2E", "E2T"], source_kind="toolkit")
    assert isinstance(result, Lifted)
    assert result.toolkit.name == "calc_t2e_e2t"
    assert action_set(result.tools) == action_set([ws.tools.get(n) for n in calc])
    assert all(op(t) == "E2T" for t in result.tools)
    listed = compose(ws, ["add", "mul"], ["T2E"], source_kind="tools")
    assert isinstance(listed, EnvironmentRecord) and {a.name for a in listed.actions} == {"add", "mul"}


def test_compose_long_chain_is_invocable(ws, researcher):
    agent = compose(ws, "researcher", ["A2E", "E2T", "T2A"], source_kind="agent")
    assert isinstance(agent, AgentRecord)
    assert op(agent) == "T2A"
    assert len(agent.tools) == 1
    tool_name = agent.tools[0]
    assert op(ws.tools.get(tool_name)) == "E2T"
    res = ws.tools.invoke(tool_name, {"message": "chained question"})
    assert res.ok, res.error
    assert researcher == [("chained question", [])]


_A2T_CODOMAIN = (
    "transformations.SIGNATURES['A2T'] is ('agent', 'tool') while every other step and compose's "
    "source_kind mapping use 'tools': "
)


def test_compose_agent_to_tool_to_env(ws, researcher):
    env = compose(ws, "researcher", ["A2T", "T2E"], source_kind="agent")
    assert isinstance(env, EnvironmentRecord)
    assert [a.name for a in env.actions] == ["researcher_agent"]
    assert env.actions[0].parameters == AGENT_TASK_SCHEMA
    res = ws.envs.invoke(env.name, "researcher_agent", {"task": "via env", "files": ["/f"]})
    assert res.ok and researcher == [("via env", ["/f"])]


def test_compose_a2t_alone_returns_tool(ws, researcher):
    tool = compose(ws, "researcher", ["A2T"], source_kind="agent")
    assert isinstance(tool, ToolRecord) and tool.name == "researcher_agent"


@pytest.mark.parametrize(
    "source, kind, steps, step_text",
    [
        ("researcher", "agent", ["E2T"], "step 1 (E2T) takes environment"),
        ("researcher", "agent", ["A2T", "E2A"], "step 2 (E2A) takes environment"),
        ("shop", "environment", ["E2A", "A2T", "A2T"], "step 3 (A2T) takes agent"),
        ("calc", "toolkit", ["A2E"], "step 1 (A2E) takes agent, but the previous result is tools"),
    ],
)
def test_compose_rejects_mismatched_domains(ws, shop, researcher, calc, source, kind, steps, step_text):
    with pytest.raises(TransformationError) as exc:
        compose(ws, source, steps, source_kind=kind)
    assert step_text in str(exc.value)


def test_compose_rejects_unknown_step(ws, shop):
    with pytest.raises(TransformationError) as exc:
        compose(ws, "shop", ["E2T", "X2Y"], source_kind="environment")
    assert "X2Y" in str(exc.value) and "T2E" in str(exc.value)


def test_compose_from_single_tool(ws, calc):
    env = compose(ws, "add", ["T2E"], source_kind="tool")
    assert [a.name for a in env.actions] == ["add"]


def test_compose_t2a_from_single_tool(ws, calc):
    agent = compose(ws, "add", ["T2A"], source_kind="tool")
    assert agent.tools == ["add"]


def test_every_transformation_records_provenance(ws, shop, researcher, calc):
    produced = {
        "A2T": [a2t(ws, "researcher")],
        "T2A": [t2a(ws, calc, name="t2a_agent", description="From tools")],
        "E2T": [(lifted := e2t(ws, "shop")).toolkit, *lifted.tools],
        "T2E": [t2e(ws, calc, name="t2e_env", description="From tools")],
        "A2E": [a2e(ws, "researcher")],
        "E2A": [e2a(ws, "shop")],
    }
    for expected, records in produced.items():
        for record in records:
            assert op(record) == expected, record.name
            # the stored version carries it too
            registry = {"tool": ws.tools, "toolkit": ws.toolkits, "environment": ws.envs, "agent": ws.agents}[
                record.KIND
            ]
            assert op(registry.get(record.name)) == expected
