"""Reading a page for the deep researcher: fetch over HTTP(S), extract the main text as markdown,
fall back to the browser environment for pages that need JavaScript, and keep only the chunks that
bear on the question.

Every fetch goes through the workspace's egress policy (:mod:`tea_notebook.egress`): only ``http``
and ``https``, no loopback, private or link-local address unless the workspace allows it, and each
redirect hop checked again before it is followed; a refusal is an ``egress_refused`` event of the run
and a :class:`PageError` naming the rule. Fetches have a time limit and a size limit; PDFs are
converted behind the sandbox boundary like any document.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tea_notebook.envs.search import Page, html_to_markdown, split_chunks
from tea_notebook.errors import TeaError
from tea_notebook.protocol.retrieval import KeywordIndex

if TYPE_CHECKING:
    from tea_notebook.egress.policy import Decision
    from tea_notebook.protocol.context import Context
    from tea_notebook.runtime.host import RunHost

USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) tea_notebook-researcher/0.1"
_SCRIPTED = re.compile(rb"<script\b", re.I)


class PageError(TeaError):
    """A page that could not be read; the message names the URL and why."""


def check_url(url: str) -> str:
    """``url`` when it is an http(s) URL with a host; otherwise :class:`PageError` saying why (the
    address itself is checked by the egress policy when the page is fetched)."""
    from tea_notebook.egress.policy import EgressPolicy

    refused = EgressPolicy.check_form(url)
    if refused is not None:
        raise PageError(refused.reason)
    return url.strip()


def refused(context: "Context | None", decision: "Decision") -> PageError:
    """The error of a fetch the egress policy refused, reported to the run as ``egress_refused``."""
    if context is not None:
        context.notice("egress_refused", decision.as_event())
    return PageError(decision.reason)


class PageReader:
    """Fetches pages for one workspace.

    ``timeout``: seconds for the whole fetch; ``max_mb``: the largest body read; ``browser``:
    ``"auto"`` (use the browser environment when the fetched HTML has too little text and has
    scripts), ``"always"`` or ``"never"``.
    """

    def __init__(
        self,
        workspace: "RunHost",
        *,
        timeout: float = 15.0,
        max_mb: float = 5.0,
        browser: str = "auto",
        min_chars: int = 200,
    ):
        if browser not in ("auto", "always", "never"):
            raise ValueError("browser must be 'auto', 'always' or 'never'")
        self.workspace = workspace
        self.timeout, self.max_bytes, self.browser, self.min_chars = timeout, int(max_mb * 1e6), browser, min_chars

    async def read(self, url: str, context: "Context") -> Page:
        """The page's text; raises :class:`PageError` naming the URL and the reason."""
        from tea_notebook.egress.policy import EgressPolicy, EgressRefused

        early = EgressPolicy.check_form(url)
        if early is not None:
            raise refused(context, early)
        url = url.strip()
        if self.browser == "always":
            return await self._via_browser(url, context)
        try:
            status, final, ctype, body = await asyncio.wait_for(self._fetch(url), self.timeout)
        except asyncio.TimeoutError:
            raise PageError(f"{url}: no complete answer within {self.timeout:g} s") from None
        except EgressRefused as exc:
            raise refused(context, exc.decision) from None
        if status >= 400:
            raise PageError(f"{url}: HTTP {status}")
        kind = ctype.split(";")[0].strip().lower()
        if kind == "application/pdf" or final.lower().endswith(".pdf"):
            return await self._pdf(final, body, context)
        if kind in ("text/plain", "text/markdown", "application/json") or kind.endswith("+json"):
            text = body.decode("utf-8", "replace")
            return Page(final, final.rsplit("/", 1)[-1], text, "http")
        if kind and "html" not in kind and "xml" not in kind:
            raise PageError(f"{url}: content type {kind!r} is not a page this reader extracts")
        html = body.decode("utf-8", "replace")
        title, text = await asyncio.to_thread(html_to_markdown, html, final)
        if len(text) < self.min_chars and self.browser == "auto" and _SCRIPTED.search(body):
            try:
                return await self._via_browser(final, context)
            except PageError as exc:
                if not text:
                    raise PageError(f"{url}: no text without JavaScript, and the browser failed: {exc}") from None
        if not text:
            raise PageError(f"{url}: the page has no readable text")
        return Page(final, title or final, text, "http")

    async def _fetch(self, url: str) -> tuple[int, str, str, bytes]:
        import httpx

        from tea_notebook.egress.transport import TooManyRedirects, fetch_following, policy_client

        policy = self.workspace.egress
        try:
            async with policy_client(policy, timeout=self.timeout, headers={"User-Agent": USER_AGENT}) as client:
                async for response in fetch_following(client, policy, url, max_redirects=5):
                    final = str(response.url)
                    declared = int(response.headers.get("content-length") or 0)
                    if declared > self.max_bytes:
                        raise PageError(
                            f"{url}: {declared / 1e6:.0f} MB is over the reader's limit of {self.max_bytes / 1e6:g} MB"
                        )
                    chunks, size = [], 0
                    async for chunk in response.aiter_bytes():
                        size += len(chunk)
                        if size > self.max_bytes:
                            raise PageError(f"{url}: the body passed the reader's limit of {self.max_bytes / 1e6:g} MB")
                        chunks.append(chunk)
                    return response.status_code, final, response.headers.get("content-type", ""), b"".join(chunks)
        except TooManyRedirects:
            raise PageError(f"{url}: more than 5 redirects") from None
        except httpx.HTTPError as exc:
            raise PageError(f"{url}: {type(exc).__name__}: {exc or 'connection failed'}") from None
        raise PageError(f"{url}: no answer")

    async def _pdf(self, url: str, body: bytes, context: "Context") -> Page:
        from tea_notebook.envs.documents import DocumentConverter

        conversion = await DocumentConverter(self.workspace).convert_bytes(
            body, url.rsplit("/", 1)[-1] or "page.pdf", context
        )
        if not conversion.markdown.strip():
            raise PageError(f"{url}: {'; '.join(conversion.problems) or 'the PDF has no text'}")
        return Page(url, url.rsplit("/", 1)[-1], conversion.markdown, "http")

    async def _via_browser(self, url: str, context: "Context") -> Page:
        envs = self.workspace.envs
        envs.ensure("browser")
        opened = await envs.ainvoke("browser", "goto", {"url": url}, context)
        if not opened.ok:
            raise PageError(f"{url}: the browser could not open it: {opened.error.get('message', '')}")
        parts, start = [], 0
        while start < 60_000:
            got = await envs.ainvoke("browser", "extract", {"start": start, "max_chars": 20_000}, context)
            if not got.ok:
                raise PageError(f"{url}: the browser could not read it: {got.error.get('message', '')}")
            text = str(got.value)
            body, _, more = text.partition("\n\n[… characters ")
            parts.append(body)
            if not more:
                break
            start += 20_000
        text = "".join(parts)
        title = text.splitlines()[0].lstrip("# ").strip() if text.startswith("# ") else url
        return Page(url, title, text, "browser")


def relevant_chunks(text: str, query: str, *, k: int = 3, size: int = 1200) -> list[tuple[int, str]]:
    """The ``k`` chunks of ``text`` that match ``query`` best (BM25), as ``(index, chunk)`` in page order.

    A short page is one chunk; a page with no matching chunk gives its first chunks.
    """
    chunks = split_chunks(text, size)
    if len(chunks) <= k:
        return list(enumerate(chunks))
    index = KeywordIndex()
    for i, chunk in enumerate(chunks):
        index.upsert(i, chunk)
    ids, _ = index.search(query, k)
    chosen = sorted(int(i) for i in ids) or list(range(k))
    return [(i, chunks[i]) for i in chosen]


def host_of(url: str) -> str:
    """The host part of a URL (for display)."""
    return urlsplit(url).hostname or url


__all__ = ["PageError", "PageReader", "check_url", "relevant_chunks"]
