"""Loopback ports for the tests: ``free_port`` (nobody listens), ``wait_for_port`` (a server process
came up), and small HTTP servers for the tests that need a site, a service or an API to talk to:
``serve(handler)`` starts one in a daemon thread, ``stop(server)`` ends it, and ``QuietHandler`` is a
request handler that logs nothing and answers a body in one call."""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading
import time
from typing import Any


def free_port() -> int:
    """A loopback port nobody listens on (bound and closed again at once: connecting is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, limit: float = 30.0) -> None:
    """Wait until something listens on loopback ``port``; fails at once if ``proc`` (the server) exits."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"the server exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port} after {limit} s")


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that logs nothing; ``reply`` sends a whole response."""

    def reply(
        self, body: bytes, content_type: str | None = None, status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        """Send ``status`` with the content type, the other ``headers`` and the body's length, then the body."""
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def redirect(self, location: str) -> None:
        """Send a 302 to ``location``, with no body."""
        self.send_response(302)
        self.send_header("Location", location)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def start_listening(argv: list[str], port: int, *, limit: float = 30.0, **popen: Any) -> subprocess.Popen:
    """A server process ``argv`` (its stderr kept, as text, for the failure message) once it listens
    on loopback ``port``; killed again if it never does."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **popen)
    try:
        wait_for_port(port, proc, limit=limit)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def attachment(filename: str) -> dict[str, str]:
    """The header that makes a browser save the response as a download named ``filename``."""
    return {"Content-Disposition": f'attachment; filename="{filename}"'}


def serve(
    handler: type[http.server.BaseHTTPRequestHandler], server_class: Any = http.server.ThreadingHTTPServer
) -> Any:
    """A ``server_class`` serving ``handler`` on 127.0.0.1 at a free port, in a daemon thread."""
    server = server_class(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server: http.server.HTTPServer) -> None:
    """Stop serving and close the listening socket."""
    server.shutdown()
    server.server_close()
