"""A small real web site and a local document corpus for testing research and browser agents (test support).

``TestSite`` serves the pages on 127.0.0.1 (a free port) from a daemon thread::

    with TestSite() as site:
        page = fetch(site.url("/wiki/aurora-project.html"))
        assert "/wiki/aurora-project.html" in site.hits

The two-hop question "Where was the lead engineer of the Aurora project born?" needs two pages:
``/wiki/aurora-project.html`` names the lead engineer (``LEAD_ENGINEER``) and says nothing else about her;
``/wiki/mira-okafor.html`` gives her birthplace (``BIRTHPLACE``) and year. The Aurora page does not link to
her page: reaching it takes a search (``/search?q=Mira+Okafor``) or the index. Distractor pages cover a
different "Aurora", a near-namesake and a rival reactor. Text that only a real browser sees (after a
click, a scroll, or script rendering) is not present in the HTML source, not even inside the scripts.

``corpus(folder)`` writes the same two facts as ``aurora-project.md`` and ``mira-okafor.md`` among many
synthetic documents.
"""

from __future__ import annotations

import base64
import html
import http.server
import random
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

LEAD_ENGINEER = "Mira Okafor"
BIRTHPLACE = "Tromsø"
BIRTH_YEAR = 1987
REACTOR_FACT = "the Aurora reactor output is 42 megawatts"
SECRET_CODE = "7391"
SECRET_SENTENCE = f"The secret code is {SECRET_CODE}"
SCROLL_SENTENCE = "Loaded more: the final item is Zephyr"
SCRIPT_SENTENCE = "Rendered by script: the launch window opens on 14 March"
FORM_OPTIONS = ("Basic", "Standard", "Deluxe")
FIRST_ORDER = 1001  # the first POST to /submit is order #1001, the next #1002, ...
BIG_SIZE = 200 * 1024 * 1024  # the Content-Length /big.bin declares

AURORA_TEXT = (
    "The Aurora project is an experimental fusion research programme. It began in 2015 with the goal "
    "of building a compact demonstration reactor.",
    f"The project's lead engineer is {LEAD_ENGINEER}.",
    "Funding comes from a consortium of three universities and a national energy agency. The "
    "project publishes its results in open-access journals.",
)
MIRA_TEXT = (
    f"{LEAD_ENGINEER} is a Norwegian-Nigerian engineer who specialises in plasma confinement.",
    f"{LEAD_ENGINEER} was born in {BIRTHPLACE} in {BIRTH_YEAR}.",
    "She studied physics at the Norwegian University of Science and Technology and later "
    "completed a doctorate on magnetic field stability.",
)
DISTRACTORS = {
    "aurora-borealis": (
        "Aurora borealis",
        (
            "The aurora borealis, or northern lights, is a natural light display in the high-latitude sky.",
            "It is caused by charged particles from the Sun colliding with the upper atmosphere. "
            "Popular viewing spots include Kiruna in Sweden and Rovaniemi in Finland.",
        ),
    ),
    "aurora-software": (
        "Aurora (database software)",
        (
            "Aurora is also the name of an open-source time-series database first released in 2011.",
            "Its lead developer is Jonas Lindqvist, who was born in Uppsala in 1979. "
            "The software is unrelated to the Aurora fusion project.",
        ),
    ),
    "miro-okafor": (
        "Miro Okafor",
        (
            "Miro Okafor is a Nigerian footballer who plays as a midfielder.",
            "Miro Okafor was born in Lagos in 1990 and is not related to the engineer Mira Okafor.",
        ),
    ),
    "borealis-reactor": (
        "Borealis reactor project",
        (
            "The Borealis reactor project is a rival fusion programme based in Finland.",
            "Its lead engineer is Anders Holm, who was born in Turku in 1975.",
        ),
    ),
}


def _filler(rng: random.Random, sentences: int) -> str:
    words = (
        "committee budget laboratory winter harbour survey archive apprentice timber council workshop "
        "meeting schedule delivery visitor corridor library cable crane ferry lecture"
    ).split()
    return " ".join(
        "The "
        + " ".join(rng.choice(words) for _ in range(rng.randint(8, 14)))
        + f" was recorded in {rng.randint(2015, 2024)}."
        for _ in range(sentences)
    )


def _history_paragraphs() -> list[str]:
    """About 30 KB of paragraphs; only the middle one states ``REACTOR_FACT``."""
    rng = random.Random(42)
    paragraphs = [_filler(rng, 5) for _ in range(52)]
    paragraphs[26] = f"According to the 2023 annual review, {REACTOR_FACT} at full power."
    return paragraphs


def _page(title: str, body: str) -> str:
    return (
        f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>\n'
        f'<body>\n<h1>{html.escape(title)}</h1>\n{body}\n<p><a href="/">Back to the index</a></p>\n</body></html>\n'
    )


def _paras(paragraphs) -> str:
    return "\n".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)


def _hidden(text: str) -> str:
    """A JS expression that evaluates to ``text`` without ``text`` appearing in the source."""
    return f"new TextDecoder().decode(Uint8Array.from(atob('{base64.b64encode(text.encode()).decode()}'), c => c.charCodeAt(0)))"


WIKI = {  # path -> (title, paragraphs); searchable by /search
    "/wiki/aurora-project.html": ("The Aurora project", AURORA_TEXT),
    "/wiki/mira-okafor.html": (LEAD_ENGINEER, MIRA_TEXT),
    "/wiki/aurora-history.html": ("History of the Aurora project", tuple(_history_paragraphs())),
    **{f"/wiki/{slug}.html": page for slug, page in DISTRACTORS.items()},
}

_OTHER_LINKS = {
    "/form.html": "Order form",
    "/reveal.html": "Reveal details",
    "/scroll.html": "Infinite scroll",
    "/js-only.html": "Script-rendered page",
    "/tabs.html": "New-tab link",
    "/search?q=Aurora": "Search",
}

PAGES = {
    "/": _page(
        "Research test site",
        "<ul>\n"
        + "\n".join(f'<li><a href="{p}">{html.escape(t)}</a></li>' for p, (t, _) in WIKI.items())
        + "\n"
        + "\n".join(f'<li><a href="{p}">{t}</a></li>' for p, t in _OTHER_LINKS.items())
        + "\n</ul>",
    ),
    **{path: _page(title, _paras(paragraphs)) for path, (title, paragraphs) in WIKI.items()},
    "/form.html": _page(
        "Order form",
        '<form action="/submit" method="post">\n'
        '<label for="name">Your name</label> <input id="name" name="name" type="text">\n'
        '<label for="plan">Kit</label> <select id="plan" name="plan">\n'
        + "\n".join(f'<option value="{o}">{o}</option>' for o in FORM_OPTIONS)
        + '\n</select>\n<label><input id="gift" name="gift" type="checkbox" value="yes"> Gift wrap</label>\n'
        '<button id="submit" type="submit">Place order</button>\n</form>',
    ),
    "/reveal.html": _page(
        "Reveal details",
        '<p>Press the button to see the details.</p>\n<button id="show" type="button">Show details</button>\n'
        '<div id="details"></div>\n<script>\ndocument.getElementById("show").addEventListener("click", () => {\n'
        f'  const p = document.createElement("p"); p.id = "secret"; p.textContent = {_hidden(SECRET_SENTENCE)};\n'
        '  document.getElementById("details").appendChild(p);\n}, {once: true});\n</script>',
    ),
    "/scroll.html": _page(
        "Infinite scroll",
        "\n".join(f'<p style="height:180px">Item {i}</p>' for i in range(1, 41))
        + '\n<div id="more"></div>\n<script>\nlet loaded = false;\nwindow.addEventListener("scroll", () => {\n'
        "  if (loaded || window.innerHeight + window.scrollY < document.body.scrollHeight - 400) return;\n"
        f'  loaded = true; const p = document.createElement("p"); p.id = "final"; p.textContent = {_hidden(SCROLL_SENTENCE)};\n'
        '  document.getElementById("more").appendChild(p);\n});\n</script>',
    ),
    "/js-only.html": (
        '<!doctype html>\n<html><head><meta charset="utf-8"><title>Script-rendered page</title></head>\n<body>\n'
        f'<script>\nconst p = document.createElement("p"); p.id = "content"; p.textContent = {_hidden(SCRIPT_SENTENCE)};\n'
        "document.body.appendChild(p);\n</script>\n</body></html>\n"
    ),
    "/tabs.html": _page(
        "New-tab link",
        f'<p><a id="newtab" href="/wiki/mira-okafor.html" target="_blank">Open the {LEAD_ENGINEER} profile in a new tab</a></p>',
    ),
}


@dataclass
class _Response:
    status: int
    body: bytes | Iterator[bytes] = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/html; charset=utf-8"


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() must not wait for a client still reading /big.bin
    site: TestSite

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # clients hanging up are routine
            super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server  # HTTP/1.0: one request per connection, so nothing lingers after stop()

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._reply(self.server.site._get(self), send_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._reply(self.server.site._get(self), send_body=False)

    def do_POST(self) -> None:  # noqa: N802
        self._reply(self.server.site._post(self), send_body=True)

    def _reply(self, response: _Response | None, send_body: bool) -> None:
        if response is None:  # the server is stopping: hang up without an answer
            self.close_connection = True
            return
        body = response.body
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            if isinstance(body, bytes):
                self.send_header("Content-Length", str(len(body)))
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if not send_body:
                return
            if isinstance(body, bytes):
                self.wfile.write(body)
            else:
                for chunk in body:
                    if self.server.site._stopped.is_set():
                        break
                    self.wfile.write(chunk)
        except OSError:  # the client went away
            self.close_connection = True
        finally:
            if not isinstance(body, bytes):
                body.close()


class TestSite:
    """The test web site, serving from a daemon thread as soon as it is created; ``stop()`` (or leaving the
    ``with`` block) shuts it down and releases any request still waiting in ``/slow.html``.

    ``hits`` lists the path (no query string) of every request, in arrival order, 404s included;
    ``requests`` the same as ``(method, path with query)``; ``posted`` the decoded bodies POSTed to ``/submit``.
    """

    __test__ = False

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.hits: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.posted: list[str] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._server = _Server((host, 0), _Handler)
        self._server.site = self
        self._thread = threading.Thread(target=self._server.serve_forever, name="TestSite", daemon=True)
        self._thread.start()

    @property
    def base(self) -> str:
        """``http://127.0.0.1:<port>``"""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def hostport(self) -> str:
        """``127.0.0.1:<port>``: what a workspace's egress policy must allow to reach this site."""
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def allow(self, ws) -> None:
        """Let ``ws``'s model-chosen network actions reach this local site (loopback is refused by default)."""
        ws.egress.allow(self.hostport)

    def url(self, path: str = "/") -> str:
        """The absolute URL of ``path`` on this site."""
        return self.base + "/" + path.lstrip("/")

    def stop(self) -> None:
        """Stop serving (idempotent); waiting ``/slow.html`` requests end at once, without an answer."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def clear(self) -> None:
        """Forget the recorded hits, requests and posts."""
        with self._lock:
            self.hits.clear()
            self.requests.clear()
            self.posted.clear()

    def __enter__(self) -> TestSite:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- routing -------------------------------------------------------------------------------------

    def _record(self, handler: _Handler) -> str:
        path = urlsplit(handler.path).path
        with self._lock:
            self.hits.append(path)
            self.requests.append((handler.command, handler.path))
        return path

    def _get(self, handler: _Handler) -> _Response | None:
        path = self._record(handler)
        query = parse_qs(urlsplit(handler.path).query)
        if path in PAGES:
            return _Response(200, PAGES[path].encode())
        if path == "/search":
            return _Response(200, _search(query.get("q", [""])[0]).encode())
        if path == "/slow.html":
            try:
                seconds = float(query.get("s", ["30"])[0])
            except ValueError:
                seconds = 30.0
            if self._stopped.wait(seconds):
                return None
            return _Response(200, _page("Slow page", f"<p>Finally loaded after {seconds:g} seconds.</p>").encode())
        if path == "/big.bin":
            return _Response(
                200, _zeros(BIG_SIZE), {"Content-Length": str(BIG_SIZE)}, content_type="application/octet-stream"
            )
        if path == "/redirect-to-file":
            return _Response(302, b"", {"Location": "file:///etc/passwd"})
        if path == "/submit":
            return _Response(405, _page("Method not allowed", "<p>Use the form.</p>").encode(), {"Allow": "POST"})
        return _not_found(path)

    def _post(self, handler: _Handler) -> _Response:
        path = self._record(handler)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length).decode("utf-8", errors="replace")
        if path != "/submit":
            return _not_found(path)
        with self._lock:
            self.posted.append(body)
            order = FIRST_ORDER + len(self.posted) - 1
        fields = parse_qs(body)
        name = fields.get("name", [""])[0]
        plan = fields.get("plan", [""])[0]
        gift = "yes" if fields.get("gift") else "no"
        text = f"Thank you, {name}: order #{order} confirmed for {plan}"
        result = f'<p id="result">{html.escape(text)}</p>\n<p id="gift">Gift wrap: {gift}</p>'
        return _Response(200, _page("Order confirmed", result).encode())


def _search(query: str) -> str:
    """Wiki pages holding every word of ``query`` (case-insensitive), with a snippet of the first match."""
    words = query.lower().split()
    items = []
    for path, (title, paragraphs) in WIKI.items():
        text = title + " " + " ".join(paragraphs)
        if words and all(w in text.lower() for w in words):
            snippet = next((p for p in paragraphs if words[0] in p.lower()), paragraphs[0])[:200]
            items.append(f'<li><a href="{path}">{html.escape(title)}</a> - {html.escape(snippet)}</li>')
    return _page(f"Search results for {query}", f"<p>{len(items)} results</p>\n<ol>\n" + "\n".join(items) + "\n</ol>")


def _not_found(path: str) -> _Response:
    return _Response(404, _page("Not found", f"<p>No page at {html.escape(path)}.</p>").encode())


def _zeros(total: int, chunk: int = 64 * 1024) -> Iterator[bytes]:
    """``total`` zero bytes, produced lazily; the writer stops when the client disconnects."""
    block = bytes(chunk)
    sent = 0
    while sent < total:
        piece = block if total - sent >= chunk else bytes(total - sent)
        yield piece
        sent += len(piece)


# --- a local document corpus ---------------------------------------------------------------------------

_TOPICS = (
    "river ecology",
    "sourdough baking",
    "solar panels",
    "medieval trade",
    "beekeeping",
    "glacier retreat",
    "chess openings",
    "urban cycling",
    "coral reefs",
    "violin making",
    "railway history",
    "soil chemistry",
    "typography",
    "volcano monitoring",
    "orchard pruning",
    "ship navigation",
    "cheese ripening",
    "wind farms",
    "bird migration",
    "paper conservation",
)
_NAMES = ("Lena Brandt", "Tomas Reyes", "Aiko Tanaka", "Pavel Novak", "Grace Mensah", "Omar Haddad", "Ines Duarte")
_PLACES = ("Bergen", "Porto", "Kyoto", "Brno", "Accra", "Tunis", "Galway", "Tartu")


def corpus(folder: str | Path, n: int = 200, *, seed: int = 0) -> Path:
    """Write ``n`` small synthetic documents (``doc-0000-<topic>.md``/``.txt``, every tenth ``.html``) on
    varied topics into ``folder``, plus ``aurora-project.md`` and ``mira-okafor.md`` holding the two-hop
    facts (so ``n + 2`` files). The synthetic documents never mention Aurora, Mira Okafor or Tromsø.
    Deterministic for a given ``seed``; returns ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for i in range(n):
        topic = rng.choice(_TOPICS)
        title = f"Notes on {topic} #{i}"
        sentences = [
            f"This note covers {topic} as studied by {rng.choice(_NAMES)} in {rng.choice(_PLACES)}.",
            f"The main measurement was {rng.randint(2, 980)} units, taken over {rng.randint(2, 40)} weeks.",
            f"A follow-up on {topic} is planned for {rng.randint(2025, 2030)}.",
        ]
        rng.shuffle(sentences)
        slug = topic.replace(" ", "-")
        if i % 10 == 9:
            text, ext = _page(title, _paras(sentences)), "html"
        elif i % 2:
            text, ext = title + "\n\n" + " ".join(sentences) + "\n", "txt"
        else:
            text, ext = f"# {title}\n\n" + "\n\n".join(sentences) + "\n", "md"
        (folder / f"doc-{i:04d}-{slug}.{ext}").write_text(text, encoding="utf-8")
    (folder / "aurora-project.md").write_text(
        "# The Aurora project\n\n" + "\n\n".join(AURORA_TEXT) + "\n", encoding="utf-8"
    )
    (folder / "mira-okafor.md").write_text(f"# {LEAD_ENGINEER}\n\n" + "\n\n".join(MIRA_TEXT) + "\n", encoding="utf-8")
    return folder
