"""The ``notebook`` environment without the JupyterLab extension: IPython's history as the cells.

Used in classic Notebook, VS Code, nbclient / papermill and plain IPython, wherever no
``tea_notebook.cells`` comm is open. The cells are the inputs of this kernel session (ids ``In[7]``),
their results (``Out``) and the errors their runs raised; cells run without being stored in the history
(nbval runs every cell so) are kept here as ``run[1]``, ``run[2]``… A proposal is printed where the
agent's run shows its output, with how to decide it:

- ``%tea proposals`` lists the pending proposals and puts the first one into the next cell as
  ``%%tea approve p3`` + its code (``set_next_input``, where the front end supports it);
- ``%%tea approve p3`` + code (possibly edited) runs that code in this cell and gives its output to
  the agent; ``%tea approve p3`` runs it as proposed;
- ``%tea reject p3 [reason]`` rejects it: it never runs, and the reason goes to the agent.

``%tea approve`` waits up to :data:`APPEAR_TIMEOUT` seconds for the proposal (a run in the background
may not have reached it yet). Mode ``auto`` needs the extension (nothing here runs code on its own).
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

from tea_notebook.envs.cell_proposals import Proposal, ProposalBoard
from tea_notebook.errors import EnvironmentFailure

#: seconds ``%tea approve`` waits for a proposal to appear
APPEAR_TIMEOUT = 30.0


def error_output(exc: BaseException) -> dict[str, Any]:
    """An exception as an nbformat ``error`` output, its traceback from the cell's own code on (IPython's
    frames left out, as the notebook shows it)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and "IPython" in tb.tb_frame.f_code.co_filename:
        tb = tb.tb_next
    return {
        "output_type": "error",
        "ename": type(exc).__name__,
        "evalue": str(exc),
        "traceback": traceback.format_exception(type(exc), exc, tb),
    }


class FallbackCells:
    """The :class:`~tea_notebook.envs.notebook_cells.CellFrontend` of a kernel without the extension."""

    name = "fallback"

    def __init__(self, shell: Any, board: ProposalBoard | None = None):
        self.shell = shell
        self.board = board or ProposalBoard()
        self._lock = threading.Lock()
        #: outputs kept per execution count: errors of every cell, everything of approved cells
        self.outputs: dict[int, list[dict[str, Any]]] = {}
        #: where each ``%%agent --cells`` run tree started: context id -> {"cell_id", "agent"}
        self.origins: dict[str, dict[str, Any]] = {}
        #: cells run without being stored in IPython's history (nbval's), as cells ``run[n]``
        self.unstored: list[dict[str, Any]] = []
        self._now_unstored = False  # the cell being run is not stored in the history
        self._approving = False  # approve is running the person's code (that run is the approving cell's)
        self._approved: list[dict[str, Any]] | None = None  # what approve ran in an unstored cell

    # -- what the kernel saw ------------------------------------------------------------------
    def pre_run_cell(self, info: Any) -> None:
        """IPython's ``pre_run_cell``: note whether the cell about to run is stored in the history."""
        if not self._approving:
            self._now_unstored = not getattr(info, "store_history", True)

    def post_run_cell(self, result: Any) -> None:
        """IPython's ``post_run_cell``: keep the error of a cell whose run failed (its traceback), and the
        whole of a cell the history does not store."""
        if self._approving:
            return
        count = getattr(result, "execution_count", None)
        error = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
        info = getattr(result, "info", None)
        if info is not None and not getattr(info, "store_history", True):
            self._keep_unstored(str(getattr(info, "raw_cell", "") or ""), result, error)
            return
        if isinstance(count, int) and error is not None:
            with self._lock:
                self.outputs.setdefault(count, []).append(error_output(error))

    def _keep_unstored(self, source: str, result: Any, error: BaseException | None) -> None:
        approved, self._approved = self._approved, None
        if not source.strip():
            return
        outputs = approved
        if outputs is None:
            outputs = []
            if getattr(result, "result", None) is not None:
                outputs.append({"output_type": "execute_result", "data": {"text/plain": _repr(result.result)}})
            if error is not None:
                outputs.append(error_output(error))
        with self._lock:
            self.unstored.append({"id": f"run[{len(self.unstored) + 1}]", "source": source, "outputs": outputs})

    def remember(self, context_id: str, cell_id: str | None, agent: str) -> None:
        """Note the ``%%agent`` cell a run tree (its job context) was started from."""
        self.origins[context_id] = {"cell_id": cell_id or f"In[{self.current_count()}]", "agent": agent}

    def current_count(self) -> int:
        """The execution count of the cell being run (its input is already in the history)."""
        history = getattr(getattr(self.shell, "history_manager", None), "input_hist_raw", None)
        inputs = history if history is not None else self.shell.user_ns.get("In", [])
        return max(len(inputs) - 1, 0)

    # -- CellFrontend ---------------------------------------------------------------------------
    def cells(self) -> list[dict[str, Any]]:
        """This session's inputs as cells ``In[n]``, with their results and errors."""
        history = getattr(getattr(self.shell, "history_manager", None), "input_hist_raw", None)
        inputs = list(history if history is not None else self.shell.user_ns.get("In", []))
        results = dict(self.shell.user_ns.get("Out", {}) or {})
        with self._lock:
            kept = {n: list(v) for n, v in self.outputs.items()}
        cells = []
        for n, source in enumerate(inputs):
            if n == 0:
                continue
            outputs = list(kept.get(n, []))
            if n in results and not any(o.get("output_type") == "execute_result" for o in outputs):
                outputs.append({"output_type": "execute_result", "data": {"text/plain": _repr(results[n])}})
            cells.append(
                {
                    "id": f"In[{n}]",
                    "index": n - 1,
                    "cell_type": "code",
                    "source": str(source).rstrip("\n"),
                    "execution_count": n,
                    "outputs": outputs,
                    "tea": None,
                }
            )
        with self._lock:
            unstored = [dict(c) for c in self.unstored]
        for cell in unstored:
            cell.update(index=len(cells), cell_type="code", execution_count=None, tea=None)
            cells.append(cell)
        return cells

    def show(self, proposal: Proposal) -> None:
        """Print the proposal and how to decide it (where the agent's run shows its output)."""
        if proposal.mode == "auto":
            raise EnvironmentFailure(
                "auto mode needs the TEA JupyterLab extension (this front end cannot run a cell by itself): "
                "use --cells ask or read here, and approve with %%tea approve"
            )
        what = {"new": "a new cell", "edit": f"an edit of {proposal.cell_id}", "run": f"running {proposal.cell_id}"}
        lines = [
            f"── proposal {proposal.id} by agent {proposal.agent or '?'} (run {proposal.run}, step {proposal.step}): "
            f"{what.get(proposal.kind, proposal.kind)}",
        ]
        if proposal.explanation:
            lines.append(f"   why: {proposal.explanation}")
        lines.append(proposal.diff.rstrip("\n") if proposal.diff else proposal.code.rstrip("\n"))
        grant = " (this lets the run run the cells you approve)" if proposal.needs_grant else ""
        lines.append(
            f"── to run it{grant}: a cell with %%tea approve {proposal.id} and the code (edit it there if you like), "
            f"or %tea approve {proposal.id}; to reject it: %tea reject {proposal.id} [reason]; "
            "%tea proposals lists them"
        )
        print("\n".join(lines), flush=True)

    def settle(self, proposal: Proposal, status: str) -> None:
        """Say how a proposal ended, unless the person's own cell just did (approve and reject print)."""
        if status in ("stopped", "conflict"):
            print(f"── proposal {proposal.id}: {status}", flush=True)

    def origin(self, context_ids: list[str]) -> dict[str, Any] | None:
        """The ``%%agent`` cell the run tree started from (see :meth:`remember`)."""
        return next((self.origins[i] for i in context_ids if i in self.origins), None)

    # -- the person's side ----------------------------------------------------------------------
    def wait_for(self, proposal_id: str, timeout: float | None = None) -> Proposal:
        """The pending proposal ``proposal_id``, waiting up to ``timeout`` seconds (default
        :data:`APPEAR_TIMEOUT`) for it to appear; ValueError saying why it cannot be decided."""
        timeout = APPEAR_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            proposal = self.board.get(proposal_id)
            if proposal is not None:
                break
            if time.monotonic() > deadline:
                known = ", ".join(p.id for p in self.board.pending()) or "none"
                raise ValueError(
                    f"no proposal {proposal_id!r} appeared within {timeout:g} s (pending: {known}; %tea proposals)"
                )
            time.sleep(0.05)
        if proposal.status != "pending" or proposal.decided.is_set():
            raise ValueError(f"proposal {proposal_id} is no longer waiting for a decision ({proposal.status})")
        return proposal

    def approve(self, proposal_id: str, code: str | None = None) -> Proposal:
        """Run the proposal's code (``code``: the person's edit of it) in the current cell; its outputs
        show here and go to the agent."""
        from IPython.utils.capture import capture_output

        proposal = self.wait_for(proposal_id)
        source = proposal.code if code is None or not code.strip() else code.rstrip("\n")
        if proposal.decide("run", source) == "late":
            raise ValueError(f"proposal {proposal_id} was decided meanwhile")
        unstored = self._now_unstored
        count = self.current_count()
        what = "your edit of it" if source != proposal.code else "it as proposed"
        print(f"── proposal {proposal.id} ({proposal.kind}, agent {proposal.agent or '?'}): running {what}", flush=True)
        self._approving = True
        try:
            with capture_output() as captured:
                result = self.shell.run_cell(source, store_history=False)
        finally:
            self._approving = False
        captured.show()
        outputs: list[dict[str, Any]] = []
        for stream, text in (("stdout", captured.stdout), ("stderr", captured.stderr)):
            if text:
                outputs.append({"output_type": "stream", "name": stream, "text": text})
        for shown in captured.outputs:
            outputs.append({"output_type": "display_data", "data": dict(getattr(shown, "data", {}) or {})})
        # a kernel publishes the last value as a result; a terminal shell printed it (``Out[n]:``) with stdout
        printed = type(getattr(self.shell, "displayhook", None)).__module__.startswith("IPython.")
        if getattr(result, "result", None) is not None and not printed:
            outputs.append({"output_type": "execute_result", "data": {"text/plain": _repr(result.result)}})
        error = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
        if error is not None:
            outputs.append(error_output(error))
        if unstored:  # this cell becomes run[n] when it ends (post_run_cell), with these outputs
            self._approved = outputs
            with self._lock:
                ran_as = f"run[{len(self.unstored) + 1}]"
            proposal.ran(ran_as, error is None, outputs, None)
            return proposal
        with self._lock:
            self.outputs[count] = outputs
        proposal.ran(f"In[{count}]", error is None, outputs, count)
        return proposal

    def reject(self, proposal_id: str, reason: str = "") -> Proposal:
        """Reject the proposal: it never runs; ``reason`` goes to the agent. Waits for it to appear, as
        :meth:`approve` does (a notebook run top to bottom reaches this cell before the agent proposes)."""
        proposal = self.wait_for(proposal_id)
        proposal.decide("reject", note=reason)
        return proposal

    def listing(self) -> str:
        """The pending proposals, as ``%tea proposals`` shows them."""
        pending = self.board.pending()
        if not pending:
            return "no proposal is waiting"
        rows = []
        for p in pending:
            target = f" {p.cell_id}" if p.cell_id else ""
            first = next((line for line in p.code.splitlines() if line.strip()), "")
            rows.append(f"{p.id}  {p.kind}{target}  agent {p.agent or '?'} · run {p.run} · step {p.step}  {first[:80]}")
        return "\n".join(rows)


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # noqa: BLE001 - a value that cannot show itself is named instead
        return f"<{type(value).__name__}: repr failed ({type(exc).__name__})>"


__all__ = ["APPEAR_TIMEOUT", "FallbackCells", "error_output"]
