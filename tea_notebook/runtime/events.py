"""The one event stream: every run writes typed events to the workspace store.

Trajectories, views, plots, replay and evaluation all read these events; nothing keeps a second
copy of what happened. Subscribers (live views) are called for each event as it is written.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from tea_notebook.store.database import Database

log = logging.getLogger(__name__)

EVENT_TYPES = frozenset(
    {
        "run_started",
        "model_request",
        "model_response",
        "step",
        "tool_call",
        "tool_result",
        "memory_written",
        "tool_created",
        "tool_discarded",
        "tool_reused",
        "error",
        "run_finished",
    }
)

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.I)
_SECRET_SHAPES = re.compile(
    r"\b(sk-[A-Za-z0-9_\-]{16,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abp]-[A-Za-z0-9\-]{10,})\b"
)


class _Redactor:
    """Replaces secrets in text: values of ``*_KEY`` / ``*_TOKEN`` / ``*_SECRET`` / ``*_PASSWORD``
    environment variables and key-shaped strings. The environment is scanned at the start of every
    run (:meth:`refresh`) and at most every two seconds otherwise, not per event."""

    def __init__(self) -> None:
        self._checked = 0.0
        self._pattern: re.Pattern[str] | None = None
        self._names: dict[str, str] = {}

    def refresh(self) -> None:
        """Rescan the environment for secret values now."""
        self._names = {
            value: name for name, value in os.environ.items() if len(value) >= 8 and _SECRET_NAME.search(name)
        }
        values = sorted(self._names, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, values))) if values else None
        self._checked = time.monotonic()

    def __call__(self, text: str) -> str:
        if time.monotonic() - self._checked > 2.0:
            self.refresh()
        if self._pattern is not None:
            text = self._pattern.sub(lambda m: f"[{self._names[m.group(0)]} redacted]", text)
        return _SECRET_SHAPES.sub("[secret redacted]", text)


redact = _Redactor()


@dataclass(frozen=True)
class Event:
    """One thing that happened in a run."""

    id: str
    run_id: str
    type: str
    time: float
    data: dict[str, Any] = field(default_factory=dict)
    parent_id: str | None = None
    step: int | None = None
    seq: int = 0

    @classmethod
    def from_row(cls, row: tuple) -> "Event":
        seq, id_, run_id, parent_id, type_, step, when, data = row
        return cls(id_, run_id, type_, when, json.loads(data), parent_id, step, seq)


class EventLog:
    """Writes events of a workspace and fans them out to subscribers.

    Subscribers see each event at once; the database gets them in batches (:meth:`flush`, called
    by the agent at the end of every step and run, and by any read), so a step costs one
    transaction instead of one per event.
    """

    def __init__(self, db: "Database"):
        self._db = db
        self._subscribers: list[tuple[str | None, Callable[[Event], None]]] = []
        self._lock = threading.Lock()
        self._pending: list[tuple] = []

    def new_id(self) -> str:
        """A fresh, sortable-enough unique id."""
        return f"{int(time.time() * 1000):x}{uuid.uuid4().hex[:10]}"

    def emit(
        self,
        run_id: str,
        type_: str,
        data: dict[str, Any] | None = None,
        *,
        parent_id: str | None = None,
        step: int | None = None,
        flush: bool = False,
    ) -> Event:
        """Record one event (secrets redacted) and notify subscribers; ``flush`` writes it now."""
        if type_ not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type_!r}")
        payload = redact(json.dumps(data or {}, default=str))
        event = Event(self.new_id(), run_id, type_, time.time(), json.loads(payload), parent_id, step)
        with self._lock:
            self._pending.append((event.id, run_id, parent_id, type_, step, event.time, payload))
        if flush or len(self._pending) >= 200:
            self.flush()
        for run_filter, callback in list(self._subscribers):
            if run_filter is None or run_filter == run_id or run_filter == event.data.get("root_run"):
                try:
                    callback(event)
                except Exception as exc:  # noqa: BLE001 - a broken view must not break the run
                    log.warning("event subscriber failed: %s", exc)
        return event

    def flush(self) -> None:
        """Write pending events to the database (in order, also when threads flush at once)."""
        with self._lock:
            rows, self._pending = self._pending, []
            if rows:
                self._db.append_events(rows)

    def subscribe(self, callback: Callable[[Event], None], run_id: str | None = None) -> Callable[[], None]:
        """Call ``callback(event)`` for every new event (of one run tree, or all). Returns an unsubscribe."""
        entry = (run_id, callback)
        with self._lock:
            self._subscribers.append(entry)

        def unsubscribe() -> None:
            with self._lock:
                if entry in self._subscribers:
                    self._subscribers.remove(entry)

        return unsubscribe

    def events(self, run_id: str, nested: bool = True) -> list[Event]:
        """A run's events in order (with its sub-runs' events when ``nested``)."""
        self.flush()
        ids = self._db.descendants(run_id) if nested else [run_id]
        return [Event.from_row(r) for r in self._db.events_of(ids)]
