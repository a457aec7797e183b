"""What ``%tea`` subcommands show: a table of records (HTML, and text), plain text, their rows."""

from __future__ import annotations

from typing import Any


class Listing(list):
    """A list of records that displays as a table (HTML) and reads as text."""

    def __init__(self, rows: list[dict[str, Any]], title: str):
        super().__init__(rows)
        self.title = title

    def _repr_html_(self) -> str:
        import html

        if not self:
            return f"<p><i>{html.escape(self.title)}: none</i></p>"
        cols = list(self[0])
        head = "".join(f"<th style='text-align:left'>{html.escape(c)}</th>" for c in cols)
        body = "".join(
            "<tr>"
            + "".join(f"<td style='text-align:left'>{html.escape(str(r.get(c, '')))}</td>" for c in cols)
            + "</tr>"
            for r in self
        )
        return f"<b>{html.escape(self.title)}</b><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(f"{self.title} ({len(self)})\n")
        for r in self:
            p.text("  " + " | ".join(str(v) for v in r.values()) + "\n")


class Text(str):
    """Text that displays as itself (not as a quoted string) in a notebook."""

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(str(self))}</pre>"


def record_rows(records: list[Any]) -> list[dict[str, Any]]:
    """Table rows of just-registered tools (what ``%%tool`` shows)."""
    rows = []
    for r in records:
        row: dict[str, Any] = {"name": r.name, "v": r.version, "category": r.category, "description": r.description}
        parameters = getattr(r, "parameters", None)
        if parameters is not None:
            props = parameters.get("properties", {})
            required = set(parameters.get("required", []))
            row["parameters"] = ", ".join(f"{p}{'' if p in required else '?'}" for p in props)
        usage = getattr(r, "usage", None)
        if usage is not None:
            row["calls"] = usage.calls
        rows.append(row)
    return rows


def run_row(ws: Any, r: dict[str, Any]) -> dict[str, Any]:
    """One row of ``%tea runs``: tokens with its sub-runs, marked ``~… (estimated)`` for a scripted model."""
    from tea_notebook.models.client import tokens_estimated

    prompt, completion, _cost = ws.db.model_usage(ws.db.descendants(r["id"]))
    tokens = f"{prompt + completion:,}"
    if tokens_estimated(r.get("model") or ""):
        tokens = f"~{tokens} (estimated)"
    return {"run": r["id"], "agent": r["agent"], "status": r["status"], "tokens": tokens, "task": r["task"][:80]}


__all__ = ["Listing", "Text", "record_rows", "run_row"]
