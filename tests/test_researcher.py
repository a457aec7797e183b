"""The deep researcher, its search engines and its page reader, against real components: the local web
site of tests/sitekit.py (searched over HTTP by a user engine class, read by the page reader) and a
local document corpus indexed by ``CorpusSearch``.

The model is scripted but honest (:class:`Oracle`): a function that dispatches on the stage named in
the first line of the system prompt (``tea-stage: plan|select|extract|check|report``) and answers only
from what the prompt holds. It extracts a fact only when an excerpt it was shown states it, says the
task is answered only when the evidence it was given holds the answer, plans the next round's queries
from the knowledge gaps it was given and cites the source numbers the evidence came from. A loop that
loses a round, a page, a gap or a citation fails these tests.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import asyncio  # noqa: E402
import html  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
import urllib.parse  # noqa: E402
import urllib.request  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import sitekit  # noqa: E402
from loopback_http import QuietHandler, serve, stop  # noqa: E402
from loopback_http import free_port as closed_port  # noqa: E402
from sitekit import BIRTHPLACE, LEAD_ENGINEER, REACTOR_FACT, SCRIPT_SENTENCE, TestSite  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.envs.browser import find_chromium  # noqa: E402
from tea_notebook.envs.search import CorpusSearch, Hit, SearchError, engine_spec, make_engine  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402

TASK = "Where was the lead engineer of the Aurora project born?"
REACTOR_TASK = "What is the Aurora reactor output in megawatts?"
LAUNCH_TASK = "When does the launch window open?"
AURORA = "/wiki/aurora-project.html"
MIRA = "/wiki/mira-okafor.html"

needs_chromium = pytest.mark.skipif(
    find_chromium() is None and not os.environ.get("TEA_REQUIRE_BROWSER"),
    reason="no Chromium found: `apt-get install chromium` or `playwright install chromium`",
)


# -- search engines (user classes: name + search(query, k) -> list[Hit]) -----------------------------
SITE_BASE = ""  # set by the site fixture, so that SiteSearch() (how an ACP card rebuilds it) finds the site
_RESULT = re.compile(r'<li><a href="([^"]+)">(.*?)</a> - (.*?)</li>')


class SiteSearch:
    """The test site's ``/search?q=`` page, over HTTP, its result list parsed into hits."""

    name = "site"

    def __init__(self, base: str | None = None, delay: float = 0.0):
        self.base, self.delay = base or SITE_BASE, delay
        self.queries: list[str] = []

    def search(self, query: str, k: int = 5) -> list[Hit]:
        self.queries.append(query)
        time.sleep(self.delay)
        url = f"{self.base}/search?{urllib.parse.urlencode({'q': query})}"
        with urllib.request.urlopen(url, timeout=5) as response:
            page = response.read().decode("utf-8")
        return [
            Hit(
                urllib.parse.urljoin(self.base + "/", html.unescape(href)),
                html.unescape(t),
                html.unescape(s),
                self.name,
            )
            for href, t, s in _RESULT.findall(page)
        ][:k]


class FailingEngine:
    name = "broken"

    def search(self, query: str, k: int = 5) -> list[Hit]:
        raise ConnectionError("search backend is down")


class EmptyEngine:
    name = "empty"

    def search(self, query: str, k: int = 5) -> list[Hit]:
        return []


class SlowEngine:
    name = "slow"

    async def search(self, query: str, k: int = 5) -> list[Hit]:
        await asyncio.sleep(30)
        return [Hit("http://never.invalid/", "never", "", self.name)]


class WrongTypeEngine:
    name = "wrongtype"

    def search(self, query: str, k: int = 5) -> list[dict]:
        return [{"url": "http://example.invalid/", "title": "a dict, not a Hit"}]


class ListEngine:
    """Answers every query with the same URLs (a hostile engine when they are bad ones)."""

    name = "list"

    def __init__(self, urls: list[str]):
        self.urls = urls

    def search(self, query: str, k: int = 5) -> list[Hit]:
        return [Hit(u, u.rsplit("/", 1)[-1], "", self.name) for u in self.urls]


# -- the scripted researcher model ------------------------------------------------------------------
_STAGE = re.compile(r"\Atea-stage: (\w+)")
_SOURCE = re.compile(r'<source number="(\d+)" title="[^"]*" url="([^"]*)">\n(.*?)\n</source>', re.S)
_EVIDENCE = re.compile(r'^\[(\d+)\] (.*?)(?: — ".*")?$', re.M)
_NAME = r"[A-Z]\w+ [A-Z]\w+"
_LEAD = re.compile(rf"lead engineer is ({_NAME})")
_BORN = re.compile(rf"({_NAME}) was born in ([A-Z]\w+) in (\d{{4}})")
_REACTOR = re.compile(r"reactor output is (\d+) megawatts")
_LAUNCH = re.compile(r"launch window opens on (\d+ [A-Z]\w+)")
FACTS = (_LEAD, _BORN, _REACTOR, _LAUNCH)


def block(text: str, tag: str) -> str:
    m = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.S)
    return m.group(1) if m else ""


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if s.strip()]


class Oracle:
    """An honest scripted researcher model; ``prompts[stage]`` and ``replies[stage]`` record every call.

    ``bad_plans``: how many plan replies are not JSON; ``report_extra`` / ``answer_extra``: text added to
    the report body / the short answer; ``report_body``: a report body used instead of the honest one.
    """

    def __init__(
        self, *, bad_plans: int = 0, report_extra: str = "", answer_extra: str = "", report_body: str | None = None
    ):
        self.bad_plans, self.report_extra, self.report_body = bad_plans, report_extra, report_body
        self.answer_extra = answer_extra
        self.prompts: dict[str, list[str]] = {}
        self.replies: dict[str, list[dict]] = {}
        self.model = ScriptedModel(self)

    @property
    def name(self) -> str:
        return self.model.name

    def __call__(self, messages: list[dict], tools: list[dict]) -> str:
        stage = _STAGE.match(messages[0]["content"]).group(1)
        user = messages[-1]["content"]
        self.prompts.setdefault(stage, []).append(user)
        if stage == "plan" and self.bad_plans > 0:
            self.bad_plans -= 1
            return "Let me think about which queries would be best here."
        if stage == "plan" and user.startswith("Error:"):  # a retry after a bad reply: messages[1] is the prompt
            user = messages[1]["content"]
        reply = getattr(self, stage)(user)
        self.replies.setdefault(stage, []).append(reply)
        return json.dumps(reply)

    # what the evidence given says
    @staticmethod
    def evidence(text: str) -> list[tuple[int, str]]:
        return [(int(n), fact) for n, fact in _EVIDENCE.findall(text)]

    def solve(self, task: str, evidence: list[tuple[int, str]]) -> dict[str, Any]:
        """The answer the evidence supports, the sources it rests on, and what is still missing."""
        if "born" in task:
            lead = next(((n, m.group(1)) for n, f in evidence if (m := _LEAD.search(f))), None)
            if lead is None:
                return {"answer": "", "cite": [], "gaps": ["who the lead engineer of the Aurora project is"]}
            born = next(((n, m) for n, f in evidence if (m := _BORN.search(f)) and m.group(1) == lead[1]), None)
            if born is None:
                return {
                    "answer": "",
                    "cite": [lead[0]],
                    "known": f"The lead engineer of the Aurora project is {lead[1]} [{lead[0]}].",
                    "gaps": [f"the birthplace of {lead[1]}"],
                }
            return {
                "answer": born[1].group(2),
                "cite": [lead[0], born[0]],
                "known": (
                    f"The lead engineer of the Aurora project is {lead[1]} [{lead[0]}]. {lead[1]} was born in "
                    f"{born[1].group(2)} in {born[1].group(3)} [{born[0]}]."
                ),
                "gaps": [],
            }
        pattern, unit = (_REACTOR, "{} megawatts") if "megawatts" in task else (_LAUNCH, "{}")
        hit = next(((n, m) for n, f in evidence if (m := pattern.search(f))), None)
        if hit is None:
            return {"answer": "", "cite": [], "gaps": [task]}
        value = unit.format(hit[1].group(1))
        return {"answer": value, "cite": [hit[0]], "known": f"{value} [{hit[0]}].", "gaps": []}

    # the stages
    def plan(self, user: str) -> dict:
        task = block(user, "task")
        gaps = [g.lstrip("- ") for g in block(user, "knowledge_gaps").splitlines()]
        queries = [f"{m.group(1)} born" for g in gaps if (m := re.search(rf"birthplace of ({_NAME})", g))]
        if not queries:
            if "born" in task:
                queries = ["Aurora lead engineer"]
            else:
                queries = [" ".join(w for w in re.findall(r"\w+", task) if len(w) > 4)]
        return {"reasoning": "from the gaps", "queries": queries}

    def select(self, user: str) -> dict:
        room = int(re.search(r"Read at most (\d+)", user).group(1))
        words = {w.lower() for w in re.findall(r"\w+", block(user, "task")) if len(w) > 3}
        listing = re.findall(r"^\[(\d+)\] (.*(?:\n    .*)?)", user, re.M)
        ranked = sorted(listing, key=lambda item: -sum(w in item[1].lower() for w in words))
        return {"reasoning": "most task words", "read": [int(n) for n, _ in ranked[:room]]}

    def extract(self, user: str) -> dict:
        evidence = []
        for number, _url, excerpt in _SOURCE.findall(user):
            for sentence in sentences(excerpt):
                if any(p.search(sentence) for p in FACTS):
                    evidence.append({"source": int(number), "fact": sentence, "quote": sentence, "relevance": 0.9})
        return {"evidence": evidence}

    def check(self, user: str) -> dict:
        task = block(user, "task")
        found = self.solve(task, self.evidence(block(user, "evidence")))
        return {
            "summary": found.get("known", "Nothing relevant yet."),
            "answered": bool(found["answer"]),
            "answer": found["answer"],
            "confidence": "high" if found["answer"] else "low",
            "gaps": found["gaps"],
            "next_queries": [],
        }

    def report(self, user: str) -> dict:
        task = block(user, "task")
        found = self.solve(task, self.evidence(block(user, "evidence")))
        body = found.get("known", "Nothing was found.")
        if not found["answer"]:
            body += " Still unknown: " + "; ".join(found["gaps"]) + "."
        if self.report_body is not None:
            body = self.report_body
        answer = found["answer"] + self.answer_extra
        return {"answer": answer, "report": body + self.report_extra, "confidence": "high"}


# -- reading runs -----------------------------------------------------------------------------------
def rounds(result) -> list:
    """The research-round steps (those with a search action)."""
    return [s for s in result.trajectory.steps if any(a["name"] == "search" for a in s.actions)]


def actions(step, name: str) -> list[dict]:
    return [a for a in step.actions if a["name"] == name]


def all_actions(result, name: str) -> list[dict]:
    return [a for s in result.trajectory.steps for a in actions(s, name)]


def reads(result) -> dict[str, str]:
    """URL -> observation of every read action of the run."""
    return {a["arguments"]["url"]: a["observation"] for a in all_actions(result, "read")}


def report_step(result):
    step = result.trajectory.steps[-1]
    assert [a["name"] for a in step.actions] == ["report"], step.actions
    return step


def errors(ws, result, kind: str) -> list[str]:
    return [
        e.data["message"] for e in ws.events.events(result.run_id) if e.type == "error" and e.data.get("kind") == kind
    ]


def sources_section(answer: str) -> list[str]:
    """The URLs listed under **Sources** in a report."""
    assert "**Sources**" in answer, answer
    section = answer.split("**Sources**", 1)[1].split("**Citation check:**", 1)[0]
    return re.findall(r"^\[\d+\] .* — (\S+)$", section, re.M)


# -- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def _site():
    global SITE_BASE
    with TestSite() as site:
        SITE_BASE = site.base
        yield site
    SITE_BASE = ""


@pytest.fixture
def site(_site, ws):
    _site.clear()
    _site.allow(ws)  # the site is on loopback: the egress policy refuses it unless the workspace allows it
    return _site


def researcher(ws, oracle: Oracle, engines: list, **options):
    options.setdefault("page_timeout", 5)
    options.setdefault("search_timeout", 5)
    return ws.researcher(engines=engines, model=oracle.name, **options)


# -- 1. multi-round research ------------------------------------------------------------------------
def test_two_hop_answer_needs_a_second_round_from_the_gaps(ws, site):
    oracle = Oracle()
    engine = SiteSearch()
    result = researcher(ws, oracle, [engine]).run_sync(TASK)

    assert result.status == "success", result.answer
    assert result.answer.startswith(f"**Answer:** {BIRTHPLACE}")
    assert "Lagos" not in result.answer  # the namesake Miro Okafor's birthplace is not the answer
    # round 1 only finds who the lead engineer is; round 2's query comes from round 1's gap
    assert engine.queries == ["Aurora lead engineer", f"{LEAD_ENGINEER} born"]
    assert oracle.replies["check"][0]["gaps"] == [f"the birthplace of {LEAD_ENGINEER}"]
    assert f"- the birthplace of {LEAD_ENGINEER}" in block(oracle.prompts["plan"][1], "knowledge_gaps")
    assert f"lead engineer is {LEAD_ENGINEER}" in block(oracle.prompts["plan"][1], "findings")

    steps = rounds(result)
    assert len(steps) == 2
    for number, (step, query) in enumerate(zip(steps, engine.queries), 1):
        search = actions(step, "search")[0]
        assert search["arguments"] == {"queries": [query]}
        assert re.search(r"site: \d+ hit\(s\)", search["observation"])
        assert actions(step, "read") and all(not a["observation"].startswith("Error") for a in actions(step, "read"))
        assert step.thinking.startswith(f"Round {number}: 1 queries")
        assert actions(step, "check")
    r1_evidence = actions(steps[0], "extract")[0]["observation"]
    r2_evidence = actions(steps[1], "extract")[0]["observation"]
    assert f"lead engineer is {LEAD_ENGINEER}" in r1_evidence and BIRTHPLACE not in r1_evidence
    assert f"{LEAD_ENGINEER} was born in {BIRTHPLACE}" in r2_evidence
    assert "answered: False" in actions(steps[0], "check")[0]["observation"]
    assert "answered: True" in actions(steps[1], "check")[0]["observation"]
    assert report_step(result).thinking == "Research ended: the answer was found."

    # the model stages, in order, as recorded in the event stream
    stages = [e.data["stage"] for e in ws.events.events(result.run_id) if e.type == "model_request"]
    assert stages == ["plan", "extract", "check", "plan", "extract", "check", "report"]

    # the site really served the search and both wiki pages
    assert site.hits.count("/search") == 2
    assert AURORA in site.hits and MIRA in site.hits

    # the Sources list holds exactly the pages cited, each one read in this run
    read_ok = {u for u, obs in reads(result).items() if not obs.startswith("Error")}
    listed = sources_section(result.answer)
    assert set(listed) == {site.url(AURORA), site.url(MIRA)}
    assert set(listed) <= read_ok
    assert "Citation check" not in result.answer
    assert errors(ws, result, "citation") == []


# -- 2. citation checking ---------------------------------------------------------------------------
def test_report_citations_are_checked(ws, site):
    unread = "https://example.org/never-read-page"
    prefix = site.base + "/wiki"  # never read, but a prefix of the pages read
    oracle = Oracle(answer_extra=" [7]", report_extra=f" See also [7], {unread}, {prefix} and {site.url(MIRA)}.")
    result = researcher(ws, oracle, [SiteSearch()]).run_sync(TASK)

    assert result.status == "success"  # the valid citations stand
    body = result.answer.split("**Citation check:**", 1)[0]
    assert "[7]" not in body and "[1]" in body and "[2]" in body
    assert result.answer.splitlines()[0].strip() == f"**Answer:** {BIRTHPLACE}"  # the short answer is checked too
    assert f"{unread} (not read in this run)" in body
    assert f"{prefix} (not read in this run) and {site.url(MIRA)}." in body  # the page read stays unmarked
    assert "**Citation check:**" in result.answer
    check = result.answer.split("**Citation check:**", 1)[1]
    assert "[7]" in check and unread in check
    messages = errors(ws, result, "citation")
    assert len(messages) == 1 and "[7]" in messages[0] and unread in messages[0] and prefix in messages[0]
    assert site.url(MIRA) not in messages[0]
    assert set(sources_section(result.answer)) == {site.url(AURORA), site.url(MIRA)}
    cited = actions(report_step(result), "report")[0]["arguments"]["cited"]
    assert cited and 7 not in cited


def test_report_with_only_invalid_citations_fails(ws, site):
    oracle = Oracle(report_body=f"{LEAD_ENGINEER} was born in {BIRTHPLACE} [7]. See [9, 12].")
    result = researcher(ws, oracle, [SiteSearch()]).run_sync(TASK)

    assert oracle.replies["check"][-1]["answered"] is True  # the research itself found the answer
    assert result.status == "failed"
    assert not re.search(r"\[\d+\]", result.answer.split("**Citation check:**")[0].split("**Confidence:**")[0])
    assert "**Sources**" not in result.answer
    assert "[7], [9], [12]" in result.answer.split("**Citation check:**", 1)[1]
    assert errors(ws, result, "citation")
    assert actions(report_step(result), "report")[0]["arguments"]["cited"] == []


# -- 3. engine failover -----------------------------------------------------------------------------
def test_failover_to_the_next_engine(ws, site):
    result = researcher(ws, Oracle(), [FailingEngine(), EmptyEngine(), SiteSearch()]).run_sync(TASK)

    assert result.status == "success" and BIRTHPLACE in result.answer
    for step in rounds(result):
        note = actions(step, "search")[0]["observation"].splitlines()[0]
        assert "broken failed: ConnectionError: search backend is down" in note
        assert "empty: no results" in note
        assert re.search(r"site: \d+ hit\(s\)", note)
        assert note.index("broken") < note.index("empty") < note.index("site")


def test_slow_engine_hits_the_search_timeout(ws, site):
    started = time.monotonic()
    result = researcher(ws, Oracle(), [SlowEngine(), SiteSearch()], search_timeout=0.5).run_sync(TASK)

    assert result.status == "success" and BIRTHPLACE in result.answer
    note = actions(rounds(result)[0], "search")[0]["observation"]
    assert "slow failed: no answer within 0.5 s" in note and "site:" in note
    assert time.monotonic() - started < 10


def test_all_engines_failing_ends_failed_without_crashing(ws, site):
    engines = [FailingEngine(), EmptyEngine(), WrongTypeEngine(), SlowEngine()]
    result = researcher(ws, Oracle(), engines, search_timeout=0.3).run_sync(TASK)

    assert result.status == "failed" and result.error is None
    assert result.answer.startswith("No evidence was found for the task (the round brought nothing new)")
    assert "Aurora lead engineer" in result.answer  # the queries tried are named
    steps = result.trajectory.steps
    assert len(steps) == 2  # one round, then the report
    note = actions(steps[0], "search")[0]["observation"]
    assert "broken failed: ConnectionError" in note and "empty: no results" in note
    assert "wrongtype failed: search() must return Hit objects, got dict" in note
    assert "slow failed: no answer within 0.3 s" in note and "(no hits)" in note
    assert actions(steps[1], "report")[0]["observation"] == result.answer
    assert "/wiki/" not in " ".join(site.hits)


# -- 4. the local corpus engine ---------------------------------------------------------------------
def test_corpus_search_refresh_and_read(ws, tmp_path):
    folder = sitekit.corpus(tmp_path / "docs", n=200)
    engine = CorpusSearch(ws, folder)
    assert engine.refresh() == {"added": 202, "changed": 0, "removed": 0, "unchanged": 0}
    assert engine.problems == [] and len(engine) == 202
    assert engine.db_path.parent == ws.path / "corpora"

    hits = engine.search("Who is the lead engineer of the Aurora project?", k=5)
    assert hits[0].url == "corpus://docs/aurora-project.md"
    assert hits[0].engine == f"corpus:{folder.name}" and LEAD_ENGINEER in hits[0].snippet
    page = engine.read(hits[0].url)
    assert page.via == "corpus" and page.title == "The Aurora project"
    assert page.text == (folder / "aurora-project.md").read_text(encoding="utf-8")
    assert engine.read("http://elsewhere/aurora-project.md") is None
    # an HTML document is indexed by its text
    html_doc = sorted(folder.glob("doc-*.html"))[0]
    assert "<p>" not in engine.read(f"corpus://docs/{html_doc.name}").text

    # edit one file, add one, delete one
    edited, removed = sorted(folder.glob("doc-*.md"))[:2]
    edited.write_text(edited.read_text() + "\nA late addendum about quasar calibration.\n")
    (folder / "new-note.txt").write_text("Zanzibar ferry timetables for the winter season.\n")
    removed.unlink()
    assert engine.refresh() == {"added": 1, "changed": 1, "removed": 1, "unchanged": 200}
    assert engine.search("Zanzibar ferry timetables", k=3)[0].url == "corpus://docs/new-note.txt"
    assert engine.search("quasar calibration", k=3)[0].url == f"corpus://docs/{edited.name}"
    assert engine.read(f"corpus://docs/{removed.name}") is None
    assert engine.refresh() == {"added": 0, "changed": 0, "removed": 0, "unchanged": 202}

    # a second engine over the same folder reuses the stored index
    assert CorpusSearch(ws, folder).refresh()["unchanged"] == 202


def test_corpus_folder_missing(ws, tmp_path):
    missing = tmp_path / "no-such-folder"
    with pytest.raises(SearchError, match=re.escape(str(missing))):
        CorpusSearch(ws, missing)
    with pytest.raises(SearchError, match="no-such-folder"):
        make_engine(f"corpus:{missing}", ws)
    with pytest.raises(SearchError, match="no-such-folder"):
        ws.researcher(engines=[f"corpus:{missing}"])
    assert "deep_researcher" not in ws.agents

    # a folder that disappears after indexing is an error too, not an index emptied without a word
    folder = sitekit.corpus(tmp_path / "gone", n=3)
    engine = CorpusSearch(ws, folder)
    assert engine.refresh()["added"] == 5
    shutil.rmtree(folder)
    with pytest.raises(SearchError, match=re.escape(str(folder))):
        engine.refresh()


def test_research_over_the_corpus(ws, tmp_path):
    folder = sitekit.corpus(tmp_path / "docs", n=200)
    oracle = Oracle()
    result = researcher(ws, oracle, [f"corpus:{folder}"], pages_per_round=1).run_sync(TASK)

    assert result.status == "success", result.answer
    assert result.answer.startswith(f"**Answer:** {BIRTHPLACE}")
    assert len(rounds(result)) == 2
    assert oracle.prompts.get("select")  # more hits than room: the select stage chose
    read = reads(result)
    assert all("via corpus" in obs for obs in read.values())
    assert set(sources_section(result.answer)) == {"corpus://docs/aurora-project.md", "corpus://docs/mira-okafor.md"}
    card = ws.agents.get("deep_researcher")
    assert card.metadata["config"]["engines"] == [f"corpus:{folder.resolve()}"]


# -- 5. the page reader on bad inputs ---------------------------------------------------------------
class _Internal(QuietHandler):
    """A local admin service a hostile page wants the reader to fetch (a Jupyter server, a database UI)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.hits.append(self.path)
        if self.path.startswith("/redirect"):
            self.redirect(f"http://127.0.0.1:{self.server.server_port}/internal-admin?token=ADMIN-TOKEN")
            return
        body = b"<html><body><p>internal admin console, ADMIN-TOKEN, lots of text here</p></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def internal():
    server = serve(_Internal)
    server.hits = []
    yield server
    stop(server)


def test_search_hits_on_internal_addresses_are_refused_by_the_egress_policy(ws, site, internal):
    """A hostile engine (or page) points the reader at loopback, a redirect to loopback and the cloud
    metadata address: each is refused with the rule that refused it, as an observation and a run event,
    and nothing of the internal service reaches the model."""
    port = internal.server_port
    ws.egress.allow(f"localhost:{port}")  # the first hop of the redirect chain is allowed, its target is not
    bad = {
        f"http://127.0.0.1:{port}/internal-admin": "loopback",
        f"http://localhost:{port}/redirect": "loopback",
        "http://169.254.169.254/latest/meta-data/": "link-local",
        "http://10.1.2.3/admin": "private",
        "http://[::ffff:127.0.0.1]:%d/internal-admin" % port: "loopback",
    }
    oracle = Oracle()
    result = researcher(ws, oracle, [ListEngine([*bad, site.url(AURORA), site.url(MIRA)])], page_timeout=3,
                        pages_per_round=8).run_sync(TASK)  # fmt: skip
    observed = reads(result)
    for url, rule in bad.items():
        assert observed[url].startswith("Error: ") and f"egress rule '{rule}'" in observed[url], observed[url]
    refusals = [e.data for e in ws.events.events(result.run_id) if e.type == "egress_refused"]
    assert sorted(r["rule"] for r in refusals) == sorted(bad.values()), refusals
    assert any("/internal-admin?token=" in r["url"] and "redirected here" in r["reason"] for r in refusals), refusals
    # the internal service saw only the allowed first hop; its secret never reached the model
    assert internal.hits == ["/redirect"]
    assert "internal admin console" not in json.dumps(oracle.prompts)
    # the trajectory view shows each refusal with its rule
    shown = " ".join(err for step in result.trajectory.steps for err in step.errors)
    assert "egress rule 'link-local'" in shown and "egress rule 'private'" in shown
    assert result.status == "success" and BIRTHPLACE in result.answer


def test_bad_pages_are_error_observations(ws, site):
    bad = {
        site.url("/missing.html"): "HTTP 404",
        site.url("/nothing-here.html").replace(
            site.hostport.split(":")[1], str(closed_port())
        ): "egress rule 'loopback'",
        site.url("/slow.html?s=30"): "no complete answer within 1 s",
        site.url("/big.bin"): f"{sitekit.BIG_SIZE / 1e6:.0f} MB is over the reader's limit of 5 MB",
        site.url("/redirect-to-file"): "only http and https are reached, not the 'file' scheme (egress rule 'scheme')",
        "file:///etc/passwd": "only http and https are reached, not the 'file' scheme (egress rule 'scheme')",
    }
    good = [site.url(AURORA), site.url(MIRA)]
    oracle = Oracle()
    started = time.monotonic()
    result = researcher(ws, oracle, [ListEngine([*bad, *good])], page_timeout=1, pages_per_round=8).run_sync(TASK)

    assert time.monotonic() - started < 15
    observed = reads(result)
    for url, reason in bad.items():
        assert observed[url].startswith("Error: "), observed[url]
        assert url in observed[url] and reason in observed[url], observed[url]
    for url in good:
        assert not observed[url].startswith("Error")
    # the run went on with the good pages, and the trajectory keeps every failure
    assert result.status == "success" and BIRTHPLACE in result.answer
    assert set(sources_section(result.answer)) == set(good)
    failed = [a for a in all_actions(result, "read") if a["ok"] is False]
    assert len(failed) == len(bad)
    assert {"/missing.html", "/slow.html", "/big.bin", "/redirect-to-file"} <= set(site.hits)
    prompts = "\n".join(p for stage in oracle.prompts.values() for p in stage)
    assert "root:" not in prompts and "/etc/passwd" not in block(oracle.prompts["extract"][0], "task")
    # a failed URL is not offered again in later rounds (the engine returns it for every query)
    assert len(all_actions(result, "read")) == len(bad) + len(good)


# -- 6. a page that needs JavaScript ----------------------------------------------------------------
def test_js_only_page_without_a_browser_has_no_text(ws, site):
    result = researcher(ws, Oracle(), [ListEngine([site.url("/js-only.html")])], browser="never").run_sync(LAUNCH_TASK)
    assert result.status == "failed"
    assert "the page has no readable text" in reads(result)[site.url("/js-only.html")]


@needs_chromium
def test_js_only_page_falls_back_to_the_browser(ws, site):
    oracle = Oracle()
    url = site.url("/js-only.html")
    result = researcher(ws, oracle, [ListEngine([url])], browser="auto", page_timeout=20).run_sync(LAUNCH_TASK)

    assert result.status == "success", result.answer
    assert "via browser" in reads(result)[url]
    assert SCRIPT_SENTENCE in oracle.prompts["extract"][0]
    assert result.answer.startswith("**Answer:** 14 March")
    assert site.hits.count("/js-only.html") >= 2  # fetched over HTTP, then opened in the browser
    assert ws.envs.sessions() == []  # the run's browser session ended with it


# -- 7. chunk selection on a long page --------------------------------------------------------------
def test_only_relevant_chunks_of_a_long_page_reach_the_model(ws, site):
    oracle = Oracle()
    url = site.url("/wiki/aurora-history.html")
    result = researcher(ws, oracle, [ListEngine([url])], chunks_per_page=3, chunk_chars=1200).run_sync(REACTOR_TASK)

    assert result.status == "success" and result.answer.startswith("**Answer:** 42 megawatts")
    [prompt] = oracle.prompts["extract"]
    [(_, _, excerpt)] = _SOURCE.findall(prompt)
    assert REACTOR_FACT in excerpt
    page_chars = sum(len(p) for p in sitekit.WIKI["/wiki/aurora-history.html"][1])
    assert page_chars > 25_000
    assert len(excerpt) <= 3 * 1200 + 20 and len(prompt) < 5000
    first, last = sitekit.WIKI["/wiki/aurora-history.html"][1][0], sitekit.WIKI["/wiki/aurora-history.html"][1][-1]
    assert first not in prompt and last not in prompt
    kept = re.search(r"(\d+) of (\d+) chunks kept", reads(result)[url])
    assert kept and 1 <= int(kept.group(1)) <= 3 and int(kept.group(2)) >= 20


# -- 8. budgets and a malformed plan ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"max_pages": 1}, "the page budget of 1 pages is spent"),
        ({"max_rounds": 1}, "the round budget of 1 rounds is spent"),
        ({"max_seconds": 1.0, "delay": 1.2}, "the time budget of 1 s is spent"),
    ],
    ids=["max_pages", "max_rounds", "max_seconds"],
)
def test_budgets_stop_the_loop(ws, site, options, reason):
    options = dict(options)
    engine = SiteSearch(delay=options.pop("delay", 0.0))
    result = researcher(ws, Oracle(), [engine], **options).run_sync(TASK)

    assert len(rounds(result)) == 1  # the second round, which would find the birthplace, never ran
    assert engine.queries == ["Aurora lead engineer"] and MIRA not in site.hits
    assert report_step(result).thinking == f"Research ended: {reason}."
    assert result.status == "failed"  # the question is not answered...
    assert LEAD_ENGINEER in result.answer and f"the birthplace of {LEAD_ENGINEER}" in result.answer
    assert sources_section(result.answer) == [site.url(AURORA)]  # ...but what was found is reported, cited


def test_malformed_plan_is_retried_then_the_task_is_the_query(ws, site):
    oracle = Oracle(bad_plans=2)
    engine = SiteSearch()
    result = researcher(ws, oracle, [engine], max_rounds=1).run_sync(TASK)

    assert len(oracle.prompts["plan"]) == 2  # the first reply and one retry
    assert oracle.prompts["plan"][1].startswith("Error: the reply is not a JSON object")
    assert engine.queries == [TASK]
    assert actions(rounds(result)[0], "search")[0]["arguments"] == {"queries": [TASK]}
    [message] = errors(ws, result, "model_output")
    assert message.startswith("plan: the reply is not a JSON object")
    assert result.status == "failed" and result.error is None


def test_malformed_plan_once_is_recovered(ws, site):
    oracle = Oracle(bad_plans=1)
    engine = SiteSearch()
    result = researcher(ws, oracle, [engine]).run_sync(TASK)

    assert result.status == "success" and BIRTHPLACE in result.answer
    assert engine.queries[0] == "Aurora lead engineer"  # the retry's answer was used
    assert errors(ws, result, "model_output") == []


# -- 9. rebuilt from its ACP card in a fresh workspace (a kernel restart) -----------------------------
def test_rebuilt_from_the_card_after_a_restart(tmp_path, site):
    path = tmp_path / "ws"
    oracle = Oracle()
    ws1 = tea_notebook.Workspace(path, embedder="hashing")
    try:
        researcher(ws1, oracle, [SiteSearch()], max_rounds=3)
        card = ws1.agents.get("deep_researcher")
        assert card.metadata["kind"] == "researcher"
        assert card.metadata["config"]["engines"] == [engine_spec(SiteSearch())]
        assert card.metadata["config"]["engines"][0].endswith(":SiteSearch")
    finally:
        ws1.close()

    ws2 = tea_notebook.Workspace(path, embedder="hashing")
    try:
        assert "deep_researcher" not in ws2.live_agents
        assert ws2.agents.runtime("deep_researcher") is None
        invoked = ws2.agents.invoke("deep_researcher", TASK)
        assert invoked.ok, invoked.error
        assert invoked.value.startswith(f"**Answer:** {BIRTHPLACE}")
        assert ws2.agents.runtime("deep_researcher") is not None  # the runner was restored from the card
        assert ws2.runs(1)[0]["agent"] == "deep_researcher" and ws2.runs(1)[0]["status"] == "success"
        assert len(oracle.prompts["report"]) == 1

        # a planner in the new workspace delegates to it through A2T
        seen_tools: list[list[str]] = []

        def plan(messages: list[dict], tools: list[dict]):
            seen_tools.append([t["function"]["name"] for t in tools])
            history = block(messages[-1]["content"], "agent_history")  # earlier steps with their observations
            if "deep_researcher_agent" not in history:
                return call("deep_researcher_agent", task=TASK)
            found = re.search(r"deep_researcher_agent\].* -> \*\*Answer:\*\* (\w+)", history)
            if found:
                return call("done", success=True, text=f"The lead engineer was born in {found.group(1)}.")
            return call("done", success=False, text="The researcher found nothing.")

        planner_model = ScriptedModel(plan)
        site.clear()
        result = ws2.planner(["deep_researcher"], model=planner_model.name).run_sync(TASK)
        assert "deep_researcher_agent" in seen_tools[0]
        assert result.success and result.answer == f"The lead engineer was born in {BIRTHPLACE}."
        [child] = result.trajectory.children
        assert child.agent == "deep_researcher" and child.status == "success"
        assert len([s for s in child.steps if any(a["name"] == "search" for a in s.actions)]) == 2
        assert MIRA in site.hits
    finally:
        ws2.close()
