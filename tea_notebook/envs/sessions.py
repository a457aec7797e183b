"""ECP's environment context manager: one session per run (or per workspace), started on first
use, stopped when the run ends, killed at interpreter exit.

Every session lives on the background loop of :mod:`tea_notebook._sync`, whatever loop the caller
runs on (a Playwright browser is bound to the loop that started it).
"""

from __future__ import annotations

import atexit
import importlib
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tea_notebook import _sync
from tea_notebook.envs.base import Environment, EnvironmentFailure

if TYPE_CHECKING:
    import asyncio

    from tea_notebook.protocol.context import Context
    from tea_notebook.runtime.host import RunHost

DEFAULT_SESSION = "interactive"
_all_managers: "weakref.WeakSet[SessionManager]" = weakref.WeakSet()
_atexit_lock = threading.Lock()
_atexit_done = False


def load_class(path: str) -> type[Environment]:
    """``module:Class`` → the class."""
    module, _, qual = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def session_key(context: "Context | None", scope: str) -> str:
    """Which session a call belongs to: its root run's, or the interactive one outside runs."""
    if scope == "workspace" or context is None:
        return DEFAULT_SESSION
    node: Any = context
    while node is not None:
        if getattr(node, "is_run", False):
            return context.root
        node = node.parent
    return DEFAULT_SESSION


def _kill_everything() -> None:
    for manager in list(_all_managers):
        manager.kill_all()


@dataclass
class SessionInfo:
    """A live session, as :meth:`SessionManager.live` lists it."""

    environment: str
    key: str
    folder: Path
    state: str


class EnvironmentRuntime:
    """What ECP keeps as the runtime of an environment class: dispatches each action to the
    session of the caller's run, creating and starting it when needed."""

    def __init__(self, manager: "SessionManager", name: str, cls: type[Environment], config: dict[str, Any]):
        self.manager, self.name, self.cls, self.config = manager, name, cls, config

    async def invoke_action(self, action: str, args: dict[str, Any], context: "Context") -> Any:
        return await self.manager.run(self, context, lambda env: env.call(action, args))

    def session(self, context: "Context | None" = None) -> Environment | None:
        """The live session the context would use, or None when it has not started."""
        return self.manager.sessions.get((self.name, session_key(context, self.cls.scope)))

    def state(self, context: "Context | None" = None) -> str:
        env = self.session(context)
        if env is None:
            return f"{self.name}: not started (a session starts at the first action)"
        try:
            return env.state()
        except Exception as exc:  # noqa: BLE001 - a state that cannot be read is itself the state
            return f"{self.name}: state unavailable ({type(exc).__name__}: {exc})"

    def vision(self, context: "Context | None" = None) -> bytes | None:
        env = self.session(context)
        try:
            return env.vision() if env is not None else None
        except Exception:  # noqa: BLE001 - no screenshot is better than a failed step
            return None


class SessionManager:
    """Live sessions of one workspace, keyed by (environment name, session key)."""

    def __init__(self, workspace: "RunHost"):
        self.workspace = workspace
        self.sessions: dict[tuple[str, str], Environment] = {}
        self._starting: dict[tuple[str, str], asyncio.Future] = {}
        _all_managers.add(self)

    def runtime(self, name: str, cls: type[Environment], config: dict[str, Any]) -> EnvironmentRuntime:
        """What ECP registers as the runtime of environment ``name`` (class ``cls`` with ``config``)."""
        return EnvironmentRuntime(self, name, cls, config)

    def folder(self, key: str) -> Path:
        """The run folder of a session key (runs/<run id>, or sessions/interactive)."""
        base = self.workspace.path / ("sessions" if key == DEFAULT_SESSION else "runs")
        return base / key

    async def run(self, runtime: EnvironmentRuntime, context: "Context", work: Any) -> Any:
        """Run ``work(session)`` on the background loop, starting the session first if needed."""
        return await _sync.on_background(self._run_here(runtime, context, work))

    async def _run_here(self, runtime: EnvironmentRuntime, context: "Context", work: Any) -> Any:
        env = await self._acquire(runtime, context)
        env.context = context  # grants and the stop signal of the caller, not of the first caller
        return await work(env)

    async def _acquire(self, runtime: EnvironmentRuntime, context: "Context") -> Environment:
        import asyncio  # (imported here: a workspace opens without it)

        key = (runtime.name, session_key(context, runtime.cls.scope))
        if key in self.sessions:
            return self.sessions[key]
        pending = self._starting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._starting[key] = future
        try:
            env = runtime.cls(self.folder(key[1]), context=context, **runtime.config)
            env.egress = self.workspace.egress  # the one policy its network actions go through
            env.name = runtime.name  # type: ignore[misc] - the registered name, per instance
            _register_atexit()
            try:
                await asyncio.wait_for(env.start(), env.start_timeout)
            except BaseException as exc:
                await _stop(env)  # a half-started session releases what it holds
                if isinstance(exc, asyncio.TimeoutError):
                    raise EnvironmentFailure(f"{runtime.name} did not start within {env.start_timeout:g} s") from None
                raise
            self.sessions[key] = env
            future.set_result(env)
            return env
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            self._starting.pop(key, None)

    async def arelease(self, key: str | None = None, environment: str | None = None) -> list[str]:
        """Stop the sessions of one run (``key``), of one environment, or all; returns what stopped."""
        chosen = [
            k
            for k in list(self.sessions)
            if (key is None or k[1] == key) and (environment is None or k[0] == environment)
        ]

        async def stop_all() -> None:
            for k in chosen:
                env = self.sessions.pop(k, None)
                if env is not None:
                    await _stop(env)

        await _sync.on_background(stop_all())
        return [f"{env}@{k}" for env, k in chosen]

    def release(self, key: str | None = None, environment: str | None = None) -> list[str]:
        """Synchronous :meth:`arelease`."""
        return _sync.run_sync(self.arelease(key, environment))

    def live(self) -> list[SessionInfo]:
        """The sessions that are running now."""
        out = []
        for (name, key), env in list(self.sessions.items()):
            try:
                state = env.state()
            except Exception as exc:  # noqa: BLE001
                state = f"state unavailable: {exc}"
            out.append(SessionInfo(name, key, env.folder, state))
        return out

    def kill_all(self) -> None:
        """Last resort: kill every session's resources without the event loop."""
        for env in list(self.sessions.values()):
            try:
                env.kill()
            except Exception:  # noqa: BLE001 - exiting anyway
                pass
        self.sessions.clear()


async def _stop(env: Environment) -> None:
    """Stop a session within its time limit; kill what a failed or hung stop leaves behind."""
    import asyncio

    try:
        await asyncio.wait_for(env.stop(), env.stop_timeout)
    except BaseException:  # noqa: BLE001 - stopping is best effort
        env.kill()


def _register_atexit() -> None:
    global _atexit_done
    with _atexit_lock:
        if not _atexit_done:
            atexit.register(_kill_everything)
            _atexit_done = True
