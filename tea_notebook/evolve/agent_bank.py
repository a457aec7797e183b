"""The agent bank of Mem²Evolve's asset memory (§1.1.1, prompt C.5): expert-agent specs in ACP.

An expert spec is ``{role, suggestions, tools, expertise}`` as prompt C.5 asks a model to write it;
:func:`check_spec` enforces C.5's constraints on model output (it returns an error text for a re-ask,
or None). :class:`AgentBank` stores specs as :class:`~tea_notebook.protocol.records.AgentRecord` cards
with ``origin="evolved"`` in ``ws.agents`` and finds the top-1 expert for a sub-task by embedding
cosine above a threshold δ (Eq. 12); when nothing passes, the caller creates a new expert.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from tea_notebook.errors import NotFoundError, TeaError
from tea_notebook.evolve.gate import CANDIDATE, evolution_metadata, is_candidate, is_kept_configuration
from tea_notebook.protocol.records import AgentRecord

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost

SPEC_KEYS = ("role", "suggestions", "tools", "expertise")
ORIGIN = "evolved"

# First words that show a suggestion does not start with an imperative verb.
_NOT_VERBS = frozenset(
    """a an the this that these those it its they their them we our us you your i me my he she his her there here
    each every all some any no not both such in on at for to with by from of about into onto over under after before
    during when while if as because since than via per through without within between upon and or but so yet nor
    is are was were be been being am do does did has have had should must can could would will shall may might
    always never often usually sometimes also just only then first next finally please""".split()
)
_ING_VERBS = frozenset("bring sing ring swing sting fling cling spring string wring".split())
_LY_VERBS = frozenset("apply supply multiply rely reply comply imply ally tally rally fly".split())


class AgentBankError(TeaError, ValueError):
    """A spec that breaks C.5's constraints, or a bad argument to the agent bank."""


def _tool_names(available: Iterable[Any] | None) -> list[str] | None:
    if available is None:
        return None
    if isinstance(available, str):
        available = [available]
    return [t if isinstance(t, str) else str(getattr(t, "name", t)) for t in available]


def _verb_like(word: str) -> bool:
    """A heuristic for "starts with an imperative verb": rules out articles, pronouns, prepositions,
    auxiliaries, common adverbs and gerunds (no dictionary: nouns are not caught)."""
    w = word.strip("\"'*_`([").casefold()
    if not w or not w[0].isalpha() or w in _NOT_VERBS:
        return False
    if w.endswith("ing") and len(w) >= 5 and w not in _ING_VERBS:
        return False
    if w.endswith("ly") and w not in _LY_VERBS:
        return False
    return True


def check_spec(obj: Any, available_tools: Iterable[Any] | None) -> str | None:
    """None when ``obj`` is a valid C.5 expert spec, else one text naming every problem.

    Constraints: keys exactly role, suggestions, tools, expertise; role a string of 2–5 words;
    3–5 suggestions, each starting with a verb-like word and 6–16 words long; 0–3 tools, each named
    verbatim from ``available_tools`` (names or records; None skips the membership check), no
    duplicates; expertise 20–160 characters.
    """
    if isinstance(obj, ExpertSpec):
        obj = obj.to_dict()
    if not isinstance(obj, dict):
        return f"expected a JSON object with keys {', '.join(SPEC_KEYS)}, got {type(obj).__name__}"
    problems: list[str] = []
    missing = [k for k in SPEC_KEYS if k not in obj]
    extra = sorted(str(k) for k in obj if k not in SPEC_KEYS)
    if missing:
        problems.append(f"missing key(s): {', '.join(missing)}")
    if extra:
        problems.append(f"unexpected key(s): {', '.join(extra)} (only {', '.join(SPEC_KEYS)} are allowed)")

    role = obj.get("role")
    if "role" in obj:
        if not isinstance(role, str):
            problems.append(f"role must be a string, got {type(role).__name__}")
        elif not 2 <= len(role.split()) <= 5:
            problems.append(f"role {role!r} has {len(role.split())} words; it needs 2-5")

    suggestions = obj.get("suggestions")
    if "suggestions" in obj:
        if not isinstance(suggestions, list):
            problems.append(f"suggestions must be a list of strings, got {type(suggestions).__name__}")
        else:
            if not 3 <= len(suggestions) <= 5:
                problems.append(f"there are {len(suggestions)} suggestions; give 3-5")
            for i, s in enumerate(suggestions, 1):
                if not isinstance(s, str) or not s.strip():
                    problems.append(f"suggestion {i} must be a non-empty string")
                    continue
                words = s.split()
                if not 6 <= len(words) <= 16:
                    problems.append(f"suggestion {i} ({s!r}) has {len(words)} words; it needs 6-16")
                if not _verb_like(words[0]):
                    problems.append(f"suggestion {i} ({s!r}) must start with an imperative verb, not {words[0]!r}")

    tools = obj.get("tools")
    if "tools" in obj:
        if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
            problems.append("tools must be a list of tool names (strings); use [] when none apply")
        else:
            if len(tools) > 3:
                problems.append(f"there are {len(tools)} tools; choose at most 3")
            dupes = sorted({t for t in tools if tools.count(t) > 1})
            if dupes:
                problems.append(f"duplicate tool(s): {', '.join(dupes)}")
            names = _tool_names(available_tools)
            if names is not None:
                unknown = [t for t in tools if t not in names]
                if unknown:
                    offered = ", ".join(names) or "none"
                    listed = ", ".join(unknown)
                    problems.append(f"unknown tool(s) {listed}: use names verbatim from the available tools: {offered}")

    expertise = obj.get("expertise")
    if "expertise" in obj:
        if not isinstance(expertise, str):
            problems.append(f"expertise must be a string, got {type(expertise).__name__}")
        elif not 20 <= len(expertise.strip()) <= 160:
            problems.append(f"expertise has {len(expertise.strip())} characters; it needs 20-160")
    return "; ".join(problems) if problems else None


@dataclass(frozen=True)
class ExpertSpec:
    """An expert-agent spec m_agt = ⟨role, expertise, suggestions, tools⟩ (Mem²Evolve Eq. 2, C.5)."""

    role: str
    expertise: str
    suggestions: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, obj: Any, available_tools: Iterable[Any] | None = None) -> "ExpertSpec":
        """A spec from a C.5 JSON object, checked by :func:`check_spec` (AgentBankError when invalid)."""
        problem = check_spec(obj, available_tools)
        if problem:
            raise AgentBankError(f"invalid expert spec: {problem}")
        return cls(
            role=obj["role"].strip(),
            expertise=obj["expertise"].strip(),
            suggestions=[s.strip() for s in obj["suggestions"]],
            tools=list(obj["tools"]),
        )

    def to_dict(self) -> dict[str, Any]:
        """The C.5 JSON form, keys in C.5's order."""
        return {
            "role": self.role,
            "suggestions": list(self.suggestions),
            "tools": list(self.tools),
            "expertise": self.expertise,
        }

    def key_text(self) -> str:
        """role ⊕ expertise ⊕ suggestions: what Eq. 12 embeds for retrieval."""
        return " ".join([self.role, self.expertise, *self.suggestions])


def role_name(role: str) -> str:
    """The snake_case agent name of a role (``"Probability Simulation Analyst"`` →
    ``"probability_simulation_analyst"``)."""
    slug = re.sub(r"[^a-z0-9]+", "_", role.casefold()).strip("_")[:56].rstrip("_")
    if not slug:
        raise AgentBankError(f"role {role!r} has no letters or digits to name an agent by")
    return slug if slug[0].isalpha() else f"expert_{slug}"


class AgentBank:
    """Evolved expert agents (``origin="evolved"`` cards in ``ws.agents``), found by cosine > δ.

    ``threshold`` is δ: the cosine between a sub-task and an expert's card vector (its role, expertise
    and suggestions) must exceed it for the expert to be reused. The default, 0.2, suits the MiniLM
    embedder: a sub-task against a whole card scores lower than against a short text (on a small
    calibration set, matching sub-tasks scored 0.12–0.54, unrelated ones at most 0.19).
    """

    def __init__(self, workspace: "RunHost", *, threshold: float = 0.2):
        self.workspace = workspace
        self.registry = workspace.agents
        self.threshold = threshold

    def __repr__(self) -> str:
        return f"AgentBank({len(self.list())} experts, threshold={self.threshold})"

    def add(
        self,
        spec: "ExpertSpec | dict[str, Any]",
        source_run: str = "",
        *,
        available_tools: Iterable[Any] | None = None,
        candidate: bool = False,
        made_from: list[str] | None = None,
    ) -> AgentRecord:
        """Store an expert spec as an ACP agent card and return it.

        ``candidate=True`` stores it as a candidate of the promotion gate (:mod:`tea_notebook.evolve.gate`):
        :meth:`find` leaves it out until the gate promotes it; ``made_from``: the tasks it was made for.

        The name comes from the role. A spec whose role is already in the bank with other content
        becomes a new version of that agent (history kept, rollback works); an identical spec adds
        nothing. A name held by an agent that is not an evolved expert gets a suffix (``_2``, …)
        instead of being overwritten. Specs are checked with :func:`check_spec` (tools against
        ``available_tools`` when given); AgentBankError names what is wrong.
        """
        if isinstance(spec, dict):
            spec = ExpertSpec.from_dict(spec, available_tools)
        elif isinstance(spec, ExpertSpec):
            problem = check_spec(spec, available_tools)
            if problem:
                raise AgentBankError(f"invalid expert spec: {problem}")
        else:
            raise AgentBankError(f"add takes an ExpertSpec or a C.5 dict, not {type(spec).__name__}")
        name = self._name_for(spec.role)
        current = self.registry.current(name)
        if current is not None and current.metadata.get("expert") == spec.to_dict():
            return self.registry.get(name)
        runs = list(current.metadata.get("source_runs", [])) if current is not None else []
        if source_run and source_run not in runs:
            runs.append(source_run)
        metadata: dict[str, Any] = {"expert": spec.to_dict(), "source_run": source_run, "source_runs": runs}
        if candidate:
            metadata = evolution_metadata(
                metadata,
                candidate=True,
                tasks=list(made_from or []),
                runs=[source_run],
                parent=current.version if current is not None else None,
                routed=False,
            )
        record = AgentRecord(
            name=name,
            description=spec.expertise,
            role=spec.role,
            competencies=list(spec.suggestions),
            tools=list(spec.tools),
            origin=ORIGIN,
            category="expert",
            metadata=metadata,
        )
        note = "new expert spec" if current is None else "revised expert spec"
        return self.registry.register(record, note=f"{note} from run {source_run}" if source_run else note)

    def find(self, sub_task: str, threshold: float | None = None) -> tuple[AgentRecord, float] | None:
        """The evolved expert most similar to ``sub_task`` and its cosine, if that cosine exceeds δ
        (``threshold``, default :attr:`threshold`); None when no expert passes (create one then).
        Candidates of the promotion gate are left out until promoted."""
        if not isinstance(sub_task, str) or not sub_task.strip():
            raise AgentBankError("find needs a non-empty sub-task description")
        limit = self.threshold if threshold is None else threshold
        held = self.workspace.db.count_heads(self.registry.kind, "$.metadata.evolution.status", CANDIDATE)
        hits = self.registry.similar(sub_task, k=1 + held, threshold=limit, origin=ORIGIN)
        hits = [h for h in hits if not is_candidate(h[0])][:1]
        if hits and hits[0][1] > limit:
            return hits[0]
        return None

    def list(self) -> list[AgentRecord]:
        """All evolved experts (current versions), sorted by name."""
        return self.registry.list(origin=ORIGIN)

    def spec(self, name: str) -> ExpertSpec:
        """The expert spec of an evolved agent."""
        record = self.registry.get(name)
        if record.origin != ORIGIN:
            raise NotFoundError(f"agent {name!r} is not an evolved expert (origin {record.origin!r})")
        data = record.metadata.get("expert") or {
            "role": record.role,
            "suggestions": record.competencies,
            "tools": record.tools,
            "expertise": record.description,
        }
        return ExpertSpec(data["role"], data["expertise"], list(data["suggestions"]), list(data["tools"]))

    def _name_for(self, role: str) -> str:
        base = role_name(role)
        name, n = base, 1
        while not self._ours(name):
            n += 1
            name = f"{base}_{n}"
        return name

    def _ours(self, name: str) -> bool:
        """True when ``name`` is free or belongs to an evolved expert (now or in its last version); a
        kept ToolSelf configuration is not the bank's to revise."""
        current = self.registry.current(name)
        if current is not None:
            return current.origin == ORIGIN and not is_kept_configuration(current)
        history = self.registry.versions(name) if self.workspace.db.history("agent", name) else []
        if not history:
            return True
        last = self.registry.get(name, version=history[-1].version)
        return last.origin == ORIGIN and not is_kept_configuration(last)


__all__ = ["AgentBank", "AgentBankError", "ExpertSpec", "check_spec", "role_name", "SPEC_KEYS"]
