"""The evolution lineage of tools and experiences: every version an asset node, and a rollback
that keeps versions.

A node is one version of an asset (a tool, or an experience entry) as it was made: a candidate, a
version registered without the gate, or a hand-registered one. A promotion is a later version of
the record that points back at its candidate (``metadata["evolution"]["promotes"]``) and is folded
into that node. Each node shows its parent (the version it replaced), the runs that made it, the
gate's decisions about it, the runs that used it while it was current (a tool's calls, an expert
agent's runs, the runs the evolution loop gave an experience entry to) and how they ended, and
whether it was rolled back.

:meth:`Lineage.rollback` takes a node and every node derived from it out of use: the asset's current
version goes back to the node's parent (or, without one, the asset is unregistered; its history is
kept). Nothing is deleted, and the rollback is stored (kind ``evolution_rollback``) so the lineage
shows it. A rollback that reaches beyond the node itself — later versions derived from it, or assets
that depend on it — only returns the plan of what would change, until ``confirm=True``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any

from tea_notebook.errors import NotFoundError, TeaError
from tea_notebook.evolve.gate import PROMOTED, GateDecision, decisions, registry_of, unused_promotions
from tea_notebook.protocol.records import content_hash

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost

#: the store kind of rollbacks (one history per asset, named ``tool:NAME`` or ``experience:NAME``)
ROLLBACK_KIND = "evolution_rollback"


@dataclass
class Use:
    """A run that called a node while it was current, and how that run ended."""

    run_id: str
    status: str
    correct: bool | None = None


@dataclass
class LineageNode:
    """One version of a tool as it was made, with where it came from and how it fared."""

    name: str
    version: int
    parent: int | None
    status: str  # candidate | promoted | unmeasured | registered
    made_by: list[str] = field(default_factory=list)
    promoted_as: int | None = None
    gate: list[GateDecision] = field(default_factory=list)
    used_by: list[Use] = field(default_factory=list)
    rolled_back: bool = False
    current: bool = False
    created_at: float = 0.0

    @property
    def key(self) -> str:
        """``name@vN``."""
        return f"{self.name}@v{self.version}"

    def score_line(self) -> str:
        """How the runs that used it ended (``3 runs: 2 success, 1 correct``)."""
        if not self.used_by:
            return "not used"
        ok = sum(u.status == "success" for u in self.used_by)
        scored = [u.correct for u in self.used_by if u.correct is not None]
        extra = f", {sum(scored)}/{len(scored)} correct" if scored else ""
        return f"{len(self.used_by)} run(s): {ok} success{extra}"


@dataclass
class RollbackPlan:
    """What a rollback changes; ``applied`` says whether it was done."""

    name: str
    version: int
    nodes: list[str]
    head_before: int | None
    head_after: int | None
    dependents: list[str]
    applied: bool
    needs_confirm: bool = True

    def lines(self) -> list[str]:
        """The changes, one per line."""
        after = f"v{self.head_after}" if self.head_after is not None else "unregistered (history kept)"
        derived = f" and what derives from it: {', '.join(self.nodes[1:])}" if len(self.nodes) > 1 else ""
        out = [
            f"roll back {self.name}@v{self.version}{derived}",
            f"current version of {self.name}: v{self.head_before} → {after}",
        ]
        if self.dependents:
            out.append(f"tools that depend on {self.name}: {', '.join(self.dependents)}")
        if self.applied:
            out.append("applied")
        elif self.needs_confirm:
            out.append("NOT applied: others depend on it; pass confirm=True to do it")
        else:
            out.append("NOT applied yet (a preview): nothing else depends on it")
        return out

    def __repr__(self) -> str:
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        return "<pre class='tea-rollback'>" + escape("\n".join(self.lines())) + "</pre>"


class Lineage:
    """The lineage of the tools (or experiences) of a workspace (``ws.lineage()``): nodes by asset
    name, oldest first; ``unused``: promoted assets no run used since their promotion."""

    def __init__(self, ws: "RunHost", nodes: dict[str, list[LineageNode]], unused: list[str], kind: str = "tool"):
        self.ws, self.nodes, self.unused, self.kind = ws, nodes, unused, kind
        self.registry = registry_of(ws, kind)

    def node(self, name: str, version: int) -> LineageNode:
        """The node of ``name`` made as ``version`` (a promotion version finds its candidate's node)."""
        for node in self.nodes.get(name, []):
            if version in (node.version, node.promoted_as):
                return node
        raise NotFoundError(f"no lineage node {name}@v{version}; nodes: {', '.join(self._keys(name)) or 'none'}")

    def _keys(self, name: str) -> list[str]:
        return [n.key for n in self.nodes.get(name, [])]

    def derived(self, name: str, version: int) -> list[LineageNode]:
        """The node and every node descended from it (by parent), in version order."""
        root = self.node(name, version)
        chosen = {root.version}
        for node in self.nodes[name]:
            if node.parent is not None and self._node_of(name, node.parent) in chosen:
                chosen.add(node.version)
        return [n for n in self.nodes[name] if n.version in chosen]

    def _node_of(self, name: str, version: int) -> int | None:
        try:
            return self.node(name, version).version
        except NotFoundError:
            return None

    def rollback(self, name: str, version: int, *, confirm: bool = False, preview: bool = False) -> RollbackPlan:
        """Take node ``name@v{version}`` and everything derived from it out of use: the tool goes back
        to the node's parent (unregistered without one). Versions stay. When later versions derive
        from it or other tools depend on it, nothing changes without ``confirm=True``: the returned
        plan says what would. ``preview=True``: only the plan, never applied (the sidebar's first click)."""
        gone = self.derived(name, version)
        head = self.ws.db.head(self.registry.kind, name)
        head_before = head.version if head is not None else None
        keep = {v for n in gone for v in (n.version, n.promoted_as) if v is not None}
        if head_before is None or head_before not in keep:
            raise TeaError(
                f"nothing to roll back: the current version of {name!r} is "
                f"{'none' if head_before is None else f'v{head_before}'}, not derived from {name}@v{version}"
            )
        root = gone[0]
        head_after = None
        if root.parent is not None:
            parent = self.node(name, root.parent)
            head_after = parent.promoted_as or parent.version
        dependents = sorted(n for (n, _type, target) in self.registry.graph("depends_on") if target == name)
        needs = len(gone) > 1 or bool(dependents)
        plan = RollbackPlan(
            name, root.version, [n.key for n in gone], head_before, head_after, dependents, False, needs
        )
        if preview or (needs and not confirm):
            return plan
        if head_after is None:
            self.registry.unregister(name)
        else:
            self.registry.rollback(name, head_after)
        data = {"name": name, "version": root.version, "nodes": [n.version for n in gone], "at": time.time()}
        with self.ws.db.transaction() as cur:
            key = f"{self.kind}:{name}"
            text = json.dumps(data)
            self.ws.db.put_version(cur, ROLLBACK_KIND, key, content_hash(data), text, "", "[]", plan.lines()[0])
        for n in gone:
            n.rolled_back, n.current = True, False
        plan.applied = True
        return plan

    # -- views -------------------------------------------------------------------------------------
    def text(self) -> str:
        """A plain-text tree per tool."""
        lines = []
        for name, nodes in self.nodes.items():
            lines.append(name)
            for n in nodes:
                lines.append("  " + self._line(n))
        if self.unused:
            lines.append("promoted but never used since: " + ", ".join(self.unused))
        return "\n".join(lines) or f"(no {self.kind}s)"

    def _line(self, n: LineageNode) -> str:
        parent = f" ← v{n.parent}" if n.parent is not None else ""
        status = n.status + (f" as v{n.promoted_as}" if n.promoted_as else "")
        flags = (" [current]" if n.current else "") + (" [rolled back]" if n.rolled_back else "")
        gate = f"; gate: {n.gate[-1].message}" if n.gate else ""
        runs = f"; made by {', '.join(r[:8] for r in n.made_by)}" if n.made_by else ""
        return f"v{n.version}{parent}: {status}{flags}{runs}; {n.score_line()}{gate}"

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        shown = list(self.nodes.items())[:HTML_ASSETS]
        parts = [
            "<div class='tea-lineage'>",
            f"<div style='{_MUTED}'>{len(self.nodes)} {escape(self.kind)}(s); each version under the one it "
            "replaced. <b>promoted</b>: the gate measured a gain; <b>candidate</b>: not (yet) shown to help; "
            "<b>unmeasured</b>: kept without the gate; <b>registered</b>: by hand; <b>rolled back</b>: out of use "
            "(kept). In JupyterLab, click a run to open it.</div>",
        ]
        if self.unused:
            unused = escape(", ".join(self.unused))
            parts.append(f"<div style='color:#9a6700'><b>promoted but never used since:</b> {unused}</div>")
        for i, (name, nodes) in enumerate(shown):
            current = next((n for n in nodes if n.current), None)
            now = f"current v{current.promoted_as or current.version}" if current else "not registered now"
            parts.append(
                f"<details{' open' if i < HTML_OPEN else ''}><summary><b>{escape(name)}</b> "
                f"<span style='{_MUTED}'>{now} · {len(nodes)} version(s)</span></summary>"
                "<ul style='list-style:none;margin:2px 0;padding-left:0.5em'>"
            )
            parts.extend(self._html_node(n, depth) for n, depth in _tree(nodes))
            parts.append("</ul></details>")
        if len(self.nodes) > len(shown):
            parts.append(
                f"<div style='{_MUTED}'>… and {len(self.nodes) - len(shown)} more: "
                f"<code>ws.lineage(NAME, kind={self.kind!r})</code> for one, or the sidebar's Evolution section</div>"
            )
        parts.append("</div>")
        return "".join(parts)

    def _html_node(self, n: LineageNode, depth: int) -> str:
        state = "rolled back" if n.rolled_back else n.status
        colour = _COLOURS.get(state, "#57606a")
        label = f"v{n.version}" + (f" ← v{n.parent}" if n.parent is not None else "")
        promoted = f" as v{n.promoted_as}" if n.promoted_as else ""
        flags = " <b>current</b>" if n.current else ""
        made = f" · made by {', '.join(_run_link(r) for r in n.made_by)}" if n.made_by else ""
        used = ", ".join(_run_link(u.run_id) for u in n.used_by[-HTML_RUNS:])
        more = f" (newest {HTML_RUNS} shown)" if len(n.used_by) > HTML_RUNS else ""
        used = f"used by {escape(n.score_line())}: {used}{more}" if used else "not used"
        gate = "".join(f"<div style='{_MUTED};margin-left:1.5em'>gate: {escape(d.message)}</div>" for d in n.gate)
        return (
            f"<li style='padding-left:{1.2 * depth:g}em'><code>{'└ ' if depth else ''}{escape(label)}</code> "
            f"<b style='color:{colour}'>{escape(state)}{promoted}</b>{flags}{made} · {used}{gate}</li>"
        )


#: assets the cell view shows (the rest are counted), of them open at first, and runs listed per node
HTML_ASSETS = 200
HTML_OPEN = 20
HTML_RUNS = 10
_MUTED = "color:#57606a;font-size:smaller"
_COLOURS = {"promoted": "#1a7f37", "candidate": "#9a6700", "unmeasured": "#57606a", "rolled back": "#cf222e"}


def _run_link(run_id: str) -> str:
    """A run id as a link the TEA extension opens (its trajectory); the full id in its tooltip."""
    run = escape(run_id)
    return f"<code data-run='{run}' title='{run}' style='cursor:pointer'>{escape(run_id[:12])}</code>"


def _tree(nodes: list[LineageNode]) -> list[tuple[LineageNode, int]]:
    """The nodes depth first, each under its parent (a parent not among them makes a root), with its depth."""
    versions = {n.version for n in nodes}
    children: dict[int | None, list[LineageNode]] = {}
    for n in nodes:
        parent = n.parent if n.parent in versions and n.parent != n.version else None
        children.setdefault(parent, []).append(n)
    out: list[tuple[LineageNode, int]] = []
    placed: set[int] = set()

    def visit(n: LineageNode, depth: int) -> None:
        if n.version in placed:
            return
        placed.add(n.version)
        out.append((n, depth))
        for child in children.get(n.version, []):
            visit(child, depth + 1)

    for n in [*children.get(None, []), *nodes]:  # then whatever a cycle left unplaced
        visit(n, 0)
    return out


def _uses(ws: "RunHost", names: set[str]) -> dict[str, list[tuple[str, float]]]:
    """``tool -> [(run id, time)]`` of the tool calls of ``names``, oldest first (one per run and tool)."""
    ws.events.flush()
    out: dict[str, list[tuple[str, float]]] = {}
    seen: set[tuple[str, str]] = set()
    for run_id, _type, at, data in ws.db.events_of_type(["tool_call"]):
        tool = json.loads(data).get("name")
        if tool in names and (run_id, tool) not in seen:
            seen.add((run_id, tool))
            out.setdefault(tool, []).append((run_id, at))
    return out


def _experience_uses(ws: "RunHost", names: set[str]) -> dict[str, list[tuple[str, float]]]:
    """``entry -> [(run id, time)]`` of the runs the evolution loop gave experience entries ``names``
    (its ``execute`` stages record the run and the entries retrieved for it), oldest first."""
    ws.events.flush()
    out: dict[str, list[tuple[str, float]]] = {}
    for _, _type, at, data in ws.db.events_of_type(["step"]):
        if '"experiences' not in data:
            continue
        for action, args, _ in json.loads(data).get("results") or []:
            if action != "execute":
                continue
            given = json.loads(args) if isinstance(args, str) else args
            run_id = given.get("run") if isinstance(given, dict) else None
            for entry in (given.get("experiences") or []) if run_id else []:
                if entry in names:
                    out.setdefault(entry, []).append((run_id, at))
    return out


def _agent_runs(ws: "RunHost", names: set[str]) -> dict[str, list[tuple[str, float]]]:
    """``agent -> [(run id, start time)]`` of the runs of ``names``, oldest first."""
    out: dict[str, list[tuple[str, float]]] = {}
    for row in reversed(ws.db.runs(1_000_000, parent_id=None)):
        if row["agent"] in names:
            out.setdefault(row["agent"], []).append((row["id"], float(row.get("started") or 0.0)))
    return out


def _run_scores(ws: "RunHost") -> dict[str, bool | None]:
    """``run id -> correct`` for every run scored by a stored evaluation."""
    out: dict[str, bool | None] = {}
    for evaluation in ws.db.evaluations():
        for row in ws.db.eval_results(evaluation["name"]):
            if row.get("run_id"):
                out[row["run_id"]] = row.get("correct")
    return out


def evolution_lineage(ws: "RunHost", name: str | None = None, kind: str = "tool") -> Lineage:
    """The lineage of every tool (or of ``name``; ``kind="experience"``: of the experience entries)."""
    registry = registry_of(ws, kind)
    asset, kind = kind, registry.kind
    names = [name] if name is not None else registry.names()
    if name is not None and not ws.db.history(kind, name):
        raise NotFoundError(f"no {asset} named {name!r} was ever registered")
    changes = ws.db.changes_since(kind, 0)
    rolled: dict[str, set[int]] = {}
    for n in names:
        for v in ws.db.history(ROLLBACK_KIND, f"{asset}:{n}"):
            rolled.setdefault(n, set()).update(json.loads(v.data)["nodes"])
    finders = {"tool": _uses, "agent": _agent_runs, "experience": _experience_uses}
    uses = finders[asset](ws, set(names)) if asset in finders else {}
    scores = _run_scores(ws) if uses else {}
    gates: dict[str, list[GateDecision]] = {}
    for d in decisions(ws, name, asset):
        gates.setdefault(d.name, []).append(d)
    out: dict[str, list[LineageNode]] = {}
    for n in names:
        head = ws.db.head(kind, n)
        nodes: dict[int, LineageNode] = {}
        owner: dict[int, int] = {}  # a stored version -> the node it belongs to
        previous: int | None = None
        for stored in ws.db.history(kind, n):
            evo = json.loads(stored.data).get("metadata", {}).get("evolution") or {}
            if evo.get("promotes") in nodes:
                node = nodes[evo["promotes"]]
                node.status, node.promoted_as = PROMOTED, stored.version
                owner[stored.version] = node.version
            else:
                parent = evo["parent"] if "parent" in evo else previous
                node = LineageNode(
                    n,
                    stored.version,
                    owner.get(parent, parent) if parent is not None else None,
                    evo.get("status") or "registered",
                    made_by=list(evo.get("runs") or []),
                    created_at=stored.created_at,
                )
                nodes[stored.version] = node
                owner[stored.version] = stored.version
            previous = stored.version
        for d in gates.get(n, []):  # a re-check measured the promoted version: its candidate's node
            if owner.get(d.version) in nodes:
                nodes[owner[d.version]].gate.append(d)
        for run_id, at in uses.get(n, []):
            version = _current_at(changes, n, at)
            if version is not None and owner.get(version) in nodes:
                row = ws.db.run_row(run_id) or {}
                nodes[owner[version]].used_by.append(Use(run_id, str(row.get("status") or "?"), scores.get(run_id)))
        for node in nodes.values():
            node.rolled_back = node.version in rolled.get(n, set()) and (
                head is None or owner.get(head.version) != node.version
            )
            node.current = head is not None and owner.get(head.version) == node.version
        out[n] = list(nodes.values())
    return Lineage(ws, out, [u for u in unused_promotions(ws, asset) if u in out], asset)


def _current_at(changes: list[Any], name: str, at: float) -> int | None:
    """The version of ``name`` that was current at time ``at`` (from the registry's change log)."""
    version = None
    for change in changes:
        if change.name != name:
            continue
        if change.at > at:
            break
        version = change.version if change.op in ("register", "rollback") else None
    return version


__all__ = ["ROLLBACK_KIND", "Lineage", "LineageNode", "RollbackPlan", "Use", "evolution_lineage"]
