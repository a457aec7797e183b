"""Hostile pages against the browser (issue 31, F2 and F4), from the attacker's side.

A page's 1.5 MB gzip download became 1.5 GiB in the browser's downloads folder and as much again in
the run folder. Now one download, all the downloads of a browser session and the run folder's disk
quota each bound what a page can put on disk: past a limit the download is stopped, its partial file
deleted, and the refusal is both the observation's note and an event of the run. A real Chromium
fetches from a real loopback server that sends a gzip-encoded body (Chromium decodes it).

A page that opened 300 popups, or looped forever, wedged the environment for the rest of the run.
Now a page opens a few windows at most, tabs past ``max_tabs`` are closed at once (with the tab that
kept opening them), and a tab that stops answering is closed and replaced before the next action:
every later action answers within a bound.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import zlib
from pathlib import Path
from urllib.parse import urlparse

import pytest
from loopback_http import QuietHandler, attachment, serve, stop

from tea_notebook.egress import EgressPolicy
from tea_notebook.envs.base import EnvironmentFailure
from tea_notebook.envs.browser import Browser, find_chromium

BOMB_MB = 256  # what the gzip body expands to; a few hundred KB on the wire
LIMIT = 15.0  # the action time limit of these browsers
RESPONSIVE = LIMIT / 2  # what an action may take after a hostile page (a wedged one takes the whole limit)
STORM = "for (let i = 0; i < 300; i++) {{ {} }}"
PAGES = {
    "/popups": "<html><body><h1>popups</h1><script>" + STORM.format("window.open('/child?' + i);") + "</script>",
    "/anchors": (  # links to new tabs, clicked by the page itself: past window.open
        "<html><body><h1>anchors</h1><script>"
        + STORM.format(
            "const a = document.createElement('a'); a.href = '/child?' + i; a.target = '_blank'; "
            "document.body.appendChild(a); a.click();"
        )
        + "</script>"
    ),
    "/forms": (  # forms submitted to new windows: no click, no window.open
        "<html><body><h1>forms</h1><script>"
        + STORM.format(
            "const f = document.createElement('form'); f.action = '/child'; f.target = 'w' + i; "
            "document.body.appendChild(f); f.submit();"
        )
        + "</script>"
    ),
    "/loop": "<html><body><h1>loop</h1><script>setTimeout(() => { while (true) {} }, 100);</script>",
    "/home": "<html><body><h1>home page</h1></body></html>",
}
PAGES = {path: html.encode() for path, html in PAGES.items()}


def gzip_bomb(megabytes: int) -> bytes:
    """``megabytes`` MB of zeros, gzip-encoded (as a Content-Encoding: gzip body)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip wrapper
    block = b"\0" * 2**20
    return b"".join(packer.compress(block) for _ in range(megabytes)) + packer.flush()


class Site:
    """A loopback server: ``/bomb`` (a gzip download that expands past the limits), ``/file/N`` (an
    attachment of 100 KB) and a page linking them."""

    def __init__(self) -> None:
        bomb = gzip_bomb(BOMB_MB)
        self.bomb_wire = len(bomb)

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == "/bomb":
                    headers = {"Content-Encoding": "gzip", **attachment("bomb.bin")}
                    self.reply(bomb, "application/octet-stream", headers=headers)
                elif self.path.startswith("/file/"):
                    name = self.path.rsplit("/", 1)[-1]
                    self.reply(os.urandom(100 * 1024), "application/octet-stream", headers=attachment(f"{name}.bin"))
                elif self.path in PAGES:
                    self.reply(PAGES[self.path], "text/html")
                elif self.path.startswith("/child"):
                    self.reply(b"<html><body><p>a child window</p></body></html>", "text/html")
                else:
                    self.reply(b"<html><body><h1>downloads</h1></body></html>", "text/html")

        self.server = serve(Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def policy(self) -> EgressPolicy:
        return EgressPolicy(allow=[urlparse(self.base).netloc])


@pytest.fixture(scope="module")
def site():
    if find_chromium() is None:
        if os.environ.get("TEA_REQUIRE_BROWSER") == "1":
            pytest.fail("no Chromium found (apt-get install chromium)")
        pytest.skip("no Chromium found (apt-get install chromium)")
    s = Site()
    yield s
    stop(s.server)


class Notices:
    """A run's notice hook: what the browser reported as run events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def notice(self, kind: str, data: dict) -> None:
        self.events.append((kind, data))


def browser(folder: Path, site: Site, **options) -> tuple[Browser, Notices]:
    env = Browser(folder, timeout=LIMIT, **options)
    env.egress = site.policy()
    notices = Notices()
    env.context = notices  # type: ignore[assignment] - only .notice is used
    return env, notices


async def act(env: Browser, action: str, **args) -> str:
    try:
        return await env.call(action, args)
    except EnvironmentFailure as exc:
        return f"FAILED: {exc}"


def files_in(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.iterdir()} if folder.is_dir() else {}


def test_a_gzip_bomb_download_is_stopped_at_the_limit_and_deleted(tmp_path, site):
    assert site.bomb_wire < 2 * 2**20  # a small body on the wire …
    env, notices = browser(tmp_path / "run", site, download_mb=8)
    peak = [0]
    watching = threading.Event()

    def watch(private: Path) -> None:  # … that must never grow far past the limit on disk
        while not watching.is_set():
            peak[0] = max(peak[0], sum(files_in(private).values()))
            time.sleep(0.01)

    async def attack():
        await env.start()
        private = env._box.downloads  # noqa: SLF001 - the browser's own downloads folder, watched from outside
        watcher = threading.Thread(target=watch, args=(private,), daemon=True)
        watcher.start()
        try:
            seen = await act(env, "goto", url=site.base + "/bomb")
            after = await act(env, "goto", url=site.base + "/")  # the browser still works after it
            left = files_in(private)
            return seen + "\n" + after, left, await act(env, "extract")
        finally:
            watching.set()
            await env.stop()

    seen, left, page = asyncio.run(attack())
    assert "was stopped and deleted" in seen and "limit of 8 MB for one download" in seen, seen
    assert "Nothing of it was saved" in seen
    assert left == {}, f"partial files left in the browser's downloads folder: {left}"
    assert files_in(tmp_path / "run" / "downloads") == {}, "nothing of the bomb reaches the run folder"
    assert peak[0] < BOMB_MB * 2**20 / 2, f"the download reached {peak[0]:,} bytes on disk before it was stopped"
    assert "downloads" in page
    events = [data["message"] for kind, data in notices.events if kind == "notice"]
    assert any("bomb" in m and "stopped and deleted" in m for m in events), notices.events


def test_the_session_limit_counts_every_download(tmp_path, site):
    env, notices = browser(tmp_path / "run", site, downloads_mb=0.25)  # room for two files of 100 KB

    async def attack():
        await env.start()
        try:
            return [await act(env, "goto", url=f"{site.base}/file/f{i}") for i in range(3)]
        finally:
            await env.stop()

    first, second, third = asyncio.run(attack())
    assert "was downloaded (102,400 bytes)" in first and "was downloaded (102,400 bytes)" in second
    assert "was stopped and deleted" in third and "session" in third, third
    assert sorted(files_in(tmp_path / "run" / "downloads")) == ["f0.bin", "f1.bin"]
    assert any(kind == "notice" and "f2" in data["message"] for kind, data in notices.events)


def test_the_copy_counts_against_the_run_folders_quota(tmp_path, site):
    run = tmp_path / "run"
    run.mkdir()
    (run / "data.bin").write_bytes(b"x" * (2**20 - 50 * 1024))  # 50 KB left of a 1 MB quota
    env, notices = browser(run, site, quota_mb=1)

    async def attack():
        await env.start()
        try:
            return await act(env, "goto", url=f"{site.base}/file/big")
        finally:
            await env.stop()

    seen = asyncio.run(attack())
    assert "was stopped and deleted" in seen and "run folder's disk quota of 1 MB" in seen, seen
    assert files_in(run / "downloads") == {}, "nothing is written when the copy is refused"
    assert any(kind == "notice" and "quota" in data["message"] for kind, data in notices.events)


@pytest.mark.parametrize("option", ["download_mb", "downloads_mb", "quota_mb"])
@pytest.mark.parametrize("value", [0, -1, "10", True])
def test_bad_limits_are_refused_by_name(tmp_path, option, value):
    with pytest.raises(ValueError, match=option):
        Browser(tmp_path / "run", **{option: value})
    assert not (tmp_path / "run").exists()


# -- F4: popups and pages that never yield ---------------------------------------------------------
async def timed(env: Browser, action: str, **args) -> tuple[float, str]:
    started = time.monotonic()
    out = await act(env, action, **args)
    return time.monotonic() - started, out


@pytest.mark.parametrize("storm", ["/popups", "/anchors", "/forms"])
def test_a_page_opening_300_windows_leaves_the_browser_responsive(tmp_path, site, storm):
    env, _ = browser(tmp_path / "run", site, max_tabs=6)

    async def attack():
        await env.start()
        try:
            first = await timed(env, "goto", url=site.base + storm)
            await asyncio.sleep(1.0)  # the storm goes on after the load
            later = [
                await timed(env, "extract"),
                await timed(env, "screenshot"),
                await timed(env, "switch_tab", tab_id=max(env._tabs)),  # noqa: SLF001
                await timed(env, "goto", url=site.base + "/home"),
                await timed(env, "extract"),
            ]
            return first, later, len(env._context.pages)  # noqa: SLF001 - counted from Chromium's side
        finally:
            await env.stop()

    first, later, pages = asyncio.run(attack())
    assert first[0] < LIMIT + 0.5, first
    for seconds, out in later:
        assert seconds < RESPONSIVE and not out.startswith("FAILED"), (seconds, out)
    assert "home page" in later[-1][1]
    assert pages <= 6 + 1, f"{pages} pages open with max_tabs=6"


def test_a_page_that_never_yields_is_replaced_and_the_next_actions_answer(tmp_path, site):
    env, _ = browser(tmp_path / "run", site)

    async def attack():
        await env.start()
        try:
            first = await timed(env, "goto", url=site.base + "/loop")
            await asyncio.sleep(0.3)
            hung = await timed(env, "extract")  # the loop has started by now: this one overstays
            later = [
                await timed(env, "extract"),
                await timed(env, "screenshot"),
                await timed(env, "goto", url=site.base + "/home"),
                await timed(env, "extract"),
            ]
            return first, hung, later
        finally:
            await env.stop()

    first, hung, later = asyncio.run(attack())
    assert first[0] < LIMIT + 0.5 and hung[0] < LIMIT + 0.5, (first, hung)
    notes = "\n".join(out for _, out in [hung, *later])
    assert "stopped answering" in notes and "/loop" in notes, notes
    for seconds, out in later:
        assert seconds < RESPONSIVE and not out.startswith("FAILED"), (seconds, out)
    assert "home page" in later[-1][1]


@pytest.mark.parametrize("value", [0, -2, 2.5, "3", True])
def test_a_bad_tab_limit_is_refused_by_name(tmp_path, value):
    with pytest.raises(ValueError, match="max_tabs"):
        Browser(tmp_path / "run", max_tabs=value)
