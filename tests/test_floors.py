"""The floors of DESIGN.md, checked on the source, from the ground up:

    the package root and its small helpers → store → models, egress → protocol → memory → runtime
    → envs, agents, evolve, eval → the ``Workspace`` façade → notebook, cli (and the entry points)

A module imports only from its own floor or the floors below it. Every import statement counts:
deferred ones inside functions (they are how a layer quietly reaches up), type-only ones under
``if TYPE_CHECKING:`` (an annotation naming a higher floor is a dependency too) and
``importlib.import_module("tea_notebook....")`` with a literal name. The one arrow that may run up is
the IPython entry point: ``load_ipython_extension`` in ``tea_notebook/__init__.py`` reaching
``notebook/``. Lower floors type their workspace as ``RunHost`` / ``RegistryHost``, never
``Workspace``. Also checked: no import cycle but pairs of modules in one folder, no private name
imported from another module, ECP runs live environments through what the layer above hands it, and
the current workspace is readable from protocol/ while ``tea_notebook.workspace`` keeps its public names.
"""

from __future__ import annotations

import ast
import textwrap
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import pytest

import tea_notebook

PACKAGE = Path(tea_notebook.__file__).parent

# Each folder (or top-level module) of the package and its floor; equal floors may import each other.
FLOORS: dict[str, int] = {
    # the package root (its lazy exports) and helpers that import no floor
    "": 0,
    "errors": 0,
    "_lazy": 0,
    "_sync": 0,
    "_threads": 0,
    "_safe_open": 0,
    "_poll": 0,
    "redaction": 0,
    "secret_detection": 0,  # content-based secret detection, used by redaction
    "answers": 0,
    "version": 0,
    "store": 1,
    "models": 2,
    "egress": 2,
    "protocol": 3,
    "memory": 4,
    "runtime": 5,
    "envs": 6,
    "agents": 6,
    "evolve": 6,
    "eval": 6,
    "workspace": 7,
    "notebook": 8,
    "cli": 8,
    "demo": 8,  # builds a demo workspace for ``tea demo``
    "notebooks_job": 8,  # ``tea notebooks``: runs the tutorials
    "flags": 8,  # the one flag table of ``tea …`` and ``%tea …``
    "__main__": 8,
}
WORKSPACE_FLOOR = FLOORS["workspace"]

# The only import that runs up: the IPython entry point of the package root loading the magics.
ENTRY_POINT = ("tea_notebook", "tea_notebook.notebook.magics")

# Private names still taken from another module, as (importing module, name), each with what removes
# it. An entry whose import is gone fails below: delete it.
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str]] = set()


# -- the scanner ------------------------------------------------------------------------------------
class Edge(NamedTuple):
    """One import: ``module`` imports ``target`` at ``line``; ``typing_only`` under ``if TYPE_CHECKING:``."""

    module: str
    target: str
    line: int
    typing_only: bool
    names: tuple[str, ...] = ()  # the names of a ``from target import ...``


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool, known: frozenset[str]) -> list[tuple[str, str]]:
    """``(imported module, imported name)`` per alias: ``from a import b`` names module ``a.b`` when
    that is a module (of ``known``, or any name directly under the package root), else ``a``."""
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        base = ".".join(parts[:keep] + ([node.module] if node.module else []))
    found = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        is_module = sub in known or (not known and (node.module is None or base == "tea_notebook"))
        found.append((sub if is_module else base, alias.name))
    return found


def imports_of(
    source: str, module: str, is_package: bool = False, known: frozenset[str] = frozenset()
) -> Iterator[Edge]:
    """Every import in ``source`` (of module ``module``), type-only ones marked as such."""
    tree = ast.parse(source)

    def visit(node: ast.AST, typing_only: bool) -> Iterator[Edge]:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from visit(child, True)
            for child in node.orelse:  # the else branch of TYPE_CHECKING does run
                yield from visit(child, typing_only)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Edge(module, alias.name, node.lineno, typing_only)
        elif isinstance(node, ast.ImportFrom):
            for target, name in _resolve(node, module, is_package, known):
                yield Edge(module, target, node.lineno, typing_only, (name,))
        elif isinstance(node, ast.Call):
            fn = node.func
            named = (isinstance(fn, ast.Attribute) and fn.attr == "import_module") or (
                isinstance(fn, ast.Name) and fn.id in ("import_module", "__import__")
            )
            arg = node.args[0] if node.args else None
            if named and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield Edge(module, arg.value, node.lineno, typing_only)
        for child in ast.iter_child_nodes(node):
            yield from visit(child, typing_only)

    yield from visit(tree, False)


def floor_of(module: str) -> str | None:
    """``tea_notebook.protocol.ecp`` → ``protocol``; ``tea_notebook.workspace`` → ``workspace``;
    ``tea_notebook`` → ``""`` (the package root); None outside the package."""
    parts = module.split(".")
    if parts[0] != "tea_notebook":
        return None
    return parts[1] if len(parts) > 1 else ""


def modules_of(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name."""
    return {_module_name(path, package): path for path in sorted(package.rglob("*.py"))}


def all_edges(package: Path = PACKAGE) -> list[Edge]:
    """Every import of a ``tea_notebook`` module by a module of the package."""
    return list(_edges(package))


@lru_cache(maxsize=4)
def _edges(package: Path) -> tuple[Edge, ...]:
    modules = modules_of(package)
    known = frozenset(modules)
    edges = []
    for module, path in modules.items():
        for edge in imports_of(path.read_text(encoding="utf-8"), module, path.name == "__init__.py", known):
            if edge.target == "tea_notebook" or edge.target.startswith("tea_notebook."):
                edges.append(edge)
    return tuple(edges)


def rank(module: str) -> int:
    """The floor number of a package module (KeyError for a folder the floors do not place)."""
    return FLOORS[floor_of(module) or ""]


def upward(edges: list[Edge]) -> list[Edge]:
    """The imports that run from a lower floor to a higher one."""
    return [e for e in edges if rank(e.target) > rank(e.module)]


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components (of more than one module) of the module import graph."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        # the entry point's import counts too: a module below that imports the package root (for its
        # version, say) closes a cycle through it and the façade
        if e.module != e.target:
            graph.setdefault(e.module, set()).add(e.target)
            graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    for root in sorted(graph):  # Tarjan's algorithm, iterative (the graph is deep enough to matter)
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def private_imports(edges: list[Edge], package: Path = PACKAGE) -> list[tuple[str, str, str]]:
    """``(module, private name, where)`` for each private name (``_x``, not a module) that a module
    takes from another module of the package: ``from m import _x``, or ``m._x`` on a module bound by
    ``import m`` / ``from p import m``."""
    modules = modules_of(package)
    found = [
        (e.module, e.names[0], f"{e.module}:{e.line} imports {e.names[0]} from {e.target}")
        for e in edges
        if e.names
        and e.names[0].startswith("_")
        and not e.names[0].startswith("__")
        and not e.target.endswith("." + e.names[0])  # a private module (``from tea_notebook import _sync``)
        and e.target != e.module
    ]
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound: dict[str, str] = {}  # local name → the package module it names
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("tea_notebook.") and alias.asname:
                        bound[alias.asname] = alias.name
            elif (
                isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("tea_notebook")
            ):
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in modules:
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and f"{bound[node.value.id]}.{node.attr}" not in modules
                and bound[node.value.id] != module
            ):
                found.append((module, node.attr, f"{module}:{node.lineno} uses {node.attr} of {bound[node.value.id]}"))
    return sorted(found)


# -- the scanner sees what it must ----------------------------------------------------------------
def test_the_scanner_counts_deferred_and_type_only_imports():
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
    known = frozenset(modules_of())
    found = {(e.target, e.typing_only) for e in imports_of(source, "tea_notebook.protocol.ecp", known=known)}
    assert {
        ("tea_notebook.errors", False),
        ("tea_notebook.protocol.records", False),
        ("tea_notebook.envs.base", False),
        ("tea_notebook.workspace", False),
        ("tea_notebook.runtime.agent", True),  # type-only: counted, and marked
        ("tea_notebook.notebook.magics", False),  # the else branch of TYPE_CHECKING runs
        ("tea_notebook.envs.sessions", False),
        ("tea_notebook.evolve.loop", False),
    } <= found
    package = {e.target for e in imports_of("from .sessions import X", "tea_notebook.envs", is_package=True)}
    assert package == {"tea_notebook.envs.sessions"}


def test_the_scan_covers_every_floor_and_places_every_module():
    edges = all_edges()
    modules = {e.module for e in edges}
    for floor in ("store", "models", "egress", "protocol", "runtime", "envs", "agents", "evolve", "eval", "notebook"):
        assert any(floor_of(m) == floor for m in modules), f"no module of {floor}/ was scanned"
    assert ("tea_notebook.workspace", "tea_notebook.protocol.ecp") in {(e.module, e.target) for e in edges}
    unplaced = sorted({m for m in modules_of()} - {m for m in modules_of() if floor_of(m) in FLOORS})
    assert unplaced == [], f"put these in FLOORS (tests/test_floors.py): {unplaced}"


def test_the_cycle_finder_finds_cycles():
    edges = [Edge("a", "b", 1, False), Edge("b", "c", 1, True), Edge("c", "a", 1, False), Edge("c", "d", 1, False)]
    edges += [Edge("d", "e", 1, False), Edge("e", "d", 1, False), Edge("e", "f", 1, False)]
    assert cycles(edges) == [["a", "b", "c"], ["d", "e"]]


# -- the floors ----------------------------------------------------------------------------------------
def test_no_import_runs_up_but_the_ipython_entry_point():
    found = upward(all_edges())
    assert [(e.module, e.target) for e in found if (e.module, e.target) == ENTRY_POINT], (
        "the IPython entry point (load_ipython_extension in tea_notebook/__init__.py) no longer imports "
        "notebook.magics: update ENTRY_POINT"
    )
    wrong = [
        f"{e.module}:{e.line} imports {e.target}" + (" (type-only)" if e.typing_only else "")
        for e in found
        if (e.module, e.target) != ENTRY_POINT
    ]
    assert wrong == [], "imports that reach a higher floor:\n" + "\n".join(wrong)


def test_nothing_imports_notebook_but_the_entry_point():
    found = [
        f"{e.module}:{e.line}"
        for e in all_edges()
        if floor_of(e.target) == "notebook" and floor_of(e.module) != "notebook" and (e.module, e.target) != ENTRY_POINT
    ]
    assert found == [], "notebook/ is imported by: " + ", ".join(found)


def test_no_module_below_the_facade_names_the_workspace():
    found = [
        f"{e.module}:{e.line}"
        for e in all_edges()
        if e.target == "tea_notebook.workspace" and rank(e.module) < WORKSPACE_FLOOR
    ]
    assert found == [], "type against RunHost / RegistryHost instead of Workspace: " + ", ".join(found)


def test_egress_imports_no_floor_at_all():
    """The egress policy sits under every floor that makes network actions (envs, agents): it imports
    nothing of the package but its errors and lazy exports."""
    found = [
        f"{e.module}:{e.line} imports {e.target}"
        for e in all_edges()
        if floor_of(e.module) == "egress" and floor_of(e.target) != "egress" and rank(e.target) > 0
    ]
    assert found == [], "egress/ reaches up:\n" + "\n".join(found)


def describe_cycle(component: list[str], edges: list[Edge]) -> str:
    """A cycle (a strongly connected component) with the imports that close it, one a line."""
    members = set(component)
    lines = [f"{len(component)} modules: {', '.join(component)}"]
    seen = set()
    for e in edges:
        if e.module in members and e.target in members and e.module != e.target:
            if (e.module, e.target, e.line) not in seen:
                seen.add((e.module, e.target, e.line))
                lines.append(f"    {e.module}:{e.line} imports {e.target}" + (" (type-only)" if e.typing_only else ""))
    return "\n".join(lines)


def test_no_cycle_but_small_in_folder_pairs():
    """An import cycle (type-only and deferred imports included) is at most a pair of modules of one
    folder: anything larger, through the façade or across folders, fails, printing its imports."""
    edges = all_edges()
    found = cycles(edges)
    print("import cycles (type-only imports included):")  # the in-folder pairs that remain
    for component in found:
        print(f"  {len(component)}: {', '.join(component)}")
    through = [c for c in found if "tea_notebook.workspace" in c]
    assert through == [], "a cycle runs through the Workspace façade:\n" + "\n".join(
        describe_cycle(c, edges) for c in through
    )
    wrong = [c for c in found if len(c) > 2 or len({floor_of(m) for m in c}) > 1]
    assert wrong == [], (
        "cycles of more than two modules or across folders (move the shared definition down, or type "
        "against a narrower Protocol that lives below):\n" + "\n".join(describe_cycle(c, edges) for c in wrong)
    )


def test_no_private_name_is_imported_from_another_module():
    found = private_imports(all_edges())
    new = [where for module, name, where in found if (module, name) not in KNOWN_PRIVATE_IMPORTS]
    assert new == [], "make these public (or move them) instead:\n" + "\n".join(new)
    stale = sorted(KNOWN_PRIVATE_IMPORTS - {(module, name) for module, name, _ in found})
    assert stale == [], f"remove these from KNOWN_PRIVATE_IMPORTS, the imports are gone: {stale}"


def test_the_private_name_finder_sees_both_forms(tmp_path):
    package = tmp_path / "tea_notebook"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_helpers.py").write_text("def _hidden(): ...\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("def _own(): ...\n")
    (package / "sub" / "b.py").write_text(
        "from tea_notebook import _helpers\nfrom tea_notebook.sub.a import _own\n_helpers._hidden()\n"
    )
    found = sorted(where for _, _, where in private_imports(all_edges(package), package))
    assert found == [
        "tea_notebook.sub.b:2 imports _own from tea_notebook.sub.a",
        "tea_notebook.sub.b:3 uses _hidden of tea_notebook._helpers",
    ]


def test_the_workspace_is_a_run_host(ws):
    from tea_notebook.protocol.host import RegistryHost
    from tea_notebook.protocol.store_host import StoreHost
    from tea_notebook.runtime.host import LiveAgents, RunHost

    members = {
        name
        for proto in (StoreHost, RegistryHost, RunHost)
        for name, value in vars(proto).items()
        if isinstance(value, property)
    }
    assert {"db", "path", "embedder", "tools", "events", "live_agents"} <= members
    missing = [name for name in sorted(members) if not hasattr(ws, name)]
    assert missing == [], f"Workspace lacks {missing} of RunHost"
    assert isinstance(ws.live_agents, LiveAgents) and not hasattr(ws, "_live_agents")
    ws.live_agents.put("x", obj := object())
    assert ws.live_agents.get("x") is obj and "x" in ws.live_agents and len(ws.live_agents) == 1
    assert ws.live_agents.pop("x") is obj and ws.live_agents.get("x") is None and ws.live_agents.pop("x") is None


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
