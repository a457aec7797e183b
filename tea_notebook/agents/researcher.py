"""The deep researcher (AgentOrchestra §4.3.1, App. E.2): a multi-round research workflow.

Each round: plan queries from the task and what earlier rounds found (task analysis) → search with
the agent's engines, the next engine taking over when one fails or finds nothing → pick the hits
worth reading → read them (only the chunks that bear on the task go to the model) → extract evidence,
each piece tied to a page read in this run → summarise and check: stop when the answer is found, a
budget is spent or a round brings nothing new, else refine the queries from the knowledge gaps.
The final report cites pages by number; every citation is checked against the pages actually read.
Each round is one step of the run, with its queries, hits, pages and evidence.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tea_notebook.agents.kinds import agent_kind
from tea_notebook.agents.workflow import Budget, WorkflowAgent, as_list, ask_json
from tea_notebook.envs.pages import PageError, PageReader, relevant_chunks
from tea_notebook.envs.search import Hit, Page, engine_spec, make_engine, search_with_failover
from tea_notebook.runtime.event_types import ErrorEvent, FinishedStatus

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost
    from tea_notebook.runtime.runlog import Process

STAGE = "tea-stage: {}"  # the first line of every system prompt: scripted models dispatch on it

PLAN_PROMPT = """tea-stage: plan
You are the task-analysis stage of a deep research agent. From the task and what earlier rounds found,
write the web search queries for this round: specific, different from earlier queries, aimed at the
knowledge gaps. Answer with ONLY a JSON object:
{"reasoning": "what is still unknown and how these queries find it", "queries": ["query 1", "query 2"]}"""

SELECT_PROMPT = """tea-stage: select
You are the result-selection stage of a deep research agent. Given the task and numbered search results,
choose the results worth reading in full: those most likely to hold evidence for the task, from reliable
sources, not already read. Answer with ONLY a JSON object:
{"reasoning": "why these", "read": [1, 3]}"""

EXTRACT_PROMPT = """tea-stage: extract
You are the insight-extraction stage of a deep research agent. Read the excerpts of the pages below, each
labelled with its source number [n], and extract every piece of evidence that bears on the task. Quote the
page where you can. Only use the excerpts given; cite the source number each piece comes from. Answer with
ONLY a JSON object:
{"evidence": [{"source": 1, "fact": "what the page says", "quote": "exact words", "relevance": 0.9}]}"""

CHECK_PROMPT = """tea-stage: check
You are the summarisation and result-checking stage of a deep research agent. From all evidence found so
far (each with its source number), say whether the task can now be answered, with what confidence, and
what is still missing. Answer with ONLY a JSON object:
{"summary": "what is known so far, with [n] citations", "answered": true, "answer": "the answer, or empty",
 "confidence": "high | medium | low", "gaps": ["what is still unknown"], "next_queries": ["refined query"]}"""

REPORT_PROMPT = """tea-stage: report
You are the reporting stage of a deep research agent. Write the final research report for the task from the
evidence below. Cite sources by their numbers in square brackets, e.g. [2], and only those numbers: every
statement that comes from a source must carry its citation. State the answer first, then the supporting
findings, then the confidence and any open questions. Answer with ONLY a JSON object:
{"answer": "the short answer", "report": "the report in markdown with [n] citations",
 "confidence": "high | medium | low"}"""

_CITE = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_URL = re.compile(r"https?://[^\s)\]>\"']+")


@dataclass
class Source:
    """A page read in this run, numbered in reading order (what citations point at)."""

    number: int
    url: str
    title: str
    via: str


@dataclass
class Evidence:
    """One piece of evidence, tied to the source it came from."""

    source: int
    fact: str
    quote: str
    relevance: float
    round: int

    def line(self) -> str:
        quote = f' — "{self.quote}"' if self.quote else ""
        return f"[{self.source}] {self.fact}{quote}"


@agent_kind(
    "researcher",
    shortcuts=("researcher", "deep_researcher"),
    default_name="deep_researcher",
    options=("max_steps",),
    rename={"max_steps": "max_rounds"},
    refused_as="the researcher (a workflow agent)",
    rebuild="config",
    keep_live=("engines",),  # a user's engine object may not rebuild from its spec string
    fork=None,
)
class DeepResearcher(WorkflowAgent):
    """The deep researcher agent (``ws.researcher(...)``; ``%%agent researcher``).

    ``engines``: engine specs or objects, tried in order (``"web"``, ``"corpus:FOLDER"``, a user
    class). Budgets: ``max_rounds`` (the paper's m=3), ``max_pages`` read in all, ``pages_per_round``,
    ``max_tokens`` and ``max_seconds``. ``browser``: when a page needs JavaScript, read it with the
    browser environment (``"auto"``), always, or never.
    """

    kind = "researcher"
    role = "deep researcher"
    default_description = (
        "Researches a question across many pages: plans search queries, searches the web or a document "
        "corpus, reads the relevant pages, extracts evidence and writes a report with checked citations."
    )
    capabilities = ["web search", "multi-round research", "cited reports"]

    def __init__(
        self,
        workspace: "RunHost",
        name: str = "deep_researcher",
        *,
        engines: list[Any] | tuple[Any, ...] = ("web",),
        max_rounds: int = 3,
        max_pages: int = 12,
        pages_per_round: int = 4,
        hits_per_query: int = 6,
        chunks_per_page: int = 3,
        chunk_chars: int = 1200,
        max_tokens: int | None = None,
        max_seconds: float | None = 600.0,
        page_timeout: float = 15.0,
        search_timeout: float = 20.0,
        browser: str = "auto",
        **options: Any,
    ):
        super().__init__(workspace, name, **options)
        if max_rounds < 1 or max_pages < 1 or pages_per_round < 1 or hits_per_query < 1:
            raise ValueError("max_rounds, max_pages, pages_per_round and hits_per_query must be at least 1")
        if not engines:
            raise ValueError("a researcher needs at least one search engine")
        self.engines = [make_engine(e, workspace) for e in engines]
        self.max_rounds, self.max_pages, self.pages_per_round = max_rounds, max_pages, pages_per_round
        self.hits_per_query, self.chunks_per_page, self.chunk_chars = hits_per_query, chunks_per_page, chunk_chars
        self.max_tokens, self.max_seconds = max_tokens, max_seconds
        self.search_timeout = search_timeout
        self.reader = PageReader(workspace, timeout=page_timeout, browser=browser)
        self._publish()

    def _config(self) -> dict[str, Any]:
        return {
            "engines": [engine_spec(e) for e in self.engines],
            "max_rounds": self.max_rounds,
            "max_pages": self.max_pages,
            "pages_per_round": self.pages_per_round,
            "hits_per_query": self.hits_per_query,
            "chunks_per_page": self.chunks_per_page,
            "chunk_chars": self.chunk_chars,
            "max_tokens": self.max_tokens,
            "max_seconds": self.max_seconds,
            "page_timeout": self.reader.timeout,
            "search_timeout": self.search_timeout,
            "browser": self.reader.browser,
        }

    def _max_steps(self) -> int:
        return self.max_rounds + 1

    async def _work(self, proc: "Process", task: str, files: list[str]) -> tuple[FinishedStatus, str, list[str]]:
        return await _Research(self, proc, task).run()


class _Research:
    """The state of one research run."""

    def __init__(self, agent: DeepResearcher, proc: "Process", task: str):
        self.agent, self.proc, self.task = agent, proc, task
        self.budget = Budget(proc, agent.max_seconds, agent.max_tokens)
        self.sources: list[Source] = []
        self.by_url: dict[str, Source] = {}
        self.evidence: list[Evidence] = []
        self.queries: list[str] = []
        self.failed_urls: set[str] = set()
        self.check: dict[str, Any] = {}
        self.stop_reason = ""

    # -- prompts ----------------------------------------------------------------------------------
    def _findings(self, limit: int = 40) -> str:
        if not self.evidence:
            return "(nothing found yet)"
        best = sorted(self.evidence, key=lambda e: -e.relevance)[:limit]
        return "\n".join(e.line() for e in best)

    def _source_list(self) -> str:
        return "\n".join(f"[{s.number}] {s.title} — {s.url}" for s in self.sources) or "(none)"

    # -- the loop ---------------------------------------------------------------------------------
    async def run(self) -> tuple[FinishedStatus, str, list[str]]:
        agent = self.agent
        for round_no in range(1, agent.max_rounds + 1):
            reason = self.budget.over()
            if reason:
                self.stop_reason = reason
                break
            if len(self.sources) >= agent.max_pages:
                self.stop_reason = f"the page budget of {agent.max_pages} pages is spent"
                break
            self.proc.check_stop()
            new = await self._round(round_no)
            if self.check.get("answered") is True and self.evidence:
                self.stop_reason = "the answer was found"
                break
            if not new:
                self.stop_reason = "the round brought nothing new"
                break
        else:
            self.stop_reason = f"the round budget of {agent.max_rounds} rounds is spent"
        return await self._report()

    async def _round(self, number: int) -> bool:
        """One research round, recorded as one step; True when it found new evidence."""
        actions: list[tuple[str, dict[str, Any] | None, str]] = []
        queries = await self._plan(number)
        hits, search_notes = await self._search(queries)
        lines = [h.line(i + 1) for i, h in enumerate(hits)] or ["(no hits)"]
        actions.append(("search", {"queries": queries}, "\n".join(search_notes + lines)))
        chosen, select_note = await self._select(hits)
        pages, read_notes = await self._read(chosen)
        for note in read_notes:
            actions.append(note)
        found = await self._extract(pages, number) if pages else []
        evidence_text = "\n".join(e.line() for e in found) or "(no evidence in this round)"
        actions.append(("extract", {"pages": [s.number for s, _ in pages]}, evidence_text))
        if found or number == 1:
            self.check = await self._check() or {}
        verdict = (
            f"answered: {self.check.get('answered')}; confidence: {self.check.get('confidence', '?')}; "
            f"gaps: {'; '.join(as_list(self.check.get('gaps'))) or 'none'}"
        )
        actions.append(("check", None, f"{self.check.get('summary', '')}\n{verdict}".strip()))
        self.proc.record(
            actions,
            thinking=(
                f"Round {number}: {len(queries)} queries, {len(hits)} hits, {len(pages)} pages read. {select_note}"
            ).strip(),
            memory=f"{len(self.sources)} pages read, {len(self.evidence)} pieces of evidence so far",
            next_goal="; ".join(as_list(self.check.get("gaps"))) or "",
        )
        return bool(found)

    async def _plan(self, number: int) -> list[str]:
        previous = "\n".join(f"- {q}" for q in self.queries) or "(none)"
        gaps = "\n".join(f"- {g}" for g in as_list(self.check.get("gaps"))) or "(none yet)"
        suggested = as_list(self.check.get("next_queries"))
        user = (
            f"<task>\n{self.task}\n</task>\n\nRound {number} of at most {self.agent.max_rounds}.\n\n"
            f"<earlier_queries>\n{previous}\n</earlier_queries>\n\n<findings>\n{self._findings()}\n</findings>\n\n"
            f"<knowledge_gaps>\n{gaps}\n</knowledge_gaps>"
        )
        if suggested:
            user += "\n\n<suggested_queries>\n" + "\n".join(f"- {q}" for q in suggested) + "\n</suggested_queries>"
        data = await ask_json(self.proc, PLAN_PROMPT, user, "plan", required=("queries",))
        queries = as_list((data or {}).get("queries"), 5)
        if not queries:  # the model gave none: the suggestions of the last check, else the task itself
            queries = suggested[:3] or [self.task[:300]]
        fresh = [q for q in dict.fromkeys(queries) if q not in self.queries] or queries[:1]
        self.queries.extend(fresh)
        return fresh

    async def _search(self, queries: list[str]) -> tuple[list[Hit], list[str]]:
        notes: list[str] = []
        outcomes = await asyncio.gather(
            *(
                search_with_failover(self.agent.engines, q, self.agent.hits_per_query, self.agent.search_timeout)
                for q in queries
            )
        )
        hits: list[Hit] = []
        seen = set(self.by_url) | self.failed_urls
        for query, (found, tried) in zip(queries, outcomes):
            notes.append(f"query {query!r}: " + "; ".join(tried))
            for h in found:
                if h.url not in seen:
                    seen.add(h.url)
                    hits.append(h)
        return hits, notes

    async def _select(self, hits: list[Hit]) -> tuple[list[Hit], str]:
        room = min(self.agent.pages_per_round, self.agent.max_pages - len(self.sources))
        if not hits or room <= 0:
            return [], ""
        if len(hits) <= room:
            return hits, ""
        listing = "\n".join(h.line(i + 1) for i, h in enumerate(hits))
        user = f"<task>\n{self.task}\n</task>\n\nRead at most {room} of these results:\n{listing}"
        data = await ask_json(self.proc, SELECT_PROMPT, user, "select", required=("read",))
        picked, bad = [], []
        for value in (data or {}).get("read") or []:
            try:
                i = int(value)
            except (TypeError, ValueError):
                bad.append(str(value))
                continue
            if 1 <= i <= len(hits) and hits[i - 1] not in picked:
                picked.append(hits[i - 1])
            else:
                bad.append(str(value))
        note = f"The selection named results that do not exist: {', '.join(bad)} (ignored)." if bad else ""
        if not picked:
            return hits[:room], note + " Read the top-ranked results instead."
        return picked[:room], note

    async def _read_one(self, hit: Hit) -> Page:
        for engine in self.agent.engines:
            read = getattr(engine, "read", None)
            if callable(read):
                page = (
                    await asyncio.to_thread(read, hit.url)
                    if not asyncio.iscoroutinefunction(read)
                    else await read(hit.url)
                )
                if page is not None:
                    return page
        return await self.agent.reader.read(hit.url, self.proc.ctx)

    async def _read(self, hits: list[Hit]) -> tuple[list[tuple[Source, str]], list[tuple[str, dict, str]]]:
        """Read the chosen hits concurrently: the pages (as sources with their relevant excerpts) and
        one action per page for the trajectory."""
        outcomes = await asyncio.gather(*(self._read_one(h) for h in hits), return_exceptions=True)
        pages, notes = [], []
        focus = " ".join([self.task, *self.queries[-5:], *as_list(self.check.get("gaps"))])
        for hit, outcome in zip(hits, outcomes):
            if isinstance(outcome, asyncio.CancelledError):
                raise outcome
            if isinstance(outcome, BaseException):
                self.failed_urls.add(hit.url)
                message = str(outcome) if isinstance(outcome, PageError) else f"{type(outcome).__name__}: {outcome}"
                notes.append(("read", {"url": hit.url}, f"Error: {message}"))
                continue
            source = Source(len(self.sources) + 1, outcome.url or hit.url, outcome.title or hit.title, outcome.via)
            self.sources.append(source)
            self.by_url[hit.url] = self.by_url[source.url] = source
            chunks = relevant_chunks(outcome.text, focus, k=self.agent.chunks_per_page, size=self.agent.chunk_chars)
            excerpt = "\n[…]\n".join(c for _, c in chunks)
            pages.append((source, excerpt))
            kept = f"{len(chunks)} of {max(1, -(-len(outcome.text) // self.agent.chunk_chars))} chunks"
            notes.append(
                (
                    "read",
                    {"url": source.url},
                    f"[{source.number}] {source.title} ({len(outcome.text):,} characters via {outcome.via}; "
                    f"{kept} kept)\n{excerpt[:600]}",
                )
            )
        return pages, notes

    async def _extract(self, pages: list[tuple[Source, str]], round_no: int) -> list[Evidence]:
        blocks = "\n\n".join(
            f'<source number="{s.number}" title="{s.title}" url="{s.url}">\n{text}\n</source>' for s, text in pages
        )
        user = f"<task>\n{self.task}\n</task>\n\n{blocks}"
        data = await ask_json(self.proc, EXTRACT_PROMPT, user, "extract", required=("evidence",))
        allowed = {s.number for s, _ in pages}
        found: list[Evidence] = []
        for item in (data or {}).get("evidence") or []:
            if not isinstance(item, dict):
                continue
            try:
                number = int(str(item.get("source", "")).strip("[] S"))
            except ValueError:
                number = -1
            fact = str(item.get("fact") or item.get("insight") or "").strip()
            if not fact:
                continue
            if number not in allowed:
                self.proc.emit(
                    "error",
                    ErrorEvent(
                        kind="citation",
                        message=(
                            f"evidence cites source {item.get('source')!r}, which is not a page read in this "
                            "round: dropped"
                        ),
                    ),
                )
                continue
            try:
                relevance = float(item.get("relevance", 0.5))
            except (TypeError, ValueError):
                relevance = 0.5
            found.append(Evidence(number, fact, str(item.get("quote") or "").strip(), relevance, round_no))
        self.evidence.extend(found)
        return found

    async def _check(self) -> dict[str, Any] | None:
        user = (
            f"<task>\n{self.task}\n</task>\n\n<sources>\n{self._source_list()}\n</sources>\n\n"
            f"<evidence>\n{self._findings()}\n</evidence>"
        )
        return await ask_json(self.proc, CHECK_PROMPT, user, "check", required=("answered",))

    # -- the report -------------------------------------------------------------------------------
    async def _report(self) -> tuple[FinishedStatus, str, list[str]]:
        if not self.evidence:
            text = (
                f"No evidence was found for the task ({self.stop_reason}). "
                f"Queries tried: {'; '.join(self.queries) or 'none'}."
            )
            self.proc.step("report", {"sources": 0}, text)
            return "failed", text, []
        user = (
            f"<task>\n{self.task}\n</task>\n\n<sources>\n{self._source_list()}\n</sources>\n\n"
            f"<evidence>\n{self._findings(80)}\n</evidence>\n\nResearch ended because {self.stop_reason}."
        )
        data = await ask_json(self.proc, REPORT_PROMPT, user, "report", required=("report",)) or {}
        body = str(data.get("report") or self.check.get("summary") or "").strip()
        answer = str(data.get("answer") or self.check.get("answer") or "").strip()
        confidence = str(data.get("confidence") or self.check.get("confidence") or "unknown")
        report = f"**Answer:** {answer}\n\n{body}\n\n**Confidence:** {confidence}" if answer else body
        report, cited, problems = self.verify(report)  # the short answer's citations are checked too
        sources = "\n".join(f"[{s.number}] {s.title} — {s.url}" for s in self.sources if s.number in cited)
        if sources:
            report += f"\n\n**Sources**\n{sources}"
        if problems:
            report += "\n\n**Citation check:** " + " ".join(problems)
        self.proc.record(
            [("report", {"sources": len(self.sources), "cited": sorted(cited)}, report)],
            thinking=f"Research ended: {self.stop_reason}.",
        )
        answered = self.check.get("answered") is True or bool(answer)
        status: FinishedStatus = "success" if answered and cited else "failed"
        return status, report, []

    def verify(self, text: str) -> tuple[str, set[int], list[str]]:
        """Check the report's citations against the pages read in this run: numbers that are not one
        are removed, links to pages never read are marked. Returns the text, the numbers cited, and
        what was wrong (one sentence each)."""
        known = {s.number for s in self.sources}
        read_urls = set(self.by_url)
        cited: set[int] = set()
        bad_numbers: list[int] = []

        def fix(match: re.Match) -> str:
            numbers = [int(n) for n in re.split(r"\s*,\s*", match.group(1))]
            good = [n for n in numbers if n in known]
            bad_numbers.extend(n for n in numbers if n not in known)
            cited.update(good)
            return f"[{', '.join(map(str, good))}]" if good else ""

        text = _CITE.sub(fix, text)
        problems = []
        if bad_numbers:
            problems.append(
                f"The report cited {', '.join(f'[{n}]' for n in sorted(set(bad_numbers)))}, which "
                f"{'is not a page' if len(set(bad_numbers)) == 1 else 'are not pages'} read in this run: removed."
            )
        unread = sorted({u.rstrip(".,;") for u in _URL.findall(text)} - read_urls)

        def mark(match: re.Match) -> str:  # whole URLs only: an unread URL may be a prefix of a read one
            url = match.group(0).rstrip(".,;")
            return f"{url} (not read in this run){match.group(0)[len(url) :]}" if url in unread else match.group(0)

        text = _URL.sub(mark, text)
        if unread:
            problems.append(
                f"The report links {len(unread)} page(s) never read in this run: {', '.join(unread)} (marked)."
            )
        if problems:
            self.proc.emit("error", ErrorEvent(kind="citation", message=" ".join(problems)))
        return text, cited, problems


__all__ = ["DeepResearcher", "Evidence", "Source"]
