"""MCP export: a workspace's tools, and its agents as tools (A2T), served to any MCP client.

``tea mcp serve --workspace W --tools a,b --agents x`` (or :func:`serve`) runs an MCP server, built
on the official SDK's low-level ``Server``, over stdio or streamable HTTP, answering clients of
2026-07-28 (stateless requests) and of 2025-11-25 (the handshake) alike. Only what is named is
exported; at least one tool or agent must be. Calls go through the registries exactly as calls
from a cell do (schema checks, sandboxes for generated tools, usage counts); results and errors
pass through :func:`tea_notebook.redaction.redact` before they leave, so secrets never cross.

Over HTTP every request must carry ``Authorization: Bearer <token>``: the token comes from an
environment variable (``TEA_MCP_TOKEN``, or the one named by ``--token-env``) or is generated and
shown once on stderr. A missing or wrong token gets 401 (compared in constant time; the token is
never logged). Host and Origin headers are checked against the names the server answers to (the
SDK's DNS-rebinding protection), and an address other than loopback needs ``allow_remote=True``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import re
import secrets
import socket
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError as JSONSchemaError

from tea_notebook.errors import NotFoundError, TeaError
from tea_notebook.protocol.context import Context
from tea_notebook.protocol.records import ToolRecord
from tea_notebook.redaction import redact

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost

TRANSPORTS = ("stdio", "http")
#: the environment variable an HTTP server reads its bearer token from when no other is named
TOKEN_ENV = "TEA_MCP_TOKEN"
#: the shortest bearer token accepted (a generated one has 43 characters)
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class Export:
    """One exported tool: its MCP name, the record it shows, and what runs behind it."""

    name: str
    kind: str  # "tool" or "agent"
    target: str
    record: ToolRecord
    output_schema: dict[str, Any] | None
    wrapped: bool


def _output_schema(returns: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """The MCP output schema of a record's ``returns`` (``{"result": ...}`` around a non-object)."""
    if not returns:
        return None, False
    try:
        Draft202012Validator.check_schema(returns)
    except JSONSchemaError:
        return None, False
    if returns.get("type") == "object":
        return returns, False
    return {"type": "object", "properties": {"result": returns}, "required": ["result"]}, True


def exports(ws: "RunHost", tools: Iterable[str] = (), agents: Iterable[str] = ()) -> dict[str, Export]:
    """What a server of ``ws`` offers: the named tools and agents (as A2T tools). Raises a TeaError
    naming what is missing, or when nothing is named."""
    from tea_notebook.protocol.transformations import a2t_record

    tools, agents = [t for t in tools if t], [a for a in agents if a]
    if not tools and not agents:
        raise TeaError("nothing to export: name tools with --tools a,b and/or agents with --agents x,y")
    missing = [t for t in tools if t not in ws.tools]
    missing += [f"agent {a}" for a in agents if a not in ws.agents]
    if missing:
        raise NotFoundError(f"not registered in {ws.path}: {', '.join(missing)}")
    out: dict[str, Export] = {}
    for name in tools:
        record = ws.tools.get(name)
        schema, wrapped = _output_schema(record.returns)
        out[name] = Export(name, "tool", name, record, schema, wrapped)
    for agent in agents:
        record = a2t_record(ws, agent)
        if record.name in out:
            raise TeaError(f"agent {agent!r} would be exported as {record.name!r}, which is also an exported tool")
        schema, wrapped = _output_schema(record.returns)
        out[record.name] = Export(record.name, "agent", agent, record, schema, wrapped)
    return out


def build_server(
    ws: "RunHost", tools: Iterable[str] = (), agents: Iterable[str] = (), *, name: str | None = None
) -> Any:
    """An SDK ``Server`` offering the named tools and agents of ``ws``."""
    import mcp.types as types
    from mcp.server import Server

    from tea_notebook.version import __version__

    offered = exports(ws, tools, agents)
    listing = [
        types.Tool(
            name=e.name,
            description=str(redact(e.record.description, keys=False)),
            input_schema=redact(e.record.parameters, keys=False),
            output_schema=e.output_schema,
        )
        for e in offered.values()
    ]

    def error(text: str) -> Any:
        return types.CallToolResult(content=[types.TextContent(type="text", text=str(redact(text)))], is_error=True)

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listing)

    async def call_tool(ctx: Any, params: Any) -> Any:
        entry = offered.get(params.name)
        if entry is None:
            return error(f"no tool named {params.name!r} is exported by this server")
        args = dict(params.arguments or {})
        try:
            if entry.kind == "tool":
                result = await ws.tools.ainvoke(entry.target, args, Context())
            else:
                files = args.get("files")
                bad = (
                    set(args) - {"task", "files"}
                    or not isinstance(args.get("task"), str)
                    or not isinstance(files or [], list)
                )
                if bad:
                    return error(f"{entry.name} takes {{'task': str, 'files': [str]}}, not {json.dumps(args)[:200]}")
                result = await ws.agents.ainvoke(entry.target, args["task"], files, Context())
        except Exception as exc:  # noqa: BLE001 - whatever happens, the client gets an answer, redacted
            return error(f"{type(exc).__name__}: {exc}")
        if not result.ok:
            err = result.error or {}
            return error(f"{err.get('type', 'Error')}: {err.get('message', '')}")
        value = redact(result.value)
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        content = [types.TextContent(type="text", text=text)]
        if entry.output_schema is None:
            return types.CallToolResult(content=content)
        structured = {"result": value} if entry.wrapped else value
        problem = next(iter(Draft202012Validator(entry.output_schema).iter_errors(structured)), None)
        if problem is not None:
            return error(f"{entry.name} returned a value that does not match its declared output: {problem.message}")
        return types.CallToolResult(content=content, structured_content=structured)

    return Server(
        name or ws.path.name,
        version=__version__,
        instructions=f"Tools and agents of the tea_notebook workspace {ws.path.name}.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is reached only from this machine."""
    if host.strip("[]").lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in found)


def bind_address(host: str) -> str:
    """The address the HTTP server binds: an IPv6 address may be written as in a URL (``[::1]``) and is
    bound without its brackets; a TeaError naming a malformed ``host`` (unbalanced brackets, brackets
    around anything but an IPv6 address, nothing at all)."""
    text = host.strip()
    if not text:
        raise TeaError("--host must not be empty")
    if not (text.startswith("[") or text.endswith("]")):
        return text
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else ""
    try:
        ipaddress.IPv6Address(inner)
    except ValueError:
        raise TeaError(f"--host {host}: brackets go around an IPv6 address only, as in [::1]") from None
    return inner


def http_token(token_env: str | None = None) -> tuple[str, str]:
    """The bearer token an HTTP server requires and where it came from: the variable ``token_env``
    names (an error when it is unset, empty or short), else ``TEA_MCP_TOKEN`` when set, else a new
    one (``"generated"``)."""
    name = token_env or TOKEN_ENV
    value = os.environ.get(name)
    if value is None or not value.strip():
        if token_env:
            raise TeaError(f"--token-env {token_env}: the environment variable {token_env} is not set (or empty)")
        return secrets.token_urlsafe(32), "generated"
    value = value.strip()
    if len(value) < MIN_TOKEN_CHARS:
        raise TeaError(
            f"the token in {name} has {len(value)} characters; use at least {MIN_TOKEN_CHARS} "
            "(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return value, name


def answered_hosts(host: str, port: int, extra: Iterable[str] = ()) -> list[str]:
    """The ``Host`` header values the server answers to: the loopback names, the address it is bound
    to, ``extra`` names, and this machine's names when bound to every address."""
    names = ["127.0.0.1", "localhost", "[::1]"]
    bare = host.strip("[]")
    if bare not in ("0.0.0.0", "::", ""):  # noqa: S104 - a comparison, not a bind
        names.append(f"[{bare}]" if ":" in bare else bare)
    else:
        names += [socket.gethostname(), socket.getfqdn()]
    for name in (e.strip() for e in extra):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.\-]*|\[[0-9A-Fa-f:.]+\]", name):
            raise TeaError(f"--allowed-host {name!r}: give a host name or address, without a port or wildcard")
        names.append(name)
    out = []
    for name in dict.fromkeys(n.lower() for n in names if n):
        out.append(f"{name}:{port}")
        if port in (80, 443):
            out.append(name)
    return out


def transport_security(host: str, port: int, extra: Iterable[str] = ()) -> Any:
    """The SDK's DNS-rebinding protection for this server: Host must be one of :func:`answered_hosts`,
    an Origin (sent by browsers) one of the same names over http or https."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = answered_hosts(host, port, extra)
    origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


class BearerAuth:
    """ASGI middleware: an HTTP request passes only with ``Authorization: Bearer <token>`` (one
    such header, compared in constant time); anything else gets 401 before the MCP app sees it."""

    def __init__(self, app: Any, token: str):
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope.get("type") != "http":  # a websocket (no route takes one): closed before it is accepted
            await send({"type": "websocket.close", "code": 1008})
            return
        given = [v for k, v in scope.get("headers") or [] if k.lower() == b"authorization"]
        scheme, _, presented = (given[0] if len(given) == 1 else b"").partition(b" ")
        ok = scheme.lower() == b"bearer" and hmac.compare_digest(presented.strip(), self._token)
        if ok:
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {"error": "unauthorized", "message": "this MCP server needs the header 'Authorization: Bearer <token>'"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="tea mcp"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def http_app(
    ws: "RunHost",
    tools: Iterable[str] = (),
    agents: Iterable[str] = (),
    *,
    token: str,
    host: str = "127.0.0.1",
    port: int = 8765,
    allowed: Iterable[str] = (),
    name: str | None = None,
) -> Any:
    """The ASGI app of an HTTP server: the MCP endpoint at ``/mcp`` behind :class:`BearerAuth` and
    the Host/Origin checks of :func:`transport_security`."""
    if len(token) < MIN_TOKEN_CHARS:
        raise TeaError(f"an MCP server's bearer token needs at least {MIN_TOKEN_CHARS} characters")
    server = build_server(ws, tools, agents, name=name)
    app = server.streamable_http_app(host=host, transport_security=transport_security(host, port, allowed))
    return BearerAuth(app, token)


async def serve(
    ws: "RunHost",
    tools: Iterable[str] = (),
    agents: Iterable[str] = (),
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    name: str | None = None,
    token: str | None = None,
    allow_remote: bool = False,
    allowed_hosts: Iterable[str] = (),
) -> None:
    """Serve the named tools and agents until the client goes (stdio) or the process is stopped (HTTP,
    at ``http://HOST:PORT/mcp``, for clients sending ``Authorization: Bearer <token>``).

    Over HTTP, ``token`` is required (see :func:`http_token` for the command line's), a non-loopback
    ``host`` needs ``allow_remote=True`` and is warned about, and ``allowed_hosts`` adds names
    clients may use in the Host header (a name the machine is reached by)."""
    if transport not in TRANSPORTS:
        raise TeaError(f"transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
    if transport == "stdio":
        from mcp.server.stdio import stdio_server

        server = build_server(ws, tools, agents, name=name)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    check_bind(host, allow_remote)
    if not token:
        raise TeaError("an MCP server over HTTP needs a bearer token (token=...; tea mcp serve makes one)")
    import uvicorn

    bind = bind_address(host)
    app = http_app(ws, tools, agents, token=token, host=bind, port=port, allowed=allowed_hosts, name=name)
    config = uvicorn.Config(app, host=bind, port=port, log_level="warning", lifespan="on", access_log=False)
    shown = f"[{bind}]" if ":" in bind else bind
    print(f"tea mcp serve: http://{shown}:{port}/mcp ({ws.path})", file=sys.stderr, flush=True)
    await uvicorn.Server(config).serve()


def check_bind(host: str, allow_remote: bool, *, warn: bool = True) -> None:
    """Refuse a malformed ``host`` (:func:`bind_address`), and a non-loopback one unless ``allow_remote``;
    warn (on stderr) when it is allowed."""
    bind_address(host)
    if is_loopback(host):
        return
    if not allow_remote:
        raise TeaError(
            f"--host {host} is not a loopback address: the server would be reachable from other machines. "
            "Pass --allow-remote to mean it (clients then need the token; traffic is plain HTTP: put TLS in front)"
        )
    if not warn:
        return
    print(
        f"tea mcp serve: WARNING: listening on {host}, reachable from other machines; only clients with the token "
        "get in, but plain HTTP shows it to anyone on the network path: put TLS (a reverse proxy) in front",
        file=sys.stderr,
        flush=True,
    )


__all__ = [
    "TOKEN_ENV",
    "BearerAuth",
    "answered_hosts",
    "bind_address",
    "Export",
    "build_server",
    "check_bind",
    "exports",
    "http_app",
    "http_token",
    "is_loopback",
    "serve",
    "transport_security",
]
