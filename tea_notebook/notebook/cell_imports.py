"""The imports a ``%%tool`` function needs from other cells, so its stored source rebuilds it.

A function defined in a notebook cell reads module-level names (``np``, ``Path``) that another cell
imported. Its source alone does not say so: rebuilt after a kernel restart (or in another process)
it fails with NameError. :func:`needed_imports` finds the free names of the function that are
modules or imported objects in the user's namespace and returns them as import lines (the
statement the person wrote, from the input history, when it still gives the same object; else one
made from the object's module), plus the free names no import can bring back (a variable or a
helper function defined in the notebook), which ``%%tool`` warns about.
"""

from __future__ import annotations

import ast
import builtins
import sys
import types
from typing import Any, Iterable

_NOTHING = object()


def free_names(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """Names a function reads that it does not bind itself (parameters, assignments, imports,
    nested definitions, loop and comprehension targets), in first-use order. Annotations and
    default values count: they are evaluated when the ``def`` runs. Decorators do not (a stored
    tool is rebuilt without them)."""
    bound: set[str] = set()
    args = node.args
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if a is not None:
            bound.add(a.arg)
    for sub in ast.walk(node):
        if sub is node:
            continue
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            bound.add(sub.id)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(sub.name)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in sub.names)
        elif isinstance(sub, ast.arg):
            bound.add(sub.arg)
        elif isinstance(sub, ast.ExceptHandler) and sub.name:
            bound.add(sub.name)
    declared_global = {n for sub in ast.walk(node) if isinstance(sub, ast.Global) for n in sub.names}
    bound -= declared_global
    roots: list[ast.AST] = [*node.body, *args.defaults, *(d for d in args.kw_defaults if d is not None)]
    roots += [
        a.annotation
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        if a is not None and a.annotation is not None
    ]
    if node.returns is not None:
        roots.append(node.returns)
    seen: dict[str, None] = {}
    for root in roots:
        for sub in ast.walk(root):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in bound:
                seen.setdefault(sub.id, None)
    return list(seen)


def _history_imports(history: Iterable[str]) -> dict[str, ast.stmt]:
    """The last import statement that bound each name, from the cells' input history."""
    found: dict[str, ast.stmt] = {}
    for text in history:
        if not isinstance(text, str) or "import" not in text:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for sub in ast.walk(tree):
            if isinstance(sub, ast.Import):
                for alias in sub.names:
                    found[alias.asname or alias.name.split(".")[0]] = ast.Import(names=[alias])
            elif isinstance(sub, ast.ImportFrom) and not sub.level and sub.module:
                for alias in sub.names:
                    if alias.name != "*":
                        found[alias.asname or alias.name] = ast.ImportFrom(module=sub.module, names=[alias], level=0)
    return found


def _gives(statement: ast.stmt, name: str, value: Any) -> bool:
    """Whether running ``statement`` now would bind ``name`` to ``value`` (checked on loaded modules)."""
    if isinstance(statement, ast.Import):
        alias = statement.names[0]
        target = alias.name if alias.asname else alias.name.split(".")[0]
        return sys.modules.get(target) is value
    if isinstance(statement, ast.ImportFrom):
        module = sys.modules.get(statement.module or "")
        alias = statement.names[0]
        if module is None:
            return False
        found = getattr(module, alias.name, None)
        if found is None:
            found = sys.modules.get(f"{statement.module}.{alias.name}")
        return found is value
    return False


def _from_object(name: str, value: Any) -> str | None:
    """An import line made from the object itself: a module, or a function / class of a module."""
    if isinstance(value, types.ModuleType):
        module = value.__name__
        if module == "__main__" or module not in sys.modules:
            return None
        if name == module:
            return f"import {module}"
        if "." not in module or module.rsplit(".", 1)[1] != name:
            return f"import {module} as {name}"
        parent, child = module.rsplit(".", 1)
        return f"from {parent} import {child}"
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "." in qualname or "<" in qualname:
        return None
    if module in ("__main__", "builtins") or module not in sys.modules:
        return None
    if getattr(sys.modules[module], qualname, None) is not value:
        return None
    return f"from {module} import {qualname}" + ("" if qualname == name else f" as {name}")


def needed_imports(
    node: ast.FunctionDef | ast.AsyncFunctionDef, namespace: dict[str, Any], history: Iterable[str] = ()
) -> tuple[list[str], list[str]]:
    """``(import lines, missing names)`` for a function defined in a notebook cell: the imports of
    the module-level names it reads, and the names it reads that are neither imports nor builtins
    (notebook variables and helpers a rebuilt tool would not have)."""
    imports: list[str] = []
    missing: list[str] = []
    recorded = None
    for name in free_names(node):
        if name not in namespace:
            continue  # a builtin, or a name that is missing now too (it fails here already)
        value = namespace[name]
        builtin = getattr(builtins, name, _NOTHING)
        if builtin is not _NOTHING and (value is builtin or getattr(value, "__wrapped__", None) is builtin):
            continue  # a builtin, or the shell's stand-in for one (IPython's open wraps it): a rebuilt tool has it
        if recorded is None:
            recorded = _history_imports(history)
        statement = recorded.get(name)
        line = ast.unparse(statement) if statement is not None and _gives(statement, name, value) else None
        line = line or _from_object(name, value)
        if line is None:
            missing.append(name)
        elif line not in imports:
            imports.append(line)
    return imports, missing
