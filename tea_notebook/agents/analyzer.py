"""The deep analyzer (AgentOrchestra §4.3.3, App. E.3): a workflow over a user's files.

Each round: convert the files to markdown (``mdify``: behind the sandbox boundary, cached by content
hash) → enhance the task from the documents' outline and what earlier rounds found → extract insights
chunk by chunk (map; every finding keeps its page / sheet / slide / section reference) → summarise
(reduce) and check: stop when the task is answered, else the next round looks for what is missing in
the chunks not read yet. A file it cannot read is an observation naming the file and why; the run goes
on with the rest. Only files the person attached to the run, or files inside the run's folders,
are read: a path chosen by a model anywhere else is refused.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tea_notebook.agents.kinds import agent_kind
from tea_notebook.agents.workflow import Budget, WorkflowAgent, as_list, ask_json
from tea_notebook.envs.documents import Conversion, DocumentConverter, DocumentError
from tea_notebook.envs.safe_open import Beneath
from tea_notebook.errors import TeaError
from tea_notebook.protocol.retrieval import KeywordIndex

if TYPE_CHECKING:
    from tea_notebook.runtime.event_types import FinishedStatus
    from tea_notebook.runtime.host import RunHost
    from tea_notebook.runtime.runlog import Process

ENHANCE_PROMPT = """tea-stage: enhance
You are the task-enhancement stage of a deep analyzer agent. From the task, the outline of the converted
files and what earlier rounds found, write a precise analysis task: what exactly to look for in the
documents, which sections matter, and what the answer must contain. Answer with ONLY a JSON object:
{"enhanced_task": "the precise analysis task", "focus": ["term or quantity to look for"]}"""

MAP_PROMPT = """tea-stage: map
You are the insight-extraction stage of a deep analyzer agent. Read the document excerpt below (its
reference names the file and the page, sheet, slide or section) and extract every finding that bears on
the analysis task, with the exact values. Answer with ONLY a JSON object:
{"findings": [{"ref": "file, page 3", "finding": "what it says", "quote": "exact words"}]}
Give an empty list when the excerpt has nothing relevant."""

REDUCE_PROMPT = """tea-stage: reduce
You are the summarisation and result-checking stage of a deep analyzer agent. Combine the findings below
(each with its reference) into an answer to the task. Cite references in parentheses, e.g. (sales.xlsx,
sheet 'Q3'). Say whether the task is fully answered and what is missing. Answer with ONLY a JSON object:
{"answer": "the answer", "summary": "a short report: key findings with references, and recommendations",
 "complete": true, "missing": ["what is still unknown"]}"""

DEFAULT_TASK = "Please write a detailed caption for the attached file or uri."
IMAGE_KINDS = ("image",)


@agent_kind(
    "analyzer",
    shortcuts=("analyzer", "deep_analyzer"),
    default_name="deep_analyzer",
    options=("max_steps",),
    rename={"max_steps": "max_rounds"},
    refused_as="the analyzer (a workflow agent)",
    rebuild="config",
    fork=None,
)
class DeepAnalyzer(WorkflowAgent):
    """The deep analyzer agent (``ws.analyzer(...)``; ``%%agent analyzer``).

    ``max_rounds`` (the paper's m=3), ``chunk_chars`` (the map step's piece size), ``max_chunks`` read
    per round, ``parallel`` map calls at once, ``max_mb`` (larger files are refused), ``vision``
    (send images to the model; default: when the model takes images), ``max_tokens`` /
    ``max_seconds`` budgets, ``allow``: extra folders whose files it may read when a model names them.
    """

    kind = "analyzer"
    role = "deep analyzer"
    default_description = (
        "Analyses attached files (PDF, Word, Excel/CSV, PowerPoint, HTML, JSON, text, images, ZIP archives): "
        "converts them to markdown, reads long documents chunk by chunk and answers with page, sheet or "
        "section references."
    )
    capabilities = ["file analysis", "document question answering", "spreadsheets", "map-reduce over long documents"]

    def __init__(
        self,
        workspace: "RunHost",
        name: str = "deep_analyzer",
        *,
        max_rounds: int = 3,
        chunk_chars: int = 6000,
        max_chunks: int = 24,
        parallel: int = 4,
        max_mb: float = 50.0,
        vision: bool | None = None,
        max_tokens: int | None = None,
        max_seconds: float | None = 900.0,
        allow: list[str] | tuple[str, ...] = (),
        **options: Any,
    ):
        super().__init__(workspace, name, **options)
        if max_rounds < 1 or chunk_chars < 500 or max_chunks < 1 or parallel < 1 or max_mb <= 0:
            raise ValueError(
                "max_rounds, max_chunks and parallel must be at least 1, chunk_chars at least 500, max_mb positive"
            )
        self.max_rounds, self.chunk_chars, self.max_chunks, self.parallel = (
            max_rounds,
            chunk_chars,
            max_chunks,
            parallel,
        )
        self.max_mb, self.vision = max_mb, vision
        self.max_tokens, self.max_seconds = max_tokens, max_seconds
        self.allow = [str(Path(a).expanduser().resolve()) for a in allow]
        self.converter = DocumentConverter(workspace, max_mb=max_mb)
        self._publish()

    def _config(self) -> dict[str, Any]:
        return {
            "max_rounds": self.max_rounds,
            "chunk_chars": self.chunk_chars,
            "max_chunks": self.max_chunks,
            "parallel": self.parallel,
            "max_mb": self.max_mb,
            "vision": self.vision,
            "max_tokens": self.max_tokens,
            "max_seconds": self.max_seconds,
            "allow": self.allow,
        }

    def _max_steps(self) -> int:
        return self.max_rounds + 1

    async def _work(self, proc: "Process", task: str, files: list[str]) -> tuple[FinishedStatus, str, list[str]]:
        return await _Analysis(self, proc, task, files).run()


class _Analysis:
    """The state of one analysis run."""

    def __init__(self, agent: DeepAnalyzer, proc: "Process", task: str, files: list[str]):
        self.agent, self.proc, self.files = agent, proc, files
        self.task = task.strip() or DEFAULT_TASK
        self.budget = Budget(proc, agent.max_seconds, agent.max_tokens)
        self.documents: list[Conversion] = []
        self.images: dict[str, str] = {}  # document name -> data URL, for models that see images
        self.findings: list[dict[str, str]] = []
        self.done_chunks: set[tuple[str, int]] = set()
        self.reduced: dict[str, Any] = {}
        self.problems: list[str] = []

    # -- which files may be read --------------------------------------------------------------------
    def _folders(self) -> list[Path]:
        runs = self.agent.workspace.path / "runs"
        return [runs / self.proc.ctx.root, runs / self.proc.run_id, *(Path(a) for a in self.agent.allow)]

    def _read(self, given: str) -> tuple[str, bytes]:
        """``(name, bytes)`` of a file this run may read; :class:`DocumentError` naming it otherwise."""
        path = Path(given).expanduser()
        if not path.is_absolute():
            raise DocumentError(f"{given}: not an absolute path (attach files with absolute paths)")
        name = path.name
        resolved = str(path.resolve())
        if resolved in self.proc.ctx.attachments or str(path) in self.proc.ctx.attachments:
            return name, self.agent.converter.read_file(resolved)
        for folder in self._folders():
            try:
                rel = path.relative_to(folder)
            except ValueError:
                continue
            try:
                root = Beneath(folder)  # never leaves the folder, whatever links the run's code planted
            except OSError as exc:
                raise DocumentError(f"{name}: no such file ({given}: {exc.strerror})") from None
            try:
                with root.open(rel.as_posix() or ".", "read") as opened:
                    if opened.stat.st_size > self.agent.converter.max_bytes:
                        raise DocumentError(
                            f"{name}: {opened.stat.st_size / 2**20:.0f} MB is over the analyzer's limit of "
                            f"{self.agent.max_mb:g} MB (max_mb=)"
                        )
                    with open(opened.fd, "rb", closefd=False) as fh:
                        return name, fh.read(self.agent.converter.max_bytes + 1)
            except TeaError as exc:
                raise DocumentError(f"{name}: {exc}") from None
            finally:
                root.close()
        raise DocumentError(
            f"{given}: refused — it is outside the run folder and was not attached to the run by the person "
            "who started it (pass it in files=[...] when you start the run, or allow its folder with allow=[...])"
        )

    # -- the loop -----------------------------------------------------------------------------------
    async def run(self) -> tuple[FinishedStatus, str, list[str]]:
        await self._mdify()
        if not self.documents:
            text = "No file could be read: " + ("; ".join(self.problems) if self.problems else "no files were given.")
            return "failed", text, []
        for round_no in range(1, self.agent.max_rounds + 1):
            reason = self.budget.over()
            if reason:
                self.problems.append(f"stopped early: {reason}")
                break
            self.proc.check_stop()
            await self._round(round_no)
            if self.reduced.get("complete") is True:
                break
            if not self._unread():  # every chunk has been read: another round would find nothing new
                break
        return self._answer()

    async def _mdify(self) -> None:
        actions: list[tuple[str, dict[str, Any] | None, str]] = []
        for given in self.files:
            try:
                name, data = await asyncio.to_thread(self._read, given)
                conversion = await self.agent.converter.convert_bytes(data, name, self.proc.ctx)
            except DocumentError as exc:
                self.problems.append(str(exc))
                actions.append(("mdify", {"file": given}, f"Error: {exc}"))
                continue
            self.documents.append(conversion)
            if conversion.kind in IMAGE_KINDS and self._sees_images():
                self.images[conversion.name] = _data_url(name, data)
            self.problems.extend(f"{conversion.name}: {p}" for p in conversion.problems)
            refs = [s.ref for s in conversion.sections]
            shown = ", ".join(refs[:12]) + (f", … ({len(refs)} in all)" if len(refs) > 12 else "")
            note = "; ".join(conversion.problems)
            actions.append(
                (
                    "mdify",
                    {"file": given},
                    f"{conversion.name}: {conversion.kind}, {len(conversion.markdown):,} characters"
                    f"{' (cached)' if conversion.cached else ''}; sections: {shown}"
                    + (f"\nNot read: {note}" if note else ""),
                )
            )
        if not self.files:
            actions.append(("mdify", {"files": []}, "Error: no files were given to analyse"))
        self.proc.record(actions, thinking=f"Converted {len(self.documents)} of {len(self.files)} file(s) to markdown.")

    def _sees_images(self) -> bool:
        from tea_notebook.models.client import takes_images

        return takes_images(self.proc.model, self.agent.vision)

    def _outline(self) -> str:
        lines = []
        for doc in self.documents:
            refs = [s.ref for s in doc.sections]
            lines.append(
                f"- {doc.name} ({doc.kind}, {len(doc.markdown):,} characters): "
                + ", ".join(refs[:30])
                + (f", … ({len(refs)} sections)" if len(refs) > 30 else "")
            )
        return "\n".join(lines)

    async def _round(self, number: int) -> bool:
        actions: list[tuple[str, dict[str, Any] | None, str]] = []
        missing = as_list(self.reduced.get("missing"))
        user = (
            f"<task>\n{self.task}\n</task>\n\n<files>\n{self._outline()}\n</files>\n\n"
            f"<found_so_far>\n{self._findings_text(30) or '(nothing yet)'}\n</found_so_far>"
        )
        if missing:
            user += "\n\n<missing>\n" + "\n".join(f"- {m}" for m in missing) + "\n</missing>"
        plan = await ask_json(self.proc, ENHANCE_PROMPT, user, "enhance", required=("enhanced_task",)) or {}
        enhanced = str(plan.get("enhanced_task") or self.task)
        focus = " ".join([enhanced, *as_list(plan.get("focus")), *missing])
        actions.append(("enhance", None, enhanced))
        pieces = self._pick(focus)
        found = await self._map(pieces, enhanced)
        shown = "\n".join(f"({f['ref']}) {f['finding']}" for f in found) or "(no findings in these chunks)"
        actions.append(("map", {"chunks": [ref for ref, _, _ in pieces]}, shown))
        self.reduced = await self._reduce(enhanced) or self.reduced
        missing_now = "; ".join(as_list(self.reduced.get("missing"))) or "nothing"
        verdict = f"complete: {self.reduced.get('complete')}; missing: {missing_now}"
        actions.append(("reduce", None, f"{self.reduced.get('answer', '')}\n{verdict}".strip()))
        self.proc.record(
            actions,
            thinking=f"Round {number}: read {len(pieces)} chunk(s), {len(found)} new finding(s).",
            memory=f"{len(self.findings)} findings from {len(self.done_chunks)} chunks so far",
            next_goal="; ".join(as_list(self.reduced.get("missing"))),
        )
        return bool(found)

    def _unread(self) -> list[tuple[str, str, tuple[str, int]]]:
        """The chunks no round has read yet, in document order."""
        pool = []
        for doc in self.documents:
            for i, (ref, text) in enumerate(doc.chunks(self.agent.chunk_chars)):
                key = (doc.sha256 + doc.name, i)
                if key not in self.done_chunks:
                    pool.append((ref, text, key))
        return pool

    def _pick(self, focus: str) -> list[tuple[str, str, tuple[str, int]]]:
        """The chunks to read this round: all unread ones when they fit ``max_chunks``, else the ones
        that match the focus best (BM25), in document order."""
        pool = self._unread()
        if len(pool) <= self.agent.max_chunks:
            return pool
        index = KeywordIndex()
        for i, (ref, text, _) in enumerate(pool):
            index.upsert(i, f"{ref}\n{text}")
        ids, _ = index.search(focus, self.agent.max_chunks)
        chosen = sorted(int(i) for i in ids)
        if len(chosen) < self.agent.max_chunks:  # too few matches: fill with the first unread chunks
            chosen = sorted(set(chosen) | set(range(len(pool))[: self.agent.max_chunks - len(chosen)]))
        return [pool[i] for i in chosen[: self.agent.max_chunks]]

    async def _map(self, pieces: list[tuple[str, str, tuple[str, int]]], task: str) -> list[dict[str, str]]:
        gate = asyncio.Semaphore(self.agent.parallel)

        async def one(ref: str, text: str) -> list[dict[str, str]]:
            async with gate:
                self.proc.check_stop()
                user = f'<task>\n{task}\n</task>\n\n<excerpt ref="{ref}">\n{text}\n</excerpt>'
                image = self.images.get(ref.rsplit(", ", 1)[0])  # "<name>, whole document" (names may hold commas)
                data = await ask_json(self.proc, MAP_PROMPT, user, "map", required=("findings",), image=image) or {}
            out = []
            for item in data.get("findings") or []:
                if isinstance(item, dict) and str(item.get("finding") or "").strip():
                    out.append(
                        {
                            # the reference is the chunk's own: a model cannot move a finding elsewhere
                            "ref": ref,
                            "finding": str(item["finding"]).strip(),
                            "quote": str(item.get("quote") or "").strip(),
                        }
                    )
            return out

        results = await asyncio.gather(*(one(ref, text) for ref, text, _ in pieces))
        for _, _, key in pieces:
            self.done_chunks.add(key)
        found = [f for group in results for f in group]
        self.findings.extend(found)
        return found

    def _findings_text(self, limit: int = 200) -> str:
        return "\n".join(
            f"({f['ref']}) {f['finding']}" + (f' — "{f["quote"]}"' if f["quote"] else "") for f in self.findings[:limit]
        )

    async def _reduce(self, task: str) -> dict[str, Any] | None:
        user = f"<task>\n{task}\n</task>\n\n<findings>\n{self._findings_text() or '(no findings)'}\n</findings>"
        return await ask_json(self.proc, REDUCE_PROMPT, user, "reduce", required=("answer",))

    def _answer(self) -> tuple[FinishedStatus, str, list[str]]:
        answer = str(self.reduced.get("answer") or "").strip()
        summary = str(self.reduced.get("summary") or "").strip()
        refs = list(dict.fromkeys(f["ref"] for f in self.findings))
        text = answer or "The files were read but no answer was found."
        if summary and summary != answer:
            text += f"\n\n{summary}"
        if refs:
            text += "\n\n**References:** " + "; ".join(refs[:40])
        if self.problems:
            text += "\n\n**Could not read:** " + "; ".join(self.problems)
        complete = bool(answer and self.findings) and self.reduced.get("complete") is not False
        status: FinishedStatus = "success" if complete else "failed"
        return status, text, []


def _data_url(name: str, data: bytes) -> str:
    kind = {".jpg": "jpeg", ".jpeg": "jpeg", ".gif": "gif", ".webp": "webp"}.get(Path(name).suffix.lower(), "png")
    return f"data:image/{kind};base64," + base64.b64encode(data).decode()


__all__ = ["DeepAnalyzer"]
