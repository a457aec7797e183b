"""Memory explorer: what ``%tea memory [QUERY]`` returns.

The workspace keeps two kinds of memory: what agents kept from their runs (summaries and insights, in
``ws.memory``) and Mem²Evolve's experience memory (tool, success and failure entries, in
``ws.experience`` — see :mod:`tea_notebook.evolve.experience`). :class:`MemoryExplorer` lists both
with the same search box, filter (by the records' ``kind``), table and detail pane as the registry
browser, and reads the same from Python (``.rows``, ``.search(q)``, ``.detail(name)``) and in
static renderers. Experience rows also say how often the entry was retrieved into a prompt and how
the runs that retrieved it ended.
"""

from __future__ import annotations

import copy
from typing import Any

from tea_notebook.notebook.registry_view import RecordBrowser
from tea_notebook.runtime.render import esc


class MemoryExplorer(RecordBrowser):
    """Summaries, insights and experience entries of a workspace, searchable and filterable by kind.

    ``MemoryExplorer(ws.memory)`` (or the workspace itself), ``MemoryExplorer(ws.memory, "kettle",
    kind="insight")``, ``%tea memory kettle``. Rows hold name, kind, description (the text), task,
    run and version (and the score when searched); experience rows (kind ``tool``, ``success`` or
    ``failure``) add their title, ``retrieved`` (times retrieved into a prompt), ``succeeded`` and
    ``failed`` (outcomes of the runs that retrieved them) and ``disabled``. ``experience=False``
    leaves experience memory out.
    """

    filter_field = "kind"
    labels = {"description": "text", "run_id": "run", "version": "v"}
    hidden = ("category",)

    def __init__(
        self,
        registry: Any,
        query: str | None = None,
        *,
        k: int = 20,
        title: str | None = None,
        experience: Any = None,
        **where: Any,
    ):
        registry = getattr(registry, "memory", registry)  # a Workspace is welcome too
        super().__init__(registry, query, k=k, title=title or "memory", **where)
        if experience is None:
            experience = getattr(getattr(registry, "workspace", None), "experience", None)
        self.experience = experience or None  # the experience registry (None: not listed)
        self._outcome_rows: dict[str, tuple] | None = None
        self._mixed: bool | None = None

    # -- data -----------------------------------------------------------------------------------
    def _registries(self) -> list[Any]:
        return [self.registry] + ([self.experience] if self.experience is not None else [])

    def _fetch(self) -> list[tuple[Any, float | None]]:
        if self._hits is not None:
            return self._hits
        if self.experience is None:
            return super()._fetch()
        if not self.query:
            self._hits = [(r, None) for reg in self._registries() for r in reg.list(**self.where)]
            return self._hits
        hits = []
        for reg in self._registries():
            if len(reg):
                found = reg.search(self.query, k=self.k, **self.where)
                hits += [h for h in found if h.keyword > 0 or h.semantic >= self.min_similarity]
        hits.sort(key=lambda h: -h.score)
        hits = hits[: self.k]
        floor = hits[0].score * self.relevance if hits and hits[0].score > 0 else float("-inf")
        self._hits = [(h.record, h.score) for h in hits if h.score >= floor and h.record is not None]
        return self._hits

    def _outcomes(self) -> dict[str, tuple]:
        """Reported outcomes of the runs that retrieved each experience entry (one read per browser)."""
        if self._outcome_rows is None:
            from tea_notebook.evolve.experience import OUTCOME_KIND

            self._outcome_rows = self.experience.workspace.db.usage(OUTCOME_KIND)
        return self._outcome_rows

    def _row(self, record: Any, score: float | None) -> dict[str, Any]:
        experience = self._is_experience(record)
        mixed = self._lists_experience()  # then every row has the experience columns, in one order
        row: dict[str, Any] = {"name": record.name, "kind": getattr(record, "kind", None) or record.category}
        if mixed:
            row["title"] = record.title if experience else None
        row["description"] = record.description
        if experience:
            row["task"] = str((record.metadata or {}).get("task", ""))
            row["run_id"] = record.source_run
        else:
            row["task"] = getattr(record, "task", "")
            row["run_id"] = getattr(record, "run_id", "")
        row["version"] = record.version
        row["category"] = record.category
        if mixed:
            row.update(retrieved=None, succeeded=None, failed=None, disabled=None)
        if experience:
            reported, failed_reported = self._outcomes().get(record.name, (0, 0))[:2]
            row["retrieved"] = record.usage.calls
            row["succeeded"] = reported - failed_reported
            row["failed"] = record.usage.failures
            row["disabled"] = record.disabled
        if score is not None:
            row["score"] = round(float(score), 3)
        return row

    def _lists_experience(self) -> bool:
        """True when experience entries are among the records shown."""
        if self._mixed is None:
            self._mixed = any(self._is_experience(r) for r, _ in self._fetch())
        return self._mixed

    def _cell(self, key: str, value: Any) -> str:
        if key == "disabled":
            return "disabled" if value else ""
        return super()._cell(key, value)

    def _is_experience(self, record: Any) -> bool:
        return self.experience is not None and getattr(record, "KIND", None) == self.experience.kind

    @property
    def experience_rows(self) -> list[dict[str, Any]]:
        """The rows of experience entries (kind tool / success / failure)."""
        return [r for r in self.rows if r.get("retrieved") is not None]

    def search(self, query: str | None) -> "MemoryExplorer":
        """A new explorer of the same memory and filters for ``query`` (everything when empty)."""
        return type(self)(
            self.registry, query, k=self.k, title=self.title, experience=self.experience or False, **self.where
        )

    def filter(self, **where: Any) -> "MemoryExplorer":
        """A new explorer with these field filters too (``None`` drops a filter)."""
        merged = {**self.where, **where}
        return type(self)(
            self.registry, self.query, k=self.k, title=self.title, experience=self.experience or False, **merged
        )

    def choices(self) -> list[str]:
        """The kinds among all current memory items and experience entries."""
        values = {getattr(r, self.filter_field, None) for reg in self._registries() for r in reg.list(_usage=False)}
        return sorted(str(v) for v in values if v is not None)

    # -- one item ---------------------------------------------------------------------------------
    def _owner(self, name: str) -> "MemoryExplorer":
        """This explorer, or a copy reading the experience registry when ``name`` is an experience entry."""
        if self.experience is not None and name not in self.registry and name in self.experience:
            other = copy.copy(self)
            other.registry = self.experience
            return other
        return self

    def detail(self, name: str) -> dict[str, Any]:
        """Everything about the current version of a memory item or experience entry ``name``."""
        owner = self._owner(name)
        info = RecordBrowser.detail(owner, name)
        if owner is not self:
            info["stats"] = self._stats(name)
        return info

    def detail_html(self, name: str) -> str:
        """The detail pane for ``name`` (escaped HTML)."""
        owner = self._owner(name)
        return RecordBrowser.detail_html(owner, name)

    def _stats(self, name: str) -> dict[str, int]:
        record = self.experience.get(name)
        reported, failed_reported = self._outcomes().get(name, (0, 0))[:2]
        return {
            "retrieved": record.usage.calls,
            "succeeded": reported - failed_reported,
            "failed": record.usage.failures,
        }

    # -- renderings -------------------------------------------------------------------------------
    def _text_line(self, row: dict[str, Any]) -> str:
        score = f" · score {row['score']:.3f}" if "score" in row else ""
        if row.get("retrieved") is not None:
            off = " (disabled)" if row.get("disabled") else ""
            text = f"{row['title']}: {row['description']}"
            uses = f" · retrieved {row['retrieved']}, {row['succeeded']} succeeded, {row['failed']} failed"
            return f"[{row['kind']}] {' '.join(text.split())[:120]}{off}{uses}{score}"
        return f"[{row['kind']}] {' '.join(str(row['description']).split())[:120]}{score}"

    def _detail_head(self, info: dict[str, Any]) -> str:
        record = info["record"]
        kind = record.get("kind") or info["category"]
        if "title" in record:  # an experience entry
            off = " <span class='muted'>(disabled)</span>" if record.get("disabled") else ""
            return (
                f"<div><b>{esc(kind)}</b> experience · <b>{esc(record['title'])}</b>{off} "
                f"<span class='muted'>{esc(info['name'])} v{info['version']}</span></div>"
                f"<div>{esc(info['description'])}</div>"
            )
        return f"<div><b>{esc(kind)}</b> <span class='muted'>{esc(info['name'])}</span></div>" + (
            f"<div>{esc(info['description'])}</div>"
        )

    def _detail_sections(self, record: Any, info: dict[str, Any]) -> list[tuple[str, str]]:
        sections = []
        if self._is_experience(record):
            if record.use_cases:
                items = "".join(f"<li>{esc(u)}</li>" for u in record.use_cases)
                sections.append(("use cases", f"<ul>{items}</ul>"))
            if record.body.strip():
                sections.append(("content", f"<pre>{esc(record.body)}</pre>"))
            stats = self._stats(record.name)
            sections.append(
                (
                    "retrievals",
                    f"<div>retrieved {stats['retrieved']} times; the runs that retrieved it: "
                    f"{stats['succeeded']} succeeded, {stats['failed']} failed</div>",
                )
            )
            runs = [r for r in [record.source_run, *record.source_runs] if r]
            if runs:
                listed = ", ".join(f"<code>{esc(r)}</code>" for r in dict.fromkeys(runs))
                outcome = f" · outcome: {esc(record.outcome)}" if record.outcome else ""
                sections.append(("from the runs", f"<div>{listed}{outcome}</div>"))
            who = [f"agent: {record.agent_role}"] if record.agent_role else []
            who += [f"tool: {record.tool_name}"] if record.tool_name else []
            if who:
                sections.append(("about", f"<div>{esc(' · '.join(who))}</div>"))
            sections.append(
                (
                    "change it",
                    f"<div class='muted'><code>ws.experiences.edit({esc(repr(record.name))}, content=…)</code>, "
                    f"<code>.disable({esc(repr(record.name))})</code>, <code>.delete({esc(repr(record.name))})</code>"
                    "</div>",
                )
            )
        else:
            if getattr(record, "task", ""):
                sections.append(("from the task", f"<div>{esc(record.task)}</div>"))
            if getattr(record, "run_id", ""):
                sections.append(
                    ("run", f"<div><code>{esc(record.run_id)}</code> (%tea show {esc(record.run_id)})</div>")
                )
        rest = [s for s in super()._detail_sections(record, info) if s[0] not in ("parameters (JSON schema)", "usage")]
        return sections + rest


__all__ = ["MemoryExplorer"]
