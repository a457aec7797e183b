"""The one redaction of secrets, applied to every record tea_notebook stores or exports.

:func:`redact` walks a Python value (dicts, lists, strings, anything else as its ``str``) and
returns a copy that is safe to encode and store:

- **by value**: the values of secret-named environment variables (``*_KEY``, ``*_TOKEN``,
  ``*_SECRET``, ``*_PASSWORD`` …, at least 8 characters), also in the escaped forms they take
  inside JSON, Python reprs, URLs and HTML and in base64 and hex; ``Bearer …`` credentials and
  passwords in URLs;
- **by content** (:mod:`tea_notebook.secret_detection`): tokens of known formats (cloud, GitHub,
  Slack, OpenAI-style keys, JWTs, private key blocks …), high-entropy tokens, secrets said in
  prose ("the vault pass phrase is …") and base64 or hex runs that decode to a secret;
- **by key name**: the value of a mapping key with a secret-like name (``password``, ``api_key``,
  ``token``, ``secret``, ``authorization``, ``*_key`` …, any case) is replaced whatever it is, and
  so is ``name: value`` / ``name=value`` text with such a name (JSON or dict text inside a string,
  query strings, config lines).

Redact first, encode after: comparing a raw secret with JSON-escaped text misses any secret that
contains a quote or a backslash. The environment is compared with a snapshot on every call and its
secrets re-read when anything in it changed (a secret exported a moment ago is already known); a
text redacted recently is remembered with the secrets it was redacted against. This module imports
only :mod:`tea_notebook.secret_detection` (a helper of the same floor), so every floor (store,
protocol, runtime …) can use it.
"""

from __future__ import annotations

import functools
import html
import json
import os
import re
import string
import sys
import threading
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import quote, quote_plus

from tea_notebook.secret_detection import LABEL, encoded_forms, find_secrets, replace_spans

__all__ = ["REDACTED", "Clean", "is_secret_name", "redact"]

#: What replaces the value of a secret-named key, or a ``name=value`` value.
REDACTED = "[redacted]"
_SHAPE_LABEL = LABEL
_MIN_LENGTH = 8  # shorter environment values would redact ordinary words
_MAX_DEPTH = 64

_ENV_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?)$", re.I)
_SECRET_KEY = re.compile(
    r"^(?:.*_)?(?:passwords?|passwd|passphrase|secrets?|token|auth|authorization|credentials?|cookie|apikey)$"
    r"|^.+_key$"
)
_AUTH_SCHEME = re.compile(r"\b(Bearer|Basic)([ \t]+)([A-Za-z0-9._~+/\-]{8,}=*)", re.I)
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.\-]{0,31}://[^/\s:@'\"]{1,256}:)[^/\s@'\"]{1,256}(@)", re.I)
# ``name: value`` / ``name=value`` in text: a quoted name (JSON, dict reprs) anywhere,
# ``name=value`` anywhere (query strings, keyword arguments, env files), ``name: value`` only at the
# start of a line (YAML, HTTP headers), so that prose ("the secret: …") and annotations
# ("password: str") stay as they are. A match is the name and separator only; the value is read
# after it for secret names alone, so the rest is scanned for further names ("url=https://h/?token=…").
_VALUE = re.compile(
    r"""(?P<value>"(?:[^"\\\n]|\\.)*+"|'(?:[^'\\\n]|\\.)*+'"""
    r"""|(?!(?:str|int|float|bool|bytes|None|null|true|false|True|False|Any|Optional)\b)"""
    r"""[^\s,;&'"(){}\[\]<>=][^\s,;&'"(){}\[\]<>]*+)"""
)
# a name worth asking is_secret_name about contains one of these words
_CANDIDATE = r"(?=[\w\-]{0,60}?(?i:pass|secret|token|auth|cred|cookie|key))"
_KEY_VALUE = (
    re.compile(
        rf"""(?<![\w\-])(?P<q>["'])(?P<name>{_CANDIDATE}[A-Za-z][\w\-]{{0,63}}+)(?P=q)(?P<sep>[ \t]*+[:=][ \t]*+)"""
    ),
    re.compile(rf"""(?<![\w\-"'])(?P<q>)(?P<name>{_CANDIDATE}[A-Za-z][\w\-]{{0,63}}+)(?P<sep>[ \t]*+=[ \t]*+)"""),
    re.compile(rf"""(?m)^[ \t\-]*+(?P<q>)(?P<name>{_CANDIDATE}[A-Za-z][\w\-]{{0,63}}+)(?P<sep>:[ \t]*+)"""),
)


@functools.lru_cache(maxsize=4096)  # the same few key names come back in every event
def is_secret_name(name: str) -> bool:
    """True for a key whose value is a secret: ``password``, ``passwd``, ``secret``, ``token``,
    ``api_key``, ``authorization``, ``credentials``, ``cookie``, any ``*_key`` (``apiKey``,
    ``X-Api-Key`` and ``OPENAI_API_KEY`` too). Counts such as ``prompt_tokens`` are not secrets."""
    snake = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    snake = re.sub(r"[\s\-.]+", "_", snake).lower().strip("_")
    return bool(_SECRET_KEY.match(snake))


def _forms(value: str) -> set[str]:
    """The ways a secret's text shows up once something has encoded it."""
    escaped = json.dumps(value)[1:-1]
    return {
        value,
        escaped,
        json.dumps(value, ensure_ascii=False)[1:-1],
        json.dumps(escaped)[1:-1],
        repr(value)[1:-1],
        quote(value, safe=""),
        quote_plus(value),
        html.escape(value, quote=True),
        *encoded_forms(value),
    }


class _Known:
    """Secret values from the environment, as one compiled pattern rebuilt when they change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: tuple[tuple[str, str], ...] | None = None
        # (the mapping os.environ writes through to, a copy of it, pattern, labels), swapped whole
        self._state: tuple[Any, dict[Any, Any], re.Pattern[str] | None, dict[str, str]] | None = None

    def pattern(self) -> tuple[re.Pattern[str] | None, dict[str, str]]:
        env = os.environ
        raw = getattr(env, "_data", env)
        state = self._state
        # a C-level comparison of the whole environment with a copy (values compare by identity
        # first): any variable exported, changed or removed since the last call is seen, at ~1 µs
        # instead of decoding and sorting every variable on every call
        if state is not None and state[0] is raw and state[1] == raw:
            return state[2], state[3]
        copy = dict(raw)
        found = tuple(sorted((n, v) for n, v in env.items() if len(v) >= _MIN_LENGTH and _ENV_SECRET_NAME.search(n)))
        with self._lock:
            if found != self._seen or self._state is None:
                labels: dict[str, str] = {}
                for name, value in found:
                    for form in _forms(value):
                        labels.setdefault(form, f"[{name} redacted]")
                forms = sorted(labels, key=len, reverse=True)
                pattern = re.compile("|".join(map(re.escape, forms))) if forms else None
                self._seen = found
            else:
                pattern, labels = self._state[2], self._state[3]
            # the copy is older than or as old as ``found``: a change in between rebuilds next call
            self._state = (raw, copy, pattern, labels)
            return pattern, labels


_known = _Known()


# A ``name=value`` match holds a key word in its name, at most 60 characters after the name starts
# (_CANDIDATE): the places a match can start are found from the key words (str.find), and the
# patterns tried there alone (Pattern.match) instead of at every character of the text.
_NAME_CHARS = string.ascii_letters + string.digits + "_-"  # [\w\-] in ASCII text
_NEAR_SPACING = 32  # a text with a key word every 32 characters or more often is scanned whole
_NEAR_FROM = 32  # characters: a text up to this long is scanned whole (as fast as finding the places)


def _key_word_places(lower: str) -> list[int] | None:
    """Where a key word starts in ``lower``, in order; None when there are too many to try one by one."""
    found: list[int] = []
    most = len(lower) // _NEAR_SPACING
    for word in _KEY_WORDS:
        at = lower.find(word)
        while at >= 0:
            found.append(at)
            if len(found) > most:
                return None
            at = lower.find(word, at + 1)
    found.sort()
    return found


def _match_starts(text: str, places: list[int]) -> tuple[list[int], list[int], list[int]]:
    """Where each pattern of :data:`_KEY_VALUE` can match, given the key words' places: a quote
    before a name, a name (the start of its run of name characters), a line's start."""
    quoted, bare, lines = set(), set(), set()
    line = after = 0
    for at in places:  # in order: each new line is looked for from the last place on
        newline = text.rfind("\n", after, at)
        if newline >= 0:
            line = newline + 1
        after = at
        lines.add(line)
        before = text[max(0, at - 61) : at]
        run = len(before) - len(before.rstrip(_NAME_CHARS))
        if run > 60:
            continue  # the run of name characters starts more than 60 characters before the word
        start = at - run
        bare.add(start)
        if start and text[start - 1] in "\"'":
            quoted.add(start - 1)
    return sorted(quoted), sorted(bare), sorted(lines)


def _matches_at(pattern: re.Pattern[str], text: str, starts: list[int]) -> Iterator[re.Match[str]]:
    """What ``pattern.finditer(text)`` finds when it can only match at ``starts``."""
    end = 0
    for at in starts:
        if at >= end:
            match = pattern.match(text, at)
            if match is not None:
                end = match.end()
                yield match


def _all_key_values(text: str, lower: str) -> str:
    """``text`` with the values of its secret-named ``name=value`` pairs replaced (each pattern of
    :data:`_KEY_VALUE` in turn)."""
    # a short text is scanned whole (as fast); lower() and case folding agree on places only in ASCII
    if len(text) <= _NEAR_FROM or not text.isascii():
        for pattern in _KEY_VALUE:
            text = _key_values(text, pattern)
        return text
    starts = None
    for i, pattern in enumerate(_KEY_VALUE):
        if starts is None:
            places = _key_word_places(lower)
            starts = _match_starts(text, places) if places is not None else None
        before = text
        text = _key_values(text, pattern, starts[i] if starts is not None else None)
        if text is not before:  # the places moved
            lower, starts = text.lower(), None
    return text


def _key_values(text: str, pattern: re.Pattern[str], starts: list[int] | None = None) -> str:
    out: list[str] = []
    done = 0
    for match in pattern.finditer(text) if starts is None else _matches_at(pattern, text, starts):
        if match.start() < done or not is_secret_name(match.group("name")):
            continue
        found = _VALUE.match(text, match.end())
        if found is None:
            continue
        value = found.group(0)
        quote_char = value[0] if value[0] in "\"'" else ('"' if match.group("q") == '"' else "")
        out += [text[done : match.end()], quote_char, REDACTED, quote_char]
        done = found.end()
    return "".join(out) + text[done:] if out else text


def _credential(match: re.Match[str]) -> str:
    cred = match.group(3)
    # a token has digits, symbols or inner capitals; "Basic authentication" is prose
    if any(c.isdigit() or c in "._~+/-=" for c in cred) or any(c.isupper() for c in cred[1:]):
        return f"{match.group(1)}{match.group(2)}{_SHAPE_LABEL}"
    return match.group(0)


# words one of which every secret key name contains (see is_secret_name); text without any of them,
# lower-cased, holds no ``name=value`` worth scanning for
_KEY_WORDS = ("pass", "secret", "token", "auth", "cred", "cookie", "key")
_MEMO_CHARS = 4096  # texts up to this long are remembered: the same text recurs across a step's events
_MEMO_SIZE = 2048
_LONG_TEXTS = 8  # longer texts remembered (a tool's long result is in its tool_result and its step event)
_LONG_CHARS = 32 * 1024 * 1024
_SCALARS = frozenset({int, float, bool, type(None)})


class _Memo:
    """What texts were redacted to against one set of known secrets (``labels``): swapped whole when
    the secrets change, so an answer made with other secrets is never served (also while another
    thread still fills the old one)."""

    __slots__ = ("labels", "values", "structure", "names", "long", "long_chars")

    def __init__(self, labels: dict[str, str]):
        self.labels = labels
        self.values: dict[str, str] = {}  # a text redacted with keys=True
        self.structure: dict[str, str] = {}  # with keys=False
        self.names: dict[str, tuple[str, bool]] = {}  # a mapping's key: (redacted, a secret name)
        self.long: dict[tuple[str, bool], str] = {}  # texts over _MEMO_CHARS, the last few
        self.long_chars = 0

    def clear(self) -> None:
        """Forget every answer (a benchmark starts from an empty memo, as a new process does)."""
        for answers in (self.values, self.structure, self.names, self.long):
            answers.clear()
        self.long_chars = 0


_memo = _Memo({})


def _memo_for(labels: dict[str, str]) -> _Memo:
    global _memo
    memo = _memo
    if memo.labels is not labels:
        memo = _memo = _Memo(labels)
    return memo


class Clean(str):
    """A text the runtime made only of texts it redacted already and of its own marks (digests, part
    references): :func:`redact` passes it on as it is (still clipped when long), so it is not scanned a
    second time. Made by the runtime alone (a stored context's record, an input hash), never from what a
    model, a tool or a page returned."""

    __slots__ = ()


class _Walker:
    """One walk of :func:`redact` over a value: what it redacts against and where the memo is."""

    __slots__ = ("known", "labels", "keys", "memo", "texts", "names", "limit", "clip")

    def __init__(
        self,
        known: re.Pattern[str] | None,
        labels: dict[str, str],
        keys: bool,
        limit: int,
        clip: Callable[[str], str] | None,
    ):
        self.known, self.labels, self.keys = known, labels, keys
        self.memo = _memo_for(labels)
        self.texts = self.memo.values if keys else self.memo.structure
        self.names = self.memo.names
        self.limit, self.clip = limit, clip

    def clean(self, text: Clean) -> str:
        """A :class:`Clean` text as a plain one, clipped."""
        out = str.__str__(text)
        if len(out) > self.limit and self.clip is not None:
            out = self.clip(out)
        return out

    def text(self, text: str) -> str:
        """``text`` redacted (remembered) and clipped."""
        out = self.texts.get(text)
        if out is None:
            out = self.scan(text)
        if len(out) > self.limit and self.clip is not None:
            out = self.clip(out)
        return out

    def scan(self, text: str) -> str:
        """``text`` redacted, through the memo (a miss is remembered)."""
        memo = self.memo
        if len(text) > _MEMO_CHARS:
            key = (text, self.keys)
            out = memo.long.get(key)
            if out is None:
                out = _scan(text, self.known, self.labels, self.keys)
                if len(memo.long) >= _LONG_TEXTS or memo.long_chars + len(text) > _LONG_CHARS:
                    memo.long.clear()
                    memo.long_chars = 0
                memo.long[key] = out
                memo.long_chars += len(text)
            return out
        out = _scan(text, self.known, self.labels, self.keys)
        if len(self.texts) >= _MEMO_SIZE:
            self.texts.clear()
        self.texts[text] = out
        return out

    def name(self, key: Any) -> tuple[str, bool]:
        """A mapping's key redacted (structure: a random-looking name is not taken for a secret, a
        token of a known format still is), and whether it names a secret."""
        text = key if isinstance(key, str) else str(key)
        if len(text) > _MEMO_CHARS:
            name = _scan(text, self.known, self.labels, False, name=True)
            return name, is_secret_name(name)
        entry = self.names.get(text)
        if entry is None:
            name = _scan(text, self.known, self.labels, False, name=True)
            entry = (name, is_secret_name(name))
            if len(self.names) >= _MEMO_SIZE:
                self.names.clear()
            self.names[text] = entry
        return entry

    def walk(self, value: Any, depth: int) -> Any:
        """``value`` redacted: the common types first, checked by exact type (cheaper than isinstance)."""
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind in _SCALARS:
            return value
        if kind is Clean:
            return self.clean(value)
        if kind is dict:
            return self.mapping(value, depth)
        if kind is list:
            return self.sequence(value, depth)
        return self.other(value, depth)

    def mapping(self, value: Mapping[Any, Any], depth: int) -> Any:
        if depth >= _MAX_DEPTH:
            return "[nested too deep]"
        names, texts, keys, limit = self.names, self.texts, self.keys, self.limit
        out: dict[str, Any] = {}
        for key, item in value.items():
            entry = names.get(key) if type(key) is str else None  # other keys are named by their str()
            name, secret = entry if entry is not None else self.name(key)
            if secret and keys and item is not None and item != "":
                out[name] = REDACTED
                continue
            kind = type(item)
            if kind is str:
                text = texts.get(item)
                out[name] = self.text(item) if text is None or len(text) > limit else text
            elif kind in _SCALARS:
                out[name] = item
            else:
                out[name] = self.walk(item, depth + 1)
        return out

    def sequence(self, value: Any, depth: int) -> Any:
        if depth >= _MAX_DEPTH:
            return "[nested too deep]"
        texts, limit = self.texts, self.limit
        out: list[Any] = []
        for item in value:
            kind = type(item)
            if kind is str:
                text = texts.get(item)
                out.append(self.text(item) if text is None or len(text) > limit else text)
            elif kind in _SCALARS:
                out.append(item)
            else:
                out.append(self.walk(item, depth + 1))
        return out

    def other(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):  # a str subclass
            return self.text(value)
        if value is None or isinstance(value, (bool, int, float)):
            return value
        if depth >= _MAX_DEPTH:
            return "[nested too deep]"
        if isinstance(value, Mapping):
            return self.mapping(value, depth)
        if isinstance(value, (list, tuple, set, frozenset)):
            return self.sequence(value, depth)
        if isinstance(value, (bytes, bytearray)):
            return self.text(bytes(value).decode("utf-8", "replace"))
        return self.text(str(value))


def _scan(text: str, known: re.Pattern[str] | None, labels: dict[str, str], keys: bool, name: bool = False) -> str:
    if known is not None:
        text = known.sub(lambda m: labels[m.group(0)], text)
    if "earer" in text or "EARER" in text or "asic" in text or "ASIC" in text:
        text = _AUTH_SCHEME.sub(_credential, text)
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}{m.group(2)}", text)
    if keys and ("=" in text or ":" in text):
        lower = text.lower()
        if any(word in lower for word in _KEY_WORDS):
            text = _all_key_values(text, lower)
    # by content last (known formats, entropy, encodings; prose names a secret as a key name does,
    # so not with keys=False): what the passes above replaced is a label, no longer a candidate
    # entropy not for a name: a mapping's key, or in a structural document (keys=False) a value that is
    # one bare word (a schema names its properties in values too: ``required``); inside longer text
    # (source code, a description) it applies. Known formats and the environment's secrets always.
    entropy = not name and (keys or any(c.isspace() for c in text))
    found = find_secrets(text, _holds(known) if known is not None else None, prose=keys, entropy=entropy)
    return replace_spans(text, found)


def _holds(known: re.Pattern[str]) -> Callable[[str], bool]:
    """Whether a decoded text holds a secret of ``known``."""
    return lambda decoded: known.search(decoded) is not None


def redact(value: Any, *, keys: bool = True, clip: Callable[[str], str] | None = None, limit: int = 0) -> Any:
    """A copy of ``value`` with secrets replaced, made only of JSON types (dict, list, str, int,
    float, bool, None; tuples become lists, other objects their ``str``), ready for ``json.dumps``.

    ``keys=False`` redacts by value only: for documents whose key names are structure, not data
    (a tool manifest's parameter schemas name an ``api_key`` parameter without holding one).
    ``clip``: called in the same walk with every redacted text (not a mapping's key) longer than
    ``limit`` characters; what it returns takes the text's place (an event's long fields, clipped).
    """
    known, labels = _known.pattern()
    return _Walker(known, labels, keys, limit if clip is not None else sys.maxsize, clip).walk(value, 0)
