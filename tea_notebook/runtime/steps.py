"""One step of a run as the history shows it to the model: :class:`StepRecord`, declared once.

A step is stored as a ``step`` event (:class:`~tea_notebook.runtime.event_types.StepEvent`):
:meth:`StepRecord.to_event` writes it and :meth:`StepRecord.from_event` reads it back, for the
history a fork replays and for the views (:class:`~tea_notebook.runtime.trajectory.StepView` is a
step record with what the step cost). It sits under every module of the runtime that reads steps
(the views, forking, memory, prompts); :mod:`tea_notebook.runtime.records` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, cast

from tea_notebook.runtime.event_types import StepEvent

VALIDATION_PREFIX = "Error (ValidationError):"
"""How the observation of a call with bad arguments starts (``InvokeResult.to_observation``)."""
VALIDATION_LIMIT = 4000
"""Characters of a validation error shown in the history (others are clipped at ``limit``)."""

#: a step record's thought fields and the keys the model gives them in its JSON output
THOUGHT_KEYS = {
    "thinking": "thinking",
    "evaluation": "evaluation_previous_goal",
    "memory": "memory",
    "next_goal": "next_goal",
}


@dataclass
class StepRecord:
    """What one step did, as the history shows it to the model."""

    number: int
    evaluation: str = ""
    memory: str = ""
    next_goal: str = ""
    thinking: str = ""
    results: list[tuple[str, str, str]] = field(default_factory=list)  # (tool, args json, result text)
    #: how a fork took this step, when not from the model ("actions edited", "re-executed live")
    note: str = ""

    # -- the model's thoughts ---------------------------------------------------------------------
    def thoughts(self) -> dict[str, str]:
        """The step's thoughts as the model gave them (the keys of its JSON output)."""
        return {key: getattr(self, name) for name, key in THOUGHT_KEYS.items()}

    def take_thoughts(self, thoughts: Mapping[str, Any]) -> None:
        """Set the thought fields from the model's output (its JSON keys; missing ones are empty)."""
        for name, key in THOUGHT_KEYS.items():
            setattr(self, name, thoughts.get(key, ""))

    # -- the stored form --------------------------------------------------------------------------
    def to_event(self) -> StepEvent:
        """The step's ``step`` event (its ``note`` only when it has one)."""
        event = StepEvent(
            thinking=self.thinking,
            evaluation=self.evaluation,
            memory=self.memory,
            next_goal=self.next_goal,
            results=[list(r) for r in self.results],
        )
        if self.note:
            event["note"] = self.note
        return event

    def read_event(self, data: Mapping[str, Any]) -> None:
        """Set the thoughts and results from a stored ``step`` event (the ``note`` is left as it is:
        it says how the run that stored it took the step, not how a replay takes it)."""
        self.thinking = data.get("thinking", "")
        self.evaluation = data.get("evaluation", "")
        self.memory = data.get("memory", "")
        self.next_goal = data.get("next_goal", "")
        self.results = [cast("tuple[str, str, str]", tuple(r)) for r in data.get("results", [])]

    @classmethod
    def from_event(cls, number: int, data: Mapping[str, Any]) -> "StepRecord":
        """Step ``number`` as its stored ``step`` event tells it (see :meth:`read_event`)."""
        record = cls(number)
        record.read_event(data)
        return record

    # -- the history the model reads --------------------------------------------------------------
    def render(self, limit: int = 600) -> str:
        """The step as the model reads it (cached: a finished step is rendered once, not every step;
        the same text object each time, which what is kept of a prompt's pieces is found by)."""
        cached: tuple[int, int, str, str, str, int, str] | None = self.__dict__.get("_rendered")
        # the prompt renders every step of its history each step: the fields are compared by identity
        # (a field set again to an equal text renders again) without building a key
        if (
            cached is not None
            and cached[0] == limit
            and cached[1] == len(self.results)
            and cached[2] is self.evaluation
            and cached[3] is self.memory
            and cached[4] is self.next_goal
            and cached[5] == self.number
        ):
            return cached[6]
        text = self._render(limit)
        self.__dict__["_rendered"] = (
            limit,
            len(self.results),
            self.evaluation,
            self.memory,
            self.next_goal,
            self.number,
            text,
        )
        return text

    def _render(self, limit: int) -> str:
        lines = [
            f"<step_{self.number}>",
            f"Evaluation of Previous Step: {self.evaluation}",
            f"Memory: {self.memory}",
            f"Next Goal: {self.next_goal}",
            "Action Results:",
        ]
        for tool, args, result in self.results:
            flat = " ".join(str(result).split())
            # a validation error lists every bad argument (bounded by the registry): shown whole, so
            # the model can fix all of them in one call instead of one field per step
            cap = max(limit, VALIDATION_LIMIT) if flat.startswith(VALIDATION_PREFIX) else limit
            if len(flat) > cap:
                flat = flat[:cap] + f"… ({len(flat) - cap} more characters)"
            lines.append(f"[{tool}] {args} -> {flat}")
        lines.append(f"</step_{self.number}>")
        return "\n".join(lines)

    def size(self) -> int:
        """Approximate tokens of the rendered step (cached: a finished step does not change)."""
        cached = self.__dict__.get("_size")
        if cached is None or cached[0] != len(self.results):
            cached = self.__dict__["_size"] = (len(self.results), len(self.render()) // 4)
        return int(cached[1])


__all__ = ["THOUGHT_KEYS", "VALIDATION_LIMIT", "VALIDATION_PREFIX", "StepRecord"]
