"""Registry browser: what ``%tea tools`` / ``agents`` / ``envs`` / ``toolkits`` return.

A :class:`RegistryBrowser` is plain data first (``.rows``, ``.detail(name)``, ``.search(query)``) and
displays three ways: in a live kernel as an ipywidgets widget (a search box that filters with the
registry's hybrid search as you type, a category filter, the table, and a detail pane with the
record's JSON schema, versions, relations and usage), and, in the same display bundle, as a static
HTML table and as text for nbconvert, GitHub and terminals. Every record text is escaped.

:class:`RecordBrowser` is the shared base (also of :class:`~tea_notebook.notebook.memory_view.MemoryExplorer`).
ipywidgets is imported only when a widget is made.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterator

from tea_notebook.runtime.render import esc

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
ALL = "(all)"

_STYLE = (
    "<style>.tea-rb,.tea-rb-d{font-family:system-ui,-apple-system,Segoe UI,sans-serif}"
    ".tea-rb{border-collapse:collapse;font-size:12px}.tea-rb th,.tea-rb td{text-align:left;"
    "padding:2px 8px;border-bottom:1px solid #d0d7de;vertical-align:top}.tea-rb-d pre{white-space:pre-wrap;"
    "background:#f6f8fa;padding:4px 6px;margin:2px 0;max-height:24em;overflow:auto;font-size:12px}"
    ".tea-rb-d .muted{color:#57606a}</style>"
)


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _in_kernel() -> bool:
    """True where a widget can be used: a Jupyter kernel executing a cell for an interactive front end
    (JupyterLab, Notebook, VS Code), with ipywidgets installed.

    Headless executions (nbclient, papermill, nbval, ``tea notebooks --headless``) send their cells
    with ``allow_stdin=False``; there the bundle stays HTML and text, so the stored notebook and its
    nbconvert / GitHub rendering show the table, not a widget that needs a live kernel and scripts.
    """
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return False
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None) if shell is not None else None
    if kernel is None or not getattr(kernel, "_allow_stdin", True):
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


class RecordBrowser:
    """A searchable, filterable view of one registry's current records (the shared base).

    ``query``: hybrid search (BM25 + embeddings) for it, top ``k`` of the relevant ones (see
    :attr:`relevance` and :attr:`min_similarity`); without one every record.
    ``where``: field equality filters (``category="web"``), as :meth:`Registry.list` takes them.
    Subclasses say which field the filter box offers (:attr:`filter_field`), what a row holds
    (:meth:`_row`) and what the detail pane adds (:meth:`_detail_sections`).
    """

    #: the record field the widget's filter box offers
    filter_field = "category"
    #: table headings for row keys (others are shown as they are)
    labels: dict[str, str] = {}
    #: row keys the table leaves out (they stay in ``.rows``)
    hidden: tuple[str, ...] = ()
    #: row keys that differ from run to run (timings): only the live widget shows them, so that stored
    #: notebooks stay diffable and comparable (nbval)
    volatile: tuple[str, ...] = ("mean_latency_ms",)
    #: text cells longer than this are cut in the table (``.rows`` and the detail keep them whole)
    cell_limit = 200
    #: the table shows at most this many rows (search to narrow)
    max_rows = 200
    #: a search keeps the hits scoring at least this share of the best one (0 keeps all top-k) ...
    relevance = 0.3
    #: ... that match a query word or whose embedding is at least this similar (cosine) to the query's
    min_similarity = 0.3

    def __init__(self, registry: Any, query: str | None = None, *, k: int = 20, title: str | None = None, **where: Any):
        self.registry = registry
        self.query = query.strip() if query and query.strip() else None
        self.k = k
        self.where = {key: value for key, value in where.items() if value is not None}
        self.title = title or f"{registry.kind}s"
        self._hits: list[tuple[Any, float | None]] | None = None
        self._rows: list[dict[str, Any]] | None = None
        self._widget: Any = None

    # -- data -----------------------------------------------------------------------------
    def _fetch(self) -> list[tuple[Any, float | None]]:
        if self._hits is None:
            if self.query:
                hits = self.registry.search(self.query, k=self.k, **self.where)
                hits = [h for h in hits if h.keyword > 0 or h.semantic >= self.min_similarity]
                floor = hits[0].score * self.relevance if hits and hits[0].score > 0 else float("-inf")
                self._hits = [(h.record, h.score) for h in hits if h.score >= floor and h.record is not None]
            else:
                self._hits = [(r, None) for r in self.registry.list(**self.where)]
        return self._hits

    @property
    def records(self) -> list[Any]:
        """The records shown, best match first when searched (else by name)."""
        return [r for r, _ in self._fetch()]

    @property
    def names(self) -> list[str]:
        """Names of the records shown, in table order."""
        return [r.name for r in self.records]

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One dict per record shown (what the table displays), e.g. ``{"name": ..., "version": ...}``."""
        if self._rows is None:
            self._rows = [self._row(record, score) for record, score in self._fetch()]
        return [dict(r) for r in self._rows]

    def _row(self, record: Any, score: float | None) -> dict[str, Any]:
        row: dict[str, Any] = {"name": record.name, "version": record.version, "category": record.category}
        row["description"] = record.description
        if score is not None:
            row["score"] = round(float(score), 3)
        return row

    def __len__(self) -> int:
        return len(self._fetch())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def __getitem__(self, index: int | slice) -> Any:
        return self.rows[index]

    def __repr__(self) -> str:
        found = f" matching {self.query!r}" if self.query else ""
        return f"<{type(self).__name__} {self.title}{found}: {len(self)} records>"

    def search(self, query: str | None) -> "RecordBrowser":
        """A new browser of the same registry and filters for ``query`` (all records when empty)."""
        return type(self)(self.registry, query, k=self.k, title=self.title, **self.where)

    def filter(self, **where: Any) -> "RecordBrowser":
        """A new browser with these field filters too (``None`` drops a filter)."""
        merged = {**self.where, **where}
        return type(self)(self.registry, self.query, k=self.k, title=self.title, **merged)

    def choices(self) -> list[str]:
        """The values of :attr:`filter_field` among all current records (what the filter box offers)."""
        values = {getattr(r, self.filter_field, None) for r in self.registry.list(_usage=False)}
        return sorted(str(v) for v in values if v is not None)

    # -- one record ---------------------------------------------------------------------------
    def detail(self, name: str) -> dict[str, Any]:
        """Everything about the current version of ``name``: fields, JSON schema, versions, relations, usage.

        Read fresh from the registry, so it reflects rollbacks and new versions made after the browser.
        """
        record = self.registry.get(name)
        usage = getattr(record, "usage", None)
        out: dict[str, Any] = {
            "name": record.name,
            "kind": self.registry.kind,
            "version": record.version,
            "category": record.category,
            "origin": record.origin,
            "description": record.description,
            "schema": getattr(record, "parameters", None),
            "versions": [
                {"version": v.version, "hash": v.hash, "created_at": v.created_at, "note": v.note, "current": v.current}
                for v in self.registry.versions(name)
            ],
            "relations": [{"type": r.type, "target": r.target, "note": r.note} for r in record.relations],
            "usage": None if usage is None else usage.model_dump(),
            "record": record.content(),
        }
        return out

    def detail_html(self, name: str) -> str:
        """The detail pane for ``name`` (escaped HTML)."""
        try:
            info = self.detail(name)
            record = self.registry.get(name)
        except Exception as exc:  # noqa: BLE001 - e.g. unregistered since; say so in the pane
            return f"<div class='tea-rb-d'><i>{esc(exc)}</i></div>"
        parts = [self._detail_head(info)]
        for title, body in self._detail_sections(record, info):
            parts.append(f"<div style='margin-top:6px'><b>{esc(title)}</b></div>{body}")
        return _STYLE + "<div class='tea-rb-d'>" + "".join(parts) + "</div>"

    def _detail_head(self, info: dict[str, Any]) -> str:
        """Name, version, category, origin and the description."""
        n = len(info["versions"])
        return (
            f"<div><b>{esc(info['name'])}</b> v{info['version']} "
            f"<span class='muted'>({n} version{'s' if n != 1 else ''}) · "
            f"{esc(info['category'])} · from {esc(info['origin'])}</span></div>"
            f"<div>{esc(info['description'])}</div>"
        )

    def _detail_sections(self, record: Any, info: dict[str, Any]) -> list[tuple[str, str]]:
        """``(title, html)`` sections of the detail pane after the name and description."""
        sections = []
        if info["schema"] is not None:
            sections.append(("parameters (JSON schema)", _json_html(info["schema"])))
        returns = getattr(record, "returns", None)
        if returns:
            sections.append(("returns", _json_html(returns)))
        actions = getattr(record, "actions", None)
        if actions:
            body = "".join(
                f"<div><code>{esc(a.name)}</code> {esc(a.description)}</div>{_json_html(a.parameters)}" for a in actions
            )
            sections.append(("actions", body))
        members = getattr(record, "tools", None)
        if members:
            sections.append(("tools", f"<div>{esc(', '.join(members))}</div>"))
        sections.append(("versions", _versions_html(info["versions"])))
        relations = info["relations"]
        sections.append(
            (
                "relations",
                "".join(
                    f"<div>{esc(r['type'])} → <code>{esc(r['target'])}</code>"
                    f"{' · ' + esc(r['note']) if r['note'] else ''}</div>"
                    for r in relations
                )
                or "<div class='muted'>none</div>",
            )
        )
        if info["usage"] is not None:
            sections.append(("usage", f"<div>{esc(_usage_text(info['usage']))}</div>"))
        sections.append(
            ("record", f"<details><summary class='muted'>JSON</summary>{_json_html(info['record'])}</details>")
        )
        return sections

    # -- static renderings ----------------------------------------------------------------------
    def _empty_text(self) -> str:
        if self.query:
            return f"{self.title}: no match for {self.query!r}"
        return f"{self.title}: none"

    def _heading(self) -> str:
        found = f" matching {self.query!r}" if self.query else ""
        where = "".join(f" · {k}={v}" for k, v in self.where.items())
        return f"{self.title}{found}{where} ({len(self)})"

    def _cell(self, key: str, value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, float) and key != "score":
            return f"{value:.1f}"
        return _clip(str(value), self.cell_limit)

    def table_html(self, live: bool = False) -> str:
        """The records as an HTML table (escaped; at most :attr:`max_rows` rows); ``live`` adds the
        :attr:`volatile` columns."""
        rows = self.rows
        if not rows:
            return f"<p><i>{esc(self._empty_text())}</i></p>"
        hidden = self.hidden if live else (*self.hidden, *self.volatile)
        cols: list[str] = []
        for row in rows:
            cols += [c for c in row if c not in cols and c not in hidden]
        head = "".join(f"<th>{esc(self.labels.get(c, c))}</th>" for c in cols)
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(self._cell(c, r.get(c)))}</td>" for c in cols) + "</tr>"
            for r in rows[: self.max_rows]
        )
        more = len(rows) - self.max_rows
        tail = f"<p><i>… {more} more; search to narrow</i></p>" if more > 0 else ""
        return f"<table class='tea-rb'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{tail}"

    def _repr_html_(self) -> str:
        return f"{_STYLE}<div><b>{esc(self._heading())}</b></div>{self.table_html()}"

    def text(self) -> str:
        """A plain-text listing (what terminals and ``text/plain`` show)."""
        rows = self.rows
        if not rows:
            return self._empty_text()
        lines = [self._heading()]
        for r in rows:
            lines.append("  " + self._text_line(r))
        return "\n".join(lines)

    def _text_line(self, row: dict[str, Any]) -> str:
        bits = [f"{row['name']} v{row['version']}", f"[{row['category']}]", _clip(row["description"], 100)]
        if row.get("calls"):
            bits.append(f"· {row['calls']} calls, {row.get('failures', 0)} failed")
        if "score" in row:
            bits.append(f"· score {row['score']:.3f}")
        return " ".join(bits)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """The widget (in a kernel) with HTML and text fallbacks for every other renderer."""
        data: dict[str, Any] = {"text/plain": self.text(), "text/html": self._repr_html_()}
        if _in_kernel() and (not include or WIDGET_MIME in include):
            widget = self.widget()
            data[WIDGET_MIME] = widget._repr_mimebundle_()[WIDGET_MIME]
        return data

    # -- the widget ---------------------------------------------------------------------------
    def widget(self, debounce: float = 0.3) -> Any:
        """The interactive browser (an ``ipywidgets.VBox``; made once per browser).

        Typing in its search box re-runs the search ``debounce`` seconds after the last keystroke
        (at once outside a running event loop); the filter box narrows by :attr:`filter_field`;
        choosing a name shows its detail pane.
        """
        if self._widget is None:
            self._widget = _widget_class()(self, debounce=debounce)
        return self._widget


class RegistryBrowser(RecordBrowser):
    """The tools, agents, environments or toolkits of a workspace as a searchable table with details.

    ``RegistryBrowser(ws.tools)``, ``RegistryBrowser(ws.tools, "read a web page")``, ``%tea tools``.
    Rows hold name, version, versions, category, description, parameters (tools), usage
    (calls, failures, mean latency in ms) and, when searched, the score.
    """

    labels = {"version": "v", "mean_latency_ms": "mean ms"}

    def _row(self, record: Any, score: float | None) -> dict[str, Any]:
        row = super()._row(record, score)
        score_value = row.pop("score", None)
        row["versions"] = len(self.registry.versions(record.name))
        parameters = getattr(record, "parameters", None)
        if parameters is not None:
            props = parameters.get("properties", {}) if isinstance(parameters, dict) else {}
            required = set(parameters.get("required", [])) if isinstance(parameters, dict) else set()
            row["parameters"] = ", ".join(f"{p}{'' if p in required else '?'}" for p in props)
        usage = getattr(record, "usage", None)
        if usage is not None:
            row["calls"] = usage.calls
            row["failures"] = usage.failures
            row["mean_latency_ms"] = round(usage.mean_latency_ms, 1) if usage.calls else None
        if score_value is not None:
            row["score"] = score_value
        return row


def _usage_text(usage: dict[str, Any]) -> str:
    if not usage.get("calls"):
        return "not used yet"
    last = usage.get("last_used")
    when = f", last {time.strftime('%Y-%m-%d %H:%M', time.localtime(last))}" if last else ""
    return f"{usage['calls']} calls, {usage['failures']} failed, {usage['mean_latency_ms']:.1f} ms mean latency{when}"


def _json_html(value: Any) -> str:
    return f"<pre>{esc(json.dumps(value, indent=2, ensure_ascii=False, default=str))}</pre>"


def _versions_html(versions: list[dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>v{v['version']}{' (current)' if v['current'] else ''}</td><td><code>{esc(v['hash'][:12])}</code>"
        f"</td><td>{esc(time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(v['created_at'])))}</td>"
        f"<td>{esc(v['note'])}</td></tr>"
        for v in versions
    )
    return (
        "<table class='tea-rb'><thead><tr><th>version</th><th>hash</th><th>created</th><th>note</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


_WIDGET_CLASS: type | None = None


def _widget_class() -> type:
    """The widget class, defined on first use so that ipywidgets loads only when a widget is made."""
    global _WIDGET_CLASS
    if _WIDGET_CLASS is not None:
        return _WIDGET_CLASS
    import ipywidgets as w

    class RecordBrowserWidget(w.VBox):
        """Search box, filter, table and detail pane over a :class:`RecordBrowser`.

        ``.browser`` is the browser currently shown (a new one after each search or filter).
        """

        def __init__(self, browser: RecordBrowser, debounce: float = 0.3):
            self.base = browser
            self.browser = browser
            self.debounce = debounce
            self._pending: Any = None
            self.heading = w.HTML()
            self.search_box = w.Text(
                value=browser.query or "",
                placeholder="search (keywords and meaning)",
                continuous_update=True,
                layout=w.Layout(width="22em"),
            )
            options = [ALL] + browser.choices()
            current = str(browser.where.get(browser.filter_field, ALL))
            self.filter_box = w.Dropdown(
                options=options if current in options else [*options, current],
                value=current,
                description=browser.filter_field,
                layout=w.Layout(width="16em"),
            )
            self.refresh_button = w.Button(description="refresh", tooltip="read the registry again")
            self.table = w.HTML()
            self.names = w.Dropdown(description="details", layout=w.Layout(width="28em"))
            self.detail = w.HTML()
            self.status = w.HTML()
            super().__init__(
                [
                    self.heading,
                    w.HBox([self.search_box, self.filter_box, self.refresh_button]),
                    self.status,
                    self.table,
                    self.names,
                    self.detail,
                ]
            )
            self.search_box.observe(self._on_query, names="value")
            self.filter_box.observe(lambda change: self.apply(), names="value")
            self.names.observe(self._on_name, names="value")
            self.refresh_button.on_click(lambda _button: self.apply())
            self._show(browser)

        # what the controls do
        def _on_query(self, change: dict[str, Any]) -> None:
            if self._pending is not None:
                self._pending.cancel()
                self._pending = None
            loop = _running_loop()
            if self.debounce <= 0 or loop is None:
                self.apply()
            else:
                self._pending = loop.call_later(self.debounce, self.apply)

        def apply(self) -> None:
            """Run the search box's query with the filter box's value and show the result."""
            self._pending = None
            value = self.filter_box.value
            where = {self.base.filter_field: None if value == ALL else value}
            try:
                browser = self.base.filter(**where).search(self.search_box.value)
                len(browser)  # searched here, so that a failure shows below
            except Exception as exc:  # noqa: BLE001 - show it in the widget, not in a log
                self.status.value = f"<span style='color:#cf222e'>{esc(exc)}</span>"
                return
            self.status.value = ""
            self._show(browser)

        def _show(self, browser: RecordBrowser) -> None:
            self.browser = browser
            self.heading.value = f"<b>{esc(browser._heading())}</b>"
            self.table.value = _STYLE + browser.table_html(live=True)
            names = browser.names
            keep = self.names.value if self.names.value in names else (names[0] if names else None)
            self.names.unobserve(self._on_name, names="value")
            try:
                self.names.options = names
                self.names.value = keep
            finally:
                self.names.observe(self._on_name, names="value")
            self._on_name({"new": keep})

        def _on_name(self, change: dict[str, Any]) -> None:
            name = change.get("new")
            self.detail.value = self.browser.detail_html(name) if name else ""

    _WIDGET_CLASS = RecordBrowserWidget
    return RecordBrowserWidget


def _running_loop() -> Any:
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


__all__ = ["RecordBrowser", "RegistryBrowser"]
