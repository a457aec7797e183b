"""What the ``notebook`` environment and the notebooks that show it share, without the environment
machinery (so ``%load_ext tea_notebook`` stays light): a :class:`Proposal` and the :class:`ProposalBoard`
of one notebook, the :class:`CellFrontend` protocol a notebook implements, the process's current
notebook (:func:`use_frontend`) and how cell outputs read as text.

The environment itself is :mod:`tea_notebook.envs.notebook_cells`, which re-exports these names.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from tea_notebook.errors import EnvironmentFailure

#: characters of one cell's source and outputs the model is shown (the notebook keeps everything)
MAX_CHARS = 6000
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def source_hash(source: str) -> str:
    """sha256 of a cell's source (what an edit's ``base_hash`` holds)."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters for the model, saying how much was left out."""
    return text if len(text) <= limit else f"{text[:limit]}\n[clipped: {len(text) - limit} more characters]"


def _joined(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def outputs_text(outputs: list[dict[str, Any]]) -> str:
    """nbformat outputs as the text a person reads: streams, ``text/plain`` of results and displays,
    errors as ``ename: evalue`` and their traceback (ANSI colours stripped)."""
    parts = []
    for out in outputs or []:
        kind = out.get("output_type")
        if kind == "stream":
            parts.append(_joined(out.get("text")))
        elif kind in ("execute_result", "display_data"):
            data = out.get("data") or {}
            if "text/plain" in data:
                parts.append(_joined(data["text/plain"]))
            elif data:
                parts.append(f"[{', '.join(sorted(data))}]")
        elif kind == "error":
            trace = "\n".join(ANSI.sub("", line) for line in out.get("traceback") or [])
            parts.append(trace or f"{out.get('ename')}: {out.get('evalue')}")
    return ANSI.sub("", "\n".join(p.rstrip("\n") for p in parts if p))


def cell_error(outputs: list[dict[str, Any]]) -> dict[str, str] | None:
    """``{"ename", "evalue"}`` of a cell's error output, or None."""
    for out in outputs or []:
        if out.get("output_type") == "error":
            return {"ename": str(out.get("ename", "")), "evalue": str(out.get("evalue", ""))}
    return None


@dataclass
class Proposal:
    """One proposed cell action waiting for (or past) the person's decision.

    A front end shows it, then calls :meth:`decide` (from any thread) with the person's choice and
    :meth:`ran` once the approved cell has run; the environment waits for both."""

    id: str
    kind: str
    code: str
    run: str = ""
    step: int = 0
    cell_id: str | None = None
    after: str | None = None
    diff: str = ""
    explanation: str = ""
    mode: str = "ask"
    needs_grant: bool = False
    base_hash: str | None = None
    agent: str = ""
    created: float = field(default_factory=time.time)
    status: str = "pending"
    decision: dict[str, Any] | None = None
    outcome: dict[str, Any] | None = None
    decided: threading.Event = field(default_factory=threading.Event, repr=False)
    finished: threading.Event = field(default_factory=threading.Event, repr=False)

    def message(self) -> dict[str, Any]:
        """The proposal as the JupyterLab extension receives it (``{"type": "proposal", "proposal": …}``)."""
        return {
            "id": self.id,
            "run": self.run,
            "step": self.step,
            "kind": self.kind,
            "cell_id": self.cell_id,
            "after": self.after,
            "code": self.code,
            "diff": self.diff,
            "explanation": self.explanation,
            "mode": self.mode,
            "needs_grant": self.needs_grant,
            "base_hash": self.base_hash,
            "agent": self.agent,
        }

    def decide(
        self,
        decision: str,
        source: str | None = None,
        base_source: str | None = None,
        note: str = "",
        by: str = "person",
    ) -> str:
        """Record the decision (``run`` or ``reject``; the first one counts) and return what it came to:
        ``run``, ``edit_run``, ``reject``, ``conflict`` (an edit whose target changed since the agent read
        it: ``base_source`` is the target's source at the click) or ``late`` (already decided)."""
        if decision not in ("run", "reject"):
            raise ValueError(f"a decision is 'run' or 'reject', not {decision!r}")
        if self.decided.is_set():
            return "late"
        code = self.code if source is None else source
        if decision == "reject":
            outcome = "reject"
        elif self.kind == "edit" and base_source is not None and source_hash(base_source) != self.base_hash:
            outcome = "conflict"
        else:
            outcome = "run" if code == self.code else "edit_run"
        self.decision = {"decision": outcome, "code": code, "note": note, "by": by}
        self.decided.set()
        return outcome

    def ran(
        self,
        cell_id: str | None,
        ok: bool,
        outputs: list[dict[str, Any]] | str,
        execution_count: int | None = None,
        error: dict[str, str] | None = None,
    ) -> None:
        """Record the approved cell's run: its outputs (nbformat outputs or text) and error."""
        if self.finished.is_set():
            return
        if not isinstance(outputs, str):
            error = error or cell_error(outputs)
            outputs = outputs_text(outputs)
        self.outcome = {
            "cell_id": cell_id,
            "ok": bool(ok) and error is None,
            "outputs": outputs,
            "execution_count": execution_count,
            "error": error,
        }
        self.finished.set()


class ProposalBoard:
    """The proposals of one notebook (kernel): numbered ``p1``, ``p2`` …, at most one pending."""

    def __init__(self) -> None:
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self.proposals: dict[str, Proposal] = {}

    def new_id(self) -> str:
        """The next proposal id."""
        return f"p{next(self._numbers)}"

    def open(self, proposal: Proposal) -> None:
        """Add a pending proposal; EnvironmentFailure when another one is waiting for the person."""
        with self._lock:
            waiting = [p.id for p in self.proposals.values() if p.status == "pending"]
            if waiting:
                raise EnvironmentFailure(
                    f"proposal {waiting[0]} is waiting for the person: wait for its decision before proposing again"
                )
            self.proposals[proposal.id] = proposal

    def get(self, proposal_id: str) -> Proposal | None:
        """The proposal ``proposal_id`` (pending or not), or None."""
        return self.proposals.get(proposal_id)

    def pending(self) -> list[Proposal]:
        """The proposals waiting for the person's decision or for their cell to run."""
        return [p for p in list(self.proposals.values()) if p.status == "pending"]


class CellFrontend(Protocol):
    """What shows the notebook to the ``notebook`` environment (the JupyterLab comm, the fallback, a test's).

    Methods are called from the agent's thread; a front end that needs the kernel's main thread
    (a comm) hands the work over and waits. Each raises :class:`EnvironmentFailure` with a sentence
    the model and the person can act on when the notebook does not answer."""

    @property
    def name(self) -> str:
        """``lab``, ``fallback``, … (said in the environment's state)."""
        ...

    @property
    def board(self) -> ProposalBoard:
        """The proposals of this notebook."""
        ...

    def cells(self) -> list[dict[str, Any]]:
        """The notebook's cells in order: ``{"id", "index", "cell_type", "source", "execution_count",
        "outputs": [nbformat outputs], "tea": metadata or None}``."""
        ...

    def show(self, proposal: Proposal) -> None:
        """Show a proposal to the person (a new cell: insert it and set ``proposal.cell_id``); in mode
        ``auto`` the front end runs it at once. Returns when it is shown."""
        ...

    def settle(self, proposal: Proposal, status: str) -> None:
        """Tell the person how a proposal ended: ``ran``, ``rejected``, ``conflict`` or ``stopped``."""
        ...

    def origin(self, context_ids: list[str]) -> dict[str, Any] | None:
        """Where the run tree with one of ``context_ids`` was started: ``{"cell_id", "agent"}`` of its
        ``%%agent`` cell, or None (new cells then go at the end)."""
        ...


_frontend: CellFrontend | None = None


def use_frontend(frontend: CellFrontend | None) -> None:
    """Make ``frontend`` the notebook every ``notebook`` environment of this process works in
    (``%load_ext tea_notebook`` calls it; None forgets it)."""
    global _frontend
    _frontend = frontend


def current_frontend() -> CellFrontend | None:
    """The notebook set by :func:`use_frontend`, or None outside a notebook."""
    return _frontend


__all__ = [
    "MAX_CHARS",
    "CellFrontend",
    "Proposal",
    "ProposalBoard",
    "cell_error",
    "clip",
    "current_frontend",
    "outputs_text",
    "source_hash",
    "use_frontend",
]
