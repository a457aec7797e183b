"""One normal form for every host name, before any egress rule looks at it.

A resolver folds many spellings into one name: ``e\\u00advil.test`` (a soft hyphen), ``evil\\u3002test``
(an ideographic full stop) and ``\\uff45\\uff56\\uff49\\uff4c.test`` (full-width letters) all resolve as
``evil.test``. A rule that compared the raw text would let each of them past ``deny evil.test``. So
every host is put in one form first — UTS #46 (IDNA compatibility processing, non-transitional, with
the STD3 rules), then ASCII (A-labels, ``xn--…``) — and the rules, the resolver and the connection
all see that form.

A name is **refused** when the mapping would change it beyond letter case and one trailing dot
(soft hyphens, zero-width characters, other full stops, full-width or other compatibility letters,
decomposed accents), and when it is not a valid name at all. ``ß`` and ``ς`` stay themselves
(UTS #46 no longer maps them: ``faß.de`` is ``xn--fa-hia.de``, not ``fass.de``); the resolver is
given the A-label, so it cannot read them another way. Plain ASCII names are checked without the
``idna`` package; it is imported only for names that need it.
"""

from __future__ import annotations

import ipaddress
import re

#: the longest host name a resolver takes (RFC 1035), in ASCII
MAX_NAME = 253
_ASCII_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


class HostFormError(ValueError):
    """A host name that has no single normal form (or changes under it); the message says why."""


def normal_host(host: str) -> str:
    """``host`` in its normal form: an address literal as the address (``"::1"``), a name in lower-case
    ASCII with A-labels and no trailing dot. :class:`HostFormError` when the name is refused."""
    text = str(host).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    name = text[:-1] if text.endswith(".") else text
    if not name:
        raise HostFormError(f"{host!r} is not a host name")
    if name.isascii():
        return _ascii_name(name, host)
    return _international_name(name, host)


def _ascii_name(name: str, original: str) -> str:
    lowered = name.lower()
    if len(lowered) > MAX_NAME:
        raise HostFormError(f"{original!r} is longer than {MAX_NAME} characters")
    for label in lowered.split("."):
        if not _ASCII_LABEL.fullmatch(label):
            raise HostFormError(
                f"{original!r} is not a host name (each dot-separated label: 1 to 63 letters, digits, "
                "hyphens or underscores, not starting or ending with a hyphen)"
            )
        if label.startswith("xn--"):
            _check_a_label(label, original)
    return lowered


def _check_a_label(label: str, original: str) -> None:
    import idna

    try:
        unicode = idna.decode(label)
        again = idna.encode(unicode, uts46=True, std3_rules=True).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise HostFormError(f"{original!r}: {label!r} is not a valid A-label ({exc})") from None
    if again != label:
        raise HostFormError(f"{original!r}: the A-label {label!r} is not in its normal form ({again!r})")


def _international_name(name: str, original: str) -> str:
    if len(name) > MAX_NAME:  # before any Unicode work: a long input costs time, and no long one is valid
        raise HostFormError(f"{original!r} is longer than {MAX_NAME} characters")
    import idna

    try:
        mapped = idna.uts46_remap(name, std3_rules=True)
        ascii_name = idna.encode(mapped, std3_rules=True).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise HostFormError(f"{original!r} is not a valid international host name ({exc})") from None
    if mapped != name.lower():
        raise HostFormError(
            f"{original!r} changes under IDNA normalization (to {mapped!r}): soft hyphens, zero-width "
            "characters, other full stops, full-width or compatibility letters are refused; write "
            f"{ascii_name!r}"
        )
    if len(ascii_name) > MAX_NAME:
        raise HostFormError(f"{original!r} is longer than {MAX_NAME} characters in ASCII")
    return ascii_name
