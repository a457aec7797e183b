"""Session memory (infrastructure layer): older steps folded into summaries and insights, kept in
the workspace and retrieved into later runs by similarity to their task."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Protocol

from tea_notebook.errors import EmbeddingError
from tea_notebook.models.client import is_offline
from tea_notebook.redaction import redact
from tea_notebook.runtime.steps import StepRecord
from tea_notebook.store.blobs import shorten

if TYPE_CHECKING:
    from tea_notebook.models.client import ModelClient
    from tea_notebook.protocol.registry import Registry

log = logging.getLogger(__name__)


class _ClientHolder(Protocol):
    @property
    def client(self) -> "ModelClient": ...


class FoldingRun(Protocol):
    """What a fold needs of the run (an :class:`~tea_notebook.runtime.loop.AgentRun`, which sits above
    this module): its task and model, its agent's model client, and the counters a fold's model call
    adds to."""

    task: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost: float

    @property
    def agent(self) -> _ClientHolder:
        """The agent making the run (its ``client`` makes the fold's model call)."""
        ...


SUMMARY_PROMPT = """You maintain an agent's memory. Fold the steps below into one short summary (2-4 sentences:
what was tried, what was found, what is still open) and at most 3 insights (reusable lessons, one sentence each).
Answer with ONLY JSON: {"summary": "...", "insights": ["..."]}

Task: {task}
Steps:
{steps}"""


_GIST = 1000  # characters of one step in a model-free summary


def extractive_summary(steps: list[StepRecord]) -> tuple[str, list[str]]:
    """A model-free fold: each step's memory (or goal) and failed actions as insights.

    Texts are redacted before they are cut, so a cut never leaves half a secret behind."""
    parts, insights = [], []
    for s in steps:
        results = [(tool, " ".join(redact(str(result)).split())) for tool, _, result in s.results]
        gist = redact(s.memory or s.next_goal) or "; ".join(f"{t} -> {r[:80]}" for t, r in results)
        gist = gist if len(gist) <= _GIST else gist[:_GIST] + "…"
        parts.append(f"step {s.number}: {gist}")
        for tool, result in results:
            if result.startswith("Error"):
                insights.append(f"{tool} failed at step {s.number}: {result[:120]}")
    return "; ".join(parts), insights[:3]


async def summarise_steps(run: FoldingRun, steps: list[StepRecord]) -> tuple[str, list[str]]:
    """Summary and insights of ``steps``: by the run's model, or extractively for offline models."""
    if is_offline(run.model):
        return extractive_summary(steps)
    prompt = SUMMARY_PROMPT.replace("{task}", run.task).replace("{steps}", "\n".join(s.render() for s in steps))
    try:
        reply = await run.agent.client.complete(run.model, [{"role": "user", "content": prompt}])
        run.prompt_tokens += reply.prompt_tokens
        run.completion_tokens += reply.completion_tokens
        run.cost += reply.cost
        data = json.loads((reply.content or "").strip().strip("`").removeprefix("json"))
        return str(data["summary"]), [str(i) for i in data.get("insights", [])][:3]
    except Exception:  # noqa: BLE001 - a failed summary must not fail the run
        return extractive_summary(steps)


async def merge_summaries(run: FoldingRun, summaries: list[str], budget_tokens: int) -> str:
    """One summary of several, within ``budget_tokens``: by the model, or keeping the newest text."""
    joined = " ".join(summaries)
    if not is_offline(run.model):
        listed = "\n".join(f"- {s}" for s in summaries)
        prompt = (
            f"Merge these summaries of an agent's earlier steps into one of at most {budget_tokens * 3 // 4} words, "
            f"keeping what matters for the task.\nTask: {run.task}\nSummaries:\n{listed}"
        )
        try:
            reply = await run.agent.client.complete(run.model, [{"role": "user", "content": prompt}])
            run.prompt_tokens += reply.prompt_tokens
            run.completion_tokens += reply.completion_tokens
            run.cost += reply.cost
            if reply.content and len(reply.content) // 4 <= budget_tokens:
                return reply.content.strip()
        except Exception:  # noqa: BLE001 - fall back to the extractive merge
            pass
    limit = budget_tokens * 4
    return joined if len(joined) <= limit else "… " + joined[-(limit - 2) :]


class MemoryStore:
    """Summaries and insights as searchable records (the ``memory`` registry of a workspace).

    Each text is embedded once, when it is saved: its vector is kept in the workspace (the registry's
    vector cache and index), so a later run's :meth:`recall` costs one query embedding and a search,
    however much earlier runs kept. Texts saved before that (or whose embedding failed) are embedded
    once, by the first recall or save that finds them, and kept."""

    def __init__(self, registry: "Registry[Any]"):
        self.registry = registry
        self._next: dict[str, int] = {}  # run id -> number of its next record (saves a scan per fold)

    def save(self, run_id: str, task: str, summary: str, insights: list[str]) -> None:
        """Keep a fold of one run (:meth:`keep`) and embed its texts now (:meth:`embed_kept`)."""
        self.keep(run_id, task, summary, insights)
        self.embed_kept()

    def keep(self, run_id: str, task: str, summary: str, insights: list[str]) -> None:
        """Keep a fold of one run in the store, not yet embedded: secrets redacted, each text cut to
        ``FIELD_LIMIT`` characters (the run's ``memory_written`` event keeps the full text). The
        agent loop calls :meth:`embed_kept` next, off its event loop (an embedding can take
        milliseconds to seconds)."""
        from tea_notebook.protocol.records import MemoryRecord

        task, summary, *insights = (shorten(text) for text in redact([task, summary, *insights]))
        start = self._next.get(run_id)
        if start is None:
            start = sum(1 for n in self.registry.names() if n.startswith(f"mem_{run_id}_"))
        items = [("summary", summary)] + [("insight", i) for i in insights]
        items = [(kind, text) for kind, text in items if text.strip()]
        self.registry.register_many(
            [
                MemoryRecord(name=f"mem_{run_id}_{start + i}", description=text, kind=kind, run_id=run_id, task=task)
                for i, (kind, text) in enumerate(items)
            ]
        )
        self._next[run_id] = start + len(items)

    def embed_kept(self) -> None:
        """Embed and index the texts kept and not yet embedded, once (safe from any thread: the
        registry and the store lock themselves). An embedder that fails leaves them for the next recall."""
        try:
            self.registry.index()
        except EmbeddingError as exc:  # the fold is kept; the next recall embeds what is missing
            log.warning("memory kept without its vectors (the next recall embeds them): %s", exc)

    def recall(self, task: str, k: int = 3, min_score: float = 0.45) -> list[str]:
        """Summaries and insights of earlier runs that are similar to ``task`` (one embedding: the task's)."""
        if len(self.registry) == 0:
            return []
        hits = self.registry.search(task, k=k, mode="semantic")
        return [f"(earlier run) {h.record.description}" for h in hits if h.semantic >= min_score]
