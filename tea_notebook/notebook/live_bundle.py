"""The live view as a display bundle: the trajectory MIME payload (marked ``"live": true``) that the
JupyterLab extension renders and updates in place, with the live HTML and a text line as fallbacks.

The payload has the shape of :func:`tea_notebook.runtime.render.payload`, built from what the live
view has seen so far; the bundle's metadata names the kernel running the run, so that the
extension's Stop button interrupts exactly that kernel (a background run names none: interrupting
the kernel would hit other cells, not the run).

**Updates send what changed.** While the run goes, an update (:meth:`LiveView.next_bundle`) carries
a *partial* payload (``"partial": true``): each run's header (status, tokens, cost; task and model
only in whole payloads), the steps that events touched since the update before (whole steps, with
their current values: applying one twice, or on a stale state, does no harm), the stages, threads
and messages that are new or changed, and the sub-runs that changed (whole when new), each with
its ``"index"`` among its parent's children. The metadata numbers the updates: ``seq`` (this one) and ``base`` (the
one it applies to; absent in a whole payload). A renderer that holds update ``base`` merges the
partial payload into it (steps by number, stages by index, threads by id, messages by seq); one
that holds another (it missed an update) merges it all the same and says that some of the run may
be missing until a whole payload comes. The first update that carries the trajectory is whole, and
so is the last one when the view ends without being replaced. The HTML of a partial update is
short: the header and the latest steps. The timings per step (``latency``) go in the metadata as
ever, shaped like the payload they come with.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tea_notebook.models.client import display_name, tokens_estimated
from tea_notebook.runtime.render import (
    CONVERSATION_TOOLS,
    MIME_TYPE,
    field_text,
    message_items,
    stage_payload,
    step_payload,
    step_times,
    steps_label,
    thread_items,
)

if TYPE_CHECKING:
    from tea_notebook.notebook.live import LiveView

#: steps the short HTML of a partial update shows whole (the latest ones; the few before in a line each)
HTML_TAIL = 1
#: the parts of a partial payload that are the run's content (what changed), not its headers
CONTENT_KEYS = ("steps", "stages", "threads", "messages")


def live_payload(view: "LiveView") -> dict[str, Any] | None:
    """The whole payload of the run tree so far (None before the first run has started)."""
    with view._lock:
        return _whole(view)[0] if view.root in view.runs else None


def _whole(view: "LiveView", remember: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """The whole payload and its latency tree (lock held); ``remember``: it goes out as an update."""
    out = _run_payload(view, view.root, remember)
    _steps, tokens, cost = view.totals()
    out["prompt_tokens"], out["completion_tokens"], out["cost"] = tokens, 0, cost
    out["live"] = out["status"] == "running"
    return out, _latency(view, view.root)


def _header(view: "LiveView", run_id: str, whole: bool) -> dict[str, Any]:
    run = view.runs[run_id]
    out: dict[str, Any] = {"version": 1, "agent": run.agent}
    if whole:  # the task may be long: it does not change, so partial payloads leave it out
        out.update(task=field_text(run.task), model=display_name(run.model))
    out.update(
        status=run.status,
        answer="",
        tokens_estimated=tokens_estimated(run.model),
        prompt_tokens=run.tokens,
        completion_tokens=0,
        cost=run.cost,
        note=run.note,
    )
    if run.stop_reason:  # why an interrupted run stopped ("interrupted: the kernel restarted")
        out["stop_reason"] = run.stop_reason
    sent = view._sent.get(run_id)
    if run.divergence is not None and (whole or sent is None or sent.get("divergence") != run.divergence):
        out["divergence"] = run.divergence  # a fork's departure: sent whole, and again only when it changes
        if sent is not None and not whole:
            sent["divergence"] = run.divergence
    return out


def _step(step: Any, running: dict[str, float]) -> dict[str, Any]:
    """A step of the payload; an action still running carries ``running_for`` (seconds so far: the
    extension counts on from there, so a tick need not send the step again)."""
    out = step_payload(step)
    if running:
        for action, shown in zip(step.actions, out["actions"]):
            if action.get("id") in running:
                shown["running_for"] = round(running[action["id"]], 1)
    return out


def _run_payload(view: "LiveView", run_id: str, remember: bool = False) -> dict[str, Any]:
    run = view.runs[run_id]
    steps = [run.steps[k] for k in sorted(run.steps)]
    children = [c for c in run.children if c in view.runs]
    threads = thread_items(run.threads.values())
    messages = _messages(view, run, children)
    if remember:
        _remember(view, run_id, run, threads, messages)
    running = view.running_calls()
    return {
        **_header(view, run_id, whole=True),
        "steps": [_step(s, running) for s in steps],
        "stages": [stage_payload(st) for st in run.stages],
        "threads": threads,
        "messages": messages,
        "children": [_run_payload(view, c, remember) for c in children],
    }


def _remember(view: "LiveView", run_id: str, run: Any, threads: list[dict], messages: list[dict]) -> None:
    """Note what a whole payload sent of a run, so that the partial ones after it send only changes."""
    view._sent[run_id] = {
        "stages": len(run.stages),
        "threads": {t["id"]: json.dumps(t, sort_keys=True, default=str) for t in threads},
        "messages": {m["seq"]: json.dumps(m, sort_keys=True, default=str) for m in messages},
        "divergence": run.divergence,
    }


def _changed(sent: dict[Any, str], items: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The items new or different since last sent (and note them as sent)."""
    out = []
    for item in items:
        text = json.dumps(item, sort_keys=True, default=str)
        if sent.get(item[key]) != text:
            sent[item[key]] = text
            out.append(item)
    return out


def _run_delta(
    view: "LiveView", run_id: str, runs: set[str], steps: dict[str, set[int]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The partial payload of a run (lock held) and its latency tree, shaped alike."""
    run = view.runs[run_id]
    sent = view._sent.setdefault(run_id, {"stages": 0, "threads": {}, "messages": {}})
    numbers = sorted(n for n in steps.get(run_id, ()) if n in run.steps)
    shown = [run.steps[n] for n in numbers]
    children = [c for c in run.children if c in view.runs]
    running = view.running_calls()
    out = {**_header(view, run_id, whole=False), "partial": True, "steps": [_step(s, running) for s in shown]}
    if len(run.stages) > sent["stages"]:
        out["stages"] = [stage_payload(st) for st in run.stages[sent["stages"] :]]
        sent["stages"] = len(run.stages)
    if run.threads:
        changed = _changed(sent["threads"], thread_items(run.threads.values()), "id")
        if changed:
            out["threads"] = changed
    if run.messages:
        changed = _changed(sent["messages"], _messages(view, run, children), "seq")
        if changed:
            out["messages"] = changed
    kids, kid_times = [], []
    for i, child in enumerate(children):
        if child not in view._sent:  # a sub-run new since the last update: whole
            kids.append({**_run_payload(view, child, remember=True), "index": i})
            kid_times.append(_latency(view, child))
        elif child in runs:
            payload, times = _run_delta(view, child, runs, steps)
            kids.append({**payload, "index": i})
            kid_times.append(times)
    out["children"] = kids
    return out, step_times(shown, kid_times)


def _messages(view: "LiveView", run: Any, children: list[str]) -> list[dict[str, Any]]:
    """A CORAL run's messages so far, each with the tool calls its sender made before it (as
    ``[child index, step number, action index]``, like the final payload's ``work``)."""
    if not run.messages:
        return []
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
    """What the live view displays: payload + HTML + text (``.data`` is the HTML, as for ``HTML``).

    ``LiveBundle(view)`` is the whole view now; ``update=True`` makes the view's next update (what
    changed since the last one, numbered; ``whole=True`` all of it), as :meth:`LiveView.next_bundle`
    does."""

    def __init__(self, view: "LiveView", update: bool = False, whole: bool = True):
        self.view = view
        self.payload: dict[str, Any] | None = None
        self.latency: dict[str, Any] | None = None
        self.seq: int | None = None
        self.base: int | None = None
        with view._lock:
            started = view.root in view.runs
            if update and started:
                whole = whole or view._seq is None  # nothing sent yet: a renderer has nothing to merge into
                runs, steps = view.take_changes()
                if whole:
                    self.payload, self.latency = _whole(view, remember=True)
                else:
                    self.payload, self.latency = _run_delta(view, view.root, runs | {view.root}, steps)
                    self.payload["live"] = self.payload["status"] == "running"
                    self.base = view._seq
                _own, tokens, cost = view.totals()
                self.payload["prompt_tokens"], self.payload["cost"] = tokens, cost
                self.seq = (view._seq or 0) + 1
                view._seq = self.seq
            elif started:
                self.payload, self.latency = _whole(view)
            self.steps = (len(view.runs[view.root].steps), view.tree_steps()) if started else (0, 0)
        self.data = view.html(tail=HTML_TAIL if self.base is not None else None)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict, dict]:
        data: dict[str, Any] = {"text/html": self.data, "text/plain": self._text()}
        metadata: dict[str, Any] = {}
        if self.payload is not None:
            data[MIME_TYPE] = self.payload
            meta = {"run_id": self.view.root, "kernel": self.view.kernel, "live": True, "latency": self.latency}
            if self.seq is not None:
                meta["seq"] = self.seq
            if self.base is not None:
                meta["base"] = self.base
            if self.view.cell:  # the cell it belongs to: a page reloaded mid-run puts the view back in it
                meta["cell"] = self.view.cell
            metadata[MIME_TYPE] = meta
        return data, metadata

    def size(self) -> int:
        """Bytes of the bundle as JSON (data and metadata), as it goes to the front end."""
        data, metadata = self._repr_mimebundle_()
        return len(json.dumps({"data": data, "metadata": metadata}, default=str).encode())

    def overhead(self) -> int:
        """Bytes of the bundle beyond the run's content it carries (the steps, stages, threads and
        messages of each run in it): the HTML fallback, the headers and the metadata."""

        def content(run: dict[str, Any]) -> int:
            own = sum(len(json.dumps(run[k], default=str).encode()) for k in CONTENT_KEYS if run.get(k))
            return own + sum(content(child) for child in run.get("children") or ())

        return self.size() - (content(self.payload) if self.payload is not None else 0)

    def _text(self) -> str:
        if self.payload is None:
            return "starting…"
        p = self.payload
        return f"{p['agent']} · {p['status']} · {steps_label(*self.steps)}"
