"""Chromium behind the boundary: bubblewrap around the browser, the egress proxy as its only network.

A page the model opens is hostile, and so is the model that chose it. The browser therefore runs
the way sandboxed code does (:mod:`tea_notebook.envs.boundary`): inside bubblewrap, as uid 65534 in
its own user, PID, IPC, UTS, cgroup and network namespaces with no capabilities and the sandbox's
seccomp filter — an unprivileged identity on the host too (nobody when root starts it); with a
read-only view of the system folders (what Chromium needs: ``/usr``, the loader cache, fonts, the
public certificates) and, writable, only its profile and a private downloads folder,
both in a host temporary folder of this session. Nothing else of the host is there: no home folder,
no Jupyter runtime folder (its servers' tokens), no workspace database, no run folders, and none of
the kernel's environment variables (API keys).

Its network namespace holds only a loopback device. ``bridge.py`` (:data:`~tea_notebook.egress.BRIDGE_SCRIPT`)
listens on ``127.0.0.1:PORT`` there, forwards to the host's :class:`~tea_notebook.egress.EgressProxy`
through its bind-mounted Unix socket, and starts Chromium (``--proxy-server`` pointing at the bridge,
loopback not bypassed): every request a page makes is checked by the workspace's policy, and nothing
else leaves.

Playwright starts "the browser" as a program it is given: :func:`confine` writes a small launcher
script that ``exec``s bwrap → bridge → Chromium with Playwright's arguments, and Playwright talks to
Chromium over the pipe on file descriptors 3 and 4, which bwrap and the bridge pass on.

Where bubblewrap cannot run (not installed, user namespaces off, ``TEA_SANDBOX=process``), Chromium
runs on the host as this user, and says so once, loudly (:class:`BrowserWarning`); the proxy then
listens on a loopback port of the host and the policy still applies to what the browser fetches.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from tea_notebook.envs import boundary

if TYPE_CHECKING:
    from tea_notebook.egress.policy import Decision, EgressPolicy
    from tea_notebook.egress.proxy import EgressProxy

#: the bridge's port inside the browser's own network namespace (nothing else listens there)
BRIDGE_PORT = 3128
#: where the proxy's socket appears inside the sandbox
INSIDE_SOCKET = "/run/tea/egress.sock"
# what of /etc Chromium reads besides the loader's files: fonts, certificates (for https), Debian's
# launcher settings; the font cache so that fontconfig does not rebuild it at each start
ETC_BROWSER = (
    "/etc/fonts",
    *boundary.CERTIFICATES,  # the public ones only: never /etc/ssl/private or /etc/pki/tls/private
    "/etc/chromium",
    "/etc/chromium.d",
    "/etc/mime.types",
    "/var/cache/fontconfig",
)
SHM_MB = 1024  # /dev/shm and /tmp inside: tmpfs limits, memory is only taken when used
# what the browser's environment holds; everything else of the kernel's (API keys …) is dropped
BROWSER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "TMPDIR": "/tmp"}
# with bubblewrap as the boundary Chromium's own sandbox cannot start (no set-uid helper, no
# nested user namespaces: --disable-userns): --no-sandbox INSIDE bwrap is the supported setup
PROXY_ARGS = (
    "--proxy-bypass-list=<-loopback>",  # loopback too goes to the proxy (Chromium bypasses it by default)
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",  # no UDP around the proxy
)


class BrowserWarning(boundary.SandboxWarning):
    """Shown once per process when the browser runs on the host, outside bubblewrap."""


@dataclass
class BrowserBox:
    """Where one browser session runs: what to give Playwright, and what to clean up.

    ``executable`` is what Playwright launches (the launcher script, or Chromium itself in the
    fallback); ``args`` go on Chromium's command line; ``profile`` and ``downloads`` are the only
    folders the browser writes (host paths, the same inside the sandbox)."""

    mechanism: str  # "bubblewrap" or "process"
    folder: Path
    profile: Path
    downloads: Path
    executable: str
    args: list[str]
    env: dict[str, str]
    proxy: "EgressProxy"
    chromium: str
    warning: str | None = None
    seccomp: bool = False
    extra: list[str] = field(default_factory=list)
    host_uid: int | None = None  # who Chromium is on the host (bubblewrap only)
    stage: str | None = None  # the empty folder the launcher stages its binds on (as nobody)

    @property
    def playwright_proxy(self) -> dict[str, str] | None:
        """Playwright's ``proxy`` option for the fallback's TCP proxy (its address and per-session
        credential: Chromium takes no credential on ``--proxy-server``); None inside bubblewrap, where
        the proxy is reached through the sandbox's bridge and ``args`` names it."""
        if self.proxy.password is None or self.proxy.username is None:
            return None
        return {"server": self.proxy.url, "username": self.proxy.username, "password": self.proxy.password}

    def describe(self) -> str:
        """One line: what confines this browser."""
        if self.mechanism == "bubblewrap":
            filt = "seccomp filter on" if self.seccomp else "no seccomp filter (not x86-64)"
            return (
                f"bubblewrap: Chromium as uid {boundary.SANDBOX_UID} in its own user/pid/net namespaces, no "
                f"capabilities, {boundary.host_identity(self.host_uid)}, {filt}; only its profile and downloads "
                "writable; network only through the egress proxy"
            )
        return f"on the host as this user, network through the egress proxy ({self.warning})"

    def close(self) -> None:
        """Stop the proxy and delete the session's folder (profile, downloads, launcher)."""
        self.proxy.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.stage is not None:
            try:
                os.rmdir(self.stage)
            except OSError:
                pass


def fallback_warning(text: str) -> None:
    """Warn once per process that the browser runs without its boundary (the notebook shows it)."""
    boundary.fallback_warning(text, BrowserWarning, stacklevel=5)


def fallback_reason(chosen: bool = False) -> str:
    """What the fallback does not enforce, and why it is used, in one sentence."""
    if chosen:
        why = "isolation='process' was chosen"
    elif os.environ.get("TEA_SANDBOX", "").lower() == "process":
        why = "TEA_SANDBOX=process is set"
    elif shutil.which("bwrap") is None:
        why = "bubblewrap is not installed"
    else:
        why = "bubblewrap cannot run here"
    who = "AS ROOT" if hasattr(os, "geteuid") and os.geteuid() == 0 else "as this user"
    return (
        f"browser without its security boundary ({why}): Chromium runs on the host {who}, and a page that "
        "exploits it reaches every file this user can read (home folder, Jupyter tokens, the workspace); "
        "its requests still go through the egress policy. Install bubblewrap (apt-get install bubblewrap) "
        "for the real boundary."
    )


def confine(
    chromium: str,
    policy: "EgressPolicy",
    on_refusal: "Callable[[Decision], None] | None" = None,
    *,
    isolation: str = "auto",
) -> BrowserBox:
    """Prepare one browser session around ``chromium``: a private folder (profile, downloads), the
    egress proxy, and — with bubblewrap — the launcher that starts Chromium inside the sandbox.

    ``isolation``: ``"auto"`` (bubblewrap when it can run, else the fallback with a warning),
    ``"bubblewrap"`` (refuse to start without it) or ``"process"`` (the fallback, chosen)."""
    from tea_notebook.egress.proxy import EgressProxy

    if isolation not in ("auto", "bubblewrap", "process"):
        raise ValueError(f"isolation must be 'auto', 'bubblewrap' or 'process', not {isolation!r}")
    tool = boundary.bubblewrap() if isolation != "process" else None
    if tool is None and isolation == "bubblewrap":
        raise RuntimeError(fallback_reason() + " (isolation='bubblewrap' demands it)")
    folder = Path(tempfile.mkdtemp(prefix="tea-browser-"))  # 0700
    profile, downloads = folder / "profile", folder / "downloads"
    profile.mkdir()
    downloads.mkdir()
    # without bubblewrap the proxy is a loopback TCP port any local user could reach: it demands a secret
    proxy = EgressProxy(policy, on_refusal, tcp=tool is None, credential=tool is None)
    stage: str | None = None
    try:
        proxy.start()
        if tool is None:
            warning = fallback_reason(chosen=isolation == "process")
            fallback_warning(warning)
            env = {**BROWSER_ENV, "HOME": str(folder), "TMPDIR": str(folder)}
            args = list(PROXY_ARGS)  # the proxy and its credential go to Playwright: BrowserBox.playwright_proxy
            return BrowserBox("process", folder, profile, downloads, chromium, args, env, proxy, chromium, warning)
        host_uid = _host_identity(chromium)
        if host_uid is not None:
            # Chromium is nobody on the host: what it writes, and the proxy's socket, become its own
            stage = tempfile.mkdtemp(prefix="tea-stage-")
            for path in (profile, downloads, Path(str(proxy.socket_path))):
                os.chown(path, host_uid, boundary.HOST_GID)
        launcher, seccomp = _write_launcher(tool, folder, chromium, str(proxy.socket_path), host_uid, stage)
        args = [f"--proxy-server=http://127.0.0.1:{BRIDGE_PORT}", *PROXY_ARGS]
        return BrowserBox(
            "bubblewrap", folder, profile, downloads, str(launcher), args, dict(BROWSER_ENV), proxy, chromium,
            seccomp=seccomp, host_uid=boundary.sandbox_host_uid(host_uid), stage=stage,
        )  # fmt: skip
    except BaseException:
        proxy.close()
        shutil.rmtree(folder, ignore_errors=True)
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        raise


def _host_identity(chromium: str) -> int | None:
    """The unprivileged host uid Chromium runs as when this process is root
    (:func:`~tea_notebook.envs.boundary.unprivileged_host`), when that uid can read what it runs
    (Chromium, the bridge's interpreter and script); None: this process's own uid."""
    host_uid = boundary.unprivileged_host()
    if host_uid is None:
        return None
    from tea_notebook.egress import BRIDGE_SCRIPT

    python, folders = _base_python()
    needed = [os.path.realpath(chromium), os.path.dirname(os.path.realpath(chromium)), python, *folders]
    needed.append(str(BRIDGE_SCRIPT))
    return host_uid if all(boundary.readable_by_others(path) for path in needed) else None


def bwrap_args(
    tool: str,
    folder: Path,
    chromium: str,
    socket_path: str,
    host_uid: int | None = None,
    stage: str | None = None,
) -> tuple[list[str], bool]:
    """The bwrap argument list for a browser whose session folder is ``folder`` (its ``profile`` and
    ``downloads`` writable at their host paths), with the proxy's socket at :data:`INSIDE_SOCKET`.
    File descriptor 9 must hold the seccomp program when the second value is True (the launcher opens it).
    With ``host_uid`` (root only) bubblewrap runs as that uid, started by
    :data:`~tea_notebook.envs.boundary.STAGE_SCRIPT`, which first binds the session's files, the
    interpreter's folders and the socket on ``stage`` (they may lie where only root can go)."""
    python, folders = _base_python()
    mounts: list[list[str | int | None]] = []

    def source(path: str, kind: str = "dir") -> str:
        if host_uid is None or stage is None:
            return path
        mounts.append([path, str(len(mounts)), kind, None])
        return os.path.join(stage, str(len(mounts) - 1))

    args = [tool, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"]
    uid = str(boundary.SANDBOX_UID)
    args += ["--uid", uid, "--gid", uid, "--cap-drop", "ALL", "--hostname", "browser", "--clearenv"]
    for name, value in BROWSER_ENV.items():
        args += ["--setenv", name, value]
    args += boundary.system_binds()  # the sandbox's own read-only system view
    for path in boundary.ETC_ALWAYS + ETC_BROWSER:
        args += ["--ro-bind-try", path, path]
    args += ["--ro-bind", source(str(folder / "passwd"), "file"), "/etc/passwd"]
    args += ["--ro-bind", source(str(folder / "group"), "file"), "/etc/group"]
    args += ["--proc", "/proc", *boundary.PROC_SYS]
    size = str(SHM_MB * 1024 * 1024)
    args += ["--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    args += ["--size", size, "--tmpfs", "/tmp"]
    # after the private /tmp: an interpreter or a Chromium that lives under /tmp stays visible
    for path in folders:
        args += ["--ro-bind", source(path), path]
    real = os.path.realpath(chromium)
    if not real.startswith("/usr/"):  # Playwright's own Chromium: its folder only
        args += ["--ro-bind", source(os.path.dirname(real)), os.path.dirname(real)]
    from tea_notebook.egress import BRIDGE_SCRIPT

    args += ["--ro-bind", source(str(BRIDGE_SCRIPT), "file"), str(BRIDGE_SCRIPT)]
    args += ["--ro-bind", source(socket_path, "file"), INSIDE_SOCKET]
    for name in ("profile", "downloads"):
        args += ["--bind", source(str(folder / name)), str(folder / name)]
    args += [*boundary.ROOT_READ_ONLY, "--chdir", "/tmp"]
    seccomp = boundary.seccomp_program() is not None
    if seccomp:
        args += ["--seccomp", "9"]
    args += ["--", python, "-I", "-S", str(BRIDGE_SCRIPT), "--socket", INSIDE_SOCKET, "--port", str(BRIDGE_PORT)]
    args += ["--", chromium]
    if host_uid is not None and stage is not None:
        config = {"uid": host_uid, "gid": boundary.HOST_GID, "stage": stage, "mounts": mounts}
        args = [sys.executable, "-I", "-S", str(boundary.STAGE_SCRIPT), json.dumps(config), "--", *args]
    return args, seccomp


def _base_python() -> tuple[str, tuple[str, ...]]:
    """The interpreter the bridge runs with (this one's base, started as its real binary: no
    virtual environment, ``-I -S``: the standard library only) and its folders outside ``/usr``;
    a prefix that holds the home folder is refused (binding it would show the browser all of it)."""
    python = os.path.realpath(sys.executable)
    try:
        folders = boundary.folders_to_bind(python, [sys.base_prefix, sys.base_exec_prefix], "Use an installed Python.")
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None
    return python, folders


def _write_launcher(
    tool: str, folder: Path, chromium: str, socket_path: str, host_uid: int | None = None, stage: str | None = None
) -> tuple[Path, bool]:
    """Write the files the launcher binds (passwd, group, the seccomp program) and the launcher itself:
    ``exec bwrap … -- python bridge.py … -- chromium "$@"``, which Playwright starts as "the browser"."""
    (folder / "passwd").write_text(boundary.PASSWD)
    (folder / "group").write_text(boundary.GROUP)
    args, seccomp = bwrap_args(tool, folder, chromium, socket_path, host_uid, stage)
    redirect = ""
    if seccomp:
        program = boundary.seccomp_program()
        assert program is not None
        (folder / "seccomp.bpf").write_bytes(program)
        redirect = f" 9<{_quote(str(folder / 'seccomp.bpf'))}"
    launcher = folder / "launch.sh"
    launcher.write_text("#!/bin/sh\nexec " + " ".join(_quote(a) for a in args) + ' "$@"' + redirect + "\n")
    launcher.chmod(0o700)
    return launcher, seccomp


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


__all__ = ["BrowserBox", "BrowserWarning", "bwrap_args", "confine", "fallback_reason"]
