"""The six TEA transformations: A2T, T2A, E2T, T2E, A2E, E2A.

Each produces a record in its target protocol from an existing one, checks **interface
consistency** (the produced record and every schema it exposes are well-typed in the target
protocol) and registers it. Where a runtime exists in this process (an agent runner, an
environment runtime, Python tools) the produced record is wired to it, so it can be invoked.
:func:`compose` chains transformations, checking that domains and codomains match (closure), and
:func:`action_set` is what the composition property (T2E then E2T gives back the same actions)
compares.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tea_notebook.errors import TransformationError
from tea_notebook.protocol.acp import AGENT_TASK_SCHEMA
from tea_notebook.protocol.records import (
    ActionSpec,
    AgentRecord,
    EnvironmentRecord,
    Record,
    Relation,
    ToolkitRecord,
    ToolRecord,
)

if TYPE_CHECKING:
    from tea_notebook.protocol.host import RegistryHost


def _check_schema(owner: str, schema: dict[str, Any]) -> None:
    from jsonschema import Draft202012Validator  # on first use: its import is slow (see protocol.registry)
    from jsonschema.exceptions import SchemaError as JSONSchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except JSONSchemaError as exc:
        raise TransformationError(f"{owner}: parameter schema is not valid JSON Schema: {exc.message}") from None
    if schema.get("type") != "object":
        raise TransformationError(f"{owner}: parameters must be a JSON object schema")


def check_interface(ws: "RegistryHost", record: Record) -> None:
    """Interface consistency: the record re-validates as its type and its I/O schemas are well-typed
    in the target protocol (every referenced tool exists, every schema is an object schema)."""
    try:
        type(record).model_validate(record.model_dump())
    except Exception as exc:  # noqa: BLE001 - pydantic's error, reworded
        raise TransformationError(f"{record.KIND} {record.name!r} is not a valid record: {exc}") from None
    if isinstance(record, ToolRecord):
        _check_schema(f"tool {record.name!r}", record.parameters)
    elif isinstance(record, EnvironmentRecord):
        if not record.actions:
            raise TransformationError(f"environment {record.name!r} has no actions")
        for action in record.actions:
            _check_schema(f"action {record.name}.{action.name}", action.parameters)
    elif isinstance(record, (AgentRecord, ToolkitRecord)):
        missing = [t for t in record.tools if t not in ws.tools]
        if missing:
            raise TransformationError(
                f"{record.KIND} {record.name!r} refers to tools that are not registered: {', '.join(missing)}"
            )


def action_set(obj: EnvironmentRecord | list[ToolRecord]) -> set[tuple[str, str]]:
    """``{(action name, canonical parameter schema)}`` of an environment or of a list of tools."""
    if isinstance(obj, EnvironmentRecord):
        items = [(a.name, a.parameters) for a in obj.actions]
    else:
        items = [(t.metadata.get("action", t.name), t.parameters) for t in obj]
    return {(name, json.dumps(schema, sort_keys=True)) for name, schema in items}


def _provenance(op: str, source: Record) -> dict[str, Any]:
    return {"transformation": {"op": op, "from": f"{source.KIND}:{source.name}", "from_version": source.version}}


# -- A2T / T2A ---------------------------------------------------------------------------
def a2t(ws: "RegistryHost", agent: str, *, name: str | None = None) -> ToolRecord:
    """Agent → Tool: expose an agent as a tool taking the unmodified task and absolute file paths."""
    tool = a2t_record(ws, agent, name=name)
    return ws.tools.register(tool, note=f"A2T from agent {agent}")


def a2t_record(ws: "RegistryHost", agent: str, *, name: str | None = None) -> ToolRecord:
    """The tool record A2T makes of an agent, checked but not registered (what ``tea mcp serve``
    offers for an agent without changing the workspace)."""
    rec = ws.agents.get(agent)
    caps = "; ".join(rec.capabilities or rec.competencies)
    tool = ToolRecord(
        name=name or (agent if agent.endswith("agent") else f"{agent}_agent"),
        description=f"{rec.description}" + (f" Capabilities: {caps}." if caps else ""),
        parameters=AGENT_TASK_SCHEMA,
        returns={"type": "string", "description": f"The answer of agent {agent}."},
        entrypoint=f"agent:{agent}",
        origin="agent",
        category=rec.category,
        metadata=_provenance("A2T", rec),
    )
    check_interface(ws, tool)
    return tool


def t2a(
    ws: "RegistryHost",
    tools: list[str] | str,
    *,
    name: str,
    description: str,
    role: str = "",
    model: str | None = None,
) -> AgentRecord:
    """Tools → Agent: an agent whose actuators are the given tools (or a toolkit's members)."""
    names = ws.tools.members(tools) if isinstance(tools, str) else list(tools)
    records = [ws.tools.get(n) for n in names]
    agent = AgentRecord(
        name=name,
        description=description,
        role=role or f"operates the tools {', '.join(names)}",
        capabilities=[r.description for r in records],
        tools=names,
        model=model,
        category=records[0].category if records else "general",
        origin="tools",
        # "kind": an agent loop builds it from this card in any kernel (a new one has no runner for it)
        metadata={"kind": "agent", "transformation": {"op": "T2A", "from": [f"tool:{n}" for n in names]}},
    )
    check_interface(ws, agent)
    return ws.agents.register(agent, note="T2A")


# -- E2T / T2E ---------------------------------------------------------------------------
@dataclass
class Lifted:
    """What E2T produces: the toolkit and its tools."""

    toolkit: ToolkitRecord
    tools: list[ToolRecord]


def e2t(ws: "RegistryHost", env: str, *, prefix: str | None = None) -> Lifted:
    """Environment → Tools: lift the action space into a toolkit whose tools keep the actions'
    schemas and whose pre/post-conditions become relations between the tools."""
    rec = ws.envs.get(env)
    stem = prefix if prefix is not None else f"{env}_"
    kit_name = env if prefix is None else (prefix.rstrip("_") or env)
    tool_name = {a.name: f"{stem}{a.name}" for a in rec.actions}
    tools = []
    for action in rec.actions:
        relations = [
            Relation(type=kind, target=tool_name[p])
            for kind, targets in (("precondition", action.preconditions), ("postcondition", action.postconditions))
            for p in targets
            if p in tool_name
        ]
        tools.append(
            ToolRecord(
                name=tool_name[action.name],
                description=action.description,
                parameters=action.parameters,
                returns=action.returns,
                entrypoint=f"environment:{env}.{action.name}",
                origin="environment",
                category=rec.category,
                toolkit=kit_name,
                relations=relations,
                metadata={**_provenance("E2T", rec), "action": action.name},
            )
        )
    kit = ToolkitRecord(
        name=kit_name,
        description=rec.description,
        rules=rec.rules,
        tools=[t.name for t in tools],
        category=rec.category,
        origin="environment",
        metadata=_provenance("E2T", rec),
    )
    for t in tools:
        check_interface(ws, t)
    stored_tools = ws.tools.register_many(tools, note=f"E2T from environment {env}")
    check_interface(ws, kit)
    stored_kit = ws.toolkits.register(kit, note=f"E2T from environment {env}")
    return Lifted(stored_kit, stored_tools)


class _ToolsAsEnvironment:
    """The runtime of a T2E environment: each action invokes its tool in the caller's run context."""

    def __init__(self, ws: "RegistryHost", tool_names: dict[str, str]):
        self._ws, self._tool_names = ws, tool_names

    async def invoke_action(self, action: str, args: dict[str, Any], context: Any) -> Any:
        tool = self._tool_names.get(action)
        if tool is None:
            raise AttributeError(f"no tool behind action {action!r}")
        return (await self._ws.tools.ainvoke(tool, args, context)).unwrap()


def t2e(
    ws: "RegistryHost", tools: list[str] | str, *, name: str, description: str, rules: str = ""
) -> EnvironmentRecord:
    """Tools → Environment: a set of tools (or a toolkit) becomes one environment with a shared
    action space; actions keep the tools' schemas and their precondition links."""
    kit_rules = ""
    if isinstance(tools, str):
        kit_rules = ws.toolkits.get(tools).rules if tools in ws.toolkits else ""
        names = ws.tools.members(tools)
    else:
        names = list(tools)
    records = [ws.tools.get(n) for n in names]
    action_of = {r.name: r.metadata.get("action", r.name) for r in records}
    clash = sorted({a for a in action_of.values() if list(action_of.values()).count(a) > 1})
    if clash:
        raise TransformationError(
            f"T2E {name!r}: several tools would become the same action {', '.join(clash)}; "
            "pass tools with distinct action names"
        )
    actions = [
        ActionSpec(
            name=action_of[r.name],
            description=r.description,
            parameters=r.parameters,
            returns=r.returns,
            preconditions=[action_of[p] for p in r.related("precondition") if p in action_of],
            postconditions=[action_of[p] for p in r.related("postcondition") if p in action_of],
        )
        for r in records
    ]
    env = EnvironmentRecord(
        name=name,
        description=description,
        rules=rules or kit_rules,
        actions=actions,
        category=records[0].category if records else "general",
        origin="tools",
        metadata={"transformation": {"op": "T2E", "from": [f"tool:{n}" for n in names]}},
    )
    check_interface(ws, env)
    runtime = _ToolsAsEnvironment(ws, {action_of[n]: n for n in names})
    return ws.envs.register(env, note="T2E", runtime=runtime)


# -- A2E / E2A ---------------------------------------------------------------------------
class _AgentAsEnvironment:
    """The runtime of an A2E environment: ``ask`` sends a message to the agent and returns its reply."""

    def __init__(self, ws: "RegistryHost", agent: str):
        self._ws, self._agent = ws, agent
        self.transcript: list[tuple[str, str]] = []

    async def invoke_action(self, action: str, args: dict[str, Any], context: Any) -> Any:
        if action != "ask":
            raise AttributeError(f"no action {action!r}")
        message = args["message"]
        answer = (await self._ws.agents.ainvoke(self._agent, message, context=context)).unwrap()
        self.transcript.append((message, str(answer)))
        return answer

    def state(self) -> str:
        if not self.transcript:
            return f"agent {self._agent}: no messages yet"
        last_q, last_a = self.transcript[-1]
        return f"agent {self._agent}: {len(self.transcript)} exchanges; last: {last_q!r} → {last_a!r}"


def a2e(ws: "RegistryHost", agent: str, *, name: str | None = None) -> EnvironmentRecord:
    """Agent → Environment: other agents interact with this agent as an environment (ask / observe)."""
    rec = ws.agents.get(agent)
    env = EnvironmentRecord(
        name=name or f"{agent}_env",
        description=f"Interact with agent {agent}: {rec.description}",
        rules=f"Send messages with ask. The agent's role: {rec.role or rec.description}. "
        + " ".join(rec.safety_constraints),
        state=f"agent {agent}: no messages yet",
        actions=[
            ActionSpec(
                name="ask",
                description=f"Send a message to {agent} and receive its reply.",
                parameters={
                    "type": "object",
                    "properties": {"message": {"type": "string", "description": "What to say or ask."}},
                    "required": ["message"],
                    "additionalProperties": False,
                },
                returns={"type": "string"},
            )
        ],
        category=rec.category,
        origin="agent",
        metadata=_provenance("A2E", rec),
    )
    check_interface(ws, env)
    return ws.envs.register(env, note=f"A2E from agent {agent}", runtime=_AgentAsEnvironment(ws, agent))


def e2a(ws: "RegistryHost", env: str, *, name: str | None = None, model: str | None = None) -> AgentRecord:
    """Environment → Agent: an agent that operates the environment through its lifted toolkit
    (lifting it first if needed). Its decision loop is the runtime's agent loop."""
    rec = ws.envs.get(env)
    kit = ws.toolkits.get(env) if env in ws.toolkits else e2t(ws, env).toolkit
    agent = AgentRecord(
        name=name or f"{env}_agent",
        description=f"An autonomous agent that acts in the {env} environment: {rec.description}",
        role=f"operator of {env}",
        capabilities=[a.description for a in rec.actions],
        safety_constraints=list(rec.constraints),
        tools=list(kit.tools),
        model=model,
        category=rec.category,
        origin="environment",
        metadata={"kind": "agent", **_provenance("E2A", rec)},  # built from the card in any kernel
    )
    check_interface(ws, agent)
    return ws.agents.register(agent, note=f"E2A from environment {env}")


# -- composition -------------------------------------------------------------------------
SIGNATURES: dict[str, tuple[str, str]] = {
    "A2T": ("agent", "tools"),
    "T2A": ("tools", "agent"),
    "E2T": ("environment", "tools"),
    "T2E": ("tools", "environment"),
    "A2E": ("agent", "environment"),
    "E2A": ("environment", "agent"),
}


def compose(ws: "RegistryHost", source: str, steps: list[str], *, source_kind: str) -> Record | Lifted:
    """Apply transformations in order (``["T2E", "E2T"]``) starting from ``source`` of ``source_kind``
    (``agent``, ``environment``, ``tool`` or ``tools``/``toolkit`` for a toolkit name).

    Raises TransformationError when a step's domain does not match the previous codomain."""
    kind = {"toolkit": "tools", "tool": "tools"}.get(source_kind, source_kind)
    if kind not in {"agent", "environment", "tools"}:
        raise TransformationError(f"unknown source kind {source_kind!r}")
    current: Any = [source] if source_kind == "tool" else source
    for i, step in enumerate(steps):
        if step not in SIGNATURES:
            raise TransformationError(f"unknown transformation {step!r}; known: {', '.join(SIGNATURES)}")
        domain, codomain = SIGNATURES[step]
        if domain != kind:
            raise TransformationError(f"step {i + 1} ({step}) takes {domain}, but the previous result is {kind}")
        name = f"{_name_of(current)}_{step.lower()}"
        if step == "A2T":
            current = a2t(ws, current)
        elif step == "T2A":
            current = t2a(ws, current, name=name, description=f"Agent over the tools of {_name_of(current)}")
        elif step == "E2T":
            current = e2t(ws, current, prefix=f"{name}_")
        elif step == "T2E":
            current = t2e(ws, current, name=name, description=f"Environment over the tools of {_name_of(current)}")
        elif step == "A2E":
            current = a2e(ws, current, name=name)
        elif step == "E2A":
            current = e2a(ws, current, name=name)
        current = _as_input(current)
        kind = codomain
    return _result(ws, current, kind)


def _name_of(value: Any) -> str:
    if isinstance(value, list):
        return value[0] if len(value) == 1 else "tools"
    return str(value)


def _as_input(result: Any) -> Any:
    """The name (or names) the next step takes."""
    if isinstance(result, Lifted):
        return result.toolkit.name
    if isinstance(result, ToolRecord):
        return [result.name]
    return result.name


def _result(ws: "RegistryHost", current: Any, kind: str) -> Record | Lifted:
    if kind == "tools":
        if isinstance(current, str):
            kit = ws.toolkits.get(current)
            return Lifted(kit, [ws.tools.get(t) for t in kit.tools])
        return ws.tools.get(current[0])
    return ws.envs.get(current) if kind == "environment" else ws.agents.get(current)
