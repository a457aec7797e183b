"""A headless Chromium browser as a live environment, driven by Playwright's async API.

One session is one browser with a fresh profile (a temporary user-data-dir). Playwright's own
Chromium is used when it is installed, Debian's ``chromium`` otherwise (``playwright install``
cannot download browsers everywhere). Every action returns a short text observation; the state
(tabs, the current page, its interactive elements with selectors) and a viewport screenshot are
refreshed after each action that can change the page, so :meth:`Browser.state` and
:meth:`Browser.vision` are cheap and synchronous.

The browser runs behind the boundary (:mod:`tea_notebook.envs.browser_sandbox`): inside bubblewrap as
an unprivileged user with no view of the host's files, its only network the egress proxy that checks
every request against the workspace's policy (:attr:`Environment.egress`). The model's own URLs are
checked before navigating (http and https only); refusals become observations and run events
(``egress_refused``). Files the browser hands over (downloads, PDFs, screenshots) are written into the
run folder beneath a directory descriptor, never through a link found there.
"""

from __future__ import annotations

import asyncio
import base64
import glob
import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, ClassVar, Literal
from urllib.parse import unquote, urlparse

from tea_notebook.envs import browser_scripts as scripts
from tea_notebook.envs._sandbox_child import folder_usage
from tea_notebook.envs.base import Environment, EnvironmentFailure, action
from tea_notebook.envs.safe_open import Beneath, folder_beneath, read_beneath

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Download, Locator, Page, Playwright

    from tea_notebook.egress.policy import Decision
    from tea_notebook.envs.browser_sandbox import BrowserBox
    from tea_notebook.protocol.context import Context

LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-quic",
    "--disable-sync",
]
SYSTEM_CHROMIUM = ("/usr/bin/chromium", "chromium", "chromium-browser")
INSTALL_HINT = "install one with `apt-get install chromium` (Debian/Ubuntu) or `playwright install chromium`"
VIEWPORT = {"width": 1280, "height": 720}
MAX_ELEMENTS = 40
MAX_STATE_CHARS = 4000
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Playwright selector engines that are passed through untouched (everything else is tried as CSS,
# then as visible text).
_INDEX = re.compile(r"^\[?(\d+)\]?$")  # "3" or "[3]": the element listed as [3] in the state
_ENGINE = re.compile(r"^(?:text|css|xpath|id|role|data-testid|internal:[\w-]+|nth)=|^//|^\.\./|^\(//")
_NET_ERRORS = {
    "ERR_CONNECTION_REFUSED": "connection refused (nothing is listening there)",
    "ERR_NAME_NOT_RESOLVED": "the host name could not be resolved",
    "ERR_NAME_RESOLUTION_FAILED": "the host name could not be resolved",
    "ERR_INTERNET_DISCONNECTED": "there is no network connection",
    "ERR_ADDRESS_UNREACHABLE": "the address is unreachable",
    "ERR_CONNECTION_TIMED_OUT": "the connection timed out",
    "ERR_TIMED_OUT": "the connection timed out",
    "ERR_CONNECTION_RESET": "the connection was reset",
    "ERR_CONNECTION_CLOSED": "the server closed the connection",
    "ERR_EMPTY_RESPONSE": "the server sent an empty response",
    "ERR_TOO_MANY_REDIRECTS": "too many redirects",
    "ERR_ABORTED": "the navigation was aborted",
    "ERR_INVALID_URL": "the URL is not valid",
    "ERR_UNKNOWN_URL_SCHEME": "the URL scheme is not supported",
    "ERR_BLOCKED_BY_CLIENT": "the request was blocked",
    "ERR_TUNNEL_CONNECTION_FAILED": "the egress proxy refused or could not reach it",
    "ERR_PROXY_CONNECTION_FAILED": "the egress proxy is not running",
    "ERR_UNSAFE_PORT": "Chromium refuses that port",
}
MAX_REFUSALS_SHOWN = 5  # refused page requests listed in one observation (the rest are counted)
REFUSAL_MATCH_SECONDS = 10.0  # a refusal no page request claims within this is Chromium's own: dropped
MAX_PDF_BYTES = 50 * 1024 * 1024  # a PDF fetched from a tab, or read for its text
_COPY_CHUNK = 1024 * 1024
# what a page may put on disk by downloads (a 1.5 MB gzip bomb is 1.5 GiB once Chromium decodes it):
# one download, and all the downloads of one browser session, in MB; the copy into the run folder
# also counts against the run folder's disk quota (the sandbox's ``quota_mb``, 1024 MB by default)
DOWNLOAD_MB = 100
SESSION_DOWNLOADS_MB = 500
RUN_FOLDER_QUOTA_MB = 1024
DOWNLOAD_WATCH = 0.05  # seconds between looks at a download in progress
MAX_RUN_FOLDER_ENTRIES = 100_000  # as the sandbox's quota: the walk of the run folder stops past it
PROBE_SECONDS = 1.5  # how long a tab suspected of hanging has to answer a trivial script
MAX_TABS = 10  # open tabs; a tab or popup past it is closed at once (a page opening hundreds wedged the browser)


# Counts popups (target=_blank links, window.open) so that a click knows to wait for the new tab.
def system_chromium() -> str | None:
    """The system Chromium (``/usr/bin/chromium``, or ``chromium``/``chromium-browser`` on PATH), or None."""
    for name in SYSTEM_CHROMIUM:
        path = name if os.path.isabs(name) else shutil.which(name)
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def playwright_chromium() -> str | None:
    """Playwright's own downloaded Chromium when one is installed (found without starting Playwright)."""
    root = os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or os.path.expanduser("~/.cache/ms-playwright")
    for pattern in (
        "chromium*/chrome-linux*/chrome",
        "chromium*/chrome-mac*/Chromium.app/Contents/MacOS/*",
        "chromium*/chrome-win*/chrome.exe",
    ):
        for path in sorted(glob.glob(os.path.join(root, pattern)), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None


def find_chromium() -> str | None:
    """A Chromium this environment can drive (Playwright's own first, then the system one), or None."""
    return playwright_chromium() or system_chromium()


# -- helpers ------------------------------------------------------------------------------------------
def _short(exc: BaseException, limit: int = 300) -> str:
    """The first line of a Playwright error, without its call log."""
    text = str(exc).split("Call log:")[0].strip() or type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else text
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _reason(exc: BaseException) -> str:
    """Why Playwright kept waiting, from the last telling line of its call log ("element is not visible")."""
    log = str(exc).split("Call log:", 1)[1] if "Call log:" in str(exc) else ""
    telling = ("is not", "intercepts pointer events", "outside of the viewport", "detached", "not attached")
    for line in reversed(log.splitlines()):
        line = line.strip(" -\t")
        if any(t in line for t in telling):
            return line[:200]
    return ""


def _is_closed_error(exc: BaseException) -> bool:
    text = str(exc)
    return any(
        marker in text
        for marker in (
            "has been closed",
            "Target closed",
            "Browser closed",
            "Connection closed",
            "browser has disconnected",
        )
    )


def _normalize_url(url: str) -> str:
    url = url.strip()
    if not url:
        raise EnvironmentFailure("goto needs a URL")
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", url) and not re.match(r"^(localhost|[\w.-]+):\d+(/|$)", url):
        return url
    if url.startswith("//"):
        return "https:" + url
    host = url.split("/")[0]
    local = host.split(":")[0] in ("localhost", "127.0.0.1", "0.0.0.0") or re.match(r"^[\d.]+(:\d+)?$", host)
    return ("http://" if local else "https://") + url


def _png_size(png: bytes) -> tuple[int, int]:
    if png[:8] != PNG_SIGNATURE or len(png) < 24:
        return 0, 0
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def _safe_name(name: str, default: str = "download") -> str:
    name = re.sub(r"[^\w.\-]+", "_", unquote(name)).strip("._") or default
    return name[:120]


def _pdf_text(data: bytes, limit: int = 3000) -> str | None:
    """The text of a PDF (its bytes) when pypdf is installed (an optional extra), else None."""
    try:
        from pypdf import PdfReader  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        import io

        reader = PdfReader(io.BytesIO(data))
        parts, size = [], 0
        for page in reader.pages:
            text = page.extract_text() or ""
            parts.append(text)
            size += len(text)
            if size > limit:
                break
        text = "\n".join(parts).strip()
        pages = f"{len(reader.pages)} page(s)"
        return f"{pages}; text:\n{text[:limit]}" if text else f"{pages}, no text"
    except Exception as exc:  # noqa: BLE001 - a broken PDF is reported, not raised
        return f"its text could not be read ({type(exc).__name__}: {exc})"


def _proc_cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _pids_with(marker: str) -> list[int]:
    """Processes whose command line contains ``marker`` (Linux /proc; empty elsewhere)."""
    if not marker or not os.path.isdir("/proc"):
        return []
    needle = marker.encode()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and needle in _proc_cmdline(p)]


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


# -- host-side files in the run folder --------------------------------------------------------------
# The run folder is writable by sandboxed code of the same run: anything in it may be a link planted
# there. Files are created with O_CREAT|O_EXCL|O_NOFOLLOW relative to a folder opened beneath the run
# folder (never through a link to outside it), and read the same way.
def _new_file(folder: Path, sub: str, name: str) -> tuple[int, Path]:
    """Create a new file ``sub/name`` in ``folder`` (``name-1``, ``name-2`` … when taken); returns its
    descriptor (the caller writes and closes it) and its path."""
    with folder_beneath(folder, sub) as where:
        stem, dot, ext = name.rpartition(".")
        base, suffix = (stem, dot + ext) if dot and stem else (name, "")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        for n in range(1000):
            candidate = f"{base}{suffix}" if n == 0 else f"{base}-{n}{suffix}"
            try:
                fd = os.open(candidate, flags, 0o644, dir_fd=where.fd)
            except FileExistsError:  # a file, a folder or a link already has the name: never reused
                continue
            return fd, (folder / where.rel / candidate if where.rel != "." else folder / candidate)
    raise EnvironmentFailure(f"no free name for {name!r} in {sub!r}; nothing was saved")


def _write_new(folder: Path, sub: str, name: str, data: bytes) -> Path:
    """Save ``data`` as a new file ``sub/name`` of the run folder ``folder`` (a free name is chosen;
    nothing there is followed or overwritten); returns its path."""
    fd, path = _new_file(folder, sub, name)
    try:
        with os.fdopen(fd, "wb", closefd=False) as fh:
            fh.write(data)
    finally:
        os.close(fd)
    return path


class DownloadRefused(EnvironmentFailure):
    """A download stopped or not saved because it passed a byte limit (nothing of it is kept)."""


def _copy_download(source: Path, folder: Path, name: str, limit: int | None = None) -> tuple[Path, int, bytes]:
    """Copy a finished download (a file in the browser's private downloads folder, where a
    compromised browser could have put a link instead) into ``folder/downloads``. Returns the new
    path, its size and its first bytes (all of them for a PDF, up to :data:`MAX_PDF_BYTES`).
    ``limit``: the most bytes it may take; a larger file is :class:`DownloadRefused` before anything
    is written (or, should it grow meanwhile, with the partial copy deleted)."""
    src = Beneath(source.parent)
    try:
        opened = src.open(source.name, "read")
    finally:
        src.close()
    with opened:
        if limit is not None and (whole := os.fstat(opened.fd).st_size) > limit:
            raise DownloadRefused(f"{whole:,} bytes, over the {limit:,} bytes it may take")
        fd, path = _new_file(folder, "downloads", name)
        size, head = 0, b""
        try:
            with os.fdopen(opened.fd, "rb", closefd=False) as fin, os.fdopen(fd, "wb", closefd=False) as fout:
                while chunk := fin.read(_COPY_CHUNK):
                    if len(head) < MAX_PDF_BYTES and (not head or head.startswith(b"%PDF-")):
                        head += chunk[: MAX_PDF_BYTES - len(head)]
                    size += len(chunk)
                    if limit is not None and size > limit:
                        raise DownloadRefused(f"it grew past the {limit:,} bytes it may take while copied")
                    fout.write(chunk)
        except BaseException:
            _remove_new(folder, path)
            raise
        finally:
            os.close(fd)
    return path, size, head


def _remove_new(folder: Path, path: Path) -> None:
    """Delete ``path``, a file this environment just made beneath ``folder`` (never followed out)."""
    try:
        rel = path.relative_to(folder)
        where = folder_beneath(folder, str(rel.parent) if str(rel.parent) != "." else ".")
    except (ValueError, OSError):
        return
    try:
        os.unlink(rel.name, dir_fd=where.fd)
    except OSError:
        pass
    finally:
        where.close()


def _mb(count: int) -> str:
    """A byte count in MB, for messages."""
    return f"{count / 2**20:g} MB"


def _download_sizes(downloads: Path) -> tuple[int, int]:
    """The largest file and the total bytes in the browser's private downloads folder (its files
    only: Chromium writes each download there under a name of its own, links not followed)."""
    largest = total = 0
    try:
        with os.scandir(downloads) as entries:
            for entry in entries:
                try:
                    if entry.is_file(follow_symlinks=False):
                        info = entry.stat(follow_symlinks=False)
                        size = max(info.st_size, info.st_blocks * 512)  # written, or merely claimed
                        largest, total = max(largest, size), total + size
                except OSError:
                    continue
    except OSError:
        pass
    return largest, total


class Browser(Environment):
    """A headless Chromium browser: open pages, click, type, scroll, read pages as markdown, use tabs.

    ``ws.envs.add(Browser, timeout=10)``; every run gets its own browser with a fresh profile.
    Options: ``timeout`` (seconds per action), ``headless``, ``executable`` (a Chromium binary),
    ``isolation`` (``"auto"``: inside bubblewrap when it can run, else on the host with a warning;
    ``"bubblewrap"``: refuse to start without it; ``"process"``: on the host, chosen), the byte
    limits of downloads (``download_mb`` one download, ``downloads_mb`` the session's, ``quota_mb``
    the run folder's disk quota the copies count against) and ``max_tabs`` (tabs and popups past it
    are closed at once). Where it may go is the workspace's egress policy (``ws.egress``).
    """

    name: ClassVar[str] = "browser"
    description: ClassVar[str] = (
        "A headless Chromium web browser: open URLs, click, type into forms, scroll, read pages as markdown, tabs."
    )
    category: ClassVar[str] = "web"
    rules: ClassVar[str] = (
        "Open a page with goto, then read it with extract (markdown; long pages continue with start=). "
        "The state lists the tabs and the page's interactive elements as [index] selector: click and input "
        "take an index, a selector or an element's visible text. Links that open a new tab make it the current "
        "tab (switch_tab, close_tab). PDFs are saved into the run's downloads folder. Each action has a time "
        "limit; an error observation says what went wrong, so try another way instead of repeating it. Only "
        "http and https addresses open, and the workspace's egress policy may refuse one (local addresses, "
        "for instance): the observation names the rule; a refused address stays refused."
    )
    constraints: ClassVar[list[str]] = [
        "headless Chromium",
        "no file uploads",
        "one browser per run",
        "http and https only, through the workspace's egress policy",
    ]
    action_timeout = 10.0

    def __init__(
        self,
        folder: Path,
        context: "Context | None" = None,
        *,
        timeout: float = 10.0,
        headless: bool = True,
        executable: str | None = None,
        isolation: str = "auto",
        download_mb: float = DOWNLOAD_MB,
        downloads_mb: float = SESSION_DOWNLOADS_MB,
        quota_mb: float = RUN_FOLDER_QUOTA_MB,
        max_tabs: int = MAX_TABS,
    ):
        super().__init__(folder, context)
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        for option, value in (("download_mb", download_mb), ("downloads_mb", downloads_mb), ("quota_mb", quota_mb)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{option} must be a positive number of MB, not {value!r}")
        if not isinstance(max_tabs, int) or isinstance(max_tabs, bool) or max_tabs < 1:
            raise ValueError(f"max_tabs must be a whole number of tabs, at least 1, not {max_tabs!r}")
        self.max_tabs = max_tabs
        self._tabs_refused = 0  # tabs and popups closed at once (past max_tabs), not yet reported
        self._suspect: set[Page] = set()  # tabs an action overstayed on: asked to answer before the next one
        self.download_bytes = int(download_mb * 2**20)  # one download
        self.session_download_bytes = int(downloads_mb * 2**20)  # all of this session's downloads
        self.quota_bytes = int(quota_mb * 2**20)  # the run folder, everything in it
        self._downloaded = 0  # bytes of downloads saved into the run folder this session
        self._active: set["Download"] = set()  # downloads in progress
        self._guard: asyncio.Task | None = None  # watching them, while there are any
        self._refused_downloads: dict["Download", str] = {}  # stopped by a limit, and why
        if isolation not in ("auto", "bubblewrap", "process"):
            raise ValueError(f"isolation must be 'auto', 'bubblewrap' or 'process', not {isolation!r}")
        self.isolation = isolation
        self._box: BrowserBox | None = None
        # refusals by the egress proxy (its thread appends), reported with the next observation
        self._refusals: list[tuple[float, Decision]] = []
        self._refusals_lock = threading.Lock()
        # (host, port) of the pages' requests that met a refusal (Playwright's events, on the loop):
        # only those are reported — Chromium's own background requests are refused silently
        self._page_refused: set[tuple[str, int]] = set()
        self.action_timeout = float(timeout)
        self.headless = headless
        self.executable = executable
        self._playwright: Playwright | None = None
        self._context: BrowserContext | None = None
        self._browser_pid: int | None = None
        self._driver_pid: int | None = None
        self._executable_used: str | None = None
        self._dead = False
        self._closing = False
        self._tabs: dict[int, Page] = {}
        self._current: int | None = None
        self._next_tab = 0
        self._pages_opened = 0
        self._page_event: asyncio.Event | None = None
        self._notes: list[str] = []
        self._downloads: list[asyncio.Task] = []  # saving, or saved and not yet reported
        self._saved: dict[str, Path] = {}
        self._pdf_tabs: dict[int, Path] = {}
        self._titles: dict[int, str] = {}
        self._crashed: set[Page] = set()
        self._deadline = 0.0
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state_text = "browser: no page open yet"
        self._indexes: dict[int, str] = {}  # [index] in the state's element list -> its selector
        self._png: bytes | None = None
        self._shots = 0

    # -- timing -------------------------------------------------------------------------------
    @property
    def op_timeout(self) -> float:
        """Playwright's own default timeout (seconds), kept below the action's time limit."""
        return max(0.5, min(self.action_timeout * 0.6, self.action_timeout - 1.0))

    def _left(self, cap: float | None = None) -> float:
        """Seconds left before this action's deadline (at least a little), optionally capped."""
        left = max(0.05, self._deadline - time.monotonic())
        return min(left, cap) if cap is not None else left

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start Playwright and launch Chromium with a fresh profile and one blank tab."""
        if self._context is not None:
            return
        self._lock = self._lock or asyncio.Lock()
        self._loop = asyncio.get_running_loop()
        self._page_event = asyncio.Event()
        if self._playwright is None:
            from playwright.async_api import async_playwright

            self._playwright = await async_playwright().start()
        try:
            await self._launch(self._playwright)
        except BaseException:
            await self._stop_playwright()
            raise

    async def _launch(self, playwright: "Playwright") -> None:
        """Launch the browser (the first candidate that starts) behind its boundary and set up its context."""
        from tea_notebook.envs.browser_sandbox import confine

        errors = []
        for exe in self._executables(playwright):
            chromium = exe or playwright.chromium.executable_path
            try:
                box = confine(chromium, self.egress, self._on_refusal, isolation=self.isolation)
            except RuntimeError as exc:  # isolation="bubblewrap" where it cannot run
                raise EnvironmentFailure(f"the browser was not started: {exc}") from None
            try:
                self._context = await playwright.chromium.launch_persistent_context(
                    str(box.profile),
                    executable_path=box.executable,
                    headless=self.headless,
                    args=[*LAUNCH_ARGS, *box.args],
                    env=box.env,
                    downloads_path=str(box.downloads),
                    proxy=box.playwright_proxy,  # type: ignore[arg-type]
                    viewport=VIEWPORT,
                    accept_downloads=True,
                    timeout=30_000,
                )
                self._box = box
                self._executable_used = chromium
                break
            except Exception as exc:  # noqa: BLE001 - try the next browser, report all at the end
                errors.append(f"{chromium}: {_short(exc)}")
                box.close()
        if self._context is None:
            raise EnvironmentFailure("could not launch Chromium (" + "; ".join(errors) + f"); {INSTALL_HINT}")
        ctx = self._context
        ctx.set_default_timeout(self.op_timeout * 1000)
        ctx.set_default_navigation_timeout(self.op_timeout * 1000)
        await ctx.add_init_script(scripts.INIT_SCRIPT)
        self._dead = self._closing = False
        ctx.on("close", self._on_context_close)
        ctx.on("page", self._register)
        ctx.on("response", self._on_response)
        ctx.on("requestfailed", self._on_request_failed)
        for page in ctx.pages:
            self._register(page)
        if not self._tabs:
            await ctx.new_page()
        self._find_pids()
        self._take_refusals()  # Chromium's own start-up requests (component updates …), not the model's
        self._state_text = f"Tabs (1):\n* [{self._current}] about:blank (current)\nNo page is open yet: use goto."

    def _executables(self, playwright: "Playwright") -> list[str | None]:
        """What to launch, in order: the configured binary, Playwright's own (None), the system one."""
        if self.executable:
            exe = self.executable if os.path.isfile(self.executable) else shutil.which(self.executable)
            if not exe:
                raise EnvironmentFailure(f"browser executable {self.executable!r} not found; {INSTALL_HINT}")
            return [exe]
        out: list[str | None] = []
        try:
            if os.path.exists(playwright.chromium.executable_path):
                out.append(None)
        except Exception:  # noqa: BLE001 - no bundled browser registered
            pass
        system = system_chromium()
        if system:
            out.append(system)
        if not out:
            raise EnvironmentFailure(f"no Chromium found for the browser environment; {INSTALL_HINT}")
        return out

    @property
    def _profile(self) -> str | None:
        return str(self._box.profile) if self._box is not None else None

    def _find_pids(self) -> None:
        """The browser's main process (not bwrap nor the bridge, whose command lines carry its
        arguments too), and Playwright's driver: the first ancestor outside the boundary's chain."""
        main = []
        for pid in _pids_with(f"--user-data-dir={self._profile}"):
            argv = _proc_cmdline(str(pid)).split(b"\0")
            if b"--type=" not in b" ".join(argv) and b"chrom" in os.path.basename(argv[0]).lower():
                main.append(pid)
        self._browser_pid = main[0] if main else None
        driver = _ppid(self._browser_pid) if self._browser_pid else None
        while driver and self._profile and self._profile.encode() in _proc_cmdline(str(driver)):
            driver = _ppid(driver)  # the bridge, bwrap's init, bwrap
        self._driver_pid = driver

    @property
    def boundary(self) -> str | None:
        """What confines the running browser, in one line (None when it is not running)."""
        return self._box.describe() if self._box is not None and self._context is not None else None

    # -- the egress policy ---------------------------------------------------------------------
    def _on_refusal(self, decision: "Decision") -> None:
        """Called by the proxy's thread for each request it refused."""
        with self._refusals_lock:
            self._refusals.append((time.monotonic(), decision))

    def _take_refusals(self) -> list[tuple[float, "Decision"]]:
        with self._refusals_lock:
            taken, self._refusals = self._refusals, []
        return taken

    def _mark_refused(self, url: str) -> None:
        try:
            parts = urlparse(url)
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
        except ValueError:
            return
        if parts.hostname:
            self._page_refused.add((parts.hostname.lower().rstrip("."), port))

    def _on_response(self, response: Any) -> None:
        """A page's request answered by the proxy's refusal (plain http: a 403 with the rule)."""
        if response.headers.get("x-tea-egress-rule"):
            self._mark_refused(response.url)

    def _on_request_failed(self, request: Any) -> None:
        """A page's request that failed: a tunnel the proxy refused (https, websockets), or a refused
        answer the page may not read (a cross-origin fetch): it claims a refusal of its host, if any."""
        self._mark_refused(request.url)

    def _notice(self, decision: "Decision") -> None:
        """A refusal as an event of the run (``egress_refused``)."""
        notice = getattr(self.context, "notice", None)
        if notice is not None:
            notice("egress_refused", decision.as_event())

    def _refusal_notes(self) -> list[str]:
        """The page's requests the proxy refused since the last observation: one event each (the same
        destination and rule once), a few lines for the model."""
        seen: dict[tuple[str, int, str], "Decision"] = {}
        pending = []
        now = time.monotonic()
        for when, decision in self._take_refusals():
            if (decision.host, decision.port) in self._page_refused:
                seen.setdefault((decision.host, decision.port, decision.rule), decision)
            elif now - when < REFUSAL_MATCH_SECONDS:  # the page's event may still be on its way
                pending.append((when, decision))
        with self._refusals_lock:
            self._refusals[:0] = pending
        self._page_refused.clear()
        if not seen:
            return []
        for decision in seen.values():
            self._notice(decision)
        shown = list(seen.values())[:MAX_REFUSALS_SHOWN]
        lines = [f"The egress policy refused {len(seen)} request(s) the page made:"]
        lines += [f"  - {d.reason}" for d in shown]
        if len(seen) > len(shown):
            lines.append(f"  … and {len(seen) - len(shown)} more")
        return ["\n".join(lines)]

    async def _check(self, url: str) -> str:
        """The URL the model gave, normalised and checked by the egress policy; a refusal is an
        EnvironmentFailure naming the rule (and an event of the run)."""
        url = _normalize_url(url)
        if url == "about:blank":
            return url
        decision = await self.egress.acheck_url(url)
        if not decision.allowed:
            self._notice(decision)
            raise EnvironmentFailure(f"Not opened, the egress policy refused it: {decision.reason}")
        return url

    @property
    def browser_pid(self) -> int | None:
        """The process id of the browser's main process (Linux), or None when unknown or stopped."""
        return self._browser_pid if self._context is not None else None

    async def stop(self) -> None:
        """Close the browser and Playwright and delete the profile. Safe to call twice."""
        await self._close_browser()
        await self._stop_playwright()
        self._driver_pid = None
        self._state_text = "browser: stopped (a fresh browser starts at the next action)"

    async def _close_browser(self) -> None:
        ctx, profile, box = self._context, self._profile, self._box
        self._closing = True
        self._context = None
        for task in list(self._downloads):
            task.cancel()
        self._downloads.clear()
        if self._guard is not None:
            self._guard.cancel()
        self._guard = None
        self._active.clear()
        if ctx is not None:
            try:
                await asyncio.wait_for(ctx.close(), 5)
            except Exception:  # noqa: BLE001 - the browser may be gone already; kill what is left
                self._kill_processes(profile)
        if box is not None:  # the proxy (its thread is joined), the profile, the downloads not yet copied
            await asyncio.to_thread(box.close)
        self._box = None
        self._take_refusals()
        self._browser_pid = None
        self._tabs.clear()
        self._pdf_tabs.clear()
        self._titles.clear()
        self._crashed.clear()
        self._current = None

    async def _stop_playwright(self) -> None:
        pw, self._playwright = self._playwright, None
        if pw is not None:
            try:
                await asyncio.wait_for(pw.stop(), 5)
            except Exception:  # noqa: BLE001 - the driver may be gone
                if self._driver_pid:
                    _kill(self._driver_pid)

    def kill(self) -> None:
        """Kill the browser's processes and delete the profile (no event loop needed).

        Playwright's driver is not killed (under a live connection that makes Playwright log an
        unretrieved error): it is asked to stop on its event loop when that loop still runs, and it
        exits by itself anyway when its pipe to this process closes."""
        self._closing = True
        self._kill_processes(self._profile)
        box, self._box = self._box, None
        if box is not None:
            box.close()
        pw, loop = self._playwright, self._loop
        if pw is None or loop is None or not loop.is_running() or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not loop:
            self._playwright = None
            try:
                asyncio.run_coroutine_threadsafe(_stop_quietly(pw), loop)
            except RuntimeError:
                pass

    def _kill_processes(self, profile: str | None) -> None:
        pids = _pids_with(f"--user-data-dir={profile}") if profile else []
        if self._browser_pid and self._browser_pid not in pids:
            pids.append(self._browser_pid)
        for pid in pids:
            _kill(pid)

    # -- tabs -----------------------------------------------------------------------------------
    def _register(self, page: "Page") -> int | None:
        """Give a new page a tab id and make it current (new tabs and popups come to the front); past
        :attr:`max_tabs` open tabs a new page is closed at once instead (None)."""
        for tab_id, known in self._tabs.items():
            if known is page:
                return tab_id
        if len(self._tabs) >= self.max_tabs:
            self._tabs_refused += 1
            task = asyncio.ensure_future(self._close_storm(page))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            return None
        tab_id = self._next_tab
        self._next_tab += 1
        self._tabs[tab_id] = page
        self._current = tab_id
        self._pages_opened += 1
        page.on("close", lambda p: self._on_page_close(p))
        page.on("download", self._on_download)
        page.on("crash", self._on_crash)
        page.on("dialog", self._on_dialog)
        if self._page_event is not None:
            self._page_event.set()
        return tab_id

    async def _close_storm(self, page: "Page") -> None:
        """Close a tab opened past :attr:`max_tabs`, and the tab that opened it: a page that opens
        windows past the limit (and past the init script's cap, e.g. by submitting forms to new
        windows) is stopped at its source rather than left to wedge the browser."""
        try:
            opener = await asyncio.wait_for(page.opener(), 2)
        except Exception:  # noqa: BLE001 - closed already, or no answer: close what we have
            opener = None
        try:
            await page.close(run_before_unload=False)
        except Exception:  # noqa: BLE001 - it may be gone already
            pass
        tab_id = self._tab_id(opener) if opener is not None else None
        if opener is not None and tab_id is not None and not opener.is_closed():
            self._notes.append(
                f"Tab [{tab_id}] ({opener.url}) kept opening tabs past the limit of {self.max_tabs}; it was closed."
            )
            try:
                await opener.close(run_before_unload=False)
            except Exception:  # noqa: BLE001 - it may be gone already
                pass

    def _tab_id(self, page: "Page") -> int | None:
        return next((i for i, p in self._tabs.items() if p is page), None)

    def _on_page_close(self, page: "Page") -> None:
        tab_id = self._tab_id(page)
        if tab_id is None:
            return
        del self._tabs[tab_id]
        self._pdf_tabs.pop(tab_id, None)
        self._titles.pop(tab_id, None)
        if self._current == tab_id:
            self._current = max(self._tabs) if self._tabs else None

    def _on_crash(self, page: "Page") -> None:
        self._crashed.add(page)

    def _on_context_close(self, _ctx: Any) -> None:
        if not self._closing:
            self._dead = True

    def _on_dialog(self, dialog: Any) -> None:
        self._notes.append(f"The page showed a {dialog.type} dialog: {dialog.message[:200]!r} (accepted).")
        task = asyncio.ensure_future(dialog.accept())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _page(self) -> "Page":
        """The current tab's page, opening a blank one when no tab is left."""
        assert self._context is not None
        page = self._tabs.get(self._current) if self._current is not None else None
        if page is not None and page in self._crashed:
            self._crashed.discard(page)
            self._notes.append(f"Tab [{self._current}] had crashed ({page.url}); it was replaced by a new tab.")
            try:
                await page.close()
            except Exception:  # noqa: BLE001 - a crashed page may refuse to close
                pass
            self._on_page_close(page)
            page = None
        if page is None or page.is_closed():
            page = await self._context.new_page()
            self._register(page)
        return page

    # -- downloads and PDFs ----------------------------------------------------------------------
    def _on_download(self, download: "Download") -> None:
        self._active.add(download)
        if self._guard is None or self._guard.done():
            self._guard = asyncio.ensure_future(self._guard_downloads())
        self._downloads.append(asyncio.ensure_future(self._save_download(download)))

    def _download_limit(self, largest: int, total: int) -> str | None:
        """Which byte limit the browser's downloads in progress passed (None: none)."""
        if largest > self.download_bytes:
            return f"it passed the limit of {_mb(self.download_bytes)} for one download"
        if self._downloaded + total > self.session_download_bytes:
            return f"the browser session's downloads passed their limit of {_mb(self.session_download_bytes)}"
        return None

    async def _guard_downloads(self) -> None:
        """While downloads are in progress, look at the browser's downloads folder every
        :data:`DOWNLOAD_WATCH` s; past a limit, cancel them all and delete what they wrote."""
        box = self._box
        while box is not None and self._active:
            await asyncio.sleep(DOWNLOAD_WATCH)
            why = self._download_limit(*_download_sizes(box.downloads))
            if why is None:
                continue
            for download in list(self._active):
                self._refused_downloads[download] = why
                try:
                    await download.cancel()
                except Exception:  # noqa: BLE001 - it may have finished or failed meanwhile
                    pass
            await asyncio.sleep(DOWNLOAD_WATCH)
            with os.scandir(box.downloads) as entries:  # partial files Chromium left behind
                for entry in entries:
                    try:
                        os.unlink(entry.path)  # a link is removed, never followed
                    except OSError:
                        pass
            return

    def _refuse_download(self, url: str, why: str) -> str:
        """A download refused by a byte limit: an event of the run (``notice``) and the observation's note."""
        text = f"A download of {url} was stopped and deleted: {why}. Nothing of it was saved."
        notice = getattr(self.context, "notice", None)
        if notice is not None:
            notice("notice", {"message": text})
        return text

    async def _save_download(self, download: "Download") -> str:
        """A finished download: copied from the browser's private folder into the run's ``downloads``
        (Playwright's ``save_as`` would copy by path, following whatever link it finds), within the
        byte limits (one download, the session's downloads, the run folder's quota)."""
        name = _safe_name(download.suggested_filename or "download")
        try:
            try:
                source = await download.path()
            except Exception as exc:  # noqa: BLE001 - reported as a note
                if download in self._refused_downloads:
                    return self._refuse_download(download.url, self._refused_downloads.pop(download))
                return f"A download of {download.url} failed: {_short(exc)}"
            finally:
                self._active.discard(download)
            if download in self._refused_downloads:
                return self._refuse_download(download.url, self._refused_downloads.pop(download))
            used, _ = await asyncio.to_thread(folder_usage, str(self.folder), MAX_RUN_FOLDER_ENTRIES)
            room = {
                f"the limit of {_mb(self.download_bytes)} for one download": self.download_bytes,
                f"what is left of the session's {_mb(self.session_download_bytes)} of downloads": (
                    self.session_download_bytes - self._downloaded
                ),
                f"what is left of the run folder's disk quota of {_mb(self.quota_bytes)}": self.quota_bytes - used,
            }
            why, limit = min(room.items(), key=lambda item: item[1])
            try:
                path, size, head = await asyncio.to_thread(
                    _copy_download, Path(source), self.folder, name, max(0, limit)
                )
            except DownloadRefused as exc:
                return self._refuse_download(download.url, f"{exc} ({why})")
            except Exception as exc:  # noqa: BLE001 - reported as a note
                return f"A download of {download.url} failed: {_short(exc)}"
        finally:
            try:
                await download.delete()
            except Exception:  # noqa: BLE001 - the session's folder goes at the end anyway
                pass
        self._downloaded += size
        self._saved[download.url] = path
        return self._describe_file(path, size, head, download.url)

    def _describe_file(self, path: Path, size: int, data: bytes, url: str) -> str:
        if data.startswith(b"%PDF-") or path.suffix.lower() == ".pdf":
            text = _pdf_text(data)
            extra = text if text is not None else "install pypdf to read its text"
            return f"{url} is a PDF ({size:,} bytes), saved to {path}; {extra}"
        return f"{url} was downloaded ({size:,} bytes), saved to {path}"

    async def _drain_downloads(self) -> list[str]:
        if not self._downloads:
            return []
        done, pending = await asyncio.wait(list(self._downloads), timeout=self._left(5.0))
        self._downloads = [t for t in self._downloads if t not in done]
        notes = [t.result() for t in done if not t.cancelled() and t.exception() is None]
        notes += [f"A download is still running; it will be saved into {self.folder / 'downloads'}."] * bool(pending)
        return notes

    async def _save_pdf(self, page: "Page", url: str, body: bytes | None = None) -> str:
        """A tab showing a PDF in Chromium's viewer: fetch the file and save it like a download."""
        if body is None:
            # fetched by the page itself, so through the browser's proxy (Playwright's own request
            # API would fetch from the host, around the sandbox and the egress policy)
            data = await asyncio.wait_for(page.evaluate(scripts.FETCH_JS, [url, MAX_PDF_BYTES]), self._left())
            if "error" in data:
                raise EnvironmentFailure(data["error"])
            body = base64.b64decode(data["base64"])
        name = _safe_name(Path(urlparse(url).path).name or "document.pdf")
        path = _write_new(self.folder, "downloads", name if name.lower().endswith(".pdf") else name + ".pdf", body)
        self._saved[url] = path
        tab_id = self._tab_id(page)
        if tab_id is not None:
            self._pdf_tabs[tab_id] = path
        return self._describe_file(path, len(body), body, url)

    async def _pdf_note(self, page: "Page", url: str) -> str:
        """A tab that shows a PDF: save it once (per URL) and remember which file the tab shows."""
        tab_id = self._tab_id(page)
        if url in self._saved and self._saved[url].exists():
            if tab_id is not None:
                self._pdf_tabs[tab_id] = self._saved[url]
            return f"{url} is a PDF, already saved to {self._saved[url]}."
        try:
            return await self._save_pdf(page, url)
        except Exception as exc:  # noqa: BLE001
            return f"{url} is a PDF but could not be saved: {_short(exc)}"

    # -- the action frame -----------------------------------------------------------------------
    async def _run(self, work: Callable[["Page"], Awaitable[str]], *, refresh: bool = True) -> str:
        """Run one action: restart a dead browser, call ``work(page)``, turn Playwright errors into
        readable failures, then refresh the state and the screenshot within the time limit."""
        self._deadline = time.monotonic() + self.action_timeout - 0.4
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            notes = await self._ensure_alive()
            notes += await self._replace_hung_tab()
            page = await self._page()
            started, handled = time.monotonic(), False
            try:
                try:
                    text = await work(page)
                except EnvironmentFailure as exc:
                    handled = True  # a condition the action met and named (a page that did not load …)
                    if refresh:
                        await self._refresh()
                    raise EnvironmentFailure("\n".join([*notes, str(exc), *self._refusal_notes()])) from None
                except Exception as exc:
                    if _is_closed_error(exc) and not self._connected():
                        self._dead = True
                        raise EnvironmentFailure(
                            "The browser closed during the action; it will be restarted at the next action."
                        ) from None
                    if type(exc).__name__ == "TimeoutError" and type(exc).__module__.startswith("playwright"):
                        why = _reason(exc)
                        message = f"timed out after {self.op_timeout:g} s: {_short(exc)}" + (f" ({why})" if why else "")
                    else:
                        message = _short(exc)
                    if refresh:
                        await self._refresh()
                    raise EnvironmentFailure(
                        "\n".join([*notes, message, *self._take_notes(), *self._refusal_notes()])
                    ) from None
                extra = await self._refresh() if refresh else []
                return "\n".join([*notes, text, *extra, *self._take_notes(), *self._refusal_notes()])
            finally:
                # an action that overstayed (a script's timeout, or cancelled at its limit) may have met
                # a page that stopped answering (a script that never yields): the next action asks first
                if not handled and time.monotonic() - started > self.op_timeout and not page.is_closed():
                    self._suspect.add(page)

    async def _answers(self, page: "Page") -> bool:
        """True when the tab runs a trivial script within :data:`PROBE_SECONDS`."""
        try:
            await asyncio.wait_for(page.evaluate("1"), PROBE_SECONDS)
            return True
        except Exception:  # noqa: BLE001 - no answer (or an error): the tab is not usable
            return False

    async def _replace_hung_tab(self) -> list[str]:
        """Before an action: a current tab that an earlier action overstayed on must answer a trivial
        script within :data:`PROBE_SECONDS`; one that does not is closed and replaced by a blank tab
        (and when even closing it hangs, the whole browser is restarted). Returns the notes."""
        page = self._tabs.get(self._current) if self._current is not None else None
        suspects, self._suspect = self._suspect, set()
        if page is None or page not in suspects or page.is_closed():
            return []
        if await self._answers(page):
            return []
        tab_id, url = self._current, page.url
        try:
            await asyncio.wait_for(page.close(run_before_unload=False), 5)
        except Exception:  # noqa: BLE001 - the browser itself no longer answers: start a new one
            self._dead = True
            restarted = await self._ensure_alive()
            return [f"Tab [{tab_id}] ({url}) stopped answering and could not be closed; {' '.join(restarted)}"]
        self._on_page_close(page)
        return [
            f"Tab [{tab_id}] ({url}) stopped answering (a script that never yields?) and was closed; "
            "the action ran in another tab."
        ]

    def _take_notes(self) -> list[str]:
        notes, self._notes = self._notes, []
        refused, self._tabs_refused = self._tabs_refused, 0
        if refused:
            notes.append(
                f"The page tried to open {refused} more tab(s) or popup(s) past the limit of {self.max_tabs} open "
                "tabs; they were closed at once."
            )
        return notes

    def _connected(self) -> bool:
        if self._context is None or self._dead:
            return False
        if self._browser_pid and not _alive(self._browser_pid):  # killed: the close event may still be on its way
            return False
        try:
            browser = self._context.browser
            return browser is None or browser.is_connected()
        except Exception:  # noqa: BLE001
            return False

    async def _ensure_alive(self) -> list[str]:
        """Restart the browser when it crashed or was closed; the note says so."""
        if self._connected():
            return []
        was_running = self._context is not None
        if was_running:
            await self._close_browser()  # Playwright's driver is kept: only the browser is relaunched
        try:
            await self.start()
        except EnvironmentFailure:
            raise
        except Exception:  # noqa: BLE001 - the driver may be broken too: start from scratch
            await self.stop()
            await self.start()
        if not was_running:
            return []
        return ["(The browser had stopped — crashed or closed; a fresh one was started and earlier tabs are gone.)"]

    async def _settle(self, page: "Page", load_cap: float = 1.0) -> None:
        """Wait (briefly) for the page to be parsed and, when quick, loaded."""
        from playwright.async_api import Error as PlaywrightError

        try:
            await page.wait_for_load_state("domcontentloaded", timeout=self._left(self.op_timeout) * 1000)
            await page.wait_for_load_state("load", timeout=self._left(load_cap) * 1000)
        except PlaywrightError:
            pass

    async def _refresh(self) -> list[str]:
        """Refresh the cached state text and screenshot; returns notes (saved downloads and PDFs)."""
        notes = await self._drain_downloads()
        page = self._tabs.get(self._current) if self._current is not None else None
        if page is None or page.is_closed() or self._context is None:
            self._state_text = self._format_state(None)
            return notes
        try:
            snap = await asyncio.wait_for(page.evaluate(scripts.SNAPSHOT_JS, MAX_ELEMENTS), self._left(2.0))
        except Exception:  # noqa: BLE001 - a page that cannot be read still gets a state
            snap = None
        tab_id = self._current
        if snap and snap.get("contentType") == "application/pdf":
            if tab_id not in self._pdf_tabs:
                notes.append(await self._pdf_note(page, snap["url"]))
        elif snap:
            self._pdf_tabs.pop(tab_id, None)
        if snap:
            self._titles[tab_id] = snap.get("title") or ""
        self._state_text = self._format_state(snap)
        if self._left() > 0.3:
            try:
                self._png = await page.screenshot(type="png", timeout=self._left(2.0) * 1000)
            except Exception:  # noqa: BLE001 - keep the previous screenshot
                pass
        return notes

    def _format_state(self, snap: dict[str, Any] | None) -> str:
        if self._context is None:
            return "browser: stopped (a fresh browser starts at the next action)"
        lines = [f"Tabs ({len(self._tabs)}):"]
        for tab_id, page in list(self._tabs.items())[:20]:
            mark = "*" if tab_id == self._current else " "
            title = self._titles.get(tab_id, "")
            lines.append(f"{mark} [{tab_id}] {title[:60]!r} {page.url[:150]}" + (" (current)" if mark == "*" else ""))
        if snap is None:
            page = self._tabs.get(self._current) if self._current is not None else None
            where = f"Current page: {page.url}" if page is not None and not page.is_closed() else "No current page"
            return "\n".join(lines + [where, "(its content could not be read)"])[:MAX_STATE_CHARS]
        lines.append(f"Current page: {snap.get('title') or '(no title)'!r} at {snap.get('url')}")
        if snap.get("contentType") == "application/pdf":
            path = self._pdf_tabs.get(self._current) if self._current is not None else None
            saved = f" saved to {path}" if path else ""
            lines.append(f"It is a PDF{saved}; extract returns its text when pypdf is installed.")
        y, height, view = snap.get("scrollY", 0), snap.get("height", 0), snap.get("viewport", 0)
        lines.append(f"Scroll: y={y} of {height} px (viewport {view} px)")
        elements = snap.get("elements") or []
        self._indexes = {i: el["selector"] for i, el in enumerate(elements, start=1)}
        if elements:
            total = snap.get("total", len(elements))
            lines.append(f"Interactive elements ({len(elements)} of {total} visible; [index] selector, kind, text):")
        for i, el in enumerate(elements, start=1):
            bits = [f"[{i}]", el["selector"], el["kind"]]
            if el.get("text"):
                bits.append(repr(el["text"]))
            for key in ("href", "name", "placeholder", "value"):
                if el.get(key):
                    bits.append(f"{key}={el[key]!r}")
            if "checked" in el:  # a checkbox or radio button
                bits.append("checked" if el["checked"] else "not checked")
            line = "  " + " ".join(bits)
            if sum(len(x) + 1 for x in lines) + len(line) > MAX_STATE_CHARS - 40:
                lines.append("  … (more elements; scroll or extract to see them)")
                break
            lines.append(line)
        return "\n".join(lines)[:MAX_STATE_CHARS]

    # -- what the prompt shows -----------------------------------------------------------------
    def state(self) -> str:
        """The tabs, the current page and its interactive elements with selectors (as of the last action)."""
        return self._state_text

    def vision(self) -> bytes | None:
        """A PNG of the current tab's viewport, taken after the last action that changed the page."""
        return self._png

    # -- element lookup -------------------------------------------------------------------------
    async def _find(self, page: "Page", selector: str, *, fillable: bool = False) -> "Locator":
        """The element for a CSS selector (or any Playwright selector) or, failing that, visible text."""
        from playwright.async_api import Error as PlaywrightError

        sel = selector.strip()
        if not sel:
            raise EnvironmentFailure("the selector is empty; use a selector from the state or the element's text")
        index = _INDEX.match(sel)
        if index is not None:  # an element's index in the state's list
            number = int(index.group(1))
            if number not in self._indexes:
                shown = f"[1]–[{len(self._indexes)}]" if self._indexes else "none"
                raise EnvironmentFailure(
                    f"there is no element [{number}] on {page.url}: the state lists elements {shown}"
                    " (indexes change after each action; use one from the latest state)"
                )
            sel = self._indexes[number]
        if _ENGINE.match(sel):
            candidates = [page.locator(sel)]
        else:
            candidates = [page.locator(sel)]
            if fillable:
                candidates += [page.get_by_placeholder(sel, exact=True), page.get_by_label(sel, exact=True)]
            candidates += [
                page.get_by_text(sel, exact=True),
                page.get_by_role("button", name=sel),
                page.get_by_role("link", name=sel),
                page.get_by_text(sel),
            ]
        valid = []
        for loc in candidates:
            try:
                count = await loc.count()
            except PlaywrightError:
                continue  # not valid CSS: try it as text
            valid.append(loc)
            if count:
                return await self._pick(loc, count)
        if not valid:
            raise EnvironmentFailure(f"{selector!r} is not a valid selector")
        combined = valid[0]
        for loc in valid[1:]:
            combined = combined.or_(loc)
        try:  # it may appear shortly (a page still rendering)
            await combined.first.wait_for(state="attached", timeout=self._left(self.op_timeout) * 1000)
        except PlaywrightError:
            raise EnvironmentFailure(
                f"no element matches {selector!r} on {page.url} (tried as a CSS selector and as visible text, "
                f"waited {self.op_timeout:g} s); use a selector from the state's element list"
            ) from None
        for loc in valid:
            count = await loc.count()
            if count:
                return await self._pick(loc, count)
        return combined.first

    @staticmethod
    async def _pick(loc: "Locator", count: int) -> "Locator":
        if count == 1:
            return loc
        shown = loc.filter(visible=True)
        return shown.first if await shown.count() else loc.first

    @staticmethod
    async def _describe(loc: "Locator") -> str:
        try:
            text = await loc.evaluate(scripts.DESCRIBE_JS, timeout=1000)
            return str(text)
        except Exception:  # noqa: BLE001
            return "the element"

    async def _arm_popup(self, page: "Page") -> int:
        """Before a click or Enter: reset the page's popup counter; returns how many tabs were opened so far."""
        if self._page_event is not None:
            self._page_event.clear()
        try:
            await page.evaluate("() => { window.__teaPopups = 0; }")
        except Exception:  # noqa: BLE001
            pass
        return self._pages_opened

    async def _popup(self, page: "Page", opened_before: int) -> str | None:
        """After a click: when the page opened a tab (target=_blank, window.open), wait for it."""
        try:
            flagged = await page.evaluate(scripts.POPUPS_JS)
        except Exception:  # noqa: BLE001 - navigated away: no popup flag to read
            flagged = 0
        if flagged and self._pages_opened == opened_before and self._page_event is not None:
            try:
                await asyncio.wait_for(self._page_event.wait(), self._left(2.0))
            except asyncio.TimeoutError:
                pass
        if self._pages_opened == opened_before or self._current is None:
            return None
        new = self._tabs[self._current]
        await self._settle(new)
        return f"It opened a new tab [{self._current}] ({new.url}), which is now the current tab."

    async def _open(self, page: "Page", url: str) -> str:
        """Navigate ``page`` to ``url``; the observation, or an EnvironmentFailure naming the URL."""
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        url = _normalize_url(url)
        try:
            response = await page.goto(url, wait_until="domcontentloaded", timeout=self._left(self.op_timeout) * 1000)
        except PlaywrightTimeout:
            try:  # stop the hung load so the tab is usable again
                await asyncio.wait_for(page.evaluate("() => window.stop()"), self._left(1.0))
            except Exception:  # noqa: BLE001
                pass
            raise EnvironmentFailure(
                f"{url} did not load within {self.op_timeout:g} s (the server did not answer in time); loading stopped"
            ) from None
        except PlaywrightError as exc:
            text = str(exc)
            if "Download is starting" in text:
                for _ in range(20):  # the download event may arrive just after the error
                    if self._downloads or self._left() < 0.5:
                        break
                    await asyncio.sleep(0.05)
                notes = await self._drain_downloads()
                return "\n".join(notes) or f"{url} started a download into {self.folder / 'downloads'}"
            if _is_closed_error(exc):
                raise
            code = re.search(r"net::(ERR_[A-Z_]+)", text)
            if code:
                reason = _NET_ERRORS.get(code.group(1), code.group(1))
                raise EnvironmentFailure(f"could not open {url}: {reason} (net::{code.group(1)})") from None
            raise EnvironmentFailure(f"could not open {url}: {_short(exc)}") from None
        tab = self._tab_id(page)
        if tab is not None:
            self._pdf_tabs.pop(tab, None)
        proxied = response.headers.get("x-tea-egress-proxy") if response else None
        if response is not None and proxied:  # the proxy answered itself: refused, or it could not connect
            reason = ""  # a refusal is also listed (and sent as an event) by _refusal_notes
            try:
                reason = (await response.text()).strip()[:400]
            except Exception:  # noqa: BLE001
                pass
            if proxied == "refused":
                raise EnvironmentFailure(f"could not open {url}: the egress policy refused {page.url} — {reason}")
            if "[Errno 111]" in reason or "Connection refused" in reason:
                reason = f"connection refused (nothing is listening there); {reason}"
            raise EnvironmentFailure(f"could not open {url}: {reason or 'the egress proxy could not reach it'}")
        ctype = (response.headers.get("content-type", "") if response else "").split(";")[0].strip().lower()
        if ctype == "application/pdf":
            body = None
            try:  # Chromium's PDF viewer may answer with its own placeholder page: then fetch the file
                body = await response.body() if response else None
            except Exception:  # noqa: BLE001
                body = None
            if body is not None and not body.startswith(b"%PDF-"):
                body = None
            try:
                return await self._save_pdf(page, page.url, body)
            except Exception as exc:  # noqa: BLE001 - the page is open; only the copy failed
                return f"{page.url} is a PDF (shown in tab [{tab}]) but could not be saved: {_short(exc)}"
        await self._settle(page)
        title = await page.title()
        status = f" (HTTP {response.status} {response.status_text})" if response and response.status >= 400 else ""
        return f"Opened {page.url}{status} — title {title!r} in tab [{tab}]. Use extract to read it."

    # -- actions -------------------------------------------------------------------------------
    @action
    async def goto(self, url: str) -> str:
        """Open a URL in the current tab.

        Args:
            url: The address to open; a bare host like "example.com" means https://example.com.
        """
        checked = await self._check(url)
        return await self._run(lambda page: self._open(page, checked))

    @action
    async def click(self, selector: str) -> str:
        """Click an element, found by CSS selector or, failing that, by its visible text.

        Args:
            selector: An element's index from the state's list (e.g. "3"), its selector (e.g. "#submit"),
                any CSS selector, or the visible text of a link or button (e.g. "Sign in").
        """

        async def work(page: "Page") -> str:
            loc = await self._find(page, selector)
            what = await self._describe(loc)
            opened = await self._arm_popup(page)
            await loc.click(timeout=self._left(self.op_timeout) * 1000)
            popup = await self._popup(page, opened)
            if popup:
                return f"Clicked {what}. {popup}"
            await self._settle(page)
            return f"Clicked {what}. Now at {page.url} — title {await page.title()!r}."

        return await self._run(work)

    @action
    async def input(self, selector: str, text: str, press_enter: bool = False) -> str:
        """Type text into a field (replacing what it holds), or choose the option of a drop-down (select) whose
        text or value is ``text``; the field is found by selector, label, placeholder or text.

        Args:
            selector: An element's index from the state's list (e.g. "3"), its selector (e.g. "#q"), any CSS
                selector, or the field's label or placeholder text.
            text: The text to put in the field (for a drop-down: the option's text or value).
            press_enter: Press Enter afterwards (submits most search boxes and forms).
        """

        async def work(page: "Page") -> str:
            loc = await self._find(page, selector, fillable=True)
            what = await self._describe(loc)
            if await loc.evaluate("(el) => el.tagName === 'SELECT'", timeout=self._left(1.0) * 1000):
                out = f"Chose {await self._choose(loc, text, what)!r} in {what}"
            else:
                await loc.fill(text, timeout=self._left(self.op_timeout) * 1000)
                out = f"Typed {text[:80]!r} into {what}"
            if press_enter:
                opened = await self._arm_popup(page)
                await loc.press("Enter", timeout=self._left(self.op_timeout) * 1000)
                popup = await self._popup(page, opened)
                if popup:
                    return f"{out} and pressed Enter. {popup}"
                await self._settle(page)
                return f"{out} and pressed Enter. Now at {page.url} — title {await page.title()!r}."
            return out + "."

        return await self._run(work)

    async def _choose(self, loc: "Locator", text: str, what: str) -> str:
        """Select the drop-down's option whose text (else value; else either, ignoring case) is ``text``."""
        options = await loc.evaluate(
            "(el) => [...el.options].map((o) => [o.value, o.text.replace(/\\s+/g, ' ').trim()])",
            timeout=self._left(1.0) * 1000,
        )
        want = text.strip()
        for match in (
            lambda value, label: label == want,
            lambda value, label: value == want,
            lambda value, label: want.lower() in (label.lower(), value.lower()),
        ):
            for i, (value, label) in enumerate(options):
                if match(value, label):
                    await loc.select_option(index=i, timeout=self._left(self.op_timeout) * 1000)
                    return label
        shown = ", ".join(repr(label) for _, label in options[:30]) or "none"
        raise EnvironmentFailure(f"{what} has no option {text!r}; its options: {shown}")

    @action
    async def scroll(
        self, direction: Literal["down", "up"] = "down", amount: float = 1.0, unit: Literal["pages", "pixels"] = "pages"
    ) -> str:
        """Scroll the current page (or its main scrollable area) up or down.

        Args:
            direction: "down" or "up".
            amount: How far, counted in the unit (e.g. 1 page, or 500 pixels).
            unit: "pages" (viewport heights) or "pixels".
        """

        async def work(page: "Page") -> str:
            sign = -1 if direction == "up" else 1
            r = await page.evaluate(scripts.SCROLL_JS, [sign * abs(amount), unit == "pages"])
            where = "the page" if r["where"] == "page" else "the scrollable area"
            if r["moved"] == 0:
                edge = "top" if direction == "up" else "bottom"
                return f"Cannot scroll {direction}: {where} is at the {edge} (y={r['y']} of {r['height']} px)."
            return f"Scrolled {where} {direction} by {abs(r['moved'])} px: now at y={r['y']} of {r['height']} px."

        return await self._run(work)

    @action
    async def back(self) -> str:
        """Go back to the previous page in the current tab's history."""

        async def work(page: "Page") -> str:
            before = page.url
            response = await page.go_back(wait_until="domcontentloaded", timeout=self._left(self.op_timeout) * 1000)
            if response is None and page.url == before:
                raise EnvironmentFailure("there is no earlier page in this tab's history")
            await self._settle(page)
            return f"Went back to {page.url} — title {await page.title()!r}."

        return await self._run(work)

    @action
    async def open_tab(self, url: str) -> str:
        """Open a URL in a new tab, which becomes the current tab.

        Args:
            url: The address to open in the new tab.
        """

        checked = await self._check(url)

        async def work(_page: "Page") -> str:
            assert self._context is not None
            if len(self._tabs) >= self.max_tabs:
                raise EnvironmentFailure(
                    f"{len(self._tabs)} tabs are open, the limit (max_tabs={self.max_tabs}): close one with close_tab"
                )
            page = await self._context.new_page()
            self._current = self._register(page)
            return await self._open(page, checked)

        return await self._run(work)

    def _tab(self, tab_id: int) -> "Page":
        page = self._tabs.get(tab_id)
        if page is None:
            raise EnvironmentFailure(f"there is no tab {tab_id}; open tabs: {sorted(self._tabs)}")
        return page

    @action
    async def switch_tab(self, tab_id: int) -> str:
        """Make another tab the current one.

        Args:
            tab_id: The tab's id, as listed in the state.
        """

        async def work(_page: "Page") -> str:
            page = self._tab(tab_id)
            self._current = tab_id
            await page.bring_to_front()
            return f"Switched to tab [{tab_id}]: {page.url} — title {await page.title()!r}."

        return await self._run(work)

    @action
    async def close_tab(self, tab_id: int) -> str:
        """Close a tab; the most recently opened remaining tab becomes current.

        Args:
            tab_id: The tab's id, as listed in the state.
        """

        async def work(_page: "Page") -> str:
            page = self._tab(tab_id)
            await page.close()
            self._on_page_close(page)
            current = await self._page()
            if self._current is not None:
                await current.bring_to_front()
            return f"Closed tab [{tab_id}]; the current tab is [{self._current}] ({current.url})."

        return await self._run(work)

    @action
    async def extract(self, selector: str = "", start: int = 0, max_chars: int = 6000) -> str:
        """Read the current page as markdown (headings, paragraphs, links as `[text](url)`, lists, tables).

        Args:
            selector: Only this part of the page (a CSS selector, e.g. "main"); empty for the whole page.
            start: Character offset to start from, to continue a long page.
            max_chars: At most this many characters (up to 20000).
        """

        async def work(page: "Page") -> str:
            limit = max(200, min(int(max_chars), 20_000))
            offset = max(0, int(start))
            tab = self._tab_id(page)
            if await page.evaluate("() => document.contentType") == "application/pdf":
                note = "" if tab in self._pdf_tabs else await self._pdf_note(page, page.url) + "\n"
                pdf = self._pdf_tabs.get(tab)
                if pdf is None:
                    return note.strip()
                data = read_beneath(self.folder, str(pdf.relative_to(self.folder)), MAX_PDF_BYTES)
                if data is None:
                    raise EnvironmentFailure(f"the saved PDF {pdf} is gone from the run folder")
                text = _pdf_text(data)
                body = text if text is not None else "(install pypdf to read PDF text)"
                header = f"PDF {page.url}, saved to {pdf} ({len(data):,} bytes)"
                return f"{note}{header}\n\n{body[offset : offset + limit]}"
            md = await page.evaluate(scripts.MARKDOWN_JS, [selector, offset + limit + 100_000])
            if md is None:
                raise EnvironmentFailure(f"no element matches {selector!r} on {page.url}")
            title = await page.title()
            header = f"# {title}\nURL: {page.url}\n\n" if offset == 0 and not selector else ""
            chunk = md[offset : offset + limit]
            if not chunk.strip():
                past = f" past offset {offset}" if offset else ""
                return f"{header}(no text{past}; {len(md)} characters in all)"
            more = ""
            if offset + limit < len(md):
                more = (
                    f"\n\n[… characters {offset}–{offset + limit} of {len(md)}; call extract with "
                    f"start={offset + limit} for more]"
                )
            return header + chunk + more

        return await self._run(work, refresh=False)

    @action
    async def screenshot(self, full_page: bool = False) -> str:
        """Take a screenshot of the current tab; it is saved in the run folder and shown as the vision image.

        Args:
            full_page: The whole page instead of the visible viewport.
        """

        async def work(page: "Page") -> str:
            png = await page.screenshot(type="png", full_page=full_page, timeout=self._left(self.op_timeout) * 1000)
            self._png = png
            self._shots += 1
            path = _write_new(self.folder, "screenshots", f"screenshot-{self._shots}.png", png)
            width, height = _png_size(png)
            return (
                f"Screenshot of tab [{self._current}] ({page.url}): {width}x{height} PNG, "
                f"{len(png) // 1024} KB, saved to {path}; it is attached as the vision image."
            )

        out = await self._run(work, refresh=False)
        return out


async def _stop_quietly(pw: "Playwright") -> None:
    try:
        await asyncio.wait_for(pw.stop(), 5)
    except Exception:  # noqa: BLE001 - best effort
        pass


def _alive(pid: int) -> bool:
    """Whether a process runs (not gone, not a zombie); True when /proc cannot tell."""
    if not os.path.isdir("/proc"):
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


__all__ = ["Browser", "find_chromium", "system_chromium", "playwright_chromium"]
