"""ECP, the Environment Context Protocol: environment records and the runtimes behind them."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Protocol

from tea_notebook._threads import SYNC_THREADS, run_sync_call
from tea_notebook.errors import NotFoundError, RegistryError
from tea_notebook.protocol.context import Context
from tea_notebook.protocol.registry import InvokeResult, Registry, not_found_result

if TYPE_CHECKING:  # the records (and pydantic) load with the first record made or read
    from tea_notebook.protocol.records import ActionSpec, EnvironmentRecord
    from tea_notebook.protocol.store_host import StoreHost


class LiveEnvironment(Protocol):
    """What ECP needs of a live environment class (``tea_notebook.envs.base.Environment`` is one).

    ``record(name, description)`` is a classmethod giving the ECP record; ``scope`` is ``"run"``
    (one session per run) or ``"workspace"``; ``cls(folder, context=None, **options)`` starts
    nothing (it only checks the options); instances have async ``start``, ``stop`` and
    ``call(action, args)``, and ``state()`` and ``kill()``.
    """

    scope: str

    @classmethod
    def record(cls, name: str | None = None, description: str | None = None) -> EnvironmentRecord: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def call(self, action_name: str, args: dict[str, Any]) -> Any: ...

    def state(self) -> str: ...

    def kill(self) -> None: ...


class SessionProvider(Protocol):
    """What ECP needs of a session manager (``tea_notebook.envs.sessions.SessionManager`` is one):
    run folders, a runtime per registered class, and stopping / listing live sessions."""

    def folder(self, key: str) -> Path: ...

    def runtime(self, name: str, cls: type, config: dict[str, Any]) -> Any: ...

    async def run(self, runtime: Any, context: Context, work: Callable[[Any], Awaitable[Any]]) -> Any: ...

    def release(self, key: str | None = None, environment: str | None = None) -> list[str]: ...

    async def arelease(self, key: str | None = None, environment: str | None = None) -> list[str]: ...

    def live(self) -> list[Any]: ...


_CLASS_METHODS = ("start", "stop", "call", "state", "kill")

#: the name of the context (and session) of actions invoked outside runs
INTERACTIVE = "interactive"


def is_live_environment(obj: Any) -> bool:
    """Whether ``obj`` is a class shaped like a :class:`LiveEnvironment` (checked by its members,
    not by its base class, so ECP needs no import of the environments above it)."""
    if not isinstance(obj, type):
        return False
    record = getattr(obj, "record", None)
    if not (inspect.ismethod(record) and record.__self__ is obj):  # a classmethod, bound to the class
        return False
    if not isinstance(getattr(obj, "scope", None), str):
        return False
    return all(callable(getattr(obj, m, None)) for m in _CLASS_METHODS)


def _load(path: str) -> Any:
    """``"module:Class"`` → the object (a class named by configuration, imported when asked for)."""
    module, sep, qual = path.partition(":")
    if not sep or not module or not qual:
        raise TypeError(f"an environment given by name must be 'module:Class', not {path!r}")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


class EnvironmentRegistry(Registry["EnvironmentRecord"]):
    """Environments: rules, state, actions. ``register(record, runtime=obj)`` attaches an object
    whose methods are the actions (sync or async) and whose optional ``state()`` returns text.

    A runtime that needs the caller's run context instead defines
    ``invoke_action(action, args, context)`` (sync or async), which is called for every action.

    Live environments (``add``, ``ensure``) run in sessions kept by a session manager that the
    layer above provides: ``manager_factory(workspace)`` makes it on first use, and ``builtins``
    (name → class or ``"module:Class"``) are the environments ``ensure`` adds by name.
    """

    def _describe_extra(self, record: EnvironmentRecord) -> list[str]:
        out = []
        if record.rules:
            out.append(f"rules: {record.rules}")
        for action in record.actions:
            cond = f" (after {', '.join(action.preconditions)})" if action.preconditions else ""
            out.append(f"  action {action.name}{cond}: {action.description}")
        return out

    def __init__(
        self,
        workspace: "StoreHost",
        record_type: "type[EnvironmentRecord] | str" = "environment",
        *,
        # called with ``workspace``, which the layer above that provides the factory knows as more
        # than a StoreHost (envs' SessionManager takes a RunHost): hence Any
        manager_factory: "Callable[[Any], SessionProvider] | None" = None,
        builtins: Mapping[str, Any] | None = None,
    ):
        super().__init__(workspace, record_type)
        self._manager_factory = manager_factory
        self._manager: Any = None
        self.builtins: dict[str, Any] = dict(builtins or {})
        self._interactive: Context | None = None

    @property
    def interactive(self) -> Context:
        """The context of actions invoked outside runs (``ws.envs.invoke`` without a context): one for
        the workspace, as a run has one, so an action's preconditions see what earlier calls did."""
        if self._interactive is None:
            self._interactive = Context(INTERACTIVE)
        return self._interactive

    # -- live environments -----------------------------------------------------------------
    @property
    def manager(self) -> "SessionProvider":
        """The session manager (ECP's environment context manager) of this workspace, made on first
        use by the ``manager_factory`` the layer above provides (the Workspace gives envs' one)."""
        if self._manager is None:
            if self._manager_factory is None:
                raise RegistryError(
                    "this environment registry has no session manager (it was made without a "
                    "manager_factory), so live environments cannot run here; use a Workspace's ws.envs"
                )
            self._manager = self._manager_factory(self.workspace)
        return self._manager

    def add(
        self, env: Any, *, name: str | None = None, description: str | None = None, **config: Any
    ) -> EnvironmentRecord:
        """Register a live environment class (or ``"module:Class"``) with its options; one session
        per run is started on the first action and stopped when the run ends.

        ``ws.envs.add(PythonSandbox, timeout=10, memory_mb=512)``. The class must look like a
        :class:`LiveEnvironment` (``tea_notebook.envs.base.Environment`` subclasses do).
        """
        cls = _load(env) if isinstance(env, str) else env
        if not is_live_environment(cls):
            raise TypeError(
                f"ws.envs.add takes a live environment class (an Environment subclass: a record() "
                f"classmethod, a scope, async start / stop / call), not {cls!r}"
            )
        try:  # bad options fail here, before anything is registered (__init__ starts nothing)
            cls(self.manager.folder("check"), **config)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{cls.__name__}: {exc}") from None
        record = cls.record(name, description)
        return self.register(record, note="live environment", runtime=self.manager.runtime(record.name, cls, config))

    def ensure(self, name: str) -> EnvironmentRecord:
        """The environment ``name``, adding a built-in one (python, files, browser, kernel) on first
        use and re-attaching a live runtime to a stored record in a new process."""
        if name in self and (name in self._runtimes or name not in self.builtins):
            return self.get(name)
        if name in self.builtins:
            return self.add(self.builtins[name], name=name)
        return self.get(name)  # raises NotFoundError naming what exists

    def release(self, run: str | None = None, environment: str | None = None) -> list[str]:
        """Stop the live sessions of one run, of one environment, or all of them."""
        self._forget_interactive(run, environment)
        return self.manager.release(run, environment) if self._manager is not None else []

    async def arelease(self, run: str | None = None, environment: str | None = None) -> list[str]:
        """Async :meth:`release`."""
        self._forget_interactive(run, environment)
        return await self.manager.arelease(run, environment) if self._manager is not None else []

    def _forget_interactive(self, run: str | None, environment: str | None) -> None:
        """The interactive sessions stop: what their actions set up is gone with them."""
        if self._interactive is not None and run in (None, INTERACTIVE):
            self._interactive.forget(f"{environment}." if environment else "")

    def reset(self, name: str, context: Context | None = None) -> str:
        """Reset the live session of ``name`` that ``context`` uses (the interactive one by default)."""
        from tea_notebook._sync import run_sync

        runtime = self._runtimes.get(name)
        if runtime is None or not hasattr(runtime, "session"):
            raise NotFoundError(f"environment {name!r} has no live session to reset")

        async def work(env: Any) -> str:
            await env.reset()
            return f"{name} was reset"

        ctx = context or self.interactive
        done = run_sync(runtime.manager.run(runtime, ctx, work))
        ctx.forget(f"{name}.")  # the actions that set it up have to run again
        return done

    def sessions(self) -> list[Any]:
        """The live sessions now (environment, run key, folder, state)."""
        return self.manager.live() if self._manager is not None else []

    def state(self, name: str, context: Context | None = None) -> str:
        """The environment's current state text (of ``context``'s session for live environments):
        from its runtime when attached, else the record's."""
        rec = self.get(name)
        runtime = self._runtimes.get(name)
        getter = getattr(runtime, "state", None)
        if not callable(getter):
            return rec.state
        return str(getter(context) if inspect.signature(getter).parameters else getter())

    def vision(self, name: str, context: Context | None = None) -> bytes | None:
        """A PNG screenshot of the environment's current state, when it has one."""
        getter = getattr(self._runtimes.get(name), "vision", None)
        return getter(context) if callable(getter) else None

    def _action_call(
        self, env: str, action: str, context: Context
    ) -> tuple[EnvironmentRecord, ActionSpec, Callable[[dict[str, Any]], Any]]:
        rec = self.get(env)
        spec = rec.action(action)
        if spec is None:
            names = ", ".join(a.name for a in rec.actions) or "none"
            raise NotFoundError(f"environment {env!r} has no action {action!r} (actions: {names})")
        missing = [p for p in spec.preconditions if not context.has_succeeded(f"{env}.{p}")]
        runtime = self._runtimes.get(env)

        def call(args: dict[str, Any]) -> Any:
            if missing:
                raise RuntimeError(f"action {action!r} of {env!r} needs {', '.join(missing)} to have succeeded first")
            dispatch = getattr(runtime, "invoke_action", None)
            if dispatch is not None:
                if inspect.iscoroutinefunction(dispatch):
                    return dispatch(action, args, context)
                return run_sync_call(
                    ("environment", env), SYNC_THREADS, f"{env}.{action}", dispatch, action, args, context
                )
            method = getattr(runtime, action, None) if runtime is not None else None
            if method is None:
                raise RuntimeError(f"environment {env!r} has no runtime for action {action!r} in this process")
            if inspect.iscoroutinefunction(method):
                return method(**args)
            return run_sync_call(("environment", env), SYNC_THREADS, f"{env}.{action}", method, **args)

        return rec, spec, call

    async def ainvoke(
        self, name: str, action: str, args: dict[str, Any] | None = None, context: Context | None = None
    ) -> InvokeResult:
        """Run one action of an environment; errors come back as structured results."""
        ctx = context or self.interactive
        label = f"{name}.{action}"
        try:
            rec, spec, call = self._action_call(name, action, ctx)
        except NotFoundError as exc:
            return not_found_result(label, str(exc))
        return await self._invoke(name, label, spec.parameters, args, call, ctx, rec.version)

    def invoke(
        self, name: str, action: str, args: dict[str, Any] | None = None, context: Context | None = None
    ) -> InvokeResult:
        """Synchronous :meth:`ainvoke`."""
        return self._sync_invoke(self.ainvoke(name, action, args, context))

    async def run_for_tool(self, env: str, action: str, args: dict[str, Any], context: Context) -> Any:
        """Used by E2T tools: run the action and return its value, raising on failure."""
        result = await self.ainvoke(env, action, args, context)
        return result.unwrap()
