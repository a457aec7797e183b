"""``@tool``, Tool objects and invoking tools through a workspace's tool registry."""

import asyncio
import hashlib
import inspect
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from order_models import LineItem, Order
from pydantic import BaseModel

import tea_notebook
from tea_notebook.errors import RegistryError
from tea_notebook.protocol.context import Context, ToolContext
from tea_notebook.protocol.records import Relation
from tea_notebook.protocol.registry import InvokeResult
from tea_notebook.protocol.tools import Tool, make_tool
from tea_notebook.workspace import current_workspace


@pytest.fixture
def no_active_workspace():
    assert current_workspace(required=False) is None, "a workspace leaked as current from elsewhere"


@dataclass
class Point:
    x: int
    y: int


# --------------------------------------------------------------------------------------
# the decorator
# --------------------------------------------------------------------------------------


def test_bare_decorator_without_workspace_returns_unregistered_tool(no_active_workspace):
    @tea_notebook.tool
    def double(x: int) -> int:
        """Double a number."""
        return 2 * x

    assert isinstance(double, Tool)
    assert double.name == "double"
    assert double.record.version == 0  # not registered anywhere
    assert double.record.description == "Double a number."
    assert double.record.category == "general" and double.record.toolkit is None
    assert double(21) == 42
    assert double.__doc__ == "Double a number."


def test_decorator_with_arguments_into_explicit_workspace(ws):
    @tea_notebook.tool(
        workspace=ws,
        category="math",
        toolkit="calculator",
        permissions=["network", "filesystem", "network"],
        relations=[("depends_on", "lookup_rate"), ("conflicts_with", "legacy_add")],
    )
    def add(a: int, b: int = 2) -> int:
        """Add two numbers."""
        return a + b

    assert add.record.version == 1
    stored = ws.tools.get("add")
    assert stored.category == "math"
    assert stored.toolkit == "calculator"
    assert stored.permissions == ["filesystem", "network"]
    assert stored.relations == [
        Relation(type="depends_on", target="lookup_rate"),
        Relation(type="conflicts_with", target="legacy_add"),
    ]
    assert stored.related("depends_on") == ["lookup_rate"]
    assert add(1, 2) == 3


def test_name_and_description_options(ws):
    @tea_notebook.tool(workspace=ws, name="renamed_tool", description="Explicit description.")
    def original(x: int) -> int:
        return x

    assert "renamed_tool" in ws.tools and "original" not in ws.tools
    assert ws.tools.get("renamed_tool").description == "Explicit description."
    assert ws.tools.invoke("renamed_tool", {"x": 4}).value == 4


def test_bad_relation_type_is_refused_at_registration(ws):
    def f(x: int) -> int:
        """Identity."""
        return x

    with pytest.raises(RegistryError, match="contains"):
        tea_notebook.tool(workspace=ws, relations=[("contains", "other")])(f)
    assert "f" not in ws.tools


def test_registers_into_current_workspace_when_activated(tmp_path, no_active_workspace):
    ws_a = tea_notebook.Workspace(tmp_path / "a", embedder="hashing")
    ws_b = tea_notebook.Workspace(tmp_path / "b", embedder="hashing")
    try:
        with ws_a.activate():
            assert current_workspace() is ws_a

            @tea_notebook.tool
            def in_a(x: int) -> int:
                """Registered in A."""
                return x

            with ws_b.activate():

                @tea_notebook.tool(category="nested")
                def in_b(x: int) -> int:
                    """Registered in B."""
                    return x

            assert current_workspace() is ws_a  # the inner block restored A

        assert current_workspace(required=False) is None

        @tea_notebook.tool
        def nowhere(x: int) -> int:
            """Registered nowhere."""
            return x

        assert ws_a.tools.names() == ["in_a"]
        assert ws_b.tools.names() == ["in_b"]
        assert ws_b.tools.get("in_b").category == "nested"
        assert in_a.record.version == 1 and nowhere.record.version == 0
    finally:
        ws_a.close()
        ws_b.close()


def test_activate_as_statement_stays_current_until_close(tmp_path, no_active_workspace):
    ws = tea_notebook.Workspace(tmp_path / "s", embedder="hashing")
    try:
        ws.activate()
        assert current_workspace() is ws

        @tea_notebook.tool
        def kept(x: int) -> int:
            """Registered while active."""
            return x

        assert "kept" in ws.tools
    finally:
        ws.close()
    assert current_workspace(required=False) is None


def test_explicit_workspace_wins_over_current(tmp_path, no_active_workspace):
    ws_a = tea_notebook.Workspace(tmp_path / "a", embedder="hashing")
    ws_b = tea_notebook.Workspace(tmp_path / "b", embedder="hashing")
    try:
        with ws_a.activate():

            @tea_notebook.tool(workspace=ws_b)
            def explicit(x: int) -> int:
                """Goes to B."""
                return x

        assert "explicit" in ws_b.tools and "explicit" not in ws_a.tools
    finally:
        ws_a.close()
        ws_b.close()


def test_registry_tool_decorator_bare_and_with_options(ws):
    @ws.tools.tool
    def upper(text: str) -> str:
        """Upper-case text."""
        return text.upper()

    @ws.tools.tool(category="text", toolkit="strings")
    def lower(text: str) -> str:
        """Lower-case text."""
        return text.lower()

    assert isinstance(upper, Tool) and upper("a") == "A"
    assert lower("B") == "b"
    assert ws.tools.names() == ["lower", "upper"]
    assert ws.tools.get("lower").toolkit == "strings"
    assert ws.tools.get("lower").category == "text"
    assert upper.record.version == 1


def test_register_plain_function(ws):
    def triple(x: int) -> int:
        """Triple a number."""
        return 3 * x

    stored = ws.tools.register(triple)
    assert stored.name == "triple" and stored.version == 1
    assert ws.tools.invoke("triple", {"x": 3}).value == 9


def test_to_openai_shape(ws):
    @tea_notebook.tool(workspace=ws)
    def convert(amount: float, currency: str = "EUR") -> float:
        """Convert money.

        Args:
            amount: How much.
            currency: Target currency.
        """
        return amount

    out = convert.to_openai()
    assert set(out) == {"type", "function"}
    assert out["type"] == "function"
    fn = out["function"]
    assert set(fn) == {"name", "description", "parameters"}
    assert fn["name"] == "convert"
    assert fn["description"] == "Convert money."
    assert fn["parameters"]["type"] == "object"
    assert fn["parameters"]["properties"]["amount"] == {"type": "number", "description": "How much."}
    assert fn["parameters"]["required"] == ["amount"]
    assert ws.tools.to_openai(["convert"]) == [out]


def test_async_tool_call_returns_coroutine(no_active_workspace):
    @tea_notebook.tool
    async def later(x: int) -> int:
        """Return x later."""
        await asyncio.sleep(0)
        return x + 1

    assert later.record.is_async is True
    coro = later(1)
    assert inspect.iscoroutine(coro)
    assert asyncio.run(coro) == 2


def test_record_source_hash_and_entrypoint(no_active_workspace):
    @tea_notebook.tool
    def sample(x: int) -> int:
        """Sample tool."""
        return x

    rec = sample.record
    expected_source = textwrap.dedent(inspect.getsource(sample.fn))
    assert rec.source == expected_source
    assert "def sample(x: int) -> int:" in rec.source
    assert rec.source_hash == hashlib.sha256(rec.source.encode()).hexdigest()
    assert rec.entrypoint == f"{sample.fn.__module__}:{sample.fn.__qualname__}"
    assert rec.origin == "python"


def test_dependencies_inferred_from_body_imports(no_active_workspace):
    @tea_notebook.tool
    def analyse(path: str) -> int:
        """Analyse a file."""
        import json
        import os.path
        from collections import OrderedDict

        import numpy as np
        import yaml.loader as yl
        from pandas.api import types

        import tea_notebook.protocol
        from .sibling import helper  # noqa: F401  (never executed)

        return len(path)

    assert analyse.record.dependencies == ["numpy", "pandas", "yaml"]


def test_explicit_dependencies_override_inference(no_active_workspace):
    @tea_notebook.tool(dependencies=["scipy", "requests", "scipy"])
    def g(x: int) -> int:
        """No imports."""
        import numpy  # noqa: F401

        return x

    assert g.record.dependencies == ["requests", "scipy"]


def test_exec_defined_function_has_no_source():
    ns: dict[str, Any] = {"__name__": "generated_tools"}
    exec('def made(x: int) -> int:\n    """Made by exec."""\n    return x\n', ns)  # noqa: S102
    rec = make_tool(ns["made"]).record
    assert rec.source == "" and rec.source_hash == ""
    assert rec.entrypoint == "generated_tools:made"
    assert rec.dependencies == []


def test_tool_context_is_exported_at_top_level():
    assert tea_notebook.ToolContext is ToolContext


# --------------------------------------------------------------------------------------
# invoking
# --------------------------------------------------------------------------------------


def test_invoke_sync_and_async(ws):
    @ws.tools.tool
    def add(a: int, b: int = 10) -> int:
        """Add."""
        return a + b

    @ws.tools.tool
    async def greet(name: str) -> str:
        """Greet asynchronously."""
        await asyncio.sleep(0)
        return f"hello {name}"

    r1 = ws.tools.invoke("add", {"a": 1})
    assert isinstance(r1, InvokeResult)
    assert (r1.ok, r1.value, r1.error, r1.name, r1.version) == (True, 11, None, "add", 1)
    r2 = ws.tools.invoke("greet", {"name": "Ada"})
    assert (r2.ok, r2.value) == (True, "hello Ada")
    assert r2.unwrap() == "hello Ada"


def test_ainvoke_and_invoke_inside_running_loop(ws):
    @ws.tools.tool
    def square(x: int) -> int:
        """Square."""
        return x * x

    async def main():
        awaited = await ws.tools.ainvoke("square", {"x": 3})
        blocking = ws.tools.invoke("square", {"x": 4})  # like a Jupyter cell inside a loop
        return awaited, blocking

    awaited, blocking = asyncio.run(main())
    assert (awaited.ok, awaited.value) == (True, 9)
    assert (blocking.ok, blocking.value) == (True, 16)


def test_nested_models_and_dataclasses_arrive_as_instances(ws):
    seen: dict[str, Any] = {}

    @ws.tools.tool
    def place(order: Order, where: Point, scale: float) -> int:
        """Place an order."""
        seen.update(order=order, where=where, scale=scale)
        return sum(i.qty for i in order.items)

    args = {
        "order": {"customer": "Ada", "items": [{"sku": "a"}, {"sku": "b", "qty": 3}]},
        "where": {"x": 1, "y": 2},
        "scale": 2,
    }
    res = ws.tools.invoke("place", args)
    assert res.ok and res.value == 4
    assert isinstance(seen["order"], Order)
    assert all(isinstance(i, LineItem) for i in seen["order"].items)
    assert seen["order"].items[0].qty == 1  # model default applied
    assert seen["where"] == Point(1, 2)
    assert isinstance(seen["scale"], float) and seen["scale"] == 2.0


def test_tool_context_state_shared_within_context_and_fresh_in_another(ws):
    @ws.tools.tool(toolkit="counter_kit")
    def bump(step: int, ctx: ToolContext) -> int:
        """Increase the shared counter."""
        ctx.state["n"] = ctx.state.get("n", 0) + step
        return ctx.state["n"]

    @ws.tools.tool(toolkit="counter_kit")
    async def peek(ctx: ToolContext) -> dict:
        """Read the shared counter and who asked."""
        return {"n": ctx.state.get("n", 0), "tool": ctx.tool, "ctx": ctx.context.id}

    assert "ctx" not in ws.tools.get("bump").parameters["properties"]
    first = ws.context("first")
    assert ws.tools.invoke("bump", {"step": 2}, first).value == 2
    assert ws.tools.invoke("bump", {"step": 3}, first).value == 5
    # another tool of the same toolkit sees the same state
    assert ws.tools.invoke("peek", {}, first).value == {"n": 5, "tool": "peek", "ctx": "first"}

    with ws.context() as second:
        assert ws.tools.invoke("bump", {"step": 1}, second).value == 1
        assert ws.tools.invoke("peek", {}, second).value["n"] == 1
    assert ws.tools.invoke("peek", {}, first).value["n"] == 5
    # without a context every call starts fresh
    assert ws.tools.invoke("bump", {"step": 7}).value == 7
    assert ws.tools.invoke("bump", {"step": 7}).value == 7


def test_tool_context_state_without_toolkit_is_per_tool(ws):
    @ws.tools.tool
    def count(ctx: ToolContext) -> int:
        """Count calls."""
        ctx.state["calls"] = ctx.state.get("calls", 0) + 1
        return ctx.state["calls"]

    @ws.tools.tool
    def other(ctx: ToolContext) -> int:
        """Own state."""
        return ctx.state.get("calls", 0)

    ctx = ws.context()
    assert [ws.tools.invoke("count", {}, ctx).value for _ in range(3)] == [1, 2, 3]
    assert ws.tools.invoke("other", {}, ctx).value == 0


def test_toolkit_record_state_is_the_initial_state(ws):
    ws.toolkits.register(tea_notebook.ToolkitRecord(name="bank", description="Bank tools.", state={"balance": 100}))

    @ws.tools.tool(toolkit="bank")
    def withdraw(amount: int, ctx: ToolContext) -> int:
        """Withdraw money."""
        ctx.state["balance"] -= amount
        return ctx.state["balance"]

    ctx = ws.context()
    assert ws.tools.invoke("withdraw", {"amount": 30}, ctx).value == 70
    assert ws.tools.invoke("withdraw", {"amount": 30}, ctx).value == 40
    assert ws.tools.invoke("withdraw", {"amount": 30}, ws.context()).value == 70
    assert ws.toolkits.get("bank").state == {"balance": 100}  # the stored record is untouched


@pytest.mark.parametrize(
    "args, field, expected",
    [
        ({"a": "seven"}, "a", "integer"),
        ({"a": 1, "b": 2.5}, "b", "integer"),
        ({"a": True}, "a", "integer"),
        ({"a": 1, "label": 3}, "label", "string"),
        ({"a": 1, "mode": "loud"}, "mode", ["quiet", "normal"]),
        ({}, "a", "a value (required)"),
    ],
)
def test_bad_arguments_give_structured_validation_errors(ws, args, field, expected):
    from typing import Literal

    @ws.tools.tool
    def typed(a: int, b: int = 0, label: str = "", mode: Literal["quiet", "normal"] = "quiet") -> int:
        """Typed parameters."""
        raise AssertionError("must not be called with bad arguments")

    res = ws.tools.invoke("typed", args)
    assert res.ok is False and res.value is None
    assert res.error["type"] == "ValidationError"
    assert res.error["field"] == field
    assert res.error["expected"] == expected
    assert field in res.error["message"]


def test_nested_bad_argument_names_the_nested_path(ws):
    @ws.tools.tool
    def ship(order: Order) -> int:
        """Ship an order."""
        return 0

    bad = {"order": {"customer": "Ada", "items": [{"sku": "a", "qty": "many"}]}}
    res = ws.tools.invoke("ship", bad)
    assert res.ok is False
    assert res.error["type"] == "ValidationError"
    assert res.error["field"] == "order.items[0].qty"
    assert res.error["expected"] == "integer"


def test_unknown_extra_argument_is_named(ws):
    @ws.tools.tool
    def one(a: int) -> int:
        """One parameter."""
        return a

    res = ws.tools.invoke("one", {"a": 1, "colour": "red"})
    assert res.ok is False
    assert res.error["type"] == "ValidationError"
    assert res.error["field"] == "colour"
    assert "colour" in res.error["message"]


def test_non_object_arguments_and_unknown_tool(ws):
    @ws.tools.tool
    def one(a: int) -> int:
        """One parameter."""
        return a

    res = ws.tools.invoke("one", [1])  # type: ignore[arg-type]
    assert res.ok is False and res.error["type"] == "ValidationError"
    assert res.error["expected"] == "object"
    missing = ws.tools.invoke("not_there", {})
    assert missing.ok is False and missing.error["type"] == "NotFoundError"
    assert "not_there" in missing.error["message"]


def test_raising_tool_becomes_structured_error(ws):
    @ws.tools.tool
    def explode(x: int) -> int:
        """Always fails."""
        raise ValueError("boom")

    res = ws.tools.invoke("explode", {"x": 1})
    assert res.ok is False and res.value is None
    assert res.error == {"type": "ValueError", "message": "boom"}
    with pytest.raises(Exception, match="ValueError: boom"):
        res.unwrap()


def test_usage_statistics_after_invocations(ws):
    @ws.tools.tool
    def nap(ms: int) -> int:
        """Sleep a little, fail on a negative time."""
        if ms < 0:
            raise ValueError("negative")
        time.sleep(ms / 1000)
        return ms

    assert ws.tools.get("nap").usage.calls == 0
    assert ws.tools.get("nap").usage.last_used is None
    before = time.time()
    results = [
        ws.tools.invoke("nap", {"ms": 10}),
        ws.tools.invoke("nap", {"ms": 10}),
        ws.tools.invoke("nap", {"ms": -1}),
        ws.tools.invoke("nap", {"ms": "x"}),  # validation failure, never runs
    ]
    after = time.time()
    assert [r.ok for r in results] == [True, True, False, False]

    usage = ws.tools.get("nap").usage
    assert usage.calls == 4
    assert usage.failures == 2
    assert usage.success_rate == 0.5
    ran = results[:3]  # the refused call never ran and does not dilute the mean latency
    assert usage.mean_latency_ms == pytest.approx(sum(r.latency_ms for r in ran) / 3, rel=1e-6)
    assert usage.mean_latency_ms >= 2 * 10 / 3
    assert before <= usage.last_used <= after


def test_context_records_calls(ws):
    @ws.tools.tool
    def maybe(ok: bool) -> bool:
        """Fail when asked to."""
        if not ok:
            raise RuntimeError("asked to fail")
        return ok

    ctx = Context("c")
    ws.tools.invoke("maybe", {"ok": False}, ctx)
    assert not ctx.has_succeeded("maybe")
    ws.tools.invoke("maybe", {"ok": True}, ctx)
    assert ctx.has_succeeded("maybe")
    assert ctx.calls == [("tool", "maybe", False), ("tool", "maybe", True)]


# --------------------------------------------------------------------------------------
# a second Workspace object on the same folder
# --------------------------------------------------------------------------------------

MODULE_SOURCE = '''
import tea_notebook
from tea_notebook.protocol.context import ToolContext

SCALE = 10


def scaled(x: int) -> int:
    """Multiply x by the module's scale."""
    return x * SCALE


def double(x: int) -> int:
    """Double x without any module globals."""
    return 2 * x


@tea_notebook.tool(toolkit="tally_kit")
def tally(amount: int, ctx: ToolContext) -> int:
    """Add to a running tally."""
    ctx.state["total"] = ctx.state.get("total", 0) + amount
    return ctx.state["total"]
'''


@pytest.fixture
def tool_module(tmp_path, monkeypatch, no_active_workspace):
    name = f"tea_test_tools_{uuid.uuid4().hex[:10]}"
    folder = tmp_path / "mods"
    folder.mkdir()
    (folder / f"{name}.py").write_text(MODULE_SOURCE)
    monkeypatch.syspath_prepend(str(folder))
    module = __import__(name)
    yield module
    sys.modules.pop(name, None)


def test_second_workspace_loads_tool_by_import(tmp_path, tool_module):
    path = tmp_path / "shared"
    first = tea_notebook.Workspace(path, embedder="hashing")
    try:
        for fn in (tool_module.scaled, tool_module.tally):
            first.tools.register(fn)
        assert first.tools.get("scaled").entrypoint == f"{tool_module.__name__}:scaled"
        assert first.tools.invoke("scaled", {"x": 2}).value == 20

        second = tea_notebook.Workspace(path, embedder="hashing")
        try:
            # SCALE is a module global: only the imported function (not its bare source) can see it
            res = second.tools.invoke("scaled", {"x": 4})
            assert (res.ok, res.value) == (True, 40), res.error
            ctx = second.context()
            assert second.tools.invoke("tally", {"amount": 5}, ctx).value == 5
            assert second.tools.invoke("tally", {"amount": 7}, ctx).value == 12
            assert second.tools.get("tally").toolkit == "tally_kit"
            # usage is shared through the database
            assert second.tools.get("scaled").usage.calls == 2
            assert first.tools.get("scaled").usage.calls == 2
        finally:
            second.close()
    finally:
        first.close()


def test_second_workspace_falls_back_to_stored_source_when_module_is_gone(tmp_path, tool_module):
    path = tmp_path / "shared"
    first = tea_notebook.Workspace(path, embedder="hashing")
    try:
        first.tools.register(tool_module.double)
    finally:
        first.close()
    # the module can no longer be imported
    module_file = tmp_path / "mods" / f"{tool_module.__name__}.py"
    module_file.unlink()
    sys.modules.pop(tool_module.__name__, None)

    second = tea_notebook.Workspace(path, embedder="hashing")
    try:
        res = second.tools.invoke("double", {"x": 21})
        assert (res.ok, res.value) == (True, 42), res.error
    finally:
        second.close()


def test_second_workspace_runs_tool_from_exec_source(tmp_path):
    source = textwrap.dedent(
        '''
        def shout(text: str, times: int = 1) -> str:
            """Shout text."""
            return (text.upper() + "!") * times
        '''
    )
    ns: dict[str, Any] = {"__name__": f"not_importable_{uuid.uuid4().hex[:8]}"}
    exec(source, ns)  # noqa: S102
    path = tmp_path / "shared"
    first = tea_notebook.Workspace(path, embedder="hashing")
    try:
        built = make_tool(ns["shout"], source=source)
        assert built.record.source_hash == hashlib.sha256(source.encode()).hexdigest()
        first.tools.register(built)
        second = tea_notebook.Workspace(path, embedder="hashing")
        try:
            res = second.tools.invoke("shout", {"text": "hi", "times": 2})
            assert (res.ok, res.value) == (True, "HI!HI!"), res.error
            bad = second.tools.invoke("shout", {"text": 1})
            assert bad.error["type"] == "ValidationError" and bad.error["field"] == "text"
        finally:
            second.close()
    finally:
        first.close()


def test_second_workspace_runs_decorated_local_tool_from_source(tmp_path, no_active_workspace):
    path = tmp_path / "shared"
    first = tea_notebook.Workspace(path, embedder="hashing")
    try:

        @tea_notebook.tool(workspace=first, category="text")
        def reverse(text: str) -> str:
            """Reverse text."""
            return text[::-1]

        assert "<locals>" in reverse.record.entrypoint  # cannot be imported: source is the way
        second = tea_notebook.Workspace(path, embedder="hashing")
        try:
            res = second.tools.invoke("reverse", {"text": "abc"})
            assert (res.ok, res.value) == (True, "cba"), res.error
        finally:
            second.close()
    finally:
        first.close()


def test_a_function_without_source_or_module_is_refused_at_registration(tmp_path):
    ns: dict[str, Any] = {"__name__": f"not_importable_{uuid.uuid4().hex[:8]}"}
    exec('def ghost(x: int) -> int:\n    """No source."""\n    return x\n', ns)  # noqa: S102
    with tea_notebook.Workspace(tmp_path / "ws", embedder="hashing") as ws:
        for register in (lambda: tea_notebook.tool(ns["ghost"], workspace=ws), lambda: ws.tools.register(ns["ghost"])):
            with pytest.raises(RegistryError, match=r"tool 'ghost': Python cannot read the source of ghost\(\)") as no:
                register()
            assert "defined in <string>" in str(no.value) and "source=TEXT" in str(no.value)
        assert "ghost" not in ws.tools
        given = tea_notebook.tool(ns["ghost"], workspace=ws, source="def ghost(x: int) -> int:\n    return x\n")
        assert given.record.source and ws.tools.get("ghost").version == 1  # with its source it is kept


@pytest.mark.parametrize("how", ["-c", "heredoc"])
def test_python_c_and_a_heredoc_are_refused_with_what_to_do(tmp_path, how):
    script = textwrap.dedent(
        f"""
        import tea_notebook
        ws = tea_notebook.Workspace({str(tmp_path / "ws")!r}, embedder="hashing")
        try:
            @ws.tools.tool
            def add(a: int, b: int) -> int:
                \"\"\"Add two integers.\"\"\"
                return a + b
        except tea_notebook.errors.RegistryError as exc:
            print("@@", exc)
        print("@@ registered:", "add" in ws.tools)
        """
    )
    argv, stdin = ([sys.executable, "-c", script], None) if how == "-c" else ([sys.executable, "-"], script)
    out = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120)
    lines = [x for x in out.stdout.splitlines() if x.startswith("@@")]
    assert len(lines) == 2, out.stdout + out.stderr
    where = "<string>" if how == "-c" else "<stdin>"
    assert lines[0].startswith("@@ tool 'add': Python cannot read the source of add() (defined in " + where)
    assert "Define the function in a .py file or a notebook cell" in lines[0]
    assert lines[1] == "@@ registered: False"


def test_second_workspace_reports_tool_without_code(tmp_path):
    ns: dict[str, Any] = {"__name__": f"not_importable_{uuid.uuid4().hex[:8]}"}
    exec('def ghost(x: int) -> int:\n    """No source."""\n    return x\n', ns)  # noqa: S102
    path = tmp_path / "shared"
    first = tea_notebook.Workspace(path, embedder="hashing")
    try:
        first.tools.register(make_tool(ns["ghost"]).record)  # a card alone, written on purpose without code
        second = tea_notebook.Workspace(path, embedder="hashing")
        try:
            res = second.tools.invoke("ghost", {"x": 1})
            assert res.ok is False
            assert res.error["type"] == "RuntimeError"
            assert "ghost" in res.error["message"] and "cannot run" in res.error["message"]
        finally:
            second.close()
    finally:
        first.close()
