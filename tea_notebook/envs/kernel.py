"""The ``kernel`` environment: the live notebook namespace (the user's variables) as an environment.

Without a grant the agent sees names and types only (``variables``: type, shape or length, no
values). Reading values needs the ``kernel.read`` grant (``read``, and previews in ``variables``);
changing the user's data needs ``kernel.write`` (``write`` and ``run``; it includes reading, since
code can print anything). Grant them per run: ``%%agent --grant kernel.read`` or
``agent.run(..., grants=["kernel.write"])``. Every change is an action in the trajectory and an
entry of :attr:`KernelEnvironment.writes`. Whatever is read is redacted first
(:func:`tea_notebook.redaction.redact`): secret-named variables show ``[redacted]``, secret-shaped
text is replaced.

Nothing here imports pandas or numpy. Without a grant the listing runs none of the person's code:
names and types are read statically (:func:`describe_static`: no property, ``__getattr__``,
``__len__`` or ``__repr__`` of a user class is called, not even a metaclass's), sizes only of exact
built-in containers, shapes only of exact numpy and pandas types. With ``kernel.read``, shapes,
dtypes and columns are read by duck typing (reading a value may run its code: that is the grant).
"""

from __future__ import annotations

import ast
import asyncio
import ctypes
import io
import itertools
import keyword
import linecache
import reprlib
import sys
import threading
import time
import traceback
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Iterator

from tea_notebook.envs.base import Environment, EnvironmentFailure, action
from tea_notebook.redaction import REDACTED, is_secret_name, redact

GRANT = "kernel.write"
READ_GRANT = "kernel.read"
HOW_TO_GRANT = '`%%agent --grant kernel.write` or `agent.run(..., grants=["kernel.write"])`'
HOW_TO_GRANT_READ = '`%%agent --grant kernel.read` or `agent.run(..., grants=["kernel.read"])`'

# names IPython puts in the namespace that are not the user's (when its own hidden list is unknown)
_IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
_run_ids = itertools.count(1)


# -- per-thread output capture ------------------------------------------------------------------
class _ThreadRouted:
    """Stands in for ``sys.stdout`` / ``sys.stderr`` while agent code runs: writes from a capturing
    thread go to its buffer, every other thread's (the kernel's own output) to the real stream."""

    def __init__(self, real: Any):
        self.real = real
        self.buffers: dict[int, io.StringIO] = {}

    def write(self, text: str) -> int:
        buffer = self.buffers.get(threading.get_ident())
        return (buffer if buffer is not None else self.real).write(text)

    def flush(self) -> None:
        if threading.get_ident() not in self.buffers:
            self.real.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


_capture_lock = threading.Lock()


@contextmanager
def _capture(out: io.StringIO, err: io.StringIO) -> Iterator[None]:
    """Send this thread's ``print`` output (and stderr) to ``out`` / ``err``."""
    me = threading.get_ident()
    with _capture_lock:
        for stream, buffer in (("stdout", out), ("stderr", err)):
            current = getattr(sys, stream)
            if not isinstance(current, _ThreadRouted):
                current = _ThreadRouted(current)
                setattr(sys, stream, current)
            current.buffers[me] = buffer
    try:
        yield
    finally:
        with _capture_lock:
            for stream in ("stdout", "stderr"):
                current = getattr(sys, stream)
                if isinstance(current, _ThreadRouted):
                    current.buffers.pop(me, None)
                    if not current.buffers:
                        setattr(sys, stream, current.real)


# -- summaries --------------------------------------------------------------------------------
def _repr(limit: int, items: int) -> reprlib.Repr:
    r = reprlib.Repr()
    r.maxstring = r.maxother = limit
    r.maxlist = r.maxtuple = r.maxset = r.maxfrozenset = r.maxdeque = r.maxarray = items
    r.maxdict = items
    r.maxlevel = 3
    return r


_PREVIEW = _repr(60, 5)
_FULL = _repr(2000, 50)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(value: Any, contents: bool = True) -> str:
    """Type, shape / dtype / columns or length of a value, read by duck typing (no pandas or numpy
    import): ``DataFrame, shape (3, 2), columns ['a', 'b']``, ``list, len 3``. ``contents=False``
    leaves out column names (they are the person's data too)."""
    parts = [type(value).__name__]
    if isinstance(value, type):
        return "class"
    shape = _attr(value, "shape")
    if isinstance(shape, tuple):
        parts.append(f"shape {tuple(shape)}")
        columns = _attr(value, "columns") if contents else None
        if columns is not None and not isinstance(columns, (str, bytes)):
            try:
                names = [str(c) for c in itertools.islice(iter(columns), 11)]
                shown = ", ".join(repr(n) for n in names[:10]) + (", …" if len(names) > 10 else "")
                parts.append(f"columns [{shown}]")
            except Exception:  # noqa: BLE001 - a summary never fails
                pass
        dtype = _attr(value, "dtype")
        if dtype is not None:
            parts.append(f"dtype {dtype}")
    elif hasattr(type(value), "__len__"):
        try:
            parts.append(f"len {len(value)}")
        except Exception:  # noqa: BLE001
            pass
    return ", ".join(parts)


# -- the listing without a grant: no user code runs ------------------------------------------------
_TYPE_NAME = type.__dict__["__name__"]
_TYPE_MODULE = type.__dict__["__module__"]
_TYPE_MRO = type.__dict__["__mro__"]
# exact built-in types whose len() is the interpreter's own (a subclass may define __len__)
_SIZED = (str, bytes, bytearray, list, tuple, dict, set, frozenset, range, memoryview)
# (module, type name) -> attributes read for the listing; the library's own code, never the person's
_KNOWN_SHAPED = {
    ("numpy", "ndarray"): ("shape", "dtype"),
    ("pandas.core.frame", "DataFrame"): ("shape",),
    ("pandas.core.series", "Series"): ("shape", "dtype"),
}


def _static_name(cls: type) -> str:
    """A class's ``__name__`` read through ``type``'s own slot (a metaclass property is not run)."""
    try:
        name = _TYPE_NAME.__get__(cls, type)
    except Exception:  # noqa: BLE001 - a summary never fails
        return "object"
    return name if type(name) is str else "object"


def _static_mro(cls: type) -> tuple[type, ...]:
    try:
        mro = _TYPE_MRO.__get__(cls, type)
    except Exception:  # noqa: BLE001
        return ()
    return mro if type(mro) is tuple else ()


def _is_a(value: Any, *classes: type) -> bool:
    """``isinstance`` without asking the value: ``__class__``, ``__instancecheck__`` and a metaclass's
    ``__eq__`` are not consulted (classes are compared by identity)."""
    return any(c is k for c in _static_mro(type(value)) for k in classes)


def _known_shaped(value: Any) -> tuple[str, ...]:
    """The attributes to read of an exact numpy array or pandas frame / series (none otherwise)."""
    cls = type(value)
    try:
        module_name = _TYPE_MODULE.__get__(cls, type)
    except Exception:  # noqa: BLE001
        return ()
    if type(module_name) is not str:  # a class may set __module__ to anything
        return ()
    key = (module_name, _static_name(cls))
    attrs = _KNOWN_SHAPED.get(key)
    if attrs is None:
        return ()
    module = sys.modules.get(key[0])  # only a library already imported: never import it here
    return attrs if module is not None and getattr(module, key[1], None) is cls else ()


def describe_static(value: Any) -> str:
    """Type and size of a value without running any of its code: the type's name read statically,
    ``len`` only for exact built-in containers, shape and dtype only for exact numpy / pandas types
    (their own code). ``"class"`` for a class, whatever its metaclass."""
    cls = type(value)
    if _is_a(value, type):
        return "class"
    parts = [_static_name(cls)]
    if any(cls is sized for sized in _SIZED):
        parts.append(f"len {len(value)}")
    else:
        for name in _known_shaped(value):
            try:
                found = getattr(value, name)
            except Exception:  # noqa: BLE001
                continue
            if name == "shape" and type(found) is tuple:
                parts.append(f"shape {tuple(int(n) for n in found)}")
            elif name == "dtype":
                parts.append(f"dtype {found}")
    return ", ".join(parts)


def _attr(value: Any, name: str) -> Any:
    try:
        return getattr(value, name, None)
    except Exception:  # noqa: BLE001 - a property that raises is just absent
        return None


def _preview(value: Any) -> str:
    """A short one-line repr for the variables list (bounded even for huge containers)."""
    if _attr(value, "shape") is not None and not isinstance(value, type):
        return ""  # arrays and frames: the shape says more than a clipped repr
    try:
        text = _PREVIEW.repr(value)
    except Exception as exc:  # noqa: BLE001
        return f"<repr failed: {type(exc).__name__}>"
    return _cut(" ".join(text.split()), 80)


def _shown(name: str, text: str) -> str:
    """What the model may see of a value's text: ``[redacted]`` for a secret-named variable, the text
    with secrets replaced otherwise."""
    head = name.strip().split(".", 1)[0]
    if is_secret_name(head) or is_secret_name(name.strip().rsplit(".", 1)[-1]):
        return REDACTED
    return str(redact(text))


class KernelEnvironment(Environment):
    """The live notebook namespace: the user's variables by name and type; with the ``kernel.read``
    grant their values; with the ``kernel.write`` grant, set variables and run code in it.

    ``namespace``: the dict to expose (by default the running IPython kernel's ``user_ns``).
    ``max_chars``: the longest text one ``read`` or ``run`` returns.
    """

    name: ClassVar[str] = "kernel"
    description: ClassVar[str] = (
        "The person's live notebook namespace: list their variables (names and types); read values only "
        "when the run was granted kernel.read; write variables and run code there only with kernel.write."
    )
    rules: ClassVar[str] = (
        "These are the person's own variables. variables lists names and types; read shows a value and needs "
        "the kernel.read grant; write and run change their data and need the kernel.write grant. Do not retry "
        "an action that was refused: say what you would read or change."
    )
    category: ClassVar[str] = "notebook"
    scope: ClassVar[str] = "run"

    #: at most this many variables in ``variables`` / ``state``
    max_variables: ClassVar[int] = 100
    max_state_chars: ClassVar[int] = 2000

    def __init__(
        self,
        folder: Path,
        context: Any = None,
        *,
        namespace: dict[str, Any] | None = None,
        max_chars: int = 4000,
    ):
        super().__init__(folder, context)
        self._given = namespace
        self.max_chars = int(max_chars)
        self.namespace: dict[str, Any] | None = None
        self._hidden: dict[str, Any] = {}
        #: every change made to the namespace in this session: ``{"action", "name" or "code", ...}``
        self.writes: list[dict[str, Any]] = []

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Attach to the namespace: the one given, else the running IPython kernel's."""
        if self._given is not None:
            self.namespace = self._given
            return
        ipython = sys.modules.get("IPython")  # running in IPython means it is already imported
        shell = ipython.get_ipython() if ipython is not None else None
        if shell is None:
            raise EnvironmentFailure(
                "the kernel environment needs a running IPython kernel (a notebook) or a namespace: "
                "ws.envs.add(KernelEnvironment, namespace=globals())"
            )
        self.namespace = shell.user_ns
        self._hidden = getattr(shell, "user_ns_hidden", {}) or {}

    async def stop(self) -> None:
        """Detach (the namespace itself is the person's and stays as it is)."""
        self.namespace = None

    # -- helpers ------------------------------------------------------------------------------
    @property
    def ns(self) -> dict[str, Any]:
        """The attached namespace."""
        if self.namespace is None:
            raise EnvironmentFailure("the kernel environment is not started")
        return self.namespace

    def _snapshot(self) -> dict[str, Any]:
        """A copy of the namespace (it may change while it is read)."""
        for _ in range(5):
            try:
                return dict(self.ns)
            except RuntimeError:  # changed size during the copy
                time.sleep(0.001)
        return dict(list(self.ns.items()))

    def is_user_variable(self, name: str, value: Any) -> bool:
        """True for the person's own names: not ``_private``, not modules, not IPython's (decided
        without running the value's code)."""
        if type(name) is not str or name.startswith("_") or _is_a(value, types.ModuleType):
            return False
        if name in self._hidden:
            return self._hidden[name] is not value  # a user value that reuses a hidden name
        return name not in _IPYTHON_NAMES

    def _granted(self, grant: str) -> bool:
        grants = getattr(self.context, "grants", None) or set()
        return grant in grants or (grant == READ_GRANT and GRANT in grants)

    def _listing(self, limit_items: int, limit_chars: int) -> str:
        readable = self._granted(READ_GRANT)
        variables, functions = [], []
        for name, value in sorted(self._snapshot().items(), key=lambda item: item[0] if type(item[0]) is str else ""):
            if not self.is_user_variable(name, value):
                continue
            if _is_a(value, types.FunctionType, types.BuiltinFunctionType, type):
                functions.append(name)
            else:
                variables.append((name, value))
        if not variables and not functions:
            return "no user variables"
        lines = [f"{len(variables)} variable{'s' if len(variables) != 1 else ''}:"]
        used = len(lines[0])
        shown = 0
        for name, value in variables:
            preview = _shown(name, _preview(value)) if readable else ""
            kind = describe(value, readable) if readable else describe_static(value)
            line = f"{name}: {kind}" + (f" = {preview}" if preview else "")
            if shown >= limit_items or used + len(line) > limit_chars:
                break
            lines.append(line)
            used += len(line) + 1
            shown += 1
        if shown < len(variables):
            lines.append(f"… {len(variables) - shown} more (read one by name)")
        if functions:
            lines.append(_cut("functions and classes: " + ", ".join(functions), 400))
        if not readable:
            lines.append(f"(names and types only: values need the {READ_GRANT} grant)")
        return "\n".join(lines)

    def _require_write(self, what: str) -> None:
        if not self._granted(GRANT):
            raise EnvironmentFailure(
                f"kernel.{what} refused: changing the notebook's variables needs the {GRANT} grant, which this "
                f"run does not have. The person can grant it with {HOW_TO_GRANT}."
            )

    def _require_read(self) -> None:
        if not self._granted(READ_GRANT):
            raise EnvironmentFailure(
                f"kernel.read refused: reading the values of the notebook's variables needs the {READ_GRANT} "
                f"grant, which this run does not have (variables lists names and types without it). The person "
                f"can grant it with {HOW_TO_GRANT_READ}."
            )

    def _lookup(self, name: str) -> Any:
        head, *rest = name.strip().split(".")
        ns = self.ns
        if head not in ns:
            known = [n for n, v in self._snapshot().items() if self.is_user_variable(n, v)]
            listed = ", ".join(sorted(known)[:30]) or "none"
            raise EnvironmentFailure(f"no variable {head!r} in the notebook (variables: {listed})")
        value = ns[head]
        for i, part in enumerate(rest):
            if not part.isidentifier() or part.startswith("_"):
                raise EnvironmentFailure(f"{name!r}: only public attribute names may follow the variable")
            try:
                value = getattr(value, part)
            except Exception as exc:  # noqa: BLE001
                where = ".".join([head, *rest[:i]])
                raise EnvironmentFailure(f"{where} has no attribute {part!r} ({type(exc).__name__})") from None
        return value

    # -- actions ------------------------------------------------------------------------------
    @action
    def variables(self) -> str:
        """List the person's variables in the notebook with their type and shape or length (and a
        short preview of each value when the run has the kernel.read grant).

        Returns:
            One variable per line: "name: type, shape/len" (+ " = short preview" with kernel.read).
        """
        return self._listing(self.max_variables, self.max_chars)

    @action
    def read(self, name: str) -> str:
        """Show one variable: its type, shape or length, and a bounded view of its value (the first
        rows of a table). Needs the kernel.read grant.

        Args:
            name: the variable's name; public attributes may follow with dots (df.columns)
        """
        self._require_read()
        value = self._lookup(name)
        header = f"{name}: {describe(value)}"
        limit = self.max_chars
        body, note = "", ""
        try:
            if isinstance(value, str):
                body = value[:limit]
                if len(value) > limit:
                    note = f"(first {limit} of {len(value)} characters)"
            elif callable(_attr(value, "head")) and callable(_attr(value, "to_string")):
                rows = _attr(value, "shape")
                body = value.head(20).to_string()
                total = rows[0] if isinstance(rows, tuple) and rows else None
                if total is not None and total > 20:
                    note = f"(first 20 of {total} rows)"
                dtypes = _attr(value, "dtypes")
                if dtypes is not None and callable(_attr(dtypes, "to_string")):
                    body += "\n\ndtypes:\n" + dtypes.to_string()
            elif _attr(value, "shape") is not None:
                body = repr(value)  # arrays summarise themselves when large
            else:
                body = _FULL.repr(value)
        except Exception as exc:  # noqa: BLE001 - a value that cannot be shown is described instead
            body = f"<cannot show the value: {type(exc).__name__}: {exc}>"
        body = _shown(name, body)
        if len(body) > limit:
            body, note = body[: limit - 1] + "…", note or f"(cut to {limit} characters)"
        return "\n".join(x for x in (header, body, note) if x)

    @action
    def write(self, name: str, value_json: Any) -> str:
        """Set a variable in the person's notebook (needs the kernel.write grant).

        Args:
            name: the variable name (a Python identifier)
            value_json: the value as JSON (number, string, boolean, null, array or object); arrays
                become lists and objects dicts
        """
        self._require_write("write")
        name = name.strip()
        if not name.isidentifier() or keyword.iskeyword(name):
            raise EnvironmentFailure(f"{name!r} is not a valid Python variable name")
        if name.startswith("_"):
            raise EnvironmentFailure(f"{name!r} refused: names starting with '_' belong to IPython")
        ns = self.ns
        previous = describe(ns[name]) if name in ns else None
        ns[name] = value_json
        self.writes.append(
            {"action": "write", "name": name, "value": describe(value_json), "replaced": previous, "time": time.time()}
        )
        was = f"; it was {previous}" if previous is not None else " (new variable)"
        return f"set {name} = {_preview(value_json)} ({describe(value_json)}){was}"

    @action(timeout=120.0)
    async def run(self, code: str) -> str:
        """Run Python code in the person's notebook namespace, like a notebook cell (needs the
        kernel.write grant). The value of a last expression is shown, as in a REPL.

        Args:
            code: the Python code

        Returns:
            What it printed, the value of its last expression, or the exception it raised.
        """
        self._require_write("run")
        box: dict[str, Any] = {"lock": threading.Lock()}
        try:
            return await asyncio.to_thread(self._execute, code, box)
        except asyncio.CancelledError:  # timed out: interrupt the code still running in its thread
            with box["lock"]:
                thread = box.get("thread")
                if thread is not None and not box.get("done"):
                    box["timed_out"] = True
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(thread), ctypes.py_object(KeyboardInterrupt)
                    )
            raise

    def _execute(self, code: str, box: dict[str, Any]) -> str:
        """Run ``code`` in this thread with the namespace as its globals (see :meth:`run`)."""
        box["thread"] = threading.get_ident()
        ns = self.ns
        filename = f"<kernel-run-{next(_run_ids)}>"
        out, err = io.StringIO(), io.StringIO()
        result: str | None = None
        error: str | None = None
        before = {k: id(v) for k, v in self._snapshot().items()}
        try:
            try:
                tree = ast.parse(code, filename, "exec")
            except SyntaxError:
                error = traceback.format_exc(limit=0)
            else:
                linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
                last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
                with _capture(out, err):
                    try:
                        exec(compile(tree, filename, "exec"), ns)  # noqa: S102 - the granted purpose
                        if last is not None:
                            value = eval(compile(ast.Expression(last.value), filename, "eval"), ns)  # noqa: S307
                            if value is not None:
                                result = _cut(
                                    _FULL.repr(value) if _attr(value, "shape") is None else repr(value), self.max_chars
                                )
                    except BaseException as exc:  # noqa: BLE001 - the code's exception is the observation
                        if isinstance(exc, KeyboardInterrupt) and box.get("timed_out"):
                            error = "KeyboardInterrupt: interrupted (the action's time limit was reached)"
                        else:
                            tb = exc.__traceback__
                            error = "".join(traceback.format_exception(type(exc), exc, tb.tb_next if tb else None))
        finally:
            with box["lock"]:
                box["done"] = True
        after = self._snapshot()
        changed = sorted(k for k, v in after.items() if before.get(k) != id(v) and self.is_user_variable(k, v))
        removed = sorted(k for k in before if k not in after and not k.startswith("_"))
        self.writes.append(
            {
                "action": "run",
                "code": _cut(code, 2000),
                "ok": error is None,
                "changed": changed,
                "removed": removed,
                "time": time.time(),
            }
        )
        parts = []
        if out.getvalue():
            parts.append("stdout:\n" + out.getvalue().rstrip("\n"))
        if err.getvalue():
            parts.append("stderr:\n" + err.getvalue().rstrip("\n"))
        if result is not None:
            parts.append(f"value: {result}")
        if error is not None:
            parts.append("error:\n" + error.rstrip("\n"))
        if changed or removed:
            parts.append(
                "variables "
                + "; ".join(
                    x
                    for x in (
                        f"set: {', '.join(changed)}" if changed else "",
                        f"deleted: {', '.join(removed)}" if removed else "",
                    )
                    if x
                )
            )
        text = redact("\n".join(parts) if parts else "ran without output")
        text = text if len(text) <= self.max_chars else _cut(text, self.max_chars) + " (output cut)"
        if error is not None:  # the code failed: the action fails, with everything it printed
            raise EnvironmentFailure(text)
        return text

    # -- what the prompt shows ---------------------------------------------------------------
    def state(self) -> str:
        """The variables (bounded) and how many changes this session made."""
        if self.namespace is None:
            return "kernel: not attached"
        listing = self._listing(30, self.max_state_chars)
        if self._granted(GRANT):
            mode = "write granted"
        elif self._granted(READ_GRANT):
            mode = "read-only (kernel.read granted, no kernel.write grant)"
        else:
            mode = "names and types only (no kernel.read or kernel.write grant)"
        return f"{listing}\nwrites this run: {len(self.writes)} ({mode})"
