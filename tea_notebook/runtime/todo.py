"""The planning agent's todo tool, kept in sync both ways with a human-readable ``todo.md``.

``todo.md`` lives in the run folder, where sandboxed code can write too: it is read and written
only beneath the run folder's descriptor (:mod:`tea_notebook._safe_open`), never through a link
that leads out of it, never from a named pipe; a write replaces whatever is at the name.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tea_notebook._safe_open import Beneath, read_beneath, write_beneath
from tea_notebook.errors import EnvironmentFailure

PRIORITIES = ("high", "medium", "low")
_LINE = re.compile(
    r"^- \[(?P<mark>[ xX!])\] (?P<id>\d+)\. (?P<desc>.*?)"
    r"(?: \(priority: (?P<prio>high|medium|low)(?:, category: (?P<cat>[^)]*))?\))?"
    r"(?: — result: (?P<result>.*))?$"
)
_LOOSE = re.compile(r"^[-*] \[(?P<mark>[ xX!])\] (?P<desc>.+)$")
_MARKS = {"pending": " ", "success": "x", "failed": "!"}
_STATUS = {" ": "pending", "x": "success", "X": "success", "!": "failed"}
MAX_BYTES = 1_000_000  # a todo.md larger than this is not read (sandboxed code may have planted it)


class TodoError(ValueError):
    """todo.md cannot be read or written safely (a link out of the run folder, a pipe, too large)."""


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
    """Steps plus their ``todo.md`` file. Edits to the file by a person are read back before each use.
    The file's folder (the run folder) is trusted; everything in it is reached beneath it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.steps: list[TodoStep] = []
        self._stamp: tuple[int, int, int] | None = None
        self._shown = ""  # todo.md as last read or written
        self.problem = ""  # why todo.md could not be read back, when it could not
        self._sync_in()

    def _look(self) -> tuple[int, int, int] | None:
        """What todo.md is now (inode, size, mtime) without opening it; None when it is not there."""
        if not self.path.parent.is_dir():
            return None
        try:
            root = Beneath(self.path.parent)
        except OSError as exc:
            raise TodoError(f"todo.md cannot be read: the run folder cannot be opened ({exc.strerror})") from None
        try:
            found = root.lookup(self.path.name)
        except EnvironmentFailure as exc:  # a link to a missing folder, a loop of links …
            if getattr(exc, "missing", False):
                return None
            raise TodoError(f"todo.md cannot be read: {exc}") from None
        finally:
            root.close()
        if found is None:
            raise TodoError(f"todo.md cannot be read: it is a link that leads outside the run folder ({self.path})")
        st = found[1]
        return None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns)

    def _load(self, text: str) -> None:
        steps = []
        unnumbered = []
        for raw in text.splitlines():
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

    def _read(self) -> str | None:
        try:
            data = read_beneath(self.path.parent, self.path.name, MAX_BYTES)
        except EnvironmentFailure as exc:
            raise TodoError(f"todo.md cannot be read: {exc}") from None
        return None if data is None else data.decode("utf-8", "replace")

    def _sync_in(self) -> None:
        """Read todo.md back when it changed since it was last read or written. When it cannot be
        read safely the plan held in memory stays, and ``problem`` says why (the next write replaces
        whatever is in its place)."""
        try:
            stamp = self._look()
            if stamp is None or stamp == self._stamp:
                self.problem = ""
                return
            text = self._read()
            if text is not None:
                self._load(text)
                self._shown = text
            self._stamp = self._look()
            self.problem = ""
        except TodoError as exc:
            self.problem = str(exc)

    def _text(self) -> str:
        order = sorted(self.steps, key=lambda s: (s.status != "pending", PRIORITIES.index(s.priority), s.id))
        return "# Todo\n\n" + "\n".join(s.line() for s in order) + "\n"

    def _write(self) -> None:
        text = self._text()
        try:
            write_beneath(self.path.parent, self.path.name, text)
            self._shown = text
            self._stamp = self._look()
        except (EnvironmentFailure, TodoError) as exc:
            raise TodoError(f"todo.md cannot be written: {exc}") from None
        self.problem = ""

    def render(self) -> str:
        """The todo.md text (empty when there is no plan); a note saying why when todo.md could not
        be read back."""
        self._sync_in()
        if self.problem:
            kept = f"the plan kept in memory:\n{self._text()}" if self.steps else "no plan is kept in memory yet"
            return f"({self.problem}; the next todo change replaces it; {kept})"
        return self._shown if self.steps else ""

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
            rel = self._export_path(path)
            try:
                rel = write_beneath(self.path.parent, rel, self.render())
            except EnvironmentFailure as exc:
                raise TodoError(f"export failed: {exc}") from None
            return f"exported to {self.path.parent / rel}"
        raise ValueError(f"unknown todo action {action!r}")

    def _export_path(self, path: str | None) -> str:
        """Where ``export`` writes, relative to the run folder: the model names a place in it."""
        if not path:
            return "todo-export.md"
        folder = os.path.abspath(self.path.parent)
        given = os.path.normpath(os.path.join(folder, path))
        if given != folder and given.startswith(folder + os.sep):
            return os.path.relpath(given, folder)
        raise TodoError(f"export path {path!r} refused: give a path inside the run folder (e.g. 'plan.md')")
