"""Memory explorer: what ``%tea memory [QUERY]`` returns.

The workspace's memory registry holds what agents kept from their runs: summaries and insights
(and whatever kinds are added later). :class:`MemoryExplorer` lists them with the same search box,
filter (by the records' ``kind``), table and detail pane as the registry browser, and reads the
same from Python (``.rows``, ``.search(q)``, ``.detail(name)``) and in static renderers.
"""

from __future__ import annotations

from typing import Any

from tea_notebook.notebook.registry_view import RecordBrowser, _esc


class MemoryExplorer(RecordBrowser):
    """Summaries, insights and other memory items of a workspace, searchable and filterable by kind.

    ``MemoryExplorer(ws.memory)`` (or the workspace itself), ``MemoryExplorer(ws.memory, "kettle",
    kind="insight")``, ``%tea memory kettle``. Rows hold name, kind, description (the text), task,
    run and version (and the score when searched).
    """

    filter_field = "kind"
    labels = {"description": "text", "run_id": "run", "version": "v"}
    hidden = ("category",)

    def __init__(self, registry: Any, query: str | None = None, *, k: int = 20, title: str | None = None, **where):
        registry = getattr(registry, "memory", registry)  # a Workspace is welcome too
        super().__init__(registry, query, k=k, title=title or "memory", **where)

    def _row(self, record: Any, score: float | None) -> dict[str, Any]:
        row: dict[str, Any] = {"name": record.name, "kind": getattr(record, "kind", None) or record.category}
        row["description"] = record.description
        row["task"] = getattr(record, "task", "")
        row["run_id"] = getattr(record, "run_id", "")
        row["version"] = record.version
        row["category"] = record.category
        if score is not None:
            row["score"] = round(float(score), 3)
        return row

    def _text_line(self, row: dict[str, Any]) -> str:
        score = f" · score {row['score']:.3f}" if "score" in row else ""
        return f"[{row['kind']}] {' '.join(str(row['description']).split())[:120]}{score}"

    def _detail_head(self, info: dict[str, Any]) -> str:
        kind = info["record"].get("kind") or info["category"]
        return f"<div><b>{_esc(kind)}</b> <span class='muted'>{_esc(info['name'])}</span></div>" + (
            f"<div>{_esc(info['description'])}</div>"
        )

    def _detail_sections(self, record: Any, info: dict[str, Any]) -> list[tuple[str, str]]:
        sections = []
        if getattr(record, "task", ""):
            sections.append(("from the task", f"<div>{_esc(record.task)}</div>"))
        if getattr(record, "run_id", ""):
            sections.append(("run", f"<div><code>{_esc(record.run_id)}</code> (%tea show {_esc(record.run_id)})</div>"))
        rest = [s for s in super()._detail_sections(record, info) if s[0] != "parameters (JSON schema)"]
        return sections + rest


__all__ = ["MemoryExplorer"]
