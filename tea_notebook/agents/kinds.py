"""Agent kinds, declared once: how each kind of agent is made, rebuilt from its card, run and forked.

A kind registers itself with the :func:`agent_kind` decorator on the class (or builder function)
that makes it::

    @agent_kind("researcher", shortcuts=("researcher", "deep_researcher"), default_name="deep_researcher",
                options=("max_steps",), rename={"max_steps": "max_rounds"}, rebuild="config", fork=None)
    class DeepResearcher(WorkflowAgent): ...

and every front end reads the registration: ``%%agent`` (shortcut names, the options a kind takes),
``tea eval --agent`` and ``ws.evaluate`` (:func:`resolve`), the façade (``ws.make_agent(kind, ...)``
and its named methods). ``fork`` declares what a run of the kind is forked by; each run records
its own (``fork_unit`` in its ``run_started`` event), and ``ws.fork`` and the Fork buttons read that
record, so a stored run keeps the rule it was made under. Every agent records its kind and settings
in its card's metadata (``{"kind": ..., "config": ...}``), so after a kernel restart (or in a worker
process) :func:`build` makes it again, and the workspace hands ACP :func:`restore_runner` to
re-attach runners to stored cards on first use.

Importing this module imports no kind: the built-in kinds' modules are listed in :data:`BUILTIN`
with the names they register, and imported the first time one of those names is asked for (the
decorator checks that a listed module registers exactly the names listed for it).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, TypeVar

from tea_notebook.errors import TeaError

if TYPE_CHECKING:
    from tea_notebook.protocol.records import AgentRecord
    from tea_notebook.runtime.host import RunHost

#: what a run of a kind is forked by (``ws.fork(run, step=N)`` / ``stage=K``): None when it cannot be
ForkUnit = Literal["steps", "messages", "stages"] | None
#: how a kind is rebuilt from its card: ``"card"`` (the target's ``from_record``, else the agent
#: loop's), ``"config"`` (the target called again with the card's config), or a function
#: ``rebuild(ws, name, card, overrides)``
Rebuild = Literal["card", "config"] | Callable[..., Any]
#: the options ``%%agent`` passes on, and the flags that give them
AGENT_OPTIONS = {"max_steps": "--max-steps", "tools": "--tools", "envs": "--env"}

#: the kinds this package defines: module → (the kind it registers, that kind's shortcuts). A module
#: is imported on first use of one of its names, so ``import tea_notebook.agents.kinds`` stays light.
BUILTIN: dict[str, tuple[str, tuple[str, ...]]] = {
    "tea_notebook.agents.kinds": ("agent", ()),
    "tea_notebook.agents.researcher": ("researcher", ("researcher", "deep_researcher")),
    "tea_notebook.agents.analyzer": ("analyzer", ("analyzer", "deep_analyzer")),
    "tea_notebook.agents.browser_use": ("browser_use", ("browser_use", "browser")),
    "tea_notebook.agents.orchestra": ("orchestra", ("orchestra",)),
    "tea_notebook.agents.toolself": ("toolself", ("toolself",)),
    "tea_notebook.agents.coral": ("coral", ("coral",)),
    "tea_notebook.evolve.loop": ("evolution", ()),
}


@dataclass(frozen=True)
class AgentKind:
    """One registered kind of agent (see :func:`agent_kind` for the fields)."""

    name: str
    target: Any
    shortcuts: tuple[str, ...] = ()
    default_name: str = ""
    options: frozenset[str] | None = None
    rename: Mapping[str, str] = field(default_factory=dict)
    refused_as: str = ""
    rebuild: Rebuild = "card"
    keep_live: tuple[str, ...] = ()
    fork: ForkUnit = "steps"
    makes: bool = True
    description: str = ""

    @property
    def origin(self) -> str:
        """``module:qualname`` of what registered the kind."""
        return f"{getattr(self.target, '__module__', '?')}:{getattr(self.target, '__qualname__', '?')}"

    def make(self, ws: "RunHost", name: str, **options: Any) -> Any:
        """A new agent of this kind registered as ``name``."""
        if not self.makes:
            raise TeaError(f"agents of kind {self.name!r} are not made by name: {self.description or 'see its docs'}")
        return self.target(ws, name=name, **options)

    def run_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``%%agent``'s options for an agent of this kind: refused when it does not take one
        (TeaError naming the flag), renamed to the kind's own settings."""
        if self.options is not None:
            unusable = sorted(set(options) - self.options)
            if unusable:
                flag = AGENT_OPTIONS.get(unusable[0], f"--{unusable[0].replace('_', '-')}")
                raise TeaError(f"{flag} does not apply to {self.refused_as or f'a {self.name} agent'}")
        return {self.rename.get(k, k): v for k, v in options.items()}


K = TypeVar("K")
_REGISTRY: dict[str, AgentKind] = {}
_SHORTCUTS: dict[str, str] = {}  # shortcut name → kind
_LOADED: set[str] = set()


def agent_kind(
    name: str,
    *,
    shortcuts: tuple[str, ...] = (),
    default_name: str | None = None,
    options: tuple[str, ...] | None = None,
    rename: Mapping[str, str] | None = None,
    refused_as: str = "",
    rebuild: Rebuild = "card",
    keep_live: tuple[str, ...] = (),
    fork: ForkUnit = "steps",
    makes: bool = True,
    description: str = "",
) -> Callable[[K], K]:
    """Register the decorated class or builder as agent kind ``name``.

    The target makes a new agent: ``target(ws, name=NAME, **options)``, registered as ``NAME``.
    ``shortcuts``: names ``%%agent NAME`` (and ``tea eval --agent NAME``) build an agent of this kind
    from when no agent ``NAME`` is registered; the agent is named ``default_name`` (default: the kind's
    name). ``options``: which of ``%%agent``'s options (:data:`AGENT_OPTIONS`) the kind takes (None:
    all), ``rename`` maps them to its own settings, ``refused_as`` completes the refusal of the
    others ("--tools does not apply to a CORAL team"). ``rebuild``: how a card becomes the agent again
    (``"card"``, ``"config"`` with the attributes ``keep_live`` taken from the live object, or a
    function ``rebuild(ws, name, card, overrides)``). ``fork``: what its runs are forked by.
    ``makes=False``: the kind is only rebuilt from cards something else registered.
    """

    def register(target: K) -> K:
        kind = AgentKind(
            name=name,
            target=target,
            shortcuts=tuple(shortcuts),
            default_name=default_name or name,
            options=None if options is None else frozenset(options),
            rename=dict(rename or {}),
            refused_as=refused_as,
            rebuild=rebuild,
            keep_live=tuple(keep_live),
            fork=fork,
            makes=makes,
            description=description or (getattr(target, "__doc__", None) or "").strip().split("\n")[0],
        )
        _check_declared(kind)
        _add(kind)
        return target

    return register


def _check_declared(kind: AgentKind) -> None:
    """A built-in module registers what :data:`BUILTIN` says (so lazy lookups find it), and a class
    that names its kind names this one."""
    module = getattr(kind.target, "__module__", "")
    if module in BUILTIN and BUILTIN[module] != (kind.name, kind.shortcuts):
        raise TeaError(
            f"{module} registers kind {kind.name!r} with shortcuts {kind.shortcuts}; kinds.BUILTIN says "
            f"{BUILTIN[module]}: make them agree"
        )
    own = getattr(kind.target, "kind", None) if isinstance(kind.target, type) else None
    if isinstance(own, str) and own and own != kind.name:
        raise TeaError(f"{kind.origin} says its kind is {own!r}, but is registered as {kind.name!r}")


def _add(kind: AgentKind) -> None:
    before = _REGISTRY.get(kind.name)
    if before is not None and before.origin != kind.origin:
        raise TeaError(f"agent kind {kind.name!r} is already registered by {before.origin}")
    for shortcut in kind.shortcuts:
        owner = _SHORTCUTS.get(shortcut)
        if owner is not None and owner != kind.name:
            raise TeaError(f"shortcut {shortcut!r} already builds a {owner!r} agent")
    if before is not None:
        unregister(kind.name)  # the same target again (a module reloaded): its new definition wins
    _REGISTRY[kind.name] = kind
    _SHORTCUTS.update(dict.fromkeys(kind.shortcuts, kind.name))


def unregister(name: str) -> AgentKind | None:
    """Forget agent kind ``name`` (and its shortcuts); return its registration."""
    kind = _REGISTRY.pop(name, None)
    if kind is not None:
        for shortcut in kind.shortcuts:
            if _SHORTCUTS.get(shortcut) == name:
                del _SHORTCUTS[shortcut]
    return kind


def _load(name: str) -> None:
    """Import the built-in module that registers ``name`` (a kind or a shortcut), once."""
    for module, (kind, shortcuts) in BUILTIN.items():
        if name in (kind, *shortcuts) and module not in _LOADED:
            _LOADED.add(module)
            importlib.import_module(module)
            if kind not in _REGISTRY:
                raise TeaError(f"kinds.BUILTIN says {module} registers agent kind {kind!r}; it does not")


def get(kind: str) -> AgentKind:
    """The registration of agent kind ``kind`` (TeaError naming the kinds when there is none)."""
    if kind not in _REGISTRY:
        _load(kind)
    found = _REGISTRY.get(kind)
    if found is None:
        raise TeaError(f"unknown agent kind {kind!r}; kinds: {', '.join(names())}")
    return found


def shortcut(name: str) -> AgentKind | None:
    """The kind ``%%agent NAME`` builds when no agent ``NAME`` is registered (None: a plain agent)."""
    if name not in _SHORTCUTS:
        _load(name)
    kind = _SHORTCUTS.get(name)
    return None if kind is None else get(kind)


def names() -> list[str]:
    """Every kind's name, built-in ones included (without importing them)."""
    builtin = [kind for kind, _ in BUILTIN.values()]
    return builtin + [n for n in _REGISTRY if n not in builtin]


def shortcut_names() -> list[str]:
    """Every shortcut name, built-in ones included (without importing them): for help texts."""
    declared = [n for _, shortcuts in BUILTIN.values() for n in shortcuts]
    return declared + [n for n in _SHORTCUTS if n not in declared]


def registered() -> list[AgentKind]:
    """Every kind's registration (imports the built-in kinds' modules)."""
    for kind, _ in BUILTIN.values():
        get(kind)
    return list(_REGISTRY.values())


def kind_of(card: "AgentRecord") -> str:
    """The kind a card records (``"agent"`` for a card without one)."""
    return card.metadata.get("kind") or "agent"


# -- making, resolving and rebuilding agents ------------------------------------------------------
def make(ws: "RunHost", kind: str, name: str | None = None, **options: Any) -> Any:
    """A new agent of ``kind`` registered as ``name`` (default: the kind's usual name); what
    ``ws.make_agent()``, ``ws.researcher()`` and friends call."""
    spec = get(kind)
    return spec.make(ws, name or spec.default_name, **options)


def resolve(
    ws: "RunHost",
    name: str,
    kind: str | None = None,
    options: dict[str, Any] | None = None,
    *,
    instead: str = "delegate to it from a planner",
) -> Any:
    """The agent ``%%agent NAME`` (``tea eval --agent NAME``, ``ws.evaluate(NAME, ...)``) runs: a
    registered one (``options`` apply to this run only), a new one of ``kind``, one of a shortcut's
    kind by its usual name, or a new plain agent. TeaError when it cannot run on its own (``instead``
    says what to do then)."""
    options = dict(options or {})
    if kind is None and name not in ws.agents:
        by_name = shortcut(name)
        if by_name is not None:
            kind, name = by_name.name, by_name.default_name
    if name not in ws.agents:
        make(ws, kind or "agent", name)  # the agent's card, with the kind's own settings
    registered_kind = kind_of(ws.agents.get(name))
    if kind is not None and registered_kind != kind:
        raise TeaError(f"agent {name!r} is registered with kind {registered_kind!r}, not {kind!r}")
    if options:
        options = get(registered_kind).run_options(options)
    agent = build(ws, name, **options)
    if not callable(getattr(agent, "run", None)):
        raise TeaError(f"agent {name!r} ({registered_kind}) runs only as a sub-agent: {instead}")
    return agent


def build(ws: "RunHost", name: str, **overrides: Any) -> Any:
    """The agent registered as ``name``: the live object in this process, or rebuilt from its card
    (``overrides`` change settings for the returned object only; it is not re-registered)."""
    live = ws.live_agents.get(name)
    if live is not None and not overrides:
        return live
    card = ws.agents.get(name)
    spec = get(kind_of(card))
    if callable(spec.rebuild):
        return spec.rebuild(ws, name, card, overrides)
    if spec.rebuild == "config":
        config = dict(card.metadata.get("config") or {})
        config.update(overrides)
        for attr in spec.keep_live:  # e.g. a user's engine object may not rebuild from its spec string
            if live is not None and attr not in overrides:
                config[attr] = list(getattr(live, attr))
        config.setdefault("model", card.model)
        config.setdefault("description", card.description)
        return spec.make(ws, name, register=False, **config)
    from_record = getattr(spec.target, "from_record", None)
    if from_record is None:
        from tea_notebook.runtime.agent import Agent

        from_record = Agent.from_record
    return from_record(ws, name, **overrides)


def restore_runner(ws: "RunHost", name: str) -> Any:
    """The runner of a stored card that has none in this process (None when the card says nothing
    about how to build it: an agent registered by hand without a runner)."""
    rec = ws.agents.get(name)
    if not rec.metadata.get("kind") and not rec.metadata.get("config"):
        return None
    agent = build(ws, name)
    return getattr(agent, "_runner", agent)


@agent_kind("agent", default_name="agent", description="a tool-calling agent (the agent loop)")
def plain_agent(ws: "RunHost", name: str = "agent", **options: Any) -> Any:
    """The plain tool-calling agent: a new one, or the registered one with ``options`` applied (see
    :meth:`tea_notebook.runtime.agent.Agent.open`)."""
    from tea_notebook.runtime.agent import Agent

    return Agent.open(ws, name, **options)


def __getattr__(attr: str) -> Any:
    """``KINDS`` and ``SHORTCUTS``, the tables this module had before kinds registered themselves."""
    if attr == "KINDS":
        return tuple(names())
    if attr == "SHORTCUTS":
        return {s: (kind.name, kind.default_name) for kind in registered() for s in kind.shortcuts}
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


__all__ = [
    "AGENT_OPTIONS",
    "BUILTIN",
    "AgentKind",
    "agent_kind",
    "build",
    "get",
    "kind_of",
    "make",
    "names",
    "plain_agent",
    "registered",
    "resolve",
    "restore_runner",
    "shortcut",
    "shortcut_names",
    "unregister",
]
