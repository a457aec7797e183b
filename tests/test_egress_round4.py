"""The egress floor, round four (issue 31), from the attacker's side: no port the policy did not open
(both proxy request forms), nothing piped after a forwarded request, one normal form for every host
name, no lookup for a name the policy refuses by name, a credential on the fallback's loopback proxy,
and a policy whose shown, enforced and stored states are one."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
import warnings
from pathlib import Path

import pytest
from loopback_http import QuietHandler, serve, stop

import tea_notebook
from tea_notebook.egress import EgressPolicy, EgressProxy
from tea_notebook.egress.names import HostFormError, normal_host

ROOT = Path(__file__).resolve().parents[1]


class _Handler(QuietHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.hits.append((self.path, self.headers.get("Host"), self.headers.get("Proxy-Authorization")))
        self.reply(f"served {self.path}".encode())


@pytest.fixture
def local():
    server = serve(_Handler)
    server.hits = []
    yield server
    stop(server)


class Lookups:
    """The resolver the policy calls, counted: each name it was asked for, then the system's answer
    (or a fixed table's, for names that exist only in a test)."""

    def __init__(self, table: dict[str, str] | None = None):
        self.names: list[str] = []
        self.table = table or {}

    def __call__(self, host: str, port: int) -> tuple[str, ...]:
        self.names.append(host)
        if host in self.table:
            return (self.table[host],)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return tuple(dict.fromkeys(str(info[4][0]) for info in infos))


def _exchange(connect, request: bytes, timeout: float = 5) -> bytes:
    with connect() as conn:
        conn.settimeout(timeout)
        conn.sendall(request)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _unix(path: str):
    def connect() -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        return conn

    return connect


def _tcp(port: int):
    return lambda: socket.create_connection(("127.0.0.1", port), timeout=5)


# == F1: the port rule, and nothing piped after the forwarded request ==================================
# Run in a network namespace of its own, where 203.0.114.7 (a globally routable address, so the policy
# treats it as a public host) is an address of the loopback device: real servers on a public-looking
# host, nothing leaves the namespace. The names resolve through the policy's resolver hook.
NETNS_ATTACK = r"""
import fcntl, json, socket, struct, sys, threading, time
sys.path.insert(0, ROOT)
from tea_notebook.egress import EgressPolicy, EgressProxy

PUBLIC = "203.0.114.7"
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH", fcntl.ioctl(probe, 0x8913, struct.pack("16sH", b"lo", 0)))[1]  # SIOCGIFFLAGS
fcntl.ioctl(probe, 0x8914, struct.pack("16sH", b"lo", flags | 1))  # SIOCSIFFLAGS: up
address = struct.pack("16sH2s4s8s", b"lo:1", socket.AF_INET, b"", socket.inet_aton(PUBLIC), b"")
fcntl.ioctl(probe, 0x8916, address)  # SIOCSIFADDR on an alias: 127.0.0.1 stays

received = {}  # port -> every byte each connection brought

def listen(port, answer):
    server = socket.create_server((PUBLIC, port))
    received[port] = []
    def serve():
        while True:
            conn, _ = server.accept()
            threading.Thread(target=handle, args=(conn,), daemon=True).start()
    def handle(conn):
        data = b""
        conn.settimeout(1.0)
        answered = False
        try:
            while True:
                if not answered and (b"\r\n\r\n" in data or port == 2525):
                    conn.sendall(answer)
                    answered = True
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        received[port].append(data.decode("latin-1"))
        conn.close()
    threading.Thread(target=serve, daemon=True).start()

listen(80, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
listen(2525, b"220 mail.test ESMTP\r\n")
names = {"www.test": PUBLIC, "mail.test": PUBLIC, "evil.test": PUBLIC}
looked_up = []
def resolver(host, port):
    looked_up.append(host)
    return (names[host],)

policy = EgressPolicy(allow=["www.test", "mail.test"], deny=["evil.test"], resolver=resolver)
out = {}

def ask(name, request, pause=0.0):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(proxy.socket_path)
    conn.settimeout(5)
    conn.sendall(request[0])
    for more in request[1:]:
        time.sleep(pause)
        try:
            conn.sendall(more)
        except OSError:
            break
    data = b""
    try:
        while chunk := conn.recv(65536):
            data += chunk
    except OSError:
        pass
    conn.close()
    out[name] = data.decode("latin-1")

SMTP = b"EHLO attacker\r\nMAIL FROM:<a@b>\r\nRCPT TO:<victim@example>\r\nDATA\r\nspam\r\n.\r\nQUIT\r\n"
with EgressProxy(policy) as proxy:
    ask("absolute to 2525", [b"GET http://mail.test:2525/ HTTP/1.1\r\nHost: mail.test:2525\r\n\r\n" + SMTP])
    ask("connect to 2525", [b"CONNECT mail.test:2525 HTTP/1.1\r\n\r\n" + SMTP])
    ask("address to 2525", [b"GET http://203.0.114.7:2525/ HTTP/1.1\r\n\r\n" + SMTP])
    ask("pipelined", [
        b"GET http://www.test/first HTTP/1.1\r\nHost: www.test\r\n\r\n"
        b"GET http://evil.test/second HTTP/1.1\r\nHost: evil.test\r\n\r\n"
    ])
    ask("raw bytes after", [b"GET http://www.test/raw HTTP/1.1\r\nHost: www.test\r\n\r\n", SMTP], pause=0.3)
    ask("host header", [b"GET http://www.test/fronted HTTP/1.1\r\nHost: evil.test\r\n\r\n"])
    ask("length and chunked", [
        b"POST http://www.test/smuggle HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\nGET http://evil.test/ HTTP/1.1\r\n\r\n"
    ])
    ask("chunked body", [
        b"POST http://www.test/upload HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n" + SMTP
    ])
    ask("length body", [b"POST http://www.test/form HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello" + SMTP])
    time.sleep(1.2)  # the servers see the end of every connection
    out["before allowing"] = {str(k): list(v) for k, v in received.items()}
    policy.allow("mail.test:2525")  # control: the port named, the same request gets through
    ask("named port", [b"GET http://mail.test:2525/named HTTP/1.1\r\nHost: mail.test:2525\r\n\r\n"])
    time.sleep(1.2)
out["received"] = {str(k): v for k, v in received.items()}
out["looked up"] = looked_up
print(json.dumps(out))
"""


def _in_own_network_namespace(script: str) -> dict:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare(1) is not installed")
    probe = subprocess.run([unshare, "-rn", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no network namespace for this user: {probe.stderr.strip()}")
    done = subprocess.run(
        [unshare, "-rn", sys.executable, "-c", script.replace("ROOT", repr(str(ROOT)), 1)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_public_host_is_reached_on_web_ports_only_and_gets_exactly_one_request():
    out = _in_own_network_namespace(NETNS_ATTACK)
    before = out["before allowing"]
    # an allow entry that names a host but not the port: no absolute-form request and no tunnel to 2525
    for name in ("absolute to 2525", "connect to 2525", "address to 2525"):
        assert out[name].startswith("HTTP/1.1 403") and "X-Tea-Egress-Rule: port" in out[name], (name, out[name])
    assert before["2525"] == [], f"the mail server was spoken to: {before['2525']}"
    web = before["80"]
    # one request per connection: a pipelined second request, raw bytes after the request, bytes
    # after a body are never forwarded (the evil.test request never reached anything)
    assert out["pipelined"].startswith("HTTP/1.1 200") and out["pipelined"].count("HTTP/1.1") == 1
    assert "Connection: close" in out["pipelined"]
    sent = {request.split(" ", 2)[1]: request for request in web}
    assert set(sent) == {"/first", "/raw", "/fronted", "/upload", "/form"}, web
    assert all("second" not in r and "EHLO" not in r and "evil.test" not in r for r in web), web
    assert sent["/fronted"].count("Host:") == 1 and "Host: www.test\r\n" in sent["/fronted"]
    assert sent["/upload"].endswith("\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    assert sent["/form"].endswith("\r\n\r\nhello")
    assert out["length and chunked"].startswith("HTTP/1.1 400")
    assert "evil.test" not in out["looked up"]
    # control: the same server is reachable once the port is named
    assert "X-Tea-Egress-Rule" not in out["named port"]
    assert any(r.startswith("GET /named HTTP/1.1") for r in out["received"]["2525"])


def test_the_proxy_refuses_other_ports_of_a_local_host_allowed_on_one_port(local):
    """The same rule without a namespace: a local service allowed on one port, another port refused."""
    other = socket.create_server(("127.0.0.1", 0))
    spoken: list[bytes] = []

    def accept() -> None:
        try:
            conn, _ = other.accept()
            spoken.append(conn.recv(1024))
            conn.close()
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    other_port = other.getsockname()[1]
    policy = EgressPolicy(allow=[f"127.0.0.1:{local.server_port}"])
    try:
        with EgressProxy(policy) as proxy:
            answer = _exchange(
                _unix(proxy.socket_path), f"GET http://127.0.0.1:{other_port}/ HTTP/1.1\r\n\r\n".encode()
            )
            assert answer.startswith(b"HTTP/1.1 403")
            answer = _exchange(
                _unix(proxy.socket_path), f"GET http://127.0.0.1:{local.server_port}/ok HTTP/1.1\r\n\r\n".encode()
            )
            assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"served /ok")
    finally:
        other.close()
    assert spoken == []


# == F5: decided by name first ==========================================================================
def test_only_allowed_refuses_a_name_on_no_list_without_looking_it_up(tmp_path):
    lookups = Lookups()
    policy = EgressPolicy(allow=["localhost:9"], only_allowed=True, resolver=lookups)
    for url in ("http://exfil-4f2a.attacker.example/", "https://secret-in-a-label.example:443/x"):
        decision = policy.check_url(url)
        assert not decision.allowed and decision.rule == "not-allowed" and "not looked up" in decision.why
    assert lookups.names == []
    # a name an entry covers is looked up (its addresses are still checked), once
    assert policy.check_url("http://localhost:9/").allowed and lookups.names == ["localhost"]
    # an address or network entry can only match addresses: then the name must be resolved
    lookups.names.clear()
    policy.allow("93.184.216.0/24")
    policy.check_url("http://www.example.invalid/")
    assert lookups.names == ["www.example.invalid"]
    # through the proxy too: the refused name never reaches the resolver
    lookups.names.clear()
    policy.remove("93.184.216.0/24")
    with EgressProxy(policy) as proxy:
        answer = _exchange(_unix(proxy.socket_path), b"GET http://leak.attacker.example/ HTTP/1.1\r\n\r\n")
        tunnel = _exchange(_unix(proxy.socket_path), b"CONNECT leak2.attacker.example:443 HTTP/1.1\r\n\r\n")
    assert b"X-Tea-Egress-Rule: not-allowed" in answer and b"X-Tea-Egress-Rule: not-allowed" in tunnel
    assert lookups.names == []


def test_only_allowed_set_as_a_property_is_kept_and_refuses_by_name_after_reopening(tmp_path):
    path = tmp_path / "ws"
    with tea_notebook.Workspace(path, embedder="hashing") as ws:
        ws.egress.only_allowed = True
    with tea_notebook.Workspace(path, embedder="hashing") as ws:
        assert ws.egress.only_allowed is True
        lookups = Lookups()
        ws.egress.resolver = lookups
        assert ws.egress.check_url("http://not-on-any-list.example/").rule == "not-allowed"
        assert lookups.names == []
        ws.egress.only_allowed = False
    with tea_notebook.Workspace(path, embedder="hashing") as ws:
        assert ws.egress.only_allowed is False


# == F6: one normal form =================================================================================
SPELLINGS = [
    ("e\xadvil.test", "host-form"),  # a soft hyphen
    ("evil\u3002test", "host-form"),  # an ideographic full stop
    ("\uff45\uff56\uff49\uff4c.test", "host-form"),  # full-width letters
    ("evil\u200b.test", "host-form"),  # a zero-width space
    ("evil\uff0etest", "host-form"),  # a full-width full stop
    ("EVIL.test", "deny:evil.test"),
    ("Evil.TEST.", "deny:evil.test"),
    ("evil.test.", "deny:evil.test"),
    ("sub.EVIL.test", "deny:*.evil.test"),
]


@pytest.mark.parametrize("host, rule", SPELLINGS)
def test_every_spelling_of_a_denied_name_is_refused_before_any_lookup(host, rule):
    lookups = Lookups({"evil.test": "93.184.216.34"})
    policy = EgressPolicy(deny=["evil.test", "*.evil.test"], resolver=lookups)
    decision = policy.check_url(f"http://{host}/")
    assert not decision.allowed and decision.rule == rule, decision
    via_address = policy.check_address(host, 443)
    assert not via_address.allowed and via_address.rule == rule
    assert lookups.names == []


def test_the_proxy_reads_a_host_one_way_only():
    lookups = Lookups({"evil.test": "93.184.216.34"})
    policy = EgressPolicy(deny=["evil.test"], resolver=lookups)
    with EgressProxy(policy) as proxy:
        ask = _unix(proxy.socket_path)
        for target in ("e\u00advil.test", "evil\u3002test", "\uff45\uff56\uff49\uff4c.test"):
            connect = _exchange(ask, f"CONNECT {target}:443 HTTP/1.1\r\n\r\n".encode())
            absolute = _exchange(ask, f"GET http://{target}/ HTTP/1.1\r\n\r\n".encode())
            for answer in (connect, absolute):
                assert answer.startswith(b"HTTP/1.1 403") and b"X-Tea-Egress-Rule: host-form" in answer, answer
        # a lone 0xAD byte is not UTF-8: refused as a malformed request, never read as a soft hyphen
        assert _exchange(ask, b"CONNECT e\xadvil.test:443 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert _exchange(ask, b"CONNECT EVIL.test.:443 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 403")
    assert lookups.names == []


def test_names_have_one_normal_form():
    assert normal_host("B\u00dcCHER.example.") == normal_host("xn--bcher-kva.example") == "xn--bcher-kva.example"
    assert normal_host("[::FFFF:127.0.0.1]") == "::ffff:7f00:1"
    assert normal_host("My_Host.Example") == "my_host.example"
    assert normal_host("fa\u00df.de") == "xn--fa-hia.de"  # not fass.de: the resolver gets the A-label
    for bad in ("xn--zz.test", "a..b", "-a.test", "ex%41mple.com", "e\u0301vil.test", "x" * 300):
        with pytest.raises(HostFormError):
            normal_host(bad)
    # an international entry matches the name however it is written, and its A-label
    policy = EgressPolicy(deny=["b\u00fccher.example"], resolver=Lookups({"xn--bcher-kva.example": "93.184.216.34"}))
    assert policy.check_url("http://xn--bcher-kva.example/").rule == "deny:b\u00fccher.example"
    assert policy.check_url("http://B\u00dcCHER.example/").rule == "deny:b\u00fccher.example"


def test_an_entry_that_changes_under_normalization_is_refused_and_changes_nothing(tmp_path):
    with tea_notebook.Workspace(tmp_path / "ws", embedder="hashing") as ws:
        with pytest.raises(ValueError, match="'evil.test'"):
            ws.egress.deny("evil.test", "\uff45\uff56\uff49\uff4c.test")
        assert ws.egress.denied == [] and json.loads(ws.db.meta("egress") or "{}").get("deny", []) == []
        ws.egress.deny("EVIL.test")
        ws.egress.deny("evil.test")  # the same entry, another spelling: kept once
        assert ws.egress.denied == ["EVIL.test"]
        ws.egress.remove("evil.test")
        assert ws.egress.denied == []


# == the fallback's loopback proxy needs its session's credential =======================================
def test_a_tcp_proxy_with_a_credential_refuses_local_clients_without_it(local):
    policy = EgressPolicy(allow=[f"127.0.0.1:{local.server_port}"])
    url = f"http://127.0.0.1:{local.server_port}"
    with EgressProxy(policy, tcp=True, credential=True) as proxy:
        ask = _tcp(proxy.port)
        bare = _exchange(ask, f"GET {url}/bare HTTP/1.1\r\n\r\n".encode())
        assert bare.startswith(b"HTTP/1.1 407") and b'Proxy-Authenticate: Basic realm="tea egress"' in bare
        assert b"X-Tea-Egress-Proxy: unauthenticated" in bare
        tunnel = _exchange(ask, f"CONNECT 127.0.0.1:{local.server_port} HTTP/1.1\r\n\r\n".encode())
        assert tunnel.startswith(b"HTTP/1.1 407")
        for wrong in (f"tea:{'x' * 32}", f"{proxy.username}:{proxy.password}x", ""):
            token = base64.b64encode(wrong.encode()).decode()
            answer = _exchange(ask, f"GET {url}/guess HTTP/1.1\r\nProxy-Authorization: Basic {token}\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.1 407"), wrong
        assert local.hits == []
        # with it: a client given the proxy URL (urllib, as sandboxed code uses it) goes through,
        # and the credential is not passed on to the server
        assert proxy.client_url.startswith(f"http://tea:{proxy.password}@127.0.0.1:")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy.client_url}))
        with opener.open(f"{url}/with", timeout=5) as response:
            assert response.read() == b"served /with"
    assert [(path, auth) for path, _host, auth in local.hits] == [("/with", None)]
    # without a credential asked for, and on a Unix socket, nothing changes
    with EgressProxy(policy, tcp=True) as open_proxy:
        assert open_proxy.password is None and open_proxy.client_url == open_proxy.url
    assert EgressProxy(policy, credential=True).password is None


STRANGER = """
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) as conn:
    conn.sendall(f"GET http://127.0.0.1:{sys.argv[2]}/other-user HTTP/1.1\\r\\n\\r\\n".encode())
    print(conn.recv(4096).split(b"\\r\\n")[0].decode())
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process as another user needs root")
def test_another_local_user_is_refused_by_the_fallback_proxy(local):
    system = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
    if system is None:
        pytest.skip("no system Python for another user to run")
    policy = EgressPolicy(allow=[f"127.0.0.1:{local.server_port}"])
    with EgressProxy(policy, tcp=True, credential=True) as proxy:
        done = subprocess.run(
            [system, "-c", STRANGER, str(proxy.port), str(local.server_port)],
            user=65534,
            group=65534,
            capture_output=True,
            text=True,
            timeout=30,
            cwd="/",
        )
    assert done.stdout.strip() == "HTTP/1.1 407 Proxy Authentication Required", done.stderr
    assert local.hits == []


def test_a_fallback_sandbox_reaches_the_network_with_its_credential_and_others_do_not(local, tmp_path):
    from tea_notebook.envs.sandbox import PythonSandbox

    box = PythonSandbox(tmp_path / "run", network=True, isolation="process", timeout=20)
    box.egress = EgressPolicy(allow=[f"127.0.0.1:{local.server_port}"])
    code = (
        "import urllib.request\n"
        f"urllib.request.urlopen('http://127.0.0.1:{local.server_port}/from-sandbox', timeout=5).read().decode()"
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fallback's warning (shown once per process)
            result = box.exec_sync(code)
        assert result.value == "'served /from-sandbox'", result
        proxy = box._proxy  # noqa: SLF001 - the proxy this session started: what a local user would find
        assert proxy is not None and proxy.tcp and proxy.password
        stranger = _exchange(
            _tcp(proxy.port), f"GET http://127.0.0.1:{local.server_port}/stranger HTTP/1.1\r\n\r\n".encode()
        )
        assert stranger.startswith(b"HTTP/1.1 407")
    finally:
        box.kill()
    assert [path for path, _host, _auth in local.hits] == ["/from-sandbox"]


# == what is shown is what is enforced is what is stored ===============================================
def test_the_lists_are_read_only_and_every_change_is_stored_at_once(tmp_path):
    path = tmp_path / "ws"
    with tea_notebook.Workspace(path, embedder="hashing") as ws:
        with pytest.raises(AttributeError, match=r"read-only.*ws\.egress\.allow\('host'\)"):
            ws.egress.allowed.append("127.0.0.1:9000")
        with pytest.raises(AttributeError, match=r"ws\.egress\.deny\('host'\)"):
            ws.egress.denied.extend(["a.example"])
        with pytest.raises(AttributeError, match="read-only"):
            ws.egress.allowed = ["127.0.0.1:9000"]
        with pytest.raises(TypeError, match="read-only"):
            ws.egress.denied += ["a.example"]
        ws.egress.allow("127.0.0.1:9000")
        with pytest.raises(TypeError, match="read-only"):
            ws.egress.allowed[0] = "127.0.0.1:9001"
        with pytest.raises(TypeError, match="True or False"):
            ws.egress.only_allowed = "yes"
        ws.egress.only_allowed = True
        stored = json.loads(ws.db.meta("egress"))
        assert stored == {"allow": ["127.0.0.1:9000"], "deny": [], "only_allowed": True}
        assert ws.egress.allowed == ["127.0.0.1:9000"] == list(ws.egress.allowed)
        assert ws.egress.check_url("http://127.0.0.1:9000/").allowed
        assert not ws.egress.check_url("http://127.0.0.1:9001/").allowed
    with tea_notebook.Workspace(path, embedder="hashing") as ws:
        assert ws.egress.allowed == ["127.0.0.1:9000"] and ws.egress.only_allowed is True


def test_a_change_that_cannot_be_stored_is_not_made(tmp_path):
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    policy = ws.egress
    policy.allow("127.0.0.1:9000")
    ws.close()  # its database is gone: storing fails
    for change in (
        lambda: policy.allow("127.0.0.1:9001"),
        lambda: policy.deny("bad.example"),
        lambda: policy.remove("127.0.0.1:9000"),
        lambda: setattr(policy, "only_allowed", True),
    ):
        with pytest.raises(Exception):  # noqa: B017 - whatever the closed store raises
            change()
    assert policy.allowed == ["127.0.0.1:9000"] and policy.denied == [] and policy.only_allowed is False
    assert policy.check_url("http://127.0.0.1:9000/").allowed and not policy.check_url("http://127.0.0.1:9001/").allowed


def test_every_module_of_the_floor_is_importable_without_idna_loaded():
    code = (
        "import sys, tea_notebook, tea_notebook.egress.policy, tea_notebook.egress.proxy; print('idna' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ}, cwd=ROOT)
    assert done.stdout.strip() == "False", done.stderr
