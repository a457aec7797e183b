"""Results you can open: ``results.browse()`` lists every sample, and picking one shows its run in
the trajectory renderer (the same MIME bundle a run shows in its cell, with its plain fallback);
``eval_set.agreement_view(a, b)`` shows per task whether two configurations agree.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tea_notebook.eval.table import ResultsTable, TaskResult


def _label(r: "TaskResult", epochs: int) -> str:
    mark = "✓" if r.correct else ("!" if r.status == "error" else "✗")
    epoch = f" e{r.epoch}" if epochs > 1 else ""
    shown = (r.error or "")[:60] if r.status == "error" else r.answer[:60]
    return f"{mark} {r.task_id}{epoch} · {shown}"


class ResultsBrowser:
    """A list of an evaluation's samples; the chosen one's trajectory renders below it."""

    def __init__(self, results: "ResultsTable"):
        import ipywidgets as w

        self.results = results
        k = results.epochs
        options = [(_label(r, k), r.key) for r in results.results]
        self.head = w.HTML(f"<b>{html.escape(results.headline())}</b>")
        self.select = w.Select(options=options, rows=min(12, max(len(options), 2)), layout=w.Layout(width="100%"))
        self.output = w.Output()
        self.select.observe(lambda change: self.show(change["new"]), names="value")
        self.widget = w.VBox([self.head, self.select, self.output])
        if options:
            self.select.value = options[0][1]

    def show(self, key: str | None) -> None:
        """Render the run of sample ``key`` (``task`` or ``task#epoch``) below the list."""
        if key is None:
            return
        r = self.results[key]
        if not r.run_id or self.results.workspace is None:
            data = {"text/plain": f"{r.key}: no run to show ({r.error or 'not run'})"}
            metadata: dict[str, Any] = {}
        else:
            from tea_notebook.runtime.trajectory import Trajectory

            data, metadata = Trajectory.load(self.results.workspace, r.run_id)._repr_mimebundle_()
        self.output.outputs = ({"output_type": "display_data", "data": data, "metadata": metadata},)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return self.widget._repr_mimebundle_(include=include, exclude=exclude)

    def __repr__(self) -> str:
        return f"ResultsBrowser({self.results.name!r}, samples={len(self.results)})"


class Agreement:
    """Per task both configurations scored: their reduced scores and whether they agree."""

    def __init__(self, a: str, b: str, rows: list[dict[str, Any]]):
        self.a, self.b, self.rows = a, b, rows

    @property
    def agree(self) -> int:
        """Tasks on which both passed or both failed."""
        return sum(1 for r in self.rows if r["agree"])

    def text(self) -> str:
        """The table as plain text."""
        lines = [f"{self.a} vs {self.b}: agree on {self.agree} of {len(self.rows)} tasks"]
        for r in self.rows:
            lines.append(f"  {'=' if r['agree'] else '≠'} {r['task_id']:<16} {r[self.a]:.2f}  {r[self.b]:.2f}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        esc = html.escape
        body = []
        for r in self.rows:
            colour = "#dafbe1" if r["agree"] else "#ffebe9"
            body.append(
                f"<tr style='background:{colour}'><td>{esc(r['task_id'])}</td><td>{r[self.a]:.2f}</td>"
                f"<td>{r[self.b]:.2f}</td><td>{'agree' if r['agree'] else 'disagree'}</td></tr>"
            )
        return (
            f"<div class='tea-agreement'><b>{esc(self.a)} vs {esc(self.b)}: agree on {self.agree} of "
            f"{len(self.rows)} tasks</b><table><thead><tr><th>task</th><th>{esc(self.a)}</th><th>{esc(self.b)}</th>"
            f"<th></th></tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        )


__all__ = ["Agreement", "ResultsBrowser"]
