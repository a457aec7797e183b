"""TCP, the Tool Context Protocol: the tool registry and the toolkit registry."""

from __future__ import annotations

import ast
import importlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from tea_notebook._threads import SYNC_THREADS, run_sync_call
from tea_notebook.errors import NotFoundError, RegistryError, SchemaError
from tea_notebook.protocol.context import Context, ToolContext
from tea_notebook.protocol.registry import InvokeResult, Registry, not_found_result
from tea_notebook.protocol.reserved import refused_name
from tea_notebook.protocol.store_host import StoreHost
from tea_notebook.protocol.tools import Tool, make_tool, unrebuildable

if TYPE_CHECKING:  # the records (and pydantic) load with the first record made or read
    from tea_notebook.protocol.acp import AgentRegistry
    from tea_notebook.protocol.ecp import EnvironmentRegistry
    from tea_notebook.protocol.manifest import ImportReport, ManifestWatcher
    from tea_notebook.protocol.records import ToolkitRecord, ToolRecord


def _type_label(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(map(repr, schema["enum"]))
    if "type" in schema:
        return str(schema["type"])
    if "anyOf" in schema:
        return " | ".join(_type_label(s) for s in schema["anyOf"])
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    return "any"


class ToolkitRegistry(Registry["ToolkitRecord"]):
    """Named tool groups with shared state and rules (TCP's 𝒦)."""

    def _describe_extra(self, record: ToolkitRecord) -> list[str]:
        out = [f"tools: {', '.join(record.tools) or '(none)'}"]
        if record.rules:
            out.append(f"rules: {record.rules}")
        return out


class ToolHost(StoreHost, Protocol):
    """What the tool registry reaches through its workspace besides storage: the toolkits, and the
    agent and environment registries behind agent and environment tools. (Declared here, not as
    :class:`~tea_notebook.protocol.host.RegistryHost`, which names this module's registries.)"""

    @property
    def toolkits(self) -> ToolkitRegistry:
        """The toolkit registry."""
        ...

    @property
    def agents(self) -> "AgentRegistry":
        """ACP: the agent registry."""
        ...

    @property
    def envs(self) -> "EnvironmentRegistry":
        """ECP: the environment registry."""
        ...


TRUST_MODES = ("sandbox", "in_process")


def trust_of(record: ToolRecord) -> str:
    """Where a generated tool runs: ``"sandbox"`` (the default) or ``"in_process"`` (a person's opt-in)."""
    return "in_process" if record.metadata.get("trust") == "in_process" else "sandbox"


class ToolRegistry(Registry["ToolRecord"]):
    """The tool registry: Python functions, agents as tools (A2T) and environment actions (E2T).

    Two things come from the layers above (the workspace hands them over; TCP imports neither):
    ``executor``, a function returning the object that runs generated tools out of process
    (``await executor().call(record, args, context)``), and ``tool_maker``, a factory of the tool
    manager behind :meth:`create`.
    """

    workspace: ToolHost
    executor: Callable[[], Any] | None = None
    tool_maker: Callable[..., Any] | None = None
    #: the MCP client side (``tea_notebook.envs.mcp_client.MCPClients``), handed down by the workspace
    mcp: Callable[[], Any] | None = None

    def create(
        self,
        request: str | dict[str, Any],
        *,
        model: str | None = None,
        approval: str = "auto",
        max_fixes: int = 3,
        context: Context | None = None,
        candidate: bool = False,
    ) -> Any:
        """The tool manager: reuse a tool that covers ``request`` (a task, or a spec dict with
        ``tool_name``), else write one, validate it in a confined sandbox and register it
        (``candidate=True``: as a candidate of the promotion gate, offered only by name until promoted).
        Returns a :class:`~tea_notebook.evolve.toolmaker.Creation`."""
        if self.tool_maker is None:
            raise RegistryError("this tool registry has no tool manager (it comes with a Workspace)")
        options: dict[str, Any] = {"candidate": True} if candidate else {}
        maker = self.tool_maker(self.workspace, model=model, approval=approval, max_fixes=max_fixes, **options)
        return maker.create(request, context=context)

    def import_mcp(
        self,
        name: str,
        command: str | list[str] | None = None,
        args: list[str] | tuple[str, ...] = (),
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        url: str | None = None,
        headers: dict[str, str] | None = None,
        prefix: str | None = None,
        category: str = "mcp",
        timeout: float = 30.0,
        call_timeout: float = 60.0,
        max_result_chars: int = 100_000,
    ) -> Any:
        """Register the tools of an MCP server as the toolkit ``name`` (all of them or none).

        Reach it over stdio (``command`` and ``args``, a list for both, plus ``env`` and ``cwd``) or
        streamable HTTP (``url`` and ``headers``). Tools are named ``prefix + tool`` (``"NAME_"`` by
        default; ``prefix=""`` keeps the server's names), keep their input schemas, have origin
        ``"mcp"`` and the server in their provenance, and run through a live session of the server
        (started on first use, one per run). ``timeout`` bounds connecting, ``call_timeout`` each
        call, ``max_result_chars`` each result. Returns an ``MCPImport`` report; raises a TeaError
        naming the server when it cannot be started, reached or understood, or when one of its tools
        would take the name of one of the runtime's own actions (``done``, ``todo``, …).

        Nothing secret is stored: every ``env`` value, secret-looking headers and arguments become
        ``${NAME}`` references (``report.references``), read from the environment after a restart;
        ``headers={"Authorization": "Bearer ${TEA_MCP_TOKEN}"}`` is stored as written. Descriptions
        are clipped to ``MAX_DESCRIPTION_CHARS`` (2,000).
        """
        if self.mcp is None:
            raise RegistryError("this tool registry has no MCP client (it comes with a Workspace)")
        from_above = self.mcp()
        spec = from_above.spec(
            name,
            command,
            args,
            env=dict(env or {}),
            cwd=cwd,
            url=url,
            headers=dict(headers or {}),
            connect_timeout=timeout,
            call_timeout=call_timeout,
            max_result_chars=max_result_chars,
        )
        return from_above.import_server(self, spec, prefix=prefix, category=category)

    def remove_mcp(self, name: str) -> list[str]:
        """Unregister the toolkit of MCP server ``name`` and its tools, and stop its sessions.
        Returns the names of the tools removed (their history is kept)."""
        kit = self.workspace.toolkits.current(name)
        if kit is None or kit.origin != "mcp":
            raise NotFoundError(f"no MCP server named {name!r} was imported")
        removed = [r.name for r in self.list(toolkit=name, _usage=False) if r.origin == "mcp"]
        for tool_name in removed:
            self.unregister(tool_name)
        self.workspace.toolkits.unregister(name)
        if self.mcp is not None:
            self.mcp().forget(name)
        return removed

    def trust(self, name: str, mode: str = "in_process", *, by: str = "person", reason: str = "") -> ToolRecord:
        """Choose where a generated tool runs: ``"sandbox"`` (the default: a sandbox session per run)
        or ``"in_process"`` (in this kernel — a person's explicit opt-in for one tool, recorded with
        who and why in its provenance). Registers a new version; roll back to undo."""
        if mode not in TRUST_MODES:
            raise ValueError(f"trust must be one of {', '.join(TRUST_MODES)}, not {mode!r}")
        record = self.get(name)
        if record.origin != "generated":
            raise RegistryError(f"tool {name!r} is not a generated tool (origin {record.origin!r}): it has no sandbox")
        provenance = dict(record.metadata.get("provenance") or {})
        changes = [*provenance.get("trust_changes", []), {"trust": mode, "by": by, "reason": reason, "at": time.time()}]
        provenance["trust_changes"] = changes
        metadata = {**record.metadata, "trust": mode, "provenance": provenance}
        return self.register(record.model_copy(update={"metadata": metadata}), note=f"trust {mode} ({by})")

    def _coerce(self, obj: Any) -> tuple[ToolRecord, Any]:
        built = obj if isinstance(obj, Tool) else None
        if built is None and callable(obj) and not isinstance(obj, (self.record_type, dict)):
            built = make_tool(obj)
        if built is None:
            return super()._coerce(obj)
        problem = unrebuildable(built)
        if problem is not None:  # refused now, rather than stored as a card that fails in every other process
            raise RegistryError(problem)
        return built.record, built

    def _runtime_key(self, record: ToolRecord) -> str:
        return record.source_hash or record.name

    def _check_relations(self, record: ToolRecord) -> None:
        super()._check_relations(record)
        if record.toolkit is not None and not record.toolkit.strip():
            raise RegistryError(f"tool {record.name!r}: toolkit name is empty")
        owner = refused_name(record.name, record.entrypoint, record.origin)
        if owner is not None and record.origin == "mcp":  # however it arrives (an import, a manifest)
            server = (record.metadata.get("mcp") or {}).get("server") or record.toolkit
            raise RegistryError(f"tool {record.name!r} of MCP server {server!r} takes the name of {owner}")
        if owner is not None:  # a person's tool (%%tool, register, A2T, E2T): never beside the real action
            raise RegistryError(
                f"tool {record.name!r} takes the name of {owner} ({record.name!r} is reserved); "
                "register it under another name (name=...)"
            )

    def _describe_extra(self, record: ToolRecord) -> list[str]:
        props = record.parameters.get("properties", {})
        required = set(record.parameters.get("required", []))
        lines = ["parameters:"] if props else ["parameters: none"]
        for pname, pschema in props.items():
            flag = "" if pname in required else f" = {pschema.get('default')!r}"
            desc = pschema.get("description", "")
            lines.append(f"  {pname}: {_type_label(pschema)}{flag}  {desc}".rstrip())
        if record.returns:
            lines.append(f"returns: {_type_label(record.returns)} {record.returns.get('description', '')}".rstrip())
        if record.toolkit:
            lines.append(f"toolkit: {record.toolkit}")
        if record.permissions:
            lines.append(f"permissions: {', '.join(record.permissions)}")
        if record.idempotent:
            lines.append("idempotent: yes (a resume may run a call of it again when its outcome is unknown)")
        if record.dependencies:
            lines.append(f"dependencies: {', '.join(record.dependencies)}")
        return lines

    def tool(self, fn: Callable[..., Any] | None = None, **options: Any) -> Any:
        """Decorator registering into this registry: ``@ws.tools.tool`` or ``@ws.tools.tool(category=...)``."""

        def build(f: Callable[..., Any]) -> Tool:
            built = make_tool(f, **options)
            stored = self.register(built)
            built.record = stored
            return built

        return build(fn) if fn is not None else build

    def to_openai(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        """OpenAI function-calling definitions of the given (or all) tools."""
        records = [self.get(n) for n in names] if names is not None else self.list(_usage=False)
        return [r.to_openai() for r in records]

    # -- toolkits and hierarchy ---------------------------------------------------------
    def bind(self, name: str, context: Context) -> Context:
        """Bind a tool, or every tool of a toolkit when ``name`` is a toolkit."""
        toolkits = self.workspace.toolkits
        if name not in self and name in toolkits:
            kit = toolkits.get(name)
            for member in self.members(name):
                context.bind(self.kind, member)
            context.bind(toolkits.kind, kit.name)
            return context
        return super().bind(name, context)

    def unbind(self, name: str, context: Context) -> Context:
        """Unbind a tool, or every tool of a toolkit."""
        toolkits = self.workspace.toolkits
        if name not in self and name in toolkits:
            if not context.unbind(toolkits.kind, name):
                raise NotFoundError(f"toolkit {name!r} is not bound to context {context.id!r}")
            for member in self.members(name):
                context.unbind(self.kind, member)
            return context
        return super().unbind(name, context)

    def members(self, toolkit: str) -> list[str]:
        """Tools of a toolkit: those listed by the toolkit record and those naming it."""
        listed = self.workspace.toolkits.get(toolkit).tools if toolkit in self.workspace.toolkits else []
        naming = [r.name for r in self.list(toolkit=toolkit, _usage=False)]
        return list(dict.fromkeys([*listed, *naming]))

    def tree(self) -> dict[str, dict[str, list[str]]]:
        """The hierarchy category → toolkit → tool (tools outside any toolkit under ``""``)."""
        out: dict[str, dict[str, list[str]]] = {}
        for rec in self.list(_usage=False):
            out.setdefault(rec.category, {}).setdefault(rec.toolkit or "", []).append(rec.name)
        return out

    def route_hierarchical(
        self, query: str, context: Context | None = None, *, k: int = 5, branches: int = 2
    ) -> list[ToolRecord]:
        """Walk category → toolkit → tool: keep the ``branches`` best categories, then the best
        toolkits inside them, then rank tools there. Each level is scored by its best member."""
        hits = self.search(query, k=max(50, 10 * k))
        if not hits:
            return []
        best_cat: dict[str, float] = {}
        for h in hits:
            best_cat[h.record.category] = max(best_cat.get(h.record.category, -1e9), h.score)
        cats = sorted(best_cat, key=best_cat.__getitem__, reverse=True)[:branches]
        best_kit: dict[tuple[str, str], float] = {}
        for h in hits:
            if h.record.category in cats:
                key = (h.record.category, h.record.toolkit or "")
                best_kit[key] = max(best_kit.get(key, -1e9), h.score)
        kits = set(sorted(best_kit, key=best_kit.__getitem__, reverse=True)[:branches])
        keep = {h.name for h in hits if (h.record.category, h.record.toolkit or "") in kits}
        routed = self.route(query, context, k=max(k * 4, 20))
        return [r for r in routed if r.name in keep][:k]

    def _admissible(self, cand: ToolRecord, taken: set[str], blocked: set[str], context: Context | None) -> bool:
        """Adds preconditions: a tool whose precondition tools have not yet succeeded in the
        context is not offered (E2T's typed action ordering)."""
        if not super()._admissible(cand, taken, blocked, context):
            return False
        if context is not None and cand.relations:
            return all(context.has_succeeded(self._success_name(p)) for p in cand.related("precondition"))
        return True

    def _success_name(self, tool: str) -> str:
        """The name a run context records when ``tool`` has done its work: an environment tool's
        action (``notes.open``, which the environment forgets when it is reset or stopped, and which
        invoking the action directly records too), any other tool's own name."""
        record = self._head(tool)
        if record is not None and record.origin == "environment":
            kind, _, action = record.entrypoint.partition(":")
            if kind == "environment" and action:
                return action
        return tool

    def preconditions(self, names: Iterable[str]) -> tuple[str, ...]:
        """What the tools ``names`` need to have succeeded in a run context before they are offered
        (their precondition tools, as :meth:`_admissible` checks them: ``Context.has_succeeded`` of
        each), in a stable order; unregistered names are skipped. Which of these have succeeded is
        all a context's history changes about what :meth:`prune` and :meth:`route` admit of
        ``names``; empty when no tool has a precondition (most registries), so a caller that keeps
        an offer checks it for free."""
        self._refresh_heads()
        gates: dict[str, None] = {}
        for name in names:
            record = self._head(name)
            if record is not None and record.relations:
                gates.update(dict.fromkeys(self._success_name(p) for p in record.related("precondition")))
        return tuple(gates)

    # -- Invoke -------------------------------------------------------------------------
    def _load_runtime(self, record: ToolRecord) -> Tool | None:
        """The Python callable behind a record: in memory, importable, or (trusted) from its source."""
        runtime = self._runtimes.get(self._runtime_key(record))
        if runtime is not None:
            return runtime
        if record.origin == "generated":  # written by the tool manager: in this process only by opt-in
            return self._from_source(record) if trust_of(record) == "in_process" else None
        if record.origin != "python":
            return None
        module, _, qualname = record.entrypoint.partition(":")
        if module and module != "__main__" and qualname and "<locals>" not in qualname:
            try:
                obj: Any = importlib.import_module(module)
                for part in qualname.split("."):
                    obj = getattr(obj, part)
                fn = obj.fn if isinstance(obj, Tool) else obj
                assert fn is not None  # a Tool without its function: fall back to the source
                built = make_tool(fn, name=record.name, description=record.description)
                if built.record.source_hash == record.source_hash:
                    self._runtimes[self._runtime_key(record)] = built
                    return built
            except Exception:  # noqa: BLE001 - fall back to the stored source
                pass
        return self._from_source(record)

    def _from_source(self, record: ToolRecord) -> Tool | None:
        if record.source and record.trusted:
            built = _tool_from_source(record)
            self._runtimes[self._runtime_key(record)] = built
            return built
        return None

    async def ainvoke(
        self, name: str, args: dict[str, Any] | None = None, context: Context | None = None
    ) -> InvokeResult:
        """Run a tool with schema-checked arguments; errors come back as structured results."""
        record = self.current(name)
        if record is None:
            return not_found_result(name, self._missing(name))
        if context is not None and context.bound(self.kind) and name not in context.bound(self.kind):
            return InvokeResult(
                name,
                False,
                error={
                    "type": "NotBoundError",
                    "message": f"tool {name!r} is not bound to context {context.id!r}",
                },
            )
        ctx = context or Context()
        try:
            call = self._caller(record, ctx)
        except Exception as exc:  # noqa: BLE001 - a tool that cannot be loaded is an observation too
            return InvokeResult(name, False, error={"type": type(exc).__name__, "message": str(exc)})
        return await self._invoke(name, name, record.parameters, args, call, ctx, record.version)

    def invoke(self, name: str, args: dict[str, Any] | None = None, context: Context | None = None) -> InvokeResult:
        """Synchronous :meth:`ainvoke` (safe inside a running event loop)."""
        return self._sync_invoke(self.ainvoke(name, args, context))

    def _caller(self, record: ToolRecord, context: Context) -> Callable[[dict[str, Any]], Any]:
        kind, _, target = record.entrypoint.partition(":")
        if record.origin == "agent":
            agents = self.workspace.agents
            return lambda args: agents.run_for_tool(target, args, context)
        if record.origin == "environment":
            env, _, action = target.partition(".")
            envs = self.workspace.envs
            return lambda args: envs.run_for_tool(env, action, args, context)
        if record.origin == "mcp":
            if self.mcp is None:
                raise RegistryError(f"tool {record.name!r} comes from an MCP server; this registry has no MCP client")
            clients = self.mcp()
            return lambda args: clients.call(record, args, context)
        # a person's %%tool --process tool runs out of process too (so Stop can end it)
        if (record.origin == "generated" and trust_of(record) == "sandbox") or record.metadata.get("process"):
            if self.executor is None:
                raise RegistryError(
                    f"tool {record.name!r} runs only out of process, and this registry has no executor for that "
                    "(open the workspace with tea_notebook.Workspace)"
                )
            executor = self.executor()
            return lambda args: executor.call(record, args, context)
        runtime = self._load_runtime(record)
        if runtime is None or runtime.fn is None:
            reason = (
                "its code came from a manifest that was not trusted; re-import with trust_code=True"
                if record.source and not record.trusted
                else f"no runtime for origin {record.origin!r} is loaded in this process"
            )

            def missing(_args: dict[str, Any]) -> Any:
                raise RuntimeError(f"tool {record.name!r} cannot run: {reason}")

            return missing
        fn = runtime.fn

        def call(args: dict[str, Any]) -> Any:
            kwargs = _convert(runtime, args)
            if runtime.context_param:
                scope = f"toolkit:{record.toolkit}" if record.toolkit else f"tool:{record.name}"
                initial = {}
                if record.toolkit and record.toolkit in self.workspace.toolkits:
                    initial = self.workspace.toolkits.get(record.toolkit).state
                kwargs[runtime.context_param] = ToolContext(
                    self.workspace, context, record.name, context.state(scope, initial)
                )
            if record.is_async:
                return fn(**kwargs)
            return run_sync_call(("tool", record.name), SYNC_THREADS, f"tool {record.name}", fn, **kwargs)

        return call

    # -- manifest -----------------------------------------------------------------------
    def export_manifest(self, path: str | Path | None = None) -> dict[str, Any]:
        """The registry as a TEA tool manifest (written to ``path`` when given)."""
        from tea_notebook.protocol.manifest import export_manifest

        return export_manifest(self, path)

    def import_manifest(self, path: str | Path, *, trust_code: bool = False) -> "ImportReport":
        """Merge a manifest: new tools are added, newer versions registered, older ones skipped."""
        from tea_notebook.protocol.manifest import import_manifest

        return import_manifest(self, path, trust_code=trust_code)

    def watch_manifest(self, path: str | Path, *, interval: float = 1.0, trust_code: bool = False) -> "ManifestWatcher":
        """Hot-reload: re-import ``path`` whenever it changes, until ``.stop()``."""
        from tea_notebook.protocol.manifest import ManifestWatcher

        return ManifestWatcher(self, Path(path), interval=interval, trust_code=trust_code).start()


def _convert(runtime: Tool, args: dict[str, Any]) -> dict[str, Any]:
    """JSON arguments → Python values (nested models become model instances)."""
    if runtime.args_model is None:
        return dict(args)
    parsed = runtime.args_model.model_validate(args)
    return {field.alias or name: getattr(parsed, name) for name, field in runtime.args_model.model_fields.items()}


def _tool_from_source(record: ToolRecord) -> Tool:
    """Rebuild a trusted tool from its stored source, decorators removed, in a fresh namespace."""
    tree = ast.parse(record.source)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.decorator_list = []
    # the stored source is just the function: give it the names type hints commonly use
    import typing

    from tea_notebook.protocol.context import ToolContext

    namespace: dict[str, Any] = {n: getattr(typing, n) for n in typing.__all__ if not n.startswith("_")}
    namespace.update(__name__=f"tea_tools.{record.name}", ToolContext=ToolContext)
    code = compile(tree, f"<tool {record.name}>", "exec", dont_inherit=True)  # not this module's __future__
    exec(code, namespace)  # noqa: S102 - trusted, own source
    qualname = record.entrypoint.partition(":")[2].split(".")[-1] or record.name
    fn = namespace.get(qualname) or namespace.get(record.name)
    if not callable(fn):
        raise RegistryError(f"the stored source of tool {record.name!r} does not define {qualname!r}")
    try:
        return make_tool(fn, name=record.name, description=record.description, source=record.source)
    except SchemaError:
        # hints naming things the source does not import: run with the stored schema, no conversion
        return Tool(record, fn, None, None)
