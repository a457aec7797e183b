"""Secrets found by their content: known token formats, high-entropy tokens, secrets said in prose
and encodings of secrets.

:func:`find_secrets` returns the spans of a text that hold a secret, each with the detector that
found it; :func:`redact_content` replaces them. :mod:`tea_notebook.redaction` runs this after its
own checks (secrets known from the environment, secret key names), so everything it redacts —
events, stored contexts, blobs, exports — is scanned here too. The detectors:

- **formats** (:data:`FORMATS`): AWS access keys (and a 40-character secret key near one), GitHub
  ``ghp_ / gho_ / ghu_ / ghs_ / ghr_ / github_pat_``, GitLab, Slack ``xox?-`` tokens and webhook
  URLs, OpenAI / Anthropic-style ``sk-…``, Google API keys, OAuth client secrets and access tokens,
  Stripe ``sk_ / rk_ / whsec_``, Hugging Face, npm, PyPI, SendGrid, JWTs, PEM private-key blocks;
- **entropy**: a token-like run (20 to 512 characters of letters, digits and ``+ / _ -``) with
  upper case, lower case and digits, not made mostly of words, whose Shannon entropy reaches the
  floor for its length (:data:`ENTROPY_FLOOR`, near the 1st percentile of random alphanumeric
  strings: about 95 % of random 20-character tokens are caught, 97 % from 32 characters, 99 % from
  64); hex-only runs (digests, ids, UUIDs) are never taken for secrets by entropy;
- **prose**: ``the vault pass phrase is X``, ``password: X``, ``my API key was X`` — a secret noun,
  a verb or separator, and a value that looks like a secret (quoted, or with a digit, a symbol,
  inner capitals or three joined words); ``the password is required`` is prose;
- **encoded**: a base64 or hex run whose decoded text holds a secret of a known format (a secret
  known from the environment is matched in its base64, hex and URL-encoded forms by
  :func:`encoded_forms`, which the redaction adds to the values it looks for).

Limits: a secret of no known format that is all lower case, all digits or hex, shorter than 20
characters, or a single plain word in prose ("the password is swordfish"), is not found by content.
This module imports nothing from the package.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter
from typing import Callable, NamedTuple

__all__ = [
    "ENTROPY_FLOOR",
    "FORMATS",
    "LABEL",
    "Finding",
    "encoded_forms",
    "entropy",
    "find_formats",
    "find_secrets",
    "redact_content",
    "replace_spans",
]

LABEL = "[secret redacted]"

#: each known format: (name, pattern). The formats of :data:`TOKEN_FORMATS` are single tokens (letters,
#: digits, ``_ - + /``), looked for only inside the token-like runs of a text; the others (with dots,
#: spaces or new lines) only when the text holds their hint (:data:`SPREAD_FORMATS`).
TOKEN_FORMATS: tuple[tuple[str, str], ...] = (
    ("aws_access_key", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    ("github_token", r"\bgh[pousr]_[A-Za-z0-9]{20,255}\b"),
    ("github_pat", r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b"),
    ("gitlab_token", r"\bglpat-[A-Za-z0-9_\-]{20,}"),
    ("slack_token", r"\bxox[abposre]-[A-Za-z0-9\-]{10,}"),
    ("anthropic_key", r"\bsk-ant-[a-z]{3,8}\d{2}-[A-Za-z0-9_\-]{20,}"),
    ("openai_style_key", r"\bsk-[A-Za-z0-9_\-]{16,}"),
    ("stripe_key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("stripe_webhook_secret", r"\bwhsec_[A-Za-z0-9+/]{24,}"),
    ("google_api_key", r"\bAIza[0-9A-Za-z_\-]{35}"),
    ("google_oauth_secret", r"\bGOCSPX-[A-Za-z0-9_\-]{20,}"),
    ("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}"),
    ("npm_token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("pypi_token", r"\bpypi-AgE[A-Za-z0-9_\-]{40,}"),
)
#: formats spread over more than one run, each with the hint the text must hold first
SPREAD_FORMATS: tuple[tuple[str, str, str], ...] = (
    ("jwt", "eyJ", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    (
        "private_key",
        "PRIVATE KEY",
        r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    ),
    (
        "slack_webhook",
        "hooks.slack.com",
        r"https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+",
    ),
    ("google_access_token", "ya29.", r"\bya29\.[0-9A-Za-z_\-]{20,}"),
    ("sendgrid_key", "SG.", r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"),
)
FORMATS: tuple[tuple[str, str], ...] = TOKEN_FORMATS + tuple((name, pattern) for name, _, pattern in SPREAD_FORMATS)
"""Every known format: (name, pattern)."""

# what a run must contain for a token format to be looked for in it
_TOKEN_HINTS = (
    "AKIA",
    "ASIA",
    "ABIA",
    "ACCA",
    "gh",
    "glpat-",
    "xox",
    "sk",
    "rk_",
    "whsec_",
    "AIza",
    "GOCSPX-",
    "hf_",
    "npm_",
    "pypi-",
)
_TOKEN_RE = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in TOKEN_FORMATS))
_SPREAD = tuple((name, hint, re.compile(pattern, re.S)) for name, hint, pattern in SPREAD_FORMATS)
# an AWS secret access key: 40 characters of base64 standing alone, near an access key
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_AWS_NEAR = 160  # characters either side of an access key searched for its secret

# token-like runs are found without a regex: the text as one byte a character (latin-1, anything
# else as "?"), token characters mapped to "a" and every other byte to " ", then str.find — several
# times faster than a character-class regex over the whole text
_RUN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-"
_FLAT = bytes(ord("a") if chr(b) in _RUN_CHARS else ord(" ") for b in range(256))
_MIN_RUN = 15  # the shortest token format (xoxb-… , sk-…); entropy needs 20
_RUN_NEEDLE = b"a" * _MIN_RUN
_MIN_ENTROPY_RUN = 20
_MAX_RUN = 512  # longer runs are data (images, archives), not tokens
_MIN_TEXT = 12  # shorter texts hold no format (15 characters at least) nor a noun, glue and a 6-character value
_HEX = re.compile(r"[0-9a-fA-F\-]+")
_WORDY = re.compile(r"[a-z]{4,}|[A-Z]{4,}")
_DIGIT, _UPPER, _LOWER = re.compile(r"[0-9]"), re.compile(r"[A-Z]"), re.compile(r"[a-z]")
#: the entropy (bits per character) a run of at least this length must reach, by length: about the
#: 1st percentile of random alphanumeric strings with all three character classes (measured on
#: 3,000 random strings a length, see the tests)
ENTROPY_FLOOR: tuple[tuple[int, float], ...] = (
    (20, 3.70),
    (24, 3.90),
    (28, 4.08),
    (32, 4.23),
    (40, 4.47),
    (48, 4.65),
    (64, 4.90),
    (96, 5.20),
    (128, 5.38),
)
_MAX_WORDY = 0.5  # runs with this share of characters in 4-letter same-case stretches are words

# prose: a secret noun, then "is / was / :" …, then the value. The nouns are found by the words
# below (str.find on the lower-cased text), then the pattern is matched where the noun starts.
_ANCHORS = ("pass", "secret", "token", "credential", "key")
_KEY_QUALIFIERS = ("api", "secret", "access", "private", "license", "encryption", "signing")
_PROSE = re.compile(
    r"(?i:pass[ \t]?phrase|pass[ \t]?word|passwd|passcode|secret(?:[ \t_\-]?key)?|token|credentials?|key)"
    r"(?P<glue>[ \t]*+(?:[:=]|->)[ \t]*+"
    r"|[ \t]++(?i:is|was|are|were|will[ \t]be|is[ \t]set[ \t]to|set[ \t]to|reads|equals)[ \t]++)"
    r"(?P<value>\"[^\"\n]{4,200}\"|'[^'\n]{4,200}'|`[^`\n]{4,200}`|“[^”\n]{4,200}”|[^\s\"'`,;()\[\]{}<>]{6,200})"
)
_TRAILING = ".,;:!?)"
_MAX_PROSE = 64  # longer values said in prose are not passwords (a key of a known format is found as one)
# words that follow "the password is" in prose; a value is also prose when it ends like an
# adjective or participle (-ed, -ing, -able …)
_PROSE_WORDS = frozenset(
    "required optional missing invalid incorrect correct wrong empty unset stored hidden redacted saved "
    "needed changed expired secure insecure strong weak long short unknown different same shown given "
    "sent used reset revoked rotated encrypted hashed valid none null undefined true false below above "
    "here there inside visible available unavailable".split()
)
_PROSE_SUFFIXES = ("ed", "ing", "able", "ible", "ive", "ly", "ous", "ful", "less", "ent", "ant", "ion")
_SYMBOLS = frozenset("!@#$%^&*+=?|\\")
_CAMEL = re.compile(r"(?:[A-Z]?[a-z]++)++|[A-Z]++[a-z]*+")
_DOTTED = re.compile(r"[A-Za-z_]\w*+(?:\.[A-Za-z_]\w*+)++")


class Finding(NamedTuple):
    """One secret found in a text: ``text[start:end]``, found by ``detector`` (a format's name,
    ``"entropy"``, ``"prose"``, ``"base64"``, ``"hex"`` or ``"aws_secret_key"``)."""

    start: int
    end: int
    detector: str


def _floor(length: int) -> float:
    floor = ENTROPY_FLOOR[0][1]
    for at, bits in ENTROPY_FLOOR:
        if length < at:
            break
        floor = bits
    return floor


def entropy(text: str) -> float:
    """Shannon entropy of ``text`` in bits per character."""
    n = len(text)
    return -sum(k / n * math.log2(k / n) for k in Counter(text).values())


def _random_looking(run: str) -> bool:
    """A run of token characters that is a random token, not an identifier, path or name."""
    if _HEX.fullmatch(run):
        return False
    if not (_DIGIT.search(run) and _UPPER.search(run) and _LOWER.search(run)):
        return False
    if sum(len(w) for w in _WORDY.findall(run)) >= _MAX_WORDY * len(run):
        return False
    return entropy(run) >= _floor(len(run))


def _decoded(run: str) -> tuple[str, str] | None:
    """The text a base64 or hex run encodes, with the encoding's name, when it is printable text."""
    body = run.rstrip("=")
    try:
        if len(run) >= 32 and len(run) % 2 == 0 and _HEX.fullmatch(run) and "-" not in run:
            raw, kind = binascii.unhexlify(run), "hex"
        elif len(body) >= 24:
            urlsafe = "-" in body or "_" in body
            if urlsafe and ("+" in body or "/" in body):
                return None
            padded = body + "=" * (-len(body) % 4)
            raw = base64.b64decode(padded, altchars=b"-_" if urlsafe else None, validate=True)
            kind = "base64"
        else:
            return None
        text = raw.decode("utf-8")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    if not all(c.isprintable() or c in "\n\r\t" for c in text):
        return None
    return text, kind


def _prose_value(value: str) -> bool:
    """Whether what follows "the password is" looks like a secret rather than a word of the sentence."""
    if value[0] in "\"'`“":
        inner = value[1:-1].strip()
        if len(inner.split()) >= 3:  # a pass phrase of words: "correct horse battery staple"
            return len(inner) <= _MAX_PROSE and not inner.startswith("[")
        return " " not in inner and _prose_value(inner)
    word = value.rstrip(_TRAILING)
    if len(word) < 6 or len(word) > _MAX_PROSE or word.lower() in _PROSE_WORDS:
        return False
    if word.startswith(("[", "/", "~", "./", "http://", "https://")) or not any(c.isalnum() for c in word):
        return False
    if _DOTTED.fullmatch(word):  # a name in code (base64.b64encode, self.token_v2)
        return False
    if word.isalpha() and word.lower().endswith(_PROSE_SUFFIXES):
        return False
    if any(c.isdigit() or c in _SYMBOLS for c in word):
        return True
    if word.isalpha():
        return not _CAMEL.fullmatch(word)  # irregular capitals ("hUnTeR"), not a CamelCase name
    # three or more joined words: correct-horse-battery-staple
    return len([p for p in re.split(r"[\-_.]", word) if p]) >= 3


def _runs(text: str) -> list[tuple[int, int]]:
    """The spans of ``text``'s token-like runs of at least :data:`_MIN_RUN` characters."""
    flat = text.encode("latin-1", "replace").translate(_FLAT)
    out: list[tuple[int, int]] = []
    pos = flat.find(_RUN_NEEDLE)
    while pos != -1:
        end = flat.find(b" ", pos + _MIN_RUN)
        if end == -1:
            end = len(flat)
        if pos and text[pos - 1] == "\\":  # an escape in JSON text ("\nAbc…"): the run starts after it
            pos += 1
        out.append((pos, end))
        pos = flat.find(_RUN_NEEDLE, end)
    return out


def _token_findings(
    text: str, runs: list[tuple[int, int]], known: Callable[[str], bool] | None, entropy: bool = True
) -> list[Finding]:
    found: list[Finding] = []
    for start, end in runs:
        run = text[start:end]
        if any(hint in run for hint in _TOKEN_HINTS):
            hits = list(_TOKEN_RE.finditer(text, start, end))
            for match in hits:
                kind = match.lastgroup or "format"
                found.append(Finding(match.start(), match.end(), kind))
                if kind == "aws_access_key":
                    lo, hi = max(0, match.start() - _AWS_NEAR), min(match.end() + _AWS_NEAR, len(text))
                    found += (Finding(m.start(), m.end(), "aws_secret_key") for m in _AWS_SECRET.finditer(text, lo, hi))
            if hits:
                continue
        if not _MIN_ENTROPY_RUN <= end - start <= _MAX_RUN:
            continue
        padded = end
        while padded < len(text) and padded - end < 2 and text[padded] == "=":
            padded += 1
        if entropy and _random_looking(run):
            found.append(Finding(start, padded, "entropy"))
            continue
        decoded = _decoded(text[start:padded])
        if decoded is not None:
            inner, kind = decoded
            if find_formats(inner) or (known is not None and known(inner)):
                found.append(Finding(start, padded, kind))
    return found


def _spread_findings(text: str) -> list[Finding]:
    found: list[Finding] = []
    for name, hint, pattern in _SPREAD:
        if hint in text:
            found += (Finding(m.start(), m.end(), name) for m in pattern.finditer(text))
    return found


def _prose_findings(text: str) -> list[Finding]:
    lower = text.lower()
    if len(lower) != len(text):  # a character whose lower case is longer: no finding is lost by
        lower = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)  # keeping it as it is
    found: list[Finding] = []
    for anchor in _ANCHORS:
        pos = lower.find(anchor)
        while pos != -1:
            start = pos
            if anchor == "key":  # only a named kind of key: "api key", "secret_key", "access-key"
                before = lower[max(0, pos - 12) : pos].rstrip(" \t_-")
                word = before.rsplit(None, 1)[-1] if before.strip() else ""
                word = re.split(r"[^a-z]", word)[-1]
                if word not in _KEY_QUALIFIERS:
                    pos = lower.find(anchor, pos + 3)
                    continue
            if start and (lower[start - 1].isalnum() or lower[start - 1] == "_") and anchor != "key":
                pos = lower.find(anchor, pos + len(anchor))
                continue
            match = _PROSE.match(text, start)
            if (
                match is not None
                and text[match.end() : match.end() + 1] not in ("(", "[")
                and _prose_value(match.group("value"))
            ):
                value = match.group("value")
                begin, end = match.start("value"), match.end("value")
                if value[0] in "\"'`“":
                    begin, end = begin + 1, end - 1  # the quotes stay
                else:
                    end -= len(value) - len(value.rstrip(_TRAILING))
                found.append(Finding(begin, end, "prose"))
            pos = lower.find(anchor, pos + len(anchor))
    return found


def find_formats(text: str) -> list[Finding]:
    """The secrets of a known format in ``text`` (:data:`FORMATS`, and an AWS secret key near an
    access key), in order."""
    found = [f for f in _token_findings(text, _runs(text), None) if f.detector not in ("entropy", "base64", "hex")]
    return _merged(found + _spread_findings(text))


def find_secrets(
    text: str, known: Callable[[str], bool] | None = None, *, prose: bool = True, entropy: bool = True
) -> list[Finding]:
    """The secrets in ``text``, by content, in order and not overlapping: known formats, secrets
    said in prose, high-entropy tokens and encoded secrets. ``known(decoded)`` says whether the
    text a base64 or hex run decodes to holds a secret known otherwise (the environment's);
    ``prose=False`` leaves secrets said in prose out; ``entropy=False`` leaves random-looking tokens
    of no known format alone (a name: a mapping's key, a schema's property)."""
    if len(text) < _MIN_TEXT:
        return []
    found = _token_findings(text, _runs(text), known, entropy) + _spread_findings(text)
    if prose:
        found += _prose_findings(text)
    return _merged(found)


def _merged(found: list[Finding]) -> list[Finding]:
    if len(found) < 2:
        return found
    found.sort()
    out = [found[0]]
    for f in found[1:]:
        last = out[-1]
        if f.start < last.end:  # overlapping: one span, named by the first
            if f.end > last.end:
                out[-1] = Finding(last.start, f.end, last.detector)
        else:
            out.append(f)
    return out


def redact_content(
    text: str, known: Callable[[str], bool] | None = None, label: str = LABEL, *, prose: bool = True
) -> str:
    """``text`` with every secret :func:`find_secrets` finds replaced by ``label`` (the options as there)."""
    return replace_spans(text, find_secrets(text, known, prose=prose), label)


def replace_spans(text: str, found: list[Finding], label: str = LABEL) -> str:
    """``text`` with each finding's span replaced by ``label``."""
    if not found:
        return text
    out: list[str] = []
    done = 0
    for f in found:
        out += [text[done : f.start], label]
        done = f.end
    out.append(text[done:])
    return "".join(out)


def encoded_forms(value: str) -> set[str]:
    """How ``value`` reads once base64- or hex-encoded, alone or inside a longer encoded text: the
    standard and URL-safe base64 of it at each of the three byte alignments (the characters that
    depend only on its own bytes), and its lower- and upper-case hex."""
    data = value.encode("utf-8")
    forms: set[str] = set()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + data).decode()
        # drop the characters that mix in the bytes before it (the shift) and after it (the tail)
        head = (shift * 8 + 5) // 6
        tail_bits = (shift + len(data)) * 8
        tail = tail_bits // 6  # characters made only of bits up to the end of the value
        core = encoded[head:tail]
        if len(core) >= 8:
            forms.add(core)
            forms.add(core.replace("+", "-").replace("/", "_"))
    forms.add(data.hex())
    forms.add(data.hex().upper())
    return forms
