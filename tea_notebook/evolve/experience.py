"""Experience memory (Mem²Evolve §1.2): distilled lessons retrieved into later prompts.

Three kinds of entry share one record type, :class:`~tea_notebook.protocol.records.ExperienceRecord`,
stored in the workspace's ``experience`` registry (versioned, searchable, rollback-able):

- ``"tool"``: tool experience, "How to …" entries written after a tool was created (prompt C.8);
- ``"success"``: what worked for an agent on a sub-task (C.9);
- ``"failure"``: what went wrong and how to avoid it (C.10).

Beyond the paper (which only appends): a new entry that is a near-duplicate of one of the same kind
(cosine ≥ ``merge_threshold``) is merged into it as a new version; a person can edit, disable,
enable and delete entries; every entry counts how often it was retrieved and whether the runs that
retrieved it succeeded (the registry's usage table: a retrieval is a call, a failed run a failure).

``ws.experiences`` is the :class:`ExperienceMemory` of a workspace.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from pydantic import ValidationError

from tea_notebook.errors import NotFoundError, TeaError
from tea_notebook.evolve.gate import CANDIDATE, is_candidate
from tea_notebook.protocol.records import ExperienceRecord
from tea_notebook.redaction import redact

if TYPE_CHECKING:
    from tea_notebook.protocol.registry import Registry, VersionInfo
    from tea_notebook.runtime.host import RunHost

KINDS = ("tool", "success", "failure")
#: Headings whose bullets become an entry's use cases, most specific first.
USE_CASE_HEADINGS = ("use cases", "applicable scenarios", "task context")
_DEFAULT_USE_CASE_HEADING = {"tool": "Use Cases", "success": "Applicable Scenarios", "failure": "Applicable Scenarios"}
_EDITABLE = frozenset(
    {
        "kind",
        "title",
        "description",
        "use_cases",
        "content",
        "body",
        "source_run",
        "outcome",
        "agent_role",
        "tool_name",
        "category",
        "metadata",
    }
)
# every editable text field but the kind (checked against KINDS) and content (built from the others)
_REDACTED_FIELDS = tuple(sorted(_EDITABLE - {"kind", "content"}))
#: Usage-table kind holding reported outcomes (calls = outcomes reported, failures = failed runs).
OUTCOME_KIND = "experience.outcome"

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+(.*)$")


class ExperienceError(TeaError, ValueError):
    """Bad input to experience memory (unknown kind, empty title, unparsable markdown, bad field)."""


@dataclass(frozen=True)
class ExperienceStats:
    """How often an entry was retrieved and how the runs that retrieved it ended.

    ``succeeded`` and ``failed`` count the outcomes reported with :meth:`ExperienceMemory.record_outcome`;
    retrievals whose run never reported an outcome are ``unknown``.
    """

    name: str
    retrieved: int
    succeeded: int
    failed: int

    @property
    def unknown(self) -> int:
        """Retrievals with no reported outcome."""
        return max(0, self.retrieved - self.succeeded - self.failed)

    @property
    def success_rate(self) -> float | None:
        """Share of reported outcomes that were successes (None before any outcome)."""
        reported = self.succeeded + self.failed
        return None if reported == 0 else self.succeeded / reported


@dataclass(frozen=True)
class ParsedEntry:
    """The four parts of a markdown memory item (C.8–C.10) and the heading its use cases came from."""

    title: str
    description: str
    use_cases: list[str]
    content: str
    use_cases_heading: str = ""


# -- markdown ---------------------------------------------------------------------------------
def _check_kind(kind: Any) -> str:
    if kind not in KINDS:
        raise ExperienceError(f"unknown experience kind {kind!r}: use one of {', '.join(map(repr, KINDS))}")
    return kind


def _heading_key(text: str) -> str:
    """A heading's text without emphasis, trailing colon or case (to recognise section names)."""
    return re.sub(r"\s+", " ", text.strip().strip("*_").strip().rstrip(":").strip()).casefold()


def _segments(lines: list[str]) -> list[tuple[int, str, list[str]]]:
    """Split lines at headings outside code fences: ``[(level, heading text, lines incl. heading)]``;
    the first segment (level 0, no heading) holds what comes before the first heading."""
    out: list[tuple[int, str, list[str]]] = [(0, "", [])]
    fence: str | None = None
    for line in lines:
        m = _FENCE.match(line)
        if m:
            fence = None if fence == m.group(1) else (fence or m.group(1))
        heading = _HEADING.match(line) if fence is None and not m else None
        if heading:
            out.append((len(heading.group(1)), heading.group(2), [line]))
        else:
            out[-1][2].append(line)
    return out


def _bullets(lines: list[str]) -> list[str]:
    """Items of a bullet list; a plain paragraph becomes one item, continuation lines join their item."""
    items: list[str] = []
    joinable = False
    for line in lines:
        if not line.strip():
            joinable = False
            continue
        m = _BULLET.match(line)
        if m:
            items.append(m.group(1).strip())
            joinable = True
        elif joinable and items:
            items[-1] = f"{items[-1]} {line.strip()}"
        else:
            items.append(line.strip())
            joinable = True
    return [i for i in items if i]


def _unfence(markdown: str) -> str:
    """Drop one code fence wrapped around the whole entry (models often answer with ```markdown)."""
    text = markdown.strip()
    m = re.match(r"^(```|~~~)[\w-]*\n(.*)\n\1\s*$", text, re.S)
    return m.group(2) if m else text


def parse_markdown(markdown: str) -> ParsedEntry:
    """Split a C.8 / C.9 / C.10 markdown entry into title, description, use cases and content.

    The title is the first ``#`` or ``##`` heading (or the first ``###`` heading that is not a known
    section, as C.9's last line asks); ``### Description`` is the description; the first of
    ``### Use Cases``, ``### Applicable Scenarios`` or ``### Task Context`` gives the use cases (its
    bullets); everything else, in order, is the content. Chatter before the title is ignored. Raises
    ExperienceError naming what is missing.
    """
    if not isinstance(markdown, str) or not markdown.strip():
        raise ExperienceError("the markdown entry is empty")
    segments = _segments(_unfence(markdown).splitlines())
    known = {"description", *USE_CASE_HEADINGS}
    title_at = next(
        (i for i, (level, text, _) in enumerate(segments) if 1 <= level <= 3 and _heading_key(text) not in known),
        None,
    )
    if title_at is None:
        raise ExperienceError("the markdown entry has no title: it must start with a '## <title>' heading")
    title = segments[title_at][1].strip().strip("*_").strip()
    if not title:
        raise ExperienceError("the markdown entry's title heading is empty")
    rest = segments[title_at + 1 :]
    preamble = segments[title_at][2][1:]
    description_at = next((i for i, (_, text, _) in enumerate(rest) if _heading_key(text) == "description"), None)
    use_at, heading = None, ""
    for name in USE_CASE_HEADINGS:
        use_at = next((i for i, (_, text, _) in enumerate(rest) if _heading_key(text) == name), None)
        if use_at is not None:
            heading = rest[use_at][1].strip().strip("*_").strip().rstrip(":").strip()
            break
    if description_at is not None:
        description = "\n".join(rest[description_at][2][1:]).strip()
    else:
        description, preamble = "\n".join(preamble).strip(), []
    if not description:
        raise ExperienceError(f"entry {title!r} has no description: add a '### Description' section")
    use_cases = _bullets(rest[use_at][2][1:]) if use_at is not None else []
    body = list(preamble)
    for i, (_, _, lines) in enumerate(rest):
        if i not in (description_at, use_at):
            body.extend(lines)
    content = "\n".join(body).strip()
    return ParsedEntry(title, description, use_cases, content, heading)


def to_markdown(record: ExperienceRecord) -> str:
    """Render an entry back into the C.8–C.10 layout: ``## title``, ``### Description``, the use-case
    section (under the heading it was parsed from, or the kind's default) and the content."""
    lines = [f"## {record.title}", "", "### Description", record.description, ""]
    if record.use_cases:
        heading = record.metadata.get("use_cases_heading") or _DEFAULT_USE_CASE_HEADING[record.kind]
        lines += [f"### {heading}", *(f"- {u}" for u in record.use_cases), ""]
    if record.body.strip():
        lines.append(record.body.strip())
    return "\n".join(lines).rstrip() + "\n"


def _norm(unit: str) -> str:
    """Comparison form of a line or block: no bullet marker, collapsed space, no case."""
    m = _BULLET.match(unit) if "\n" not in unit else None
    return re.sub(r"\s+", " ", m.group(1) if m else unit).strip().casefold()


def _units(lines: list[str]) -> list[str]:
    """Non-blank lines, with each fenced code block kept whole as one unit."""
    units: list[str] = []
    block: list[str] | None = None
    fence = ""
    for line in lines:
        m = _FENCE.match(line)
        if block is not None:
            block.append(line)
            if m and m.group(1) == fence:
                units.append("\n".join(block))
                block = None
        elif m:
            block, fence = [line], m.group(1)
        elif line.strip():
            units.append(line.rstrip())
    if block is not None:
        units.append("\n".join(block))
    return units


def merge_content(old: str, new: str) -> str:
    """``old`` kept verbatim, plus what ``new`` adds: lines (or whole code blocks) a section of ``old``
    with the same heading lacks go at the end of that section; sections ``old`` lacks go at the end."""
    if not new.strip():
        return old
    if not old.strip():
        return new.strip()
    old_segs = _segments(old.strip().splitlines())
    keyed = {(level, _heading_key(text)): i for i, (level, text, _) in enumerate(old_segs)}
    additions: dict[int, list[str]] = {}
    appended: list[str] = []
    for level, text, lines in _segments(new.strip().splitlines()):
        body = lines[1:] if level else lines
        if not any(line.strip() for line in lines):
            continue
        at = keyed.get((level, _heading_key(text)))
        if at is None:
            appended.append("\n".join(lines).strip())
            continue
        have = {_norm(u) for u in _units(old_segs[at][2][1:] if level else old_segs[at][2])}
        fresh = [u for u in _units(body) if _norm(u) not in have]
        additions.setdefault(at, []).extend(u for u in fresh if u not in additions.get(at, []))
    if not additions and not appended:
        return old
    out: list[str] = []
    for i, (_, _, lines) in enumerate(old_segs):
        lines = list(lines)
        tail = 0
        while lines and not lines[-1].strip():
            lines.pop()
            tail += 1
        out.extend(lines)
        out.extend(additions.get(i, []))
        out.extend([""] * tail)
    text = "\n".join(out).rstrip()
    for section in appended:
        text += "\n\n" + section
    return text


def _slug(title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", title.casefold()).strip("_")[:56].rstrip("_")
    return slug if slug and slug[0].isalpha() else f"exp_{slug}".rstrip("_")


def _demote(markdown: str, levels: int = 1) -> str:
    """Headings pushed ``levels`` deeper (outside code fences), so an entry nests under a prompt slot."""
    out, fence = [], None
    for line in markdown.splitlines():
        m = _FENCE.match(line)
        if m:
            fence = None if fence == m.group(1) else (fence or m.group(1))
        elif fence is None and _HEADING.match(line):
            line = "#" * levels + line
        out.append(line)
    return "\n".join(out)


# -- the facade -------------------------------------------------------------------------------
class ExperienceMemory:
    """Tool, success and failure experiences of a workspace (``ws.experiences``).

    ``threshold`` is δ for retrieval (cosine of the query with an entry's title, description and use
    cases); ``merge_threshold`` is the cosine at which a new entry counts as a near-duplicate of an
    existing one of the same kind. Both can be changed on the object.
    """

    def __init__(self, workspace: "RunHost", *, threshold: float = 0.3, merge_threshold: float = 0.9):
        self.workspace = workspace
        self.registry: "Registry[ExperienceRecord]" = workspace.experience
        self.threshold = threshold
        self.merge_threshold = merge_threshold

    def __repr__(self) -> str:
        return (
            f"ExperienceMemory({len(self.registry)} entries, threshold={self.threshold}, merge={self.merge_threshold})"
        )

    def __len__(self) -> int:
        return len(self.registry)

    # -- writing ------------------------------------------------------------------------
    def add(
        self,
        kind: str,
        title: str,
        description: str,
        use_cases: Iterable[str] | str = (),
        content: str = "",
        source_run: str = "",
        outcome: str = "",
        *,
        agent_role: str = "",
        tool_name: str = "",
        metadata: dict[str, Any] | None = None,
        merge: bool = True,
    ) -> tuple[ExperienceRecord, bool]:
        """Add an entry, or merge it into a near-duplicate of the same kind: ``(record, merged)``.

        A near-duplicate (cosine ≥ ``merge_threshold`` between the entries' vectors) gets a new
        version: its use cases united with the new ones, its content kept with the new distinct
        lines and sections appended, the new source run listed. Disabled entries are merge targets
        too (they stay disabled: what a person switched off does not come back as a copy).
        ``merge=False`` always adds. Raises ExperienceError for an unknown kind or empty fields.
        """
        record = self._build(
            kind=kind,
            title=title,
            description=description,
            use_cases=use_cases,
            content=content,
            source_run=source_run,
            outcome=outcome,
            agent_role=agent_role,
            tool_name=tool_name,
            metadata=dict(metadata or {}),
        )
        if merge and len(self.registry):
            hits = self.registry.similar(record, k=1, threshold=self.merge_threshold, kind=record.kind)
            if hits:
                existing, cosine = hits[0]
                return self._merge(existing, record, cosine), True
        stored = self.registry.register(
            record.model_copy(update={"name": self._free_name(record.title)}),
            note=f"from run {source_run}" if source_run else "added",
        )
        return stored, False

    def from_markdown(
        self, kind: str, markdown: str, source_run: str = "", outcome: str = "", **fields: Any
    ) -> tuple[ExperienceRecord, bool]:
        """Parse a C.8 / C.9 / C.10 markdown entry (see :func:`parse_markdown`) and :meth:`add` it.

        ``fields`` passes ``agent_role``, ``tool_name``, ``metadata`` or ``merge`` on to :meth:`add`.
        """
        _check_kind(kind)
        parsed = parse_markdown(markdown)
        metadata = dict(fields.pop("metadata", None) or {})
        if parsed.use_cases_heading:
            metadata["use_cases_heading"] = parsed.use_cases_heading
        return self.add(
            kind,
            parsed.title,
            parsed.description,
            parsed.use_cases,
            parsed.content,
            source_run,
            outcome,
            metadata=metadata,
            **fields,
        )

    def to_markdown(self, entry: "ExperienceRecord | str") -> str:
        """An entry (record or name) as C.8–C.10 markdown (see :func:`to_markdown`)."""
        return to_markdown(self.get(entry) if isinstance(entry, str) else entry)

    def edit(self, name: str, /, **fields: Any) -> ExperienceRecord:
        """Change fields of an entry (a new version; :meth:`rollback` goes back).

        Editable: kind, title, description, use_cases, content (or body: the same field), source_run,
        outcome, agent_role, tool_name, category, metadata. The name stays (it is the entry's identity).
        """
        if not fields:
            raise ExperienceError(f"edit of {name!r}: no fields given (editable: {', '.join(sorted(_EDITABLE))})")
        bad = sorted(set(fields) - _EDITABLE)
        if bad:
            raise ExperienceError(
                f"edit of {name!r}: {', '.join(map(repr, bad))} cannot be edited "
                f"(editable: {', '.join(sorted(_EDITABLE))})"
            )
        current = self.get(name)
        data = current.model_dump(exclude={"version", "usage"})
        data.update(fields)
        record = self._build(**data)
        return self.registry.register(record, note=f"edit {', '.join(sorted(fields))}")

    def disable(self, name: str) -> ExperienceRecord:
        """Keep an entry but stop retrieving it (a new version)."""
        return self._set_disabled(name, True)

    def enable(self, name: str) -> ExperienceRecord:
        """Retrieve a disabled entry again (a new version)."""
        return self._set_disabled(name, False)

    def delete(self, name: str) -> None:
        """Remove an entry from memory (its versions stay in the history; :meth:`rollback` restores it)."""
        self.get(name)
        self.registry.unregister(name)

    def rollback(self, name: str, version: int) -> ExperienceRecord:
        """Make an earlier version of an entry the current one."""
        return self.registry.rollback(name, version)

    def versions(self, name: str) -> "list[VersionInfo]":
        """Every version of an entry, oldest first."""
        return self.registry.versions(name)

    # -- reading ------------------------------------------------------------------------
    def get(self, name: str) -> ExperienceRecord:
        """The current version of an entry; NotFoundError naming it when there is none."""
        if not isinstance(name, str):
            raise ExperienceError(f"an entry name is a string, not {type(name).__name__}")
        return self.registry.get(name)

    def list(self, kind: str | None = None, *, include_disabled: bool = True) -> list[ExperienceRecord]:
        """Current entries, optionally of one kind, sorted by name."""
        if kind is not None:
            _check_kind(kind)
        return [
            r for r in self.registry.list() if (kind is None or r.kind == kind) and (include_disabled or not r.disabled)
        ]

    def matches(
        self, query: str, kind: str | None = None, k: int = 3, threshold: float | None = None
    ) -> list[tuple[ExperienceRecord, float]]:
        """Enabled entries similar to ``query`` with their cosine, best first; not counted as retrievals.
        Candidates of the promotion gate (:mod:`tea_notebook.evolve.gate`) are left out until promoted."""
        if kind is not None:
            _check_kind(kind)
        if not isinstance(query, str) or not query.strip():
            raise ExperienceError("retrieval needs a non-empty query text")
        if not isinstance(k, int) or k < 1:
            raise ExperienceError(f"k must be a positive integer, not {k!r}")
        where: dict[str, Any] = {"disabled": False}
        if kind is not None:
            where["kind"] = kind
        limit = self.threshold if threshold is None else threshold
        held = self.workspace.db.count_heads(self.registry.kind, "$.metadata.evolution.status", CANDIDATE)
        hits = self.registry.similar(query, k + held, limit, **where)
        return [(r, s) for r, s in hits if not is_candidate(r)][:k]

    def retrieve(
        self, query: str, kind: str | None = None, k: int = 3, threshold: float | None = None
    ) -> list[ExperienceRecord]:
        """Up to ``k`` enabled entries (of ``kind``, when given) with cosine ≥ ``threshold`` (default
        :attr:`threshold`, δ) to ``query``, best first. Each returned entry's retrieval count goes up;
        report how the run went with :meth:`record_outcome`."""
        hits = self.matches(query, kind, k, threshold)
        if hits:
            now = time.time()
            self.workspace.db.record_uses(self.registry.kind, [(r.name, 1, 0, 0, 0.0, now) for r, _ in hits])
        return [r for r, _ in hits]

    def record_outcome(self, names: "Iterable[str | ExperienceRecord] | str", success: bool) -> None:
        """Report how a run that retrieved these entries ended (a failure counts against each)."""
        if isinstance(names, (str, ExperienceRecord)):
            names = [names]
        listed = [n.name if isinstance(n, ExperienceRecord) else n for n in names]
        for name in listed:
            if not isinstance(name, str) or not self.workspace.db.history(self.registry.kind, name):
                raise NotFoundError(f"no experience named {name!r} was ever stored; cannot record an outcome for it")
        if not listed:
            return
        now, failed = time.time(), 0 if success else 1
        db = self.workspace.db
        db.record_uses(OUTCOME_KIND, [(n, 1, failed, 0, 0.0, now) for n in listed])
        if failed:
            db.record_uses(self.registry.kind, [(n, 0, 1, 0, 0.0, now) for n in listed])

    def stats(self, name: str) -> ExperienceStats:
        """Retrievals of an entry and the outcomes of the runs that retrieved it."""
        if not self.workspace.db.history(self.registry.kind, name):
            raise NotFoundError(f"no experience named {name!r} was ever stored")
        self.registry.flush_usage()
        calls, failures, *_ = self.workspace.db.usage(self.registry.kind, name).get(name, (0, 0, 0.0, None))
        reported, failed, *_ = self.workspace.db.usage(OUTCOME_KIND, name).get(name, (0, 0, 0.0, None))
        return ExperienceStats(name, retrieved=calls, succeeded=reported - failed, failed=failures)

    @staticmethod
    def render_for_prompt(records: Iterable[ExperienceRecord], max_chars: int | None = None) -> str:
        """Entries as text for the C.6 ``{success_experiences}`` / ``{failure_experiences}`` slots:
        ``### title``, the description, the use cases and the content (its headings one level
        deeper); ``(none)`` when there are none. ``max_chars`` drops whole entries past the limit."""
        parts: list[str] = []
        used = 0
        for rec in records:
            lines = [f"### {rec.title}", rec.description]
            if rec.use_cases:
                lines.append("Use cases: " + "; ".join(rec.use_cases))
            if rec.body.strip():
                lines += ["", _demote(rec.body.strip())]
            text = "\n".join(lines)
            if max_chars is not None and parts and used + len(text) + 2 > max_chars:
                break
            parts.append(text)
            used += len(text) + 2
        return "\n\n".join(parts) if parts else "(none)"

    # -- helpers ------------------------------------------------------------------------
    def _build(self, **fields: Any) -> ExperienceRecord:
        kind = _check_kind(fields.get("kind"))
        if "content" in fields:  # the paper's κ_content is the record's ``body`` field
            fields["body"] = fields.pop("content")
        for key in ("title", "description"):
            value = fields.get(key)
            if not isinstance(value, str) or not value.strip():
                raise ExperienceError(f"a {kind} experience needs a non-empty {key}")
        for key in ("body", "source_run", "outcome", "agent_role", "tool_name"):
            if not isinstance(fields.get(key, ""), str):
                raise ExperienceError(f"{key} must be a string, not {type(fields[key]).__name__}")
        cases = fields.get("use_cases") or []
        if isinstance(cases, str):
            cases = [cases]
        if not all(isinstance(c, str) for c in cases):
            raise ExperienceError("use_cases must be a list of strings")
        fields["use_cases"] = _unique(c.strip() for c in cases if c.strip())
        run = fields.get("source_run", "")
        fields.setdefault("source_runs", [run] if run else [])
        if run and run not in fields["source_runs"]:
            fields["source_runs"] = [*fields["source_runs"], run]
        fields.setdefault("name", "pending")
        for key in _REDACTED_FIELDS:  # what is stored never holds a secret (checked types first)
            if key in fields:
                fields[key] = redact(fields[key])
        try:
            return ExperienceRecord(**fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(entry)"
            raise ExperienceError(f"invalid {kind} experience: field {where!r}: {first['msg']}") from None

    def _merge(self, existing: ExperienceRecord, new: ExperienceRecord, cosine: float) -> ExperienceRecord:
        runs = list(existing.source_runs or ([existing.source_run] if existing.source_run else []))
        runs += [r for r in new.source_runs if r not in runs]
        # the lineage ("evolution") is the existing entry's: a merge does not make it a candidate again
        fresh = {k: v for k, v in new.metadata.items() if k != "evolution"}
        metadata = {**fresh, **existing.metadata, "merges": int(existing.metadata.get("merges", 0)) + 1}
        merged = existing.model_copy(
            update={
                "use_cases": _unique([*existing.use_cases, *new.use_cases]),
                "body": merge_content(existing.body, new.body),
                "source_runs": runs,
                "agent_role": existing.agent_role or new.agent_role,
                "tool_name": existing.tool_name or new.tool_name,
                "metadata": metadata,
            }
        )
        if (merged.use_cases, merged.body, merged.source_runs) == (
            existing.use_cases,
            existing.body,
            existing.source_runs,
        ):
            return existing  # nothing new: no version for a bare merge counter
        run = f" from run {new.source_run}" if new.source_run else ""
        return self.registry.register(merged, note=f"merged a near-duplicate{run} (cosine {cosine:.3f})")

    def _free_name(self, title: str) -> str:
        base = _slug(title)
        name, n = base, 1
        while self.workspace.db.history(self.registry.kind, name):
            n += 1
            name = f"{base[:60]}_{n}"
        return name

    def _set_disabled(self, name: str, disabled: bool) -> ExperienceRecord:
        current = self.get(name)
        if current.disabled == disabled:
            return current
        return self.registry.register(
            current.model_copy(update={"disabled": disabled}), note="disable" if disabled else "enable"
        )


def _unique(items: Iterable[str]) -> list[str]:
    """Items in order, repeats (ignoring case and spacing) dropped."""
    seen: set[str] = set()
    out = []
    for item in items:
        key = re.sub(r"\s+", " ", item).strip().casefold()
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def experiences_of(ws: "RunHost") -> ExperienceMemory:
    """The experience memory of ``ws``: its own ``ws.experiences`` (one object per workspace, so a
    ``threshold`` set on it holds for every reader) or, for a host without one, a new one over
    ``ws.experience``. The run host does not carry it: it lives on this floor, above ``runtime/``."""
    memory = getattr(ws, "experiences", None)
    return memory if isinstance(memory, ExperienceMemory) else ExperienceMemory(ws)


__all__ = [
    "KINDS",
    "ExperienceError",
    "ExperienceMemory",
    "experiences_of",
    "ExperienceRecord",
    "ExperienceStats",
    "ParsedEntry",
    "merge_content",
    "parse_markdown",
    "to_markdown",
]
