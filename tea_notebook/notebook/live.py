"""The live trajectory view: one display, updated in place from the event stream while a run goes.

Updates are throttled (at most every ``interval`` seconds, plus a final one), so a fast agent is
not slowed by rendering. Each update sends only what changed since the one before (see
:mod:`tea_notebook.notebook.live_bundle`): the steps that events touched, the run headers, and a
short HTML fallback (the header and the latest steps); the first update that carries the
trajectory, and :meth:`LiveView.close` without a replacement, send the whole of it (payload and the
same HTML the final output uses). So the bytes sent grow with the run, not with the run times the
number of updates.

While the run goes the header has a Stop button. ``%%agent`` keeps the cell (and so the kernel)
busy, so the button cannot talk to the kernel through widget messages: it asks the Jupyter server
to interrupt the kernel (``POST {baseUrl}api/kernels/{id}/interrupt``), which is exactly what the
toolbar's ■ does; the magic turns that interrupt into a cooperative stop (status ``interrupted``).
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
import threading
import time
from typing import Any

from tea_notebook.models.client import display_name
from tea_notebook.runtime.cell_output import as_message_of, display_parent
from tea_notebook.runtime.event_types import EventType, RunStatus
from tea_notebook.runtime.events import Event
from tea_notebook.runtime.refusals import refusal_line
from tea_notebook.runtime.render import (
    CSS,
    compared_fork,
    divergence_item,
    esc_str,
    field_text,
    header_html,
    stage_summary_html,
    staged_steps_html,
    step_html,
    threads_html,
)
from tea_notebook.runtime.trajectory import StepView

_KERNEL_FILE = re.compile(r"^kernel-([0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12})\.json$")

# The Stop button's click handler. It runs in the page (JupyterLab / Notebook 7 render trusted output
# as is), so it needs nothing from the kernel: the server's base URL comes from the page's
# #jupyter-config-data, the XSRF token from the _xsrf cookie, as JupyterLab's own requests do.
_STOP_JS = (
    "(function(b){"
    "if(b.disabled){return;}"
    "b.disabled=true;b.textContent='stopping\u2026';"
    "var base='/';"
    "try{var c=document.getElementById('jupyter-config-data');"
    "if(c){base=JSON.parse(c.textContent).baseUrl||'/';}}catch(e){}"
    "if(base.charAt(base.length-1)!=='/'){base+='/';}"
    "var m=document.cookie.match(/(?:^|;\\s*)_xsrf=([^;]*)/);"
    "var h={};if(m){h['X-XSRFToken']=m[1];}"
    "fetch(base+'api/kernels/'+b.dataset.kernel+'/interrupt',{method:'POST',headers:h,credentials:'same-origin'})"
    ".then(function(r){if(!r.ok){throw new Error('HTTP '+r.status);}})"
    ".catch(function(e){b.disabled=false;b.textContent='Stop failed';b.title='could not interrupt: '+e.message+"
    "' (use the kernel interrupt button)';});"
    "})(this)"
)

_STOP_ATTR = html.escape(_STOP_JS, quote=False).replace('"', "&quot;")


def kernel_id() -> str | None:
    """The id of the Jupyter kernel this code runs in, from its connection file name
    (``kernel-<id>.json``); None outside a kernel or when the name carries no server kernel id."""
    if "ipykernel" not in sys.modules:  # plain IPython, scripts, tests: never import ipykernel for this
        return None
    try:
        from ipykernel.connect import get_connection_file

        path = get_connection_file()
    except Exception:  # noqa: BLE001 - not in a running kernel app
        return None
    found = _KERNEL_FILE.match(os.path.basename(path or ""))
    return found.group(1) if found else None


def cell_id() -> str | None:
    """The id of the notebook cell being run (JupyterLab and Notebook 7 send it with the execute
    request as ``metadata.cellId``); None outside a kernel or when the front end sent none. A page
    reloaded mid-run finds the cell a live view belongs to by it."""
    if "ipykernel" not in sys.modules:
        return None
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        parent = kernel.get_parent() if kernel is not None else None
    except Exception:  # noqa: BLE001 - not in a kernel that keeps its request
        return None
    found = ((parent or {}).get("metadata") or {}).get("cellId")
    return found if isinstance(found, str) and re.fullmatch(r"[0-9A-Za-z_-]{1,64}", found) else None


def stop_button_html(kernel: str) -> str:
    """The Stop button for the kernel ``kernel`` (an id as the server names it)."""
    if not re.fullmatch(r"[0-9A-Za-z-]+", kernel):
        raise ValueError(f"not a kernel id: {kernel!r}")
    return (
        f"<button class='tea-stop' data-kernel='{kernel}' title='stop the run (interrupts the kernel)' "
        "style='margin-left:auto;padding:0 10px;border:1px solid #cf222e;border-radius:4px;background:#fff;"
        f'color:#cf222e;cursor:pointer;font:inherit\' onclick="{_STOP_ATTR}">Stop</button>'
    )


class _RunState:
    def __init__(self, agent: str, task: str, model: str, parent: str | None = None):
        self.agent, self.task, self.model = agent, task, model
        self.parent = parent
        self.status: RunStatus = "running"
        self.steps: dict[int, StepView] = {}
        self.children: list[str] = []
        self.tokens = 0
        self.cost = 0.0
        self.note = ""
        self.staged = False
        self.stages: list[dict[str, Any]] = []  # ToolSelf
        self.threads: dict[str, dict[str, Any]] = {}  # CORAL
        self.messages: list[dict[str, Any]] = []
        self.timed_actions: list[tuple[float, dict[str, Any]]] = []
        #: why it stopped, when interrupted ("stopped by the user", "interrupted: the kernel restarted")
        self.stop_reason = ""
        #: a fork's departure from its original so far (the payload's ``divergence``), None: no compared fork
        self.divergence: dict[str, Any] | None = None


#: the events that end a wait for a model's reply (the countdown stops)
_ANSWERED: frozenset[EventType] = frozenset({"model_response", "run_finished", "error"})

#: in the short live HTML: one line for each of this many steps before the last ones shown whole,
#: the last messages of a conversation and the last sub-agents (keeps an update small on a long run)
LIVE_LINES = 4
LIVE_MESSAGES = 3
LIVE_CHILDREN = 5
#: what the partial updates of a view may spend on more than their content (the HTML fallback, the
#: headers, the metadata), in bytes: this much at first, and this much more per step the run tree has
#: made. An update over it is held (coalesced with what follows) until steps have made room, so the
#: bytes sent follow the run's steps, not its duration (a slow model, a long tool's ticks).
LIVE_BASE_BYTES = 30_000
LIVE_STEP_BYTES = 400


def tick_interval(running_for: float) -> float:
    """Seconds until the next tick of a view whose longest call has run ``running_for`` seconds: every
    second for 10 s, then every 5 s (its seconds show in the HTML; the extension counts them itself)."""
    return 1.0 if running_for < 10 else 5.0


def running_text(name: str, seconds: float) -> str:
    """How a tool call still running is shown: "very_slow running 3 s…"."""
    return f"{name} running {seconds:.0f} s…"


def _step_line(step: StepView) -> str:
    """One step in a line: its actions with short arguments and the start of each observation."""

    def short(value: Any, limit: int) -> str:
        text = " ".join(str(value).split())
        return esc_str(text if len(text) <= limit else text[: limit - 1] + "…")

    acts = []
    for a in step.actions:
        mark = "" if a.get("ok", True) else " class='err'"
        args = a.get("arguments", "")
        shown = json.dumps(args, ensure_ascii=False, default=str) if isinstance(args, (dict, list)) else args
        acts.append(
            f"<code{mark}>{esc_str(a.get('name'))}({short(shown, 40)})</code> → {short(a.get('observation', ''), 60)}"
        )
    return f"<div class='muted'>step {step.number}: {'; '.join(acts) or '(no action)'}</div>"


class LiveView:
    """Follows one run tree's events and keeps an IPython display up to date."""

    def __init__(
        self, interval: float = 0.25, display: bool = True, kernel: str | None = None, background: bool = False
    ):
        """``kernel``: the id of the kernel the Stop button interrupts; by default the one this code
        runs in (see :func:`kernel_id`). Without one the header shows only the ■ hint.
        ``background``: the run goes on while the kernel runs other cells, so interrupting the kernel
        would hit them, not the run: the header has no kernel Stop (see :func:`stop_widget`)."""
        self.interval = interval
        self.background = background
        self.kernel = None if background else kernel if kernel is not None else kernel_id()
        self._parent = display_parent()
        self.cell = cell_id()
        self.stopping = False
        self.runs: dict[str, _RunState] = {}
        self.root: str | None = None
        self.started = time.monotonic()
        self._dirty = False
        self._last = 0.0
        self._lock = threading.Lock()
        self._sending = threading.Lock()  # one update made and sent at a time (the countdown ticks too)
        self._handle = None
        self.updates = 0
        #: model calls being waited for, by run: (monotonic deadline of the attempt, timeout, retries)
        self.waiting: dict[str, tuple[float, float, int]] = {}
        self._ticking = False
        self._closed = False
        #: tool calls that have not returned, by call id: (run, step, tool name, wall-clock start)
        self.running: dict[str, tuple[str, int, str, float]] = {}
        self._flush: threading.Timer | None = None  # the update that sends events the throttle held back
        #: what changed since the last update: runs (with their ancestors) and steps, by run
        self._changed_runs: set[str] = set()
        self._changed_steps: dict[str, set[int]] = {}
        #: what the last updates sent of each run: stages (a count), threads and messages (their JSON)
        self._sent: dict[str, dict[str, Any]] = {}
        #: the number of the last update that carried the trajectory (None: none yet, the next is whole)
        self._seq: int | None = None
        #: bytes the partial updates spent beyond their content so far, and the last one's (see LIVE_STEP_BYTES)
        self.overhead = 0
        self._last_overhead = 0
        #: ``(base, per step)`` bytes the partial updates may spend beyond their content; None: no limit
        self.budget: tuple[int, int] | None = (LIVE_BASE_BYTES, LIVE_STEP_BYTES)
        if display:
            from IPython.display import display as show

            self._handle = show(self.bundle(), display_id=True)

    # -- events -------------------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        with self._lock:
            self._apply(event)
            self._dirty = True
        if event.type == "run_finished":  # a run's end is shown at once, whatever the budget
            self.refresh(force=True)
        elif time.monotonic() - self._last >= self.interval:
            self.refresh()
        else:
            self._flush_later()

    def _flush_later(self) -> None:
        """Send what the throttle held back once the interval has passed, even if no event follows (a
        step whose tool runs for minutes shows at once, not when the tool returns)."""
        if self._flush is not None or self._handle is None or self._closed:
            return
        wait = max(0.0, self.interval - (time.monotonic() - self._last))

        def flush() -> None:
            self._flush = None
            if not self._closed:
                self.refresh()

        self._flush = threading.Timer(wait, flush)
        self._flush.daemon = True
        self._flush.start()

    def _apply(self, e: Event) -> None:
        d = e.data
        if e.type == "run_started":
            parent = e.parent_id if e.parent_id and e.parent_id in self.runs else None
            self.runs[e.run_id] = _RunState(d.get("agent", ""), d.get("task", ""), d.get("model", ""), parent)
            self.runs[e.run_id].note = d.get("note") or ""
            self.runs[e.run_id].staged = bool(d.get("process"))
            source = compared_fork(d)
            if source is not None:
                unit = "message" if d.get("fork_unit") == "messages" else "step"
                self.runs[e.run_id].divergence = divergence_item(source, unit)
            if parent:
                self.runs[parent].children.append(e.run_id)
            elif self.root is None:
                self.root = e.run_id
            self._touch(e.run_id)
            return
        run = self.runs.get(e.run_id)
        if run is None:
            return
        if e.type == "notice":  # said in the header while it matters (litellm's first import)
            run.note = str(d.get("message") or "")
            self._touch(e.run_id)
            return
        if e.type == "diverged":  # said in the header at once, where the fork first departed
            unit = run.divergence["unit"] if run.divergence else "step"
            run.divergence = divergence_item(str(d.get("source", "")), unit, {"step": e.step, **d})
            self._touch(e.run_id)
            return
        self._touch(e.run_id, e.step)
        if e.type == "model_request" and d.get("timeout"):
            timeout = float(d["timeout"])
            self.waiting[e.run_id] = (time.monotonic() + timeout, timeout, int(d.get("retries") or 0))
            self._tick()
        elif e.type in _ANSWERED:
            self.waiting.pop(e.run_id, None)
        if e.type == "stage":
            run.stages.append(dict(d))
        elif e.type == "thread":
            run.threads.setdefault(d["id"], {}).update(d)
        elif e.type == "message":
            run.messages.append({**d, "time": e.time})
        step = run.steps.setdefault(e.step, StepView(e.step)) if e.step is not None else None
        if e.type == "model_response":
            run.tokens += d.get("prompt_tokens", 0) + d.get("completion_tokens", 0)
            run.cost += d.get("cost", 0.0)
            if step is not None:  # per step too: the extension charts tokens, cost and latency live
                step.prompt_tokens += d.get("prompt_tokens", 0)
                step.completion_tokens += d.get("completion_tokens", 0)
                step.cost += d.get("cost", 0.0)
                step.latency += d.get("latency", 0.0)
        elif e.type == "tool_call" and step is not None:
            action = {"id": d["id"], "name": d["name"], "arguments": d["arguments"], "observation": "…"}
            step.actions.append(action)
            run.timed_actions.append((e.time, action))
            if not d.get("replayed"):  # a replayed call returns at once, with its stored result
                self.running[d["id"]] = (e.run_id, step.number, str(d["name"]), e.time)
                self._tick()
        elif e.type == "tool_result" and step is not None:
            self.running.pop(d["id"], None)
            step.add_tool_result(e.time, d.get("latency"))
            for a in step.actions:
                if a.get("id") == d["id"]:
                    a.update(ok=d["ok"], observation=d["observation"])
        elif e.type == "step" and step is not None:
            if run.staged:  # a staged run (tool manager, judge …) records its one action in the step itself
                step.actions = [
                    {
                        "id": f"{e.id}:{i}",
                        "name": name,
                        "arguments": args,
                        "observation": shown,
                        "ok": not str(shown).startswith("Error"),
                    }
                    for i, (name, args, shown) in enumerate(d.get("results") or [])
                ]
            step.read_event(d)
            step.replayed = bool(d.get("replayed"))
        elif e.type == "error" and step is not None:
            step.errors.append(d.get("message", ""))
        elif e.type == "egress_refused" and step is not None:  # a step's counted refusals are one line
            step.errors.append(refusal_line(d))
        elif e.type == "run_finished":
            run.status = d.get("status", "error")
            if run.status == "interrupted":
                run.stop_reason = str(d.get("error") or "")
            for call, (owner, *_rest) in list(self.running.items()):
                if owner == e.run_id:  # it ended: whatever it still runs is no longer its live step
                    del self.running[call]

    def _touch(self, run_id: str, step: int | None = None) -> None:
        """Mark a run (and the runs above it: the update nests) and one of its steps as changed."""
        if step is not None:
            self._changed_steps.setdefault(run_id, set()).add(step)
        seen = 0
        while run_id is not None and run_id not in self._changed_runs and seen < 1000:
            self._changed_runs.add(run_id)
            run = self.runs.get(run_id)
            run_id = run.parent if run is not None else None
            seen += 1

    def take_changes(self) -> tuple[set[str], dict[str, set[int]]]:
        """The runs and steps changed since the last call (lock held): the next update sends them."""
        runs, steps = self._changed_runs, self._changed_steps
        self._changed_runs, self._changed_steps = set(), {}
        return runs, steps

    # -- rendering ----------------------------------------------------------------------
    def _tail_html(self, run_id: str, tail: int, depth: int = 0) -> str:
        """The short live HTML of a run, for viewers without the extension: the stage it is in, one
        line per recent step, its last ``tail`` steps whole, its last messages and its sub-agents
        (the same, shorter); the whole run shows when it ends (the extension shows all of it live)."""
        run = self.runs[run_id]
        numbers = sorted(run.steps)
        task = esc_str(field_text(run.task)[:300])
        out = [f"<div><span class='muted'>task:</span> {task}</div>"] if not depth else []
        if run.note and not depth:
            out.append(f"<div class='muted'>{esc_str(field_text(run.note))}</div>")
        for i, stage in enumerate(run.stages):  # every stage's configuration (a run has few), the current one open
            out.append(f"<details{' open' if i == len(run.stages) - 1 else ''}>{stage_summary_html(stage)}</details>")
        shown = numbers[-tail:] if not depth else []
        brief = [n for n in numbers[: len(numbers) - len(shown)]][-LIVE_LINES:]
        if len(numbers) > len(shown) + len(brief):
            out.append(
                f"<div class='muted'>… {len(numbers) - len(shown) - len(brief)} earlier steps "
                "(all of them show when the run ends)</div>"
            )
        out.extend(_step_line(run.steps[n]) for n in brief)
        out.extend(step_html(run.steps[n]) for n in shown)
        if run.messages:
            recent = sorted(run.messages, key=lambda m: m.get("seq", 0))[-LIVE_MESSAGES:]
            if len(run.messages) > len(recent):
                out.append(f"<div class='muted'>… {len(run.messages) - len(recent)} earlier messages</div>")
            out.append(threads_html(list(run.threads.values()), recent, {}))
        for child in run.children[-LIVE_CHILDREN:]:
            c = self.runs[child]
            inner = self._tail_html(child, tail, depth + 1) if depth < 2 else ""
            out.append(
                f"<div class='muted'>sub-agent <b>{esc_str(c.agent)}</b> · {esc_str(c.status)} · "
                f"{len(c.steps)} steps</div>"
                f"<div style='margin-left:1em'>{inner}</div>"
            )
        return "".join(out)

    def _run_html(self, run_id: str, depth: int = 0) -> str:
        run = self.runs[run_id]
        steps = [run.steps[k] for k in sorted(run.steps)]
        out = [f"<div><span class='muted'>task:</span> {esc_str(field_text(run.task))}</div>"] if depth == 0 else []
        if run.note and depth == 0:
            out.append(f"<div class='muted'>{esc_str(field_text(run.note))}</div>")
        out.append(staged_steps_html(run.stages, steps) if run.stages else "".join(step_html(s) for s in steps))
        conversation = bool(run.messages or run.threads)
        if conversation:
            actions: dict[str, list[tuple[float, dict[str, Any]]]] = {}
            for child in run.children:
                actions.setdefault(self.runs[child].agent, []).extend(self.runs[child].timed_actions)
            threads = list(run.threads.values())
            orchestrator = next((t.get("orchestrator") for t in threads if t.get("orchestrator")), "")
            out.append(threads_html(threads, run.messages, actions, orchestrator))
        for child in run.children:
            c = self.runs[child]
            state = "" if conversation else " open"  # a conversation's agents fold under their messages
            out.append(
                f"<details{state}><summary>sub-agent <b>{esc_str(c.agent)}</b> · {esc_str(c.status)} · "
                f"{len(c.steps)} steps</summary>{self._run_html(child, depth + 1)}</details>"
            )
        return "".join(out)

    def totals(self) -> tuple[int, int, float]:
        """``(steps of the root run, tokens, cost)`` over the whole tree so far."""
        steps = len(self.runs[self.root].steps) if self.root in self.runs else 0
        return steps, sum(r.tokens for r in self.runs.values()), sum(r.cost for r in self.runs.values())

    def tree_steps(self, run_id: str | None = None) -> int:
        """Steps of a run (the root by default) and all its sub-runs so far (a CORAL team's are all its
        members')."""
        run = self.runs.get(run_id or self.root or "")
        if run is None:
            return 0
        return len(run.steps) + sum(self.tree_steps(c) for c in run.children if c in self.runs)

    def html(self, tail: int | None = None) -> str:
        """The current view; with ``tail``, the short one the updates while the run goes carry (the
        header and the last ``tail`` steps)."""
        with self._lock:
            if self.root is None:
                return f"{CSS}<div class='tea-t'><span class='muted'>starting…</span></div>"
            root = self.runs[self.root]
            steps, tokens, cost = self.totals()
            elapsed = f"<span class='muted'>{time.monotonic() - self.started:.1f} s</span>"
            status: str = root.status  # or what the header says instead ("stopping…")
            extra = elapsed
            if status == "running" and self.stopping:
                status = "stopping…"
            elif status == "running" and self.background:
                extra += "<span class='muted'>in the background: Stop below, or handle.cancel()</span>"
            if status == "running" and self.waiting:
                extra += self._countdown()
            if status == "running" and self.running:
                extra += self._running_html()
            if status == "running" and not self.stopping and not self.background:
                extra += "<span class='muted'>interrupt the kernel (■) to stop</span>"
                if self.kernel:
                    extra += stop_button_html(self.kernel)
            head = header_html(
                root.agent, display_name(root.model), status, steps, tokens, cost, extra, self.tree_steps()
            )
            body = self._run_html(self.root) if tail is None else self._tail_html(self.root, tail)
            return f"{CSS}<div class='tea-t'>{head}{body}</div>"

    def bundle(self) -> Any:
        """The current view as a display bundle: the whole trajectory payload (``"live": true`` while
        the run goes; the JupyterLab extension renders it, with its own Stop button) over this HTML."""
        from tea_notebook.notebook.live_bundle import LiveBundle

        return LiveBundle(self)

    def next_bundle(self, whole: bool = False) -> Any:
        """The next update: what changed since the last one (whole: all of it; the first update that
        carries the trajectory is always whole, as a renderer that has seen none has nothing to
        add the changes to)."""
        from tea_notebook.notebook.live_bundle import LiveBundle

        return LiveBundle(self, update=True, whole=whole)

    def summary(self) -> Any:
        """The compact line the live view becomes when the run ends."""
        from IPython.display import HTML

        with self._lock:
            if self.root is None:
                return HTML("")
            root = self.runs[self.root]
            steps, tokens, cost = self.totals()
            total = self.tree_steps()
        head = header_html(root.agent, display_name(root.model), root.status, steps, tokens, cost, total=total)
        return HTML(f"{CSS}<div class='tea-t'>{head}</div>")

    def ended(self, value: Any) -> Any:
        """What the view becomes when the cell's run has ended and the cell returns ``value``: nothing
        when ``value`` shows the run itself (a RunResult displays the trajectory, header and all,
        just below: one header, not two), else the summary line (the run failed and the cell
        raises, or the value is something else)."""
        from tea_notebook.runtime.agent import RunResult

        if isinstance(value, RunResult) and value.status != "error":
            return _Nothing()
        return self.summary()

    def running_calls(self, now: float | None = None) -> dict[str, float]:
        """Seconds each tool call still running has run so far, by call id (lock held or not: a copy)."""
        now = time.time() if now is None else now
        return {call: max(0.0, now - started) for call, (_r, _s, _n, started) in list(self.running.items())}

    def _running_html(self) -> str:
        """The note "step 1: very_slow running 3 s…" for the tool calls still running (lock held)."""
        now = time.time()
        parts = []
        for run_id, step, name, started in list(self.running.values())[:3]:
            who = "" if run_id == self.root else f"{self.runs[run_id].agent}'s " if run_id in self.runs else ""
            parts.append(f"{who}step {step}: {running_text(name, now - started)}")
        more = f" (+{len(self.running) - 3})" if len(self.running) > 3 else ""
        return f"<span class='tea-running' style='color:#0969da'>{esc_str('; '.join(parts))}{more}</span>"

    def _countdown(self) -> str:
        """The note "waiting for the model: 57 s left of 60 s" for the longest-waiting model call (lock held)."""
        deadline, timeout, retries = min(self.waiting.values())
        left = deadline - time.monotonic()
        if left > 0:
            text = f"waiting for the model: {left:.0f} s left of {timeout:g} s"
        else:
            text = f"no answer within {timeout:g} s" + (f": retrying (up to {retries}×)" if retries else "")
        return f"<span class='tea-wait' style='color:#9a6700'>{text}</span>"

    def _tick(self) -> None:
        """While a model call is waited for or a tool call runs, refresh now and then so the countdown
        and the running seconds move (see :func:`tick_interval`); an update that only ticks carries
        the run's header and no step, so a long call costs a few hundred bytes a tick."""
        if self._ticking or self._handle is None:
            return
        self._ticking = True

        def tick() -> None:
            try:
                while (self.waiting or self.running) and not self._closed:
                    longest = max(self.running_calls().values(), default=0.0)
                    time.sleep(1.0 if self.waiting else tick_interval(longest))
                    if self._closed or not (self.waiting or self.running):
                        break
                    self._dirty = True
                    self.refresh()
            finally:
                self._ticking = False
            if (self.waiting or self.running) and not self._closed:  # a call began as this loop ended
                self._tick()

        threading.Thread(target=tick, name="tea-live-countdown", daemon=True).start()

    def mark_stopping(self) -> None:
        """Show that a stop was asked for (the button goes away until the run has ended)."""
        with self._lock:
            self.stopping = True
            self._dirty = True
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        """Push the current view to the display (if anything changed and, unless ``force``, the
        update fits the view's byte budget: see :data:`LIVE_STEP_BYTES`; a held update goes out
        with a later one)."""
        if not self._dirty or (not force and self.over_budget()):
            return
        self._dirty = False
        self._last = time.monotonic()
        self.updates += 1
        if self._handle is not None:
            with self._sending:  # in the order they were made: each applies to the one before
                bundle = self.next_bundle()
                self._update(bundle)
                self._spent(bundle)

    def over_budget(self) -> bool:
        """True when one more partial update like the last would spend more than the run's steps
        allow (:attr:`budget`: :data:`LIVE_BASE_BYTES` + :data:`LIVE_STEP_BYTES` a step) beyond its content."""
        if self._seq is None or self.budget is None:  # the first update that carries the trajectory always goes
            return False
        base, per_step = self.budget
        with self._lock:
            allowed = base + per_step * self.tree_steps()
        return self.overhead + self._last_overhead > allowed

    def _spent(self, bundle: Any) -> None:
        """Count what a partial update spent beyond its content."""
        overhead = getattr(bundle, "overhead", None)
        if callable(overhead) and getattr(bundle, "base", None) is not None:
            self._last_overhead = overhead()
            self.overhead += self._last_overhead

    def _update(self, obj: Any) -> None:
        # Updates come from whichever thread emitted the event (the background loop, a tool's
        # worker thread) and may come after the cell ended (a background run): each goes out as a
        # message of the cell that made the view, so the front end updates that cell's output.
        with as_message_of(self._parent):
            self._handle.update(obj)

    def close(self, final: Any = None) -> None:
        """Replace the live view with ``final`` (a displayable), or refresh it one last time with the
        whole trajectory (payload and HTML), so that what stays in the notebook is all of the run."""
        self._closed = True
        if self._flush is not None:
            self._flush.cancel()
        if self._handle is not None and final is not None:
            self._update(final)
        elif self._handle is not None:
            self._dirty = False
            self._last = time.monotonic()
            self.updates += 1
            with self._sending:
                self._update(self.next_bundle(whole=True))

    def final(self, handle: Any) -> Any:
        """What a background run's view becomes when it ends: the run's trajectory, or the error that
        ended it (with the view's summary line)."""
        from IPython.display import HTML

        if handle.done() and handle._exception is None:
            return handle.result(0)
        error = esc_str(handle.error or "the run did not end")
        box = f"<div class='tea-t' style='color:#cf222e'>the run ended with an error: {error}</div>"
        return HTML(f"{self.summary().data}{box}")


class _Nothing:
    """An empty display (what a finished live view becomes when the cell's value shows the run)."""

    data = ""  # the HTML, as for the live view's other displays

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": "", "text/html": ""}


def stop_widget(handle: Any) -> Any:
    """Display a Stop button for one background run (a widget: the kernel is free to handle its click,
    and stopping the run interrupts nothing else); None where widgets cannot be shown."""
    try:
        import ipywidgets
        from IPython.display import display
    except ImportError:
        return None
    if display_parent() is None:  # not in a kernel: nobody could click it
        return None
    button = ipywidgets.Button(
        description="Stop", tooltip="stop this background run", button_style="danger", layout={"width": "90px"}
    )

    def clicked(_b: Any) -> None:
        button.disabled, button.description = True, "stopping…"
        handle.context.cancel.set()  # cooperative: the run ends as 'interrupted' within a second or two

    button.on_click(clicked)
    display(button)
    return button


def follow_in_view(handle: Any, view: Any) -> None:
    """Show a background run in its live ``view`` with a Stop button (:func:`stop_widget`); both close
    when the run ends, the view on the run's final display."""
    stop = stop_widget(handle)

    def ended(h: Any) -> None:
        if stop is not None:
            stop.close()
        view.close(final=view.final(h))

    handle.add_done_callback(ended)


class JobsView:
    """``%tea jobs``: the background runs of the workspace, each running one with a Stop button (a
    widget in a kernel; a table elsewhere)."""

    def __init__(self, jobs: Any):
        self.jobs = jobs
        self.rows = jobs.rows()

    def _table(self) -> str:
        if not self.rows:
            return "<p><i>no background runs (start one with %%agent --background or agent.start(task))</i></p>"
        cols = ["run", "agent", "status", "seconds", "task", "error"]
        head = "".join(f"<th style='text-align:left'>{c}</th>" for c in cols)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{esc_str(str(r[c]))}</td>" for c in cols) + "</tr>"
            for r in self.rows
        )
        return f"<b>background runs</b><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def widget(self) -> Any:
        """An ipywidgets box: one line per run, Stop on the running ones; rows update when a run ends."""
        import ipywidgets

        lines = []
        for handle in self.jobs:
            label = ipywidgets.HTML(_job_line(handle))
            parts: list[Any] = [label]
            if not handle.done():
                button = ipywidgets.Button(description="Stop", button_style="danger", layout={"width": "80px"})

                def clicked(b: Any, h: Any = handle) -> None:
                    b.disabled, b.description = True, "stopping…"
                    h.context.cancel.set()

                button.on_click(clicked)
                parts.append(button)

                def ended(h: Any, label: Any = label, button: Any = button) -> None:
                    label.value = _job_line(h)
                    button.close()

                handle.add_done_callback(ended)
            lines.append(ipywidgets.HBox(parts))
        return ipywidgets.VBox(lines or [ipywidgets.HTML(self._table())])

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        data: dict[str, Any] = {"text/plain": self._text(), "text/html": self._table()}
        if display_parent() is not None:
            try:
                data.update(self.widget()._repr_mimebundle_())
                data["text/plain"] = self._text()
            except ImportError:
                pass
        return data

    def _text(self) -> str:
        lines = [f"background runs ({len(self.rows)})"]
        lines += ["  " + " | ".join(str(v) for v in r.values() if v != "") for r in self.rows]
        return "\n".join(lines)


def _job_line(handle: Any) -> str:
    r = handle.row()
    amber = "#9a6700"  # ended without a verified success, but not broken either
    color = {"running": "#0969da", "success": "#1a7f37", "stopping": amber, "interrupted": amber}
    color = color.get(r["status"], amber if r["status"] in ("unverified", "max_steps") else "#cf222e")
    error = f" · <span style='color:#cf222e'>{esc_str(r['error'])}</span>" if r["error"] else ""
    return (
        f"<code>{esc_str(r['run'])}</code> <b>{esc_str(r['agent'])}</b> "
        f"<span style='color:{color}'>{esc_str(r['status'])}</span> · {r['seconds']} s · {esc_str(r['task'])}{error}"
    )
