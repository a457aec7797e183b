"""An MCP server for the tests, run as its own process: ``python tests/mcp_test_server.py [MODE] [PORT]``.

MODE ``tools`` (the default) serves a few tools over stdio with the SDK's ``MCPServer``; ``http PORT``
serves the same tools over streamable HTTP on 127.0.0.1. The other modes misbehave on purpose,
speaking raw JSON-RPC over stdio: ``crash`` exits at once, ``bad-version`` answers the handshake
with a protocol version no client knows, ``hang`` never answers, ``not-mcp`` prints prose,
``malformed`` answers tools/call with a result that is not a CallToolResult, ``bad-tools`` lists
one good tool and one whose input schema is not JSON Schema.
"""

from __future__ import annotations

import json
import os
import sys
import time


def serve_tools(transport: str = "stdio", port: int = 0) -> None:
    """The well-behaved server (MCPServer from the official SDK). It refuses to start while the file
    named by TESTSRV_CRASH_FLAG exists (how a test makes a restart fail)."""
    flag = os.environ.get("TESTSRV_CRASH_FLAG")
    if flag and os.path.exists(flag):
        print("testsrv: cannot start (on purpose)", file=sys.stderr)
        sys.exit(1)
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("testsrv", log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Echo a text back."""
        return text

    @server.tool()
    def forecast(city: str, days: int = 1) -> dict:
        """The weather forecast of a city (structured)."""
        return {"city": city, "days": days, "sky": "clear"}

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    def getenv(name: str) -> str:
        """The value of an environment variable of the server ('' when unset)."""
        return os.environ.get(name, "")

    @server.tool()
    def die() -> str:
        """Exit the server process in the middle of the call."""
        os._exit(3)

    @server.tool()
    def huge(n: int) -> str:
        """A text of n characters."""
        return "x" * n

    @server.tool()
    def slow(seconds: float) -> str:
        """Answer after a while."""
        time.sleep(seconds)
        return "late"

    @server.tool()
    def fail(message: str) -> str:
        """Raise an error with the message."""
        raise ValueError(message)

    if transport == "http":
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()


# -- misbehaving servers, raw JSON-RPC over stdio ---------------------------------------------------------
def _send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _raw(mode: str) -> None:
    version = "1999-01-01" if mode == "bad-version" else None
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:
            continue  # a notification
        if mode == "hang":
            continue
        if method == "initialize":
            result = {
                "protocolVersion": version or msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": mode, "version": "0"},
            }
            _send({"jsonrpc": "2.0", "id": mid, "result": result})
        elif method == "tools/list":
            tools = [{"name": "fine", "description": "A fine tool.", "inputSchema": {"type": "object"}}]
            if mode == "bad-tools":
                tools.append(
                    {
                        "name": "broken",
                        "description": "Bad schema.",
                        "inputSchema": {"type": "object", "properties": {"x": {"type": "nonsense"}}},
                    }
                )
            _send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
        elif method == "tools/call":
            _send({"jsonrpc": "2.0", "id": mid, "result": {"content": "not a list", "isError": "maybe"}})
        else:
            _send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": f"no method {method}"}})


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "tools"
    if mode == "tools":
        serve_tools()
    elif mode == "http":
        serve_tools("http", int(sys.argv[2]))
    elif mode == "crash":
        print("testsrv: cannot start (on purpose)", file=sys.stderr)
        sys.exit(1)
    elif mode == "not-mcp":
        print("hello, I am not an MCP server")
        sys.stdout.flush()
        time.sleep(60)
    else:
        _raw(mode)


if __name__ == "__main__":
    main()
