"""A run's family and two runs side by side.

:class:`Branches` is the tree of a run's forks and resumes (forks of forks too), each branch with
its status, steps, tokens, cost, what its fork changed and where it first departed from the run it
was forked from (``ws.branches(run)``, ``%tea branches RUN``). :class:`Comparison` puts two runs next
to each other: the first step where they differ and how (the comparison a fork makes live, see
:mod:`tea_notebook.runtime.divergence`), then their steps from there, their answers, status and usage
(``ws.compare(a, b)``).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from tea_notebook.errors import NotFoundError
from tea_notebook.models.client import display_name
from tea_notebook.runtime.divergence import (
    Divergence,
    End,
    RunNames,
    StepFacts,
    first_departure,
    stored_facts,
    texts_alike,
)
from tea_notebook.runtime.records import RunSummary

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost

#: forks of forks followed at most this deep (a family is a tree; this only guards a damaged store)
MAX_DEPTH = 50


@dataclass
class Branch(RunSummary):
    """One run of a family: its figures, where it came from and how it ended."""

    forked_from: str | None = None
    fork_step: int | None = None
    how: str = ""
    children: list["Branch"] = field(default_factory=list)
    #: where this fork first departed from the run it was forked from (None: nowhere so far, or no fork)
    divergence: Divergence | None = None

    @property
    def departs(self) -> str:
        """Where a fork first departed from its original, in words ("step 5: different arguments"),
        "none" when it reproduced it; "" for the first run and a resume (nothing to compare)."""
        if not self.forked_from or self.how == "resumed":
            return ""
        if self.divergence is not None:
            return self.divergence.text()
        return "none so far" if self.status == "running" else "none"

    @property
    def origin(self) -> str:
        """How this branch was made and where ("observation of action 1 edited at step 3"); "" for the first run."""
        word = "after" if self.how == "resumed" else "at"  # a resume goes on after its last finished step
        at = f" {word} step {self.fork_step}" if self.fork_step is not None and self.forked_from else ""
        return f"{self.how}{at}" if self.how else ""

    @classmethod
    def of(cls, ws: "RunHost", row: dict, steps: int, how: str = "") -> "Branch":
        """The branch of a run row with ``steps`` steps, its tokens and cost summed over its sub-runs."""
        prompt, completion, cost = ws.db.model_usage(ws.db.descendants(row["id"]))
        return cls(
            row["id"], row["agent"], row["task"], row["model"], row["status"], row["answer"] or "", steps, prompt,
            completion, cost, row["forked_from"], row["fork_step"], how,
        )  # fmt: skip

    def walk(self, depth: int = 0) -> list[tuple[int, "Branch"]]:
        """This branch and those under it, depth first, with their depth."""
        out = [(depth, self)]
        for c in self.children:
            out.extend(c.walk(depth + 1))
        return out


def _how(started: dict[str, Any]) -> str:
    """What a fork did, in a few words."""
    if started.get("resumed_from"):
        return "resumed"
    edit = started.get("edit") or {}
    kind = edit.get("kind")
    words = {
        "observation": f"observation of action {edit.get('action')} edited",
        "actions": "actions edited",
        "context": "context edited",
        "message": "message edited",
        "stage": "stage configuration edited",
        "sub_agent": f"{edit.get('agent')} forked at its step {edit.get('sub_step')}",
    }
    text = words.get(kind, "forked") if kind else "forked"
    if started.get("rerun_from"):
        text += f", tools re-executed from step {started['rerun_from']}"
    return text


@dataclass
class Branches:
    """The family of a run as a tree (``root``: the first run, from which the others descend)."""

    root: Branch
    asked: str

    @classmethod
    def load(cls, ws: "RunHost", run_id: str) -> "Branches":
        """The family of ``run_id`` (an id prefix is enough; a nested run's family is its top run's)."""
        row = ws.db.run_row(run_id)
        if row is None:
            raise NotFoundError(f"no run {run_id!r} in {ws.path}")
        asked = row["id"]
        for _ in range(MAX_DEPTH * 20):
            up = row["parent_id"] or row["forked_from"]
            parent = ws.db.run_row(up) if up else None
            if parent is None:
                break
            row = parent
        rows: dict[str, dict] = {row["id"]: row}
        frontier = [row["id"]]
        for _ in range(MAX_DEPTH):
            found = [r for r in ws.db.forks_of(frontier) if r["id"] not in rows]
            if not found:
                break
            rows.update((r["id"], r) for r in found)
            frontier = [r["id"] for r in found]
        started: dict[str, dict[str, Any]] = {}
        diverged: dict[str, dict[str, Any]] = {}
        for run, type_, _, raw in ws.db.run_events_of_type(list(rows), ["run_started", "diverged"]):
            (started if type_ == "run_started" else diverged).setdefault(run, json.loads(raw))
        counts = ws.db.step_counts(list(rows))
        nodes = {
            rid: Branch.of(ws, r, counts.get(rid, (0, 0))[0], _how(started.get(rid, {})) if r["forked_from"] else "")
            for rid, r in rows.items()
        }
        for rid, said in diverged.items():
            unit = "message" if started.get(rid, {}).get("fork_unit") == "messages" else "step"
            nodes[rid].divergence = Divergence.of(said, unit)
        for rid, node in nodes.items():
            if node.forked_from in nodes and rid != row["id"]:
                nodes[node.forked_from].children.append(node)
        return cls(nodes[row["id"]], asked)

    def __len__(self) -> int:
        return len(self.root.walk())

    def __iter__(self) -> Iterator[Branch]:
        return (b for _, b in self.root.walk())

    def get(self, run_id: str) -> Branch:
        """The branch of ``run_id`` (an id prefix is enough)."""
        for b in self:
            if b.run_id.startswith(run_id):
                return b
        raise NotFoundError(f"run {run_id!r} is not in this family (its first run is {self.root.run_id})")

    def text(self) -> str:
        """The tree as indented lines (what ``%tea branches`` prints)."""
        lines = []
        for depth, b in self.root.walk():
            departs = b.departs
            if b.divergence is not None:
                departs = f" · departs {departs}"
            elif departs:
                departs = " · no departure" + (" so far" if b.status == "running" else "")
            how = f" [{b.origin}{departs}]" if b.origin else ""
            mark = "  ← asked" if b.run_id == self.asked else ""
            lines.append(
                f"{'    ' * depth}{b.run_id} {b.agent} · {b.status} · {b.steps} steps · "
                f"{b.prompt_tokens + b.completion_tokens} tokens · ${b.cost:.4f}{how}{mark}"
            )
            if b.answer:
                lines.append(f"{'    ' * depth}    answer: {' '.join(b.answer.split())[:120]}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Branches(root={self.root.run_id!r}, runs={len(self)})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        rows = []
        for depth, b in self.root.walk():
            how = f"<span class='tea-branch-how'>{html.escape(b.origin)}</span>" if b.origin else "first run"
            me = " style='font-weight:bold'" if b.run_id == self.asked else ""
            found = b.divergence
            said = f" title='{html.escape(f'original: {found.original}; replay: {found.replay}')}'" if found else ""
            rows.append(
                f"<tr{me} data-run='{html.escape(b.run_id)}'><td style='padding-left:{depth * 1.5 + 0.3}em'>"
                f"{'└ ' if depth else ''}<code>{html.escape(b.run_id)}</code></td><td>{how}</td>"
                f"<td class='tea-branch-departs'{said}>{html.escape(b.departs)}</td>"
                f"<td>{html.escape(b.status)}</td><td>{b.steps}</td><td>{b.prompt_tokens + b.completion_tokens}</td>"
                f"<td>${b.cost:.4f}</td><td>{html.escape(' '.join(b.answer.split())[:160])}</td></tr>"
            )
        return (
            "<div class='tea-branches'><b>branches of run "
            f"<code>{html.escape(self.root.run_id)}</code></b> ({len(self)} runs)<table>"
            "<tr><th>run</th><th>how</th><th>departs</th><th>status</th><th>steps</th><th>tokens</th><th>cost</th><th>answer</th></tr>"
            + "".join(rows)
            + "</table></div>"
        )


@dataclass
class Comparison:
    """Two runs side by side (see the module's docstring). ``diverges_at``: the first step where ``b``
    departs from ``a`` (``departure`` says how and what each did there: the same comparison a fork makes
    live); None when they took the same steps and ended alike (or one is still running and its steps so
    far are the other's)."""

    a: Branch
    b: Branch
    diverges_at: int | None
    steps_a: dict[int, dict[str, Any]]
    steps_b: dict[int, dict[str, Any]]
    departure: Divergence | None = None

    @classmethod
    def load(cls, ws: "RunHost", a: str, b: str) -> "Comparison":
        """Compare runs ``a`` and ``b`` (id prefixes are enough)."""
        rows = []
        for rid in (a, b):
            row = ws.db.run_row(rid)
            if row is None:
                raise NotFoundError(f"no run {rid!r} in {ws.path}")
            rows.append(row)
        steps: list[dict[int, dict[str, Any]]] = [{}, {}]
        facts: list[dict[int, StepFacts]] = [{}, {}]
        for i, row in enumerate(rows):
            events = [(t, n, d) for _, t, n, d in ws.db.run_events_of_type([row["id"]], ["step", "model_request"])]
            facts[i] = stored_facts(events)
            steps[i] = {n: json.loads(d) for t, n, d in events if t == "step" and n is not None}
        counts = ws.db.step_counts([r["id"] for r in rows])
        branches = [Branch.of(ws, row, counts.get(row["id"], (0, 0))[0]) for row in rows]
        ends = (End(max(facts[0], default=0), rows[0]["status"]), End(max(facts[1], default=0), rows[1]["status"]))
        names = RunNames.of(ws, rows[0]["id"]) + RunNames.of(ws, rows[1]["id"])
        found = first_departure(rows[0]["id"], facts[0], facts[1], texts_alike(names), ends)
        return cls(branches[0], branches[1], found.step if found else None, steps[0], steps[1], found)

    def summary(self) -> dict[str, Any]:
        """The figures side by side, as a dict of ``name -> (a, b)``."""
        pick = ("status", "steps", "prompt_tokens", "completion_tokens", "cost", "model", "answer")
        out: dict[str, Any] = {"run": (self.a.run_id, self.b.run_id), "diverges_at": self.diverges_at}
        out.update({k: (getattr(self.a, k), getattr(self.b, k)) for k in pick})
        return out

    @staticmethod
    def _actions(data: dict[str, Any] | None) -> str:
        if data is None:
            return "—"
        parts = []
        for tool, args, obs in data.get("results", []):
            flat = " ".join(str(obs).split())
            parts.append(f"{tool}({str(args)[:80]}) → {flat[:160]}")
        return "; ".join(parts) or "(no action)"

    def text(self) -> str:
        """Plain text: the figures, then the steps from the divergence on."""
        lines = [f"{'':14}{self.a.run_id:>32}  {self.b.run_id:>32}"]
        for k, pair in self.summary().items():
            if k in ("run", "diverges_at"):
                continue
            va, vb = pair
            fa, fb = (f"{va:.4f}", f"{vb:.4f}") if k == "cost" else (str(va), str(vb))
            if k == "model":
                fa, fb = display_name(va), display_name(vb)
            lines.append(f"{k:14}{' '.join(fa.split())[:32]:>32}  {' '.join(fb.split())[:32]:>32}")
        lines.append(f"they diverge at {self._where()}")
        if self.departure is not None:
            lines.append(f"  a: {self.departure.original}")
            lines.append(f"  b: {self.departure.replay}")
        if self.diverges_at:
            for n in sorted(set(self.steps_a) | set(self.steps_b)):
                if n >= self.diverges_at:
                    lines.append(f"step {n}:")
                    lines.append(f"  a: {self._actions(self.steps_a.get(n))}")
                    lines.append(f"  b: {self._actions(self.steps_b.get(n))}")
        return "\n".join(lines)

    def _where(self) -> str:
        found = self.departure
        if found is None:
            return "nowhere (same steps)"
        return f"step {found.step} ({found.words()})"

    def __repr__(self) -> str:
        return f"Comparison({self.a.run_id!r}, {self.b.run_id!r}, diverges_at={self.diverges_at})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        e = html.escape
        rows = []
        for k, pair in self.summary().items():
            if k == "diverges_at":
                continue
            va, vb = pair
            fa, fb = (f"${va:.4f}", f"${vb:.4f}") if k == "cost" else (str(va), str(vb))
            if k == "model":
                fa, fb = display_name(va), display_name(vb)
            diff = " style='background:#fff3cd'" if fa != fb and k != "run" else ""
            rows.append(f"<tr{diff}><th>{e(k)}</th><td>{e(fa[:400])}</td><td>{e(fb[:400])}</td></tr>")
        where = self._where()
        steps = []
        if self.diverges_at:
            for n in sorted(set(self.steps_a) | set(self.steps_b)):
                if n >= self.diverges_at:
                    steps.append(
                        f"<tr><th>step {n}</th><td>{e(self._actions(self.steps_a.get(n)))}</td>"
                        f"<td>{e(self._actions(self.steps_b.get(n)))}</td></tr>"
                    )
        return (
            f"<div class='tea-compare'><b>they diverge at {e(where)}</b><table>{''.join(rows)}"
            f"{''.join(steps)}</table></div>"
        )
