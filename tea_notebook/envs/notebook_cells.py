"""The ``notebook`` environment: the person's notebook cells as the agent's actions.

The agent reads the cells the person sees (``list_cells``, ``read_cell``: source and outputs, clipped
to the model, never changed), proposes a new cell (``propose_cell``), an edit of a cell
(``propose_edit``, shown as a diff) or running a cell as it is (``run_cell``). A proposal waits for
the person's decision, whose outcome is the action's observation: run as proposed, run after the
person's edit, rejected (it never runs), or a conflict (the cell changed since the agent read it:
nothing is overwritten). Approved cells run in the live kernel as the notebook's own cells.

The approval mode is the run's (:mod:`tea_notebook.runtime.cell_modes`): ``ask`` and ``read`` wait
for the person (the first approval in a run grants it ``cells.run``, recorded on the ``cell_decided``
event); ``auto`` runs as proposed and needs ``kernel.write`` given up front.

What shows the notebook is a :class:`CellFrontend`: the JupyterLab extension through a comm, or the
fallback for other front ends (IPython's history as cells, ``%tea approve``); both live in
``tea_notebook.notebook`` and register themselves with :func:`use_frontend` when ``%load_ext
tea_notebook`` runs. A test may hand one to the environment: ``ws.envs.add(NotebookCells, frontend=f)``.
Every proposal, decision and run is an event of the run (``cell_proposed``, ``cell_decided``,
``cell_ran``), so trajectories, forks and exports see them.
"""

from __future__ import annotations

import difflib
import json
import threading
import time
from pathlib import Path
from typing import Any, cast

from tea_notebook.envs.base import Environment, EnvironmentFailure, action
from tea_notebook.envs.cell_proposals import (
    MAX_CHARS,
    CellFrontend,
    Proposal,
    ProposalBoard,
    cell_error,
    clip,
    current_frontend,
    outputs_text,
    source_hash,
    use_frontend,
)
from tea_notebook.redaction import redact
from tea_notebook.runtime.cell_modes import RUN_GRANT, WRITE_GRANT, mode_of
from tea_notebook.runtime.event_types import CellDecidedEvent, CellProposalKind, CellProposedEvent, CellRanEvent

#: seconds a proposal waits for the person (under an agent's default tool time limit of 300 s)
DECISION_TIMEOUT = 280.0


class NotebookCells(Environment):
    """The person's notebook: read its cells; propose new cells, edits and runs that the person approves."""

    name = "notebook"
    description = (
        "The person's notebook: read its cells (source and outputs), propose a new cell, an edit of a cell or "
        "running a cell; the person approves or rejects each proposal, and its outcome comes back."
    )
    rules = (
        "Cells are named by the ids list_cells shows. A proposal waits for the person: one at a time. Read a cell "
        "before proposing an edit of it. A rejected proposal never runs; respect the person's edits and notes."
    )
    category = "notebook"

    def __init__(
        self,
        folder: Path,
        context: Any = None,
        *,
        frontend: CellFrontend | None = None,
        max_chars: int = MAX_CHARS,
        decision_timeout: float = DECISION_TIMEOUT,
    ):
        super().__init__(folder, context)
        self._given = frontend
        self.frontend: CellFrontend | None = None
        self.max_chars = int(max_chars)
        self.decision_timeout = float(decision_timeout)
        self.action_timeout = self.decision_timeout * 2 + 30  # a decision, then the cell's own run
        #: sha256 of each cell's source when the agent read it (an edit's base)
        self.read_hashes: dict[str, str] = {}
        #: the last cell this session inserted (the next new cell goes below it)
        self.last_inserted: str | None = None
        #: how each proposal of this session ended, for the state: ``[(id, status)]``
        self.history: list[tuple[str, str]] = []

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Attach to the notebook: the front end given, else the one ``%load_ext tea_notebook`` set."""
        self.frontend = self._given or current_frontend()
        if self.frontend is None:
            raise EnvironmentFailure(
                "the notebook environment needs a notebook with a running kernel: run %load_ext tea_notebook in a "
                "notebook (or give it a front end: ws.envs.add(NotebookCells, frontend=...))"
            )

    async def stop(self) -> None:
        """Withdraw a proposal of this session still waiting (the run ended) and detach."""
        if self.frontend is not None:
            for proposal in self.frontend.board.pending():
                if proposal.run and proposal.run == self._run_id():
                    self._settle(proposal, "stopped")
        self.frontend = None

    # -- helpers ---------------------------------------------------------------------------
    @property
    def fe(self) -> CellFrontend:
        """The attached front end."""
        if self.frontend is None:
            raise EnvironmentFailure("the notebook environment is not started")
        return self.frontend

    def _grants(self) -> set[str]:
        grants = getattr(self.context, "grants", None)
        return grants if isinstance(grants, set) else set()

    def _mode(self) -> str:
        return mode_of(self._grants())

    def _run_id(self) -> str:
        node = self.context
        while node is not None and not getattr(node, "is_run", False):
            node = getattr(node, "parent", None)
        return getattr(node, "id", "") if node is not None else ""

    def _context_ids(self) -> list[str]:
        ids, node = [], self.context
        while node is not None:
            ids.append(str(getattr(node, "id", "")))
            node = getattr(node, "parent", None)
        return ids

    def _notice(self, kind: str, data: Any) -> int | None:
        notice = getattr(self.context, "notice", None)
        return notice(kind, data) if notice is not None else None

    def _cells(self) -> list[dict[str, Any]]:
        return self.fe.cells()

    def _cell(self, cell_id: str) -> dict[str, Any]:
        cells = self._cells()
        for cell in cells:
            if cell.get("id") == cell_id:
                return cell
        known = ", ".join(str(c.get("id")) for c in cells[-20:]) or "none"
        raise EnvironmentFailure(
            f"no cell {cell_id!r} in the notebook (deleted meanwhile?); list_cells shows the ids (last ones: {known})"
        )

    def _settle(self, proposal: Proposal, status: str) -> None:
        proposal.status = status
        self.history.append((proposal.id, status))
        try:
            self.fe.settle(proposal, status)
        except Exception:  # noqa: BLE001 - the page is gone: the outcome is recorded all the same
            pass

    # -- reading ---------------------------------------------------------------------------
    @action
    def list_cells(self) -> str:
        """List the notebook's cells: id, position, type, execution count, first line, and the error of
        a cell whose last run failed.

        Returns:
            One cell per line: "id · #index · type [count] · first line (· error: Name)".
        """
        lines = []
        for cell in self._cells():
            source = str(cell.get("source") or "")
            first = next((line for line in source.splitlines() if line.strip()), "")
            count = cell.get("execution_count")
            kind = str(cell.get("cell_type") or "code") + (f" [{count}]" if count is not None else "")
            error = cell_error(cell.get("outputs") or [])
            tea = cell.get("tea") or {}
            parts = [str(cell.get("id")), f"#{cell.get('index')}", kind, first[:100]]
            if tea.get("proposal"):
                parts.append(f"agent's {tea['proposal']} ({tea.get('status', '')})")
            if error:
                parts.append(f"error: {error['ename']}")
            lines.append(" · ".join(parts))
        return redact("\n".join(lines) if lines else "the notebook has no cells")

    @action
    def read_cell(self, cell_id: str) -> str:
        """Read one cell: its source and its outputs as text (long ones clipped); nothing changes.

        Args:
            cell_id: the cell's id as list_cells shows it
        """
        cell = self._cell(cell_id)
        source = str(cell.get("source") or "")
        self.read_hashes[cell_id] = source_hash(source)
        outputs = outputs_text(cell.get("outputs") or [])
        head = f"cell {cell_id} ({cell.get('cell_type', 'code')}, execution count {cell.get('execution_count')})"
        body = f"{head}\nsource:\n{clip(source, self.max_chars)}"
        if outputs:
            body += f"\noutputs:\n{clip(outputs, self.max_chars)}"
        return redact(body)

    # -- proposing -------------------------------------------------------------------------
    @action
    async def propose_cell(self, code: str, after_cell_id: str = "", explanation: str = "") -> str:
        """Propose a new code cell; it runs in the notebook once the person approves it (they may edit it).

        Args:
            code: the cell's Python code
            after_cell_id: insert below this cell (default: below your own cell or your last new cell)
            explanation: one sentence for the person: why this cell

        Returns:
            JSON: proposal, decision ("ran", "edited and ran", "rejected"), cell_id, code (what ran),
            outputs, error, note.
        """
        if not code.strip():
            raise EnvironmentFailure("propose_cell needs the cell's code")
        after = after_cell_id.strip() or None
        if after is not None:
            self._cell(after)
        else:
            origin = self.fe.origin(self._context_ids()) or {}
            after = self.last_inserted or origin.get("cell_id")
        return await self._propose("new", code, None, after, explanation, None)

    @action
    async def propose_edit(self, cell_id: str, code: str, explanation: str = "") -> str:
        """Propose new source for an existing cell (shown as a diff); once approved the cell runs with it.
        Read the cell first: if the person changed it since, the edit is refused as a conflict.

        Args:
            cell_id: the cell to change, as list_cells shows it
            code: the cell's whole new source
            explanation: one sentence for the person: what the edit fixes

        Returns:
            JSON: proposal, decision ("ran", "edited and ran", "rejected", "conflict"), cell_id, code, outputs,
            error, note.
        """
        cell = self._cell(cell_id)
        current = str(cell.get("source") or "")
        read = self.read_hashes.get(cell_id)
        if read is not None and read != source_hash(current):
            raise EnvironmentFailure(
                f"cell {cell_id} changed since you read it (the person edited or ran it): read_cell it again first"
            )
        base = source_hash(current)
        # lines without their ends, joined by "\n": a last line with no newline stays a line of its own
        diff = "\n".join(
            difflib.unified_diff(
                current.splitlines(), code.splitlines(), f"{cell_id} (now)", f"{cell_id} (proposed)", lineterm=""
            )
        )
        return await self._propose("edit", code, cell_id, None, explanation, base, diff)

    @action
    async def run_cell(self, cell_id: str) -> str:
        """Run an existing cell as it is (the person approves it unless the run is in auto mode).

        Args:
            cell_id: the cell to run, as list_cells shows it
        """
        cell = self._cell(cell_id)
        if cell.get("cell_type", "code") != "code":
            raise EnvironmentFailure(f"cell {cell_id} is a {cell.get('cell_type')} cell: only code cells run")
        source = str(cell.get("source") or "")
        return await self._propose("run", source, cell_id, None, "", source_hash(source))

    async def _propose(
        self,
        kind: str,
        code: str,
        cell_id: str | None,
        after: str | None,
        explanation: str,
        base_hash: str | None,
        diff: str = "",
    ) -> str:
        import asyncio

        fe = self.fe
        grants = self._grants()
        mode = self._mode()
        if mode == "auto" and WRITE_GRANT not in grants:
            raise EnvironmentFailure(
                "auto mode runs cells without asking and needs the kernel.write grant given up front "
                "(%%agent NAME --cells auto --grant kernel.write)"
            )
        origin = fe.origin(self._context_ids()) or {}
        proposal = Proposal(
            id=fe.board.new_id(),
            kind=kind,
            code=code,
            run=self._run_id(),
            cell_id=cell_id,
            after=after,
            diff=diff,
            explanation=explanation,
            mode=mode,
            needs_grant=mode != "auto" and not ({RUN_GRANT, WRITE_GRANT} & grants),
            base_hash=base_hash,
            agent=str(origin.get("agent") or ""),
        )
        fe.board.open(proposal)  # refuses while another proposal waits
        proposed = CellProposedEvent(
            proposal=proposal.id,
            kind=cast(CellProposalKind, kind),
            cell_id=cell_id,
            after=after,
            code=code,
            base_hash=base_hash,
            diff=diff,
            explanation=explanation,
            mode=mode,
        )
        proposal.step = self._notice("cell_proposed", proposed) or 0
        if mode == "auto":  # decided before it is shown: the front end runs it at once
            proposal.decide("run", by="auto")
        try:
            await asyncio.to_thread(fe.show, proposal)
        except BaseException:
            self._settle(proposal, "stopped")
            raise
        if not await self._wait(proposal.decided):
            return self._withdrawn(proposal, "decide")
        decision = dict(proposal.decision or {})
        granted = False
        if decision["decision"] in ("run", "edit_run") and proposal.needs_grant:
            grants.add(RUN_GRANT)
            granted = True
        decided = CellDecidedEvent(
            proposal=proposal.id,
            decision="reject" if decision["decision"] in ("reject", "conflict") else decision["decision"],
            code=decision["code"],
            by="auto" if decision.get("by") == "auto" else "person",
            grant=granted,
        )
        if decision["decision"] == "conflict":
            decided["note"] = "conflict: the cell changed since the agent read it; nothing was overwritten"
        elif decision.get("note"):
            decided["note"] = str(decision["note"])
        self._notice("cell_decided", decided)
        if decision["decision"] in ("reject", "conflict"):
            status = "conflict" if decision["decision"] == "conflict" else "rejected"
            self._settle(proposal, status)
            note = decision.get("note") or ""
            if status == "conflict":
                note = (
                    f"the person changed cell {cell_id} since you read it; nothing was overwritten: read_cell it "
                    "again and propose the edit on its new source"
                )
            return self._observation(proposal, "conflict" if status == "conflict" else "rejected", note=note)
        if not await self._wait(proposal.finished):
            return self._withdrawn(proposal, "run")
        outcome = dict(proposal.outcome or {})
        outputs = clip(redact(str(outcome.get("outputs") or "")), self.max_chars)
        ran = CellRanEvent(
            proposal=proposal.id,
            cell_id=outcome.get("cell_id"),
            ok=bool(outcome.get("ok")),
            execution_count=outcome.get("execution_count"),
            outputs=outputs,
            error=outcome.get("error"),
        )
        self._notice("cell_ran", ran)
        self._settle(proposal, "ran")
        ran_id = outcome.get("cell_id") or proposal.cell_id
        if kind == "new" and ran_id:
            self.last_inserted = str(ran_id)
        if ran_id:
            self.read_hashes[str(ran_id)] = source_hash(decision["code"])
        said = "ran" if decision["decision"] == "run" else "edited and ran"
        return self._observation(
            proposal,
            said,
            cell_id=ran_id,
            code=decision["code"],
            outputs=outputs,
            error=outcome.get("error"),
            note=str(decision.get("note") or ""),
        )

    async def _wait(self, event: threading.Event) -> bool:
        """Wait for ``event`` without holding a thread; False when the run was stopped or time ran out."""
        import asyncio

        deadline = time.monotonic() + self.decision_timeout
        cancel = getattr(self.context, "cancel", None)
        while not event.is_set():
            if (cancel is not None and cancel.is_set()) or time.monotonic() > deadline:
                return event.is_set()
            await asyncio.sleep(0.02)
        return True

    def _withdrawn(self, proposal: Proposal, what: str) -> str:
        self._settle(proposal, "stopped")
        cancel = getattr(self.context, "cancel", None)
        why = (
            "the run was stopped"
            if cancel is not None and cancel.is_set()
            else f"the person did not {what} within {self.decision_timeout:g} s"
        )
        return self._observation(proposal, "withdrawn", note=f"{why}; proposal {proposal.id} was withdrawn")

    def _observation(self, proposal: Proposal, decision: str, **fields: Any) -> str:
        out: dict[str, Any] = {
            "proposal": proposal.id,
            "decision": decision,
            "cell_id": fields.get("cell_id", proposal.cell_id),
            "code": fields.get("code"),
            "outputs": fields.get("outputs", ""),
            "error": fields.get("error"),
            "note": fields.get("note", ""),
        }
        return json.dumps(out, ensure_ascii=False)

    # -- what the prompt shows ---------------------------------------------------------------
    def state(self) -> str:
        """The approval mode and how this session's proposals ended (no call to the page)."""
        if self.frontend is None:
            return "notebook: not attached"
        mode = self._mode()
        granted = "yes" if {RUN_GRANT, WRITE_GRANT} & self._grants() else "not yet (the first approval grants it)"
        done = ", ".join(f"{p} {s}" for p, s in self.history[-8:]) or "none yet"
        pending = [p.id for p in self.frontend.board.pending()]
        return f"notebook ({self.frontend.name}): mode {mode}; may run cells: {granted}; proposals: {done}" + (
            f"; waiting: {', '.join(pending)}" if pending else ""
        )


__all__ = [
    "DECISION_TIMEOUT",
    "MAX_CHARS",
    "CellFrontend",
    "NotebookCells",
    "Proposal",
    "ProposalBoard",
    "cell_error",
    "clip",
    "current_frontend",
    "outputs_text",
    "source_hash",
    "use_frontend",
]
