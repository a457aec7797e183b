"""The one event stream: every run writes typed events to the workspace store.

Trajectories, views, plots, replay and evaluation all read these events; nothing keeps a second
copy of what happened. Subscribers (live views) are called for each event as it is written.

Before an event is encoded its data is redacted (:func:`tea_notebook.redaction.redact`) and every
text longer than :data:`~tea_notebook.store.blobs.FIELD_LIMIT` is clipped (in the same walk), its full
text kept once in the store (:meth:`EventLog.full_text` gets it back). The data is encoded to JSON
once; the intent journal and the database keep that text.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, get_args

from tea_notebook.errors import NotFoundError
from tea_notebook.redaction import redact
from tea_notebook.runtime.event_types import EventType
from tea_notebook.store.blobs import FIELD_LIMIT, blob_ref, build, clip, digest, json_leaves, plan
from tea_notebook.store.database import new_id

if TYPE_CHECKING:
    from tea_notebook.store.database import Database, IntentJournal

log = logging.getLogger(__name__)

_RECENT_TEXTS = 16  # long texts remembered to find later texts made of them (see store.blobs.plan)
_RECENT_CHARS = 64 * 1024 * 1024
_CLIPPED_TEXTS = 8  # long texts whose clipped form and digest are remembered

EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))
"""Every event type (declared once, in :mod:`tea_notebook.runtime.event_types`)."""


@dataclass(frozen=True)
class Event:
    """One thing that happened in a run."""

    id: str
    run_id: str
    type: EventType
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
        self._pending_blobs: dict[str, str | tuple[int, list]] = {}
        self._recent: OrderedDict[str, str] = OrderedDict()
        self._intents: IntentJournal | None = None  # opened at the first make_durable
        self._journaled: tuple[int, int] = (0, 0)  # pending rows and texts in the journal already
        self._clipped: dict[str, tuple[str, str | None]] = {}

    def new_id(self) -> str:
        """A fresh, sortable-enough unique id."""
        return new_id()

    def emit(
        self,
        run_id: str,
        type_: EventType,
        data: Mapping[str, Any] | None = None,
        *,
        parent_id: str | None = None,
        step: int | None = None,
        flush: bool = False,
        uses: list[tuple[str, list[tuple]]] | None = None,
    ) -> Event:
        """Record one event (secrets redacted, long texts clipped) and notify subscribers; ``flush``
        writes it now (with invocation counts ``uses``, see :meth:`flush`). ``data`` is the type's
        ``TypedDict`` (:data:`~tea_notebook.runtime.event_types.EVENT_DATA`), a plain dict at run time."""
        if type_ not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type_!r}")
        blobs: dict[str, str] = {}
        # one walk redacts and clips (a long text is clipped after it is redacted)
        clean = redact(data or {}, clip=lambda text: self._clip(text, blobs), limit=FIELD_LIMIT)
        payload = json.dumps(clean)
        event = Event(self.new_id(), run_id, type_, time.time(), clean, parent_id, step)
        with self._lock:
            self._pending.append((event.id, run_id, parent_id, type_, step, event.time, payload))
            for key, text in blobs.items():
                self._keep(key, text)
        if flush or uses or len(self._pending) >= 200:
            self.flush(uses)
        if self._subscribers:
            self._notify(event)
        return event

    def _clip(self, text: str, blobs: dict[str, str]) -> str:
        """``text`` clipped, its full text put in ``blobs``; a text clipped a moment ago (a tool's
        long result is in its ``tool_result`` and again in its step) is not hashed again."""
        done = self._clipped.get(text)
        if done is None:
            done = clip(text)
            with self._lock:
                if len(self._clipped) >= _CLIPPED_TEXTS or sum(map(len, self._clipped)) + len(text) > _RECENT_CHARS:
                    self._clipped.clear()
                self._clipped[text] = done
        clipped, key = done
        if key is not None:
            blobs[key] = text
        return clipped

    def _notify(self, event: Event) -> None:
        root = event.data.get("root_run")
        for run_filter, callback in list(self._subscribers):
            if run_filter is None or run_filter == event.run_id or run_filter == root:
                try:
                    callback(event)
                except Exception as exc:  # noqa: BLE001 - a broken view must not break the run
                    log.warning("event subscriber failed: %s", exc)

    def _keep(self, key: str, text: str, leaf: bool = False) -> None:
        """Queue the full text of a clipped field: as a recipe over recent texts when it is made of
        one of them (checked to rebuild exactly), else whole. Called with the lock held."""
        if key in self._recent:
            self._recent.move_to_end(key)
            return
        recipe = plan(text, self._recent)
        if recipe is None and not leaf:
            # a JSON document (tool arguments) whose long strings come from an earlier reply
            leaves = json_leaves(text)
            for inner in leaves:
                self._keep(digest(inner), inner, leaf=True)
            recipe = plan(text, self._recent) if leaves else None
        if recipe is not None and build(recipe, self._recent.get) != text:
            recipe = None
        self._pending_blobs[key] = text if recipe is None else (len(text), recipe)
        self._recent[key] = text
        total = sum(map(len, self._recent.values()))
        while len(self._recent) > _RECENT_TEXTS or (total > _RECENT_CHARS and len(self._recent) > 1):
            total -= len(self._recent.popitem(last=False)[1])

    def keep(self, texts: dict[str, str]) -> None:
        """Keep texts by their sha256 (``digest -> text``) with the next write: the parts of model
        requests (:mod:`tea_notebook.runtime.contexts`); a kept digest costs nothing."""
        with self._lock:
            for key, text in texts.items():
                if len(text) > FIELD_LIMIT:  # a long part is likely made of a reply or result kept already
                    self._keep(key, text)
                else:
                    self._pending_blobs.setdefault(key, text)

    def flush(self, uses: list[tuple[str, list[tuple]]] | None = None) -> None:
        """Write pending events to the database (in order, also when threads flush at once), with
        invocation counts ``uses`` (``(kind, rows)``) in the same transaction."""
        with self._lock:
            rows, self._pending = self._pending, []
            blobs, self._pending_blobs = self._pending_blobs, {}
            uses = [(kind, use) for kind, use in uses or () if use]
            if rows or blobs or uses:
                self._db.append_events(rows, blobs, uses)
            if self._journaled != (0, 0) and self._intents is not None:
                self._intents.clear()
            self._journaled = (0, 0)

    def make_durable(self) -> None:
        """Make the pending events survive this process being killed from now on, without
        committing them: they are appended to the workspace's intent journal (one ``write``,
        :class:`~tea_notebook.store.database.IntentJournal`) and committed with the next
        :meth:`flush`. What an agent step did before a tool acts is made durable so. When the journal
        cannot be written (a read-only or full disk) they are committed instead."""
        try:
            with self._lock:
                done_rows, done_blobs = self._journaled
                if done_rows == len(self._pending) and done_blobs == len(self._pending_blobs):
                    return
                if self._intents is None:
                    self._intents = self._db.intent_journal()
                blobs = dict(itertools.islice(self._pending_blobs.items(), done_blobs, None))
                self._intents.append(self._pending[done_rows:], blobs)
                self._journaled = (len(self._pending), len(self._pending_blobs))
        except OSError as exc:
            log.warning("the intent journal could not be written (%s): the events are committed now", exc)
            self.flush()

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

    def full_text(self, text: str) -> str:
        """The full text of a clipped field (pass the clipped text itself, or ``"sha256:…"`` from its
        mark); a text that was not clipped comes back as it is."""
        key = blob_ref(text)
        if key is None:
            return text
        self.flush()
        full = self._db.blob(key)
        if full is None:
            raise NotFoundError(f"no full text sha256:{key} in {self._db.path}")
        return full
