"""HTTP from the host under the egress policy: a client whose every connection is checked.

:func:`policy_client` gives an ``httpx.AsyncClient`` whose connections go only to addresses the
policy checked (the name is resolved once, by the check; the TLS certificate is still verified for
the name). Redirects are not followed by the client: :func:`fetch_following` follows them one hop at
a time, so each hop's URL — scheme included — passes the policy, and every refusal is reported.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
from dataclasses import replace
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterable

from tea_notebook.egress.policy import Decision, EgressPolicy, EgressRefused

if TYPE_CHECKING:
    import ssl

    import httpx


def _backend(policy: EgressPolicy, seen: Callable[[Decision], None] | None) -> Any:
    import httpcore

    class PolicyBackend(httpcore.AsyncNetworkBackend):
        """Connects to ``host:port`` only through the policy, to an address the check returned."""

        def __init__(self) -> None:
            self._inner = httpcore.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Iterable[Any] | None = None,
        ) -> httpcore.AsyncNetworkStream:
            if _is_address(host):  # nothing to resolve: no thread hop
                decision = policy.check_address(host, port)
            else:
                decision = await asyncio.to_thread(policy.check_address, host, port)
            if seen is not None:
                seen(decision)
            if not decision.allowed:
                raise EgressRefused(decision)
            last: Exception | None = None
            for address in decision.addresses:
                try:
                    return await self._inner.connect_tcp(
                        address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                    )
                except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                    last = exc
            assert last is not None
            raise last

        async def connect_unix_socket(
            self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
        ) -> httpcore.AsyncNetworkStream:
            raise EgressRefused(Decision(False, path, "", 0, rule="unix", why="no Unix sockets"))

        async def sleep(self, seconds: float) -> None:
            await self._inner.sleep(seconds)

    return PolicyBackend()


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return False


@functools.lru_cache(maxsize=1)
def ssl_context() -> "ssl.SSLContext":
    """The certificate-verifying TLS context every checked client shares (building one reads the CA
    bundle: tens of milliseconds a client otherwise)."""
    import httpx

    return httpx.create_ssl_context()


def policy_client(
    policy: EgressPolicy,
    *,
    timeout: float = 15.0,
    headers: dict[str, str] | None = None,
    seen: Callable[[Decision], None] | None = None,
) -> "httpx.AsyncClient":
    """An ``httpx.AsyncClient`` that reaches only what ``policy`` allows (no proxy from the
    environment, no redirects followed: use :func:`fetch_following`). ``seen`` gets every decision."""
    import httpx

    transport = httpx.AsyncHTTPTransport(verify=ssl_context())
    pool = getattr(transport, "_pool", None)
    if pool is None or not hasattr(pool, "_network_backend"):
        raise RuntimeError("this httpx/httpcore version has no connection pool to put the egress check in")
    pool._network_backend = _backend(policy, seen)
    return httpx.AsyncClient(
        transport=transport, follow_redirects=False, trust_env=False, timeout=timeout, headers=headers
    )


async def fetch_following(
    client: "httpx.AsyncClient",
    policy: EgressPolicy,
    url: str,
    *,
    max_redirects: int = 5,
    method: str = "GET",
) -> AsyncIterator["httpx.Response"]:
    """Yields the final response of ``url`` as a stream (one response; the caller reads it), each
    redirect's target checked by ``policy`` before it is requested (:class:`EgressRefused` when not).
    Use as ``async for response in fetch_following(...)``."""
    current = url

    def refused(decision: Decision) -> EgressRefused:
        decision = decision.for_url(current)
        if current != url:
            decision = replace(decision, why=f"{url} redirected here; {decision.why}")
        return EgressRefused(decision)

    for _hop in range(max_redirects + 1):
        early = policy.check_form(current)  # the address is checked when the connection is made
        if early is not None:
            raise refused(early)
        request = client.build_request(method, current)
        try:
            response = await client.send(request, stream=True)
        except EgressRefused as exc:  # the connection's check, told about the URL it was made for
            raise refused(exc.decision) from None
        if response.is_redirect and response.next_request is not None:
            target = str(response.next_request.url)
            await response.aclose()
            current = target
            continue
        try:
            yield response
        finally:
            await response.aclose()
        return
    raise TooManyRedirects(f"{url}: more than {max_redirects} redirects")


class TooManyRedirects(Exception):
    """A redirect chain longer than the caller allows."""
