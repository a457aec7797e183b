"""tea_notebook: a Jupyter-native toolkit for self-evolving LLM agents on the TEA protocol.

Nothing happens at import time: heavy dependencies (faiss, onnxruntime, litellm) load on first use.
"""

from __future__ import annotations

from tea_notebook._lazy import lazy_getattr
from tea_notebook.version import __version__

_EXPORTS = {
    "Workspace": "tea_notebook.workspace",
    "current_workspace": "tea_notebook.workspace",
    "tool": "tea_notebook.protocol.tools",
    "Tool": "tea_notebook.protocol.tools",
    "ToolContext": "tea_notebook.protocol.context",
    "ToolRecord": "tea_notebook.protocol.records",
    "ToolkitRecord": "tea_notebook.protocol.records",
    "EnvironmentRecord": "tea_notebook.protocol.records",
    "ActionSpec": "tea_notebook.protocol.records",
    "AgentRecord": "tea_notebook.protocol.records",
    "Relation": "tea_notebook.protocol.records",
    "InvokeResult": "tea_notebook.protocol.registry",
    "Context": "tea_notebook.protocol.context",
}

# subpackages reached as attributes (``tn.eval.evaluate``), imported on first use
_SUBPACKAGES = ("eval",)

__all__ = ["__version__", "load_ipython_extension", "unload_ipython_extension", *_EXPORTS, *_SUBPACKAGES]


def load_ipython_extension(ip):  # noqa: ANN001 - IPython's InteractiveShell
    """``%load_ext tea_notebook``: register the magics (the workspace opens on first use)."""
    from tea_notebook.notebook.magics import load

    load(ip)


def unload_ipython_extension(ip):  # noqa: ANN001
    """``%unload_ext tea_notebook``: remove the input hints (IPython removes the rest)."""
    cleanup = getattr(ip, "input_transformers_cleanup", None)
    if cleanup is not None:
        cleanup[:] = [t for t in cleanup if not getattr(t, "tea_hint", False)]


__getattr__ = lazy_getattr("tea_notebook", _EXPORTS, _SUBPACKAGES, globals())
