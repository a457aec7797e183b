"""ECP, the Environment Context Protocol: environment records and the runtimes behind them."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from tea_notebook.errors import NotFoundError
from tea_notebook.protocol.context import Context
from tea_notebook.protocol.records import EnvironmentRecord
from tea_notebook.protocol.registry import InvokeResult, Registry, not_found_result


class EnvironmentRegistry(Registry[EnvironmentRecord]):
    """Environments: rules, state, actions. ``register(record, runtime=obj)`` attaches an object
    whose methods are the actions (sync or async) and whose optional ``state()`` returns text.

    A runtime that needs the caller's run context instead defines
    ``invoke_action(action, args, context)`` (sync or async), which is called for every action.
    """

    def _describe_extra(self, record: EnvironmentRecord) -> list[str]:
        out = []
        if record.rules:
            out.append(f"rules: {record.rules}")
        for action in record.actions:
            cond = f" (after {', '.join(action.preconditions)})" if action.preconditions else ""
            out.append(f"  action {action.name}{cond}: {action.description}")
        return out

    def runtime(self, name: str) -> Any:
        """The object behind an environment in this process, or None."""
        return self._runtimes.get(name)

    def state(self, name: str) -> str:
        """The environment's current state text: from its runtime when attached, else the record's."""
        rec = self.get(name)
        runtime = self._runtimes.get(name)
        getter = getattr(runtime, "state", None)
        return str(getter()) if callable(getter) else rec.state

    def _action_call(self, env: str, action: str, context: Context):
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
                return asyncio.to_thread(dispatch, action, args, context)
            method = getattr(runtime, action, None) if runtime is not None else None
            if method is None:
                raise RuntimeError(f"environment {env!r} has no runtime for action {action!r} in this process")
            if inspect.iscoroutinefunction(method):
                return method(**args)
            return asyncio.to_thread(method, **args)

        return rec, spec, call

    async def ainvoke(
        self, name: str, action: str, args: dict[str, Any] | None = None, context: Context | None = None
    ) -> InvokeResult:
        """Run one action of an environment; errors come back as structured results."""
        ctx = context or Context()
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
