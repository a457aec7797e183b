"""Package attributes imported on first use (what ``tea_notebook`` and ``tea_notebook.eval`` export),
so importing a package loads none of its heavy modules."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_getattr(
    package: str, exports: dict[str, str], submodules: tuple[str, ...], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__``: ``exports`` maps a name to the module defining it (the value is then
    kept in ``namespace``); ``submodules`` are subpackages reached as attributes."""

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
