"""MCP import: tools of an MCP server registered in TCP and invoked through a live session.

A connection to an MCP server (over stdio: a command with arguments and environment; or streamable
HTTP: a URL) is a session of ECP's session manager, like a sandbox: :class:`MCPConnection` is
started on the first call (one per run, the interactive one outside runs), stopped when the run
ends, and killed at interpreter exit. The workspace hands TCP an :class:`MCPClients` (TCP imports
nothing from here); ``ws.tools.import_mcp(...)`` lists the server's tools and registers them, all
or none, as a toolkit named after the server, each record keeping the server's spec so that after a
kernel restart the first call connects again. A server that died is restarted at the next call,
once; if it dies again before answering, the call reports it. Both protocol eras are spoken: the
client asks ``server/discover`` first (2026-07-28: stateless, no handshake, no session) and falls
back to the ``initialize`` handshake (2025-11-25 and before).

Secrets stay out of the workspace database. Every ``env`` value is stored as a ``${NAME}``
reference (its name: ``env={"DB_PASS": "x"}`` is stored as ``${DB_PASS}``); so is a header whose
name or value looks secret (``${MCP_<HEADER>}``), the value of a command-line flag whose name does
(``--db-password X``, ``--token=X``, ``--api-key X``: ``${MCP_<SERVER>_<FLAG>}``) and any argument
shaped like a secret. The values given stay in memory for this process; after a restart they are
read from the process environment, and a missing variable is an error naming it. A value may be
written as a reference from the start (``headers={"Authorization": "Bearer ${TEA_MCP_TOKEN}"}``):
it is stored as written and filled in at every connection.

What a server says about itself is not trusted: a message that cannot be read (prose, JSON nested too
deeply) ends the connection at once with the reason; a tool description is clipped to
:data:`MAX_DESCRIPTION_CHARS` before it is stored (the prompt marks it as coming from the server),
parameter descriptions inside its schema too, and a tool whose name is one of the runtime's own
actions (:mod:`tea_notebook.protocol.reserved`) makes the whole import fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError as JSONSchemaError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tea_notebook._poll import readable
from tea_notebook.envs.base import Environment, EnvironmentFailure
from tea_notebook.envs.safe_open import Beneath
from tea_notebook.envs.sessions import EnvironmentRuntime, session_key
from tea_notebook.errors import RegistryError
from tea_notebook.protocol.context import Context
from tea_notebook.protocol.records import MAX_DESCRIPTION_CHARS, NAME_PATTERN, ToolkitRecord, ToolRecord
from tea_notebook.protocol.reserved import reserved_by
from tea_notebook.redaction import is_secret_name, redact

if TYPE_CHECKING:
    from tea_notebook.envs.sessions import SessionManager
    from tea_notebook.protocol.tcp import ToolRegistry

_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_REFERENCES = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_STDERR_TAIL = 1200
#: the largest input schema (as JSON, after clipping its descriptions) an imported tool may have
MAX_SCHEMA_CHARS = 64_000
# a command-line flag whose value is a secret: --db-password X, --token=X, --api-key X (not
# --password-file PATH or --token-env NAME, which name where the secret is)
_SECRET_FLAG = re.compile(r"^--?(?P<name>[A-Za-z0-9][A-Za-z0-9_.\-]*)(?:=(?P<value>.*))?$", re.S)
_SECRET_FLAG_WORD = re.compile(r"pass|pwd|secret|token|key|auth|credential", re.I)
_NOT_A_SECRET_FLAG = re.compile(r"[_\-](?:file|path|env|var|dir)$", re.I)


class MCPFailure(EnvironmentFailure):
    """An MCP server could not be reached, broke the protocol, or failed a call; names the server."""


class _ServerGone(MCPFailure):
    """The server was found dead before a call was sent (the caller restarts it once)."""


class MCPServerSpec(BaseModel):
    """How to reach one MCP server: ``command`` (+ ``args``, ``env``, ``cwd``) for stdio, or ``url``
    (+ ``headers``) for streamable HTTP; limits for connecting, each call and each result."""

    model_config = ConfigDict(extra="forbid")

    name: str
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    connect_timeout: float = 30.0
    call_timeout: float = 60.0
    max_result_chars: int = 100_000

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not NAME_PATTERN.match(value):
            raise ValueError(
                f"{value!r} is not a valid MCP server name (it names the toolkit): letters, digits, '_' or '-'"
            )
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> "MCPServerSpec":
        if bool(self.command) == bool(self.url):
            raise ValueError("give an MCP server either a command (stdio) or a url (streamable HTTP), not both")
        if self.url and not _REFERENCE.match(self.url) and not re.match(r"^https?://", self.url):
            raise ValueError(f"an MCP server url must start with http:// or https://, not {self.url!r}")
        for label, value in (("connect_timeout", self.connect_timeout), ("call_timeout", self.call_timeout)):
            if value <= 0:
                raise ValueError(f"{label} must be positive")
        if self.max_result_chars < 1:
            raise ValueError("max_result_chars must be positive")
        return self

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"``."""
        return "stdio" if self.command else "http"

    @property
    def where(self) -> str:
        """The command line or URL, for messages and provenance (secret arguments as references)."""
        text = " ".join([self.command or "", *self.stored_args()]) if self.command else str(self.url)
        return str(redact(text))

    def stored_args(self) -> list[str]:
        """``args`` as stored: the value of a secret-named flag (``--db-password X``, ``--token=X``)
        and any secret-shaped argument replaced by a ``${NAME}`` reference."""
        out: list[str] = []
        secret_next: str | None = None
        for i, arg in enumerate(self.args):
            if secret_next is not None and not arg.startswith("-"):
                out.append(_reference(secret_next, arg, env_name=_arg_env(self.name, secret_next), always=True))
                secret_next = None
                continue
            secret_next = None
            flag = _SECRET_FLAG.match(arg)
            if flag and _is_secret_flag(flag.group("name")):
                if flag.group("value") is None:
                    secret_next = flag.group("name")
                    out.append(arg)
                else:
                    env_name = _arg_env(self.name, flag.group("name"))
                    value = _reference(flag.group("name"), flag.group("value"), env_name=env_name, always=True)
                    out.append(arg[: flag.start("value")] + value)
                continue
            out.append(_reference(f"argument {i + 1}", arg, env_name=_arg_env(self.name, f"ARG{i + 1}")))
        return out

    def stored(self) -> dict[str, Any]:
        """The spec as kept in the tool records: every ``env`` value, and secret headers and
        arguments, replaced by ``${NAME}`` references (the values given stay in this process)."""
        data = self.model_dump(mode="json")
        data["args"] = self.stored_args()
        data["env"] = {k: _reference(k, v, always=True) for k, v in self.env.items()}
        data["headers"] = {k: _reference(k, v, env_name=_header_env(k)) for k, v in self.headers.items()}
        if self.url and redact(self.url) != self.url:  # a password or token in the URL itself
            data["url"] = _reference("url", self.url, env_name=_arg_env(self.name, "URL"), always=True)
        return data

    def references(self) -> dict[str, str]:
        """``{where: NAME}`` for every value the stored spec reads from the environment: what must be
        set for the server to be reached again after a restart."""
        stored = self.stored()
        found: dict[str, str] = {}
        if stored["url"] and _REFERENCE.match(stored["url"]):
            found["url"] = _REFERENCE.match(stored["url"]).group(1)
        for label, values in (("env", stored["env"]), ("header", stored["headers"])):
            for key, value in values.items():
                for name in _REFERENCES.findall(value):
                    found[f"{label} {key}"] = name
        for i, arg in enumerate(stored["args"]):
            for name in _REFERENCES.findall(arg):
                found[f"argument {i + 1} ({arg.split('=', 1)[0] if arg.startswith('-') else 'value'})"] = name
        return found

    def resolved(self, what: str) -> Any:
        """``env``, ``headers`` or ``args`` with ``${NAME}`` references filled in from the process
        environment; a variable that is not set is an error naming it."""
        label = {"env": "env", "headers": "header", "args": "argument"}[what]
        values = getattr(self, what)
        items = list(enumerate(values)) if isinstance(values, list) else list(values.items())
        out = [(key, self._expand(label, key, value)) for key, value in items]
        return [v for _, v in out] if isinstance(values, list) else dict(out)

    def _expand(self, label: str, key: Any, value: str) -> str:
        def fill(match: re.Match[str]) -> str:
            found = os.environ.get(match.group(1))
            if found is None:
                where = f"argument {key + 1}" if isinstance(key, int) else f"{label} {key!r}"
                raise MCPFailure(
                    f"MCP server {self.name!r}: {where} refers to ${{{match.group(1)}}}, which is not set in this "
                    "process's environment (values given at import are not stored in the workspace: set "
                    f"{match.group(1)}, or import the server again)"
                )
            return found

        return _REFERENCES.sub(fill, value)


def bearer_reference(env_name: str) -> str:
    """The ``Authorization`` header value of ``%tea mcp add --token-env NAME``: ``Bearer ${NAME}``, a
    reference filled in from the process environment at every connection (never from a Python
    variable, never stored as a value). A RegistryError names a variable that is not a valid name or
    not set (or empty) now."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env_name or ""):
        raise RegistryError(f"--token-env {env_name!r}: give the name of an environment variable (letters, digits, _)")
    if not os.environ.get(env_name, "").strip():
        raise RegistryError(
            f"--token-env {env_name}: the environment variable {env_name} is not set (or empty) in this process"
        )
    return f"Bearer ${{{env_name}}}"


def _header_env(header: str) -> str:
    return "MCP_" + re.sub(r"[^A-Za-z0-9]+", "_", header).upper()


def _arg_env(server: str, flag: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", f"MCP_{server}_{flag}").upper().strip("_")


def _is_secret_flag(name: str) -> bool:
    return bool(_SECRET_FLAG_WORD.search(name)) and not _NOT_A_SECRET_FLAG.search(name)


def _reference(key: str, value: str, env_name: str | None = None, always: bool = False) -> str:
    """``value`` as stored: kept when it is only references (``${NAME}``, ``Bearer ${NAME}``) or,
    unless ``always``, when neither its name nor its text looks secret; else a ``${NAME}`` reference."""
    if _REFERENCE.match(value):
        return value
    literal = _REFERENCES.sub("", value)
    if _REFERENCES.search(value) and re.fullmatch(r"\s*(?:(?:Bearer|Basic|Token|Bot|Digest)\s+)?", literal, re.I):
        return value  # "Bearer ${TOKEN}": an auth scheme and references, nothing secret
    if always or is_secret_name(key) or redact(value, keys=key.startswith("argument ")) != value:
        return f"${{{env_name or key}}}"
    return value


# -- the live session -------------------------------------------------------------------------------
class MCPConnection(Environment):
    """One live connection to an MCP server (a session of ECP's session manager).

    The SDK's transports and ``ClientSession`` are async context managers that must be entered and
    left by one task, so the connection lives in its own task on the session manager's loop; calls
    from other tasks use the session it holds.
    """

    name = "mcp"
    description = "A live connection to an MCP server."
    scope = "run"
    stop_timeout = 15.0

    def __init__(self, folder: Path, context: Context | None = None, *, spec: dict[str, Any], **config: Any):
        super().__init__(folder, context, **config)
        self.spec = MCPServerSpec.model_validate(spec)
        self.start_timeout = self.spec.connect_timeout + 20.0  # the manager's backstop; start() keeps its own
        self.session: Any = None
        self.tools: list[Any] = []
        self._wrapped: set[str] = set()  # tools whose structured result is {"result": value}
        self.server_info: dict[str, Any] = {}
        self.protocol_version = ""
        self.pid: int | None = None
        self._pidfd: int | None = None  # readable once the server process has exited (Linux)
        self.closed = False
        self._task: asyncio.Task | None = None
        self._leave: asyncio.Event | None = None
        self._bad: list[tuple[str, str]] = []  # (what the server sent, why it cannot be read) when known
        self._stderr: Path | None = None
        self._refused: int | None = None  # an HTTP status 401 / 403 seen while connecting

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the server (stdio) or connect (HTTP), do the handshake and list the tools."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future = loop.create_future()
        self._leave = asyncio.Event()
        self._task = loop.create_task(self._hold(ready), name=f"mcp:{self.spec.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.spec.connect_timeout)
        except asyncio.TimeoutError:
            raise MCPFailure(
                f"MCP server {self.spec.name!r} did not answer the handshake within "
                f"{self.spec.connect_timeout:g} s ({self.spec.where}){self._stderr_tail()}"
            ) from None

    async def _hold(self, ready: asyncio.Future) -> None:
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                streams = await self._open(stack)
                session = await stack.enter_async_context(
                    ClientSession(*streams, message_handler=self._on_message, client_info=_client_info())
                )
                await self._handshake(session)
                self.session = session
                ready.set_result(None)
                await self._leave.wait()  # type: ignore[union-attr]
        except BaseException as exc:  # noqa: BLE001 - handed to start(), or the connection is gone
            if not ready.done():
                ready.set_exception(self._explain_start(exc))
                ready.exception()  # start() may have given up waiting: mark it retrieved
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.session = None
            self.closed = True

    async def _open(self, stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        spec = self.spec
        if spec.transport == "stdio":
            from mcp import StdioServerParameters, stdio_client

            errlog = stack.enter_context(self._open_log("write"))
            params = StdioServerParameters(
                command=spec.command, args=spec.resolved("args"), env=spec.resolved("env") or None, cwd=spec.cwd
            )
            before = _children()
            streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            self.pid = _find_child(before, [spec.command or "", *spec.args])
            self._pidfd = _open_pidfd(self.pid)
            stack.callback(self._close_pidfd)
            return streams[0], streams[1]
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        # the SDK's default read timeout (a server may hold a response stream open); ours to connect
        timeout = httpx2.Timeout(max(30.0, spec.call_timeout), connect=spec.connect_timeout, read=300.0)

        async def refused(response: Any) -> None:
            if response.status_code in (401, 403) and self.session is None:
                self._refused = response.status_code

        client = await stack.enter_async_context(
            httpx2.AsyncClient(headers=spec.resolved("headers"), timeout=timeout, event_hooks={"response": [refused]})
        )
        url = spec._expand("url", "url", spec.url or "")
        if not re.match(r"^https?://", url):
            raise MCPFailure(f"MCP server {spec.name!r}: its url must start with http:// or https://")
        streams = await stack.enter_async_context(streamable_http_client(url, http_client=client))
        return streams[0], streams[1]

    async def _handshake(self, session: Any) -> None:
        await self._watching(self._negotiate(session), "the handshake")
        self.protocol_version = session.protocol_version or ""
        info = session.server_info
        self.server_info = {"name": info.name, "version": info.version} if info is not None else {}
        tools, cursor = [], None
        while True:
            from mcp.types import PaginatedRequestParams

            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._watching(session.list_tools(params=params), "the list of its tools")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = tools
        self._wrapped = {t.name for t in tools if _is_wrapped(t.output_schema)}

    async def _negotiate(self, session: Any) -> None:
        """The protocol version: 2026-07-28's ``server/discover`` first (stateless: no handshake, no
        session), else the ``initialize`` handshake of 2025-11-25 and before. Anything but a
        discover result naming a version both sides speak falls back to the handshake, except a
        server that names only stateless versions this client does not speak."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

        try:
            await session.discover()
            return
        except MCPError as exc:
            supported = (exc.error.data or {}).get("supported") if isinstance(exc.error.data, dict) else None
            if exc.code == UNSUPPORTED_PROTOCOL_VERSION and isinstance(supported, list):
                if not any(v in HANDSHAKE_PROTOCOL_VERSIONS for v in supported):
                    versions = ", ".join(map(str, supported))
                    raise MCPFailure(
                        f"MCP server {self.spec.name!r} speaks only protocol versions {versions}, which this "
                        f"client does not support ({self.spec.where})"
                    ) from None
        except RuntimeError:  # a discover result naming no version this client speaks statelessly
            pass
        await session.initialize()

    async def _watching(self, awaitable: Any, during: str) -> Any:
        """``awaitable``'s result; a message from the server that cannot be read (prose, malformed or
        too deeply nested JSON) ends the wait at once with the reason, not at the timeout."""
        step = asyncio.ensure_future(awaitable)
        step.add_done_callback(lambda t: t.cancelled() or t.exception())  # never "not retrieved"
        while not step.done():
            await asyncio.wait({step}, timeout=0.05)
            if self._bad and not step.done():
                step.cancel()
                sent, why = self._bad[0]
                if why:
                    raise MCPFailure(
                        f"MCP server {self.spec.name!r} sent a message this client cannot read during {during}: "
                        f"{why} (it sent {sent!r}; {self.spec.where})"
                    )
                raise MCPFailure(
                    f"MCP server {self.spec.name!r} does not speak MCP: it sent {sent!r} ({self.spec.where})"
                )
        return step.result()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception) and len(self._bad) < 5:
            text = str(message)
            found = re.search(r"input_value='(.*?)'", text)
            sent = found.group(1)[:200] if found else text.splitlines()[0][:200]
            # what JSON itself refused (too deep, cut off): the reason, not only what was sent
            reason = re.search(r"Invalid JSON: ([^\[\n]+?)(?: at line \d+ column \d+)?\s*\[", text)
            why = ""
            if reason and "recursion limit" in reason.group(1):
                why = f"its JSON is nested too deeply to read ({reason.group(1).strip()})"
            self._bad.append((sent, why))

    def _explain_start(self, exc: BaseException) -> BaseException:
        spec = self.spec
        if isinstance(exc, MCPFailure):
            return exc
        if isinstance(exc, asyncio.CancelledError):
            return MCPFailure(f"MCP server {spec.name!r}: connecting was cancelled")
        if isinstance(exc, BaseExceptionGroup):
            inner = exc.exceptions[0] if exc.exceptions else exc
            return self._explain_start(inner)
        text = str(exc) or type(exc).__name__
        closed = "Connection closed" in text or isinstance(exc, (EOFError, BrokenPipeError, ConnectionResetError))
        if not closed and isinstance(exc, OSError) and spec.transport == "stdio":
            return MCPFailure(f"MCP server {spec.name!r} could not be started ({spec.where}): {text}")
        if "Unsupported protocol version" in text:
            version = text.rsplit(":", 1)[-1].strip()
            return MCPFailure(
                f"MCP server {spec.name!r} speaks protocol version {version!r}, which this client does not "
                f"support ({spec.where})"
            )
        if closed and spec.transport == "stdio":
            return MCPFailure(
                f"MCP server {spec.name!r} exited before completing the handshake ({spec.where}){self._stderr_tail()}"
            )
        if isinstance(exc, ValidationError):
            return MCPFailure(f"MCP server {spec.name!r} sent a malformed answer during the handshake: {_first(exc)}")
        if spec.transport == "http" and self._refused is not None:
            return MCPFailure(
                f"MCP server {spec.name!r} at {spec.where} refused the connection (HTTP {self._refused}): it needs "
                "credentials, e.g. headers={'Authorization': 'Bearer ${NAME_OF_A_VARIABLE_HOLDING_THE_TOKEN}'}"
            )
        if spec.transport == "http":
            return MCPFailure(
                f"MCP server {spec.name!r} cannot be reached at {spec.where}: {type(exc).__name__}: {text}"
            )
        return MCPFailure(
            f"MCP server {spec.name!r} failed to start: {type(exc).__name__}: {text}{self._stderr_tail()}"
        )

    def _open_log(self, mode: str) -> Any:
        """The server's stderr log in the run folder, opened beneath the folder without following a
        link out of it (code in a sandbox of the same run can write there); emptied for ``write``."""
        self.folder.mkdir(parents=True, exist_ok=True)
        name = f"mcp-{self.spec.name}.stderr.log"
        beneath = Beneath(self.folder)
        try:
            opened = beneath.open(name, mode)
        except EnvironmentFailure as exc:
            raise MCPFailure(f"MCP server {self.spec.name!r}: its stderr log cannot be opened: {exc}") from None
        finally:
            beneath.close()
        if mode == "write":
            os.ftruncate(opened.fd, 0)
            self._stderr = self.folder / name
        return os.fdopen(opened.fd, "w" if mode == "write" else "r", encoding="utf-8", errors="replace")

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            with self._open_log("read") as log:
                text = log.read().strip()
        except (MCPFailure, OSError):
            return ""
        if not text:
            return ""
        return "; its stderr ends with:\n" + str(redact(text[-_STDERR_TAIL:]))

    async def stop(self) -> None:
        """Close the session and stop the server (the SDK closes stdin, then terminates it)."""
        task = self._task
        if task is None:
            return
        if self._leave is not None:
            self._leave.set()
        if self.session is None and not task.done():
            task.cancel()
        try:
            await task
        except BaseException:  # noqa: BLE001 - the connection's own end; only our own cancellation goes on
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        finally:
            self._task = None

    def kill(self) -> None:
        """At interpreter exit: kill the server's process group."""
        if self.pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)

    def state(self) -> str:
        """Which server, how reached, how many tools, alive or not."""
        alive = "connected" if self.alive() else "gone"
        pid = f", pid {self.pid}" if self.pid else ""
        return f"MCP server {self.spec.name} ({self.spec.transport}{pid}): {len(self.tools)} tools, {alive}"

    def alive(self) -> bool:
        """Whether the session is up (and, over stdio, the server process is still running)."""
        if self.session is None or self.closed:
            return False
        if self._pidfd is not None:  # exited (a zombie not yet reaped included): the fd is readable
            return not readable(self._pidfd, 0)
        return self.pid is None or _process_alive(self.pid)

    def _close_pidfd(self) -> None:
        fd, self._pidfd = self._pidfd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- calls -------------------------------------------------------------------------------------
    async def call_tool(self, tool: str, args: dict[str, Any]) -> Any:
        """Call one tool; its value, or an :class:`MCPFailure` naming the server and what went wrong."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        spec = self.spec
        session = self.session
        if session is None or not self.alive():
            raise _ServerGone(f"MCP server {spec.name!r} is no longer running")
        try:  # the SDK's own read timeout: no extra task per call (asyncio.wait_for costs ~0.25 ms)
            result = await session.call_tool(tool, args, read_timeout_seconds=spec.call_timeout)
        except MCPError as exc:
            if exc.error.code == REQUEST_TIMEOUT:
                raise MCPFailure(
                    f"MCP server {spec.name!r}: tool {tool!r} did not answer within {spec.call_timeout:g} s"
                ) from None
            if exc.error.code == CONNECTION_CLOSED:
                self.closed = True
                raise MCPFailure(
                    f"MCP server {spec.name!r} closed the connection during the call of {tool!r} (the server "
                    f"exited?); it is restarted at the next call"
                ) from None
            raise MCPFailure(f"MCP server {spec.name!r}: tool {tool!r}: {exc.error.message}") from None
        except ValidationError as exc:
            raise MCPFailure(
                f"MCP server {spec.name!r} sent a malformed result for tool {tool!r}: {_first(exc)}"
            ) from None
        except RuntimeError as exc:  # the SDK's checks of a result (output schema, unexpected shapes)
            raise MCPFailure(f"MCP server {spec.name!r} sent an invalid result for tool {tool!r}: {exc}") from None
        return self._value(tool, result)

    def _value(self, tool: str, result: Any) -> Any:
        spec = self.spec
        texts = []
        for block in result.content or []:
            kind = getattr(block, "type", "")
            if kind == "text":
                texts.append(block.text)
            elif kind in ("image", "audio"):
                texts.append(f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4:,} bytes]")
            elif kind == "resource_link":
                texts.append(f"[resource {block.uri}]")
            elif kind == "resource":
                inner = block.resource
                texts.append(getattr(inner, "text", None) or f"[resource {inner.uri}]")
            else:
                texts.append(f"[{kind or type(block).__name__} content]")
        text = "\n".join(texts)
        if result.is_error:
            raise MCPFailure(f"MCP server {spec.name!r}: tool {tool!r} failed: {_clip(text, 2000) or '(no message)'}")
        value: Any = text
        structured = result.structured_content
        if structured is not None:
            value = structured["result"] if tool in self._wrapped and "result" in structured else structured
        if isinstance(value, str):
            if len(value) > spec.max_result_chars:
                return (
                    f"{value[: spec.max_result_chars]}… (clipped by tea: MCP server {spec.name!r} returned "
                    f"{len(value):,} characters for {tool!r}, more than the limit of {spec.max_result_chars:,})"
                )
            return value
        size = len(json.dumps(value, default=str))
        if size > spec.max_result_chars:
            raise MCPFailure(
                f"MCP server {spec.name!r}: tool {tool!r} returned {size:,} characters of structured content, "
                f"more than the limit of {spec.max_result_chars:,}"
            )
        return value


def _is_wrapped(schema: dict[str, Any] | None) -> bool:
    """Whether an output schema is the ``{"result": ...}`` wrapper SDKs put around a non-object value."""
    if not isinstance(schema, dict):
        return False
    return set(schema.get("properties") or {}) == {"result"} and list(schema.get("required") or []) == ["result"]


def _first(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(result)"
    return f"{where}: {err['msg']}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _client_info() -> Any:
    from mcp.types import Implementation

    from tea_notebook.version import __version__

    return Implementation(name="tea_notebook", version=__version__)


# -- the server's process (stdio) ---------------------------------------------------------------------
def _children() -> set[int]:
    """Process ids of this process's children (Linux /proc; empty elsewhere)."""
    me, out = os.getpid(), set()
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(me):
            out.add(int(entry.name))
    return out


def _find_child(before: set[int], argv: list[str]) -> int | None:
    """The child started since ``before`` whose command line is ``argv``, else the only new child (a
    script's interpreter shows another command line); None when it cannot be told."""
    new = sorted(_children() - before)
    for pid in new:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if [c.decode(errors="replace") for c in cmdline] == argv:
            return pid
    return new[0] if len(new) == 1 else None


def _open_pidfd(pid: int | None) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (``os.pidfd_open``, Linux 5.3+), or None."""
    if pid is None or not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _process_alive(pid: int) -> bool:
    """Whether the server process still exists (asyncio reaps a child that exits, so a dead server is
    gone within moments; a signal 0 costs a microsecond, reading /proc thirty)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


# -- TCP's side: import and call -----------------------------------------------------------------------
@dataclass
class MCPImport:
    """What ``ws.tools.import_mcp`` registered: the toolkit, its tools, and who the server said it was."""

    server: str
    toolkit: ToolkitRecord
    tools: list[ToolRecord]
    server_info: dict[str, Any] = field(default_factory=dict)
    protocol_version: str = ""
    removed: list[str] = field(default_factory=list)
    #: ``{where: NAME}``: values stored as references, read from the environment after a restart
    references: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        names = ", ".join(t.name for t in self.tools)
        note = ""
        if self.references:
            needed = ", ".join(sorted(set(self.references.values())))
            note = f"; not stored, set again after a restart: {needed}"
        return f"<MCP server {self.server}: {len(self.tools)} tools registered ({names}){note}>"


class MCPClients:
    """The MCP servers of one workspace: their session runtimes, imports and calls (handed to TCP)."""

    def __init__(self, manager: "SessionManager"):
        self.manager = manager
        self._runtimes: dict[str, EnvironmentRuntime] = {}
        self._specs: dict[str, MCPServerSpec] = {}  # given in this process, secrets included
        self._stored: dict[str, tuple[dict[str, Any], MCPServerSpec]] = {}  # parsed stored specs

    def runtime(self, spec: MCPServerSpec) -> EnvironmentRuntime:
        """The session runtime of a server (made on first use; live sessions are keyed by its name)."""
        current = self._runtimes.get(spec.name)
        if current is None:
            config = {"spec": spec.model_dump(mode="json")}
            current = self._runtimes[spec.name] = EnvironmentRuntime(
                self.manager, f"mcp:{spec.name}", MCPConnection, config
            )
        return current

    def spec_of(self, record: ToolRecord) -> MCPServerSpec:
        """The spec a record's server is reached by: the one given in this process, else the stored one."""
        meta = record.metadata.get("mcp") or {}
        server = meta.get("server")
        if not server:
            raise MCPFailure(f"tool {record.name!r} has origin 'mcp' but names no MCP server")
        given = self._specs.get(server)
        if given is not None:
            return given
        stored = meta.get("spec")
        if not isinstance(stored, dict):
            raise MCPFailure(f"tool {record.name!r}: MCP server {server!r} has no stored spec; import it again")
        cached = self._stored.get(server)
        if cached is not None and cached[0] == stored:
            return cached[1]
        try:
            spec = MCPServerSpec.model_validate(stored)
        except ValidationError as exc:
            raise MCPFailure(
                f"tool {record.name!r}: the stored spec of MCP server {server!r} is invalid: {_first(exc)}"
            ) from None
        self._stored[server] = (stored, spec)
        return spec

    async def call(self, record: ToolRecord, args: dict[str, Any], context: Context) -> Any:
        """Invoke an imported tool through its server's live session (started on first use; a dead
        server restarted once)."""
        spec = self.spec_of(record)
        tool = (record.metadata.get("mcp") or {}).get("tool") or record.name
        runtime = self.runtime(spec)

        async def work(conn: MCPConnection) -> Any:
            return await conn.call_tool(tool, args)

        try:
            return await self.manager.run(runtime, context, work)
        except _ServerGone:
            await self.manager.arelease(session_key(context, MCPConnection.scope), runtime.name)
        try:
            return await self.manager.run(runtime, context, work)
        except _ServerGone:
            await self.manager.arelease(session_key(context, MCPConnection.scope), runtime.name)
            raise MCPFailure(
                f"MCP server {spec.name!r} died again right after a restart; not restarting it twice"
            ) from None
        except MCPFailure as exc:
            raise MCPFailure(f"MCP server {spec.name!r} had died and was restarted once, then: {exc}") from None

    async def alist(self, spec: MCPServerSpec) -> MCPConnection:
        """Connect (the interactive session) and return the live connection with its tool list."""
        runtime = self.runtime(spec)

        async def work(conn: MCPConnection) -> MCPConnection:
            if not conn.alive():
                raise _ServerGone(f"MCP server {spec.name!r} is no longer running")
            return conn

        try:
            return await self.manager.run(runtime, Context(), work)
        except _ServerGone:
            await self.manager.arelease(session_key(None, MCPConnection.scope), runtime.name)
            return await self.manager.run(runtime, Context(), work)

    def import_server(
        self, tools: "ToolRegistry", spec: MCPServerSpec, *, prefix: str | None, category: str
    ) -> MCPImport:
        """Connect, list, and register every tool of the server (all or none) as its toolkit."""
        from tea_notebook._sync import run_sync

        known = self._runtimes.get(spec.name)
        if known is not None and known.config["spec"] != spec.model_dump(mode="json"):
            self.forget(spec.name)  # the server is reached another way now: stop the old sessions
        self._specs[spec.name] = spec
        try:
            conn = run_sync(self.alist(spec))
            return _register(tools, spec, conn, prefix=spec.name + "_" if prefix is None else prefix, category=category)
        except BaseException:
            self.manager.release(session_key(None, MCPConnection.scope), f"mcp:{spec.name}")
            self._specs.pop(spec.name, None)
            raise

    def spec(self, name: str, command: Any = None, args: Any = (), **options: Any) -> MCPServerSpec:
        """A validated server spec (see :func:`make_spec`)."""
        return make_spec(name, command, args, **options)

    def forget(self, server: str) -> list[str]:
        """Stop every session of a server and drop its spec from memory."""
        self._specs.pop(server, None)
        self._stored.pop(server, None)
        self._runtimes.pop(server, None)
        return self.manager.release(None, f"mcp:{server}")


def _register(
    tools: "ToolRegistry", spec: MCPServerSpec, conn: MCPConnection, *, prefix: str, category: str
) -> MCPImport:
    server = spec.name
    toolkits = tools.workspace.toolkits
    stored = spec.stored()
    provenance = {
        "mcp": {
            "server": server,
            "transport": spec.transport,
            "where": spec.where,
            "server_info": conn.server_info,
            "protocol_version": conn.protocol_version,
        }
    }
    records: list[ToolRecord] = []
    seen: dict[str, str] = {}
    for tool in conn.tools:
        name = prefix + re.sub(r"[^A-Za-z0-9_\-]", "_", tool.name)
        if name and name[0].isdigit():
            name = "_" + name
        if not NAME_PATTERN.match(name):
            raise MCPFailure(
                f"MCP server {server!r}: tool {tool.name!r} cannot be named {name!r} in the registry (at most 64 "
                "letters, digits, '_' or '-'); nothing was registered — import with a shorter prefix="
            )
        if name in seen:
            raise MCPFailure(
                f"MCP server {server!r}: tools {seen[name]!r} and {tool.name!r} both become {name!r}; "
                "nothing was registered"
            )
        seen[name] = tool.name
        owner = reserved_by(name)
        if owner is not None:
            raise MCPFailure(
                f"MCP server {server!r}: tool {tool.name!r} would be registered as {name!r}, the name of "
                f"{owner}; nothing was registered — import with a prefix= (the default is {server + '_'!r})"
            )
        schema = _clip_descriptions(tool.input_schema)
        problem = _schema_problem(schema)
        if problem:
            raise MCPFailure(
                f"MCP server {server!r}: tool {tool.name!r} has an input schema that is not valid JSON Schema "
                f"({problem}); nothing was registered"
            )
        existing = tools.current(name)
        if existing is not None and (
            existing.origin != "mcp" or (existing.metadata.get("mcp") or {}).get("server") != server
        ):
            raise MCPFailure(
                f"MCP server {server!r}: a tool named {name!r} is already registered (origin {existing.origin!r}); "
                "nothing was registered — import with another prefix="
            )
        description = (tool.description or tool.title or "").strip() or f"The {tool.name} tool of MCP server {server}."
        description = _clip_description(description)
        try:
            records.append(
                ToolRecord(
                    name=name,
                    description=description,
                    parameters=dict(schema),
                    returns=_clip_descriptions(dict(tool.output_schema or {})),
                    entrypoint=f"mcp:{server}/{tool.name}",
                    origin="mcp",
                    category=category,
                    toolkit=server,
                    metadata={"mcp": {"server": server, "tool": tool.name, "spec": stored}, "provenance": provenance},
                )
            )
        except ValidationError as exc:
            raise MCPFailure(f"MCP server {server!r}: tool {tool.name!r} cannot be recorded: {_first(exc)}") from None
    if server in toolkits:
        kit_now = toolkits.get(server)
        if kit_now.origin != "mcp":
            raise MCPFailure(
                f"MCP server {server!r}: a toolkit named {server!r} already exists (origin {kit_now.origin!r}); "
                "nothing was registered — give the server another name"
            )
    info = conn.server_info
    label = f"{info.get('name')} {info.get('version') or ''}".strip()[:120] if info else server
    kit = ToolkitRecord(
        name=server,
        description=f"Tools of the MCP server {server} ({label}, over {spec.transport}).",
        tools=[r.name for r in records],
        category=category,
        origin="mcp",
        metadata={"mcp": {"server": server, "spec": stored}, "provenance": provenance},
    )
    previous = [r.name for r in tools.list(toolkit=server, _usage=False) if r.origin == "mcp"]
    before = {r.name: r.version for r in records if tools.current(r.name) is not None}
    stored_tools = tools.register_many(records, note=f"MCP import from server {server}") if records else []
    try:
        stored_kit = toolkits.register(kit, note=f"MCP import from server {server}")
    except BaseException:  # all or none: undo the tools just registered
        for rec in stored_tools:
            if rec.name in before:
                tools.rollback(rec.name, before[rec.name])
            else:
                tools.unregister(rec.name)
        raise
    removed = [n for n in previous if n not in seen]
    for name in removed:
        tools.unregister(name)
    return MCPImport(
        server, stored_kit, stored_tools, conn.server_info, conn.protocol_version, removed, spec.references()
    )


def _clip_description(text: str) -> str:
    """A description from an outside server, cut to :data:`MAX_DESCRIPTION_CHARS`."""
    if len(text) <= MAX_DESCRIPTION_CHARS:
        return text
    note = f"… [clipped by tea: {len(text):,} characters]"
    return text[: MAX_DESCRIPTION_CHARS - len(note)] + note


def _clip_descriptions(schema: Any, depth: int = 0) -> Any:
    """A schema with every ``description`` / ``title`` string clipped (they reach the prompt too)."""
    if depth > 32:
        return schema
    if isinstance(schema, dict):
        return {
            k: _clip_description(v)
            if k in ("description", "title") and isinstance(v, str)
            else _clip_descriptions(v, depth + 1)
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_clip_descriptions(v, depth + 1) for v in schema]
    return schema


def _schema_problem(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "not an object"
    size = len(json.dumps(schema, default=str))
    if size > MAX_SCHEMA_CHARS:
        return f"{size:,} characters of JSON, more than the limit of {MAX_SCHEMA_CHARS:,}"
    try:
        Draft202012Validator.check_schema(schema)
    except JSONSchemaError as exc:
        return exc.message
    if schema.get("type", "object") != "object":
        return "parameters must be a JSON object schema"
    return ""


def make_spec(
    name: str,
    command: str | list[str] | None = None,
    args: list[str] | tuple[str, ...] = (),
    **options: Any,
) -> MCPServerSpec:
    """A validated spec from what ``ws.tools.import_mcp`` was given (``command`` may be a list). A
    stdio server without ``cwd`` runs where it was imported from, after a restart too."""
    if isinstance(command, (list, tuple)):
        if not command:
            raise RegistryError("an MCP server command must not be empty")
        command, args = str(command[0]), [*map(str, command[1:]), *args]
    if command and not options.get("cwd"):
        options["cwd"] = os.getcwd()
    try:
        return MCPServerSpec(name=name, command=command, args=list(args), **options)
    except ValidationError as exc:
        raise RegistryError(f"MCP server {name!r}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None


__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "MCPClients",
    "MCPConnection",
    "MCPFailure",
    "MCPImport",
    "MCPServerSpec",
    "bearer_reference",
    "make_spec",
]
