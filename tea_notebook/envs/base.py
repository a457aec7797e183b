"""The base class of live environments and the ``@action`` marker for their methods."""

from __future__ import annotations

import contextvars
import functools
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from tea_notebook._threads import ACTION_THREADS
from tea_notebook.errors import EnvironmentFailure
from tea_notebook.protocol.schema import function_schema

if TYPE_CHECKING:  # the records (and pydantic) load when an environment is first described
    from tea_notebook.egress.policy import EgressPolicy
    from tea_notebook.protocol.context import Context
    from tea_notebook.protocol.records import ActionSpec, EnvironmentRecord

_ACTION = "__tea_action__"


class ActionTimeout(EnvironmentFailure):
    """An action did not finish within its time limit."""


def action(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    preconditions: tuple[str, ...] = (),
    postconditions: tuple[str, ...] = (),
    timeout: float | None = None,
) -> Any:
    """Mark a method of an :class:`Environment` as an action. Its parameter schema comes from the
    type hints and docstring; ``timeout`` overrides the environment's ``action_timeout``."""

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        setattr(
            f,
            _ACTION,
            {
                "name": name or f.__name__,
                "description": description,
                "preconditions": list(preconditions),
                "postconditions": list(postconditions),
                "timeout": timeout,
            },
        )
        return f

    return mark(fn) if fn is not None else mark


def _default_policy() -> "EgressPolicy":
    from tea_notebook.egress.policy import EgressPolicy

    return EgressPolicy()


class Environment:
    """One live session of an environment.

    Subclasses set ``name``, ``description``, ``rules`` and decorate methods with :func:`action`.
    ECP's session manager creates an instance per run (``scope = "run"``) with the run's folder,
    calls :meth:`start` before the first action and :meth:`stop` when the run ends; :meth:`kill`
    is the last resort at interpreter exit. :meth:`state` and :meth:`vision` feed the prompt's
    ``<state>`` and ``<vision>`` blocks; they are called synchronously, possibly from another
    thread, so they must be cheap and must not touch objects bound to the session's event loop
    (keep a copy refreshed by the actions instead).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    rules: ClassVar[str] = ""
    category: ClassVar[str] = "general"
    constraints: ClassVar[list[str]] = []
    scope: ClassVar[str] = "run"
    # seconds; subclasses may set them per instance from their options
    action_timeout: float = 30.0
    start_timeout: float = 60.0
    stop_timeout: float = 10.0
    #: synchronous actions of one session running at once (see :class:`ActionThreads`); an action
    #: that timed out but is still blocked keeps its thread and counts
    max_running_actions: int = 8

    def __init__(self, folder: Path, context: "Context | None" = None, **config: Any):
        self.folder = Path(folder)
        self.context = context
        #: the egress policy of this session's network actions (the workspace's, set by ECP's session
        #: manager); an environment made by hand gets the default policy
        self.egress: "EgressPolicy" = _default_policy()
        if config:
            raise TypeError(f"{type(self).__name__} got unknown options: {', '.join(sorted(config))}")

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Acquire resources (a process, a browser). Called once before the first action."""

    async def stop(self) -> None:
        """Release every resource. Must be safe to call twice."""

    async def reset(self) -> None:
        """Back to a fresh session."""
        await self.stop()
        await self.start()

    def kill(self) -> None:
        """Synchronous last-resort cleanup at interpreter exit (kill child processes)."""

    # -- what the prompt shows ------------------------------------------------------------
    def state(self) -> str:
        """A short text of the current state."""
        return ""

    def vision(self) -> bytes | None:
        """A PNG screenshot of the current state, when the environment has one."""
        return None

    # -- the action space ----------------------------------------------------------------
    @classmethod
    def action_methods(cls) -> dict[str, Callable[..., Any]]:
        """Action name → unbound method, in definition order."""
        out: dict[str, Callable[..., Any]] = {}
        for klass in reversed(cls.__mro__):
            for value in vars(klass).values():
                meta = getattr(value, _ACTION, None)
                if meta is not None:
                    out[meta["name"]] = value
        return out

    @classmethod
    def actions(cls) -> list[ActionSpec]:
        """The typed action space, from the marked methods' signatures and docstrings."""
        from tea_notebook.protocol.records import ActionSpec

        specs = []
        for name, method in cls.action_methods().items():
            meta = getattr(method, _ACTION)
            schema = function_schema(method, name=name, description=meta["description"])
            specs.append(
                ActionSpec(
                    name=name,
                    description=schema.description,
                    parameters=schema.parameters,
                    returns=schema.returns,
                    preconditions=meta["preconditions"],
                    postconditions=meta["postconditions"],
                )
            )
        return specs

    @classmethod
    def record(cls, name: str | None = None, description: str | None = None) -> EnvironmentRecord:
        """The ECP record describing this environment."""
        from tea_notebook.protocol.records import EnvironmentRecord

        if not (name or cls.name):
            raise TypeError(f"{cls.__name__} needs a name")
        return EnvironmentRecord(
            name=name or cls.name,
            description=description or cls.description or (cls.__doc__ or "").strip().split("\n")[0],
            rules=cls.rules,
            actions=cls.actions(),
            constraints=list(cls.constraints),
            category=cls.category,
            origin="environment",
            metadata={"runtime": f"{cls.__module__}:{cls.__qualname__}"},
        )

    async def call(self, action_name: str, args: dict[str, Any]) -> Any:
        """Run one action with its time limit; sync actions run on :data:`ACTION_THREADS`."""
        import asyncio  # (imported here, as in every coroutine of envs/: a workspace opens without it)

        method = self.action_methods().get(action_name)
        if method is None:
            raise EnvironmentFailure(f"{self.name} has no action {action_name!r}")
        limit = getattr(method, _ACTION)["timeout"] or self.action_timeout
        bound = method.__get__(self, type(self))
        label = f"{self.name}.{action_name}"
        if inspect.iscoroutinefunction(method):
            try:
                return await asyncio.wait_for(bound(**args), limit)
            except asyncio.TimeoutError:
                raise ActionTimeout(f"{label} did not finish within {limit:g} s") from None
        run = functools.partial(contextvars.copy_context().run, bound, **args)
        future = ACTION_THREADS.submit(self, self.max_running_actions, label, run)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), limit)
        except asyncio.TimeoutError:
            if not future.cancel():  # it started: it may still finish, as any timed-out action
                raise ActionTimeout(f"{label} did not finish within {limit:g} s") from None
            held = ACTION_THREADS.held_by(self)
            if len(held) >= self.max_running_actions:
                why = (
                    f"all {self.max_running_actions} action threads of this session are held by earlier "
                    f"actions that are still running ({', '.join(held)})"
                )
            else:
                why = f"all {ACTION_THREADS.max_threads} action threads of this process are busy"
            raise ActionTimeout(f"{label} did not start within {limit:g} s: {why}") from None
