"""The egress policy: which network destinations a model-chosen action may reach.

Every network action a model chooses — a browser navigation and the requests its pages make, the
page reader and each redirect hop, sandboxed code and generated tools with ``network=True`` — is
checked here, by one :class:`EgressPolicy` per workspace (``ws.egress``).

The rules, in order:

1. only ``http`` and ``https`` (``scheme``);
2. a host or address on the deny list is refused (``deny:PATTERN``; deny always wins);
3. the host is resolved once, and every address it resolves to is checked: loopback, link-local
   (cloud metadata at 169.254.169.254 included), private, shared (CGNAT), multicast, unspecified and
   reserved addresses are refused (``loopback``, ``private`` …) unless an allow entry names the host
   (or the address) **and** the port — a wildcard or a port-less entry never opens a local address;
4. with ``only_allowed`` on, a host that matches no allow entry is refused (``not-allowed``).

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
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit

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
        label = host[2:] if host.startswith("*.") else host
        if not label or "*" in label or not all(part and len(part) < 64 for part in label.split(".")):
            raise ValueError(f"{text!r} is not a host pattern (host, *.domain, address, network, with :port)")
        return cls(text.strip(), host, port)

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


class EgressPolicy:
    """A workspace's network egress policy (``ws.egress``); see the module's docstring for the rules.

    ``allow`` and ``deny`` are host patterns (``"example.com"``, ``"*.example.com"``, ``"10.0.0.0/8"``,
    ``"localhost:8765"``); ``only_allowed`` turns the allow list into the only way out. Changes made
    through :meth:`allow`, :meth:`deny`, :meth:`remove` and :meth:`set_only_allowed` are kept by the
    workspace (``on_change``). ``resolver(host, port)`` gives a name's addresses (the system's by default).
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
        self._lock = threading.Lock()
        self._allow = [Pattern.parse(p) for p in allow]
        self._deny = [Pattern.parse(p) for p in deny]
        #: the allow and deny entries as given
        self.allowed: list[str] = [p.text for p in self._allow]
        self.denied: list[str] = [p.text for p in self._deny]
        self.only_allowed = bool(only_allowed)
        self.on_change = on_change
        self.resolver = resolver or _resolve

    # -- changing it ------------------------------------------------------------------------------
    def allow(self, *patterns: str) -> "EgressPolicy":
        """Let these hosts through (a local address needs host **and** port: ``"127.0.0.1:8765"``)."""
        return self._add(self.allowed, self._allow, patterns)

    def deny(self, *patterns: str) -> "EgressPolicy":
        """Refuse these hosts, whatever the allow list says."""
        return self._add(self.denied, self._deny, patterns)

    def remove(self, *patterns: str) -> "EgressPolicy":
        """Drop entries from either list; an entry on neither is a :class:`ValueError`."""
        with self._lock:
            for text in patterns:
                key = text.strip()
                if key not in self.allowed and key not in self.denied:
                    raise ValueError(f"{text!r} is on neither the allow list nor the deny list")
            for text in patterns:
                key = text.strip()
                for texts, parsed in ((self.allowed, self._allow), (self.denied, self._deny)):
                    if key in texts:
                        parsed.pop(texts.index(key))
                        texts.remove(key)
        self._changed()
        return self

    def set_only_allowed(self, on: bool = True) -> "EgressPolicy":
        """With ``on``, only hosts on the allow list are reached."""
        self.only_allowed = bool(on)
        self._changed()
        return self

    def _add(self, texts: list[str], parsed: list[Pattern], patterns: tuple[str, ...]) -> "EgressPolicy":
        new = [Pattern.parse(p) for p in patterns]  # all or nothing: a bad pattern changes nothing
        with self._lock:
            for pattern in new:
                if pattern.text not in texts:
                    texts.append(pattern.text)
                    parsed.append(pattern)
        self._changed()
        return self

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)

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
        """The decision for ``host:port`` (a name or an address literal)."""
        host = host.strip().lower().strip("[]").rstrip(".")
        url = url or f"{host}:{port}"
        with self._lock:
            allow, deny, only = list(self._allow), list(self._deny), self.only_allowed

        def refused(rule: str, reason: str, addresses: tuple[str, ...] = ()) -> Decision:
            return Decision(False, url, host, port, addresses, rule, reason)

        if not host:
            return refused("url", "no host")
        for pattern in deny:
            if pattern.network is None and pattern.matches(host, port):
                return refused(f"deny:{pattern.text}", "the host is on the workspace's deny list")
        try:
            addresses: tuple[str, ...] = (str(ipaddress.ip_address(host)),)
        except ValueError:
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


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
