"""What the model saw: every model request of a run, stored so that it can be shown and edited.

A request (its messages, the tools offered, its parameters) is cut into *parts* at the markup of
the prompt (the step info, the task, each ``<step_N>`` block of the history, the memory folds, the
todo list, the environment state, each tool). A part of 100 characters or more is kept once in the
store's ``blobs`` table under its sha256, whichever step or run sends it again; shorter ones are
written inline. A request's record in its ``model_request`` event (``context``, JSON text) lists
its parts as an edit of the run's previous request of the same kind (copy these parts, insert
those), with a full list every :data:`KEYFRAME` requests; so a step adds its new history block
and a few references, and a 1,000-step run stores a linear amount, not the quadratic one of its
prompts written out.

A step's work is mostly for what changed (what grows with the prompt's length is a few passes in C:
slices compared, a set of the parts, the text's pieces joined once to check them). A prompt built
by :func:`~tea_notebook.runtime.prompts.build_prompt` comes with the pieces it was joined from (the
same text objects step after step), so the parts of the pieces it shares with the previous prompt
are taken from it as they are and only new pieces are cut, redacted and hashed; the edit is found
run by run (one search and one slice comparison for each run of copied parts). What is stored is
exactly what cutting the whole text again and matching it part by part would store.

Parts are redacted before they are kept (:func:`tea_notebook.redaction.redact`): the stored context
is what the model received, after redaction. Cuts fall just before markup (``<`` or a new line),
which no secret the redaction knows spans.

:class:`StepContext` is one request rebuilt: the messages as sent, the size of each part and what
changed since the previous step (``result.context(step)``, ``%tea context RUN --step N``).
"""

from __future__ import annotations

import json
import operator
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tea_notebook.errors import NotFoundError, TeaError
from tea_notebook.redaction import Clean, redact
from tea_notebook.runtime.html_style import CSS, esc_str
from tea_notebook.runtime.prompts import joins_to
from tea_notebook.store.blobs import digest, shorten

if TYPE_CHECKING:
    from tea_notebook.runtime.events import Event, EventLog

#: a full list of parts every this many requests of a kind (the rest are edits of the previous one)
KEYFRAME = 32
#: parts shorter than this are written inline in the event instead of kept by digest
INLINE = 100
#: an image larger than this is not kept (the context says so, and cannot be forked with edits)
IMAGE_LIMIT = 2 * 1024 * 1024
#: where a prompt is cut into parts: just before these marks (two patterns, each starting with one
#: literal character, which the regex engine skips to quickly; one alternation of both is ~4x slower)
_CUT_TAG = re.compile(r"<(?:task>|step_\d+>\n|todo_contents>|tool_state>|environment name=)")
_CUT_LINE = re.compile(
    r"\n(?:<agent_history>\n|<summaries>\n|<insights>\n|</agent_history>|<environment_state>|\{\"name\": \")"
)
#: ... and just after the end of a history block (so a block is the same text wherever it stands)
_CUT_AFTER = re.compile(r"</step_\d+>")
#: a request's stored form (made once: ``json.dumps`` with options builds an encoder per call)
_RECORD_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
#: what a part is, by how it starts (first match wins); shown beside its size
_KINDS = (
    ("<agent_state><step_info>", "step info"),
    ("<task>", "task"),
    ("\n<agent_history>", "history"),
    ("<step_", "history"),
    ("\n<summaries>", "memory folds"),
    ("\n<insights>", "memory folds"),
    ("\n</agent_history>", "history"),
    ("<todo_contents>", "todo"),
    ("\n<environment_state>", "environment"),
    ("<environment name=", "environment"),
    ("<tool_state>", "tools"),
    ('\n{"name": "', "tools"),
)


class ContextClipped(TeaError):
    """A stored context lacks something the model received (an image over :data:`IMAGE_LIMIT`)."""


def split_text(text: str) -> list[str]:
    """``text`` cut into parts at the prompt's markup (``"".join`` gives it back exactly)."""
    cuts = [m.start() for m in _CUT_TAG.finditer(text, 1)]
    cuts += [m.start() for m in _CUT_LINE.finditer(text, 1)]
    ends = [m.end() for m in _CUT_AFTER.finditer(text)]
    if ends and ends[-1] == len(text):
        ends.pop()
    if not cuts and not ends:  # most pieces of a prompt (a history block) are one part
        return [text]
    bounds = [0, *sorted({*cuts, *ends}), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


#: the keys of a message stored as text parts (one with any other key is stored whole, as JSON)
_PLAIN = frozenset(("role", "content"))


def part_kind(text: str, role: str) -> str:
    """What a part of a message is (``system prompt``, ``task``, ``history``, ``tools``...)."""
    if role == "system":
        return "system prompt"
    if role == "tool-definition":
        return "tools"
    if role == "image":
        return "image"
    for start, kind in _KINDS:
        if text.startswith(start):
            return kind
    return role if role in ("user", "assistant", "tool") else "message"


# -- writing ---------------------------------------------------------------------------------------
@dataclass
class _Text:
    """A message's text as last recorded from its pieces: the inner ones, their parts one after the
    other (``flat``; those of the first ``k`` pieces end at ``offsets[k]``), its last piece and parts."""

    inner: tuple[str, ...]
    flat: list[tuple[int, str]]
    offsets: list[int]
    end: str
    end_parts: list[tuple[int, str]]


def _same_start(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many items ``a`` and ``b`` have the same from the start (slices compared, not item by item)."""
    most = min(len(a), len(b))
    if a[:most] == b[:most]:
        return most
    low, high = 0, most  # a[:low] == b[:low]; a[:high] != b[:high]
    while high - low > 1:
        mid = (low + high) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid
    return low


class ContextRecorder:
    """Turns the model requests of one run into compact records (see the module's docstring). One
    per run; :meth:`record` returns the ``context`` field of a ``model_request`` event and queues
    the parts not kept yet with the run's next events (same transaction)."""

    def __init__(self, events: "EventLog"):
        self._events = events
        self._last: dict[str, tuple[list[tuple[int, str]], list[list[str]], str | None, dict[str, Any]]] = {}
        self._count: dict[str, int] = {}
        self._refs: dict[str, str] = {}  # a part's raw text -> its stored reference
        # a tool definition offered again (the loop offers the same objects until a registry changes,
        # and never edits one in place) -> (it, its reference): its JSON is made once, not every step
        self._tool_refs: dict[int, tuple[dict[str, Any], str]] = {}
        # a piece of a prompt's text (a history block, the task...) in a message -> its parts: cut and
        # referenced once, not every step
        self._piece_parts: dict[tuple[int, str], tuple[tuple[int, str], ...]] = {}
        self._params: tuple[dict[str, Any], dict[str, Any]] | None = None  # the last params, redacted
        self._toolsets: dict[str, tuple[list[dict[str, Any]], str]] = {}  # stream -> its last tools, their listing
        self._texts: dict[tuple[str, int], _Text] = {}  # (stream, message) -> its last text built of pieces

    def _ref(self, text: str, kept: dict[str, str]) -> str:
        ref = self._refs.get(text)
        if ref is None:
            clean = redact(text)
            if len(clean) < INLINE:
                ref = "=" + clean
            else:
                ref = digest(clean)
                kept[ref] = clean
            if len(self._refs) > 50_000:
                self._refs.clear()
            self._refs[text] = ref
        return ref

    def _tool_ref(self, tool: dict[str, Any], kept: dict[str, str]) -> str:
        known = self._tool_refs.get(id(tool))
        if known is not None and known[0] is tool:
            return known[1]  # kept already, when first seen (as :meth:`_ref` keeps a part once)
        ref = self._ref(json.dumps(tool, ensure_ascii=False, sort_keys=True), kept)
        if len(self._tool_refs) > 1_000:
            self._tool_refs.clear()
        self._tool_refs[id(tool)] = (tool, ref)
        return ref

    def _text_parts(
        self, at: tuple[str, int], text: str, text_pieces: tuple[str, ...] | None, kept: dict[str, str]
    ) -> list[tuple[int, str]]:
        """The parts of the text of message ``at`` (stream, index) (:func:`split_text`, referenced),
        from the pieces it was built of when they are given (each starts and ends at a cut: see
        :class:`~tea_notebook.runtime.prompts.Prompt`). The inner pieces recur step after step: the
        parts of those the message's last text began with too are taken from it as they are, the
        others cut and referenced once; the last piece is cut again only when it changed."""
        index = at[1]
        if text_pieces is None or len(text_pieces) < 3 or not joins_to(text_pieces, text):
            return [(index, self._ref(p, kept)) for p in split_text(text)]
        inner, end = text_pieces[1:-1], text_pieces[-1]
        before = self._texts.get(at)
        if before is None:
            same, flat, offsets = 0, [], [0]
        else:
            same = _same_start(before.inner, inner)
            flat, offsets = before.flat[: before.offsets[same]], before.offsets[: same + 1]
        known = self._piece_parts
        for piece in inner[same:]:
            parts = known.get((index, piece))
            if parts is None:
                if len(known) > 50_000:
                    known.clear()
                parts = known[(index, piece)] = tuple((index, self._ref(p, kept)) for p in split_text(piece))
            flat.extend(parts)
            offsets.append(len(flat))
        if before is not None and before.end == end:
            end_parts = before.end_parts
        else:
            end_parts = [(index, self._ref(p, kept)) for p in split_text(end)]
        self._texts[at] = _Text(inner, flat, offsets, end, end_parts)
        return [(index, self._ref(p, kept)) for p in split_text(text_pieces[0])] + flat + end_parts

    def _toolset(self, stream: str, tools: list[dict[str, Any]], kept: dict[str, str]) -> str:
        """The reference of the list of the tools offered (the same objects as last time: the same one)."""
        last = self._toolsets.get(stream)
        if last is not None and len(last[0]) == len(tools) and all(map(operator.is_, last[0], tools)):
            return last[1]
        listing = json.dumps([self._tool_ref(t, kept) for t in tools])
        toolset = self._ref(listing, kept) if len(listing) >= INLINE else "=" + listing
        self._toolsets[stream] = (list(tools), toolset)
        return toolset

    def _settings(self, params: dict[str, Any] | None) -> dict[str, Any]:
        """``params`` redacted (the same params as the last request's: redacted once)."""
        given = dict(params or {})
        if self._params is None or self._params[0] != given:
            self._params = (given, redact(given))
        return self._params[1]

    def record(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        params: dict[str, Any] | None = None,
        stream: str = "",
        text_pieces: tuple[str, ...] | None = None,
    ) -> str:
        """The stored form of one request, as compact JSON text (its parts are redacted already: a
        :class:`~tea_notebook.redaction.Clean` text, which the event's redaction does not scan again);
        ``stream`` tells kinds of requests apart (a step's prompt, a memory fold's, a stage's) so
        that each is an edit of the previous one of its kind; ``text_pieces``: the pieces a message's
        text was built of, if known (it is cut into the same parts, with less work)."""
        kept: dict[str, str] = {}
        parts: list[tuple[int, str]] = []
        shapes: list[list[str]] = []
        clipped = False
        for index, message in enumerate(messages):
            role = str(message.get("role", ""))
            content = message.get("content")
            if not _PLAIN.issuperset(message) or not isinstance(content, (str, list)):
                shapes.append([role, "raw"])
                parts.append((index, self._ref(json.dumps(message, ensure_ascii=False, default=str), kept)))
                continue
            if isinstance(content, str):
                shapes.append([role, "s"])
                if role == "system":  # one part
                    parts.append((index, self._ref(content, kept)))
                else:
                    parts.extend(self._text_parts((stream, index), content, text_pieces, kept))
                continue
            texts = [c for c in content if isinstance(c, dict) and c.get("type") == "text"]
            images = [c for c in content if isinstance(c, dict) and c.get("type") == "image_url"]
            if len(texts) + len(images) != len(content) or content[: len(texts)] != texts:
                shapes.append([role, "raw"])
                parts.append((index, self._ref(json.dumps(message, ensure_ascii=False, default=str), kept)))
                continue
            shapes.append([role, "l"])  # the text first, then the images (how the agent builds it)
            for text in texts:
                parts.extend(self._text_parts((stream, index), str(text.get("text", "")), text_pieces, kept))
                parts.append((index, "=\x00"))  # end of one text item
            for image in images:
                url = str((image.get("image_url") or {}).get("url", ""))
                if len(url) > IMAGE_LIMIT:
                    clipped = True
                    parts.append((index, "=\x01" + f"[image of {len(url):,} characters not kept]"))
                else:
                    parts.append((index, "=\x02" + digest(url)))
                    kept.setdefault(digest(url), url)
        toolset = self._toolset(stream, tools, kept) if tools else None
        settings = self._settings(params)
        n = self._count.get(stream, 0) + 1
        self._count[stream] = n
        record: dict[str, Any] = {"n": n}
        if stream:
            record["stream"] = stream
        last = self._last.get(stream)
        if last is None or n % KEYFRAME == 1:
            record.update(parts=parts, shape=shapes, tools=toolset, params=settings)
        else:
            record["ops"] = _diff(last[0], parts)
            if shapes != last[1]:
                record["shape"] = shapes
            if toolset != last[2]:
                record["tools"] = toolset
            if settings != last[3]:
                record["params"] = settings
        if clipped:
            record["clipped"] = True
        self._last[stream] = (parts, shapes, toolset, settings)
        if kept:
            self._events.keep(kept)
        # made of redacted parts, digests and references only: the event does not scan it again
        return Clean(_RECORD_JSON.encode(record))


def _diff(before: Sequence[Sequence[Any]], after: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """``after`` as copies of ranges of ``before`` (``[start, end]``) and inserted parts
    (``[message, ref, 0]``): each part of ``after`` found later in ``before`` than the last one
    copied is copied, the rest inserted (one pass; a prompt's parts rarely move backwards).

    The parts of both are alike (tuples, or lists as read from JSON). A step's prompt is its previous
    one with a few parts changed, so the copies are long runs: each is found with one search and its
    length by comparing slices, not part by part."""
    sample = before[0] if before else after[0] if after else ()
    if type(sample) is not tuple:  # lists read from JSON
        before, after = [tuple(p) for p in before], [tuple(p) for p in after]
    elif not isinstance(before, list):
        before = list(before)
    known = set(before)  # (most new parts are not in ``before``: no search, no exception)
    ops: list[list[Any]] = []
    last = 0  # where the next copy may start in ``before``
    j, size = 0, len(after)
    while j < size:
        part = after[j]
        at = -1
        if part in known:
            try:
                at = before.index(part, last)
            except ValueError:  # only before the last copy
                pass
        if at < 0:
            ops.append([part[0], part[1], 0])
            j += 1
            continue
        length = _common_run(before, at, after, j)
        ops.append([at, at + length])  # the next part differs from ``before[at + length]``: never adjacent
        last = at + length
        j += length
    return ops


def _common_run(a: Sequence[Any], i: int, b: Sequence[Any], j: int) -> int:
    """How many items from ``a[i]`` and ``b[j]`` on are equal (``a[i] == b[j]`` is known)."""
    most = min(len(a) - i, len(b) - j)
    if most == 1 or a[i + 1] != b[j + 1]:
        return 1
    if a[i : i + most] == b[j : j + most]:
        return most
    low, high = 2, most  # a[i:i+low] == b[j:j+low]; a[i:i+high] != b[j:j+high]
    while high - low > 1:
        mid = (low + high) // 2
        if a[i : i + mid] == b[j : j + mid]:
            low = mid
        else:
            high = mid
    return low


def _match(before: Sequence[Sequence[Any]], after: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """:func:`_diff` part by part: for each part of ``after``, ``[at, at + 1]`` (copied from
    ``before[at]``) or ``[message, ref, 0]`` (inserted)."""
    out: list[list[Any]] = []
    for op in _diff(before, after):
        if len(op) == 2:
            out.extend([at, at + 1] for at in range(op[0], op[1]))
        else:
            out.append(op)
    return out


# -- reading ---------------------------------------------------------------------------------------
@dataclass
class Part:
    """One part of a request as sent: which message, what it is, its text (redacted) and whether
    the previous request of its kind had it too."""

    message: int
    role: str
    kind: str
    text: str
    changed: bool = False

    @property
    def chars(self) -> int:
        """Its length in characters."""
        return len(self.text)


@dataclass
class StepContext:
    """A model request as sent (after redaction): ``messages``, ``tools``, ``params``, cut into
    ``parts`` with their sizes; ``removed``: parts the previous request of its kind had and this
    one has not (history folded into a summary, a tool no longer offered)."""

    run_id: str
    step: int | None
    stage: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    params: dict[str, Any]
    parts: list[Part]
    removed: list[Part] = field(default_factory=list)
    clipped: bool = False
    previous_step: int | None = None

    def sizes(self) -> dict[str, int]:
        """Characters by kind of part (system prompt, task, history, memory folds, environment, tools...)."""
        out: dict[str, int] = {}
        for p in self.parts:
            out[p.kind] = out.get(p.kind, 0) + p.chars
        return out

    @property
    def chars(self) -> int:
        """Characters of the whole request."""
        return sum(p.chars for p in self.parts)

    def changes(self) -> dict[str, list[str]]:
        """What changed since the previous request: ``added`` and ``removed`` parts, by their first line."""
        return {
            "added": [_gist(p) for p in self.parts if p.changed and p.text.strip()],
            "removed": [_gist(p) for p in self.removed if p.text.strip()],
        }

    def text(self) -> str:
        """The request as plain text: each message with its role, then the tools."""
        lines = [f"context of step {self.step} of run {self.run_id}" + (f" ({self.stage})" if self.stage else "")]
        for i, m in enumerate(self.messages):
            lines.append(f"--- message {i + 1}: {m.get('role')} ---")
            content = m.get("content")
            if isinstance(content, list):
                for c in content:
                    lines.append(c.get("text", "") if c.get("type") == "text" else "[image]")
            else:
                lines.append(str(content if content is not None else json.dumps(m)))
        if self.tools:
            lines.append(f"--- tools offered: {', '.join(_tool_name(t) for t in self.tools)} ---")
        return "\n".join(lines)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k} {v:,}" for k, v in self.sizes().items())
        return f"StepContext(run={self.run_id!r}, step={self.step}, chars={self.chars:,}: {sizes})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the parts with kinds, sizes and whether they changed (what the renderer shows)."""
        return {
            "run_id": self.run_id,
            "step": self.step,
            "stage": self.stage,
            "chars": self.chars,
            "sizes": self.sizes(),
            "previous_step": self.previous_step,
            "clipped": self.clipped,
            "parts": [
                {
                    "message": p.message,
                    "role": p.role,
                    "kind": p.kind,
                    "chars": p.chars,
                    "changed": p.changed,
                    "text": p.text,
                    "summary": part_summary(p.text),
                }
                for p in self.parts
            ],
            "removed": [
                {"kind": p.kind, "chars": p.chars, "text": f"{p.kind}: {part_summary(p.text)}"} for p in self.removed
            ],
            "tools": [_tool_name(t) for t in self.tools or []],
        }

    def _repr_html_(self) -> str:
        return context_html(self)


#: a part that is only a wrapper tag (``<agent_history>``, ``</agent_history>``...) and line breaks
_BARE_TAG = re.compile(r"\s*<(/?)[a-z_]+>\s*")


def fold_filler(refs: list[list[Any]], parts: list[Part]) -> list[Part]:
    """The parts to list: a part that is only whitespace or a bare wrapper tag is folded into its
    neighbour in the same text (an opening tag into the part after it, the rest into the one before),
    so the list has no one-character rows; ``refs`` are the stored ``[message, ref]`` of ``parts``
    (the end-of-text-item marks are dropped here). Texts are joined in order, so nothing is lost."""
    items: list[list[Part]] = []  # runs of parts of one text (a message's string or one text item)
    for (message, ref), part in zip(refs, parts):
        if ref == "=\x00" or ref.startswith(("=\x01", "=\x02")):
            if ref != "=\x00":
                items.append([part])
            items.append([])
            continue
        if not items or not items[-1] or items[-1][-1].message != message:
            items.append([])
        items[-1].append(part)
    out: list[Part] = []
    for run in items:
        kept: list[Part] = []
        pending: Part | None = None  # an opening tag waiting for the part after it
        for part in run:
            bare = _BARE_TAG.fullmatch(part.text)
            filler = not part.text.strip() or bare is not None
            if filler and len(run) > 1:
                opening = bare is not None and not bare.group(1)
                if opening or not kept:
                    pending = _joined(pending, part) if pending else part
                else:
                    kept[-1] = _joined(kept[-1], part)
                continue
            if pending is not None:
                part = _joined(pending, part, kind=part.kind)
                pending = None
            kept.append(part)
        if pending is not None:
            kept = kept[:-1] + [_joined(kept[-1], pending)] if kept else [pending]
        out.extend(kept)
    return out


def _joined(first: Part, second: Part, kind: str | None = None) -> Part:
    """Two neighbouring parts of one text as one (the kind of ``first`` unless told)."""
    return Part(
        first.message, first.role, kind or first.kind, first.text + second.text, first.changed or second.changed
    )


def _tool_name(tool: dict[str, Any]) -> str:
    return str((tool.get("function") or {}).get("name") or tool.get("name") or "?")


#: markup a part's summary leaves out (``<agent_history>``, ``<step_3>``, ``</task>``...)
_TAG = re.compile(r"</?[a-z_]+(?:_\d+)?>")
#: a history block's opening tag: its summary starts "step N:"
_STEP_TAG = re.compile(r"<step_(\d+)>")
#: a field of a history block with nothing after its label ("Memory: ", "Action Results:")
_EMPTY_FIELD = re.compile(r"[A-Z][A-Za-z ]*:\s*")


def part_summary(text: str, limit: int = 100) -> str:
    """A part's first line worth reading, without its markup: ``<agent_history>`` + ``<step_1>`` + ...
    reads ``step 1: [work] {"n": 1} -> result 1`` (wrapper tags and empty fields left out); a tool's
    definition reads ``tool work: Do one unit of work.``"""
    words = _summary_words(text)
    return words if len(words) <= limit else words[: limit - 1] + "…"


def _summary_words(text: str) -> str:
    if text.lstrip().startswith('{"'):
        try:
            tool = json.loads(text)
            spec = tool.get("function") or tool
            return f"tool {spec['name']}: {' '.join(str(spec.get('description') or '').split())}".rstrip(": ")
        except (ValueError, TypeError, KeyError, AttributeError):
            pass
    prefix = ""
    for line in text.splitlines():
        step = _STEP_TAG.search(line)
        if step and not prefix:
            prefix = f"step {step.group(1)}: "
        words = " ".join(_TAG.sub(" ", line).split())
        if words and not _EMPTY_FIELD.fullmatch(words):
            return prefix + words
    return prefix.rstrip(": ") or " ".join(text.split())


def _gist(part: Part) -> str:
    first = next((line for line in part.text.splitlines() if line.strip()), "")
    return f"{part.kind}: {first[:100]}"


class ContextReader:
    """Rebuilds the stored requests of one run from its ``model_request`` events."""

    def __init__(self, run_id: str, events: Sequence["Event | _Request"], blob: Callable[[str], str | None]):
        self.run_id = run_id
        self._blob = blob
        self._texts: dict[str, str] = {}
        self.requests: list[tuple["Event | _Request", dict[str, Any]]] = [
            (e, json.loads(e.data["context"]))
            for e in events
            if e.run_id == run_id and e.type == "model_request" and isinstance(e.data.get("context"), str)
        ]

    def _text(self, ref: str) -> str:
        if ref.startswith("="):
            return ref[1:]
        text = self._texts.get(ref)
        if text is None:
            got = self._blob(ref)
            if got is None:
                raise NotFoundError(f"run {self.run_id}: a stored part of a model request is missing (sha256:{ref})")
            text = self._texts[ref] = got
        return text

    def find(self, step: int, stage: str = "") -> int:
        """The index (in :attr:`requests`) of the request of ``step`` (the last one of the step and kind)."""
        found = [i for i, (e, c) in enumerate(self.requests) if e.step == step and c.get("stream", "") == stage]
        if not found and not stage:  # a run of stages (a researcher's rounds): its one call at that step
            found = [i for i, (e, _) in enumerate(self.requests) if e.step == step]
        if not found:
            steps = sorted(
                {e.step for e, c in self.requests if (c.get("stream", "") == stage or not stage) and e.step is not None}
            )
            if not self.requests:
                raise NotFoundError(
                    f"run {self.run_id} has no stored model requests (it was recorded before requests were stored, "
                    "or it made no model call)"
                )
            where = f" (stage {stage!r})" if stage else ""
            shown = ", ".join(map(str, steps[:20])) + (" ..." if len(steps) > 20 else "")
            raise NotFoundError(
                f"run {self.run_id} has no model request at step {step}{where}; steps with one: {shown or 'none'}"
            )
        return found[-1]

    def _state(self, index: int) -> tuple[list[list[Any]], list[list[str]], str | None, dict[str, Any], bool]:
        """Parts, shapes, toolset and params of request ``index``: from its keyframe, edit by edit."""
        stream = self.requests[index][1].get("stream", "")
        chain = []
        for i in range(index, -1, -1):
            c = self.requests[i][1]
            if c.get("stream", "") != stream:
                continue
            chain.append(c)
            if "parts" in c:
                break
        else:
            if not chain or "parts" not in chain[-1]:
                raise TeaError(
                    f"run {self.run_id}: the stored requests are incomplete (no full request before this one)"
                )
        parts: list[list[Any]] = []
        shapes: list[list[str]] = []
        tools: str | None = None
        params: dict[str, Any] = {}
        clipped = False
        for c in reversed(chain):
            if "parts" in c:
                parts = [list(p) for p in c["parts"]]
            else:
                new: list[list[Any]] = []
                for op in c["ops"]:
                    if len(op) == 2:
                        new.extend(parts[op[0] : op[1]])
                    else:
                        new.append([op[0], op[1]])
                parts = new
            shapes = c.get("shape", shapes)
            tools = c.get("tools", tools)
            params = c.get("params", params)
            clipped = bool(c.get("clipped"))
        return parts, shapes, tools, params, clipped

    def context(self, step: int, stage: str = "") -> StepContext:
        """The request of ``step`` rebuilt, with what changed since the previous one of its kind."""
        index = self.find(step, stage)
        event, _ = self.requests[index]
        parts, shapes, toolset, params, clipped = self._state(index)
        stream = self.requests[index][1].get("stream", "")
        stage = stage or stream
        previous = next((i for i in range(index - 1, -1, -1) if self.requests[i][1].get("stream", "") == stream), None)
        before: list[list[Any]] = self._state(previous)[0] if previous is not None else []
        changed_at: set[int] = set()
        removed_at: list[int] = []
        if previous is not None:
            copied: set[int] = set()
            for j, op in enumerate(_match(before, parts)):
                if len(op) == 2:
                    copied.add(op[0])
                else:
                    changed_at.add(j)
            removed_at = [i for i in range(len(before)) if i not in copied]
        messages = self._messages(parts, shapes)
        shown = fold_filler(parts, [self._part(p, shapes, i in changed_at) for i, p in enumerate(parts)])
        removed = [self._part(before[i], shapes, True) for i in removed_at if not before[i][1].startswith("=\x00")]
        tools = None
        if toolset is not None:
            tools = [json.loads(self._text(r)) for r in json.loads(self._text(toolset))]
            for t in tools:
                shown.append(Part(len(messages), "tool-definition", "tools", json.dumps(t, ensure_ascii=False)))
        prev_step = self.requests[previous][0].step if previous is not None else None
        return StepContext(self.run_id, event.step, stage, messages, tools, params, shown, removed, clipped, prev_step)

    def _part(self, part: list[Any], shapes: list[list[str]], changed: bool) -> Part:
        index, ref = part
        role = shapes[index][0] if index < len(shapes) else ""
        if ref.startswith("=\x02"):
            return Part(index, "image", "image", f"[image sha256:{ref[2:14]}…]", changed)
        if ref.startswith("=\x01"):
            return Part(index, "image", "image", ref[2:], changed)
        text = self._text(ref)
        return Part(index, role, part_kind(text, role), text, changed)

    def _messages(self, parts: list[list[Any]], shapes: list[list[str]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for index, (role, shape) in enumerate(shapes):
            mine = [r for m, r in parts if m == index]
            if shape == "raw":
                out.append(json.loads(self._text(mine[0])))
            elif shape == "s":
                out.append({"role": role, "content": "".join(self._text(r) for r in mine)})
            else:
                content: list[dict[str, Any]] = []
                text: list[str] = []
                for r in mine:
                    if r == "=\x00":
                        content.append({"type": "text", "text": "".join(text)})
                        text = []
                    elif r.startswith("=\x02"):
                        content.append({"type": "image_url", "image_url": {"url": self._text(r[2:])}})
                    elif r.startswith("=\x01"):
                        content.append({"type": "image_url", "image_url": {"url": r[2:]}})
                    else:
                        text.append(self._text(r))
                out.append({"role": role, "content": content})
        return out


@dataclass
class _Request:
    """A ``model_request`` event as :class:`ContextReader` reads it (run, type, step, data)."""

    run_id: str
    type: str
    step: int | None
    data: dict[str, Any]


def load_context(ws: Any, run_id: str, step: int, stage: str = "") -> StepContext:
    """The request of ``step`` of one run (an id prefix is enough; a nested run's own id for a
    sub-agent) rebuilt from that run's ``model_request`` events alone: what
    :meth:`Trajectory.context <tea_notebook.runtime.trajectory.Trajectory.context>` returns, without
    loading and building the whole trajectory (a renderer's path to one step of a long run)."""
    row = ws.db.run_row(run_id)
    if row is None:
        raise NotFoundError(f"no run {run_id!r} in {ws.path}")
    ws.events.flush()  # the requests of a run still going
    rows = ws.db.run_events_of_type([row["id"]], ["model_request"])
    needed = _needed(rows, step, stage)
    if needed is not None:
        return ContextReader(row["id"], needed, ws.db.blob).context(step, stage)
    if row["forked_from"] and row["fork_step"] is not None and step <= row["fork_step"]:
        # a step the fork replayed (or took without the model): the model saw it in the run it came from
        return load_context(ws, row["forked_from"], step, stage)
    # no request at the step: the full reader says so, listing the steps that have one
    return ContextReader(row["id"], [_Request(r, t, at, json.loads(d)) for r, t, at, d in rows], ws.db.blob).context(
        step, stage
    )


def _needed(rows: list[tuple[str, str, int | None, str]], step: int, stage: str) -> list[_Request] | None:
    """The requests that rebuild the one of ``step`` and the one before it of its kind: read backwards
    from the step's request to the keyframe at or before the previous one (the JSON of the rest is
    never parsed), in order; None when the step has no request."""
    out: list[_Request] = []
    found = previous = False
    for run, type_, at, data in reversed(rows):
        if at is not None and at > step:
            continue
        request = _Request(run, type_, at, json.loads(data))
        context = request.data.get("context")
        context = json.loads(context) if isinstance(context, str) else context
        if not isinstance(context, dict) or context.get("stream", "") != stage:
            if found:
                out.append(request)
            continue
        if not found:
            if at != step:
                return None
            found = True
        elif not previous:
            previous = True
        out.append(request)
        if previous and "parts" in context:
            break
    return out[::-1] if found else None


def context_html(ctx: Any) -> str:
    """A step's context (:class:`~tea_notebook.runtime.contexts.StepContext`): the size of each
    kind of part, then every part, those new since the previous step marked, texts folded."""
    sizes = ctx.sizes()
    total = max(1, ctx.chars)
    bar = "".join(
        f"<span title='{esc_str(k)}: {v:,} characters' style='display:inline-block;height:8px;"
        f"width:{max(1, round(300 * v / total))}px;background:{_KIND_COLOUR.get(k, '#8c959f')}'></span>"
        for k, v in sizes.items()
    )
    legend = " · ".join(
        f"<span class='tea-ctx-key' data-kind='{esc_str(k)}'><span style='display:inline-block;width:10px;"
        f"height:10px;margin-right:3px;vertical-align:middle;background:{_KIND_COLOUR.get(k, '#8c959f')}'></span>"
        f"{esc_str(k)} {v:,}</span>"
        for k, v in sizes.items()
    )
    since = f" · new since step {ctx.previous_step} marked" if ctx.previous_step is not None else ""
    rows = []
    for p in ctx.parts:
        mark = "<span class='badge'>new</span> " if p.changed else ""
        first = part_summary(p.text, 120)
        rows.append(
            f"<details><summary>{mark}<b>{esc_str(p.kind)}</b> <span class='muted'>({esc_str(p.role)}, "
            f"{p.chars:,} chars)</span> {esc_str(shorten(first, 120))}</summary>"
            f"<pre>{esc_str(shorten(p.text, 20000))}</pre></details>"
        )
    removed = "".join(
        f"<div class='muted'>removed since step {ctx.previous_step}: <s>{esc_str(shorten(p.text, 160))}</s></div>"
        for p in ctx.removed
    )
    clipped = "<div class='err'>an image of this request was too large to keep</div>" if ctx.clipped else ""
    stage = f" ({esc_str(ctx.stage)})" if ctx.stage else ""
    return (
        f"{CSS}<div class='tea-t tea-context'><div class='h'><b>context of step {ctx.step}{stage}</b>"
        f"<span>{ctx.chars:,} characters</span><span class='muted'>run {esc_str(ctx.run_id)}{since}</span></div>"
        f"<div>{bar}</div><div class='muted'>{legend}</div>{clipped}{''.join(rows)}{removed}</div>"
    )


_KIND_COLOUR = {
    "system prompt": "#8250df",
    "step info": "#57606a",
    "task": "#0969da",
    "history": "#1a7f37",
    "memory folds": "#bf8700",
    "todo": "#6e7781",
    "environment": "#cf222e",
    "tools": "#953800",
}
