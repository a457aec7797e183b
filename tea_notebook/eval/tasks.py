"""Task sets: GAIA's ``metadata.jsonl`` (attachments beside it), or a plain JSONL / CSV of questions
and answers. Everything is checked before an evaluation starts: a missing field, a missing
attachment or a duplicate task id is a :class:`TaskFileError` naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from tea_notebook.errors import TeaError

#: field names accepted for each part of a plain task file (the first is the canonical one)
PLAIN_FIELDS = {
    "id": ("id", "task_id"),
    "question": ("question", "Question", "prompt", "input"),
    "answer": ("answer", "Final answer", "expected", "target", "output"),
    "level": ("level", "Level"),
    "files": ("files", "file", "file_name"),
}


class TaskFileError(TeaError):
    """A task file that cannot be evaluated as it is: names the file, the line and the field."""

    def __init__(self, path: Any, line: int | None, field_name: str | None, problem: str):
        where = f"{path}" + (f", line {line}" if line else "") + (f", field {field_name!r}" if field_name else "")
        super().__init__(f"{where}: {problem}")
        self.path, self.line, self.field, self.problem = path, line, field_name, problem


@dataclass
class Task:
    """One question to evaluate: ``id``, ``question``, the expected ``answer``, an optional ``level``
    and attached ``files`` (absolute paths)."""

    id: str
    question: str
    answer: str
    level: str | None = None
    files: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (what a Ray worker receives)."""
        return {
            "id": self.id,
            "question": self.question,
            "answer": self.answer,
            "level": self.level,
            "files": list(self.files),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Task":
        """The task a :meth:`to_dict` describes."""
        return cls(
            str(data["id"]),
            str(data["question"]),
            str(data["answer"]),
            data.get("level"),
            list(data.get("files") or []),
            dict(data.get("metadata") or {}),
        )


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TaskFileError(path, None, None, f"cannot read the file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise TaskFileError(path, None, None, f"not UTF-8 text ({exc})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskFileError(path, number, None, f"not JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise TaskFileError(path, number, None, "a line must be a JSON object")
        rows.append((number, data))
    return rows


def _read_csv(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            rows = [(reader.line_num, dict(row)) for row in reader if any((v or "").strip() for v in row.values())]
    except OSError as exc:
        raise TaskFileError(path, None, None, f"cannot read the file ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise TaskFileError(path, None, None, f"not a readable CSV file ({exc})") from None
    return rows


def _attachment(folder: Path, name: str, path: Path, line: int, field_name: str) -> str:
    file = (folder / name).resolve()
    if not file.is_file():
        raise TaskFileError(path, line, field_name, f"attachment {name!r} not found (looked for {file})")
    return str(file)


def _check_unique(tasks: list[Task], lines: list[int], path: Path, field_name: str) -> None:
    seen: dict[str, int] = {}
    for task, line in zip(tasks, lines):
        if task.id in seen:
            raise TaskFileError(
                path, line, field_name, f"duplicate task id {task.id!r} (first on line {seen[task.id]})"
            )
        seen[task.id] = line


def load_gaia(path: str | Path) -> list[Task]:
    """GAIA's ``metadata.jsonl`` (or the folder holding it): ``task_id``, ``Question``, ``Level``,
    ``Final answer`` and ``file_name`` (an attachment in the same folder, may be empty)."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / "metadata.jsonl"
    if not path.is_file():
        raise TaskFileError(path, None, None, "no such file")
    tasks, lines = [], []
    for number, row in _read_jsonl(path):
        for name in ("task_id", "Question", "Final answer"):
            if name not in row or row[name] is None or (name != "Final answer" and not _text(row[name]).strip()):
                raise TaskFileError(path, number, name, "missing")
        files = []
        if _text(row.get("file_name")).strip():
            files.append(_attachment(path.parent, _text(row["file_name"]).strip(), path, number, "file_name"))
        meta = {k: v for k, v in row.items() if k not in ("task_id", "Question", "Final answer", "Level", "file_name")}
        level = row.get("Level")
        tasks.append(
            Task(
                _text(row["task_id"]),
                _text(row["Question"]),
                _text(row["Final answer"]),
                None if level in (None, "") else str(level),
                files,
                meta,
            )
        )
        lines.append(number)
    if not tasks:
        raise TaskFileError(path, None, None, "no tasks in the file")
    _check_unique(tasks, lines, path, "task_id")
    return tasks


def _pick(row: dict[str, Any], part: str) -> tuple[str | None, Any]:
    for name in PLAIN_FIELDS[part]:
        if name in row and row[name] not in (None, ""):
            return name, row[name]
    return None, None


def load_plain(path: str | Path) -> list[Task]:
    """A JSONL or CSV file of questions and answers: ``question`` and ``answer`` (also ``Question`` /
    ``Final answer``, ``prompt`` / ``expected``...), optional ``id`` (else the line number), ``level``
    and ``files`` (names relative to the file, ``;``-separated in CSV)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise TaskFileError(path, None, None, "no such file")
    rows = _read_csv(path) if path.suffix.lower() == ".csv" else _read_jsonl(path)
    tasks, lines = [], []
    for number, row in rows:
        _, question = _pick(row, "question")
        if question is None or not _text(question).strip():
            raise TaskFileError(path, number, "question", "missing")
        _, answer = _pick(row, "answer")
        if answer is None:
            raise TaskFileError(path, number, "answer", "missing")
        id_field, task_id = _pick(row, "id")
        _, level = _pick(row, "level")
        files_field, raw_files = _pick(row, "files")
        names = raw_files if isinstance(raw_files, list) else [f for f in _text(raw_files).split(";") if f.strip()]
        files = [_attachment(path.parent, str(n).strip(), path, number, files_field or "files") for n in names]
        known = {n for names_ in PLAIN_FIELDS.values() for n in names_}
        meta = {k: v for k, v in row.items() if k not in known}
        tasks.append(
            Task(
                _text(task_id) if task_id is not None else f"line-{number}",
                _text(question),
                _text(answer),
                None if level is None else _text(level),
                files,
                meta,
            )
        )
        lines.append(number)
    if not tasks:
        raise TaskFileError(path, None, None, "no tasks in the file")
    _check_unique(tasks, lines, path, "id")
    return tasks


def load_tasks(source: "str | Path | Iterable[Task | dict[str, Any]]") -> list[Task]:
    """Tasks from a GAIA folder or ``metadata.jsonl`` (any JSONL whose first row has ``task_id`` and
    ``Question``), a plain JSONL / CSV file, or a list of :class:`Task` / dicts."""
    if isinstance(source, (str, Path)):
        path = Path(source).expanduser()
        if path.is_dir() or path.name == "metadata.jsonl":
            return load_gaia(path)
        if path.suffix.lower() in (".jsonl", ".json") and path.is_file():
            rows = _read_jsonl(path)
            if rows and "task_id" in rows[0][1] and "Question" in rows[0][1]:
                return load_gaia(path)
        return load_plain(path)
    tasks = []
    for i, item in enumerate(source, 1):
        if isinstance(item, Task):
            tasks.append(item)
            continue
        if not isinstance(item, dict):
            raise TaskFileError("<tasks>", i, None, f"a task is a Task or a dict, not {type(item).__name__}")
        _, question = _pick(item, "question")
        _, answer = _pick(item, "answer")
        if question is None:
            raise TaskFileError("<tasks>", i, "question", "missing")
        if answer is None:
            raise TaskFileError("<tasks>", i, "answer", "missing")
        _, task_id = _pick(item, "id")
        _, level = _pick(item, "level")
        tasks.append(
            Task(
                _text(task_id) if task_id is not None else f"item-{i}",
                _text(question),
                _text(answer),
                None if level is None else _text(level),
                list(item.get("files") or []),
            )
        )
    for i, task in enumerate(tasks, 1):
        for f in task.files:
            if not Path(f).is_file():
                raise TaskFileError("<tasks>", i, "files", f"attachment {f!r} not found")
    _check_unique(tasks, list(range(1, len(tasks) + 1)), Path("<tasks>"), "id")
    if not tasks:
        raise TaskFileError("<tasks>", None, None, "no tasks")
    return tasks


def fingerprint(tasks: list[Task]) -> str:
    """A short hash of the tasks' ids, questions and answers (to notice a changed task set on resume)."""
    h = hashlib.sha256()
    for t in tasks:
        h.update(json.dumps([t.id, t.question, t.answer]).encode())
    return h.hexdigest()[:16]


__all__ = ["Task", "TaskFileError", "fingerprint", "load_gaia", "load_plain", "load_tasks"]
