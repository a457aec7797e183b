"""The egress policy (tea_notebook.egress): the rules, the workspace's copy of them, the checked HTTP
client and the host-side proxy — each driven from the side an attack comes from (a URL a model or a
page chose, a request a sandboxed program makes through the proxy)."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from loopback_http import QuietHandler, serve, stop

import tea_notebook
from tea_notebook.egress import EgressPolicy, EgressProxy, EgressRefused, policy_client
from tea_notebook.egress.bridge import start_bridge
from tea_notebook.egress.transport import fetch_following

AS_ROOT = os.geteuid() == 0


class _Handler(QuietHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.hits.append(self.path)
        if self.path == "/to-loopback":
            self.redirect(f"http://127.0.0.1:{self.server.server_port}/secret")
            return
        self.reply(f"served {self.path}".encode())


@pytest.fixture
def local():
    """A local HTTP service (what a page wants the agent to reach: Jupyter, an admin console)."""
    server = serve(_Handler)
    server.hits = []
    yield server
    stop(server)


# -- the rules ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url, rule",
    [
        ("file:///etc/shadow", "scheme"),
        ("FILE:///etc/passwd", "scheme"),
        ("javascript:alert(1)", "scheme"),
        ("data:text/html,<h1>x</h1>", "scheme"),
        ("ftp://example.org/x", "scheme"),
        ("chrome://settings", "scheme"),
        ("http:///nohost", "url"),
        ("http://127.0.0.1:8888/lab", "loopback"),
        ("http://127.7.7.7/", "loopback"),
        ("http://localhost:8888/lab?token=x", "loopback"),
        ("http://LOCALHOST./", "loopback"),
        ("http://[::1]:8888/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://[::ffff:7f00:1]/", "loopback"),
        ("http://2130706433/", "loopback"),  # 127.0.0.1 as one number
        ("http://0x7f000001/", "loopback"),
        ("http://0.0.0.0:8888/", "unspecified"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://10.0.0.1/", "private"),
        ("http://172.16.5.4/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://[fd00::1]/", "private"),
        ("http://100.64.0.1/", "cgnat"),
        ("http://224.0.0.1/", "multicast"),
        ("http://240.0.0.1/", "reserved"),
    ],
)
def test_a_default_policy_refuses_what_is_not_the_open_web(url, rule):
    decision = EgressPolicy().check_url(url)
    assert not decision.allowed and decision.rule == rule, decision
    assert f"egress rule '{rule}'" in decision.reason
    with pytest.raises(EgressRefused):
        EgressPolicy().require(url)


def test_a_public_address_is_allowed_and_the_checked_addresses_come_with_it():
    decision = EgressPolicy().check_url("https://93.184.216.34/page")
    assert decision.allowed and decision.addresses == ("93.184.216.34",) and decision.port == 443


def test_a_local_address_opens_only_for_an_entry_naming_its_host_and_port():
    policy = EgressPolicy(allow=["localhost:8765", "*.corp.example", "127.0.0.2"])
    assert policy.check_url("http://localhost:8765/x").allowed
    assert policy.check_url("http://localhost:8765/x").rule == "allow:localhost:8765"
    assert not policy.check_url("http://localhost:8766/x").allowed  # another port
    assert not policy.check_url("http://127.0.0.1:8765/x").allowed  # named by name, not by address
    assert not policy.check_url("http://127.0.0.2:80/x").allowed  # an entry without a port opens no local address
    exact = EgressPolicy(allow=["127.0.0.1:8765"])
    assert exact.check_url("http://127.0.0.1:8765/").allowed
    assert exact.check_url("http://localhost:8765/").allowed  # the same address and port
    assert not exact.check_url("http://127.0.0.1:8764/").allowed


def test_deny_wins_over_allow_with_wildcards_and_networks():
    policy = EgressPolicy(allow=["*.example.org", "93.184.216.34"], deny=["*.bad.example.org", "93.184.216.0/24"])
    decision = policy.check_address("x.bad.example.org", 443)
    assert not decision.allowed and decision.rule == "deny:*.bad.example.org"
    decision = policy.check_url("http://93.184.216.34/")
    assert not decision.allowed and decision.rule == "deny:93.184.216.0/24"


def test_only_allowed_lets_exactly_the_allow_list_through():
    policy = EgressPolicy(allow=["93.184.216.34", "1.1.1.1:443"], only_allowed=True)
    assert policy.check_url("http://93.184.216.34/").allowed
    assert policy.check_url("https://1.1.1.1/").allowed
    assert policy.check_url("http://1.1.1.1/").rule == "not-allowed"  # port 80 is not named
    assert policy.check_url("http://8.8.8.8/").rule == "not-allowed"


@pytest.mark.parametrize("bad", ["", "http://x.org", "a b", "*", "*.", "x.org:0", "x.org:99999", "x.org:port", "[::1"])
def test_a_bad_pattern_is_a_clear_error_and_changes_nothing(bad):
    policy = EgressPolicy(allow=["ok.example"])
    with pytest.raises(ValueError) as info:
        policy.allow("fine.example", bad)
    assert repr(bad) in str(info.value) or bad in str(info.value)
    assert policy.allowed == ["ok.example"]


def test_a_name_resolving_to_a_private_address_is_refused(tmp_path):
    """Through the system resolver: a name in /etc/hosts pointing at a private address (root only)."""
    if not AS_ROOT:
        pytest.skip("adding a name to /etc/hosts needs root")
    hosts = "/etc/hosts"
    original = open(hosts).read()
    try:
        with open(hosts, "a") as fh:
            fh.write("\n10.11.12.13 intranet.tea-egress-test\n127.0.0.1 loop.tea-egress-test\n")
        assert EgressPolicy().check_url("http://intranet.tea-egress-test/").rule == "private"
        assert EgressPolicy().check_url("http://loop.tea-egress-test:8888/").rule == "loopback"
    finally:
        with open(hosts, "w") as fh:
            fh.write(original)


def test_the_connection_goes_to_the_address_that_was_checked(local):
    """A name the system cannot resolve at all is fetched: the client connected to the address the
    policy's check returned, never resolving the name again (no window for DNS rebinding)."""
    port = local.server_port
    policy = EgressPolicy(allow=[f"rebind.invalid:{port}"], resolver=lambda host, p: ("127.0.0.1",))

    async def fetch() -> bytes:
        async with policy_client(policy) as client:
            async for response in fetch_following(client, policy, f"http://rebind.invalid:{port}/page"):
                return await response.aread()
        return b""

    assert asyncio.run(fetch()) == b"served /page"


def test_each_redirect_hop_is_checked_before_it_is_followed(local):
    port = local.server_port
    policy = EgressPolicy(allow=[f"localhost:{port}"])

    async def fetch() -> None:
        async with policy_client(policy) as client:
            async for _response in fetch_following(client, policy, f"http://localhost:{port}/to-loopback"):
                raise AssertionError("the redirect to 127.0.0.1 was followed")

    with pytest.raises(EgressRefused) as info:
        asyncio.run(fetch())
    assert info.value.decision.rule == "loopback" and info.value.decision.url.endswith("/secret")
    assert local.hits == ["/to-loopback"]


# -- the workspace's policy ------------------------------------------------------------------------------
def test_the_workspace_keeps_its_policy(tmp_path):
    path = tmp_path / "ws"
    with tea_notebook.Workspace(path, embedder="hashing") as ws:
        ws.egress.allow("localhost:8765").deny("*.tracker.example").set_only_allowed(False)
        ws.egress.remove("localhost:8765")
        ws.egress.allow("127.0.0.1:9000")
    with tea_notebook.Workspace(path, embedder="hashing") as ws:
        assert ws.egress.allowed == ["127.0.0.1:9000"] and ws.egress.denied == ["*.tracker.example"]
        assert ws.egress.check_url("http://127.0.0.1:9000/").allowed
        with pytest.raises(ValueError, match="neither"):
            ws.egress.remove("nothing.example")


def test_tea_egress_magic_and_config(ip, tmp_path):
    from IPython.core.error import UsageError

    magics = ip.magics_manager.registry["TeaMagics"]
    path = tmp_path / "ws"
    tea_notebook.Workspace(path, embedder="hashing").close()
    ip.run_line_magic("tea", f"workspace {path}")
    shown = ip.run_line_magic("tea", "egress allow localhost:8765 *.docs.example")
    assert "localhost:8765" in str(shown) and magics.workspace.egress.check_url("http://localhost:8765/").allowed
    ip.run_line_magic("tea", "egress deny *.bad.example")
    assert magics.workspace.egress.denied == ["*.bad.example"]
    with pytest.raises(UsageError, match="port must be a number"):
        ip.run_line_magic("tea", "egress allow localhost:http")
    with pytest.raises(UsageError, match="usage"):
        ip.run_line_magic("tea", "egress open-everything")
    ip.run_line_magic("config", "TeaMagics.egress_allow = ['127.0.0.1:9001']")
    assert magics.workspace.egress.check_url("http://127.0.0.1:9001/").allowed
    ip.run_line_magic("config", "TeaMagics.egress_allow = []")


# -- the proxy -------------------------------------------------------------------------------------------
def _through(bridge_port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", bridge_port), timeout=5) as conn:
        conn.sendall(request)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_the_proxy_refuses_and_forwards_by_the_policy(local):
    port = local.server_port
    refused = []
    policy = EgressPolicy()
    with EgressProxy(policy, refused.append) as proxy:
        _thread, bridge = start_bridge(proxy.socket_path, 0)
        # plain HTTP to loopback: 403 with the rule, and the service sees nothing
        answer = _through(bridge, f"GET http://127.0.0.1:{port}/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 403") and b"X-Tea-Egress-Rule: loopback" in answer
        # a tunnel to loopback, and to the metadata address
        answer = _through(bridge, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 403")
        answer = _through(bridge, b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 403") and b"link-local" in answer
        # not a proxy request at all
        assert _through(bridge, b"GET /x HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert _through(bridge, b"GET file:///etc/passwd HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 403")
        assert _through(bridge, b"X" * 70000 + b"\r\n\r\n").startswith(b"HTTP/1.1 431")
        assert local.hits == []
        assert [d.rule for d in refused] == ["loopback", "loopback", "link-local", "scheme"]
        # allowed explicitly: forwarded, and a tunnel to that named port works too
        policy.allow(f"127.0.0.1:{port}")
        answer = _through(bridge, f"GET http://127.0.0.1:{port}/ok?a=1 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.") and answer.endswith(b"served /ok?a=1")
        answer = _through(bridge, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nGET /tunnel HTTP/1.0\r\n\r\n".encode())
        assert b"200 Connection established" in answer and answer.endswith(b"served /tunnel")
        assert local.hits == ["/ok?a=1", "/tunnel"]


def test_a_tunnel_goes_to_port_443_unless_the_port_is_named(local):
    policy = EgressPolicy(resolver=lambda host, port: ("93.184.216.34",))
    with EgressProxy(policy) as proxy:
        _thread, bridge = start_bridge(proxy.socket_path, 0)
        answer = _through(bridge, b"CONNECT public.example:22 HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 403") and b"X-Tea-Egress-Rule: port" in answer


def test_the_proxy_socket_is_private_to_its_user():
    with EgressProxy(EgressPolicy()) as proxy:
        folder = os.path.dirname(proxy.socket_path)
        assert os.stat(folder).st_mode & 0o777 == 0o700 and os.stat(folder).st_uid == os.geteuid()
    assert not os.path.exists(folder)
