"""One task, one run: the agent runs on the question (attachments passed as files) under the task's
limits — a timeout, a step limit and a token budget — and what happened comes back as an
:class:`Attempt`. The same code runs in the driver's process and inside a Ray worker.

Limits stop the run cooperatively (the run's stop signal, as the Stop button does), so the run ends
``interrupted`` with its trajectory kept; the attempt is then an error saying which limit it hit.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tea_notebook.protocol.context import Context

if TYPE_CHECKING:
    from tea_notebook.eval.tasks import Task
    from tea_notebook.runtime.events import Event
    from tea_notebook.runtime.host import RunHost

GRACE = 5.0  # seconds a stopped run gets to end by itself before its task is cancelled


@dataclass
class Limits:
    """Per-task limits: wall-clock ``timeout`` (s), ``max_steps`` of the agent loop, ``max_tokens``
    of the whole run tree (prompt + completion)."""

    timeout: float | None = None
    max_steps: int | None = None
    max_tokens: int | None = None


@dataclass
class Attempt:
    """What one run of one task produced, before scoring. ``error`` is set when there is no answer
    to score (the run failed, was stopped by a limit, or raised)."""

    task_id: str
    run_id: str | None = None
    run_status: str = ""
    answer: str = ""
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0
    error: str | None = None
    model: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (what a Ray worker sends back)."""
        return asdict(self)


class _Slot:
    """Usage of one task's run tree so far, as its events arrive."""

    def __init__(self, ctx: Any, max_tokens: int | None):
        self.ctx, self.max_tokens = ctx, max_tokens
        self.run_id: str | None = None
        self.tokens = 0
        self.cost = 0.0
        self.over: str | None = None


_slot: contextvars.ContextVar[_Slot | None] = contextvars.ContextVar("tea_eval_slot", default=None)


class UsageWatcher:
    """One event subscriber per evaluation: counts each task's tokens and cost as its model calls
    happen (events emitted inside the task carry its slot in a context variable; later ones are
    matched by their root run) and stops a run that goes over its token budget."""

    def __init__(self, ws: "RunHost"):
        self._roots: dict[str, _Slot] = {}
        self._unsubscribe = ws.events.subscribe(self)

    def __call__(self, event: "Event") -> None:
        slot = _slot.get() or self._roots.get(event.data.get("root_run", ""))
        if slot is None:
            return
        if event.type == "run_started" and slot.run_id is None and event.parent_id is None:
            slot.run_id = event.run_id
            self._roots[event.run_id] = slot
        elif event.type == "model_response":
            slot.tokens += int(event.data.get("prompt_tokens") or 0) + int(event.data.get("completion_tokens") or 0)
            slot.cost += float(event.data.get("cost") or 0.0)
            if slot.max_tokens is not None and slot.tokens > slot.max_tokens and slot.over is None:
                slot.over = f"token budget exceeded ({slot.tokens} > {slot.max_tokens} tokens)"
                slot.ctx.cancel.set()

    def forget(self, slot: _Slot) -> None:
        """Drop a finished task's slot."""
        if slot.run_id:
            self._roots.pop(slot.run_id, None)

    def close(self) -> None:
        """Stop following events."""
        self._unsubscribe()


def _accepts(fn: Any, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


async def run_task(
    ws: "RunHost",
    agent: Any,
    task: "Task",
    *,
    watcher: UsageWatcher,
    limits: Limits,
    model: str | None = None,
    prompt: str = "{question}",
    live: dict[str, _Slot] | None = None,
) -> Attempt:
    """Run ``agent`` on ``task`` within ``limits``; never raises for the task's own failures (a
    cancellation of the caller still propagates, after stopping the run)."""
    ctx = Context()
    slot = _Slot(ctx, limits.max_tokens)
    if live is not None:
        live[task.id] = slot
    kwargs: dict[str, Any] = {"context": ctx}
    if model is not None:
        kwargs["model"] = model
    if limits.max_steps is not None and _accepts(agent.run, "max_steps"):
        kwargs["max_steps"] = limits.max_steps
    if _accepts(agent.run, "raise_on_error"):
        kwargs["raise_on_error"] = False  # a run that ended in error is an attempt to score and store
    question = prompt.format(question=task.question, level=task.level or "", task_id=task.id)
    started = time.perf_counter()
    token = _slot.set(slot)
    try:
        inner = asyncio.ensure_future(agent.run(question, list(task.files) or None, **kwargs))
    finally:
        _slot.reset(token)
    reason: str | None = None
    try:
        done, _ = await asyncio.wait({inner}, timeout=limits.timeout)
        if not done:
            reason = f"timed out after {limits.timeout:g}s"
            ctx.cancel.set()
            done, _ = await asyncio.wait({inner}, timeout=GRACE)
            if not done:
                inner.cancel()
                await asyncio.gather(inner, return_exceptions=True)
                reason += f" (the run did not stop within {GRACE:g}s and was cancelled)"
    except asyncio.CancelledError:
        ctx.cancel.set()
        inner.cancel()
        await asyncio.gather(inner, return_exceptions=True)
        raise
    finally:
        watcher.forget(slot)
        if live is not None:
            live.pop(task.id, None)
    seconds = time.perf_counter() - started
    attempt = Attempt(task.id, run_id=slot.run_id, seconds=seconds, cost=slot.cost)
    attempt.prompt_tokens = slot.tokens  # refined below from the run's own totals when there is one
    if inner.cancelled():
        attempt.error = reason or "cancelled"
        attempt.run_status = "interrupted"
        return attempt
    exc = inner.exception()
    if exc is not None:
        attempt.error = reason or f"the agent raised {type(exc).__name__}: {exc}"
        attempt.run_status = "error"
        return attempt
    result = inner.result()
    attempt.run_id = getattr(result, "run_id", None) or slot.run_id
    attempt.run_status = str(getattr(result, "status", ""))
    attempt.answer = str(getattr(result, "answer", "") or "")
    attempt.steps = int(getattr(result, "steps", 0) or 0)
    attempt.prompt_tokens = int(getattr(result, "prompt_tokens", 0) or 0)
    attempt.completion_tokens = int(getattr(result, "completion_tokens", 0) or 0)
    attempt.cost = float(getattr(result, "cost", 0.0) or 0.0)
    attempt.model = str(getattr(result, "model", "") or "")
    if reason is None:
        reason = slot.over
    if reason is not None:
        attempt.error = reason
    elif attempt.run_status in ("error", "interrupted"):
        attempt.error = f"the run ended {attempt.run_status}: {getattr(result, 'error', None) or attempt.answer}"
    return attempt


__all__ = ["Attempt", "Limits", "UsageWatcher", "run_task"]
