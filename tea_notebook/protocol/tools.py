"""``@tool``: a typed Python function (sync or async) becomes a TCP tool record plus its callable."""

from __future__ import annotations

import ast
import hashlib
import inspect
import sys
import textwrap
from typing import TYPE_CHECKING, Any, Callable, Iterable

from tea_notebook.errors import SchemaError
from tea_notebook.protocol.current import current_workspace
from tea_notebook.protocol.schema import function_schema

if TYPE_CHECKING:  # the records (and pydantic) load with the first tool made, not with the workspace
    from pydantic import BaseModel

    from tea_notebook.protocol.records import Relation, ToolRecord


class Tool:
    """A tool record with the function behind it. Calling the Tool calls the function."""

    def __init__(
        self,
        record: ToolRecord,
        fn: Callable[..., Any] | None = None,
        args_model: type[BaseModel] | None = None,
        context_param: str | None = None,
    ):
        self.record = record
        self.fn = fn
        self.args_model = args_model
        self.context_param = context_param
        if fn is not None:
            self.__doc__ = fn.__doc__
            self.__wrapped__ = fn

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.record.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fn is None:
            raise TypeError(f"tool {self.name!r} has no Python function in this process")
        return self.fn(*args, **kwargs)

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI function-calling form."""
        return self.record.to_openai()

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, v{self.record.version})"


def function_source(fn: Callable[..., Any]) -> str:
    """The function's source as written, or '' when Python cannot see it (built-ins, exec'd code)."""
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return ""


def unrebuildable(tool: Tool) -> str | None:
    """Why no other process (nor this one after a restart) could rebuild ``tool``, or None when one can.

    A Python tool comes back from its importable module or from its stored source. A function defined
    where Python keeps no source (``python -c``, a heredoc piped to ``python -``, ``exec``'d text) in a
    script's ``__main__`` has neither: registering it would store a card that fails everywhere else with
    "no runtime for origin 'python'".
    """
    record = tool.record
    if tool.fn is None or record.origin != "python" or record.source.strip():
        return None
    module, _, qualname = record.entrypoint.partition(":")
    loaded = sys.modules.get(module)
    if module and module != "__main__" and "<" not in qualname and getattr(loaded, "__file__", None):
        return None  # importable by name elsewhere
    code = getattr(getattr(tool.fn, "__code__", None), "co_filename", "") or "an unknown place"
    return (
        f"tool {record.name!r}: Python cannot read the source of {qualname or record.name}() (defined in "
        f"{code}: `python -c`, a heredoc or exec'd text keep none), so no other process and no later session "
        "could rebuild it. Define the function in a .py file or a notebook cell, or give its source text: "
        "@ws.tools.tool(source=TEXT) or tea_notebook.protocol.tools.make_tool(fn, source=TEXT)"
    )


def imported_modules(source: str) -> list[str]:
    """Top-level third-party modules a piece of source imports (the standard library left out)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return sorted(m for m in found if m not in sys.stdlib_module_names and m != "tea_notebook")


def make_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    category: str = "general",
    toolkit: str | None = None,
    permissions: Iterable[str] = (),
    dependencies: Iterable[str] | None = None,
    relations: Iterable[Relation | tuple[str, str]] = (),
    metadata: dict[str, Any] | None = None,
    source: str | None = None,
    idempotent: bool = False,
) -> Tool:
    """Build a :class:`Tool` from a function: its schema from type hints and docstring, its source,
    the third-party modules it imports (unless ``dependencies`` is given), and the metadata passed.
    ``source`` overrides the source text (for code that Python cannot inspect). ``idempotent``: running
    it twice with the same arguments is harmless, so a resume may run again a call of it whose outcome
    is unknown (kept as ``metadata["idempotent"]``, see :attr:`ToolRecord.idempotent`)."""
    if isinstance(fn, Tool):
        return fn
    if not callable(fn):
        raise SchemaError(repr(fn), None, "is not callable")
    if not isinstance(idempotent, bool):
        raise SchemaError(
            getattr(fn, "__name__", repr(fn)), None, f"idempotent must be True or False, not {idempotent!r}"
        )
    from tea_notebook.protocol.records import Relation, ToolRecord

    metadata = {**(metadata or {}), "idempotent": True} if idempotent else metadata
    spec = function_schema(fn, name=name, description=description)
    code = function_source(fn) if source is None else source
    module = getattr(fn, "__module__", "") or ""
    qualname = getattr(fn, "__qualname__", spec.name)
    record = ToolRecord(
        name=spec.name,
        description=spec.description,
        parameters=spec.parameters,
        returns=spec.returns,
        source=code,
        source_hash=hashlib.sha256(code.encode()).hexdigest() if code else "",
        entrypoint=f"{module}:{qualname}" if module else "",
        is_async=spec.is_async,
        dependencies=sorted(set(dependencies)) if dependencies is not None else imported_modules(code),
        permissions=sorted(set(permissions)),
        category=category,
        toolkit=toolkit,
        relations=[r if isinstance(r, Relation) else Relation(type=r[0], target=r[1]) for r in relations],
        metadata=dict(metadata or {}),
        origin="python",
    )
    return Tool(record, fn, spec.args_model, spec.context_param)


def tool(fn: Callable[..., Any] | None = None, *, workspace: Any = None, **options: Any) -> Any:
    """Turn a typed function into a :class:`Tool`; register it in ``workspace`` or the current one.

    Works bare (``@tool``) and with arguments (``@tool(category="math")``); ``options`` are those of
    :func:`make_tool`: ``name``, ``description``, ``category``, ``toolkit``, ``permissions``,
    ``dependencies``, ``relations`` (``Relation`` objects or ``(type, target)`` pairs with types
    ``depends_on``, ``conflicts_with``, ``precondition``, ``postcondition``), ``metadata`` and
    ``idempotent`` (``@tool(idempotent=True)``: a resume may run again a call whose outcome is unknown).
    Without a workspace argument the tool is registered in the current workspace when one is
    active (``ws.activate()``); otherwise it is returned unregistered for ``ws.tools.register(...)``.
    """

    def build(f: Callable[..., Any]) -> Tool:
        built = make_tool(f, **options)
        # the current workspace is typed as what every layer may rely on (a StoreHost): it holds the tools
        target: Any = workspace if workspace is not None else current_workspace(required=False)
        if target is not None:
            built.record = target.tools.register(built)
        return built

    return build(fn) if fn is not None else build
