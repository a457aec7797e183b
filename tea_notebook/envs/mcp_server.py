"""MCP export: a workspace's tools, and its agents as tools (A2T), served to any MCP client.

``tea mcp serve --workspace W --tools a,b --agents x`` (or :func:`serve`) runs an MCP server, built
on the official SDK's low-level ``Server``, over stdio or streamable HTTP. Only what is named is
exported; at least one tool or agent must be. Calls go through the registries exactly as calls
from a cell do (schema checks, sandboxes for generated tools, usage counts); results and errors
pass through :func:`tea_notebook.redaction.redact` before they leave, so secrets never cross.
"""

from __future__ import annotations

import json
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
    from tea_notebook.workspace import Workspace

TRANSPORTS = ("stdio", "http")


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


def exports(ws: "Workspace", tools: Iterable[str] = (), agents: Iterable[str] = ()) -> dict[str, Export]:
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
    ws: "Workspace", tools: Iterable[str] = (), agents: Iterable[str] = (), *, name: str | None = None
) -> Any:
    """An SDK ``Server`` offering the named tools and agents of ``ws``."""
    import mcp.types as types
    from mcp.server import Server

    from tea_notebook import __version__

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


async def serve(
    ws: "Workspace",
    tools: Iterable[str] = (),
    agents: Iterable[str] = (),
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    name: str | None = None,
) -> None:
    """Serve the named tools and agents until the client goes (stdio) or the process is stopped (HTTP,
    at ``http://HOST:PORT/mcp``)."""
    if transport not in TRANSPORTS:
        raise TeaError(f"transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
    server = build_server(ws, tools, agents, name=name)
    if transport == "stdio":
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    import uvicorn

    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    print(f"tea mcp serve: http://{host}:{port}/mcp ({ws.path})", file=sys.stderr, flush=True)
    await uvicorn.Server(config).serve()


__all__ = ["Export", "build_server", "exports", "serve"]
