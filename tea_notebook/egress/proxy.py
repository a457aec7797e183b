"""The host-side HTTP proxy through which sandboxes and the browser reach the network.

A sandboxed process (Python code with ``network=True``, a generated tool, Chromium) has no network
of its own: its only way out is this proxy, reached through a Unix socket bind-mounted into the
sandbox (``bridge.py`` turns it into a loopback port there). Each request is checked by the
workspace's :class:`~tea_notebook.egress.policy.EgressPolicy` and connected to the address the check
returned, so a name cannot be re-resolved to somewhere else between the check and the connection.

Two request forms are served, the two an HTTP client sends to a proxy, under one port rule — port 80
or 443, or a port an allow entry names, since the proxy cannot tell which protocol a port speaks:

* ``CONNECT host:port`` — a tunnel (HTTPS);
* an absolute URL (``GET http://host/path HTTP/1.1``) — plain HTTP. The proxy forwards that one
  request: its head (``Host`` set to the URL's host, hop-by-hop headers dropped, ``Connection:
  close``) and exactly the body its framing announces (``Content-Length`` or chunked; both at once,
  or another transfer coding, is refused). Then it relays the answer and closes the client's
  connection: whatever else the client sent (a pipelined request, raw bytes for another protocol)
  goes nowhere. A client sends its next request on a new connection, checked on its own.

A refused request gets ``403`` with the reason in the body and the rule in ``X-Tea-Egress-Rule``
(every answer the proxy makes itself carries ``X-Tea-Egress-Proxy``: ``refused``, ``unreachable``,
``bad-request``, ``unauthenticated``); ``on_refusal`` is called with the
:class:`~tea_notebook.egress.policy.Decision` (from the proxy's thread).

A TCP proxy (the fallback without bubblewrap) listens on a loopback port any local user can reach;
with ``credential=True`` it serves only clients that send its per-session secret
(``Proxy-Authorization: Basic``; :attr:`EgressProxy.client_url` carries it, as ``HTTP_PROXY`` takes it)
and answers ``407`` to the rest. The Unix socket needs none: its folder is private to this user.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import os
import re
import secrets
import shutil
import tempfile
import threading
from typing import Callable
from urllib.parse import urlsplit

from tea_notebook.egress.policy import Decision, EgressPolicy

MAX_HEAD = 64 * 1024
HEAD_TIMEOUT = 15.0
CONNECT_TIMEOUT = 10.0
#: the ports reached without an allow entry that names the port, in both request forms
WEB_PORTS = (80, 443)
#: the user name of a TCP proxy's credential (the password is the per-session secret)
PROXY_USER = "tea"
_HOP_HEADERS = {b"connection", b"proxy-connection", b"proxy-authorization", b"keep-alive", b"te", b"upgrade", b"host"}
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})(;[^\r\n]*)?\r\n")
_NO_BODY = {204, 304}


class BadRequest(Exception):
    """A request the proxy will not forward as framed (the message says why)."""


class EgressProxy:
    """An HTTP proxy enforcing ``policy``, served from its own thread.

    ``EgressProxy(ws.egress).start()`` listens on a Unix socket in a private folder
    (:attr:`socket_path`); with ``tcp=True`` it listens on a loopback port instead (:attr:`port`),
    for a sandbox or a browser that runs without bubblewrap; ``credential=True`` makes a TCP proxy
    demand its per-session secret (:attr:`client_url`, or :attr:`username` and :attr:`password`).
    ``close()`` stops it and removes the socket.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        on_refusal: Callable[[Decision], None] | None = None,
        *,
        tcp: bool = False,
        credential: bool = False,
    ):
        self.policy = policy
        self.on_refusal = on_refusal
        self.tcp = tcp
        self.socket_path: str | None = None
        self.port: int | None = None
        self.requests = 0
        self.refused = 0
        #: the credential a client must send (a TCP proxy with ``credential=True`` only), else None
        self.username: str | None = PROXY_USER if tcp and credential else None
        self.password: str | None = secrets.token_urlsafe(24) if tcp and credential else None
        self._expected = f"{self.username}:{self.password}".encode() if self.password else b""
        self._folder: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` for a TCP proxy: its address, without the credential (what
        Chromium's ``--proxy-server`` takes; give the credential separately)."""
        if self.port is None:
            raise RuntimeError("the proxy listens on a Unix socket, not a port")
        return f"http://127.0.0.1:{self.port}"

    @property
    def client_url(self) -> str:
        """The proxy URL for ``HTTP_PROXY`` and the like: :attr:`url` with the credential in it
        (``http://tea:SECRET@127.0.0.1:PORT``) when the proxy demands one."""
        if self.password is None:
            return self.url
        return f"http://{self.username}:{self.password}@127.0.0.1:{self.port}"

    def start(self) -> "EgressProxy":
        """Start serving (returns once the socket or port accepts connections)."""
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure: list[BaseException] = []
        if not self.tcp:
            self._folder = tempfile.mkdtemp(prefix="tea-egress-")  # 0700: only this user reaches the socket
            self.socket_path = os.path.join(self._folder, "egress.sock")

        async def serve() -> None:
            try:
                if self.tcp:
                    self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, limit=MAX_HEAD)
                    self.port = self._server.sockets[0].getsockname()[1]
                else:
                    self._server = await asyncio.start_unix_server(self._handle, self.socket_path, limit=MAX_HEAD)
            except BaseException as exc:  # noqa: BLE001 - handed to the thread that called start()
                failure.append(exc)
                ready.set()
                return
            ready.set()
            async with self._server:
                await self._server.serve_forever()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(serve())
            except asyncio.CancelledError:
                pass
            finally:
                for task in asyncio.all_tasks(loop):
                    task.cancel()
                loop.run_until_complete(asyncio.sleep(0))
                loop.close()

        self._thread = threading.Thread(target=run, name="tea-egress-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure or not ready.is_set():
            self.close()
            raise RuntimeError(f"the egress proxy could not start: {failure[0] if failure else 'no answer in 10 s'}")
        return self

    def close(self) -> None:
        """Stop serving and remove the socket's folder (safe to call twice)."""
        loop, thread = self._loop, self._thread
        if loop is not None and not loop.is_closed():

            def stop() -> None:
                if self._server is not None:
                    self._server.close()
                for task in list(self._tasks):
                    task.cancel()
                for task in asyncio.all_tasks(loop):
                    task.cancel()

            try:
                loop.call_soon_threadsafe(stop)
            except RuntimeError:
                pass
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)
        self._thread = self._loop = self._server = None
        if self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def __enter__(self) -> "EgressProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one client connection ---------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._serve_one(reader, writer)
        except BadRequest as exc:
            await _answer(writer, 400, str(exc))
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One request, and the connection closes after its answer (a tunnel: when either side ends)."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        except asyncio.LimitOverrunError:
            return await _answer(writer, 431, "the request head is too large")
        if len(head) > MAX_HEAD:
            return await _answer(writer, 431, "the request head is too large")
        lines = head[:-4].split(b"\r\n")
        try:
            # UTF-8 or nothing: a name is read one way here and by the resolver (latin-1 would turn a
            # byte 0xAD into a soft hyphen the resolver drops)
            method, target, version = lines[0].decode("utf-8").split(" ")
        except ValueError:  # UnicodeDecodeError included
            return await _answer(writer, 400, "not an HTTP proxy request (a request line in ASCII or UTF-8)")
        self.requests += 1
        if self.password is not None and not self._authorized(lines[1:]):
            return await _answer(
                writer, 407, "this proxy needs its session's credential (the user and password in HTTP_PROXY)",
                extra=['Proxy-Authenticate: Basic realm="tea egress"'],
            )  # fmt: skip
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            if not port_text.isdigit() or not host:
                return await _answer(writer, 400, f"CONNECT needs host:port, not {target!r}")
            decision = await asyncio.to_thread(self.policy.check_address, host, int(port_text), url=f"https://{target}")
            upstream = await self._connect(writer, self._port_rule(decision))
            if upstream is None:
                return
            up_reader, up_writer = upstream
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            return await _pipe(reader, writer, up_reader, up_writer)
        parts = urlsplit(target)
        if parts.scheme.lower() != "http" or not parts.hostname:
            early = self.policy.check_form(target)
            if early is not None and parts.scheme:
                self._refused(early)
                return await _answer(writer, 403, early.reason, early.rule)
            return await _answer(writer, 400, f"a proxy request needs an absolute http:// URL, not {target!r}")
        if not _TOKEN.fullmatch(method.encode("utf-8")) or version not in ("HTTP/1.0", "HTTP/1.1"):
            return await _answer(writer, 400, f"not an HTTP/1.x request line: {lines[0][:200]!r}")
        headers, framing = _request_headers(lines[1:])  # BadRequest before anything is checked or sent
        decision = self._port_rule(await asyncio.to_thread(self.policy.check_url, target))
        upstream = await self._connect(writer, decision)
        if upstream is None:
            return
        up_reader, up_writer = upstream
        try:
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            host = f"[{decision.host}]" if ":" in decision.host else decision.host
            if parts.port is not None and parts.port != 80:
                host += f":{parts.port}"
            out = [f"{method} {path} {version}".encode("utf-8"), b"Host: " + host.encode("utf-8"), *headers]
            out.append(b"Connection: close")
            up_writer.write(b"\r\n".join(out) + b"\r\n\r\n")
            await up_writer.drain()
            # the body goes up while the answer comes back (a server may answer before it has read it all)
            body = asyncio.ensure_future(_copy_body(reader, up_writer, framing))
            try:
                await _relay_response(up_reader, writer, head_only=method.upper() == "HEAD")
            finally:
                body.cancel()
        finally:
            up_writer.close()

    def _authorized(self, lines: list[bytes]) -> bool:
        for line in lines:
            name, _, value = line.partition(b":")
            if name.strip().lower() != b"proxy-authorization":
                continue
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() != b"basic":
                return False
            try:
                given = base64.b64decode(token.strip(), validate=True)
            except ValueError:
                return False
            return hmac.compare_digest(given, self._expected)
        return False

    def _port_rule(self, decision: Decision) -> Decision:
        """``decision``, refused when it is for a port other than 80 or 443 that no allow entry names."""
        if not decision.allowed or decision.port in WEB_PORTS or self.policy.names_port(decision):
            return decision
        host = f"[{decision.host}]" if ":" in decision.host else decision.host
        return Decision(
            False, decision.url, decision.host, decision.port, decision.addresses, "port",
            f"only ports 80 and 443 are reached, unless the workspace allows this host and port explicitly "
            f"(ws.egress.allow('{host}:{decision.port}'))",
        )  # fmt: skip

    async def _connect(
        self, writer: asyncio.StreamWriter, decision: Decision
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        if not decision.allowed:
            self._refused(decision)
            await _answer(writer, 502 if decision.rule == "dns" else 403, decision.reason, decision.rule)
            return None
        last: BaseException | None = None
        for address in decision.addresses:
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(address, decision.port, limit=MAX_HEAD), CONNECT_TIMEOUT
                )
            except (OSError, asyncio.TimeoutError) as exc:
                last = exc
        await _answer(writer, 502, f"{decision.url}: could not connect ({last})")
        return None

    def _refused(self, decision: Decision) -> None:
        self.refused += 1
        if self.on_refusal is not None:
            try:
                self.on_refusal(decision)
            except Exception:  # noqa: BLE001 - a reporter's failure must not break the proxy
                pass


def _request_headers(lines: list[bytes]) -> tuple[list[bytes], tuple[str, int]]:
    """The headers to forward and the body's framing (``("length", n)``, ``("chunked", 0)``); a
    :class:`BadRequest` for a head two parties could read two ways (folded lines, a name with space
    before its colon, two lengths, a length and a transfer coding, a coding other than chunked)."""
    forward: list[bytes] = []
    lengths: set[bytes] = set()
    codings: list[bytes] = []
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise BadRequest(f"a malformed header line: {line[:100]!r}")
        lower = name.lower()
        if lower == b"content-length":
            lengths.update(v.strip() for v in value.split(b","))
        elif lower == b"transfer-encoding":
            codings += [v.strip().lower() for v in value.split(b",")]
        if lower not in _HOP_HEADERS:
            forward.append(line)
    if codings:
        if lengths:
            raise BadRequest("a request with both Content-Length and Transfer-Encoding")
        if codings != [b"chunked"]:
            raise BadRequest(f"only the chunked transfer coding is forwarded, not {b', '.join(codings)!r}")
        return forward, ("chunked", 0)
    if len(lengths) > 1 or any(not v.isdigit() or len(v) > 15 for v in lengths):
        raise BadRequest(f"an invalid Content-Length ({b', '.join(sorted(lengths))!r})")
    return forward, ("length", int(lengths.pop()) if lengths else 0)


async def _copy_exact(src: asyncio.StreamReader, dst: asyncio.StreamWriter, size: int) -> None:
    while size > 0:
        chunk = await src.read(min(size, 65536))
        if not chunk:
            raise asyncio.IncompleteReadError(b"", size)
        size -= len(chunk)
        dst.write(chunk)
        await dst.drain()


async def _copy_chunked(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy one chunked body, its trailers and its last empty line, and not a byte more."""
    while True:
        line = await src.readuntil(b"\r\n")
        match = _CHUNK_SIZE.fullmatch(line)
        if match is None:
            raise BadRequest(f"a malformed chunk size line: {line[:40]!r}")
        dst.write(line)
        size = int(match.group(1), 16)
        if size == 0:
            while (trailer := await src.readuntil(b"\r\n")) != b"\r\n":
                dst.write(trailer)
            dst.write(b"\r\n")
            await dst.drain()
            return
        await _copy_exact(src, dst, size)
        if await src.readexactly(2) != b"\r\n":
            raise BadRequest("a chunk longer than its size line says")
        dst.write(b"\r\n")


async def _copy_body(src: asyncio.StreamReader, dst: asyncio.StreamWriter, framing: tuple[str, int]) -> None:
    """The request's body, exactly as its framing announces (the client's later bytes stay unread)."""
    kind, size = framing
    try:
        if kind == "chunked":
            await _copy_chunked(src, dst)
        else:
            await _copy_exact(src, dst, size)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, BadRequest):
        dst.close()  # the upstream gets no more than the announced body; its answer still comes back


async def _relay_response(up: asyncio.StreamReader, writer: asyncio.StreamWriter, *, head_only: bool) -> None:
    """Relay the upstream's answer (interim ``1xx`` answers included), saying ``Connection: close``,
    and its body as framed (until the upstream closes when it has no framing)."""
    while True:
        try:
            head = await up.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            return await _answer(writer, 502, "the upstream answered with a head larger than 64 KiB")
        except asyncio.IncompleteReadError as exc:
            what = "an answer that is not HTTP" if exc.partial else "no answer"
            return await _answer(writer, 502, f"the upstream closed the connection after {what}")
        lines = head[:-4].split(b"\r\n")
        status_words = lines[0].split(b" ", 2)
        status = int(status_words[1]) if len(status_words) > 1 and status_words[1].isdigit() else 0
        kept, lengths, chunked = [lines[0]], set(), False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            lower = name.strip().lower()
            if lower in (b"connection", b"keep-alive", b"proxy-connection"):
                continue
            if lower == b"content-length":
                lengths.add(value.strip())
            elif lower == b"transfer-encoding":
                chunked = value.strip().lower().endswith(b"chunked")
            kept.append(line)
        interim = 100 <= status < 200 and status != 101
        if not interim:
            kept.append(b"Connection: close")
        writer.write(b"\r\n".join(kept) + b"\r\n\r\n")
        await writer.drain()
        if not interim:
            break
    if head_only or status in _NO_BODY or 100 <= status < 200 and status != 101:
        return
    try:
        if chunked:
            return await _copy_chunked(up, writer)
        if len(lengths) == 1 and (length := lengths.pop()).isdigit():
            return await _copy_exact(up, writer, int(length))
    except BadRequest:
        return  # a malformed answer ends here: the client's connection closes with it
    while chunk := await up.read(65536):  # no framing: the body ends when the upstream closes
        writer.write(chunk)
        await writer.drain()


async def _answer(
    writer: asyncio.StreamWriter, status: int, text: str, rule: str = "", extra: list[str] | None = None
) -> None:
    reasons = {
        400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required",
        431: "Request Header Fields Too Large", 502: "Bad Gateway",
    }  # fmt: skip
    body = (text + "\n").encode("utf-8", "replace")
    head = [
        f"HTTP/1.1 {status} {reasons.get(status, 'Error')}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(extra or []),
    ]
    # every answer the proxy makes itself says so: a browser tells it from a site's own 403 or 502
    kinds = {403: "refused", 407: "unauthenticated", 502: "unreachable"}
    head.append(f"X-Tea-Egress-Proxy: {kinds.get(status, 'bad-request')}")
    if rule:
        head.append(f"X-Tea-Egress-Rule: {rule}")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1", "replace") + body)
    try:
        await writer.drain()
    except ConnectionError:
        pass


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    """Both ways through a tunnel (``CONNECT``: checked once, its bytes are the client's business)."""

    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while chunk := await src.read(65536):
                dst.write(chunk)
                await dst.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            try:
                if dst.can_write_eof():
                    dst.write_eof()
            except (OSError, RuntimeError):
                pass

    try:
        # the upstream's answer decides the end: once it closes, the client's side closes too
        to_up = asyncio.ensure_future(copy(reader, up_writer))
        await copy(up_reader, writer)
        to_up.cancel()
    finally:
        up_writer.close()
