"""Registered generated tools run out of process: behind the sandbox boundary, not in the kernel.

The workspace hands a :class:`GeneratedToolExecutor` to the tool registry (TCP imports nothing from
here). Each run gets one warm sandbox session for its generated tools — ECP's session manager starts
it at the first call and stops it when the run ends (outside runs: the interactive session, until
``ws.envs.release()``) — and each tool's source is loaded into it once. A call that passes its time
limit is stopped (and the session killed if the code does not give up), so nothing keeps burning
CPU. A person may opt one tool into running in the kernel with ``ws.tools.trust(name,
"in_process")``; the tool manager never does.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tea_notebook.envs.base import EnvironmentFailure
from tea_notebook.envs.sandbox import PythonSandbox
from tea_notebook.envs.sessions import EnvironmentRuntime, SessionManager

if TYPE_CHECKING:
    from tea_notebook.protocol.context import Context
    from tea_notebook.protocol.records import ToolRecord

SESSION_NAME = "generated-tools"


class ToolSandbox(PythonSandbox):
    """The sandbox session generated tools of one run share (no network, the run's folder)."""

    name = SESSION_NAME
    description = "The sandbox in which registered generated tools run."


class GeneratedToolExecutor:
    """Calls generated tools in their run's sandbox session; ``timeout`` bounds each call."""

    def __init__(self, manager: SessionManager, *, timeout: float = 30.0, **sandbox_options: Any):
        self.timeout = float(timeout)
        self.runtime = EnvironmentRuntime(manager, SESSION_NAME, ToolSandbox, {"timeout": timeout, **sandbox_options})

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

        async def work(box: ToolSandbox) -> Any:
            result = await box._call("call", self.timeout, **request)
            if result.error is not None or result.limit is not None:
                raise EnvironmentFailure(f"tool {record.name!r} failed in the sandbox:\n{result.text()}")
            return _decode(result.value)

        return await self.runtime.manager.run(self.runtime, context, work)


def _decode(text: str | None) -> Any:
    payload = json.loads(text or "{}")
    if "json" in payload:
        return payload["json"]
    if "clipped" in payload:
        return f"{payload['clipped']}… (clipped: {payload['size']:,} characters in all)"
    return payload.get("repr")


__all__ = ["GeneratedToolExecutor", "ToolSandbox"]
