"""Training data for ToolSelf's CAT stages, exported from stored runs (no training happens here).

Both of the paper's models learn from the same trajectories: the agent π from each stage's
execution segment (its configuration as the system prompt, then think / tool call / tool response
cycles) and the engine μ from each configuration it produced (its prompt, then its JSON). The
label is trajectory-level and inherited by every segment and configuration of the run (§2.3):
the run's status (``success``), or what a ``label(trajectory) -> bool`` function (a judge) says.

- ``format="rft"`` (Stage I, rejection-sampling fine-tuning): only runs labelled successful, one
  ``{"messages": [...]}`` chat per segment or configuration — what SFT trainers (TRL, ms-swift) read.
- ``format="kto"`` (Stage II): every run, ``{"prompt": [...], "completion": [...], "label": bool}``
  — TRL's KTO format.

Every record also says ``role`` (``"agent"`` or ``"engine"``), ``run_id`` and ``stage``, and is
checked against :data:`RFT_SCHEMA` / :data:`KTO_SCHEMA` before it is written.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tea_notebook.agents.toolself import (
    FINISH_TOOL,
    INFERENCE_SYSTEM,
    RECONFIGURE_TOOL,
    USER_PROMPT_PREFIX,
    USER_PROMPT_SUFFIX,
    engine_messages,
)
from tea_notebook.envs.safe_open import exists_beneath, write_beneath
from tea_notebook.errors import EnvironmentFailure, TeaError
from tea_notebook.runtime.prompts import tool_line

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost
    from tea_notebook.runtime.trajectory import StepView, Trajectory

FORMATS = ("rft", "kto")

_MESSAGE = {
    "type": "object",
    "properties": {"role": {"enum": ["system", "user", "assistant"]}, "content": {"type": "string"}},
    "required": ["role", "content"],
    "additionalProperties": False,
}
_COMMON = {
    "role": {"enum": ["agent", "engine"]},
    "run_id": {"type": "string", "minLength": 1},
    "stage": {"type": "integer", "minimum": 1},
    "label": {"type": "boolean"},
}
RFT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"messages": {"type": "array", "items": _MESSAGE, "minItems": 3}, **_COMMON},
    "required": ["messages", "role", "run_id", "stage", "label"],
    "additionalProperties": False,
}
KTO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "prompt": {"type": "array", "items": _MESSAGE, "minItems": 2},
        "completion": {
            "type": "array",
            "items": {**_MESSAGE, "properties": {"role": {"const": "assistant"}, "content": {"type": "string"}}},
            "minItems": 1,
            "maxItems": 1,
        },
        **_COMMON,
    },
    "required": ["prompt", "completion", "label", "role", "run_id", "stage"],
    "additionalProperties": False,
}

REACT_OUTPUT = (
    "Think inside <think></think>, then call exactly one tool as "
    '<tool_call>{"name": "...", "arguments": {...}}</tool_call>. '
    "Tool results come back inside <tool_response></tool_response>."
)


@dataclass
class ExportReport:
    """What :func:`export_training_data` wrote."""

    path: Path
    format: str
    records: int = 0
    agent_records: int = 0
    engine_records: int = 0
    positive: int = 0
    negative: int = 0
    runs: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def __repr__(self) -> str:
        return (
            f"ExportReport({self.format}: {self.records} records ({self.agent_records} agent, "
            f"{self.engine_records} engine; {self.positive} positive, {self.negative} negative) from "
            f"{len(self.runs)} runs → {self.path}; skipped {len(self.skipped)})"
        )


def _run_ids(runs: Any) -> list[str]:
    items = runs if isinstance(runs, (list, tuple)) else [runs]
    ids = []
    for item in items:
        run_id = item if isinstance(item, str) else getattr(item, "run_id", None)
        if not isinstance(run_id, str) or not run_id:
            raise TeaError(f"not a run: {item!r} (pass run ids, RunResults or Trajectories)")
        ids.append(run_id)
    return ids


def _tool_defs(ws: "RunHost", toolbox: list[str]) -> list[dict[str, Any]]:
    defs = []
    for name in toolbox:
        record = ws.tools.current(name)
        defs.append(
            record.to_openai()
            if record is not None
            else {"type": "function", "function": {"name": name, "description": "", "parameters": {}}}
        )
    return defs + [RECONFIGURE_TOOL, FINISH_TOOL]


def _cycle(ws: "RunHost", step: "StepView") -> list[dict[str, str]]:
    """One step as the paper's ReAct turns: the assistant's thought and tool call, the tool response."""
    full = ws.events.full_text
    turns = []
    for action in step.actions:
        args = action.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(full(args))
            except ValueError:
                args = full(args)
        call = json.dumps({"name": action.get("name"), "arguments": args}, ensure_ascii=False)
        turns.append(
            {"role": "assistant", "content": f"<think>{full(step.thinking)}</think>\n<tool_call>{call}</tool_call>"}
        )
        observation = full(str(action.get("observation", "")))
        turns.append({"role": "user", "content": f"<tool_response>{observation}</tool_response>"})
    return turns


def _samples(ws: "RunHost", traj: "Trajectory") -> list[dict[str, Any]]:
    """``{"role", "stage", "prompt", "turns"}`` per stage segment and per accepted configuration."""
    full = ws.events.full_text
    started = next((e for e in traj.events if e.type == "run_started"), None)
    task = full(started.data.get("task", traj.task)) if started else traj.task
    ordered = sorted(traj.stages, key=lambda st: st.get("first_step", 0))
    out = []
    for i, stage in enumerate(ordered):
        index = stage.get("index", i + 1)
        engine = stage.get("engine") or {}
        if engine.get("ok"):
            prompt = engine_messages(
                task,
                full(engine.get("available_tools", "")),
                full(engine.get("history", "NONE")),
                full(engine.get("requirement", "NONE")),
            )
            out.append(
                {
                    "role": "engine",
                    "stage": index,
                    "prompt": prompt,
                    "turns": [{"role": "assistant", "content": full(engine.get("output", ""))}],
                }
            )
        end = ordered[i + 1].get("first_step", 0) if i + 1 < len(ordered) else None
        steps = [s for s in traj.steps if s.number >= stage.get("first_step", 0) and (end is None or s.number < end)]
        turns = [t for s in steps if not s.replayed for t in _cycle(ws, s)]
        if not turns:
            continue
        system = INFERENCE_SYSTEM.format(
            task=task,
            sub_goal=full(stage.get("sub_goal", "")),
            strategy=full(stage.get("strategy", "")),
            toolbox=", ".join(stage.get("toolbox", [])),
            knowledge=full(stage.get("knowledge_text", "")),
            output_rules=REACT_OUTPUT,
        )
        tools = "\n".join(tool_line(t) for t in _tool_defs(ws, list(stage.get("toolbox", []))))
        user = f"{USER_PROMPT_PREFIX}\n<tools>\n{tools}\n</tools>\n{USER_PROMPT_SUFFIX}"
        prompt = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        out.append({"role": "agent", "stage": index, "prompt": prompt, "turns": turns})
    return out


def _record(sample: dict[str, Any], run_id: str, label: bool, format: str) -> dict[str, Any]:
    common = {"role": sample["role"], "run_id": run_id, "stage": sample["stage"], "label": label}
    if format == "rft":
        return {"messages": sample["prompt"] + sample["turns"], **common}
    # KTO scores one completion: the whole segment (cycles and responses) as one assistant turn
    text = "\n".join(t["content"] for t in sample["turns"])
    return {"prompt": sample["prompt"], "completion": [{"role": "assistant", "content": text}], **common}


def export_training_data(
    ws: "RunHost",
    runs: Any,
    path: str | Path,
    *,
    format: str = "rft",
    label: Callable[["Trajectory"], bool] | None = None,
    overwrite: bool = False,
) -> ExportReport:
    """Write JSONL training records from the ToolSelf runs ``runs`` (ids, RunResults or
    Trajectories) to ``path``; see the module docstring for the formats. Runs that are not ToolSelf
    runs or still running are skipped and listed in the report. An existing file is kept unless
    ``overwrite``; the file appears whole or not at all."""
    from jsonschema import Draft202012Validator

    from tea_notebook.runtime.trajectory import Trajectory

    if format not in FORMATS:
        raise TeaError(f"unknown training-data format {format!r}; formats: {', '.join(FORMATS)}")
    target = Path(path).expanduser()
    sandboxed = _sandbox_writable(ws, target)
    if sandboxed is not None:  # sandboxed code writes there too: never through a link it left
        try:
            exists = exists_beneath(*sandboxed)
        except EnvironmentFailure as exc:
            raise TeaError(f"training data not written to {target}: {exc}") from None
    else:
        exists = target.exists()
    if exists and not overwrite:
        raise FileExistsError(f"{target} exists; pass overwrite=True to replace it")
    validator = Draft202012Validator(RFT_SCHEMA if format == "rft" else KTO_SCHEMA)
    report = ExportReport(target, format)
    lines = []
    for run_id in _run_ids(runs):
        traj = Trajectory.load(ws, run_id)
        if traj.status == "running":
            report.skipped.append((traj.run_id, "still running"))
            continue
        if not traj.stages:
            report.skipped.append((traj.run_id, "not a ToolSelf run (it has no stages)"))
            continue
        y = bool(label(traj)) if label is not None else traj.status == "success"
        if format == "rft" and not y:
            report.skipped.append((traj.run_id, f"not successful (status {traj.status}); RFT keeps successes only"))
            continue
        report.runs.append(traj.run_id)
        for sample in _samples(ws, traj):
            record = _record(sample, traj.run_id, y, format)
            errors = sorted(validator.iter_errors(record), key=str)
            if errors:  # a bug here, never the user's: say where
                raise TeaError(
                    f"run {traj.run_id} stage {sample['stage']}: record breaks the {format} schema: {errors[0].message}"
                )
            lines.append(json.dumps(record, ensure_ascii=False))
            report.records += 1
            report.agent_records += sample["role"] == "agent"
            report.engine_records += sample["role"] == "engine"
            report.positive += y
            report.negative += not y
    if sandboxed is not None:
        try:
            write_beneath(sandboxed[0], sandboxed[1], "".join(line + "\n" for line in lines), mode=0o600)
        except EnvironmentFailure as exc:
            raise TeaError(f"training data not written: {exc}") from None
        return report
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return report


def _sandbox_writable(ws: "RunHost", target: Path) -> tuple[Path, str] | None:
    """``(folder, path inside it)`` when ``target`` lies in a folder of the workspace that sandboxed
    code can write in (a run folder, a session folder), else None."""
    absolute = Path(os.path.abspath(target))
    for folder in (ws.path / "runs", ws.path / "sessions"):
        base = Path(os.path.abspath(folder))
        if absolute.is_relative_to(base) and absolute != base:
            return base, absolute.relative_to(base).as_posix()
    return None


__all__ = ["FORMATS", "KTO_SCHEMA", "RFT_SCHEMA", "ExportReport", "export_training_data"]
