"""The host-side HTTP proxy through which sandboxes and the browser reach the network.

A sandboxed process (Python code with ``network=True``, a generated tool, Chromium) has no network
of its own: its only way out is this proxy, reached through a Unix socket bind-mounted into the
sandbox (``bridge.py`` turns it into a loopback port there). Each request is checked by the
workspace's :class:`~tea_notebook.egress.policy.EgressPolicy` and connected to the address the check
returned, so a name cannot be re-resolved to somewhere else between the check and the connection.

Two request forms are served, the two an HTTP client sends to a proxy:

* ``CONNECT host:port`` — a tunnel (HTTPS). Only to port 443, or to a port an allow entry names,
  since the proxy cannot see what runs inside a tunnel;
* an absolute URL (``GET http://host/path HTTP/1.1``) — plain HTTP, forwarded with
  ``Connection: close`` so that every request on a connection is checked on its own.

A refused request gets ``403`` with the reason in the body and the rule in ``X-Tea-Egress-Rule``
(every answer the proxy makes itself carries ``X-Tea-Egress-Proxy``: ``refused``, ``unreachable``, ``bad-request``);
``on_refusal`` is called with the :class:`~tea_notebook.egress.policy.Decision` (from the proxy's thread).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from typing import Callable
from urllib.parse import urlsplit

from tea_notebook.egress.policy import Decision, EgressPolicy

MAX_HEAD = 64 * 1024
HEAD_TIMEOUT = 15.0
CONNECT_TIMEOUT = 10.0
TUNNEL_PORTS = (443,)
_HOP_HEADERS = {b"connection", b"proxy-connection", b"proxy-authorization", b"keep-alive", b"te", b"upgrade"}


class EgressProxy:
    """An HTTP proxy enforcing ``policy``, served from its own thread.

    ``EgressProxy(ws.egress).start()`` listens on a Unix socket in a private folder
    (:attr:`socket_path`); with ``tcp=True`` it listens on a loopback port instead (:attr:`port`),
    for a browser that cannot be put in a sandbox. ``close()`` stops it and removes the socket.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        on_refusal: Callable[[Decision], None] | None = None,
        *,
        tcp: bool = False,
    ):
        self.policy = policy
        self.on_refusal = on_refusal
        self.tcp = tcp
        self.socket_path: str | None = None
        self.port: int | None = None
        self.requests = 0
        self.refused = 0
        self._folder: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` for a TCP proxy (what ``--proxy-server`` and ``HTTP_PROXY`` take)."""
        if self.port is None:
            raise RuntimeError("the proxy listens on a Unix socket, not a port")
        return f"http://127.0.0.1:{self.port}"

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
                    self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
                    self.port = self._server.sockets[0].getsockname()[1]
                else:
                    self._server = await asyncio.start_unix_server(self._handle, self.socket_path)
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
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        except asyncio.LimitOverrunError:
            return await _answer(writer, 431, "the request head is too large")
        if len(head) > MAX_HEAD:
            return await _answer(writer, 431, "the request head is too large")
        lines = head[:-4].split(b"\r\n")
        try:
            method, target, version = lines[0].decode("latin-1").split(" ")
        except ValueError:
            return await _answer(writer, 400, "not an HTTP proxy request")
        self.requests += 1
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            if not port_text.isdigit() or not host:
                return await _answer(writer, 400, f"CONNECT needs host:port, not {target!r}")
            port = int(port_text)
            decision = await asyncio.to_thread(self.policy.check_address, host, port, url=f"https://{target}")
            if decision.allowed and port not in TUNNEL_PORTS and not _port_allowed(self.policy, decision):
                decision = Decision(
                    False, decision.url, decision.host, port, decision.addresses, "port",
                    "tunnels go to port 443 only, unless the workspace allows this host and port explicitly",
                )  # fmt: skip
            upstream = await self._connect(writer, decision)
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
        decision = await asyncio.to_thread(self.policy.check_url, target)
        upstream = await self._connect(writer, decision)
        if upstream is None:
            return
        up_reader, up_writer = upstream
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        out = [f"{method} {path} {version}".encode("latin-1")]
        for line in lines[1:]:
            name = line.split(b":", 1)[0].strip().lower()
            if name not in _HOP_HEADERS:
                out.append(line)
        out.append(b"Connection: close")
        up_writer.write(b"\r\n".join(out) + b"\r\n\r\n")
        await up_writer.drain()
        await _pipe(reader, writer, up_reader, up_writer)

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
                return await asyncio.wait_for(asyncio.open_connection(address, decision.port), CONNECT_TIMEOUT)
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


def _port_allowed(policy: EgressPolicy, decision: Decision) -> bool:
    return any(
        pattern.port == decision.port and pattern.matches(decision.host, decision.port, decision.addresses)
        for pattern in policy._allow  # noqa: SLF001 - the parsed allow list
    )


async def _answer(writer: asyncio.StreamWriter, status: int, text: str, rule: str = "") -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large", 502: "Bad Gateway"}
    body = (text + "\n").encode("utf-8", "replace")
    head = [
        f"HTTP/1.1 {status} {reasons.get(status, 'Error')}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    # every answer the proxy makes itself says so: a browser tells it from a site's own 403 or 502
    kind = "refused" if status == 403 else "unreachable" if status == 502 else "bad-request"
    head.append(f"X-Tea-Egress-Proxy: {kind}")
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
