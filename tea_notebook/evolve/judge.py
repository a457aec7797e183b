"""The judge's verdict (Mem²Evolve §3.3.1, prompt C.7): checked model output and easy access to it.

``(r_t, c_t) = Judge(q_t, τ_t, a_t)``: whether the task was completed, the critique, per-agent
performance and per-tool effectiveness (with test ideas the asset validation turns into tests).
The paper judges without ground truth. When a ground truth is given it goes into the prompt (the
critique reads better for it), but the framework decides completion itself: the final answer is compared
with the ground truth (:func:`tea_notebook.answers.gaia_score`), and the judge's own verdict is kept
beside it, never over it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tea_notebook.answers import gaia_score

PERFORMANCE = ("success", "failure")
EFFECTIVENESS = ("success", "partial_success", "failure")


def check_judgement(value: dict[str, Any]) -> str | None:
    """None when ``value`` follows the C.7 schema closely enough to act on, else what is wrong."""
    problems: list[str] = []
    if not isinstance(value.get("task_completed"), bool):
        problems.append("'task_completed' must be true or false")
    for key in ("overall_assessment", "completion_quality"):
        if key in value and not isinstance(value[key], str):
            problems.append(f"'{key}' must be a string")
    for key, kinds, field_name in (
        ("agent_evaluations", PERFORMANCE, "performance"),
        ("tool_evaluations", EFFECTIVENESS, "effectiveness"),
    ):
        items = value.get(key, [])
        if not isinstance(items, list):
            problems.append(f"'{key}' must be a list of objects")
            continue
        for i, item in enumerate(items, 1):
            if not isinstance(item, dict):
                problems.append(f"{key}[{i}] must be an object")
                continue
            if field_name in item and item[field_name] not in kinds:
                problems.append(f"{key}[{i}].{field_name} must be one of {', '.join(kinds)}, not {item[field_name]!r}")
            for list_key in ("strengths", "issues", "test_ideas"):
                if list_key in item and not isinstance(item[list_key], list):
                    problems.append(f"{key}[{i}].{list_key} must be a list of strings")
        if key == "tool_evaluations":
            names = [t.get("tool_name") for t in items if isinstance(t, dict)]
            if any(not isinstance(n, str) or not n for n in names):
                problems.append("every tool evaluation needs a 'tool_name'")
    return "; ".join(problems) if problems else None


@dataclass
class Judgement:
    """The judge's verdict on one task (C.7)."""

    success: bool  # r_t: the answer matches the ground truth when one is given, else the judge's task_completed
    quality: str
    assessment: str  # c_t: the critique
    agents: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    ground_truth: str | None = None
    #: what the judge itself said (``task_completed``); equals ``success`` unless a ground truth overruled it
    judge_completed: bool = False

    @classmethod
    def from_dict(
        cls, value: dict[str, Any], ground_truth: str | None = None, answer: str | None = None
    ) -> "Judgement":
        """A verdict from the judge's JSON (checked with :func:`check_judgement`). With a ``ground_truth``
        the task counts as completed only when ``answer`` matches it (GAIA's normalised comparison),
        whatever the judge said."""
        said = bool(value["task_completed"])
        return cls(
            success=said if ground_truth is None else gaia_score(answer or "", ground_truth),
            quality=str(value.get("completion_quality", "")),
            assessment=str(value.get("overall_assessment", "")),
            agents=[a for a in value.get("agent_evaluations") or [] if isinstance(a, dict)],
            tools=[t for t in value.get("tool_evaluations") or [] if isinstance(t, dict)],
            raw=dict(value),
            ground_truth=ground_truth,
            judge_completed=said,
        )

    @property
    def overruled(self) -> bool:
        """True when the ground truth decided otherwise than the judge."""
        return self.ground_truth is not None and self.success != self.judge_completed

    def agent(self, subtask: int, agent: str = "", role: str = "") -> dict[str, Any] | None:
        """The evaluation of the agent that did sub-task ``subtask`` (matched by sub-task id, then by
        agent id or role)."""
        for item in self.agents:
            if str(item.get("subtask_id", "")).strip() == str(subtask):
                return item
        for item in self.agents:
            if (agent and item.get("agent_id") == agent) or (role and item.get("agent_role") == role):
                return item
        return None

    def performance(self, subtask: int, agent: str = "", role: str = "", default: bool | None = None) -> bool:
        """True when the judge rated that agent a success (the task's verdict when it said nothing). An
        answer that missed the ground truth makes no agent a success, whatever the judge rated."""
        item = self.agent(subtask, agent, role)
        if self.ground_truth is not None and not self.success:
            return False
        if item is not None and item.get("performance") in PERFORMANCE:
            return item["performance"] == "success"
        return self.success if default is None else default

    def tool(self, name: str) -> dict[str, Any] | None:
        """The evaluation of tool ``name``, if the judge gave one."""
        return next((t for t in self.tools if t.get("tool_name") == name), None)

    def critique_of(self, name: str) -> dict[str, Any]:
        """What the asset validation writes tests from: the tool's issues and test ideas, and the
        overall assessment."""
        item = self.tool(name) or {}
        return {
            "effectiveness": item.get("effectiveness", "not evaluated"),
            "issues": list(item.get("issues") or []),
            "test_ideas": list(item.get("test_ideas") or []),
            "overall_assessment": self.assessment,
        }

    def __repr__(self) -> str:
        verdict = "completed" if self.success else "NOT completed"
        gt = ""
        if self.ground_truth is not None:
            said = "completed" if self.judge_completed else "not completed"
            match = "matches" if self.success else "does not match"
            gt = f" (the answer {match} the ground truth {self.ground_truth!r}; the judge said {said})"
        return f"Judgement({verdict}{gt}, quality={self.quality!r}: {self.assessment[:160]!r})"

    def to_json(self) -> str:
        """The judge's JSON, indented."""
        return json.dumps(self.raw, indent=1, ensure_ascii=False)


__all__ = ["Judgement", "check_judgement"]
