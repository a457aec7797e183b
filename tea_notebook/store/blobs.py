"""Long texts in the store: every stored field is clipped to :data:`FIELD_LIMIT` characters; the
full text is kept once, content-addressed by its sha256, in the ``blobs`` table of ``tea.db``.

A clipped text ends with a mark that says how long the full text is and how to get it
(``ws.events.full_text(text)``); :func:`blob_ref` reads the mark back.

"Once" also holds for texts that are parts of each other. A model's reply is stored whole; the
thought parsed out of it, or the arguments JSON holding one of its strings, are the same
characters (JSON-escaped or not). Such a text is kept as a *recipe* (:func:`plan`): literal pieces
and slices of a kept text, unescaped or escaped, checked to rebuild the text exactly before it is
used. So a 10 MB reply whose thought is also in the step costs one 10 MB blob, not two.

Standard library only: the renderers use :func:`shorten` too.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Callable, Mapping

__all__ = ["FIELD_LIMIT", "blob_ref", "build", "clip", "clip_value", "digest", "json_leaves", "plan", "shorten"]

#: Characters of one text field kept in an event, a run row or a rendering; the rest is a blob.
FIELD_LIMIT = 64 * 1024

_MARK = "\n… [clipped: {total:,} characters in all; full text: ws.events.full_text('sha256:{digest}')]"
_MARK_RE = re.compile(
    r"\n… \[clipped: [\d,]+ characters in all; full text: ws\.events\.full_text\('sha256:([0-9a-f]{64})'\)\]\Z"
)
_REF_RE = re.compile(r"(?:sha256:)?([0-9a-f]{64})")


def digest(text: str) -> str:
    """The sha256 of a text (its blob key)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def clip(text: str, limit: int = FIELD_LIMIT) -> tuple[str, str | None]:
    """``(text, None)`` when it fits, else ``(first limit characters + mark, digest of the full text)``."""
    if len(text) <= limit:
        return text, None
    key = digest(text)
    return text[:limit] + _MARK.format(total=len(text), digest=key), key


def clip_value(value: Any, blobs: dict[str, str], limit: int = FIELD_LIMIT) -> Any:
    """``value`` (JSON types) with every string over ``limit`` clipped; full texts go to ``blobs``."""
    if isinstance(value, str):
        clipped, key = clip(value, limit)
        if key is not None:
            blobs[key] = value
        return clipped
    if isinstance(value, dict):
        return {k: clip_value(v, blobs, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [clip_value(v, blobs, limit) for v in value]
    return value


def blob_ref(text: str) -> str | None:
    """The digest a clipped text points to (from its mark), or of ``"sha256:…"``; None otherwise."""
    found = _MARK_RE.search(text[-200:]) if len(text) > 64 else None
    if found:
        return found.group(1)
    found = _REF_RE.fullmatch(text.strip())
    return found.group(1) if found else None


def shorten(text: str, limit: int = FIELD_LIMIT) -> str:
    """``text`` cut to ``limit`` characters for display, keeping the mark of a clipped text."""
    if len(text) <= limit:
        return text
    mark = _MARK_RE.search(text[-200:])
    tail = mark.group(0) if mark else ""
    body = text[: len(text) - len(tail)]
    if len(body) <= limit:
        return text
    return body[:limit] + f"\n… ({len(body) - limit:,} more characters)" + tail


# -- recipes ----------------------------------------------------------------------------------
# A recipe is a list of parts; a part is a literal string or ``[digest, start, end, op]``: the
# slice ``[start:end]`` of the text kept as ``digest``, then ``op``: "" (as is), "unescape" (it is
# the inside of a JSON string literal), "escape" / "escape_ascii" (make it the inside of one).
def _escape(text: str, ascii_only: bool) -> str:
    return json.dumps(text, ensure_ascii=ascii_only)[1:-1]


def _apply(piece: str, op: str) -> str:
    if op == "":
        return piece
    if op == "unescape":
        return json.loads(f'"{piece}"')
    if op in ("escape", "escape_ascii"):
        return _escape(piece, op == "escape_ascii")
    raise ValueError(f"unknown recipe step {op!r}")


def plan(text: str, known: Mapping[str, str]) -> list[Any] | None:
    """A recipe for ``text`` from the ``known`` texts (digest to text), or None: ``text`` as a
    slice of a longer known text (raw or JSON-escaped there), or a known text (raw or JSON-escaped)
    inside ``text`` with literal pieces around it. The caller checks it with :func:`build`."""
    inside: tuple[tuple[str, str], ...] = ()
    for key, other in sorted(known.items(), key=lambda item: -len(item[1])):
        if len(other) <= FIELD_LIMIT or other == text:
            continue
        if len(other) > len(text):
            inside = inside or (("", text), ("unescape", _escape(text, False)), ("unescape", _escape(text, True)))
            for op, form in inside:
                at = other.find(form)
                if at >= 0:
                    return [[key, at, at + len(form), op]]
        else:
            for op, form in (("", other), ("escape", _escape(other, False)), ("escape_ascii", _escape(other, True))):
                at = text.find(form)
                if at >= 0:
                    return [text[:at], [key, 0, len(other), op], text[at + len(form) :]]
    return None


def build(recipe: list[Any], fetch: Callable[[str], str | None]) -> str | None:
    """The text a recipe makes, fetching kept texts by digest; None when one is missing."""
    out = []
    for part in recipe:
        if isinstance(part, str):
            out.append(part)
            continue
        key, start, end, op = part
        source = fetch(key)
        if source is None:
            return None
        out.append(_apply(source[start:end], op))
    return "".join(out)


def json_leaves(text: str, limit: int = FIELD_LIMIT) -> list[str]:
    """The strings longer than ``limit`` inside ``text`` when it is a JSON document (else none)."""
    if text.lstrip()[:1] not in ("{", "["):
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and len(item) > limit:
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found
