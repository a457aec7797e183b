"""Run contexts (the protocols' context manager 𝒞): bindings, toolkit shared state, what has run."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tea_notebook._lazy import LazyModule

if TYPE_CHECKING:
    import uuid

    from tea_notebook.protocol.store_host import StoreHost
else:  # loaded by the first run's context, not by opening the workspace
    uuid = LazyModule("uuid", globals(), "uuid")

#: the :meth:`Context.state` scopes that tools share (a toolkit's, a tool's own, see ``ToolContext.state``):
#: the part of that state a step leaves for the next ones (others hold live objects of the runtime)
TOOL_SCOPES = ("toolkit:", "tool:")


class Context:
    """What one run has attached: bound tools / environments / agents, shared state, invocation history.

    ``with ws.context() as ctx:`` unbinds everything when the block ends.
    """

    def __init__(self, name: str | None = None, parent: "Context | None" = None):
        self.id = name or uuid.uuid4().hex[:12]
        self.parent = parent
        # a run tree shares one stop signal: cancelling the root stops every sub-agent
        self.cancel: threading.Event = parent.cancel if parent is not None else threading.Event()
        self.root: str = parent.root if parent is not None else self.id
        # permissions granted by the person for this run tree (e.g. "kernel.write")
        self.grants: set[str] = parent.grants if parent is not None else set()
        # files the person attached to the root run: what a sub-agent may read outside the run folder
        self.attachments: set[str] = parent.attachments if parent is not None else set()
        # model call settings for this run tree (``api_base``, ``timeout``, ``retries``), over the workspace's
        self.model_options: dict[str, Any] = parent.model_options if parent is not None else {}
        self.is_run = False
        # where notices of this run tree go (a run sets it: they become its events); see notice()
        self.notices: Callable[[str, dict[str, Any]], Any] | None = parent.notices if parent is not None else None
        self._bound: dict[str, list[str]] = {}
        self._state: dict[str, dict[str, Any]] = {}
        self._ran_ok: set[str] = set()
        self.calls: list[tuple[str, str, bool]] = []
        self._lock = threading.Lock()
        self.closed = False

    def bind(self, kind: str, name: str) -> None:
        """Attach a record of ``kind`` (idempotent)."""
        with self._lock:
            names = self._bound.setdefault(kind, [])
            if name not in names:
                names.append(name)

    def unbind(self, kind: str, name: str) -> bool:
        """Detach; False when it was not bound."""
        with self._lock:
            names = self._bound.get(kind, [])
            if name in names:
                names.remove(name)
                return True
            return False

    def bound(self, kind: str) -> list[str]:
        """Names of the bound records of one kind, in binding order."""
        return list(self._bound.get(kind, []))

    def state(self, scope: str, initial: dict[str, Any] | None = None) -> dict[str, Any]:
        """The shared mutable state of a toolkit or environment within this context."""
        with self._lock:
            if scope not in self._state:
                self._state[scope] = dict(initial or {})
            return self._state[scope]

    def record_call(self, kind: str, name: str, ok: bool) -> None:
        """Remember an invocation (preconditions check what has succeeded)."""
        with self._lock:
            self.calls.append((kind, name, ok))
            if ok:
                self._ran_ok.add(name)

    def has_succeeded(self, name: str) -> bool:
        """True once ``name`` has been invoked successfully in this context."""
        return name in self._ran_ok

    def forget(self, prefix: str = "") -> None:
        """Forget the successes of names starting with ``prefix`` (all by default): what they set up
        is gone (an environment was reset or stopped), so preconditions on them hold no longer."""
        with self._lock:
            self._ran_ok = {n for n in self._ran_ok if not n.startswith(prefix)} if prefix else set()

    def snapshot(self) -> dict[str, Any]:
        """What this context carries from one step of a run to the next, as JSON: the names that have
        succeeded (``succeeded``: the preconditions they satisfy) and the shared state of toolkits and
        tools (``state``: scope -> state, see :data:`TOOL_SCOPES`). A scope whose state is not JSON is
        left out and named in ``unkept`` (a fork or resume cannot restore it)."""
        with self._lock:
            succeeded = sorted(self._ran_ok)
            states = {k: dict(v) for k, v in self._state.items() if k.startswith(TOOL_SCOPES)}
        kept: dict[str, Any] = {}
        unkept: list[str] = []
        for scope, state in sorted(states.items()):
            try:
                kept[scope] = json.loads(json.dumps(state))
            except (TypeError, ValueError):
                unkept.append(scope)
        out: dict[str, Any] = {"succeeded": succeeded, "state": kept}
        if unkept:
            out["unkept"] = unkept
        return out

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Take up a :meth:`snapshot`: what had succeeded then, and the toolkits' and tools' state
        (each scope's dict keeps its identity: tools holding it see the restored values)."""
        with self._lock:
            self._ran_ok = set(snapshot.get("succeeded") or [])
            saved = snapshot.get("state") or {}
            kept = set(saved) | set(snapshot.get("unkept") or [])  # a state not recorded is left as it is
            for scope in [k for k in self._state if k.startswith(TOOL_SCOPES) and k not in kept]:
                self._state[scope].clear()
            for scope, state in saved.items():
                current = self._state.setdefault(scope, {})
                current.clear()
                current.update(json.loads(json.dumps(state)))

    def notice(self, kind: str, data: dict[str, Any]) -> int | None:
        """Tell the run this context belongs to that something happened (an event ``kind`` of the run,
        e.g. ``egress_refused``); the step it was filed under, or None (nothing happens outside a run)."""
        if self.notices is None:
            return None
        step = self.notices(kind, data)
        return step if isinstance(step, int) else None

    def close(self) -> None:
        """Unbind everything and drop shared state."""
        with self._lock:
            self._bound.clear()
            self._state.clear()
            self.closed = True

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        bound = {k: v for k, v in self._bound.items() if v}
        return f"Context({self.id!r}, bound={bound})"


@dataclass
class ToolContext:
    """Handed to a tool that declares a parameter of this type (it is not part of the schema).

    ``state`` is the shared state of the tool's toolkit within the current run context.
    ``cancelled`` turns true when the run is stopped: a long synchronous tool (a thread cannot be
    killed) should check it between steps and return without finishing its side effects.
    ``folder`` is the calling run's own folder (what its per-step snapshots keep, so a fork or resume
    restores what the tool wrote there); :meth:`write` and :meth:`read` stay beneath it whatever
    name the model passes (no absolute path, no ``..`` out, no link planted there that leads out).
    """

    workspace: "StoreHost | None"
    context: Context
    tool: str
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def cancelled(self) -> bool:
        """True once the run (tree) that called this tool was stopped."""
        return self.context.cancel.is_set()

    @property
    def folder(self) -> Path | None:
        """The folder of the run that called this tool (``runs/<run id>`` of the workspace), or None
        when no run called it (``ws.tools.invoke`` in a cell)."""
        node: Context | None = self.context
        while node is not None and not node.is_run:
            node = node.parent
        if node is None or self.workspace is None:
            return None
        return Path(self.workspace.path) / "runs" / node.id

    def write(self, name: str, data: bytes | str) -> Path:
        """Write ``data`` (text as UTF-8) to the file ``name`` beneath the run's folder (folders on
        the way are made) and return its path; a name that leads outside the folder, or no run,
        raises :class:`~tea_notebook.errors.EnvironmentFailure` naming it (nothing is written)."""
        from tea_notebook._safe_open import write_beneath

        folder = self._own_folder()
        return folder / write_beneath(folder, name, data)

    def read(self, name: str, limit: int = 16 * 1024 * 1024) -> bytes | None:
        """The bytes of the file ``name`` beneath the run's folder (None when there is none); a name
        that leads outside it or a file larger than ``limit`` raises EnvironmentFailure."""
        from tea_notebook._safe_open import read_beneath

        return read_beneath(self._own_folder(), name, limit)

    def _own_folder(self) -> Path:
        from tea_notebook.errors import EnvironmentFailure

        folder = self.folder
        if folder is None:
            raise EnvironmentFailure(f"tool {self.tool!r} was not called by a run: it has no run folder to use")
        return folder
