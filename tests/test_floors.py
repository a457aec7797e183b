"""The floors of DESIGN.md, checked on the source: store → models → protocol, memory → runtime →
envs, agents, evolve, eval → notebook; a module imports only from floors below its own.

Every import statement counts, including the deferred ones inside functions (they are how a layer
quietly reaches up) and ``importlib.import_module("tea_notebook....")`` with a literal name; only
imports under ``if TYPE_CHECKING:`` (annotations, never run) are allowed to point anywhere.
Also checked: ECP runs live environments through what the layer above hands it, and the current
workspace is readable from protocol/ while ``tea_notebook.workspace`` keeps its public names.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest

import tea_notebook

PACKAGE = Path(tea_notebook.__file__).parent

# what sits above protocol/: every floor over it, the Workspace facade and the entry points
ABOVE_PROTOCOL = {
    "memory",
    "runtime",
    "envs",
    "agents",
    "evolve",
    "eval",
    "notebook",
    "workspace",
    "cli",
    "demo",
    "notebooks_job",
    "__main__",
}
ABOVE_MODELS = ABOVE_PROTOCOL | {"protocol"}
ABOVE_STORE = ABOVE_MODELS | {"models"}

# Known exceptions, (importing module, imported module), each with a comment saying what removes it.
# Empty: the last one, TCP's deferred import of evolve.toolmaker, went with the TCP executor change
# (the Workspace now hands TCP its executor and tool maker). An entry whose import is gone fails below.
KNOWN_EXCEPTIONS: set[tuple[str, str]] = set()


# -- the scanner ------------------------------------------------------------------------------------
def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        base = ".".join(parts[:keep] + ([node.module] if node.module else []))
    # ``from tea_notebook import envs`` imports a submodule: name it
    return [f"{base}.{alias.name}" if node.module is None or base == "tea_notebook" else base for alias in node.names]


def imports_of(source: str, module: str, is_package: bool = False) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` for every import in ``source`` that runs (all but TYPE_CHECKING)."""
    tree = ast.parse(source)

    def visit(node: ast.AST) -> Iterator[tuple[str, int]]:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:  # the else branch of TYPE_CHECKING does run
                yield from visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            for name in _resolve(node, module, is_package):
                yield name, node.lineno
        elif isinstance(node, ast.Call):
            fn = node.func
            named = (isinstance(fn, ast.Attribute) and fn.attr == "import_module") or (
                isinstance(fn, ast.Name) and fn.id in ("import_module", "__import__")
            )
            arg = node.args[0] if node.args else None
            if named and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield arg.value, node.lineno
        for child in ast.iter_child_nodes(node):
            yield from visit(child)

    yield from visit(tree)


def floor_of(module: str) -> str | None:
    """``tea_notebook.protocol.ecp`` → ``protocol``; ``tea_notebook.workspace`` → ``workspace``."""
    parts = module.split(".")
    if parts[0] != "tea_notebook" or len(parts) < 2:
        return None
    return parts[1]


def all_edges() -> list[tuple[str, str, int]]:
    """``(module, imported tea_notebook module, line)`` for every module of the package."""
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path, PACKAGE)
        for target, line in imports_of(path.read_text(encoding="utf-8"), module, path.name == "__init__.py"):
            if target == "tea_notebook" or target.startswith("tea_notebook."):
                edges.append((module, target, line))
    return edges


def violations(floor: str, forbidden: set[str]) -> list[str]:
    return [
        f"{module}:{line} imports {target}"
        for module, target, line in all_edges()
        if floor_of(module) == floor and floor_of(target) in forbidden and (module, target) not in KNOWN_EXCEPTIONS
    ]


# -- the scanner sees what it must ----------------------------------------------------------------
def test_the_scanner_counts_deferred_imports_and_skips_type_checking_only():
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING
        import tea_notebook.errors
        from . import records
        from ..envs import base
        from tea_notebook import workspace

        if TYPE_CHECKING:
            from tea_notebook.runtime.agent import Agent
        else:
            from tea_notebook.notebook import magics

        def later():
            from tea_notebook.envs.sessions import SessionManager
            import importlib
            return importlib.import_module("tea_notebook.evolve.loop")
        """
    )
    found = {name for name, _ in imports_of(source, "tea_notebook.protocol.ecp")}
    assert "tea_notebook.runtime.agent" not in found
    assert {
        "tea_notebook.errors",
        "tea_notebook.protocol.records",
        "tea_notebook.envs",
        "tea_notebook.workspace",
        "tea_notebook.notebook",  # from tea_notebook.notebook import magics
        "tea_notebook.envs.sessions",
        "tea_notebook.evolve.loop",
    } <= found
    package = {name for name, _ in imports_of("from .sessions import X", "tea_notebook.envs", is_package=True)}
    assert package == {"tea_notebook.envs.sessions"}


def test_the_scan_covers_every_floor():
    modules = {m for m, _, _ in all_edges()}
    for floor in ("store", "models", "protocol", "runtime", "envs", "evolve", "notebook"):
        assert any(floor_of(m) == floor for m in modules), f"no module of {floor}/ was scanned"
    assert ("tea_notebook.workspace", "tea_notebook.protocol.ecp") in {(m, t) for m, t, _ in all_edges()}


# -- the floors ----------------------------------------------------------------------------------------
def test_protocol_imports_nothing_from_the_floors_above_it():
    found = violations("protocol", ABOVE_PROTOCOL)
    assert found == [], "protocol/ reaches up:\n" + "\n".join(found)


def test_models_import_nothing_from_protocol_or_above():
    found = violations("models", ABOVE_MODELS)
    assert found == [], "models/ reaches up:\n" + "\n".join(found)


def test_store_imports_nothing_from_models_protocol_or_above():
    found = violations("store", ABOVE_STORE)
    assert found == [], "store/ reaches up:\n" + "\n".join(found)


def test_egress_imports_no_floor_at_all():
    """The egress policy sits under every floor that makes network actions (envs, agents): it imports
    nothing of the package but its errors and lazy exports."""
    found = violations("egress", ABOVE_STORE | {"store"})
    assert found == [], "egress/ reaches up:\n" + "\n".join(found)
    modules = {m for m, _, _ in all_edges()}
    assert any(floor_of(m) == "egress" for m in modules)


def test_known_exceptions_are_still_real():
    edges = {(m, t) for m, t, _ in all_edges()}
    stale = sorted(KNOWN_EXCEPTIONS - edges)
    assert stale == [], f"remove these from KNOWN_EXCEPTIONS, the imports are gone: {stale}"


# -- what the layer above hands to ECP -------------------------------------------------------------------
class FakeEnvironment:
    """A live environment by shape only: no tea_notebook.envs base class."""

    scope = "run"

    def __init__(self, folder: Path, context: Any = None, **config: Any):
        if set(config) - {"speed"}:
            raise TypeError(f"unknown options: {sorted(set(config) - {'speed'})}")
        self.folder, self.config = folder, config

    @classmethod
    def record(cls, name: str | None = None, description: str | None = None):
        from tea_notebook.protocol.records import ActionSpec, EnvironmentRecord

        action = ActionSpec(name="ping", description="Ping.", parameters={"type": "object", "properties": {}})
        return EnvironmentRecord(name=name or "fake", description=description or "A fake", actions=[action])

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def call(self, action_name: str, args: dict[str, Any]) -> Any:
        return "pong"

    def state(self) -> str:
        return "ok"

    def kill(self) -> None: ...


class FakeManager:
    """A session manager by shape only; records what ECP asked of it."""

    def __init__(self, workspace: Any):
        self.workspace, self.asked = workspace, []

    def folder(self, key: str) -> Path:
        return self.workspace.path / key

    def runtime(self, name: str, cls: type, config: dict[str, Any]) -> Any:
        self.asked.append((name, cls, config))
        return ("runtime", name)

    def release(self, key: str | None = None, environment: str | None = None) -> list[str]:
        return []

    async def arelease(self, key: str | None = None, environment: str | None = None) -> list[str]:
        return []

    def live(self) -> list[Any]:
        return []


def test_ecp_runs_live_environments_through_what_it_is_given(ws):
    from tea_notebook.errors import RegistryError
    from tea_notebook.protocol.ecp import EnvironmentRegistry, is_live_environment
    from tea_notebook.protocol.records import EnvironmentRecord

    bare = EnvironmentRegistry(ws, EnvironmentRecord)
    with pytest.raises(RegistryError, match="no session manager"):
        bare.add(FakeEnvironment)
    given = EnvironmentRegistry(
        ws, EnvironmentRecord, manager_factory=FakeManager, builtins={"fake": f"{__name__}:FakeEnvironment"}
    )
    record = given.ensure("fake")  # a built-in named by the layer above, as "module:Class"
    assert record.name == "fake" and given.runtime("fake") == ("runtime", "fake")
    assert given.manager.asked == [("fake", FakeEnvironment, {})]
    given.add(FakeEnvironment, name="fast", speed=2)
    assert given.manager.asked[-1] == ("fast", FakeEnvironment, {"speed": 2})
    with pytest.raises(TypeError, match="FakeEnvironment: unknown options"):
        given.add(FakeEnvironment, name="slow", colour="red")
    assert "slow" not in given

    class NoRecord:
        scope = "run"

    for bad in (NoRecord, FakeEnvironment(Path(".")), "not-a-path", len):
        with pytest.raises(TypeError):
            given.add(bad)
    assert is_live_environment(FakeEnvironment) and not is_live_environment(NoRecord)


def test_the_workspace_hands_ecp_the_envs_session_manager_and_builtins(ws):
    from tea_notebook.envs import BUILTIN
    from tea_notebook.envs.sandbox import PythonSandbox
    from tea_notebook.envs.sessions import EnvironmentRuntime, SessionManager

    assert ws.envs.builtins == BUILTIN and isinstance(ws.envs.manager, SessionManager)
    assert ws.envs.ensure("python").name == "python"
    runtime = ws.envs.runtime("python")
    assert isinstance(runtime, EnvironmentRuntime) and runtime.cls is PythonSandbox
    assert runtime.manager is ws.envs.manager


def test_the_current_workspace_lives_below_protocol(ws, tmp_path):
    from tea_notebook.protocol.current import current_workspace as low
    from tea_notebook.workspace import current_workspace

    assert current_workspace is low and tea_notebook.current_workspace is low
    assert low(required=False) is None
    with ws.activate():
        assert low() is ws

        @tea_notebook.tool
        def shout(text: str) -> str:
            """Shout a text."""
            return text.upper()

        assert "shout" in ws.tools  # @tool registers in the current workspace
    assert low(required=False) is None
    with pytest.raises(tea_notebook.errors.TeaError, match="no current workspace"):
        low()
