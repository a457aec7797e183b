"""ToolSelf configurations kept for reuse: a stage's configuration as a candidate of the promotion gate.

A ToolSelf run records each stage's configuration — sub-goal, execution strategy, toolbox, knowledge
— in its ``stage`` events. :func:`keep_configuration` (``ws.keep_configuration(run, stage=K,
name=...)``) stores one of them in the expert-agent bank: an ACP agent card (``origin="evolved"``,
category :data:`CATEGORY`) whose role is the sub-goal, whose description is the strategy, whose tools
are the toolbox and whose competencies hold the knowledge, with the whole configuration in
``metadata["toolself_configuration"]``. It enters as a *candidate* (the bank's ``find`` leaves it
out), made from the run's task (a held-out set containing it is refused as leakage) and by the run
(the lineage's "made by"). The gate (``gate.check(name, kind="agent")``) gives it to its "with" arm
as a ``<configuration>`` block in the system prompt and its toolbox as tools — every one of them must
be registered — and promotes it only on a measured gain, like any expert agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from tea_notebook.errors import NotFoundError, TeaError
from tea_notebook.evolve.agent_bank import ORIGIN
from tea_notebook.evolve.gate import KEPT_CONFIGURATION_KEY, evolution_metadata
from tea_notebook.protocol.records import AgentRecord

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost

#: the category of a kept ToolSelf configuration's agent card
CATEGORY = "toolself_configuration"
#: the metadata key holding the configuration and where it came from
METADATA_KEY = KEPT_CONFIGURATION_KEY


def stage_configuration(ws: "RunHost", run_id: str, stage: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's row and the configuration of its stage ``stage`` (1-based) as recorded; a clear
    error when the run does not exist, is not a ToolSelf run, or has no such stage."""
    from tea_notebook.runtime.trajectory import fork_unit

    row = ws.db.run_row(run_id) if isinstance(run_id, str) else None
    if row is None:
        raise NotFoundError(f"no run {run_id!r} in {ws.path}")
    events = ws.events.events(row["id"], nested=False)
    stages = [e.data for e in events if e.type == "stage"]
    if fork_unit(events) != "stages" and not stages:
        raise TeaError(
            f"run {row['id']} ({row['agent']}) is not a ToolSelf run: it has no stages whose configuration "
            "could be kept"
        )
    if not stages:
        raise TeaError(f"run {row['id']} ({row['agent']}) recorded no stage: there is no configuration to keep")
    if isinstance(stage, bool) or not isinstance(stage, int) or not 1 <= stage <= len(stages):
        raise TeaError(f"run {row['id']} has stages 1 to {len(stages)}; there is no stage {stage!r}")
    return row, dict(stages[stage - 1])


def missing_tools(ws: "RunHost", toolbox: list[str]) -> list[str]:
    """The tools of ``toolbox`` that are not registered now."""
    return [t for t in toolbox if t not in ws.tools]


def keep_configuration(ws: "RunHost", run_id: str, *, stage: int, name: str) -> AgentRecord:
    """Store the configuration of stage ``stage`` of ToolSelf run ``run_id`` as agent ``name`` in the
    expert-agent bank, a candidate of the promotion gate (see the module docstring). Refused, with
    nothing written, when the run or stage does not exist, the run is not ToolSelf's, ``name`` is
    already used (now or in an agent's history), or a tool of the toolbox is no longer registered."""
    row, recorded = stage_configuration(ws, run_id, stage)
    if not isinstance(name, str) or not name.strip():
        raise TeaError("name the kept configuration: name='...' (letters, digits, '_' or '-')")
    if name in ws.agents or ws.db.history("agent", name):
        raise TeaError(
            f"the agent name {name!r} is already used; choose another name= for the kept configuration "
            "(nothing was written)"
        )
    toolbox = [str(t) for t in recorded.get("toolbox") or []]
    missing = missing_tools(ws, toolbox)
    if missing:
        raise TeaError(
            f"stage {stage} of run {row['id']} uses tool(s) that are no longer registered: {', '.join(missing)}; "
            "register them again before keeping its configuration (nothing was written)"
        )
    sub_goal = str(recorded.get("sub_goal") or "")
    strategy = str(recorded.get("strategy") or "")
    knowledge = str(recorded.get("knowledge_text") or "")
    configuration = {
        "run": row["id"],
        "stage": stage,
        "agent": row["agent"],
        "sub_goal": sub_goal,
        "strategy": strategy,
        "toolbox": toolbox,
        "knowledge": str(recorded.get("knowledge") or ""),
        "knowledge_text": knowledge,
    }
    spec = {"role": sub_goal, "suggestions": [knowledge] if knowledge else [], "tools": toolbox, "expertise": strategy}
    metadata = evolution_metadata(
        {METADATA_KEY: configuration, "expert": spec, "source_run": row["id"], "source_runs": [row["id"]]},
        candidate=True,
        tasks=[str(row.get("task") or "")],
        runs=[row["id"]],
        parent=None,
        routed=False,
    )
    try:
        record = AgentRecord(
            name=name,
            description=strategy,
            role=sub_goal,
            competencies=spec["suggestions"],
            tools=toolbox,
            origin=ORIGIN,
            category=CATEGORY,
            metadata=metadata,
        )
    except ValidationError as exc:
        problem = "; ".join(str(e.get("msg", "")) for e in exc.errors())
        raise TeaError(f"cannot keep the configuration as {name!r}: {problem} (nothing was written)") from None
    return ws.agents.register(record, note=f"kept configuration of stage {stage} of run {row['id']}")


__all__ = [
    "CATEGORY",
    "METADATA_KEY",
    "keep_configuration",
    "missing_tools",
    "stage_configuration",
]
