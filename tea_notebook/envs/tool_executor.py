"""Registered generated tools run out of process: behind the sandbox boundary, not in the kernel.

The workspace hands a :class:`GeneratedToolExecutor` to the tool registry (TCP imports nothing from
here). Each run gets one warm sandbox session for its generated tools — ECP's session manager starts
it at the first call and stops it when the run ends (outside runs: the interactive session, until
``ws.envs.release()``) — and each tool's source is loaded into it once. A call that passes its time
limit is stopped (and the session killed if the code does not give up), so nothing keeps burning
CPU. A person may opt one tool into running in the kernel with ``ws.tools.trust(name,
"in_process")``; the tool manager never does.

A person's own tool written with ``%%tool --process`` (``metadata["process"]``) runs out of process
too, so Stop can end it, but in a session of its own that is not a boundary: the kernel's user, its
environment variables and network, no limits but Stop (see :class:`ProcessToolSession`). Its
exceptions come back as the tool's own (type and message), as they would in the kernel.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from tea_notebook.envs.base import EnvironmentFailure
from tea_notebook.envs.sandbox import PythonSandbox
from tea_notebook.envs.sessions import EnvironmentRuntime, SessionManager
from tea_notebook.protocol.registry import InvokeError

if TYPE_CHECKING:
    from tea_notebook.protocol.context import Context
    from tea_notebook.protocol.records import ToolRecord

SESSION_NAME = "generated-tools"
PROCESS_SESSION_NAME = "process-tools"
#: a person's ``%%tool --process`` tool has no limit of its own (the agent's ``tool_timeout`` and Stop end it)
UNLIMITED_SECONDS = 7 * 24 * 3600.0


class ToolSandbox(PythonSandbox):
    """The sandbox session generated tools of one run share (no network, the run's folder)."""

    name = SESSION_NAME
    description = "The sandbox in which registered generated tools run."


class ProcessToolSession(PythonSandbox):
    """The child process a run's ``%%tool --process`` tools share: the kernel's user, environment and
    network (``isolation="process"``: its own process namespace where ``unshare`` works, no bubblewrap),
    the run folder's ``sandbox/`` as working directory, the sandbox's limits lifted; Stop kills it."""

    name = PROCESS_SESSION_NAME
    description = "The child process in which a person's %%tool --process tools run (so Stop can end them)."
    boundary_expected = False  # the person's own code, run as in the kernel: no fallback to warn about

    @staticmethod
    def options() -> dict[str, Any]:
        """The session's settings: no boundary and no limits but Stop, the kernel's environment."""
        memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        return {
            "isolation": "process",
            "drop_privileges": False,
            "timeout": UNLIMITED_SECONDS,
            "memory_mb": int(memory_mb),
            "processes": 4096,
            "file_mb": 1 << 20,
            "quota_mb": 1 << 20,
            "env": dict(os.environ),
        }


class GeneratedToolExecutor:
    """Calls generated tools in their run's sandbox session; ``timeout`` bounds each call. A
    ``%%tool --process`` tool goes to the run's :class:`ProcessToolSession` instead."""

    def __init__(self, manager: SessionManager, *, timeout: float = 30.0, **sandbox_options: Any):
        self.timeout = float(timeout)
        self.runtime = EnvironmentRuntime(manager, SESSION_NAME, ToolSandbox, {"timeout": timeout, **sandbox_options})
        self.process_runtime = EnvironmentRuntime(
            manager, PROCESS_SESSION_NAME, ProcessToolSession, ProcessToolSession.options()
        )

    async def call(self, record: "ToolRecord", args: dict[str, Any], context: "Context") -> Any:
        """Run ``record``'s function with ``args`` in the sandbox; its value, or a raised failure
        naming what went wrong (the tool's own exception, a limit, the sandbox's death)."""
        function = record.entrypoint.partition(":")[2].split(".")[-1] or record.name
        request = {
            "name": record.name,
            "hash": record.source_hash or str(hash(record.source)),
            "source": record.source,
            "function": function,
            "args": args,
        }

        own = bool(record.metadata.get("process"))

        async def work(box: ToolSandbox) -> Any:
            result = await box._call("call", UNLIMITED_SECONDS if own else self.timeout, **request)
            if own and result.error is not None and result.limit is None:
                # the tool raised: its own error, as in the kernel
                raise InvokeError(record.name, {"type": result.error["type"], "message": result.error["message"]})
            if result.error is not None or result.limit is not None:
                where = "its process" if own else "the sandbox"
                raise EnvironmentFailure(f"tool {record.name!r} failed in {where}:\n{result.text()}")
            return _decode(result.value)

        runtime = self.process_runtime if own else self.runtime
        return await runtime.manager.run(runtime, context, work)


def _decode(text: str | None) -> Any:
    payload = json.loads(text or "{}")
    if "json" in payload:
        return payload["json"]
    if "clipped" in payload:
        return f"{payload['clipped']}… (clipped: {payload['size']:,} characters in all)"
    return payload.get("repr")


__all__ = ["GeneratedToolExecutor", "ProcessToolSession", "ToolSandbox"]
