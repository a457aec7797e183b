"""Egress refusals of a run, bounded per step: the first few stored in full, the rest counted.

Sandboxed code can make thousands of refused requests in one step (a loop over hosts, a retrying
client). Storing one ``egress_refused`` event each would fill the store and every view of the run;
:class:`RefusalTally` keeps the first :data:`FULL_PER_STEP` refusals of a step as events of their
own and counts the rest by rule and host (at most :data:`GROUPS_PER_STEP` hosts a step; further
hosts are counted by rule alone). The counted ones become one ``egress_refused`` event per group,
with ``count`` = how many refusals that event stands for, emitted before the run's next other event
(or when a refusal of a later step arrives). The sum of ``count`` (1 when absent) over a run's
``egress_refused`` events is the exact number of refusals.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

__all__ = ["FULL_PER_STEP", "GROUPS_PER_STEP", "RefusalTally", "refusal_line"]

#: refusals of one step stored as events of their own, before the rest are counted
FULL_PER_STEP = 5
#: (rule, host) groups of one step counted apart; refusals to further hosts are counted by rule
GROUPS_PER_STEP = 20


def refusal_line(data: dict[str, Any]) -> str:
    """How a view says one ``egress_refused`` event: its reason, and how many refusals it stands for."""
    count = data.get("count") or 1
    reason = str(data.get("reason", ""))
    if count == 1:
        return f"Network request refused: {reason}"
    hosts = " to further hosts" if data.get("host") == "*" else ""
    return f"Network request refused {count} times{hosts} (rule {data.get('rule', '')!r}), e.g. {reason}"


class RefusalTally:
    """Decides which refusals of a run become events now and which are counted for later.

    ``emit(data, step)`` records one ``egress_refused`` event. :meth:`add` is called from any thread
    (a proxy's, a browser's); :meth:`flush` from the run's own emitting path before its other events.
    """

    def __init__(self, emit: Callable[[dict[str, Any], int], None]):
        self._emit = emit
        self._lock = threading.Lock()
        self._step: int | None = None
        self._full = 0  # refusals of ``_step`` stored in full so far
        self._groups: dict[tuple[str, str], dict[str, Any]] = {}  # counted, not yet emitted
        self.pending = False  # read without the lock by the emitting path: a stale False only delays a flush

    def add(self, data: dict[str, Any], step: int) -> None:
        """One refusal reported during ``step``: an event at once while the step has had fewer than
        :data:`FULL_PER_STEP`, else counted in its group."""
        with self._lock:
            if step != self._step:
                ready = self._take()
                self._step, self._full = step, 0
            else:
                ready = []
            full = self._full < FULL_PER_STEP
            if full:
                self._full += 1
            else:
                self._count(data)
        for grouped, at in ready:
            self._emit(grouped, at)
        if full:
            self._emit(dict(data), step)

    def flush(self) -> None:
        """Emit the counted refusals, one event per group (the step's further refusals keep being counted)."""
        with self._lock:
            ready = self._take()
        for grouped, at in ready:
            self._emit(grouped, at)

    def _count(self, data: dict[str, Any]) -> None:
        rule, host = str(data.get("rule", "")), str(data.get("host", ""))
        key = (rule, host)
        if key not in self._groups:
            hosts = sum(1 for _, h in self._groups if h != "*")
            if hosts >= GROUPS_PER_STEP:
                key = (rule, "*")
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = dict(data, count=0)
            if key[1] == "*":
                group["host"] = "*"
        group["count"] += 1
        self.pending = True

    def _take(self) -> list[tuple[dict[str, Any], int]]:
        if not self._groups or self._step is None:
            return []
        ready = [(group, self._step) for group in self._groups.values()]
        self._groups = {}
        self.pending = False
        return ready
