"""The egress policy: which network destinations a model-chosen action may reach.

Every network action a model chooses — a browser navigation and the requests its pages make, the
page reader and each redirect hop, sandboxed code and generated tools with ``network=True`` — is
checked here, by one :class:`EgressPolicy` per workspace (``ws.egress``).

The rules, in order:

1. only ``http`` and ``https`` (``scheme``);
2. the host is put in its one normal form (:func:`~tea_notebook.egress.names.normal_host`: UTS #46,
   A-labels, lower case, no trailing dot); a name that would change under it beyond case — a soft
   hyphen, an ideographic full stop, full-width letters … — is refused (``host-form``), so every rule
   below compares the name the resolver would look up;
3. a host or address on the deny list is refused (``deny:PATTERN``; deny always wins);
4. with ``only_allowed`` on, a name that matches no allow entry is refused (``not-allowed``) **before
   any lookup** — a lookup is a message to whoever serves the name — unless an allow entry is an
   address or a network, which only the addresses can match;
5. the host is resolved once, and every address it resolves to is checked: loopback, link-local
   (cloud metadata at 169.254.169.254 included), private, shared (CGNAT), multicast, unspecified and
   reserved addresses are refused (``loopback``, ``private`` …) unless an allow entry names the host
   (or the address) **and** the port — a wildcard or a port-less entry never opens a local address;
6. with ``only_allowed`` on, a host whose addresses match no allow entry either is refused (``not-allowed``).

What is shown is what is enforced is what is stored: :attr:`EgressPolicy.allowed` and
:attr:`~EgressPolicy.denied` are read-only views, and every change (:meth:`~EgressPolicy.allow`,
:meth:`~EgressPolicy.deny`, :meth:`~EgressPolicy.remove`, ``only_allowed = …``) is stored at once through
``on_change`` — or, when storing fails, not made at all.

A :class:`Decision` carries the addresses that were checked: callers connect to one of those and
never resolve the name again, so a name that answers a public address to the check and a loopback
address to the connection (DNS rebinding) reaches nothing it was not allowed to.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, NoReturn
from urllib.parse import urlsplit

from tea_notebook.egress.names import HostFormError, normal_host
from tea_notebook.errors import TeaError

SCHEMES = {"http": 80, "https": 443}
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
#: the rule that refuses each kind of address :func:`address_kind` names
RULES = {
    "unspecified": "unspecified",
    "loopback": "loopback",
    "link-local": "link-local",
    "multicast": "multicast",
    "shared (CGNAT)": "cgnat",
    "private": "private",
    "reserved": "reserved",
    "not globally routable": "non-global",
}


class EgressRefused(TeaError):
    """A network destination the workspace's egress policy refuses; ``.decision`` says which rule."""

    def __init__(self, decision: "Decision"):
        self.decision = decision
        super().__init__(decision.reason)


@dataclass(frozen=True)
class Decision:
    """The policy's answer for one destination.

    ``addresses`` are the resolved addresses that were checked: connect to one of these, never to a
    fresh resolution of ``host``. ``rule`` names the rule that decided (``"allow:localhost:8000"``,
    ``"loopback"``, ``"deny:*.evil.com"``, ``"scheme"`` …); ``why`` says it in words, and ``reason``
    is the sentence for the model (URL, why, rule).
    """

    allowed: bool
    url: str
    host: str
    port: int
    addresses: tuple[str, ...] = ()
    rule: str = ""
    why: str = ""

    @property
    def reason(self) -> str:
        """One sentence: the URL, why, and the rule (``"http://…: … (egress rule 'loopback')"``)."""
        return f"{self.url}: {self.why} (egress rule {self.rule!r})"

    def for_url(self, url: str) -> "Decision":
        """The same decision, about ``url`` (a connection's check made for a request's URL)."""
        return replace(self, url=url)

    def as_event(self) -> dict[str, Any]:
        """The event data of a refusal (``egress_refused``)."""
        return {"url": self.url, "host": self.host, "port": self.port, "rule": self.rule, "reason": self.reason}


def address_kind(address: str) -> str | None:
    """Why an address is not a public one (``"loopback"``, ``"private"`` …), or None when it is public."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if inner is None and ip in _NAT64:
            inner = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if inner is not None:
            return address_kind(str(inner))
    for kind, test in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("shared (CGNAT)", isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
    ):
        if test:
            return kind
    return None if ip.is_global else "not globally routable"


@dataclass(frozen=True)
class Pattern:
    """One allow or deny entry: ``example.com``, ``*.example.com``, ``10.0.0.0/8``, each with an
    optional ``:port`` (``[::1]:8000`` for an IPv6 address)."""

    text: str
    host: str  # lower case, no brackets; "*.x" for a wildcard; "" when a network is given
    port: int | None
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None

    @classmethod
    def parse(cls, text: str) -> "Pattern":
        """The entry ``text`` means; :class:`ValueError` naming what is wrong when it means none
        (a host name is put in its normal form, and refused when that would change it)."""
        raw = text.strip().lower()
        if not raw or any(c.isspace() for c in raw) or "://" in raw:
            raise ValueError(f"{text!r} is not a host pattern (host, *.domain, address, network, with :port)")
        if _is_network(raw):  # an address or network without a port, IPv6 included
            return cls(text.strip(), "", None, ipaddress.ip_network(raw, strict=False))
        host, port = raw, None
        if raw.startswith("["):
            end = raw.find("]")
            if end < 0:
                raise ValueError(f"{text!r}: an IPv6 address in brackets needs its closing ]")
            host, rest = raw[1:end], raw[end + 1 :]
            port = _port(rest[1:], text) if rest.startswith(":") else None
            if rest and not rest.startswith(":"):
                raise ValueError(f"{text!r}: unexpected {rest!r} after the address")
        elif raw.count(":") == 1:
            host, _, port_text = raw.partition(":")
            port = _port(port_text, text)
        if _is_network(host):
            return cls(text.strip(), "", port, ipaddress.ip_network(host, strict=False))
        wildcard = host.startswith("*.")
        label = host[2:] if wildcard else host
        if not label or "*" in label or label.endswith("."):
            raise ValueError(f"{text!r} is not a host pattern (host, *.domain, address, network, with :port)")
        try:
            label = normal_host(label)
        except HostFormError as exc:
            raise ValueError(f"{text!r} is not a host pattern: {exc}") from None
        return cls(text.strip(), "*." + label if wildcard else label, port)

    @property
    def key(self) -> tuple[str, int | None, str]:
        """What the entry matches, whatever its spelling (two entries with one key are one entry)."""
        return (self.host, self.port, str(self.network or ""))

    @property
    def exact(self) -> bool:
        """Names one host (or one address) and one port: the only kind that opens a local address."""
        return (
            self.port is not None
            and not self.host.startswith("*.")
            and (self.network is None or self.network.num_addresses == 1)
        )

    def matches(self, host: str, port: int, addresses: Iterable[str] = ()) -> bool:
        """Whether this entry covers ``host:port`` (or one of the addresses it resolved to)."""
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            candidates = [host, *addresses]
            return any(_in_network(a, self.network) for a in candidates)
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host


def _is_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
        return True
    except ValueError:
        return False


def _in_network(address: str, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]) in network
    except ValueError:
        return False


def _port(text: str, whole: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{whole!r}: the port must be a number from 1 to 65535")
    return int(text)


def _resolve(host: str, port: int) -> tuple[str, ...]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    seen: dict[str, None] = {}
    for family, *_rest, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            seen.setdefault(str(sockaddr[0]), None)
    return tuple(seen)


class Entries(tuple):
    """A read-only view of one of the policy's lists (``ws.egress.allowed``, ``ws.egress.denied``).

    It compares equal to a list or tuple of the same entries. Changing it in place is an error that
    names the method to use: a list changed behind the policy's back would be shown but neither
    enforced nor stored."""

    _name: str = "allowed"

    def __new__(cls, items: Iterable[str] = (), name: str = "allowed") -> "Entries":
        view = super().__new__(cls, items)
        view._name = name
        return view

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple)):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return repr(list(self))

    def _refuse(self) -> NoReturn:
        raise TypeError(read_only_message(self._name))

    def __setitem__(self, index: object, value: object) -> NoReturn:
        self._refuse()

    def __delitem__(self, index: object) -> NoReturn:
        self._refuse()

    def __iadd__(self, other: object) -> NoReturn:  # type: ignore[misc]  # refused, never a new tuple
        self._refuse()

    def __getattr__(self, name: str) -> NoReturn:
        if name in ("append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse"):
            raise AttributeError(read_only_message(self._name, name))
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def read_only_message(name: str, method: str = "") -> str:
    """The error for a change made to ``ws.egress.<name>`` directly: which methods to use instead."""
    adds = "allow" if name == "allowed" else "deny"
    tried = f".{method}()" if method else " changed in place"
    return (
        f"ws.egress.{name} is read-only (ws.egress.{name}{tried}): use ws.egress.{adds}('host') and "
        f"ws.egress.remove('host'), which check the entry and store it at once"
    )


class EgressPolicy:
    """A workspace's network egress policy (``ws.egress``); see the module's docstring for the rules.

    ``allow`` and ``deny`` are host patterns (``"example.com"``, ``"*.example.com"``, ``"10.0.0.0/8"``,
    ``"localhost:8765"``); ``only_allowed`` turns the allow list into the only way out. Every change —
    :meth:`allow`, :meth:`deny`, :meth:`remove`, :meth:`set_only_allowed` or ``only_allowed = True`` — is
    handed to ``on_change`` at once (the workspace stores it there); when ``on_change`` fails the change
    is undone. :attr:`allowed` and :attr:`denied` are read-only. ``resolver(host, port)`` gives a name's
    addresses (the system's by default); it is called only when a rule needs the addresses.
    """

    def __init__(
        self,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        only_allowed: bool = False,
        *,
        on_change: Callable[["EgressPolicy"], None] | None = None,
        resolver: Callable[[str, int], tuple[str, ...]] | None = None,
    ):
        self._lock = threading.RLock()
        # tuples, replaced whole: a check reads a consistent list without taking the lock
        self._allow: tuple[Pattern, ...] = _unique(Pattern.parse(p) for p in allow)
        self._deny: tuple[Pattern, ...] = _unique(Pattern.parse(p) for p in deny)
        self._only_allowed = bool(only_allowed)
        self.on_change = on_change
        self.resolver = resolver or _resolve

    # -- what it holds ------------------------------------------------------------------------------
    @property
    def allowed(self) -> Entries:
        """The allow entries as given (read-only: change them with :meth:`allow` and :meth:`remove`)."""
        return Entries((p.text for p in self._allow), "allowed")

    @allowed.setter
    def allowed(self, _value: object) -> None:
        raise AttributeError(read_only_message("allowed"))

    @property
    def denied(self) -> Entries:
        """The deny entries as given (read-only: change them with :meth:`deny` and :meth:`remove`)."""
        return Entries((p.text for p in self._deny), "denied")

    @denied.setter
    def denied(self, _value: object) -> None:
        raise AttributeError(read_only_message("denied"))

    @property
    def only_allowed(self) -> bool:
        """Whether only hosts on the allow list are reached; setting it stores it (like :meth:`set_only_allowed`)."""
        return self._only_allowed

    @only_allowed.setter
    def only_allowed(self, on: bool) -> None:
        self.set_only_allowed(on)

    # -- changing it ------------------------------------------------------------------------------
    def allow(self, *patterns: str) -> "EgressPolicy":
        """Let these hosts through (a local address needs host **and** port: ``"127.0.0.1:8765"``).
        All or nothing: one bad pattern is a :class:`ValueError` and changes nothing."""
        new = [Pattern.parse(p) for p in patterns]
        with self._lock:
            self._update(allow=_unique([*self._allow, *new]))
        return self

    def deny(self, *patterns: str) -> "EgressPolicy":
        """Refuse these hosts, whatever the allow list says (all or nothing, like :meth:`allow`)."""
        new = [Pattern.parse(p) for p in patterns]
        with self._lock:
            self._update(deny=_unique([*self._deny, *new]))
        return self

    def remove(self, *patterns: str) -> "EgressPolicy":
        """Drop entries from either list (as written, or any spelling of the same entry); an entry on
        neither is a :class:`ValueError` and changes nothing."""
        with self._lock:
            allow, deny = list(self._allow), list(self._deny)
            for text in patterns:
                key = text.strip()
                try:
                    same = Pattern.parse(text).key
                except ValueError:
                    same = None
                found = False
                for entries in (allow, deny):
                    for pattern in list(entries):
                        if pattern.text == key or pattern.key == same:
                            entries.remove(pattern)
                            found = True
                if not found:
                    raise ValueError(f"{text!r} is on neither the allow list nor the deny list")
            self._update(allow=tuple(allow), deny=tuple(deny))
        return self

    def set_only_allowed(self, on: bool = True) -> "EgressPolicy":
        """With ``on``, only hosts on the allow list are reached (stored at once)."""
        if on not in (True, False):
            raise TypeError(f"only_allowed is True or False, not {on!r}")
        with self._lock:
            self._update(only=bool(on))
        return self

    def _update(
        self,
        allow: tuple[Pattern, ...] | None = None,
        deny: tuple[Pattern, ...] | None = None,
        only: bool | None = None,
    ) -> None:
        """Make a change and hand it to ``on_change`` (under the lock); undo it when that fails."""
        before = (self._allow, self._deny, self._only_allowed)
        if allow is not None:
            self._allow = allow
        if deny is not None:
            self._deny = deny
        if only is not None:
            self._only_allowed = only
        if (self._allow, self._deny, self._only_allowed) == before or self.on_change is None:
            return
        try:
            self.on_change(self)
        except BaseException:
            self._allow, self._deny, self._only_allowed = before
            raise

    # -- deciding -----------------------------------------------------------------------------------
    def check_url(self, url: str) -> Decision:
        """The decision for a URL (resolves its host once; blocking — use :meth:`acheck_url` in a loop)."""
        early = self.check_form(url)
        if early is not None:
            return early
        parts = urlsplit(str(url).strip())
        port = parts.port or SCHEMES[parts.scheme.lower()]
        return self.check_address(parts.hostname or "", port, url=str(url).strip())

    @staticmethod
    def check_form(url: str) -> Decision | None:
        """A refusal when ``url`` is not an http(s) URL with a host (no name is resolved), else None."""
        text = str(url).strip()
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018 - raises on a port that is not a number
            host = parts.hostname or ""
        except ValueError as exc:
            return Decision(False, text, "", 0, rule="url", why=f"not a valid URL ({exc})")
        scheme = parts.scheme.lower()
        if scheme not in SCHEMES:
            what = f"the {scheme!r} scheme" if scheme else "a URL without a scheme"
            return Decision(False, text, host, 0, rule="scheme", why=f"only http and https are reached, not {what}")
        if not host:
            return Decision(False, text, "", 0, rule="url", why="the URL has no host")
        return None

    async def acheck_url(self, url: str) -> Decision:
        """:meth:`check_url` without blocking the event loop (the resolution runs in a thread)."""
        import asyncio

        return await asyncio.to_thread(self.check_url, url)

    def check_address(self, host: str, port: int, *, url: str | None = None) -> Decision:
        """The decision for ``host:port`` (a name or an address literal). The name is put in its normal
        form first; it is looked up only when a rule needs its addresses."""
        allow, deny, only = self._allow, self._deny, self._only_allowed
        raw = str(host).strip()
        if not raw.strip("[]."):
            return Decision(False, url or f"{raw}:{port}", "", port, (), "url", "no host")
        try:
            host = normal_host(raw)
        except HostFormError as exc:
            return Decision(False, url or f"{raw}:{port}", raw, port, (), "host-form", str(exc))
        url = url or _hostport(host, port)

        def refused(rule: str, reason: str, addresses: tuple[str, ...] = ()) -> Decision:
            return Decision(False, url, host, port, addresses, rule, reason)

        for pattern in deny:
            if pattern.network is None and pattern.matches(host, port):
                return refused(f"deny:{pattern.text}", "the host is on the workspace's deny list")
        try:
            addresses: tuple[str, ...] = (str(ipaddress.ip_address(host)),)
        except ValueError:
            # decided by name when no allow entry needs the addresses: a lookup is itself a message out
            if only and not any(p.matches(host, port) if p.network is None else p.port in (None, port) for p in allow):
                return refused("not-allowed", "the host is not on the workspace's allow list (it was not looked up)")
            try:
                addresses = self.resolver(host, port)
            except (OSError, UnicodeError) as exc:
                return refused("dns", f"the host name could not be resolved ({exc})")
            if not addresses:
                return refused("dns", "the host name resolved to no address")
        for pattern in deny:
            if pattern.network is not None and pattern.matches(host, port, addresses):
                return refused(f"deny:{pattern.text}", "the address is on the workspace's deny list", addresses)
        exact = next((p for p in allow if p.exact and p.matches(host, port, addresses if p.network else ())), None)
        for address in addresses:
            kind = address_kind(address)
            if kind is not None and exact is None:
                return refused(
                    RULES[kind],
                    f"{host} is a {kind} address ({address}); local addresses are reached only when the "
                    f"workspace allows this host and port explicitly (ws.egress.allow('{_hostport(host, port)}'))",
                    addresses,
                )
        chosen = exact or next((p for p in allow if p.matches(host, port, addresses)), None)
        if only and chosen is None:
            return refused("not-allowed", "the host is not on the workspace's allow list", addresses)
        rule = f"allow:{chosen.text}" if chosen else "public"
        return Decision(True, url, host, port, addresses, rule, "allowed")

    def names_port(self, decision: Decision) -> bool:
        """Whether an allow entry names ``decision``'s port and covers its host or addresses: what opens
        a port other than 80 and 443 to the proxy (which cannot tell which protocol a port speaks)."""
        return any(
            p.port == decision.port and p.matches(decision.host, decision.port, decision.addresses) for p in self._allow
        )

    def require(self, url: str) -> Decision:
        """The decision for ``url`` when it is allowed; :class:`EgressRefused` otherwise."""
        decision = self.check_url(url)
        if not decision.allowed:
            raise EgressRefused(decision)
        return decision

    # -- storing and showing --------------------------------------------------------------------------
    def to_json(self) -> str:
        """The policy as stored in the workspace."""
        return json.dumps({"allow": self.allowed, "deny": self.denied, "only_allowed": self.only_allowed})

    @classmethod
    def from_json(cls, text: str | None, **options: Any) -> "EgressPolicy":
        """A policy from :meth:`to_json` (an empty text gives the default policy)."""
        data = json.loads(text) if text else {}
        return cls(list(data.get("allow", [])), list(data.get("deny", [])), bool(data.get("only_allowed")), **options)

    def describe(self) -> str:
        """A few lines saying what is reached and what is refused."""
        lines = [
            "egress: http(s) only; loopback, link-local, private, CGNAT, multicast and reserved addresses refused",
            "  public hosts: " + ("only those allowed" if self.only_allowed else "allowed"),
            "  allow: " + (", ".join(self.allowed) or "(none)"),
            "  deny:  " + (", ".join(self.denied) or "(none)"),
        ]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"EgressPolicy(allow={self.allowed!r}, deny={self.denied!r}, only_allowed={self.only_allowed})"


def _unique(patterns: Iterable[Pattern]) -> tuple[Pattern, ...]:
    """The patterns in order, each entry once (two spellings of one entry count as one)."""
    seen: dict[tuple[str, int | None, str], Pattern] = {}
    for pattern in patterns:
        seen.setdefault(pattern.key, pattern)
    return tuple(seen.values())


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
