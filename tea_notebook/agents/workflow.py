"""What the workflow agents share (AgentOrchestra §4.2: the specialists are "custom workflows", not
ReAct loops): an ACP card that rebuilds them in any process, a recorded run per task, model calls
that must answer in JSON (sent back once with the error when they do not), and the ACP runner.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from tea_notebook.errors import TeaError
from tea_notebook.models.client import ModelClient, ModelError, resolve_model
from tea_notebook.protocol.context import Context
from tea_notebook.protocol.records import AgentRecord
from tea_notebook.runtime.agent import RunResult, parse_json_object, sub_agent_answer
from tea_notebook.runtime.event_types import ErrorEvent, FinishedStatus
from tea_notebook.runtime.jobs import Runnable, checked_result
from tea_notebook.runtime.runlog import Process, RunInterrupted
from tea_notebook.runtime.stop_reason import stop_reason

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost


class Budget:
    """Wall-time and token limits of one run; ``over()`` says which is spent, or None."""

    def __init__(self, proc: Process, seconds: float | None, tokens: int | None):
        self.proc, self.seconds, self.tokens = proc, seconds, tokens
        self.started = time.monotonic()

    def over(self) -> str | None:
        if self.seconds is not None and time.monotonic() - self.started > self.seconds:
            return f"the time budget of {self.seconds:g} s is spent"
        used = self.proc.prompt_tokens + self.proc.completion_tokens
        if self.tokens is not None and used >= self.tokens:
            return f"the token budget of {self.tokens:,} is spent ({used:,} used)"
        return None


class WorkflowAgent(Runnable):
    """Base class of the specialist workflow agents. Subclasses set ``kind`` and implement ``_work``.

    The agent is registered in ACP under ``name`` (kind and settings in the card's metadata), so a
    planner can delegate to it through A2T and another process can rebuild it with
    :func:`tea_notebook.agents.kinds.build`.
    """

    kind: ClassVar[str] = ""
    role: ClassVar[str] = ""
    default_description: ClassVar[str] = ""
    capabilities: ClassVar[list[str]] = []

    def __init__(
        self,
        workspace: "RunHost",
        name: str,
        *,
        model: str | None = None,
        description: str | None = None,
        client: ModelClient | None = None,
        register: bool = True,
    ):
        self.workspace, self.name, self.model = workspace, name, model
        self.description = description or self.default_description
        self.client = client or ModelClient()
        self._register = register

    def _config(self) -> dict[str, Any]:
        """JSON settings that rebuild the agent (subclasses add theirs)."""
        return {}

    def _publish(self) -> None:
        """Register the card (call at the end of a subclass's ``__init__``)."""
        if not self._register:
            return
        self.workspace.live_agents.put(self.name, self)
        record = AgentRecord(
            name=self.name,
            description=self.description,
            role=self.role,
            model=self.model,
            capabilities=list(self.capabilities),
            max_steps=self._max_steps(),
            origin="runtime",
            metadata={"kind": self.kind, "config": self._config()},
        )
        self.workspace.agents.register(record, runtime=self._runner)

    def _max_steps(self) -> int:
        return 0

    def resolved_model(self, explicit: str | None = None) -> tuple[str, str]:
        """The model this agent would use, and why."""
        return resolve_model(explicit, self.model, self.workspace.default_model)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, model={self.resolved_model()[0]!r})"

    # -- running ----------------------------------------------------------------------------------
    async def run(
        self,
        task: str,
        files: list[str] | None = None,
        *,
        model: str | None = None,
        context: Context | None = None,
        grants: list[str] | tuple[str, ...] = (),
        raise_on_error: bool = True,
    ) -> RunResult:
        """Run the workflow on ``task``: its :class:`RunResult` (see ``status``); a run that ends in ``error``
        raises :class:`~tea_notebook.errors.RunFailed` unless ``raise_on_error=False``."""
        proc = Process(self.workspace, self.name, task, model=model or self.model, context=context, client=self.client)
        proc.ctx.grants.update(grants)
        outcome: dict[str, Any] = {"files": []}
        async with proc:
            attached = proc.attach(list(files or []))
            try:
                status, answer, out_files = await self._work(proc, task, attached)
                outcome["files"] = out_files
                proc.finish(status, answer, None if status in ("success", "failed") else answer)
            except ModelError as exc:
                proc.emit("error", ErrorEvent(kind="model", message=str(exc)))
                proc.finish("error", "", str(exc))
            except RunInterrupted:
                proc.finish("interrupted", "", stop_reason())
            except TeaError as exc:  # a scripted model's end, a refused action: the run's error, as in the loop
                proc.emit("error", ErrorEvent(kind=type(exc).__name__, message=str(exc)))
                proc.finish("error", "", str(exc))
        status, answer, error = proc._result or ("error", "", "no result")
        await proc.release_sessions()
        result = RunResult(
            proc.run_id,
            self.name,
            task,
            proc.model,
            status,
            answer or (error or ""),
            proc.steps,
            proc.prompt_tokens,
            proc.completion_tokens,
            proc.cost,
            outcome["files"],
            error,
            self.workspace,
        )
        return checked_result(result, raise_on_error)

    async def _runner(self, task: str, files: list[str] | None = None, context: Context | None = None) -> str:
        """ACP runner: a nested run under the caller's; its answer, or an error."""
        return sub_agent_answer(self.name, await self.run(task, files, context=context, raise_on_error=False))

    async def _work(self, proc: Process, task: str, files: list[str]) -> tuple[FinishedStatus, str, list[str]]:
        """The workflow: ``(status, answer, files to show)``."""
        raise NotImplementedError


async def ask_json(
    proc: Any,
    system: str,
    user: str,
    stage: str,
    *,
    required: tuple[str, ...] = (),
    retries: int = 1,
    image: str | None = None,
) -> dict[str, Any] | None:
    """Ask the run's model for a JSON object with the ``required`` keys. A reply that is not one is
    sent back with what was wrong (``retries`` times); then None, recorded as a model-output error."""
    return (await ask_checked(proc, system, user, stage, required=required, retries=retries, image=image)).data


class Checked:
    """What :func:`ask_checked` got: the accepted object (or None), its raw text, the attempts made
    and the last problem found."""

    def __init__(self, data: dict[str, Any] | None, text: str, attempts: int, problem: str):
        self.data, self.text, self.attempts, self.problem = data, text, attempts, problem


async def ask_checked(
    proc: Any,
    system: str,
    user: str,
    stage: str,
    *,
    required: tuple[str, ...] = (),
    check: Callable[[dict[str, Any]], str | None] | None = None,
    retries: int = 1,
    image: str | None = None,
) -> Checked:
    """:func:`ask_json` with a ``check(data) -> problem or None`` of the content too; every problem
    (not JSON, a missing key, what ``check`` says) is sent back to the model, at most ``retries`` times.
    ``proc`` is anything with ``complete(messages, stage)`` and ``emit`` (a Process, a ToolSelf run)."""
    content: Any = user
    if image is not None:
        content = [{"type": "text", "text": user}, {"type": "image_url", "image_url": {"url": image}}]
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": content}]
    problem, text = "", ""
    for attempt in range(1, retries + 2):
        reply = await proc.complete(messages, stage)
        text = reply.content or ""
        try:
            data = parse_json_object(text)
            missing = [k for k in required if k not in data]
            problem = f"the JSON object lacks {', '.join(repr(k) for k in missing)}" if missing else ""
            if not problem and check is not None:
                problem = check(data) or ""
            if not problem:
                return Checked(data, text, attempt, "")
        except (ValueError, json.JSONDecodeError) as exc:
            problem = f"the reply is not a JSON object ({exc})"
        messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": f"Error: {problem}. Answer again with ONLY the JSON object described above."},
        ]
    proc.emit("error", ErrorEvent(kind="model_output", message=f"{stage}: {problem}", consecutive=retries + 1))
    return Checked(None, text, retries + 1, problem)


def as_list(value: Any, limit: int = 20) -> list[str]:
    """A model's list field as clean strings (a single string becomes a one-item list)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return [str(v).strip() for v in value if str(v).strip()][:limit]


__all__ = ["Budget", "Checked", "WorkflowAgent", "as_list", "ask_checked", "ask_json"]
