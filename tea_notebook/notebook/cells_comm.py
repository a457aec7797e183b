"""The kernel side of the agent's cells in JupyterLab: the comm target ``tea_notebook.cells``.

``%load_ext tea_notebook`` registers the target and makes :class:`LabCells` the notebook of every
``notebook`` environment in this kernel (:func:`~tea_notebook.envs.notebook_cells.use_frontend`). The
TEA extension opens one comm per notebook panel (``{"hello": 1, "notebook": path}``); the newest open
one is used. While no comm is open (classic Notebook, VS Code, nbclient) everything goes to the
fallback (:mod:`.cells_fallback`).

kernel → page: ``cells_request`` (→ ``cells``), ``proposal`` (→ ``shown``), ``settled``, ``pending``.
page → kernel: ``decision`` (``run`` / ``reject``, with the cell's source at the click and, for an
edit, the target's ``base_source``), ``executed`` (the run's nbformat outputs), ``pending_request``.
The agent waits in a background thread; comm messages arrive on the kernel's main thread, so each
request the kernel sends waits on a :class:`threading.Event` set by the reply. An approved cell runs
as the notebook's own execute request; ``post_run_cell`` (``info.cell_id``) sees it even when the page
closes after the click (then the outputs are what the kernel knows: the value and the error).
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from tea_notebook.envs.cell_proposals import Proposal, ProposalBoard, use_frontend
from tea_notebook.errors import EnvironmentFailure
from tea_notebook.notebook.cells_fallback import FallbackCells, error_output

TARGET = "tea_notebook.cells"
#: seconds the kernel waits for the page to answer a request
PAGE_TIMEOUT = 10.0
#: seconds after ``post_run_cell`` the page's ``executed`` (with every output) is waited for
EXECUTED_GRACE = 2.0
NO_PAGE = (
    "the notebook did not answer in {seconds:g} s: is the TEA extension installed? see %tea proposals "
    "(without the extension, approve with %%tea approve)"
)


class LabCells:
    """The :class:`~tea_notebook.envs.notebook_cells.CellFrontend` of a kernel: the page through the
    newest ``tea_notebook.cells`` comm, else the fallback."""

    def __init__(self, fallback: FallbackCells, page_timeout: float = PAGE_TIMEOUT):
        self.fallback = fallback
        self.board: ProposalBoard = fallback.board
        self.page_timeout = page_timeout
        self.comms: list[Any] = []
        self.notebook: str | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[str, tuple[threading.Event, dict[str, Any]]] = {}
        self._by_cell: dict[str, Proposal] = {}
        self._lock = threading.Lock()

    # -- which page ---------------------------------------------------------------------------------
    @property
    def comm(self) -> Any:
        """The newest open comm, or None (the fallback is used)."""
        with self._lock:
            return self.comms[-1] if self.comms else None

    @property
    def name(self) -> str:
        """``lab`` while a page is connected, else ``fallback``."""
        return "lab" if self.comm is not None else "fallback"

    def open(self, comm: Any, msg: dict[str, Any]) -> None:
        """A notebook panel opened its comm (``{"hello": 1, "notebook": path}``)."""
        with self._lock:
            self.comms.append(comm)
        data = (msg.get("content") or {}).get("data") or {}
        self.notebook = str(data.get("notebook") or "") or self.notebook
        comm.on_msg(lambda m: self.handle(comm, (m.get("content") or {}).get("data") or {}))
        comm.on_close(lambda _m: self._forget(comm))

    def _forget(self, comm: Any) -> None:
        with self._lock:
            if comm in self.comms:
                self.comms.remove(comm)

    def _send(self, data: dict[str, Any]) -> None:
        comm = self.comm
        if comm is None:
            raise EnvironmentFailure(NO_PAGE.format(seconds=0))
        comm.send(data)

    def _request(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        """Send ``data`` and wait for the page's reply, which :meth:`handle` files under ``key``."""
        event: threading.Event = threading.Event()
        box: dict[str, Any] = {}
        with self._lock:
            self._waiting[key] = (event, box)
        try:
            self._send(data)
            if not event.wait(self.page_timeout):
                raise EnvironmentFailure(NO_PAGE.format(seconds=self.page_timeout))
            return box
        finally:
            with self._lock:
                self._waiting.pop(key, None)

    def _answer(self, key: str, data: dict[str, Any]) -> None:
        with self._lock:
            waiting = self._waiting.get(key)
        if waiting is not None:
            waiting[1].update(data)
            waiting[0].set()

    # -- CellFrontend ---------------------------------------------------------------------------------
    def cells(self) -> list[dict[str, Any]]:
        """The page's cells (``cells_request`` → ``cells``)."""
        if self.comm is None:
            return self.fallback.cells()
        rid = f"r{next(self._ids)}"
        reply = self._request({"type": "cells_request", "id": rid}, f"id:{rid}")
        return list(reply.get("cells") or [])

    def show(self, proposal: Proposal) -> None:
        """Send the proposal; the page inserts the cell (or shows the bar) and answers ``shown``."""
        if self.comm is None:
            self.fallback.show(proposal)
            return
        message = {"type": "proposal", "proposal": proposal.message(), "t_kernel": time.time() * 1000}
        reply = self._request(message, f"proposal:{proposal.id}")
        if reply.get("error"):
            raise EnvironmentFailure(f"the notebook could not show proposal {proposal.id}: {reply['error']}")
        cell_id = reply.get("cell_id")
        if cell_id:
            proposal.cell_id = str(cell_id)
            with self._lock:
                self._by_cell[proposal.cell_id] = proposal

    def settle(self, proposal: Proposal, status: str) -> None:
        """Tell the page how the proposal ended (its badge, its bar)."""
        with self._lock:
            if proposal.cell_id and self._by_cell.get(proposal.cell_id) is proposal:
                self._by_cell.pop(proposal.cell_id)
        if self.comm is None:
            self.fallback.settle(proposal, status)
            return
        self._send({"type": "settled", "proposal": proposal.id, "status": status})

    def origin(self, context_ids: list[str]) -> dict[str, Any] | None:
        """The ``%%agent`` cell a run tree started from (kept by the fallback for both)."""
        return self.fallback.origin(context_ids)

    # -- the page's messages (the kernel's main thread) -------------------------------------------------
    def handle(self, comm: Any, data: dict[str, Any]) -> None:
        """One message from the page."""
        kind = data.get("type")
        try:
            if kind == "cells":
                self._answer(f"id:{data.get('id')}", data)
            elif kind == "shown":
                self._answer(f"proposal:{data.get('proposal')}", data)
            elif kind == "decision":
                self._decision(comm, data)
            elif kind == "executed":
                self._executed(data)
            elif kind == "pending_request":
                comm.send({"type": "pending", "proposals": [self._pending(p) for p in self.board.pending()]})
            elif kind == "hello":
                self.notebook = str(data.get("notebook") or "") or self.notebook
            else:
                comm.send({"type": "error", "message": f"unknown message type {kind!r}"})
        except Exception as exc:  # noqa: BLE001 - the page shows the error; the kernel goes on
            comm.send({"type": "error", "message": f"{type(exc).__name__}: {exc}"})

    def _pending(self, proposal: Proposal) -> dict[str, Any]:
        return {**proposal.message(), "status": proposal.status, "decided": proposal.decided.is_set()}

    def _decision(self, comm: Any, data: dict[str, Any]) -> None:
        proposal = self.board.get(str(data.get("proposal")))
        if proposal is None or proposal.status != "pending":
            comm.send({"type": "settled", "proposal": data.get("proposal"), "status": "stopped"})
            return
        source = data.get("source")
        base = data.get("base_source")
        outcome = proposal.decide(
            str(data.get("decision")),
            source if isinstance(source, str) else None,
            base if isinstance(base, str) else None,
            note=str(data.get("note") or ""),
        )
        if outcome == "conflict":  # the page must not run it; the agent is told by its observation
            comm.send({"type": "settled", "proposal": proposal.id, "status": "conflict"})
        cell_id = data.get("cell_id")
        if isinstance(cell_id, str) and cell_id:
            with self._lock:
                self._by_cell[cell_id] = proposal
            proposal.cell_id = proposal.cell_id or cell_id

    def _executed(self, data: dict[str, Any]) -> None:
        proposal = self.board.get(str(data.get("proposal")))
        if proposal is None:
            return
        outputs = data.get("outputs") or []
        count = data.get("execution_count")
        proposal.ran(
            str(data.get("cell_id") or proposal.cell_id or ""),
            bool(data.get("ok", True)),
            outputs if isinstance(outputs, list) else str(outputs),
            count if isinstance(count, int) else None,
        )

    def post_run_cell(self, result: Any) -> None:
        """IPython's ``post_run_cell``: an approved cell ran (seen by ``info.cell_id``). The page's
        ``executed`` brings every output; if none comes within :data:`EXECUTED_GRACE` seconds (the page
        closed after the click), what the kernel knows is recorded: the value and the error."""
        self.fallback.post_run_cell(result)
        info = getattr(result, "info", None)
        cell_id = getattr(info, "cell_id", None)
        with self._lock:
            proposal = self._by_cell.get(cell_id) if cell_id else None
        if proposal is None or not proposal.decided.is_set() or proposal.finished.is_set():
            return
        outputs: list[dict[str, Any]] = []
        if getattr(result, "result", None) is not None:
            outputs.append({"output_type": "execute_result", "data": {"text/plain": repr(result.result)}})
        error = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
        if error is not None:
            outputs.append(error_output(error))
        count = getattr(result, "execution_count", None)

        def without_page() -> None:
            time.sleep(EXECUTED_GRACE)
            proposal.ran(cell_id, error is None, outputs, count)

        threading.Thread(target=without_page, name="tea-cells-executed", daemon=True).start()


def register(shell: Any) -> LabCells:
    """Make this kernel's notebook the one ``notebook`` environments work in: the comm target (in a
    Jupyter kernel), the fallback and its ``post_run_cell`` hook."""
    fallback = FallbackCells(shell)
    cells = LabCells(fallback)
    if getattr(shell, "kernel", None) is not None:
        try:
            import comm as comm_module

            comm_module.get_comm_manager().register_target(TARGET, cells.open)
        except Exception:  # noqa: BLE001 - no comm support in this kernel: the fallback serves
            pass
    shell.events.register("pre_run_cell", fallback.pre_run_cell)
    shell.events.register("post_run_cell", cells.post_run_cell)
    use_frontend(cells)
    return cells


__all__ = ["EXECUTED_GRACE", "NO_PAGE", "PAGE_TIMEOUT", "TARGET", "LabCells", "register"]
