"""The sidebar's Evolution section, kernel side: the evolution lineage as small JSON replies.

Three requests of the comm ``tea_notebook.sidebar`` (:mod:`tea_notebook.notebook.sidebar_comm`):

- ``{"request": "lineage", "kind": "tool", "offset": 0, "limit": 50, "query": ""}``: one page of assets
  (by name, filtered by ``query``), each with its versions as compact nodes (``v``, ``parent``,
  ``status``; flags only when set) — the tree is drawn in the page from ``parent``. An asset with more
  than :data:`NODE_LIMIT` versions sends its newest ones and says how many older were left out.
- ``{"request": "lineage_node", "kind", "name", "version"}``: one node's gate evidence and the runs
  that made and used it (sent when a node is expanded, not with the page).
- ``{"request": "rollback", "kind", "name", "version", "confirm": false}``: the plan of what a
  rollback would change, never applied; ``"confirm": true`` (with the plan's ``head_before``) applies
  it, refused if the asset changed since the plan was shown.
"""

from __future__ import annotations

from typing import Any

from tea_notebook.errors import TeaError

KINDS = ("tool", "experience", "agent")
#: assets per page by default, and at most
PAGE = 50
PAGE_MAX = 200
#: versions of one asset sent at most (the newest); older ones are counted
NODE_LIMIT = 30
#: runs listed per node detail at most (the newest); the rest are counted
RUN_LIMIT = 20


def _kind(data: dict[str, Any]) -> str:
    kind = data.get("kind") or "tool"
    if kind not in KINDS:
        raise TeaError(f"the lineage has kinds {', '.join(KINDS)}, not {kind!r}")
    return str(kind)


def _whole(data: dict[str, Any], key: str, default: int | None = None, low: int = 0, high: int | None = None) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        limits = f"{low}…{high}" if high is not None else f"≥ {low}"
        raise TeaError(f"the {key} is a whole number {limits}, not {value!r}")
    return value


def _status(node: Any) -> str:
    return "rolled back" if node.rolled_back else str(node.status)


def compact_node(node: Any) -> dict[str, Any]:
    """One version as the page sends it: ``v``, ``parent``, ``status``; ``as`` (the promoted version),
    ``current``, ``made``/``used`` (run counts), ``gate`` (the last decision) and ``weak``
    (underpowered) only when set."""
    out: dict[str, Any] = {"v": node.version, "parent": node.parent, "status": _status(node)}
    if node.promoted_as:
        out["as"] = node.promoted_as
    if node.current:
        out["current"] = True
    if node.made_by:
        out["made"] = len(node.made_by)
    if node.used_by:
        out["used"] = len(node.used_by)
    if node.gate:
        out["gate"] = node.gate[-1].status
        if node.gate[-1].underpowered:
            out["weak"] = True
    return out


def lineage_page(ws: Any, data: dict[str, Any]) -> dict[str, Any]:
    """A page of the lineage: ``assets`` [{name, nodes, older?, unused?}], ``total`` matching assets."""
    kind = _kind(data)
    offset = _whole(data, "offset", 0)
    limit = _whole(data, "limit", PAGE, 1, PAGE_MAX)
    query = str(data.get("query") or "").strip().lower()
    lineage = ws.lineage(kind=kind)
    names = [n for n in sorted(lineage.nodes) if query in n.lower()]
    unused = set(lineage.unused)
    assets = []
    for name in names[offset : offset + limit]:
        nodes = lineage.nodes[name]
        asset: dict[str, Any] = {"name": name, "nodes": [compact_node(n) for n in nodes[-NODE_LIMIT:]]}
        if len(nodes) > NODE_LIMIT:
            asset["older"] = len(nodes) - NODE_LIMIT
        if name in unused:
            asset["unused"] = True
        assets.append(asset)
    return {
        "type": "lineage",
        "kind": kind,
        "query": query,
        "offset": offset,
        "limit": limit,
        "total": len(names),
        "assets": assets,
    }


def _decision(d: Any) -> dict[str, Any]:
    return {
        "id": d.id,
        "status": d.status,
        "message": d.message,
        "gain": d.gain,
        "ci": [d.ci_low, d.ci_high],
        "level": d.level,
        "n": d.n,
        "epochs": d.cohort.get("epochs", 1),
        "underpowered": d.underpowered,
        "min_tasks": d.min_tasks,
        "recheck_of": d.cohort.get("recheck_of"),
        "at": d.at,
    }


def lineage_node(ws: Any, data: dict[str, Any]) -> dict[str, Any]:
    """One node's detail: its gate decisions (gain, interval, n, underpowered), the runs that made it
    and the newest :data:`RUN_LIMIT` runs that used it (with how they ended)."""
    kind = _kind(data)
    name, version = str(data.get("name") or ""), _whole(data, "version", None, 1)
    node = ws.lineage(name, kind=kind).node(name, version)
    used = node.used_by[-RUN_LIMIT:]
    return {
        "type": "lineage_node",
        "kind": kind,
        "name": name,
        "version": node.version,
        "node": {
            **compact_node(node),
            "key": node.key,
            "score": node.score_line(),
            "gate": [_decision(d) for d in node.gate],
            "made_by": list(node.made_by),
            "used_by": [{"run": u.run_id, "status": u.status, "correct": u.correct} for u in reversed(used)],
            "used_total": len(node.used_by),
        },
    }


def rollback(ws: Any, data: dict[str, Any]) -> dict[str, Any]:
    """The rollback plan (``confirm`` false: a preview, nothing written) or the applied rollback
    (``confirm`` true; refused when the asset's current version is not the plan's ``head_before``)."""
    kind = _kind(data)
    name, version = str(data.get("name") or ""), _whole(data, "version", None, 1)
    confirm = data.get("confirm") is True
    lineage = ws.lineage(name, kind=kind)
    plan = lineage.rollback(name, version, preview=True)
    if confirm:
        expected = data.get("head_before")
        if expected != plan.head_before:
            raise TeaError(
                f"{name} changed since the plan was shown (current version v{plan.head_before}, "
                f"the plan was made at v{expected}): look at the new plan before rolling back"
            )
        plan = lineage.rollback(name, version, confirm=True)
    return {
        "type": "rollback",
        "kind": kind,
        "name": name,
        "version": plan.version,
        "applied": plan.applied,
        "needs_confirm": plan.needs_confirm,
        "nodes": plan.nodes,
        "head_before": plan.head_before,
        "head_after": plan.head_after,
        "dependents": plan.dependents,
        "lines": plan.lines(),
    }


#: request name -> the function answering it
REQUESTS = {"lineage": lineage_page, "lineage_node": lineage_node, "rollback": rollback}
