"""What every recorded run shares, agent loop or not: its id and context, its events, its totals.

:class:`RunLog` starts a run in the store, emits its events, counts model usage and closes it with
totals that include its sub-runs. The agent loop builds on it, and so does :class:`Process`: a run
made of named stages instead of model-chosen actions (tool creation, judging, reflection), which
shows in the live view and in ``ws.trajectory`` like any agent run.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, cast, overload

from typing_extensions import Unpack

from tea_notebook.errors import TeaError
from tea_notebook.models.client import ModelClient, ModelReply, display_name, resolve_model
from tea_notebook.protocol.context import Context
from tea_notebook.redaction import redact
from tea_notebook.runtime.event_types import (
    CellDecidedEvent,
    CellProposedEvent,
    CellRanEvent,
    DivergedEvent,
    EgressRefusedEvent,
    ErrorEvent,
    EventType,
    FinishedStatus,
    MemoryWrittenEvent,
    MessageEvent,
    ModelRequestEvent,
    ModelResponseEvent,
    NoticeEvent,
    RunFinishedEvent,
    RunStartedEvent,
    RunStartOptions,
    StageEvent,
    StepEvent,
    ThreadEvent,
    ToolCallEvent,
    ToolCreatedEvent,
    ToolDiscardedEvent,
    ToolResultEvent,
    ToolReusedEvent,
)
from tea_notebook.runtime.refusals import RefusalTally
from tea_notebook.runtime.stop_reason import stop_reason

if TYPE_CHECKING:
    from tea_notebook.runtime.contexts import ContextRecorder
    from tea_notebook.runtime.host import RunHost

DURABLE: tuple[EventType, ...] = ("run_started", "step", "error", "run_finished")  # written at once; the rest per step
Uses = list[tuple[str, list[tuple]]]
"""Invocation counts written with an event: ``(registry kind, rows)``."""


class RunInterrupted(TeaError):
    """Raised inside a run when it is cancelled (turned into status 'interrupted')."""


class RunLog:
    """A run's identity, context, events and usage totals."""

    def __init__(self, ws: "RunHost", agent: str, task: str, model: str, model_source: str, parent: Context | None):
        self.ws, self.events = ws, ws.events
        self.agent_name, self.task = agent, task
        self.model, self.model_source = model, model_source
        self.run_id = self.events.new_id()
        self.ctx = Context(self.run_id, parent=parent)
        self.ctx.is_run = True
        self.ctx.notices = self.notice  # what this run's environments report (egress refusals) are its events
        self.refusals = RefusalTally(
            lambda data, step: self.emit("egress_refused", cast(EgressRefusedEvent, data), step)
        )
        # a caller's plain context (a notebook cell's) lends only its stop signal: this run is the
        # root of its own tree, with its own grants, sessions and run folder; a calling run is the parent
        self.parent_run = parent.id if parent is not None and getattr(parent, "is_run", False) else None
        if self.parent_run is None:
            self.ctx.root = self.run_id
            self.ctx.grants = set(parent.grants) if parent is not None else set()
            self.ctx.attachments = set()
        self.folder = ws.path / "runs" / self.run_id
        self.prompt_tokens = self.completion_tokens = 0
        self.cost = 0.0

    @property
    def contexts(self) -> "ContextRecorder":
        """Stores this run's model requests (see :mod:`tea_notebook.runtime.contexts`)."""
        recorder = self.__dict__.get("_contexts")
        if recorder is None:
            from tea_notebook.runtime.contexts import ContextRecorder

            recorder = self.__dict__["_contexts"] = ContextRecorder(self.events)
        return recorder

    # one overload per event type (as in event_types.EVENT_DATA): a checker pairs the type with its data
    @overload
    def emit(
        self,
        type_: Literal["run_started"],
        data: RunStartedEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["model_request"],
        data: ModelRequestEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["model_response"],
        data: ModelResponseEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["step"],
        data: StepEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["tool_call"],
        data: ToolCallEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["tool_result"],
        data: ToolResultEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["memory_written"],
        data: MemoryWrittenEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["tool_created"],
        data: ToolCreatedEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["tool_discarded"],
        data: ToolDiscardedEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["tool_reused"],
        data: ToolReusedEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["error"],
        data: ErrorEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["run_finished"],
        data: RunFinishedEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["stage"],
        data: StageEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["message"],
        data: MessageEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["thread"],
        data: ThreadEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["egress_refused"],
        data: EgressRefusedEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["notice"],
        data: NoticeEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["diverged"],
        data: DivergedEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["cell_proposed"],
        data: CellProposedEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["cell_decided"],
        data: CellDecidedEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    @overload
    def emit(
        self,
        type_: Literal["cell_ran"],
        data: CellRanEvent,
        step: int | None = ...,
        uses: Uses | None = ...,
        durable: bool | None = ...,
    ) -> None: ...
    def emit(
        self,
        type_: EventType,
        data: Mapping[str, Any] | None = None,
        step: int | None = None,
        uses: Uses | None = None,
        durable: bool | None = None,
    ) -> None:
        """One event of this run: ``data`` is the type's ``TypedDict`` (the overloads pair them);
        ``uses``: invocation counts written in the same transaction; ``durable``: written at once,
        by default for the types in :data:`DURABLE`."""
        if self.refusals.pending and type_ != "egress_refused":  # counted refusals go before what follows
            self.refusals.flush()
        payload = {"root_run": self.ctx.root, "agent": self.agent_name, **(data or {})}
        flush = type_ in DURABLE if durable is None else durable
        self.events.emit(self.run_id, type_, payload, parent_id=self.parent_run, step=step, flush=flush, uses=uses)

    def notice(self, kind: str, data: dict[str, Any]) -> int:
        """An event reported by an environment or a network action of this run (any thread), filed
        under the step in progress; returns that step's number."""
        done = getattr(self, "steps", 0)
        step = (len(done) if isinstance(done, list) else int(done)) + 1
        if kind == "egress_refused":  # bounded per step: the first few in full, the rest counted
            self.refusals.add(data, step)
            return step
        emit: Callable[..., None] = self.emit  # the type is named at run time (EventLog.emit checks it)
        emit(kind, data, step)
        return step

    def attach(self, files: list[str]) -> list[str]:
        """Absolute paths of ``files``; at the root of a run tree (a person's call) they become the
        tree's attachments, the only files outside run folders that its agents may read."""
        paths = [str(Path(f).expanduser().resolve()) for f in files if isinstance(f, str) and f.strip()]
        if self.parent_run is None:
            self.ctx.attachments.update(paths)
        return paths

    def start(self, *, fork: tuple[str, int] | None = None, **started: Unpack[RunStartOptions]) -> None:
        """Record the run and emit ``run_started`` (with ``started`` fields)."""
        self.ws.db.start_run(  # the store redacts and clips the task
            {
                "id": self.run_id,
                "parent_id": self.parent_run,
                "agent": self.agent_name,
                "task": self.task,
                "model": self.model,
                "started": time.time(),
                "forked_from": fork[0] if fork else None,
                "fork_step": fork[1] if fork else None,
            }
        )
        note = None
        if self.model_source == "default":
            from tea_notebook.models.client import NO_MODEL_NOTE

            note = NO_MODEL_NOTE
        self.emit(
            "run_started",
            RunStartedEvent(
                task=self.task,
                model=self.model,
                model_display=display_name(self.model),
                model_source=self.model_source,
                note=note,
                **started,
            ),
        )

    def owns_sessions(self) -> bool:
        """A root run's environment sessions end with it (sub-runs share their root's)."""
        return self.ctx.root == self.run_id and bool(self.ws.envs.sessions())

    async def release_sessions(self) -> None:
        """Stop this run's environment sessions when it is the root of its tree."""
        if self.owns_sessions():
            await self.ws.envs.arelease(self.run_id)

    def model_defaults(self) -> dict[str, Any]:
        """Timeout, retries and server of this run's model calls where the client sets none: the
        workspace's ``model_timeout`` / ``model_retries`` / ``api_base``, then the run tree's own
        (``%%agent --api-base``)."""
        ws = self.ws
        defaults = {
            "timeout": getattr(ws, "model_timeout", None),
            "retries": getattr(ws, "model_retries", None),
            "api_base": getattr(ws, "api_base", None),
        }
        defaults.update({k: v for k, v in getattr(self.ctx, "model_options", {}).items() if v is not None})
        return defaults

    def request_event(
        self,
        client: ModelClient,
        model: str,
        *,
        messages: int,
        context: str | None,
        prompt_chars: int | None = None,
        stage: str | None = None,
    ) -> ModelRequestEvent:
        """The ``model_request`` event's data: with the call's ``timeout`` (and when it started) so a
        live view can count down while it waits, its ``retries`` and server."""
        settings = client.settings(model, self.model_defaults())
        event = ModelRequestEvent(
            model=model,
            messages=messages,
            context=context,
            timeout=settings["timeout"],
            retries=settings["retries"],
            api_base=settings["api_base"],
        )
        if prompt_chars is not None:
            event["prompt_chars"] = prompt_chars
        if stage is not None:
            event["stage"] = stage
        return event

    async def logged_call(
        self, client: ModelClient, model: str, messages: list[dict[str, Any]], stage: str, step: int
    ) -> ModelReply:
        """One model call without tools, recorded in this run (at ``step``) with tokens and cost."""
        context = self.contexts.record(messages, None, {"model": model, **client.params}, stream=stage or "call")
        request = self.request_event(client, model, messages=len(messages), stage=stage, context=context)
        self.emit("model_request", request, step)
        reply = await client.complete(model, messages, defaults=self.model_defaults())
        self.count(reply)
        self.emit(
            "model_response",
            ModelResponseEvent(
                model=model,
                content=reply.content,
                tool_calls=[],
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                cost=reply.cost,
                latency=reply.latency,
                scripted=reply.scripted,
                stage=stage,
            ),
            step,
        )
        return reply

    def count(self, reply: ModelReply) -> None:
        """Add one model reply to the run's own totals."""
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        self.cost += reply.cost

    def close(
        self,
        status: FinishedStatus,
        answer: str,
        error: str | None,
        steps: int,
        files: list[str] | None = None,
        folder: dict[str, str | None] | None = None,
    ) -> None:
        """Emit ``run_finished`` with totals that include the sub-runs (what this task cost) and what
        changed in the run folder since the last step (``folder``, when something did)."""
        nested = [r for r in self.ws.db.descendants(self.run_id) if r != self.run_id]
        prompt, completion, cost = self.ws.db.model_usage(nested)
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.cost += cost
        finished = RunFinishedEvent(
            status=status,
            answer=answer,
            error=error,
            steps=steps,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cost=self.cost,
            files=files or [],
        )
        if folder:
            finished["folder"] = folder
        self.emit("run_finished", finished)
        self.ws.db.finish_run(self.run_id, status, answer or error or "")  # redacted and clipped there


class Process(RunLog):
    """A recorded run made of named stages (``async with Process(ws, "tool_manager", task) as p``).

    ``p.step(name, args, observation)`` records one stage as a step with one action;
    ``await p.complete(messages)`` calls the model, costed in this run; leaving the block closes the
    run (``success`` unless :meth:`finish` said otherwise, ``error`` on an exception,
    ``interrupted`` when the stop signal was set).
    """

    def __init__(
        self,
        ws: "RunHost",
        agent: str,
        task: str,
        *,
        model: str | None = None,
        context: Context | None = None,
        client: ModelClient | None = None,
    ):
        resolved, source = resolve_model(model, None, ws.default_model)
        super().__init__(ws, agent, task, resolved, source, context)
        self.client = client or ModelClient()
        self.steps = 0
        self._result: tuple[FinishedStatus, str, str | None] | None = None

    async def __aenter__(self) -> "Process":
        self.start(process=True)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._result is None:
            self._result = self._ending(exc)
        status, answer, error = self._result
        self.close(status, answer, error, self.steps)

    def _ending(self, exc: BaseException | None) -> tuple[FinishedStatus, str, str | None]:
        """How the run ends when :meth:`finish` did not say: by the exception that left the block."""
        if exc is None:
            return "success", "", None
        if isinstance(exc, (RunInterrupted, asyncio.CancelledError)):
            return "interrupted", "", stop_reason()
        self.emit("error", ErrorEvent(kind=type(exc).__name__, message=str(exc)))
        return "error", "", f"{type(exc).__name__}: {exc}"

    def finish(self, status: FinishedStatus, answer: str = "", error: str | None = None) -> None:
        """Set how the run ends (it is recorded when the ``async with`` block exits)."""
        self._result = (status, answer, error)

    def check_stop(self) -> None:
        """Raise :class:`RunInterrupted` when the run's stop signal is set."""
        if self.ctx.cancel.is_set():
            raise RunInterrupted("the run was stopped")

    def step(
        self, name: str, args: dict[str, Any] | None, observation: str, *, thinking: str = "", ok: bool = True
    ) -> int:
        """Record one stage as a step whose single action is ``name(args) -> observation``."""
        shown = observation if ok else f"Error: {observation}"
        return self.record([(name, args, shown)], thinking=thinking)

    def record(
        self,
        actions: list[tuple[str, dict[str, Any] | None, str]],
        *,
        thinking: str = "",
        evaluation: str = "",
        memory: str = "",
        next_goal: str = "",
    ) -> int:
        """Record one step made of several ``(name, args, observation)`` actions (a research round:
        its searches, the pages read, the evidence); an observation starting "Error" shows as failed."""
        self.steps += 1
        data = StepEvent(
            thinking=thinking,
            evaluation=evaluation,
            memory=memory,
            next_goal=next_goal,
            results=[[n, json.dumps(redact(a or {}), ensure_ascii=False), obs] for n, a, obs in actions],
        )
        self.emit("step", data, self.steps)
        return self.steps

    async def complete(self, messages: list[dict[str, Any]], stage: str = "") -> ModelReply:
        """One model call of this run (no tools), recorded with tokens and cost."""
        self.check_stop()
        reply = await self.logged_call(self.client, self.model, messages, stage, self.steps + 1)
        self.check_stop()
        return reply
