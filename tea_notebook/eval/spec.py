"""An agent as data, to run it somewhere else: its ACP card with every other card it may delegate
to, the TCP tool records it may call, the workspace's default model and embedder, and the scripted
models those name. :func:`build_workspace` makes a temporary workspace from such a spec in another
process (a Ray worker), of the class the driver's workspace has (handed down: eval/ sits below the
``Workspace`` façade and does not import it), and rebuilds the agent there the way a restarted kernel
does (:func:`tea_notebook.agents.kinds.build`); no shared file system is assumed.

Tools keep their trust as the driver recorded it: a tool that runs only out of process there
runs only out of process in the worker too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Protocol

from tea_notebook.errors import TeaError
from tea_notebook.runtime.host import RunHost

_SCRIPT = re.compile(r"tea/script:([A-Za-z0-9_.\-]+)")
_embedders: dict[str, Any] = {}  # per worker process: loading the MiniLM model once is enough


def _record_data(record: Any) -> dict[str, Any]:
    return record.model_dump(mode="json", exclude={"version", "usage"})


def export_spec(ws: "RunHost", agent: Any, model: str | None = None) -> dict[str, Any]:
    """The spec of ``agent`` (registered in ``ws``) for :func:`build_workspace` elsewhere."""
    import json

    from tea_notebook.models.embedders import embedder_spec
    from tea_notebook.models.offline import ScriptedModel

    name = getattr(agent, "name", None)
    if not name or name not in ws.agents:
        raise TeaError(
            f"agent {name!r} is not registered in the workspace; another process can only rebuild a registered "
            "agent (make it with ws.agent(...), ws.orchestra(...), ...)"
        )
    spec = {
        "agent": name,
        "agents": [_record_data(r) for r in ws.agents.list()],
        "tools": [_record_data(r) for r in ws.tools.list()],
        "default_model": ws.default_model,
        "embedder": embedder_spec(ws.embedder) or "hashing",
        "model": model,
    }
    text = json.dumps(spec, default=str) + " " + str(getattr(agent, "model", "") or "")
    scripted = {}
    for script_id in sorted(set(_SCRIPT.findall(text))):
        original = ScriptedModel.get(script_id)
        copy = object.__new__(ScriptedModel)
        copy.__dict__.update(original.__dict__)
        copy.calls = []  # what it was asked here stays here
        scripted[script_id] = copy
    spec["scripted"] = scripted
    return spec


class WorkerHost(RunHost, Protocol):
    """The workspace a worker makes for one task and closes after it (the driver's ``Workspace`` class)."""

    def close(self) -> None:
        """Stop its live sessions, write pending index files and close its database."""
        ...


def build_workspace(
    spec: dict[str, Any], folder: str | Path, make: Callable[..., WorkerHost]
) -> tuple[WorkerHost, Any]:
    """A new workspace in ``folder`` holding the spec's tools and cards, and the agent rebuilt in it.

    ``make`` is the workspace class (called as ``make(folder, embedder=..., model=...)``): the
    driver's, ``type(ws)``."""
    from tea_notebook.agents.kinds import build
    from tea_notebook.models.embedders import resolve_embedder
    from tea_notebook.models.offline import ScriptedModel
    from tea_notebook.protocol.records import AgentRecord, ToolRecord

    for script_id, model in (spec.get("scripted") or {}).items():
        ScriptedModel._registry[script_id] = model
    key = spec.get("embedder") or "hashing"
    if key not in _embedders:
        _embedders[key] = resolve_embedder(key)
    ws = make(folder, embedder=_embedders[key], model=spec.get("default_model") or None)
    tools = [ToolRecord.model_validate(d) for d in spec.get("tools", [])]
    if tools:
        ws.tools.register_many(tools, note="evaluation spec")
    cards = [AgentRecord.model_validate(d) for d in spec.get("agents", [])]
    if cards:
        ws.agents.register_many(cards, note="evaluation spec")
    return ws, build(ws, spec["agent"])


__all__ = ["WorkerHost", "build_workspace", "export_spec"]
