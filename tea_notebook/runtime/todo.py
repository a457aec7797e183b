"""The planning agent's todo tool, kept in sync both ways with a human-readable ``todo.md``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

PRIORITIES = ("high", "medium", "low")
_LINE = re.compile(
    r"^- \[(?P<mark>[ xX!])\] (?P<id>\d+)\. (?P<desc>.*?)"
    r"(?: \(priority: (?P<prio>high|medium|low)(?:, category: (?P<cat>[^)]*))?\))?"
    r"(?: — result: (?P<result>.*))?$"
)
_LOOSE = re.compile(r"^[-*] \[(?P<mark>[ xX!])\] (?P<desc>.+)$")
_MARKS = {"pending": " ", "success": "x", "failed": "!"}
_STATUS = {" ": "pending", "x": "success", "X": "success", "!": "failed"}


@dataclass
class TodoStep:
    """One planned step."""

    id: int
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    priority: str = "medium"
    category: str = ""
    status: str = "pending"
    result: str = ""

    def line(self) -> str:
        extra = f" (priority: {self.priority}" + (f", category: {self.category}" if self.category else "") + ")"
        tail = f" — result: {' '.join(self.result.split())}" if self.result else ""
        return f"- [{_MARKS[self.status]}] {self.id}. {self.description}{extra}{tail}"


class TodoList:
    """Steps plus their ``todo.md`` file. Edits to the file by a person are read back before each use."""

    def __init__(self, path: Path):
        self.path = path
        self.steps: list[TodoStep] = []
        self._stamp: float | None = None
        if path.exists():
            self._load()

    def _load(self) -> None:
        steps = []
        unnumbered = []
        for raw in self.path.read_text().splitlines():
            m = _LINE.match(raw.strip())
            loose = None if m else _LOOSE.match(raw.strip())
            if loose:  # a line a person added by hand, without a number
                unnumbered.append(TodoStep(0, loose["desc"].strip(), status=_STATUS[loose["mark"]]))
            if m:
                steps.append(
                    TodoStep(
                        id=int(m["id"]),
                        description=m["desc"],
                        priority=m["prio"] or "medium",
                        category=m["cat"] or "",
                        status=_STATUS[m["mark"]],
                        result=m["result"] or "",
                    )
                )
        next_id = max((s.id for s in steps), default=0) + 1
        for i, step in enumerate(unnumbered):
            step.id = next_id + i
        self.steps = steps + unnumbered
        self._stamp = self.path.stat().st_mtime_ns

    def _sync_in(self) -> None:
        if self.path.exists() and self.path.stat().st_mtime_ns != self._stamp:
            self._load()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        order = sorted(self.steps, key=lambda s: (s.status != "pending", PRIORITIES.index(s.priority), s.id))
        self.path.write_text("# Todo\n\n" + "\n".join(s.line() for s in order) + "\n")
        self._stamp = self.path.stat().st_mtime_ns

    def render(self) -> str:
        """The todo.md text (empty when there is no plan)."""
        self._sync_in()
        return self.path.read_text() if self.path.exists() and self.steps else ""

    def _find(self, step_id: int) -> TodoStep:
        for s in self.steps:
            if s.id == step_id:
                return s
        known = ", ".join(str(s.id) for s in self.steps) or "none"
        raise ValueError(f"no todo step {step_id} (steps: {known})")

    def apply(
        self,
        action: Literal["add", "complete", "update", "list", "clear", "show", "export"],
        steps: list[dict[str, Any]] | None = None,
        step_id: int | None = None,
        status: Literal["success", "failed"] = "success",
        result: str = "",
        description: str | None = None,
        priority: str | None = None,
        path: str | None = None,
    ) -> str:
        """Run one todo operation and return what the model should read."""
        self._sync_in()
        if action == "add":
            if not steps:
                raise ValueError("'add' needs steps: [{description, priority?, category?, parameters?}]")
            next_id = max((s.id for s in self.steps), default=0) + 1
            for i, spec in enumerate(steps):
                prio = spec.get("priority", "medium")
                if prio not in PRIORITIES:
                    raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, not {prio!r}")
                self.steps.append(
                    TodoStep(
                        next_id + i, spec["description"], spec.get("parameters", {}), prio, spec.get("category", "")
                    )
                )
            self._write()
            return f"added {len(steps)} step(s)\n" + self.render()
        if action in ("complete", "update"):
            if step_id is None:
                raise ValueError(f"'{action}' needs step_id")
            step = self._find(step_id)
            if action == "complete":
                step.status, step.result = status, result
            else:
                if description:
                    step.description = description
                if priority:
                    if priority not in PRIORITIES:
                        raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}")
                    step.priority = priority
                if result:
                    step.result = result
            self._write()
            return self.render()
        if action == "clear":
            before = len(self.steps)
            self.steps = [s for s in self.steps if s.status == "pending"]
            self._write()
            return f"removed {before - len(self.steps)} finished step(s)\n" + self.render()
        if action in ("list", "show"):
            return self.render() or "(todo is empty)"
        if action == "export":
            target = Path(path) if path else self.path.with_name("todo-export.md")
            target.write_text(self.render())
            return f"exported to {target}"
        raise ValueError(f"unknown todo action {action!r}")
