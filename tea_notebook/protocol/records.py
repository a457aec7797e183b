"""Typed records of the three TEA registries: tools and toolkits (TCP), environments (ECP), agents (ACP).

Records are plain data: what a registry stores, versions, searches and exports. The runtime behind
a record (a Python function, an environment session, an agent loop) lives beside it in memory.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tea_notebook.protocol.record_types import content_hash

# ``defer_build``: pydantic builds a record type's validator when the first record of that type is
# made or read, not when this module is imported (opening a workspace builds none of them)

NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")
#: the longest description of a tool from outside (an MCP server) that is stored or shown to a model
MAX_DESCRIPTION_CHARS = 2000


class Relation(BaseModel):
    """A typed edge of a registry's relation graph, from the record that holds it to ``target``."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    type: str
    target: str
    note: str = ""


class UsageStats(BaseModel):
    """Invocation counts kept beside a record (they change without creating versions)."""

    model_config = ConfigDict(defer_build=True)
    calls: int = 0
    failures: int = 0
    mean_latency_ms: float = 0.0
    last_used: float | None = None

    @property
    def success_rate(self) -> float:
        """Share of calls that returned without error (1.0 before any call)."""
        return 1.0 if self.calls == 0 else (self.calls - self.failures) / self.calls


class Record(BaseModel):
    """Fields every registry record shares. ``version`` is assigned by the registry."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True)

    KIND: ClassVar[str] = "record"
    RELATION_TYPES: ClassVar[frozenset[str]] = frozenset()
    UNVERSIONED: ClassVar[frozenset[str]] = frozenset({"version", "usage"})

    name: str
    description: str
    category: str = "general"
    origin: str = "python"
    metadata: dict[str, Any] = Field(default_factory=dict)
    relations: list[Relation] = Field(default_factory=list)
    version: int = 0

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not NAME_PATTERN.match(value):
            raise ValueError(
                f"{value!r} is not a valid name: use letters, digits, '_' or '-', "
                "start with a letter or '_', at most 64 characters"
            )
        return value

    @field_validator("description")
    @classmethod
    def _has_description(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a description is required (the model chooses by it)")
        return value.strip()

    def content(self) -> dict[str, Any]:
        """The versioned content: everything but the version number and usage counters."""
        return self.model_dump(mode="json", exclude=set(self.UNVERSIONED))

    def content_hash(self) -> str:
        """sha256 of the canonical JSON of :meth:`content`."""
        return content_hash(self.content())

    def search_text(self) -> str:
        """The text that is embedded and keyword-indexed for retrieval."""
        return f"{self.name.replace('_', ' ')}: {self.description}"

    def search_views(self) -> list[tuple[str, float]]:
        """Texts embedded separately and summed with weights into the record's one vector.

        Separate views keep a short, telling name from being drowned by a long description.
        """
        return [(self.name.replace("_", " "), 1.0), (self.description, 1.0)]

    def related(self, type_: str) -> list[str]:
        """Targets of this record's relations of one type."""
        return [r.target for r in self.relations if r.type == type_]


def _schema_words(schema: dict[str, Any]) -> str:
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    parts = []
    for pname, pschema in props.items():
        desc = pschema.get("description", "") if isinstance(pschema, dict) else ""
        parts.append(f"{pname.replace('_', ' ')} {desc}".strip())
    return "; ".join(parts)


class ToolRecord(Record):
    """A tool: typed inputs and outputs, its code or where it comes from, and how it may be used."""

    KIND: ClassVar[str] = "tool"
    RELATION_TYPES: ClassVar[frozenset[str]] = frozenset(
        {"depends_on", "conflicts_with", "precondition", "postcondition"}
    )

    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    returns: dict[str, Any] = Field(default_factory=dict)
    source: str = ""
    source_hash: str = ""
    entrypoint: str = ""
    is_async: bool = False
    dependencies: list[str] = Field(default_factory=list)
    permissions: list[str] = Field(default_factory=list)
    toolkit: str | None = None
    trusted: bool = True
    usage: UsageStats = Field(default_factory=UsageStats)

    @property
    def idempotent(self) -> bool:
        """Whether running the tool twice with the same arguments is harmless (``metadata["idempotent"]``,
        set by ``@tool(idempotent=True)`` or ``%%tool --idempotent``): a resume runs again a call of it
        whose outcome is unknown (its kernel died while it ran); other tools' such calls are refused."""
        return bool(self.metadata.get("idempotent"))

    def search_text(self) -> str:
        """Name, description, parameters, category and toolkit (App. B.3's embedding inputs)."""
        text = super().search_text()
        params = _schema_words(self.parameters)
        if params:
            text += f" Parameters: {params}."
        where = ", ".join(x for x in (self.category, self.toolkit) if x and x != "general")
        return f"{text} ({where})" if where else text

    def search_views(self) -> list[tuple[str, float]]:
        """Name, description and schema (parameters with the name as context), schema at half weight."""
        views = super().search_views()
        params = _schema_words(self.parameters)
        if params:
            views.append((f"{self.name.replace('_', ' ')}: {params}", 0.5))
        return views

    def prompt_description(self) -> str:
        """The description as a model is shown it: a tool imported from an MCP server has it marked
        as that server's words, not ours (it may carry instructions)."""
        if self.origin != "mcp":
            return self.description
        server = (self.metadata.get("mcp") or {}).get("server") or self.toolkit or "?"
        return f"[from MCP server {server!r}; untrusted] {self.description[:MAX_DESCRIPTION_CHARS]}"

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI function-calling form of this tool (with :meth:`prompt_description`)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.prompt_description(),
                "parameters": self.parameters,
            },
        }


class ToolkitRecord(Record):
    """A named group of tools with shared state and usage rules (TCP's context-aware toolkit)."""

    KIND: ClassVar[str] = "toolkit"
    RELATION_TYPES: ClassVar[frozenset[str]] = frozenset({"depends_on", "conflicts_with"})

    tools: list[str] = Field(default_factory=list)
    rules: str = ""
    state: dict[str, Any] = Field(default_factory=dict)

    def search_text(self) -> str:
        """Name, description, rules and member tools."""
        return f"{super().search_text()} {self.rules} Tools: {', '.join(self.tools)}".strip()


class ActionSpec(BaseModel):
    """One typed action of an environment, with the conditions that order it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    name: str
    description: str
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    returns: dict[str, Any] = Field(default_factory=dict)
    preconditions: list[str] = Field(default_factory=list)
    postconditions: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not NAME_PATTERN.match(value):
            raise ValueError(f"{value!r} is not a valid action name")
        return value


class EnvironmentRecord(Record):
    """An environment: rules, current state text, optional screenshot, and its action space."""

    KIND: ClassVar[str] = "environment"
    RELATION_TYPES: ClassVar[frozenset[str]] = frozenset({"depends_on", "conflicts_with", "contains"})

    rules: str = ""
    state: str = ""
    screenshot: str | None = None
    actions: list[ActionSpec] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)

    @field_validator("actions")
    @classmethod
    def _unique_actions(cls, value: list[ActionSpec]) -> list[ActionSpec]:
        seen: set[str] = set()
        for action in value:
            if action.name in seen:
                raise ValueError(f"action {action.name!r} appears twice")
            seen.add(action.name)
        return value

    def action(self, name: str) -> ActionSpec | None:
        """The action called ``name``, if any."""
        return next((a for a in self.actions if a.name == name), None)

    def search_text(self) -> str:
        """Name, description, rules and action names."""
        acts = ", ".join(a.name.replace("_", " ") for a in self.actions)
        return f"{super().search_text()} {self.rules} Actions: {acts}".strip()


class AgentRecord(Record):
    """An agent's card (ACP Σ): role, competencies, objectives, capabilities, safety, model, tools."""

    KIND: ClassVar[str] = "agent"
    RELATION_TYPES: ClassVar[frozenset[str]] = frozenset({"delegates_to", "collaborates_with", "reports_to"})

    role: str = ""
    competencies: list[str] = Field(default_factory=list)
    objectives: list[str] = Field(default_factory=list)
    capabilities: list[str] = Field(default_factory=list)
    safety_constraints: list[str] = Field(default_factory=list)
    model: str | None = None
    tools: list[str] = Field(default_factory=list)
    max_steps: int | None = None
    usage: UsageStats = Field(default_factory=UsageStats)

    def search_views(self) -> list[tuple[str, float]]:
        """Name, description with role, and competencies / capabilities (task–agent matching)."""
        views = [(self.name.replace("_", " "), 1.0), (f"{self.role}. {self.description}".strip(". "), 1.0)]
        skills = [*self.competencies, *self.capabilities, *self.objectives]
        if skills:
            views.append(("; ".join(skills), 0.75))
        return views

    def search_text(self) -> str:
        """Role, description, competencies, objectives and capabilities (task–agent matching)."""
        bits = [super().search_text(), self.role]
        for label, items in (
            ("Competencies", self.competencies),
            ("Objectives", self.objectives),
            ("Capabilities", self.capabilities),
        ):
            if items:
                bits.append(f"{label}: {', '.join(items)}.")
        return " ".join(b for b in bits if b)


class MemoryRecord(Record):
    """A summary or insight an agent's memory kept from a run (searchable by later runs)."""

    KIND: ClassVar[str] = "memory"
    kind: Literal["summary", "insight"] = "summary"
    run_id: str = ""
    task: str = ""

    def search_views(self) -> list[tuple[str, float]]:
        """The text itself, and the task it came from at half weight."""
        return [(self.description, 1.0), (self.task, 0.5)] if self.task else [(self.description, 1.0)]


class ExperienceRecord(Record):
    """An experience-memory entry (Mem²Evolve §1.2): tool experience ("How to …", C.8) or an agent's
    success (C.9) / failure (C.10) lesson, with the run it came from and how that run ended.

    ``name`` is derived from the title; ``description`` is the entry's description; ``body`` is the
    markdown content (κ_content; the field is not called ``content`` because :meth:`Record.content` is
    the versioned content). ``usage`` counts retrievals (calls) and failed runs after retrieval (failures).
    """

    KIND: ClassVar[str] = "experience"

    kind: Literal["tool", "success", "failure"]
    title: str
    use_cases: list[str] = Field(default_factory=list)
    body: str = ""
    source_run: str = ""
    source_runs: list[str] = Field(default_factory=list)
    outcome: str = ""
    agent_role: str = ""
    tool_name: str = ""
    disabled: bool = False
    usage: UsageStats = Field(default_factory=UsageStats)

    @field_validator("title")
    @classmethod
    def _has_title(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("an experience entry needs a non-empty title")
        return value.strip()

    def search_views(self) -> list[tuple[str, float]]:
        """Title and description, and the use cases at 0.75."""
        views = [(self.title, 1.0), (self.description, 1.0)]
        if self.use_cases:
            views.append(("; ".join(self.use_cases), 0.75))
        return views

    def search_text(self) -> str:
        """Title, description and use cases (what the keyword index sees)."""
        text = f"{self.title}: {self.description}"
        return f"{text} Use cases: {'; '.join(self.use_cases)}." if self.use_cases else text
