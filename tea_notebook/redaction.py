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
import threading
from typing import Any, Callable, Mapping
from urllib.parse import quote, quote_plus

from tea_notebook.secret_detection import LABEL, encoded_forms, find_secrets, replace_spans

__all__ = ["REDACTED", "is_secret_name", "redact"]

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


def _key_values(text: str, pattern: re.Pattern[str]) -> str:
    out: list[str] = []
    done = 0
    for match in pattern.finditer(text):
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
_memo: dict[tuple[str, bool, bool], tuple[dict[str, str], str]] = {}


def _text(text: str, known: re.Pattern[str] | None, labels: dict[str, str], keys: bool, name: bool = False) -> str:
    """``text`` redacted; ``name``: it is a mapping's key (structure: a random-looking name is not taken
    for a secret, a token of a known format still is)."""
    if len(text) > _MEMO_CHARS:
        return _scan(text, known, labels, keys, name)
    # an entry holds the labels it was made with: a secret exported since then misses the memo
    hit = _memo.get((text, keys, name))
    if hit is not None and hit[0] is labels:
        return hit[1]
    out = _scan(text, known, labels, keys, name)
    if len(_memo) >= _MEMO_SIZE:
        _memo.clear()
    _memo[(text, keys, name)] = (labels, out)
    return out


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
            for pattern in _KEY_VALUE:
                text = _key_values(text, pattern)
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


def _walk(value: Any, known: re.Pattern[str] | None, labels: dict[str, str], keys: bool, depth: int) -> Any:
    if isinstance(value, str):
        return _text(value, known, labels, keys)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if depth >= _MAX_DEPTH:
        return "[nested too deep]"
    if type(value) is list:  # the common case first: an ABC check (Mapping) costs more than the walk
        return [_walk(item, known, labels, keys, depth + 1) for item in value]
    if isinstance(value, dict) or isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = _text(key if isinstance(key, str) else str(key), known, labels, False, name=True)
            if keys and is_secret_name(name) and item is not None and item != "":
                out[name] = REDACTED
            else:
                out[name] = _walk(item, known, labels, keys, depth + 1)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_walk(item, known, labels, keys, depth + 1) for item in value]
    if isinstance(value, (bytes, bytearray)):
        return _text(bytes(value).decode("utf-8", "replace"), known, labels, keys)
    return _text(str(value), known, labels, keys)


def redact(value: Any, *, keys: bool = True) -> Any:
    """A copy of ``value`` with secrets replaced, made only of JSON types (dict, list, str, int,
    float, bool, None; tuples become lists, other objects their ``str``), ready for ``json.dumps``.

    ``keys=False`` redacts by value only: for documents whose key names are structure, not data
    (a tool manifest's parameter schemas name an ``api_key`` parameter without holding one).
    """
    known, labels = _known.pattern()
    return _walk(value, known, labels, keys, 0)
