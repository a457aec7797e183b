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


class LazyModule:
    """A module imported on its first attribute access, which then takes this stand-in's place in
    ``namespace`` under ``alias`` (so later uses reach the module itself, at no extra cost):
    ``np = LazyModule("numpy", globals(), "np")`` keeps numpy off a module's import path."""

    def __init__(self, name: str, namespace: dict[str, Any], alias: str):
        self._name, self._namespace, self._alias = name, namespace, alias

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._name)
        self._namespace[self._alias] = module
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported on first use>"
