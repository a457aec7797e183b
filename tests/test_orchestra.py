"""The browser-use agent and the orchestra against real components: the local web site of
tests/sitekit.py, a real headless Chromium (the browser environment), the Python sandbox, the
document converter's sandbox and a local document corpus.

Every model is scripted but reads its prompt (:class:`FormFiller` and the other browser scripts
look elements up by their ``[index] selector kind 'text'`` line in the browser's state and decide
the next action from what the state shows; the researcher, analyzer and planner scripts answer only
from the excerpts, findings and observations they are given), so a state that is not refreshed, an
index that does not resolve or a result that is lost on the way fails these tests.

Browser tests are skipped without a Chromium, except with ``TEA_REQUIRE_BROWSER=1`` (CI), where
they fail instead.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import html  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
import urllib.parse  # noqa: E402
import urllib.request  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402
from urllib.parse import parse_qs  # noqa: E402

import docfactory as df  # noqa: E402
import pytest  # noqa: E402
import sitekit  # noqa: E402
from conftest import magics_workspace  # noqa: E402
from loopback_http import free_port as closed_port  # noqa: E402
from prompt_parts import block  # noqa: E402
from sitekit import (  # noqa: E402
    BIRTHPLACE,
    FIRST_ORDER,
    LEAD_ENGINEER,
    SCROLL_SENTENCE,
    SECRET_CODE,
    SECRET_SENTENCE,
    TestSite,
)

import tea_notebook  # noqa: E402
from tea_notebook.agents import kinds  # noqa: E402
from tea_notebook.agents.analyzer import DeepAnalyzer  # noqa: E402
from tea_notebook.agents.researcher import DeepResearcher  # noqa: E402
from tea_notebook.envs.browser import Browser, find_chromium  # noqa: E402
from tea_notebook.envs.search import CorpusSearch, Hit, WebSearch  # noqa: E402
from tea_notebook.evolve.llm import stage_of  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call, history_calls  # noqa: E402
from tea_notebook.runtime.agent import Agent  # noqa: E402

needs_chromium = pytest.mark.skipif(
    find_chromium() is None and not os.environ.get("TEA_REQUIRE_BROWSER"),
    reason="no Chromium found: `apt-get install chromium` or `playwright install chromium`",
)

TEAM = ["deep_researcher", "browser_use", "deep_analyzer", "tool_manager"]
SALES = {"Q3": [["Region", "Sales"], ["North", 120], ["South", 80]], "Notes": [["note"], ["draft figures"]]}
SALES_TOTAL = 200


pytestmark = pytest.mark.usefixtures("warm_litellm")  # timings measure the runtime, not litellm's first import.


@pytest.fixture(scope="module")
def site():
    with TestSite() as served:
        yield served


@pytest.fixture(autouse=True)
def _fresh_site(site, request):
    site.clear()  # order numbers start again at FIRST_ORDER
    if "ws" in request.fixturenames:  # the site is on loopback: the egress policy needs an explicit allow
        site.allow(request.getfixturevalue("ws"))


# -- reading prompts -------------------------------------------------------------------------------
def prompt_of(messages: list[dict]) -> str:
    """The user message's text (plain or the text parts of a message with a screenshot)."""
    content = next(m["content"] for m in messages if m["role"] == "user")
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")


def task_of(messages: list[dict]) -> str:
    return re.search(r"<task>(.*?)</task>", prompt_of(messages), re.S).group(1)


def browser_state(messages: list[dict]) -> str:
    m = re.search(r'<environment name="browser"><state>(.*?)</state>', prompt_of(messages), re.S)
    assert m, "the browser's state is not in the prompt"
    return m.group(1)


@dataclass
class Element:
    index: str
    selector: str
    kind: str
    rest: str  # the text and attributes after the kind


_ELEMENT = re.compile(r"^\s+\[(\d+)\] (\S+) (\S+)(.*)$", re.M)


def elements(state: str) -> list[Element]:
    """The interactive elements the state lists, as ``[index] selector kind 'text' attrs`` lines."""
    return [Element(*m.groups()) for m in _ELEMENT.finditer(state)]


def element(state: str, kind: str, contains: str = "") -> Element:
    """The one listed element of ``kind`` whose line holds ``contains`` (the script fails otherwise)."""
    found = [e for e in elements(state) if e.kind == kind and contains in e.rest]
    assert len(found) == 1, f"no single {kind} {contains!r} in the state:\n{state}"
    return found[0]


def current_url(state: str) -> str:
    m = re.search(r"^Current page: .* at (\S+)$", state, re.M)
    return m.group(1) if m else ""


def tabs(state: str) -> list[tuple[int, str, bool]]:
    """``(tab id, url, is current)`` of each tab the state lists."""
    return [
        (int(m.group(2)), m.group(3), m.group(1) == "*")
        for m in re.finditer(r"^([* ]) \[(\d+)\] '.*?' (\S+)", state, re.M)
    ]


def browser_actions(tools: list[dict]) -> dict[str, str]:
    """The offered browser tools by action (``{"goto": "browser_goto", ...}``), from the tool list."""
    names = [t["function"]["name"] for t in tools]
    out = {n.removeprefix("browser_"): n for n in names if n.startswith("browser_")}
    assert {"goto", "click", "input", "scroll", "extract", "switch_tab"} <= set(out), names
    return out


def url_in(task: str, path: str) -> str:
    return re.search(rf"https?://[\w.:]+{re.escape(path)}", task).group(0)


# -- the browser agent's scripts --------------------------------------------------------------------
class BrowserScript:
    """A scripted browser model: ``decide(state, history, act, task)`` returns the next call; every
    state it was shown is kept in ``states`` (one per step)."""

    def __init__(self) -> None:
        self.states: list[str] = []
        self.model = ScriptedModel(self)

    def __call__(self, messages: list[dict], tools: list[dict]) -> Any:
        state = browser_state(messages)
        self.states.append(state)
        return self.decide(state, history_calls(messages), browser_actions(tools), task_of(messages))

    def decide(self, state: str, history: list[tuple[str, str, str]], act: dict[str, str], task: str) -> Any:
        raise NotImplementedError


class FormFiller(BrowserScript):
    """Orders ``plan`` for ``name`` on /form.html: it does whatever the state shows still missing (name
    typed, option chosen, box ticked), submits, reads the confirmation and finishes with it."""

    def __init__(self, name: str = "Ada Lovelace", plan: str = "Deluxe") -> None:
        super().__init__()
        self.name, self.plan = name, plan

    def decide(self, state, history, act, task):
        url = current_url(state)
        if url.endswith("/submit"):
            if history[-1][0] != act["extract"]:
                return call(act["extract"])
            return call("done", success="confirmed" in history[-1][2], text=history[-1][2])
        if not url.endswith("/form.html"):
            return call(act["goto"], url=url_in(task, "/form.html"))
        name = element(state, "input[text]", "name='name'")
        if f"value={self.name!r}" not in name.rest:
            return call(act["input"], selector=name.index, text=self.name)
        plan = element(state, "select", "name='plan'")
        if f"value={self.plan!r}" not in plan.rest:
            return call(act["input"], selector=plan.index, text=self.plan)
        gift = element(state, "input[checkbox]", "name='gift'")
        if gift.rest.endswith("not checked"):
            return call(act["click"], selector=gift.index)
        return call(act["click"], selector=element(state, "button", "'Place order'").index)


# -- 1. the form, by index ----------------------------------------------------------------------------
@needs_chromium
def test_browser_agent_fills_in_and_submits_the_form_by_index(ws, site):
    filler = FormFiller("Ada Lovelace", "Deluxe")
    agent = ws.browser_agent(model=filler.model.name)
    assert ws.agents.get("browser_use").metadata["kind"] == "browser_use"
    task = f"Order the Deluxe kit for Ada Lovelace with gift wrap on the order form at {site.url('/form.html')}."
    result = agent.run_sync(task)

    assert result.success, (result.status, result.error, result.answer)
    assert [parse_qs(body) for body in site.posted] == [{"name": ["Ada Lovelace"], "plan": ["Deluxe"], "gift": ["yes"]}]
    assert f"order #{FIRST_ORDER} confirmed for Deluxe" in result.answer and "Gift wrap: yes" in result.answer

    steps = result.trajectory.steps
    names = [s.actions[0]["name"] for s in steps]
    assert names == [
        "browser_goto",
        "browser_input",
        "browser_input",
        "browser_click",
        "browser_click",
        "browser_extract",
        "done",
    ]
    assert all(a.get("ok") for s in steps for a in s.actions), [a for s in steps for a in s.actions]
    states = filler.states
    assert len(states) == len(steps) == 7
    # each step acted on the index the state it was shown gave for the element, and the state that
    # followed shows the effect
    assert "not started" in states[0] and elements(states[0]) == []
    form = site.url("/form.html")
    assert f"Opened {form}" in steps[0].actions[0]["observation"] and current_url(states[1]) == form
    for i, (kind, contains) in enumerate(
        [("input[text]", "name='name'"), ("select", "name='plan'"), ("input[checkbox]", "name='gift'")], start=1
    ):
        index = element(states[i], kind, contains).index
        assert steps[i].actions[0]["arguments"]["selector"] == index, (i, steps[i].actions[0])
    assert steps[1].actions[0]["observation"].startswith("Typed 'Ada Lovelace' into input")
    assert "value='Ada Lovelace'" in element(states[2], "input[text]", "name='name'").rest
    assert steps[2].actions[0]["observation"].startswith("Chose 'Deluxe' in select")
    assert "value='Deluxe'" in element(states[3], "select", "name='plan'").rest
    assert element(states[3], "input[checkbox]").rest.endswith("not checked")
    assert element(states[4], "input[checkbox]").rest.endswith(" checked")
    assert not element(states[4], "input[checkbox]").rest.endswith("not checked")
    assert steps[4].actions[0]["arguments"]["selector"] == element(states[4], "button", "Place order").index
    assert "title 'Order confirmed'" in steps[4].actions[0]["observation"]
    assert current_url(states[5]) == site.url("/submit") and "'Order confirmed'" in states[5]
    assert f"order #{FIRST_ORDER}" in steps[5].actions[0]["observation"]
    assert ws.envs.sessions() == []  # the run's browser stopped with it


@needs_chromium
def test_a_select_without_the_option_names_the_options(ws, site):
    """The drop-down support of ``input``: a missing option is an error naming the ones there are."""
    ws.envs.add(Browser, timeout=5)
    try:
        assert ws.envs.invoke("browser", "goto", {"url": site.url("/form.html")}).ok
        result = ws.envs.invoke("browser", "input", {"selector": "#plan", "text": "Platinum"})
        assert not result.ok
        assert "has no option 'Platinum'; its options: 'Basic', 'Standard', 'Deluxe'" in result.error["message"]
        chosen = ws.envs.invoke("browser", "input", {"selector": "#plan", "text": "standard"})  # case-insensitive
        assert chosen.ok and "Chose 'Standard'" in chosen.value
        assert "value='Standard'" in ws.envs.state("browser")
    finally:
        ws.envs.release()


# -- 2. content after a click, after a scroll, in a new tab ---------------------------------------------
class Revealer(BrowserScript):
    """Opens /reveal.html, reads it, presses 'Show details' by index, reads it again."""

    def decide(self, state, history, act, task):
        done_names = [h[0] for h in history]
        if not current_url(state).endswith("/reveal.html"):
            return call(act["goto"], url=url_in(task, "/reveal.html"))
        if done_names.count(act["extract"]) == 0:
            return call(act["extract"])
        if act["click"] not in done_names:
            return call(act["click"], selector=element(state, "button", "'Show details'").index)
        if done_names[-1] == act["click"]:
            return call(act["extract"])
        code = re.search(r"The secret code is \d+", history[-1][2])
        return call("done", success=bool(code), text=code.group(0) if code else "no code shown")


class Scroller(BrowserScript):
    """Opens /scroll.html and scrolls until the state says the page bottom is in view, then reads it."""

    def decide(self, state, history, act, task):
        if not current_url(state).endswith("/scroll.html"):
            return call(act["goto"], url=url_in(task, "/scroll.html"))
        if history and history[-1][0] == act["extract"]:
            final = re.search(r"Loaded more: [^.]*?the final item is \w+", history[-1][2])
            return call("done", success=bool(final), text=final.group(0) if final else history[-1][2][:200])
        y, height, view = map(int, re.search(r"Scroll: y=(\d+) of (\d+) px \(viewport (\d+) px\)", state).groups())
        if y + view < height:
            return call(act["scroll"], direction="down", amount=5, unit="pages")
        return call(act["extract"])


class TabSwitcher(BrowserScript):
    """Opens /tabs.html, clicks the link (by index) that opens a new tab, reads the new tab, switches
    back to the first tab (by the id the state lists) and finishes with what it read."""

    def decide(self, state, history, act, task):
        names = [h[0] for h in history]
        if not names:
            return call(act["goto"], url=url_in(task, "/tabs.html"))
        if act["click"] not in names:
            return call(act["click"], selector=element(state, "link", "in a new tab").index)
        if act["extract"] not in names:
            return call(act["extract"])
        if act["switch_tab"] not in names:
            first = next(tab for tab, url, _ in tabs(state) if url.endswith("/tabs.html"))
            return call(act["switch_tab"], tab_id=first)
        read = next(h[2] for h in history if h[0] == act["extract"])
        born = re.search(rf"{LEAD_ENGINEER} was born in \w+", read)
        return call("done", success=bool(born), text=born.group(0) if born else "not found")


@needs_chromium
def test_content_that_appears_only_after_a_click(ws, site):
    script = Revealer()
    result = ws.browser_agent(model=script.model.name).run_sync(
        f"Find the secret code on {site.url('/reveal.html')} (press the button to see it)."
    )
    assert result.success and result.answer == SECRET_SENTENCE, result.answer
    steps = result.trajectory.steps
    assert [s.actions[0]["name"] for s in steps] == [
        "browser_goto",
        "browser_extract",
        "browser_click",
        "browser_extract",
        "done",
    ]
    assert SECRET_CODE not in steps[1].actions[0]["observation"]  # not there before the click
    assert steps[2].actions[0]["arguments"]["selector"] == element(script.states[2], "button", "Show details").index
    assert SECRET_SENTENCE in steps[3].actions[0]["observation"]


@needs_chromium
def test_content_that_appears_only_after_scrolling_to_the_bottom(ws, site):
    script = Scroller()
    result = ws.browser_agent(model=script.model.name).run_sync(
        f"What is the final item of the list at {site.url('/scroll.html')}? Scroll to load more."
    )
    assert result.success and result.answer == SCROLL_SENTENCE, result.answer
    steps = result.trajectory.steps
    names = [s.actions[0]["name"] for s in steps]
    assert names[0] == "browser_goto" and names[-2:] == ["browser_extract", "done"]
    scrolls = [s.actions[0] for s in steps if s.actions[0]["name"] == "browser_scroll"]
    assert len(scrolls) >= 2 and all(a["ok"] and "Scrolled the page down" in a["observation"] for a in scrolls)
    positions = [int(re.search(r"Scroll: y=(\d+)", s).group(1)) for s in script.states[1:-1]]
    assert positions == sorted(positions) and positions[0] == 0 < positions[-1]  # each state shows the move
    assert SCROLL_SENTENCE not in steps[0].actions[0]["observation"]
    assert SCROLL_SENTENCE in steps[-2].actions[0]["observation"]


@needs_chromium
def test_a_link_opening_a_new_tab_and_switching_back(ws, site):
    script = TabSwitcher()
    result = ws.browser_agent(model=script.model.name).run_sync(
        f"Open the profile linked from {site.url('/tabs.html')} and say where the person was born."
    )
    assert result.success and result.answer == f"{LEAD_ENGINEER} was born in {BIRTHPLACE}", result.answer
    steps = result.trajectory.steps
    assert [s.actions[0]["name"] for s in steps] == [
        "browser_goto",
        "browser_click",
        "browser_extract",
        "browser_switch_tab",
        "done",
    ]
    assert "opened a new tab [1]" in steps[1].actions[0]["observation"]
    after_click = tabs(script.states[2])
    assert len(after_click) == 2
    assert [url for _, url, current in after_click if current] == [site.url("/wiki/mira-okafor.html")]
    assert steps[3].actions[0]["arguments"] == {"tab_id": 0}
    after_switch = tabs(script.states[4])
    assert [url for _, url, current in after_switch if current] == [site.url("/tabs.html")]
    assert len(after_switch) == 2


# -- 3. errors are observations -----------------------------------------------------------------------
class BadIndexThenTick(BrowserScript):
    """Clicks [999] on the form, then ticks the box by the index the state gives."""

    def decide(self, state, history, act, task):
        names = [h[0] for h in history]
        if not names:
            return call(act["goto"], url=url_in(task, "/form.html"))
        if len(names) == 1:
            return call(act["click"], selector="999")
        if len(names) == 2:
            return call(act["click"], selector=element(state, "input[checkbox]", "name='gift'").index)
        ticked = not element(state, "input[checkbox]").rest.endswith("not checked")
        return call("done", success=ticked, text="ticked" if ticked else "not ticked")


@needs_chromium
def test_a_missing_index_is_an_observation_and_the_run_goes_on(ws, site):
    script = BadIndexThenTick()
    result = ws.browser_agent(model=script.model.name).run_sync(f"Tick the gift box on {site.url('/form.html')}.")
    assert result.success and result.answer == "ticked", (result.status, result.answer, result.error)
    steps = result.trajectory.steps
    bad, good = steps[1].actions[0], steps[2].actions[0]
    listed = len(elements(script.states[1]))
    assert listed == 5
    assert bad["ok"] is False and bad["arguments"] == {"selector": "999"}
    assert (
        f"there is no element [999] on {site.url('/form.html')}: the state lists elements [1]–[{listed}]"
        in bad["observation"]
    )
    assert good["ok"] is True and good["observation"].startswith("Clicked input")
    # the model was shown the error in its history
    assert "there is no element [999]" in prompt_of(script.model.calls[2])


class Wanderer(BrowserScript):
    """Tries an unreachable URL, then a page that never answers in time, then the form."""

    def __init__(self, dead: str) -> None:
        super().__init__()
        self.dead = dead

    def decide(self, state, history, act, task):
        plan = [self.dead, url_in(task, "/slow.html?s=30"), url_in(task, "/form.html")]
        if len(history) < len(plan):
            return call(act["goto"], url=plan[len(history)])
        return call("done", success=current_url(state).endswith("/form.html"), text=current_url(state))


@needs_chromium
def test_unreachable_and_slow_pages_are_error_observations(ws, site):
    ws.envs.add(Browser, timeout=3)
    port = closed_port()
    dead = f"http://127.0.0.1:{port}/"
    ws.egress.allow(f"127.0.0.1:{port}")  # allowed, so that it fails as unreachable, not as refused
    script = Wanderer(dead)
    task = f"Open {site.url('/slow.html?s=30')} or, failing that, {site.url('/form.html')}."  # the script's URLs
    started = time.monotonic()
    result = ws.browser_agent(model=script.model.name).run_sync(task)
    elapsed = time.monotonic() - started
    assert result.success and result.answer == site.url("/form.html"), (result.status, result.error)
    assert elapsed < 15, elapsed  # the slow page cost one time limit (3 s), not its 30 s
    first, second, third = (s.actions[0] for s in result.trajectory.steps[:3])
    assert first["ok"] is False and first["observation"].startswith("Error (EnvironmentFailure): could not open")
    assert dead in first["observation"] and "refused" in first["observation"]
    assert second["ok"] is False and "did not load within" in second["observation"]
    assert "/slow.html" in second["observation"] and "/slow.html" in site.hits
    assert third["ok"] is True and "Order form" in third["observation"]


# -- the specialists' scripts (stage by stage, from what the prompt holds) -------------------------------
_STAGE = re.compile(r"\Atea-stage: (\w+)")
_SOURCE = re.compile(r'<source number="(\d+)" title="([^"]*)" url="([^"]*)">\n(.*?)\n</source>', re.S)
_EVIDENCE = re.compile(r"^\[(\d+)\] (.*?)(?: — \".*\")?$", re.M)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=\.)\s+", " ".join(text.split())) if s.strip()]


class Researcher:
    """The deep researcher's model: extracts only sentences its excerpts hold, answers only from the
    evidence it is given (the lead engineer from a page about the Aurora project, then her birthplace)."""

    def __init__(self) -> None:
        self.stages: list[str] = []
        self.model = ScriptedModel(self)

    def __call__(self, messages, tools):
        stage = _STAGE.match(messages[0]["content"]).group(1)
        self.stages.append(stage)
        return getattr(self, stage)(messages[-1]["content"])

    @staticmethod
    def _facts(evidence: str) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
        """``(lead engineer, source)`` and ``(birthplace, source)`` from the evidence lines."""
        lead = born = None
        for number, fact in _EVIDENCE.findall(evidence):
            m = re.search(r"lead engineer is ([A-Z]\w+ [A-Z]\w+)", fact)
            if m and lead is None:
                lead = (m.group(1), int(number))
        for number, fact in _EVIDENCE.findall(evidence):
            m = lead and re.search(rf"{lead[0]} was born in (\w+)", fact)
            if m:
                born = (m.group(1), int(number))
        return lead, born

    def plan(self, user):
        suggested = re.findall(r"^- (.+)$", block(user, "suggested_queries"), re.M)
        lead, _ = self._facts(block(user, "findings"))
        queries = suggested or ([f"{lead[0]} born"] if lead else ["Aurora project lead engineer"])
        return json.dumps({"queries": queries})

    def select(self, user):
        picks = [
            int(n) for n, line in re.findall(r"^\[(\d+)\] (.*)$", user, re.M) if re.search(r"(?i)aurora|okafor", line)
        ]
        return json.dumps({"read": picks})

    def extract(self, user):
        evidence = []
        for number, title, _url, text in _SOURCE.findall(user):
            for s in sentences(text):
                about_aurora = "Aurora project" in title + text and "lead engineer is" in s
                if about_aurora or re.search(r"[A-Z]\w+ [A-Z]\w+ was born in \w+", s):
                    evidence.append({"source": int(number), "fact": s, "quote": s, "relevance": 0.9})
        return json.dumps({"evidence": evidence})

    def check(self, user):
        lead, born = self._facts(block(user, "evidence"))
        if lead and born:
            answer = f"{lead[0]} was born in {born[0]} [{born[1]}]"
            return json.dumps({"answered": True, "answer": answer, "summary": answer, "confidence": "high", "gaps": []})
        gaps = [f"where {lead[0]} was born"] if lead else ["who leads the Aurora project"]
        queries = [f"{lead[0]} born"] if lead else []
        return json.dumps(
            {"answered": False, "answer": "", "summary": "", "confidence": "low", "gaps": gaps, "next_queries": queries}
        )

    def report(self, user):
        lead, born = self._facts(block(user, "evidence"))
        return json.dumps(
            {
                "answer": f"{lead[0]} was born in {born[0]} [{born[1]}]",
                "report": f"The lead engineer of the Aurora project is {lead[0]} [{lead[1]}]. "
                f"{lead[0]} was born in {born[0]} [{born[1]}].",
                "confidence": "high",
            }
        )


class Analyst:
    """The deep analyzer's model: the map stage reports the rows of a Sales table only when its excerpt
    holds one; the reduce stage adds up the rows it is given."""

    def __init__(self) -> None:
        self.excerpts: list[str] = []
        self.model = ScriptedModel(self)

    def __call__(self, messages, tools):
        stage = _STAGE.match(messages[0]["content"]).group(1)
        user = messages[-1]["content"]
        if stage == "enhance":
            return json.dumps({"enhanced_task": "Add up the Sales column of sheet Q3", "focus": ["Q3", "Sales"]})
        if stage == "map":
            excerpt = re.search(r'<excerpt ref="[^"]*">\n(.*)\n</excerpt>', user, re.S).group(1)
            self.excerpts.append(excerpt)
            rows = re.findall(r"^\| (\w+) \| (\d+) \|$", excerpt, re.M) if "| Sales |" in excerpt else []
            return json.dumps(
                {"findings": [{"finding": f"{r} sales: {v}", "quote": f"| {r} | {v} |"} for r, v in rows]}
            )
        if stage == "reduce":
            found = re.findall(r"^\((.*?)\) (\w+) sales: (\d+)", block(user, "findings"), re.M)
            if not found:
                return json.dumps({"answer": "", "summary": "", "complete": False, "missing": ["the Q3 sales"]})
            ref = found[0][0]
            parts = " + ".join(f"{region} {value}" for _, region, value in found)
            total = sum(int(v) for _, _, v in found)
            return json.dumps(
                {"answer": f"Total Q3 sales: {total} ({ref})", "summary": f"Sum of {parts}.", "complete": True}
            )
        raise AssertionError(f"unexpected analyzer stage {stage}")


class ToolManagerStages:
    """The tool manager's model: reuses an existing tool when the listing it is shown has one for adding
    up sales figures (no tool is created)."""

    def __init__(self) -> None:
        self.stages: list[str] = []
        self.model = ScriptedModel(self)

    def __call__(self, messages, tools):
        stage = stage_of(messages)
        self.stages.append(stage)
        assert stage == "assess_tool_need", stage
        listed = re.findall(r"^- (\w+):", messages[1]["content"], re.M)
        matching = [name for name in listed if name == "add_up_sales"]
        return json.dumps(
            {
                "need_creation": False,
                "required_capabilities": ["add_numbers"],
                "matching_tools": matching,
                "missing_tools": [],
                "justification": "An existing tool adds up the figures." if matching else "Done natively.",
            }
        )


# -- 4. the orchestra ---------------------------------------------------------------------------------
def orchestra_task(site: TestSite) -> str:
    return (
        "Where was the lead engineer of the Aurora project born? Also order the Deluxe kit for Ada Lovelace with "
        f"gift wrap on the order form at {site.url('/form.html')} and report the order number, and give the "
        "total Q3 sales in the attached spreadsheet."
    )


def original_task(messages: list[dict]) -> str:
    return task_of(messages).split("\nAttached files (absolute paths): ")[0]


class Conductor:
    """The planner's model: plans with todo, calls the researcher, the browser agent and the analyzer
    in ONE step, checks the analyzer's sum in the Python sandbox, asks the tool manager for a tool,
    and finishes with an answer made of what the team reported (read from its history)."""

    def __init__(self) -> None:
        self.model = ScriptedModel(self)
        self.offered: list[set[str]] = []

    @staticmethod
    def result(history, tool: str) -> str:
        return next(r for name, _, r in history if name == tool)

    def __call__(self, messages, tools):
        offered = {t["function"]["name"] for t in tools}
        self.offered.append(offered)
        history = history_calls(messages)
        called = [name for name, _, _ in history]
        task = original_task(messages)
        if "todo" not in called:
            steps = [
                {"description": "find where the Aurora lead engineer was born", "priority": "high"},
                {"description": "place the order on the form"},
                {"description": "total the Q3 sales of the spreadsheet"},
            ]
            return call("todo", action="add", steps=steps)
        if "deep_researcher_agent" not in called:
            files = task_of(messages).split("Attached files (absolute paths): ")[1].split(", ")
            return [
                call("deep_researcher_agent", task=task),  # the original task, as it is
                call("browser_use_agent", task="Place the order on the form and report the order number."),
                call("deep_analyzer_agent", task="Total the Q3 sales.", files=files),
            ]
        born = re.search(r"born in (\w+)", self.result(history, "deep_researcher_agent")).group(1)
        order = re.search(r"order #(\d+)", self.result(history, "browser_use_agent")).group(1)
        analysis = self.result(history, "deep_analyzer_agent")
        total = re.search(r"Total Q3 sales: (\d+)", analysis).group(1)
        if "python_run_python" not in called:
            terms = re.search(r"Sum of (.*?)\.", analysis).group(1)
            code = "print(" + " + ".join(re.findall(r"\d+", terms)) + ")"
            return [
                call("python_run_python", code=code),
                call("todo", action="complete", step_id=1, result=f"born in {born}"),
                call("todo", action="complete", step_id=2, result=f"order #{order}"),
            ]
        checked = re.search(r"stdout: (\S+)", self.result(history, "python_run_python"))
        checked = checked.group(1) if checked else "?"
        if "tool_manager_agent" not in called:
            return [
                call("todo", action="complete", step_id=3, result=f"total {total}, checked: {checked}"),
                call("tool_manager_agent", task="A tool that adds up the Q3 sales figures of a spreadsheet."),
            ]
        return call(
            "done",
            success=checked == total,
            text=f"The lead engineer was born in {born}. Order #{order} is placed. "
            f"Total Q3 sales: {total} (checked in Python: {checked}).",
        )


def make_team(ws, site, corpus_folder: Path, planner_model: str, filler: FormFiller | None = None):
    """The orchestra with a scripted model per role; returns (planner, scripts)."""
    scripts = {
        "researcher": Researcher(),
        "browser": filler or FormFiller("Ada Lovelace", "Deluxe"),
        "analyzer": Analyst(),
        "tool_manager": ToolManagerStages(),
    }
    planner = ws.orchestra(
        model=planner_model,
        models={role: s.model.name for role, s in scripts.items()},
        engines=[f"corpus:{corpus_folder}"],
        researcher={"max_rounds": 3, "search_timeout": 10},
        tool_manager=True,
    )
    return planner, scripts


@pytest.fixture(scope="module")
def corpus_folder(tmp_path_factory):
    return sitekit.corpus(tmp_path_factory.mktemp("corpus") / "notes", n=30)


@needs_chromium
def test_the_orchestra_delegates_concurrently_and_combines_the_results(ws, site, corpus_folder, tmp_path):
    @ws.tools.tool
    def add_up_sales(figures: list[float]) -> float:
        """Add up sales figures (e.g. the Q3 sales of a spreadsheet) into a total."""
        return float(sum(figures))

    xlsx = df.xlsx(tmp_path / "attached", SALES, name="sales.xlsx")
    conductor = Conductor()
    planner, scripts = make_team(ws, site, corpus_folder, conductor.model.name)
    assert isinstance(planner, Agent) and planner.sub_agents == TEAM and planner.todo
    assert {n: ws.agents.get(n).metadata["kind"] for n in [*TEAM, "orchestra"]} == {
        "deep_researcher": "researcher",
        "browser_use": "browser_use",
        "deep_analyzer": "analyzer",
        "tool_manager": "evolution",
        "orchestra": "orchestra",
    }
    task = orchestra_task(site)
    result = planner.run_sync(task, files=[str(xlsx)])

    assert result.success, result.trajectory.text()
    assert f"born in {BIRTHPLACE}" in result.answer and f"Order #{FIRST_ORDER}" in result.answer
    assert f"Total Q3 sales: {SALES_TOTAL} (checked in Python: {SALES_TOTAL})" in result.answer
    assert {"deep_researcher_agent", "browser_use_agent", "deep_analyzer_agent", "tool_manager_agent"} <= (
        conductor.offered[0]
    )
    assert {"python_run_python", "todo", "done"} <= conductor.offered[0]
    assert [n for n in conductor.offered[0] if n.startswith("browser_")] == ["browser_use_agent"]

    # the three nested runs hang under the planner's run, with their own models, and ran concurrently
    children = {row["agent"]: row for row in ws.db.runs(parent_id=result.run_id)}
    assert set(children) == set(TEAM)
    assert all(row["parent_id"] == result.run_id and row["status"] == "success" for row in children.values()), children
    assert {a: children[a]["model"] for a in ("deep_researcher", "browser_use", "deep_analyzer")} == {
        "deep_researcher": scripts["researcher"].model.name,
        "browser_use": scripts["browser"].model.name,
        "deep_analyzer": scripts["analyzer"].model.name,
    }
    trio = [children[a] for a in ("deep_researcher", "browser_use", "deep_analyzer")]
    assert max(r["started"] for r in trio) < min(r["ended"] for r in trio), [
        (r["agent"], r["started"], r["ended"]) for r in trio
    ]
    steps = result.trajectory.steps
    assert [a["name"] for a in steps[1].actions] == [
        "deep_researcher_agent",
        "browser_use_agent",
        "deep_analyzer_agent",
    ]
    assert children["tool_manager"]["started"] > max(r["ended"] for r in trio)  # a later step

    # every sub-agent got the ORIGINAL task (with the planner's instruction after it)
    assert children["deep_researcher"]["task"] == task
    for agent in ("browser_use", "deep_analyzer", "tool_manager"):
        assert children[agent]["task"].startswith(task + "\n\nInstruction from orchestra: "), agent

    # the researcher read the corpus (two hops), the browser filled the form, the analyzer read the attachment
    research = ws.trajectory(children["deep_researcher"]["id"])
    read = [a["arguments"]["url"] for s in research.steps for a in s.actions if a["name"] == "read"]
    assert any(u.endswith("/aurora-project.md") for u in read) and any(u.endswith("/mira-okafor.md") for u in read)
    assert f"{LEAD_ENGINEER} was born in {BIRTHPLACE}" in research.answer
    assert [parse_qs(b) for b in site.posted] == [{"name": ["Ada Lovelace"], "plan": ["Deluxe"], "gift": ["yes"]}]
    analysis = ws.trajectory(children["deep_analyzer"]["id"])
    mdify = analysis.steps[0].actions
    assert [a["name"] for a in mdify] == ["mdify"] and mdify[0]["arguments"] == {"file": str(xlsx)}
    assert mdify[0]["observation"].startswith("sales.xlsx: ")
    assert any("| North | 120 |" in e for e in scripts["analyzer"].excerpts)
    assert f"Total Q3 sales: {SALES_TOTAL} (sales.xlsx, sheet 'Q3')" in analysis.answer

    # the python check, the todo list, the tool manager
    python = steps[2].actions[0]
    assert (
        python["name"] == "python_run_python" and python["ok"] and python["observation"].split() == ["stdout:", "200"]
    )
    todo = (ws.path / "runs" / result.run_id / "todo.md").read_text()
    assert "- [x] 1. find where the Aurora lead engineer was born" in todo and f"result: born in {BIRTHPLACE}" in todo
    assert f"- [x] 2. place the order on the form (priority: medium) — result: order #{FIRST_ORDER}" in todo
    assert f"- [x] 3. total the Q3 sales of the spreadsheet (priority: medium) — result: total {SALES_TOTAL}" in todo
    assert scripts["tool_manager"].stages == ["assess_tool_need"]
    assert "reused: add_up_sales" in children["tool_manager"]["answer"]
    assert ws.tools.get("add_up_sales").version == 1 and ws.envs.sessions() == []


# -- 6. after a restart --------------------------------------------------------------------------------
@needs_chromium
def test_after_a_restart_the_orchestra_is_rebuilt_from_its_cards(tmp_path, site, corpus_folder):
    path = tmp_path / "ws"
    filler = FormFiller("Grace Hopper", "Standard")

    def delegate(messages, tools):
        seen = history_calls(messages)
        if not seen:
            return call("browser_use_agent", task=original_task(messages))
        return call("done", success="confirmed" in seen[-1][2], text=seen[-1][2])

    planner_script = ScriptedModel(delegate)
    with tea_notebook.Workspace(path, embedder="hashing") as first:
        site.allow(first)  # kept in the workspace: the restarted one below has it too
        make_team(first, site, corpus_folder, planner_script.name, filler=filler)

    with tea_notebook.Workspace(path, embedder="hashing") as ws2:
        assert len(ws2.live_agents) == 0
        planner = kinds.build(ws2, "orchestra")
        assert isinstance(planner, Agent) and planner.sub_agents == TEAM and planner.todo
        assert planner.envs == ["python"] and planner.model == planner_script.name
        researcher = kinds.build(ws2, "deep_researcher")
        assert isinstance(researcher, DeepResearcher) and researcher.max_rounds == 3
        [engine] = researcher.engines
        assert isinstance(engine, CorpusSearch) and engine.folder == corpus_folder.resolve()
        assert isinstance(kinds.build(ws2, "deep_analyzer"), DeepAnalyzer)

        task = f"Order the Standard kit for Grace Hopper with gift wrap on the order form at {site.url('/form.html')}."
        result = planner.run_sync(task)
        assert result.success, (result.status, result.error, result.answer)
        [child] = ws2.db.runs(parent_id=result.run_id)
        assert (child["agent"], child["status"], child["model"]) == ("browser_use", "success", filler.model.name)
        assert child["task"] == task
        assert f"order #{FIRST_ORDER} confirmed for Standard" in result.answer
        assert [parse_qs(b) for b in site.posted] == [{"name": ["Grace Hopper"], "plan": ["Standard"], "gift": ["yes"]}]
        assert filler.states and "browser_use" not in ws2.live_agents  # the runner came from the card


# -- 5. %%agent shortcuts -----------------------------------------------------------------------------
@pytest.fixture
def shell_ws(ip, tmp_path, monkeypatch):
    """A fresh workspace made current in the in-process shell (as in test_magics_shell)."""
    path = tmp_path / "ws"
    switched = magics_workspace(ip, tmp_path, monkeypatch, workspace_path=str(path))
    assert switched.path == path.resolve()
    yield switched
    assert not (tmp_path / ".tea").exists()


@pytest.fixture
def local_web(monkeypatch, site):
    """The "web" engine answers from the local test site's /search over HTTP (no internet in tests);
    everything after the search (reading the pages over HTTP) is the researcher's own."""
    queries: list[str] = []

    def search(self, query: str, k: int = 5) -> list[Hit]:
        queries.append(query)
        with urllib.request.urlopen(site.url("/search?q=" + urllib.parse.quote(query)), timeout=5) as reply:
            page = reply.read().decode()
        found = re.findall(r'<li><a href="([^"]+)">([^<]*)</a> - ([^<]*)</li>', page)
        return [Hit(site.url(p), html.unescape(t), html.unescape(s), self.name) for p, t, s in found[:k]]

    monkeypatch.setattr(WebSearch, "search", search)
    return queries


def test_agent_magic_researcher_shortcut(ip, shell_ws, local_web, site):
    site.allow(shell_ws)
    from IPython.core.error import UsageError

    researcher = Researcher()
    task = "Where was the lead engineer of the Aurora project born?"
    result = ip.run_cell_magic("agent", f"researcher --model {researcher.model.name} --quiet", task)
    assert shell_ws.agents.get("deep_researcher").metadata["kind"] == "researcher"
    assert shell_ws.agents.get("deep_researcher").metadata["config"]["engines"] == ["web"]
    assert result.agent == "deep_researcher" and result.success, (result.status, result.answer)
    assert f"{LEAD_ENGINEER} was born in {BIRTHPLACE}" in result.answer
    assert local_web == ["Aurora project lead engineer", f"{LEAD_ENGINEER} born"]  # two rounds
    assert "/wiki/mira-okafor.html" in site.hits and researcher.stages[-1] == "report"

    with pytest.raises(UsageError) as info:
        ip.run_cell_magic("agent", f"deep_researcher --kind analyzer --model {researcher.model.name} --quiet", task)
    assert "registered with kind 'researcher', not 'analyzer'" in str(info.value)
    assert shell_ws.agents.get("deep_researcher").metadata["kind"] == "researcher"  # unchanged


def test_agent_magic_analyzer_shortcut_with_files(ip, shell_ws, tmp_path):
    from IPython.core.error import UsageError

    analyst = Analyst()
    xlsx = df.xlsx(tmp_path / "files", SALES, name="sales.xlsx")
    result = ip.run_cell_magic(
        "agent", f"analyzer --file {xlsx} --model {analyst.model.name} --quiet", "What were the total Q3 sales?"
    )
    assert shell_ws.agents.get("deep_analyzer").metadata["kind"] == "analyzer"
    assert result.agent == "deep_analyzer" and result.success, (result.status, result.answer)
    assert f"Total Q3 sales: {SALES_TOTAL} (sales.xlsx, sheet 'Q3')" in result.answer
    assert shell_ws.db.run_row(result.run_id)["parent_id"] is None

    missing = tmp_path / "files" / "nowhere.xlsx"
    runs = len(shell_ws.runs())
    with pytest.raises(UsageError, match=r"--file: no such file .*nowhere\.xlsx"):
        ip.run_cell_magic("agent", f"analyzer --file {missing} --model {analyst.model.name} --quiet", "Total?")
    assert len(shell_ws.runs()) == runs  # nothing ran


def test_agent_magic_orchestra_shortcut(ip, shell_ws):
    offered: list[set[str]] = []

    def plan(messages, tools):
        offered.append({t["function"]["name"] for t in tools})
        return call("done", success=True, text="the team is here")

    script = ScriptedModel(plan)
    result = ip.run_cell_magic("agent", f"orchestra --model {script.name} --quiet", "Who is on the team?")
    assert result.agent == "orchestra" and result.success and result.model == script.name
    assert {n: shell_ws.agents.get(n).metadata["kind"] for n in ["orchestra", *TEAM]} == {
        "orchestra": "orchestra",
        "deep_researcher": "researcher",
        "browser_use": "browser_use",
        "deep_analyzer": "analyzer",
        "tool_manager": "evolution",
    }
    assert {f"{n}_agent" for n in TEAM} | {"todo", "done", "python_run_python"} <= offered[0]
    assert [n for n in offered[0] if n.startswith("browser_")] == ["browser_use_agent"]  # it does not browse itself
