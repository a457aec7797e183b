"""The kernel side of the JupyterLab TEA sidebar: the comm target ``tea_notebook.sidebar``.

``%load_ext tea_notebook`` registers the target. The sidebar opens a comm to it and asks
``{"request": "state"}`` (the workspace's tools, agents, environments, runs and memory) or
``{"request": "trajectory", "run": ID}`` (a run's trajectory bundle, for a main-area panel) or
``{"request": "context", "run": ID, "step": N, "stage": ""}`` (what the model saw at a step, for the
renderer's "context" button), ``lineage`` / ``lineage_node`` / ``rollback`` (the Evolution section:
:mod:`tea_notebook.notebook.sidebar_lineage`) or ``{"request": "edit_targets", "run": ID, "step": N}``
(``"stage": K`` for a ToolSelf stage: the values "edit and fork" offers to edit) and
``{"request": "fork_cell", ...}`` (the one cell that forks with the edited value, which the renderer inserts and runs).
After every cell the kernel sends the state again if it changed, so the sidebar refreshes when a run
ends or a tool is created.

Why a comm and not an ``execute_request`` with ``user_expressions`` on each idle: the kernel can push
(no polling, nothing added to the execution count or history), one message carries the whole state,
and a comm cannot run arbitrary code sent by the page. The sidebar shows only a workspace that a
magic already opened: it never creates a ``.tea`` folder by itself.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

from tea_notebook.notebook.sidebar_lineage import REQUESTS as LINEAGE_REQUESTS

TARGET = "tea_notebook.sidebar"
#: items per section at most (the newest runs; registries by name)
SECTION_LIMIT = 200
#: text fields are cut to this many characters
TEXT_LIMIT = 2000
#: a context part's text is cut to this many characters in a ``context`` reply (its size stays exact)
CONTEXT_PART_LIMIT = 20_000


def _clip(value: Any, limit: int = TEXT_LIMIT) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _versions(registry: Any, name: str) -> list[dict[str, Any]]:
    try:
        return [
            {"version": v.version, "hash": v.hash[:12], "current": v.current, "note": _clip(v.note, 200)}
            for v in registry.versions(name)
        ]
    except Exception:  # noqa: BLE001 - a record without history: show it without versions
        return []


def _usage(record: Any) -> dict[str, Any] | None:
    usage = getattr(record, "usage", None)
    if usage is None or not getattr(usage, "calls", 0):
        return None
    return {"calls": usage.calls, "failures": usage.failures, "mean_latency_ms": round(usage.mean_latency_ms, 1)}


def _provenance(record: Any) -> dict[str, Any]:
    meta = getattr(record, "metadata", {}) or {}
    keep = {k: meta[k] for k in ("created_by", "source_run", "run_id", "kind", "judge", "tests") if k in meta}
    return {"origin": getattr(record, "origin", ""), **{k: _clip(v, 300) for k, v in keep.items()}}


def _record_item(registry: Any, record: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"category": getattr(record, "category", "")}
    for field in ("parameters", "returns"):
        value = getattr(record, field, None)
        if value:
            details["schema" if field == "parameters" else field] = value
    for field in ("role", "model", "tools", "max_steps", "toolkit", "permissions", "rules", "state", "constraints"):
        value = getattr(record, field, None)
        if value not in (None, "", [], {}):
            details[field] = value if isinstance(value, (list, dict, int)) else _clip(value, 500)
    actions = getattr(record, "actions", None)
    if actions:
        details["actions"] = [a.name for a in actions]
    source = getattr(record, "source", "")
    if source:
        details["source"] = _clip(source)
    usage = _usage(record)
    if usage:
        details["usage"] = usage
    details["provenance"] = _provenance(record)
    details["versions"] = _versions(registry, record.name)
    return {
        "name": record.name,
        "description": _clip(record.description, 500),
        "version": record.version,
        "details": details,
    }


def _run_items(ws: Any, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs section: each run titled ``agent · status`` with a line that tells two runs of one
    agent apart (when it started, the shortest unique id prefix, its steps, its task's first words)."""
    from tea_notebook.runtime.render import steps_label

    counts = ws.db.step_counts([r["id"] for r in runs])
    prefixes = unique_prefixes([r["id"] for r in runs])
    items = []
    for r in runs:
        own, total = counts.get(r["id"], (0, 0))
        steps = steps_label(own, total)
        started = _when(r.get("started"))
        items.append(
            {
                "name": r["id"],
                "title": f"{r['agent']} · {r['status']}",
                "subtitle": " · ".join(x for x in (started, prefixes[r["id"]], steps, _gist(r["task"])) if x),
                "description": _clip(r["task"], 300),
                "details": {
                    "run": r["id"],
                    "started": started,
                    "steps": steps,
                    "model": r.get("model"),
                    "forked_from": r.get("forked_from"),
                    "fork_step": r.get("fork_step"),
                },
            }
        )
    return items


def unique_prefixes(ids: list[str], shortest: int = 8) -> dict[str, str]:
    """For each id, its shortest prefix (at least ``shortest`` characters) that no other id shares:
    ids made in one session start alike (a clock), so a fixed-length prefix would not tell them apart."""
    ordered = sorted(set(ids))
    out = {}
    for i, run_id in enumerate(ordered):
        need = shortest
        for other in ordered[max(0, i - 1) : i] + ordered[i + 1 : i + 2]:  # the closest ids are neighbours
            common = next((k for k, (a, b) in enumerate(zip(run_id, other)) if a != b), min(len(run_id), len(other)))
            need = max(need, common + 1)
        out[run_id] = run_id[:need]
    return out


def _when(started: Any) -> str:
    """A run's start as local time: ``14:05:09`` today, ``2026-11-25 14:05`` on another day."""
    import datetime as dt

    if not isinstance(started, (int, float)):
        return ""
    moment = dt.datetime.fromtimestamp(started)
    return moment.strftime("%H:%M:%S") if moment.date() == dt.date.today() else moment.strftime("%Y-%m-%d %H:%M")


def _gist(task: str, limit: int = 60) -> str:
    first = next((line.strip() for line in str(task).splitlines() if line.strip()), "")
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _memory_items(ws: Any) -> list[dict[str, Any]]:
    # The rows ``%tea memory`` lists (summaries, insights and experience entries), so both agree.
    from tea_notebook.notebook.memory_view import MemoryExplorer

    items = []
    for row in MemoryExplorer(ws).rows[:SECTION_LIMIT]:
        details = {"kind": row.get("kind") or "", "task": _clip(row.get("task"), 300)}
        if row.get("title"):
            details["title"] = _clip(row["title"], 300)
        if row.get("run_id"):
            details["run"] = str(row["run_id"])
        if row.get("retrieved") is not None:
            details.update(retrieved=row["retrieved"], succeeded=row["succeeded"], failed=row["failed"])
        if row.get("disabled"):
            details["disabled"] = True
        items.append(
            {
                "name": row["name"],
                "description": _clip(row["description"], 500),
                "version": row["version"],
                "details": details,
            }
        )
    return items


def workspace_state(ws: Any) -> dict[str, Any]:
    """What the sidebar shows: one list of items per section (plain JSON)."""
    sections: dict[str, list[dict[str, Any]]] = {}
    for key, registry in (("tools", ws.tools), ("agents", ws.agents), ("envs", ws.envs)):
        sections[key] = [_record_item(registry, r) for r in registry.list()[:SECTION_LIMIT]]
    sections["runs"] = _run_items(ws, ws.runs(limit=SECTION_LIMIT))
    sections["memory"] = _memory_items(ws)
    return {"workspace": str(ws.path), "sections": sections}


class SidebarComms:
    """The open sidebar comms of one kernel, and what they were last sent."""

    def __init__(self, workspace: Callable[[], Any], naming: Callable[[Any], tuple[str, str]] | None = None):
        """``workspace``: returns the workspace the magics have open, or None (nothing opened yet);
        ``naming``: how a fork cell names that workspace (variable, setup lines), default ``ws``."""
        self.workspace = workspace
        self.naming = naming
        self.comms: list[Any] = []
        self._sent: dict[int, str] = {}

    # -- the comm target ------------------------------------------------------------------------
    def open(self, comm: Any, msg: dict[str, Any]) -> None:
        """A sidebar opened a comm: answer its first request, keep it for pushes."""
        self.comms.append(comm)
        comm.on_msg(lambda m: self.handle(comm, m["content"]["data"]))
        comm.on_close(lambda _m: self._forget(comm))
        self.handle(comm, msg["content"].get("data") or {"request": "state"})

    def _forget(self, comm: Any) -> None:
        if comm in self.comms:
            self.comms.remove(comm)
        self._sent.pop(id(comm), None)

    def handle(self, comm: Any, data: dict[str, Any]) -> None:
        """Answer one request from the sidebar."""
        try:
            request = data.get("request")
            if request == "state":
                self._send_state(comm, force=True)
            elif request == "trajectory":
                comm.send(self.trajectory(str(data.get("run", ""))))
            elif request == "context":
                comm.send(self.context(data))
            elif request in ("edit_targets", "fork_cell"):
                comm.send(self.edit(request, data))
            elif request in LINEAGE_REQUESTS:
                self._lineage(comm, str(request), data)
            else:
                comm.send({"type": "error", "message": f"unknown request {request!r}"})
        except Exception as exc:  # noqa: BLE001 - the sidebar shows the error; the kernel goes on
            comm.send({"type": "error", "message": f"{type(exc).__name__}: {_clip(exc, 300)}"})

    def _lineage(self, comm: Any, request: str, data: dict[str, Any]) -> None:
        """The Evolution section's requests (:mod:`tea_notebook.notebook.sidebar_lineage`); a bad one is an
        error reply naming its request. An applied rollback changes the tools: the state follows it."""
        from tea_notebook.errors import TeaError

        ws = self.workspace()
        if ws is None:
            comm.send({"type": "error", "request": request, "message": "no workspace is open in this kernel"})
            return
        try:
            reply = LINEAGE_REQUESTS[request](ws, data)
        except TeaError as exc:
            comm.send({"type": "error", "request": request, "message": _clip(exc, 600)})
            return
        comm.send(reply)
        if reply.get("applied"):
            self._send_state(comm)

    def trajectory(self, run: str) -> dict[str, Any]:
        """A run's trajectory as the sidebar opens it: the mime bundle's payload and metadata."""
        ws = self.workspace()
        if ws is None:
            return {"type": "error", "message": "no workspace is open in this kernel"}
        from tea_notebook.runtime.render import MIME_TYPE, mimebundle

        data, metadata = mimebundle(ws.trajectory(run))
        return {
            "type": "trajectory",
            "run": metadata[MIME_TYPE]["run_id"],
            "data": data[MIME_TYPE],
            "metadata": metadata,
        }

    def context(self, data: dict[str, Any]) -> dict[str, Any]:
        """What the model saw at a step (``{"request": "context", "run": ID, "step": N, "stage": ""}``):
        :meth:`StepContext.to_dict` with each part's text cut to :data:`CONTEXT_PART_LIMIT` characters;
        a step without a stored request (or any other problem) is an error reply that says why."""
        from tea_notebook.errors import TeaError

        run, step, stage = str(data.get("run", "")), data.get("step"), str(data.get("stage") or "")
        reply: dict[str, Any] = {"request": "context", "run": run, "step": step, "stage": stage}
        ws = self.workspace()
        if ws is None:
            return {"type": "error", **reply, "message": "no workspace is open in this kernel"}
        if isinstance(step, bool) or not isinstance(step, int):
            return {"type": "error", **reply, "message": f"the step is a whole number, not {step!r}"}
        try:
            from tea_notebook.runtime.contexts import load_context

            ctx = load_context(ws, run, step, stage).to_dict()  # reads the run's requests, not its whole trajectory
        except TeaError as exc:
            return {"type": "error", **reply, "message": _clip(exc, 600)}
        for part in ctx["parts"]:
            if len(part["text"]) > CONTEXT_PART_LIMIT:
                part["text"] = _clip(part["text"], CONTEXT_PART_LIMIT)
                part["clipped"] = True
        return {"type": "context", **reply, "context": ctx}

    def edit(self, request: str, data: dict[str, Any]) -> dict[str, Any]:
        """The renderer's "edit and fork": ``edit_targets`` (the values a step, CORAL message or ToolSelf stage offers,
        :func:`~tea_notebook.notebook.fork_cells.edit_targets`) or ``fork_cell`` (the complete cell that
        forks with ``value`` as the edit of ``kind``, its ``action`` or ``field``, and ``replay``, the policy its
        tools are answered by). Nothing is run or
        written here: the renderer inserts the cell and runs it. A bad request is an error reply."""
        from tea_notebook.errors import TeaError
        from tea_notebook.notebook.fork_cells import edit_targets, fork_cell

        run = str(data.get("run", ""))
        step, stage = data.get("step"), data.get("stage")
        reply: dict[str, Any] = {"request": request, "run": run, "step": step, "stage": stage}
        ws = self.workspace()
        if ws is None:
            return {"type": "error", **reply, "message": "no workspace is open in this kernel"}
        for name, number in (("step", step), ("stage", stage), ("action", data.get("action"))):
            if number is not None and (isinstance(number, bool) or not isinstance(number, int)):
                return {"type": "error", **reply, "message": f"the {name} is a whole number, not {number!r}"}
        if (step is None) == (stage is None):
            return {"type": "error", **reply, "message": "say where to fork: a step or a stage (one of them)"}
        try:
            if request == "edit_targets":
                return {"type": "edit_targets", **reply, **edit_targets(ws, run, step=step, stage=stage)}
            if "value" not in data:
                return {"type": "error", **reply, "message": "no edited value was sent"}
            ws_name, setup = self.naming(ws) if self.naming else ("ws", "")
            cell = fork_cell(
                ws,
                run,
                step=step,
                stage=stage,
                kind=str(data.get("kind") or ""),
                action=data.get("action"),
                value=data["value"],
                field=str(data.get("field") or ""),
                replay=data.get("replay"),
                ws_name=ws_name,
                setup=setup,
            )
        except TeaError as exc:
            return {"type": "error", **reply, "message": _clip(exc, 600)}
        return {"type": "fork_cell", **reply, "code": cell.code, "what": cell.what}

    def _send_state(self, comm: Any, force: bool = False) -> None:
        ws = self.workspace()
        if ws is None:
            message = {
                "type": "state",
                "state": {"workspace": "(none open yet: run a %tea or %%agent cell)", "sections": {}},
            }
        else:
            message = {"type": "state", "state": workspace_state(ws)}
        digest = hashlib.sha256(json.dumps(message, sort_keys=True, default=str).encode()).hexdigest()
        if force or self._sent.get(id(comm)) != digest:
            self._sent[id(comm)] = digest
            comm.send(message)

    # -- after each cell --------------------------------------------------------------------------
    def post_run_cell(self, *_args: Any) -> None:
        """IPython's ``post_run_cell`` hook: push the state to every sidebar if it changed."""
        for comm in list(self.comms):
            try:
                self._send_state(comm)
            except Exception:  # noqa: BLE001 - a closed comm or a workspace mid-switch: next cell
                self._forget(comm)


def register(shell: Any, workspace: Callable[[], Any]) -> SidebarComms | None:
    """Register the comm target with the kernel running ``shell`` (None outside a Jupyter kernel)."""
    if getattr(shell, "kernel", None) is None:
        return None
    try:
        import comm as comm_module

        manager = comm_module.get_comm_manager()
    except Exception:  # noqa: BLE001 - no comm support in this kernel
        return None
    from tea_notebook.notebook.fork_cells import workspace_name

    comms = SidebarComms(workspace, lambda ws: workspace_name(getattr(shell, "user_ns", {}) or {}, ws))
    manager.register_target(TARGET, comms.open)
    shell.events.register("post_run_cell", comms.post_run_cell)
    return comms
