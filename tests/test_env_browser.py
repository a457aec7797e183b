"""The browser environment: a real headless Chromium driven by Playwright against pages served by a
local HTTP server, always through ECP (``ws.envs.invoke``) or an agent run (E2T tools).

Most tests share one browser session (a module-scoped workspace); the ones that crash the browser or
run an agent use their own workspace (the ``ws`` fixture)."""

from __future__ import annotations

import html
import http.server
import os
import re
import signal
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from loopback_http import QuietHandler, attachment, serve, stop
from loopback_http import free_port as closed_port

import tea_notebook
from tea_notebook import _sync
from tea_notebook.envs.browser import PNG_SIGNATURE, Browser, find_chromium
from tea_notebook.models.offline import ScriptedModel, call

TIMEOUT = 5.0
# skipped without a Chromium, except in CI (TEA_REQUIRE_BROWSER=1), where they fail instead
needs_chromium = pytest.mark.skipif(
    find_chromium() is None and not os.environ.get("TEA_REQUIRE_BROWSER"),
    reason="no Chromium found: `apt-get install chromium` or `playwright install chromium`",
)


# -- the site ---------------------------------------------------------------------------------------
def tiny_pdf(text: str = "Tea leaves in a PDF") -> bytes:
    """A minimal valid one-page PDF with one line of text (xref offsets computed)."""
    stream = f"BT /F1 18 Tf 20 60 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 144] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


PDF = tiny_pdf()
CSV = b"tea,price\nsencha,12\nassam,9\n"

INDEX = """<!doctype html><html><head><title>Tea Garden</title></head><body>
<h1>Tea Garden</h1>
<p>Green tea is <strong>steamed</strong>; black tea is
   oxidised.</p>
<h2>Links</h2>
<ul>
  <li><a href="/form">The order form</a></li>
  <li><a href="/long">A long page</a></li>
  <li><a href="/tabs">Tabs</a>
    <ol><li>nested one</li><li>nested two</li></ol>
  </li>
  <li><a href="/doc.pdf">The tea PDF</a></li>
</ul>
<table><tr><th>Tea</th><th>Origin</th></tr><tr><td>Sencha</td><td>Japan</td></tr>
<tr><td>Assam</td><td>India</td></tr></table>
<div style="display:none">secret hidden text</div>
<script>var notShown = "script text";</script>
</body></html>"""

FORM = """<!doctype html><title>Order</title><h1>Order form</h1>
<form action="/submitted" method="get">
  <label for="name">Your name</label> <input id="name" name="name" placeholder="Name here">
  <button type="submit">Send order</button>
</form>"""

LONG = (
    "<!doctype html><title>Long page</title><h1>Long</h1>"
    + "".join(f"<p>Paragraph {i} about tea, with enough words to fill a line or two.</p>" for i in range(300))
    + '<a id="bottom" href="/">Back home</a>'
)

TABS = """<!doctype html><title>Tabs</title><h1>Tabs</h1>
<a id="blank" href="/page2" target="_blank">Open page two</a>
<button id="pop" onclick="window.open('/page3')">Pop up page three</button>"""

PAGES = {
    "/": INDEX,
    "/form": FORM,
    "/long": LONG,
    "/tabs": TABS,
    "/page2": "<!doctype html><title>Page Two</title><h1>Page two</h1>",
    "/page3": "<!doctype html><title>Page Three</title><h1>Page three</h1>",
}


class Site(http.server.ThreadingHTTPServer):
    """The test site; ``release`` ends the hung page's wait."""

    daemon_threads = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.release = threading.Event()


class Handler(QuietHandler):
    server: Site

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlparse(self.path)
        if url.path == "/hang":
            self.server.release.wait(60)
            body, ctype = b"<title>Late</title>finally", "text/html"
        elif url.path == "/doc.pdf":
            body, ctype = PDF, "application/pdf"
        elif url.path == "/prices.csv":
            self.reply(CSV, "text/csv", headers=attachment("prices.csv"))
            return
        elif url.path == "/submitted":
            name = html.escape(parse_qs(url.query).get("name", [""])[0])
            body, ctype = f"<title>Thanks</title><h1 id='greeting'>Thanks, {name}</h1>".encode(), "text/html"
        elif url.path in PAGES:
            body, ctype = PAGES[url.path].encode(), "text/html; charset=utf-8"
        else:
            self.send_error(404)
            return
        try:
            self.reply(body, ctype)
        except OSError:
            pass  # the browser gave up (the hung page)


@pytest.fixture(scope="module")
def site():
    server = serve(Handler, Site)
    yield f"http://127.0.0.1:{server.server_port}"
    server.release.set()
    stop(server)


def allow_site(workspace, site: str) -> None:
    """The test site is on loopback: the egress policy lets it through only when named with its port."""
    workspace.egress.allow(urlparse(site).netloc)


@pytest.fixture(scope="module")
def bws(tmp_path_factory, site):
    """One workspace with one browser session shared by the tests of this module."""
    workspace = tea_notebook.Workspace(tmp_path_factory.mktemp("browser") / "ws", embedder="hashing")
    allow_site(workspace, site)
    workspace.envs.add(Browser, timeout=TIMEOUT)
    yield workspace
    workspace.envs.release()
    assert workspace.envs.sessions() == []
    workspace.close()


def act(workspace, action: str, **args):
    return workspace.envs.invoke("browser", action, args)


def ok(workspace, action: str, **args) -> str:
    result = act(workspace, action, **args)
    assert result.ok, f"{action}({args}) failed: {result.error}"
    return result.value


def state(workspace) -> str:
    return workspace.envs.state("browser")


def current_tab(workspace) -> int:
    line = next(line for line in state(workspace).splitlines() if line.endswith("(current)"))
    return int(re.search(r"\[(\d+)\]", line).group(1))


def session(workspace) -> Browser:
    env = workspace.envs.runtime("browser").session()
    assert env is not None
    return env


# -- no browser needed ------------------------------------------------------------------------------
def test_record_schema_and_no_side_effects(tmp_path, ws):
    rec = Browser.record()
    assert (rec.name, rec.category) == ("browser", "web")
    names = [a.name for a in rec.actions]
    assert names == [
        "goto",
        "click",
        "input",
        "scroll",
        "back",
        "open_tab",
        "switch_tab",
        "close_tab",
        "extract",
        "screenshot",
    ]
    scroll = rec.action("scroll").parameters["properties"]
    assert scroll["direction"]["enum"] == ["down", "up"] and "description" in scroll["amount"]
    assert rec.action("goto").parameters["required"] == ["url"]
    assert "selector" in rec.rules and rec.rules
    env = Browser(tmp_path / "run", timeout=3)
    assert env.action_timeout == 3 and Browser.action_timeout == 10
    assert not (tmp_path / "run").exists() and env.state() and env.vision() is None
    with pytest.raises(TypeError):
        ws.envs.add(Browser, colour="blue")
    rec = ws.envs.ensure("browser")  # the built-in, added by name (nothing starts yet)
    assert rec.category == "web" and ws.envs.runtime("browser").cls is Browser and ws.envs.sessions() == []


def test_a_missing_executable_is_a_clear_error(ws):
    ws.envs.add(Browser, timeout=TIMEOUT, executable="/nonexistent/chromium")
    result = ws.envs.invoke("browser", "goto", {"url": "about:blank"})
    assert not result.ok and result.error["type"] == "EnvironmentFailure"
    assert "apt-get install chromium" in result.error["message"]
    assert "playwright install chromium" in result.error["message"]
    assert ws.envs.sessions() == []


# -- the shared session -----------------------------------------------------------------------------
@needs_chromium
def test_goto_and_extract_markdown(bws, site):
    assert "not started" in state(bws)
    out = ok(bws, "goto", url=site + "/")
    assert "Tea Garden" in out and site in out
    md = ok(bws, "extract")
    assert md.startswith("# Tea Garden\nURL: ")
    assert "\n# Tea Garden\n" in md and "\n## Links\n" in md
    assert "Green tea is **steamed**; black tea is oxidised." in md
    assert f"- [The order form]({site}/form)" in md
    assert "1. nested one" in md and "2. nested two" in md
    assert "| Tea | Origin |\n| --- | --- |\n| Sencha | Japan |" in md
    assert "secret hidden text" not in md and "script text" not in md
    part = ok(bws, "extract", selector="table")
    assert part.startswith("| Tea | Origin |") and "Links" not in part
    paged = ok(bws, "extract", max_chars=200)
    assert "call extract with start=200" in paged
    assert "no element matches" in act(bws, "extract", selector="#nowhere").error["message"]

    text = state(bws)
    assert "Tabs (1)" in text and "Tea Garden" in text and "(current)" in text
    assert "href='/form'" in text and "Interactive elements" in text and len(text) <= 4000


@needs_chromium
def test_form_input_and_click_by_text(bws, site):
    ok(bws, "goto", url=site + "/form")
    assert "#name" in state(bws)
    out = ok(bws, "input", selector="#name", text="Ada")
    assert "Ada" in out
    out = ok(bws, "click", selector="Send order")  # visible text, not CSS
    assert "/submitted?name=Ada" in out
    assert "Thanks, Ada" in ok(bws, "extract")

    ok(bws, "goto", url=site + "/form")
    out = ok(bws, "input", selector="Name here", text="Grace Hopper", press_enter=True)  # by placeholder
    assert "pressed Enter" in out and "name=Grace+Hopper" in out
    assert "Thanks, Grace Hopper" in ok(bws, "extract", selector="#greeting")


@needs_chromium
def test_scroll_moves_the_page(bws, site):
    ok(bws, "goto", url=site + "/long")
    assert "Scroll: y=0 of " in state(bws)
    out = ok(bws, "scroll", direction="down")
    assert "Scrolled the page down by 720 px: now at y=720" in out
    assert "Scroll: y=720 of " in state(bws)
    out = ok(bws, "scroll", direction="up", amount=300, unit="pixels")
    assert "now at y=420" in out
    ok(bws, "scroll", direction="up", amount=5)
    assert "Cannot scroll up" in ok(bws, "scroll", direction="up")
    bad = act(bws, "scroll", direction="sideways")
    assert not bad.ok and bad.error["type"] == "ValidationError"


@needs_chromium
def test_back(bws, site):
    ok(bws, "goto", url=site + "/")
    assert "/form" in ok(bws, "click", selector="The order form")
    out = ok(bws, "back")
    assert out.startswith(f"Went back to {site}/") and "Tea Garden" in out


@needs_chromium
def test_tabs_from_links_and_window_open(bws, site):
    ok(bws, "goto", url=site + "/tabs")
    home = current_tab(bws)
    out = ok(bws, "click", selector="#blank")  # target=_blank
    assert "opened a new tab" in out and "/page2" in out
    second = current_tab(bws)
    assert second != home and "Page Two" in state(bws)
    assert "Page two" in ok(bws, "extract")

    assert "/tabs" in ok(bws, "switch_tab", tab_id=home)
    out = ok(bws, "click", selector="Pop up page three")  # window.open from a button
    assert "opened a new tab" in out and "/page3" in out
    third = current_tab(bws)
    assert len({home, second, third}) == 3
    listing = state(bws)
    assert all(f"[{t}]" in listing for t in (home, second, third))

    out = ok(bws, "close_tab", tab_id=third)
    assert f"Closed tab [{third}]" in out and f"[{third}]" not in state(bws).split("Current page")[0]
    missing = act(bws, "switch_tab", tab_id=999)
    assert not missing.ok and "no tab 999" in missing.error["message"]
    out = ok(bws, "open_tab", url=site + "/page3")
    fourth = current_tab(bws)
    assert fourth not in (home, second, third) and "Page Three" in out
    for tab in (second, fourth):
        ok(bws, "close_tab", tab_id=tab)
    assert current_tab(bws) == home and "Tabs (1)" in state(bws)


@needs_chromium
def test_pdf_is_saved_to_the_run_folder(bws, site):
    out = ok(bws, "goto", url=site + "/doc.pdf")
    assert "is a PDF" in out and f"{len(PDF):,} bytes" in out
    saved = Path(re.search(r"saved to (\S+\.pdf)", out).group(1))
    assert saved.parent == session(bws).folder / "downloads"
    assert saved.read_bytes() == PDF
    assert ("install pypdf" in out) or ("Tea leaves in a PDF" in out)
    assert "PDF" in ok(bws, "extract")

    ok(bws, "goto", url=site + "/")
    out = ok(bws, "click", selector="The tea PDF")  # a link to a PDF
    assert "is a PDF" in out and str(saved.parent) in out


@needs_chromium
def test_downloads_are_saved(bws, site):
    out = ok(bws, "goto", url=site + "/prices.csv")  # Content-Disposition: attachment
    assert f"was downloaded ({len(CSV)} bytes)" in out
    path = Path(re.search(r"saved to (\S+)", out).group(1))
    assert path == session(bws).folder / "downloads" / "prices.csv" and path.read_bytes() == CSV


@needs_chromium
def test_screenshot_and_vision(bws, site):
    ok(bws, "goto", url=site + "/")
    png = bws.envs.vision("browser")
    assert png is not None and png.startswith(PNG_SIGNATURE)
    out = ok(bws, "screenshot")
    assert "1280x720 PNG" in out
    path = Path(re.search(r"saved to (\S+\.png)", out).group(1))
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    assert bws.envs.vision("browser") == path.read_bytes()


@needs_chromium
def test_unreachable_host_names_the_url(bws):
    port = closed_port()
    url = f"http://127.0.0.1:{port}/"
    refused = act(bws, "goto", url=url)  # loopback, not allowed: the egress policy refuses it
    assert not refused.ok and url in refused.error["message"]
    assert "egress rule 'loopback'" in refused.error["message"]
    assert f"ws.egress.allow('127.0.0.1:{port}')" in refused.error["message"]  # says how to allow it
    bws.egress.allow(f"127.0.0.1:{port}")
    try:
        start = time.monotonic()
        result = act(bws, "goto", url=url)
        assert time.monotonic() - start < TIMEOUT + 2
    finally:
        bws.egress.remove(f"127.0.0.1:{port}")
    assert not result.ok and result.error["type"] == "EnvironmentFailure"
    assert url in result.error["message"] and "connection refused" in result.error["message"]


@needs_chromium
def test_missing_selector_fails_within_the_time_limit(bws, site):
    ok(bws, "goto", url=site + "/form")
    start = time.monotonic()
    result = act(bws, "click", selector="#does-not-exist")
    elapsed = time.monotonic() - start
    assert not result.ok and elapsed < TIMEOUT + 2
    assert "no element matches '#does-not-exist'" in result.error["message"]
    result = act(bws, "input", selector="No such field", text="x")
    assert not result.ok and "no element matches" in result.error["message"]


@needs_chromium
def test_hung_page_times_out_and_the_browser_stays_usable(bws, site):
    start = time.monotonic()
    result = act(bws, "goto", url=site + "/hang")
    elapsed = time.monotonic() - start
    assert not result.ok and elapsed < TIMEOUT + 2, (elapsed, result.error)
    assert f"{site}/hang" in result.error["message"] and "did not load" in result.error["message"]
    start = time.monotonic()
    assert "Tea Garden" in ok(bws, "goto", url=site + "/")
    assert time.monotonic() - start < 2


@needs_chromium
def test_reset_stop_and_state(bws, site):
    ok(bws, "goto", url=site + "/page2")
    ok(bws, "open_tab", url=site + "/page3")
    env = session(bws)
    first = env.browser_pid
    assert bws.envs.reset("browser") == "browser was reset"
    assert env.browser_pid not in (None, first) and "Tabs (1)" in state(bws) and "about:blank" in state(bws)
    ok(bws, "goto", url=site + "/page2")
    bws.envs.release()
    assert bws.envs.sessions() == [] and "not started" in state(bws)
    _sync.run_sync(env.stop())  # a second stop is harmless
    assert env.browser_pid is None
    assert "Page Two" in ok(bws, "goto", url=site + "/page2")  # a new session starts on demand


# -- crashes and runs (own workspaces) --------------------------------------------------------------
def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@needs_chromium
def test_a_crashed_or_closed_browser_restarts_on_the_next_action(ws, site):
    allow_site(ws, site)
    ws.envs.add(Browser, timeout=TIMEOUT)
    try:
        ok(ws, "goto", url=site + "/page2")
        env = session(ws)
        pid = env.browser_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        out = ok(ws, "goto", url=site + "/page3")
        assert "a fresh one was started" in out and "Page Three" in out
        assert env.browser_pid not in (None, pid)

        _sync.run_sync(env._context.close())  # closed behind the session's back
        out = ok(ws, "extract")
        assert "a fresh one was started" in out

        pid = env.browser_pid
        env.kill()  # the synchronous last resort
        deadline = time.monotonic() + 5
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(pid)
    finally:
        ws.envs.release()
    assert ws.envs.sessions() == []


@needs_chromium
def test_an_agent_browses_through_e2t_tools(ws, site):
    allow_site(ws, site)
    offered: list[set[str]] = []

    def brain(messages, tools):
        offered.append({t["function"]["name"] for t in tools})
        step = len(offered)
        if step == 1:
            return call("browser_goto", url=site + "/")
        if step == 2:
            prompt = next(m["content"] for m in messages if m["role"] == "user")
            assert "Tea Garden" in prompt  # the browser's state is in the prompt
            return call("browser_extract")
        return call("done", success=True, text="Sencha comes from Japan")

    script = ScriptedModel(brain)
    result = ws.agent("web", model=script.name, envs=["browser"]).run_sync("Where does Sencha come from?")
    assert result.success, result.error
    assert {"browser_goto", "browser_click", "browser_extract", "browser_open_tab"} <= offered[0]
    steps = result.trajectory.steps
    assert "Tea Garden" in steps[0].actions[0]["observation"]
    assert "| Sencha | Japan |" in steps[1].actions[0]["observation"]
    assert ws.envs.sessions() == []
