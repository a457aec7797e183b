"""Background runs: a run that goes on in the library's background loop while its caller goes on.

``agent.start(task)`` (and ``%%agent … --background``) returns a :class:`RunHandle` at once; the run
itself is the same coroutine a foreground run awaits, so it writes the same events, shows in the
same views and ends with the same statuses. Every handle of a workspace is in ``ws.jobs`` (a
:class:`Jobs`), which lists them with their state and can stop them.

A background run never raises into whatever else the caller is doing: an exception that escapes the
run is kept on its handle (``status == "error"``, ``error``) and raised only by ``handle.result()``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import html
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Coroutine

from tea_notebook._sync import run_sync, submit
from tea_notebook.errors import RunFailed
from tea_notebook.protocol.context import Context
from tea_notebook.runtime.events import Event

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost
    from tea_notebook.runtime.records import RunResult

_following: contextvars.ContextVar["RunTree | None"] = contextvars.ContextVar("tea_run_tree", default=None)


class RunTree:
    """The runs one call started (a cell's ``%%agent``, a background job), and no others.

    An event belongs to the call when it is emitted inside the call's coroutine (the context variable
    its task and sub-tasks inherit), names the call's context as its root, or comes from a run already
    known to belong (or whose parent does). ``on_event`` sees each event that belongs; ``root`` is the
    first top-level run the call started.
    """

    def __init__(self, context_id: str, on_event: Callable[[Event], None] | None = None):
        self.context_id, self.on_event = context_id, on_event
        self.runs: set[str] = set()
        self.root: str | None = None
        self.started = threading.Event()  # set when the root run has started

    async def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Await ``coro`` marked as this call's."""
        _following.set(self)
        return await coro

    def __call__(self, event: Event) -> None:
        if not (
            _following.get() is self
            or event.run_id in self.runs
            or (event.parent_id is not None and event.parent_id in self.runs)
            or event.data.get("root_run") == self.context_id
        ):
            return
        self.runs.add(event.run_id)
        if self.root is None and event.type == "run_started" and event.parent_id is None:
            self.root = event.run_id
            self.started.set()
        if self.on_event is not None:
            self.on_event(event)


class RunHandle:
    """A run going on in the background: ``status``, ``done()``, ``result()``, ``cancel()``; ``await
    handle`` in a cell gives the :class:`RunResult` too."""

    def __init__(
        self,
        workspace: "RunHost",
        agent: str,
        task: str,
        context: "Context",
        tree: RunTree,
        lock: "threading.RLock | None" = None,
    ):
        self.workspace, self.agent, self.task, self.context = workspace, agent, task, context
        self._lock = lock if lock is not None else threading.RLock()  # its Jobs' lock (Jobs.start hands it)
        self.started = time.time()
        self.ended: float | None = None
        self._tree = tree
        self._future: concurrent.futures.Future | None = None
        self._result: "RunResult | None" = None
        self._exception: BaseException | None = None
        self._done = threading.Event()
        self._callbacks: list[Callable[["RunHandle"], None]] = []

    # -- state ------------------------------------------------------------------------------------
    @property
    def run_id(self) -> str | None:
        """The id of the run once it has started (its trajectory: ``ws.trajectory(run_id)``)."""
        return self._result.run_id if self._result is not None else self._tree.root

    @property
    def status(self) -> str:
        """``running``, ``stopping`` (a stop was asked for), or the run's final status (``error`` when
        an exception escaped it)."""
        if not self._done.is_set():
            return "stopping" if self.context.cancel.is_set() else "running"
        if self._result is not None:
            return self._result.status
        return "error"

    @property
    def error(self) -> str | None:
        """Why the run failed, if it did (the run's own error or the exception that escaped it)."""
        if self._exception is not None:
            return f"{type(self._exception).__name__}: {self._exception}"
        return self._result.error if self._result is not None else None

    def done(self) -> bool:
        """True once the run has ended (in any status)."""
        return self._done.is_set()

    def wait_started(self, timeout: float = 2.0) -> bool:
        """Wait (at most ``timeout`` seconds) until the run has started and has its id; False if it has
        not (still setting up, or it ended before starting)."""
        deadline = time.monotonic() + timeout
        while not self._tree.started.wait(0.02):
            if self._done.is_set() or time.monotonic() > deadline:
                return self._tree.started.is_set()
        return True

    def result(self, timeout: float | None = None) -> "RunResult":
        """Wait (at most ``timeout`` seconds) for the run and return its :class:`RunResult`.

        Raises ``TimeoutError`` when it is still running then, and the exception that escaped the run
        (if one did): only here, never in another cell."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the run of {self.agent!r} is still running after {timeout} s")
        if self._exception is not None:
            raise self._exception
        assert self._result is not None
        return self._result

    def cancel(self, wait: float = 10.0) -> str:
        """Stop the run cooperatively (as the Stop button does) and wait up to ``wait`` seconds for it
        to end; returns its status (``interrupted`` once it has stopped, ``stopping`` if not yet)."""
        if not self._done.is_set():
            self.context.cancel.set()
            self._done.wait(wait)
        return self.status

    def add_done_callback(self, callback: Callable[["RunHandle"], None]) -> None:
        """Call ``callback(handle)`` when the run ends (at once if it has); errors in it are ignored."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        _call_quietly(callback, self)

    def __await__(self) -> Any:
        async def wait() -> "RunResult":
            await asyncio.wrap_future(self._future) if self._future is not None else None
            return self.result(0)

        return wait().__await__()

    # -- completion (on the background loop) -----------------------------------------------------
    def _finish(self, future: concurrent.futures.Future) -> None:
        try:
            self._result = future.result()
        except BaseException as exc:  # noqa: BLE001 - kept for result(); never raised into another cell
            self._exception = exc
        self.ended = time.time()
        with self._lock:
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            _call_quietly(callback, self)

    # -- display ----------------------------------------------------------------------------------
    def row(self) -> dict[str, Any]:
        """One line of ``%tea jobs``."""
        end = self.ended or time.time()
        return {
            "run": self.run_id or "(starting)",
            "agent": self.agent,
            "status": self.status,
            "seconds": round(end - self.started, 1),
            "task": self.task[:80],
            "error": (self.error or "")[:160],
        }

    def __repr__(self) -> str:
        r = self.row()
        error = f", error={r['error']!r}" if r["error"] else ""
        return f"RunHandle({r['agent']!r}, {r['status']}, run_id={r['run']!r}, {r['seconds']} s{error})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(repr(self))

    def _ipython_display_(self) -> None:
        """Shown in a notebook (a cell's value, ``display(handle)``): a line that changes to the run's
        final status when it ends, after the cell has ended too."""
        from IPython.display import display

        from tea_notebook.runtime.cell_output import as_message_of, display_parent

        parent = display_parent()
        if parent is None or self.done():  # nothing to update later (or no kernel to update it in)
            display(self._bundle(), raw=True)
            return
        shown = display(self._bundle(), raw=True, display_id=True)

        def ended(handle: "RunHandle") -> None:
            with as_message_of(parent):
                shown.update(handle._bundle(), raw=True)

        self.add_done_callback(ended)

    def _bundle(self) -> dict[str, str]:
        return {"text/plain": repr(self), "text/html": self._repr_html_()}

    def _repr_html_(self) -> str:
        r = self.row()
        what = (
            "running in the background — the kernel is free; <code>handle.result()</code> waits for it, "
            "<code>handle.cancel()</code> stops it, <code>%tea jobs</code> lists every run"
            if not self.done()
            else f"ended: {html.escape(r['status'])}"
        )
        error = f"<div style='color:#cf222e'>{html.escape(r['error'])}</div>" if r["error"] else ""
        run = f"run <code>{html.escape(r['run'])}</code>" if self.run_id else "starting"
        return f"<div><b>{html.escape(r['agent'])}</b> · {run} · {what}{error}</div>"


def _call_quietly(callback: Callable[[RunHandle], None], handle: RunHandle) -> None:
    try:
        callback(handle)
    except Exception:  # noqa: BLE001 - a view's failure must not break the run's completion
        pass


class Jobs:
    """The background runs started from one workspace in this process, newest last."""

    def __init__(self, workspace: "RunHost"):
        self.workspace = workspace
        self._handles: list[RunHandle] = []
        self._lock = threading.RLock()

    def start(
        self,
        agent: str,
        task: str,
        start: Callable[["Context"], Coroutine[Any, Any, "RunResult"]],
        on_event: Callable[[Event], None] | None = None,
        model_options: dict[str, Any] | None = None,
    ) -> RunHandle:
        """Start ``start(ctx)`` (a coroutine making the run under a fresh context) on the background
        loop and return its handle at once; ``on_event`` sees the events of the run tree;
        ``model_options`` (``api_base``, ``timeout``, ``retries``) apply to its model calls."""
        ctx = Context()
        ctx.model_options.update(model_options or {})
        tree = RunTree(ctx.id, on_event)
        handle = RunHandle(self.workspace, agent, task, ctx, tree, self._lock)
        unsubscribe = self.workspace.events.subscribe(tree)
        handle.add_done_callback(lambda _h: unsubscribe())
        with self._lock:
            self._handles.append(handle)
        handle._future = submit(tree.run(start(ctx)))
        handle._future.add_done_callback(handle._finish)
        return handle

    def running(self) -> list[RunHandle]:
        """The handles whose runs have not ended."""
        with self._lock:
            return [h for h in self._handles if not h.done()]

    def __iter__(self) -> Any:
        with self._lock:
            return iter(list(self._handles))

    def __len__(self) -> int:
        return len(self._handles)

    def __getitem__(self, index: int) -> RunHandle:
        return self._handles[index]

    def get(self, run_id: str) -> RunHandle:
        """The handle of the run ``run_id``."""
        for handle in self:
            if handle.run_id == run_id:
                return handle
        raise KeyError(f"no background run {run_id!r} in this process (see %tea jobs)")

    def cancel_all(self, wait: float = 10.0) -> list[str]:
        """Stop every running job; their statuses."""
        handles = self.running()
        for h in handles:
            h.context.cancel.set()
        return [h.cancel(wait) for h in handles]

    def wait(self, timeout: float | None = None) -> list["RunResult | None"]:
        """Wait for every job (at most ``timeout`` seconds in all); their results (None: still running
        or failed with an exception, see the handle)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out = []
        for h in self:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            h._done.wait(left)
            out.append(h._result if h.done() else None)
        return out

    def rows(self) -> list[dict[str, Any]]:
        """One row per job (what ``%tea jobs`` shows)."""
        return [h.row() for h in self]

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(f"jobs ({len(self)}, {len(self.running())} running)\n")
        for r in self.rows():
            p.text("  " + " | ".join(str(v) for v in r.values() if v != "") + "\n")


class Runnable:
    """What every kind of agent offers on top of its ``async run(task, files, **options)``.

    The contract of ``run`` (and so of ``run_sync``), the same for every kind: a run that ends with
    status ``error`` raises :class:`~tea_notebook.errors.RunFailed` (its ``.result`` is the stored
    :class:`RunResult`); pass ``raise_on_error=False`` to get the result instead (batch code). The other
    endings (``success``, ``failed``, ``max_steps``, ``unverified``, ``interrupted``) are returned, and the
    result shows its status first. Each kind's ``run`` declares ``raise_on_error`` and returns
    :func:`checked_result` of its result.
    """

    workspace: "RunHost"
    name: str

    async def run(
        self,
        task: str,
        files: list[str] | None = None,
        *,
        context: "Context | None" = None,
        raise_on_error: bool = True,
    ) -> "RunResult":
        """Run on ``task`` (with ``files`` attached) under ``context`` (its ``cancel`` stops the run): the
        :class:`RunResult`, or :class:`~tea_notebook.errors.RunFailed` when it ended in ``error`` and
        ``raise_on_error``."""
        raise NotImplementedError

    def run_sync(self, task: str, files: list[str] | None = None, **kwargs: Any) -> "RunResult":
        """:meth:`run` from synchronous code, also inside a running event loop (a notebook cell)."""
        return run_sync(self.run(task, files, **kwargs))

    def start(
        self,
        task: str,
        files: list[str] | None = None,
        *,
        on_event: Callable[[Event], None] | None = None,
        model_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> RunHandle:
        """Start :meth:`run` in the background and return its :class:`RunHandle` at once (the kernel
        stays free); ``handle.result()`` waits for the :class:`RunResult`. ``model_options``
        (``api_base``, ``timeout``, ``retries``) apply to this run's model calls."""
        kwargs.pop("context", None)  # a background run gets its own context (its own Stop)
        return self.workspace.jobs.start(
            self.name,
            task,
            # a background run keeps its result, error or not: handle.status and handle.result() show it
            lambda ctx: self.run(task, files, context=ctx, raise_on_error=False, **kwargs),
            on_event=on_event,
            model_options=model_options,
        )


def checked_result(result: "RunResult", raise_on_error: bool) -> "RunResult":
    """``result`` as a kind's ``run`` returns it (the :class:`Runnable` contract):
    :class:`~tea_notebook.errors.RunFailed` instead when its status is ``error`` and ``raise_on_error``."""
    if raise_on_error and result.status == "error":
        raise RunFailed(result)
    return result
