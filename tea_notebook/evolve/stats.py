"""The numbers the papers report about self-evolution, read back from the event store:
tools created and discarded, reuse (AgentOrchestra: >50 tools, ~30% reused), first-pass validity
and mean fix iterations (Mem²Evolve, Table 4)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost


@dataclass(frozen=True, repr=False)
class ToolStats:
    """Self-evolution of the tool bank so far."""

    created: int  # distinct tools the tool manager registered
    versions: int  # registrations, new versions included
    discarded: int
    reuse_decisions: int  # requests answered with existing tools instead of new ones
    reused_tools: int  # created tools that were called again after their creation
    first_pass_validity: float  # share of registered tools that passed their first validation
    mean_fix_iterations: float  # over every validated candidate, registered or discarded

    @property
    def reuse_rate(self) -> float:
        """Share of created tools used again after their creation."""
        return self.reused_tools / self.created if self.created else 0.0

    def _repr_html_(self) -> str:
        from tea_notebook.evolve.render import stats_html

        return stats_html(self)

    def __repr__(self) -> str:
        from tea_notebook.evolve.render import stats_text

        return stats_text(self)

    def __str__(self) -> str:
        return (
            f"{self.created} tools created ({self.versions} registrations, {self.discarded} discarded), "
            f"reuse rate {self.reuse_rate:.0%} ({self.reused_tools} reused; {self.reuse_decisions} requests met by "
            f"existing tools), first-pass validity {self.first_pass_validity:.0%}, "
            f"mean fix iterations {self.mean_fix_iterations:.2f}"
        )


def tool_stats(ws: "RunHost") -> ToolStats:
    """Read the tool manager's events and the tools' usage counters."""
    created: dict[str, int] = {}
    first_pass: list[bool] = []
    fixes: list[int] = []
    discarded = reused = 0
    for _run, kind, _time, data in ws.db.events_of_type(["tool_created", "tool_discarded", "tool_reused"]):
        d = json.loads(data)
        if kind == "tool_created":
            created[d["tool"]] = created.get(d["tool"], 0) + 1
            first_pass.append(bool(d.get("first_pass")))
            fixes.append(int(d.get("fix_iterations") or 0))
        elif kind == "tool_discarded":
            discarded += 1
            fixes.append(int(d.get("fix_iterations") or 0))
        else:
            reused += 1
    ws.tools.flush_usage()
    usage = ws.db.usage("tool") if created else {}
    called_again = sum(1 for name in created if usage.get(name, (0,))[0] > 0)
    return ToolStats(
        created=len(created),
        versions=sum(created.values()),
        discarded=discarded,
        reuse_decisions=reused,
        reused_tools=called_again,
        first_pass_validity=sum(first_pass) / len(first_pass) if first_pass else 0.0,
        mean_fix_iterations=sum(fixes) / len(fixes) if fixes else 0.0,
    )
