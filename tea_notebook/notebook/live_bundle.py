"""The live view as a display bundle: the trajectory MIME payload (marked ``"live": true``) that the
JupyterLab extension renders and updates in place, with the live HTML and a text line as fallbacks.

The payload has the shape of :func:`tea_notebook.runtime.render.payload`, built from what the live
view has seen so far; the bundle's metadata names the kernel running the run, so that the
extension's Stop button interrupts exactly that kernel (a background run names none: interrupting
the kernel would hit other cells, not the run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tea_notebook.models.client import display_name, tokens_estimated
from tea_notebook.runtime.render import (
    CONVERSATION_TOOLS,
    MIME_TYPE,
    _field,
    _stage_payload,
    _step_payload,
    message_items,
    step_times,
    steps_label,
    thread_items,
)

if TYPE_CHECKING:
    from tea_notebook.notebook.live import LiveView


def live_payload(view: "LiveView") -> dict[str, Any] | None:
    """The payload of the run tree so far (None before the first run has started)."""
    with view._lock:
        if view.root is None or view.root not in view.runs:
            return None
        out = _run_payload(view, view.root)
        _steps, tokens, cost = view.totals()
    out["prompt_tokens"], out["completion_tokens"], out["cost"] = tokens, 0, cost
    out["live"] = out["status"] == "running"
    return out


def _run_payload(view: "LiveView", run_id: str) -> dict[str, Any]:
    run = view.runs[run_id]
    steps = [run.steps[k] for k in sorted(run.steps)]
    children = [c for c in run.children if c in view.runs]
    return {
        "version": 1,
        "agent": run.agent,
        "task": _field(run.task),
        "model": display_name(run.model),
        "status": run.status,
        "answer": "",
        "tokens_estimated": tokens_estimated(run.model),
        "prompt_tokens": run.tokens,
        "completion_tokens": 0,
        "cost": run.cost,
        "steps": [_step_payload(s) for s in steps],
        "stages": [_stage_payload(st) for st in run.stages],
        "threads": thread_items(run.threads.values()),
        "messages": _messages(view, run, children),
        "children": [_run_payload(view, c) for c in children],
    }


def _messages(view: "LiveView", run: Any, children: list[str]) -> list[dict[str, Any]]:
    """A CORAL run's messages so far, each with the tool calls its sender made before it (as
    ``[child index, step number, action index]``, like the final payload's ``work``)."""
    ordered = sorted(run.messages, key=lambda m: m.get("seq", 0))
    work: dict[Any, list[list[int]]] = {}
    for i, child_id in enumerate(children):
        child = view.runs[child_id]
        mine = [m for m in ordered if m.get("sender") == child.agent]
        where = {id(a): (number, k) for number, st in child.steps.items() for k, a in enumerate(st.actions)}
        for when, action in child.timed_actions:
            if action.get("name") in CONVERSATION_TOOLS or id(action) not in where:
                continue
            target = next((m for m in mine if m.get("time", 0) >= when), None)
            if target is not None:
                work.setdefault(target.get("seq"), []).append([i, *where[id(action)]])
    return message_items(run.messages, work)


def _latency(view: "LiveView", run_id: str | None) -> dict[str, Any]:
    """Seconds per step so far (model, tools), nested like the run tree (as the final bundle's metadata has it)."""
    run = view.runs.get(run_id) if run_id else None
    if run is None:
        return step_times([], [])
    steps = [run.steps[k] for k in sorted(run.steps)]
    return step_times(steps, [_latency(view, c) for c in run.children if c in view.runs])


class LiveBundle:
    """What the live view displays: payload + HTML + text (``.data`` is the HTML, as for ``HTML``)."""

    def __init__(self, view: "LiveView"):
        self.view = view
        self.data = view.html()
        self.payload = live_payload(view)
        self.latency = _latency(view, view.root) if self.payload is not None else None

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict, dict]:
        data: dict[str, Any] = {"text/html": self.data, "text/plain": self._text()}
        metadata: dict[str, Any] = {}
        if self.payload is not None:
            data[MIME_TYPE] = self.payload
            metadata[MIME_TYPE] = {
                "run_id": self.view.root,
                "kernel": self.view.kernel,
                "live": True,
                "latency": self.latency,
            }
        return data, metadata

    def _text(self) -> str:
        if self.payload is None:
            return "starting…"
        p = self.payload
        return f"{p['agent']} · {p['status']} · {steps_label(len(p['steps']), self.view.tree_steps())}"
