"""ACP, the Agent Context Protocol: agent cards, their relation graph and task–agent matching."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable

from tea_notebook._threads import SYNC_THREADS, run_sync_call
from tea_notebook.errors import NotFoundError
from tea_notebook.protocol.context import Context
from tea_notebook.protocol.registry import InvokeResult, Registry, not_found_result

if TYPE_CHECKING:  # the records (and pydantic) load with the first record made or read
    from tea_notebook.protocol.records import AgentRecord

AGENT_TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "The task, passed on unmodified."},
        "files": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Absolute paths of files the task refers to.",
            "default": [],
        },
    },
    "required": ["task"],
    "additionalProperties": False,
}


class AgentRegistry(Registry["AgentRecord"]):
    """Agents. ``register(record, runtime=runner)`` attaches ``runner(task, files=[...])`` (sync or
    async; with a ``context`` parameter it also receives the caller's run context) that runs the
    agent in this process. :class:`tea_notebook.runtime.agent.Agent` registers itself this way.

    ``restorer(name)``, handed down by the workspace, rebuilds the runner of a stored card that has
    none in this process (after a kernel restart), or returns None when the card cannot say how.
    """

    restorer: Callable[[str], Any] | None = None

    def _describe_extra(self, record: AgentRecord) -> list[str]:
        out = [f"role: {record.role}"] if record.role else []
        for label, items in (
            ("competencies", record.competencies),
            ("objectives", record.objectives),
            ("capabilities", record.capabilities),
            ("safety", record.safety_constraints),
            ("tools", record.tools),
        ):
            if items:
                out.append(f"{label}: {', '.join(items)}")
        out.append(f"model: {record.model or '(workspace default)'}")
        return out

    def route(
        self,
        query: str | None = None,
        context: Context | None = None,
        *,
        k: int = 5,
        from_agent: str | None = None,
        **where: Any,
    ) -> list[AgentRecord]:
        """Task–agent matching; with ``from_agent``, only agents it delegates to or collaborates with."""
        found = super().route(query, context, k=10_000 if from_agent else k, **where)
        if from_agent:
            me = self.get(from_agent)
            reach = set(me.related("delegates_to")) | set(me.related("collaborates_with"))
            found = [a for a in found if a.name in reach][:k]
        return found

    def hierarchy(self) -> dict[str, list[str]]:
        """``manager -> [agents that report to it or that it delegates to]``."""
        out: dict[str, list[str]] = {}
        for src, kind, dst in self.graph():
            if kind == "delegates_to":
                out.setdefault(src, []).append(dst)
            elif kind == "reports_to":
                out.setdefault(dst, []).append(src)
        return {k: sorted(set(v)) for k, v in out.items()}

    async def ainvoke(
        self, name: str, task: str, files: list[str] | None = None, context: Context | None = None
    ) -> InvokeResult:
        """Run an agent on a task through its attached runner."""
        try:
            rec = self.get(name)
        except NotFoundError as exc:
            return not_found_result(name, str(exc))
        args = {"task": task, "files": list(files or [])}
        return await self._invoke(
            name, name, AGENT_TASK_SCHEMA, args, self._runner_call(name, context), context, rec.version
        )

    def invoke(
        self, name: str, task: str, files: list[str] | None = None, context: Context | None = None
    ) -> InvokeResult:
        """Synchronous :meth:`ainvoke`."""
        return self._sync_invoke(self.ainvoke(name, task, files, context))

    def _runner(self, name: str) -> tuple[Any, str]:
        """The agent's runner (rebuilt from its card when needed), or None and why not."""
        runner = self._runtimes.get(name)
        if runner is None and self.restorer is not None:
            try:
                runner = self.restorer(name)
            except Exception as exc:  # noqa: BLE001 - the card's settings no longer work here
                return None, f"agent {name!r} could not be rebuilt from its card: {type(exc).__name__}: {exc}"
            if runner is not None:
                self._runtimes[name] = runner
        return runner, f"agent {name!r} has no runner in this process"

    def _runner_call(self, name: str, context: Context | None) -> Callable[[dict[str, Any]], Any]:
        runner, missing = self._runner(name)

        def call(args: dict[str, Any]) -> Any:
            if runner is None:
                raise RuntimeError(missing)
            kwargs = dict(args)
            if context is not None and "context" in inspect.signature(runner).parameters:
                kwargs["context"] = context  # nested runs hang under the caller's run
            if inspect.iscoroutinefunction(runner) or inspect.iscoroutinefunction(type(runner).__call__):
                return runner(**kwargs)
            return run_sync_call(("agent", name), SYNC_THREADS, f"agent {name}", runner, **kwargs)

        return call

    async def run_for_tool(self, name: str, args: dict[str, Any], context: Context) -> Any:
        """Used by A2T tools: run the agent and return its answer, raising on failure."""
        result = await self.ainvoke(name, args.get("task", ""), args.get("files"), context)
        return result.unwrap()
