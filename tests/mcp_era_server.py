"""An MCP server that speaks exactly one protocol era, over real HTTP, for the version tests:
``python tests/mcp_era_server.py MODE PORT LOG``.

MODE ``modern`` speaks only 2026-07-28: stateless, every request a self-contained POST whose ``_meta``
and ``MCP-Protocol-Version`` header name the version; ``server/discover`` answers, ``initialize`` is
refused with -32022 (the versions it speaks), and it never sends nor accepts ``Mcp-Session-Id``.
MODE ``legacy`` speaks only 2025-11-25: the ``initialize`` handshake makes a session
(``Mcp-Session-Id``); any other request without that session is refused with HTTP 400, as the
streamable-HTTP transport of that version does (``server/discover`` included).

Both serve one tool, ``add``; with ``ERA_TOKEN`` set, a request without ``Authorization: Bearer
$ERA_TOKEN`` gets 401. Each request is appended to LOG as a JSON line (method, the protocol
header, the session header) so a test can check what went over the wire. Written from the
specification's wire format with the standard library only, so the SDK's own dual-era server is not
what is tested.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
TOOLS = [
    {
        "name": "add",
        "description": "Add two integers.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    }
]
SERVER_INFO = {"name": "era-server", "version": "1.0"}
#: the caching directives 2026-07-28 requires on server/discover and list results (SEP-2549)
CACHE = {"ttlMs": 0, "cacheScope": "private"}


class Handler(BaseHTTPRequestHandler):
    mode = "modern"
    log_path = ""
    sessions: set[str] = set()

    def log_message(self, *args: Any) -> None:  # quiet
        return

    def _reply(self, status: int, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - no standing stream in either mode
        self._reply(405)

    def do_DELETE(self) -> None:  # noqa: N802
        self.sessions.discard(self.headers.get("Mcp-Session-Id", ""))
        self._reply(200 if self.mode == "legacy" else 405)

    def do_POST(self) -> None:  # noqa: N802
        message = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        method, mid = message.get("method"), message.get("id")
        session = self.headers.get("Mcp-Session-Id")
        with open(self.log_path, "a", encoding="utf-8") as log:
            entry = {"method": method, "version": self.headers.get("MCP-Protocol-Version"), "session": session}
            log.write(json.dumps(entry) + "\n")
        token = os.environ.get("ERA_TOKEN")
        if token and self.headers.get("Authorization") != f"Bearer {token}":
            self._reply(401, {"error": "unauthorized"}, {"WWW-Authenticate": "Bearer"})
            return
        if mid is None:  # a notification
            self._reply(202)
            return
        if self.mode == "modern":
            self._modern(message, method, mid, session)
        else:
            self._legacy(message, method, mid, session)

    def _error(self, status: int, mid: Any, code: int, text: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": code, "message": text}
        if data is not None:
            error["data"] = data
        self._reply(status, {"jsonrpc": "2.0", "id": mid, "error": error})

    def _modern(self, message: dict[str, Any], method: str, mid: Any, session: str | None) -> None:
        meta = (message.get("params") or {}).get("_meta") or {}
        version = meta.get("io.modelcontextprotocol/protocolVersion")
        if session is not None:
            self._error(400, mid, -32600, "this server is stateless: no Mcp-Session-Id")
            return
        if method == "initialize" or version != MODERN or self.headers.get("MCP-Protocol-Version") != MODERN:
            requested = version or (message.get("params") or {}).get("protocolVersion")
            data = {"supported": [MODERN], "requested": requested}
            self._error(400, mid, -32022, "Unsupported protocol version", data)
            return
        if method == "server/discover":
            result: dict[str, Any] = {
                "supportedVersions": [MODERN],
                "capabilities": {"tools": {}},
                "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
                **CACHE,
            }
        elif method == "tools/list":
            result = {"tools": TOOLS, **CACHE}
        elif method == "tools/call":
            result = self._call(message)
        else:
            self._error(404, mid, -32601, f"no method {method}")
            return
        self._reply(200, {"jsonrpc": "2.0", "id": mid, "result": {"resultType": "complete", **result}})

    def _legacy(self, message: dict[str, Any], method: str, mid: Any, session: str | None) -> None:
        if method == "initialize":
            new = secrets.token_hex(8)
            self.sessions.add(new)
            result = {"protocolVersion": LEGACY, "capabilities": {"tools": {}}, "serverInfo": SERVER_INFO}
            self._reply(200, {"jsonrpc": "2.0", "id": mid, "result": result}, {"Mcp-Session-Id": new})
            return
        if session not in self.sessions:
            self._error(400, mid, -32000, "Bad Request: No valid session ID provided")
            return
        if method == "tools/list":
            result: dict[str, Any] = {"tools": TOOLS}
        elif method == "tools/call":
            result = self._call(message)
        elif method == "ping":
            result = {}
        else:
            self._error(200, mid, -32601, f"no method {method}")
            return
        self._reply(200, {"jsonrpc": "2.0", "id": mid, "result": result})

    @staticmethod
    def _call(message: dict[str, Any]) -> dict[str, Any]:
        args = (message.get("params") or {}).get("arguments") or {}
        total = int(args.get("a", 0)) + int(args.get("b", 0))
        return {"content": [{"type": "text", "text": str(total)}], "isError": False}


def main() -> None:
    mode, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    Handler.mode, Handler.log_path = mode, log
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
