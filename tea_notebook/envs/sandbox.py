"""The Python / shell sandbox: code runs in a child process behind a security boundary, never in
the user's kernel.

The boundary is bubblewrap (see :mod:`tea_notebook.envs.boundary`): its own user, PID, IPC, UTS and
network namespaces, uid 65534 with no capabilities, a read-only view of the system and interpreter
folders, the run folder as the only writable place (with a disk quota), a private size-limited
``/tmp``, a seccomp filter, no network unless ``network=True``. Where bubblewrap cannot run, a
fallback child process says once, loudly, what is not enforced.

One sandbox per session keeps variables across calls. Limits: wall-clock time (an interval timer in
the worker, then a hard kill from here), CPU time, address space, processes, file size, disk use of
the run folder; an environment with no API keys or secrets. Every limit hit comes back as an
observation naming the limit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import itertools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tea_notebook._poll import readable
from tea_notebook._safe_open import folder_beneath
from tea_notebook.egress import BRIDGE_SCRIPT
from tea_notebook.envs import boundary
from tea_notebook.envs._sandbox_child import folder_usage
from tea_notebook.envs.base import Environment, EnvironmentFailure, action

if TYPE_CHECKING:
    from tea_notebook.egress.policy import Decision
    from tea_notebook.egress.proxy import EgressProxy
    from tea_notebook.protocol.context import Context

CHILD = Path(__file__).with_name("_sandbox_child.py")
PACKAGE = Path(__file__).resolve().parents[1]  # tea_notebook/, bound read-only (an editable install's too)
QUOTA_WATCH = 0.25  # seconds between the supervisor's checks of the run folder, during calls and between them
MAX_ENTRIES = 100_000  # files and folders a run folder may hold
MAX_REFUSALS_TOLD = 5  # refused network requests listed in one observation
STAGING_REFUSED = 125  # the exit status of _stage_child.py when it refused to stage (bubblewrap never ran)
# what sandboxed code inherits from the parent's environment; nothing else (no keys, no tokens)
PASSED_VARIABLES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
UNPRIVILEGED = boundary.SANDBOX_UID  # nobody
LIMIT_TEXT = {
    "timeout": "stopped at the wall-clock limit of {timeout:g} s",
    "cpu": "stopped at the CPU-time limit of {cpu:g} s",
    "memory": "stopped at the memory limit of {memory_mb} MB",
    "processes": "stopped at the process limit of {processes} processes",
    "file_size": "stopped at the file-size limit of {file_mb} MB",
    "disk": "stopped at the disk quota of {quota_mb} MB for the run folder",
    "interrupted": "interrupted",
}


@dataclass
class ExecResult:
    """What one sandbox call produced."""

    stdout: str = ""
    stderr: str = ""
    value: str | None = None
    error: dict[str, Any] | None = None
    limit: str | None = None
    exit_code: int | None = None
    duration: float = 0.0
    restarted: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the code ran to the end (for a shell command: exit code 0)."""
        return self.error is None and self.limit is None and self.exit_code in (None, 0)

    def text(self) -> str:
        """The observation an agent reads."""
        parts = []
        if self.stdout:
            parts.append(f"stdout:\n{self.stdout.rstrip()}")
        if self.stderr:
            parts.append(f"stderr:\n{self.stderr.rstrip()}")
        if self.value is not None:
            parts.append(f"value: {self.value}")
        if self.exit_code is not None:
            parts.append(f"exit code: {self.exit_code}")
        if self.error:
            parts.append((self.error.get("traceback") or f"{self.error['type']}: {self.error['message']}").rstrip())
        parts.extend(self.notes)
        return "\n".join(parts) or "(no output)"


class PythonSandbox(Environment):
    """A Python interpreter and shell in a separate, limited process; state persists across calls."""

    name = "python"
    description = (
        "Run Python code or shell commands in an isolated sandbox process (no network by default) with time, CPU, "
        "memory, process and disk limits. Variables persist across calls within the run."
    )
    rules = (
        "Use run_python for Python (the value of the last expression is shown, like a REPL) and run_shell for "
        "shell commands. The working directory is the sandbox folder inside this run's folder (the run folder, "
        "where the files environment works, is '..'); files you write stay for the run and only the run folder and "
        "/tmp are writable. There are no API keys or secrets in this environment, and no network unless it was "
        "enabled for this environment. A call that hits a limit is stopped "
        "and says which limit; after a hard kill the variables are gone."
    )
    category = "code"
    constraints = ["no secrets; no network unless enabled", "time, CPU, memory, process and disk limits"]
    #: whether running without bubblewrap is a fallback to warn about (not for a session meant to have none)
    boundary_expected = True

    def __init__(
        self,
        folder: Path,
        context: "Context | None" = None,
        *,
        timeout: float = 30.0,
        cpu_seconds: float | None = None,
        memory_mb: int = 2048,
        processes: int = 64,
        file_mb: int = 256,
        max_output: int = 20_000,
        env: dict[str, str] | None = None,
        python: str | None = None,
        drop_privileges: bool = True,
        confine: bool = False,
        network: bool = False,
        quota_mb: int = 1024,
        tmp_mb: int = 64,
        isolation: str = "auto",
        within: str | os.PathLike[str] | None = None,
    ):
        super().__init__(folder, context)
        if timeout <= 0 or memory_mb <= 0 or processes <= 0 or quota_mb <= 0 or tmp_mb <= 0:
            raise ValueError("timeout, memory_mb, processes, quota_mb and tmp_mb must be positive")
        if isolation not in ("auto", "bubblewrap", "process"):
            raise ValueError(f"isolation must be 'auto', 'bubblewrap' or 'process', not {isolation!r}")
        self.timeout = float(timeout)
        self.action_timeout = self.timeout + 30  # the sandbox enforces its own limits; this is a backstop
        self.cpu_seconds = float(cpu_seconds or timeout)
        self.memory_mb = int(memory_mb)
        self.processes = int(processes)
        self.file_mb = int(file_mb)
        self.max_output = int(max_output)
        self.extra_env = dict(env or {})
        self.python = python or sys.executable
        self.drop_privileges = drop_privileges
        self.confine = confine  # untrusted code: writes and reads only in the working directory, no programs
        self.network = bool(network)
        self.quota_mb = int(quota_mb)
        self.tmp_mb = int(tmp_mb)
        self.isolation = isolation
        # a folder above ``folder`` in which other sandboxed code can write (a check folder inside a
        # run folder): ``folder`` is then made and opened beneath it, never through a link left there
        self.within = Path(os.path.abspath(within)) if within is not None else None
        if self.within is not None and not Path(os.path.abspath(self.folder)).is_relative_to(self.within):
            raise ValueError(f"folder {self.folder} is not inside within={self.within}")
        self._root_fd: int | None = None  # the run folder, held open while a sandbox process may run
        self._stage: str | None = None  # an empty folder a start as nobody stages its binds on
        self.boundary: boundary.Boundary | None = None  # known once started
        self._proxy: "EgressProxy | None" = None  # the way out of a sandbox with network
        self._refusals: list[str] = []  # egress refusals not yet told in an observation
        self._warned_run = False
        self._over = True  # whether the run folder was over its quota at the last check (check first)
        self.workdir = self.folder / "sandbox"
        self._proc: subprocess.Popen | None = None
        self._request_pipe: Any = None  # the write end of the pipe the worker reads its requests from
        self._info: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._buffer = b""
        self._main: int | None = None
        self._groups: dict[str, Path] = {}  # cgroups by controller (pids, memory), when running as root
        self._events: dict[str, list[_EventFile]] = {}  # their event counters, read around every call
        self._inflight: int | None = None
        self.calls = 0
        self.restarts = 0
        self.last: ExecResult | None = None

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        await asyncio.to_thread(self._spawn)

    async def stop(self) -> None:
        self.kill()
        proxy, self._proxy = self._proxy, None
        if proxy is not None:
            proxy.close()

    async def reset(self) -> None:
        self.kill()
        await self.start()

    def kill(self) -> None:
        self._remove_stage()
        root_fd, self._root_fd = self._root_fd, None
        if root_fd is not None:
            os.close(root_fd)
        pipe, self._request_pipe = self._request_pipe, None
        if pipe is not None:
            pipe.close()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        groups, self._groups = self._groups, {}
        self._events = {}  # descriptors closed once no call still reads them
        for group in set(groups.values()):
            _remove_cgroup(group)
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass

    def _identity(self) -> tuple[int | None, int | None]:
        """Run as ``nobody`` when we are root, the interpreter is readable by other users and the
        run folder can be reached by them (under a private home folder it cannot: the sandbox then
        stays this user, in its own process namespace when available)."""
        if (
            self.drop_privileges
            and os.geteuid() == 0
            and _readable_by_others(self.python)
            and _reachable_by_others(self.folder)
        ):
            return UNPRIVILEGED, UNPRIVILEGED
        return None, None

    def _host_identity(self) -> int | None:
        """The unprivileged host uid a bubblewrap sandbox started by root runs as
        (:func:`~tea_notebook.envs.boundary.unprivileged_host`), when that uid can read the
        interpreter and this package; None: the sandbox is this process's own uid on the host."""
        host_uid = boundary.unprivileged_host()
        if host_uid is None:
            return None
        needed = [os.path.realpath(self.python), *boundary.interpreter_folders(self.python), str(PACKAGE)]
        return host_uid if all(boundary.readable_by_others(path) for path in needed) else None

    def _remove_stage(self) -> None:
        """Remove the empty folder the last start staged its binds on (they live on in no namespace
        the host uses: only the staging process's private one saw them)."""
        stage, self._stage = self._stage, None
        if stage is not None:
            try:
                os.rmdir(stage)
            except OSError:
                pass

    def _nproc_limit(self, uid: int | None) -> int:
        """RLIMIT_NPROC counts every process of the user, so allow what it already runs plus ours."""
        owner = os.geteuid() if uid is None else uid
        count = 0
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    if entry.stat().st_uid == owner:
                        count += 1
                except OSError:
                    continue
        return count + self.processes

    def _environment(self) -> dict[str, str]:
        env = {k: os.environ[k] for k in PASSED_VARIABLES if k in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update(
            HOME=str(self.workdir),
            TMPDIR=str(self.workdir / ".tmp"),
            PYTHONUNBUFFERED="1",
            PYTHONDONTWRITEBYTECODE="1",
            MPLBACKEND="Agg",
            OPENBLAS_NUM_THREADS="1",
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
        )
        env.update(self.extra_env)
        if self._proxy is not None:  # after the caller's variables: the proxy is the only way out
            url = self._proxy.client_url if self._proxy.tcp else f"http://127.0.0.1:{boundary.EGRESS_PORT}"
            for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
                env[name] = url
            env["NO_PROXY"] = env["no_proxy"] = ""
        return env

    def _egress(self, tcp: bool) -> "EgressProxy":
        """The egress proxy of this session (a Unix socket for bubblewrap, a loopback port otherwise)."""
        if self._proxy is not None and self._proxy.tcp != tcp:
            self._proxy.close()
            self._proxy = None
        if self._proxy is None:
            from tea_notebook.egress.proxy import EgressProxy

            # a loopback port any local user could reach: it serves only holders of its session secret
            self._proxy = EgressProxy(self.egress, on_refusal=self._refused, tcp=tcp, credential=True).start()
        return self._proxy

    def _refused(self, decision: "Decision") -> None:
        """A request of sandboxed code that the egress policy refused: a run event, and a note in the
        next observation (called from the proxy's thread)."""
        self._refusals.append(decision.reason)
        if self.context is not None:
            self.context.notice("egress_refused", decision.as_event())

    def _confinement(self) -> dict[str, Any]:
        """What confined code may touch: its working directory (read and write), the interpreter's
        own folders and installed packages (read)."""
        import site
        import sysconfig

        readable = {str(self.workdir), sys.prefix, sys.base_prefix, sys.exec_prefix, "/dev/null", "/dev/urandom"}
        readable.update(p for p in sys.path if p and os.path.isdir(p))
        readable.update(v for v in sysconfig.get_paths().values() if v)
        readable.update(site.getsitepackages())
        return {"read": sorted(readable), "write": [str(self.workdir)], "network": self.network}

    def _prepare_folders(self, uid: int | None, gid: int | None) -> int:
        """The working directory and its ``.tmp`` as real folders, given to ``uid`` when set. Worked
        through folder descriptors without following symlinks: earlier sandbox code may have put a
        symlink in their place, and following it (mkdir, chown as root) would reach the host.
        Returns a descriptor of the run folder (the caller closes it): bubblewrap binds that folder,
        not whatever its path leads to by the time it starts. With ``within`` the run folder itself
        is reached beneath that folder, through no link that leads out of it."""
        if self.within is not None:
            rel = os.path.relpath(os.path.abspath(self.folder), self.within)
            fds = [folder_beneath(self.within, rel, create=True).fd]
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
            fds = [os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
        try:
            for name in (self.workdir.name, ".tmp"):
                fds.append(_plain_folder(fds[-1], name))
                if uid is not None:
                    os.fchown(fds[-1], uid, gid)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        for fd in fds[1:]:
            os.close(fd)
        return fds[0]

    def _spawn(self) -> None:
        tool = None if self.isolation == "process" else boundary.bubblewrap()
        if tool is None and self.isolation == "bubblewrap":
            raise EnvironmentFailure(
                "isolation='bubblewrap' was asked for but bubblewrap cannot run here (install it with "
                "'apt-get install bubblewrap'; user namespaces must be enabled)"
            )
        uid, gid = (None, None) if tool else self._identity()
        host_uid = self._host_identity() if tool else None
        owner = (host_uid, boundary.HOST_GID) if host_uid is not None else (uid, gid)
        root_fd = self._prepare_folders(*owner)
        if self._root_fd is not None:
            os.close(self._root_fd)
        self._root_fd = root_fd
        proxy = self._egress(tcp=tool is None) if self.network else None
        stage = None
        if host_uid is not None:
            # the sandbox is nobody on the host: the run folder (what root left there too: files a
            # tool wrote, a restored fork) and the proxy's socket become its own
            os.fchown(root_fd, host_uid, boundary.HOST_GID)
            _hand_over(root_fd, host_uid, boundary.HOST_GID)
            if proxy is not None and proxy.socket_path:
                os.chown(proxy.socket_path, host_uid, boundary.HOST_GID)
            self._remove_stage()
            stage = self._stage = tempfile.mkdtemp(prefix="tea-stage-")
        # the uid the kernel counts processes against: this one, unless the fallback drops to nobody
        outside_root = os.geteuid() == 0 and uid is None
        config = {
            "workdir": str(self.workdir),
            "iodir": str(self.workdir / ".tmp"),
            "timeout": self.timeout,
            "cpu_seconds": self.cpu_seconds,
            "cpu_budget": int(max(3600, self.cpu_seconds * 20)),
            "memory_mb": self.memory_mb,
            "nproc": None if outside_root else self._nproc_limit(uid),  # RLIMIT_NPROC does not bind root
            "file_mb": min(self.file_mb, self.quota_mb),
            "max_output": self.max_output,
            "uid": uid,
            "gid": gid,
            "confine": self._confinement() if self.confine else None,
            # inside bubblewrap the supervisor serves the loopback port that leads to the egress proxy
            "egress": {"bridge": str(BRIDGE_SCRIPT), "socket": boundary.EGRESS_SOCKET, "port": boundary.EGRESS_PORT}
            if self.network and tool
            else None,
            # the supervisor watches the run folder all the time, between calls too
            "quota": {
                "root": str(self.folder),
                "bytes": self.quota_mb * 2**20,
                "entries": MAX_ENTRIES,
                "interval": QUOTA_WATCH,
            },
        }
        # requests go from here straight to the worker, through a pipe of which the sandbox gets only
        # the read end; the supervisor learns each request's id from an expect line on its channel
        requests_r, requests_w = os.pipe()
        config["requests_fd"] = requests_r
        command = [self.python, "-I", "-B", "-X", "utf8", str(CHILD), json.dumps(config)]
        fds: list[int] = []
        if tool:
            prefix, fds = boundary.bwrap_command(
                tool,
                python=self.python,
                folder=self.folder,
                folder_fd=root_fd,
                workdir=self.workdir,
                readonly=[str(PACKAGE)],  # the sandbox's own server, and tea_notebook importable inside
                network=self.network,
                tmp_mb=self.tmp_mb,
                egress_socket=proxy.socket_path if proxy is not None else None,
                host_uid=host_uid,
                stage=stage,
            )
        else:
            prefix = _namespace_prefix()
        started = time.perf_counter()
        try:
            self._proc = _popen(
                [*prefix, *command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd="/" if tool else str(self.workdir),  # bubblewrap enters the working directory itself
                env=self._environment(),
                start_new_session=True,
                pass_fds=[*fds, root_fd, requests_r] if tool else [*fds, requests_r],
            )
        except OSError as exc:
            os.close(requests_w)
            raise EnvironmentFailure(f"cannot start the sandbox interpreter {self.python}: {exc.strerror}") from None
        finally:
            for fd in (*fds, requests_r):
                os.close(fd)
        self._request_pipe = os.fdopen(requests_w, "wb", buffering=0)
        self._buffer = b""
        hello = self._read_line(time.monotonic() + 15)
        self._remove_stage()  # bubblewrap has bound what it staged (or never will)
        if hello is None or not hello.get("ready"):
            status = _exit_status(self._proc)
            self.kill()
            if status == STAGING_REFUSED and stage is not None:
                raise EnvironmentFailure(
                    "the sandbox was not started: a folder it binds is no longer the one the host checked "
                    "(its path was changed to lead elsewhere while the sandbox started), or the kernel refused "
                    "to stage its binds for the unprivileged user it runs as"
                )
            raise EnvironmentFailure("the sandbox process did not start (it exited before saying it was ready)")
        self._info = {**hello, "startup": time.perf_counter() - started, "isolated": bool(prefix)}
        inside = _descendants(self._proc.pid)  # bwrap's init, the supervisor, the worker (nothing else runs yet)
        self._main = _host_pid(inside, hello.get("pid")) or self._proc.pid
        self._groups, self._events = {}, {}
        if outside_root:
            # the whole sandbox: its processes, and its memory outside any one address space (memory
            # files, shared memory, /tmp and /dev/shm) — RLIMIT_AS only bounds each process
            total = (self.memory_mb + 2 * self.tmp_mb + 64) * 2**20
            self._groups = _cgroups(
                {
                    "pids": {"pids.max": str(self.processes + 4)},
                    "memory": {
                        "?memory.max": str(total),
                        "?memory.swap.max": "0",
                        "?memory.limit_in_bytes": str(total),
                        "?memory.memsw.limit_in_bytes": str(total),
                    },
                },
                [self._proc.pid, *inside],
            )
            counters = {"pids": ("pids.events",), "memory": ("memory.events", "memory.oom_control")}
            self._events = {
                controller: [_EventFile(self._groups[controller] / name) for name in files]
                for controller, files in counters.items()
                if controller in self._groups
            }
            if "pids" not in self._groups:
                self._info["warning"] = "no process limit: running as root without a writable pids cgroup"
        if tool:
            self.boundary = boundary.Boundary(
                "bubblewrap",
                self.network,
                boundary.seccomp_program() is not None,
                hello.get("uid"),
                host_uid=boundary.sandbox_host_uid(host_uid),
            )
        else:
            reasons = boundary.fallback_reasons(
                root_inside=hello.get("uid") == 0, isolated=bool(prefix), chosen=self.isolation == "process"
            )
            if self.network:
                reasons += (
                    " With network=True the host's network is shared: the egress policy binds only programs that "
                    "use HTTP_PROXY (set to its proxy)."
                )
            self.boundary = boundary.Boundary("process", True, False, hello.get("uid"), reasons)
            if self.boundary_expected:
                boundary.fallback_warning(reasons)

    # -- talking to the child ---------------------------------------------------------------
    def _read_line(self, deadline: float) -> dict[str, Any] | None:
        """The next JSON object from the sandbox's supervisor, or None at the deadline, when it died
        or when the session was stopped meanwhile (``kill`` from another thread closes the pipe)."""
        proc = self._proc
        if proc is None or proc.stdout is None:
            return None
        try:
            fd = proc.stdout.fileno()
        except ValueError:
            return None
        while True:
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._proc is not proc:
                    return None
                try:
                    if not readable(fd, min(remaining, 0.5)):
                        continue
                    chunk = os.read(fd, 65536)
                except (OSError, ValueError):
                    return None
                if not chunk:
                    return None
                self._buffer += chunk
            line, _, self._buffer = self._buffer.partition(b"\n")
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                return message

    def disk_usage(self) -> tuple[int, int]:
        """Bytes and entries of the run folder: walked through folder descriptors (so nesting past
        PATH_MAX is counted), symlinks not followed. The count stops early past :data:`MAX_ENTRIES`,
        which is itself over quota. (Files deleted but held open are counted by the supervisor inside
        the sandbox, which sees its processes' descriptors.)"""
        held = self._root_fd  # the folder the sandbox has, not what its path leads to now
        try:
            fd = os.dup(held) if held is not None else None  # kill() may close it meanwhile
        except OSError:
            fd = None
        if fd is None:
            return folder_usage(self.folder, MAX_ENTRIES)
        try:
            return folder_usage(".", MAX_ENTRIES, dir_fd=fd)
        finally:
            os.close(fd)

    def _over_quota(self) -> tuple[int, int] | None:
        """The run folder's usage when it is over the quota, else None (remembered for the next call)."""
        used, entries = self.disk_usage()
        over = used > self.quota_mb * 1024 * 1024 or entries > MAX_ENTRIES
        self._over = over
        return (used, entries) if over else None

    def _quota_text(self, usage: tuple[int, int]) -> str:
        used, entries = usage
        what = f"{used / 2**20:.1f} MB" if entries <= MAX_ENTRIES else f"more than {MAX_ENTRIES:,} files"
        return f"the run folder {self.folder} holds {what}; its quota is {self.quota_mb} MB and {MAX_ENTRIES:,} files"

    def _send(self, payload: dict[str, Any]) -> None:
        """An interrupt to the supervisor; a request straight to the worker, after telling the
        supervisor its id (so the answer finds that id expected, however soon it comes back)."""
        proc, pipe = self._proc, self._request_pipe
        if proc is None or proc.stdin is None:
            raise BrokenPipeError
        if payload.get("op") == "interrupt":
            proc.stdin.write((json.dumps(payload) + "\n").encode())
            proc.stdin.flush()
            return
        if pipe is None:
            raise BrokenPipeError
        proc.stdin.write((json.dumps({"op": "expect", "id": payload["id"]}) + "\n").encode())
        proc.stdin.flush()
        # a leading newline too: a partial line user code left on the pipe cannot swallow the request
        data = memoryview(("\n" + json.dumps(payload) + "\n").encode())
        try:
            while data:
                data = data[pipe.write(data) :]
        except BrokenPipeError:
            pass  # the worker is gone: the supervisor says how, on its channel

    def interrupt(self) -> None:
        """Stop the code running now (it sees KeyboardInterrupt); the session survives. A request
        that was sent but has not started yet is stopped before it runs."""
        try:
            self._send({"op": "interrupt", "id": self._inflight})
        except (BrokenPipeError, OSError, ValueError):
            pass

    def request(self, op: str, timeout: float | None = None, **fields: Any) -> ExecResult:
        """Run one request; restarts a dead or killed child first (saying so). Network requests the
        egress policy refused meanwhile are listed in the result's notes."""
        result = self._request(op, timeout, **fields)
        refusals = []
        while self._refusals:  # the proxy's thread appends meanwhile: take them one at a time
            refusals.append(self._refusals.pop(0))
        told = list(dict.fromkeys(refusals))
        for reason in told[:MAX_REFUSALS_TOLD]:
            result.notes.append(f"Network request refused: {reason}")
        if len(told) > MAX_REFUSALS_TOLD:
            result.notes.append(f"… and {len(told) - MAX_REFUSALS_TOLD} more refused network requests")
        return result

    def _request(self, op: str, timeout: float | None = None, **fields: Any) -> ExecResult:
        limit = float(timeout or self.timeout)
        with self._lock:
            self.calls += 1
            restarted = False
            if self._proc is None or self._proc.poll() is not None:
                stopped = self._quota_death() if self._proc is not None else None
                restarted = self._proc is not None or self.calls > 1
                self._over = self._over or restarted  # it may have been stopped at the quota between calls
                self.kill()
                if stopped is not None:  # the supervisor stopped everything at the quota between calls
                    self._over = True
                    self.last = self._killed_at_quota(stopped, restarted)
                    return self.last
                self._spawn()
                self.restarts += restarted
            usage = self._over_quota() if self._over else None  # refused until files are deleted
            if usage is not None:
                result = ExecResult(error={"type": "DiskQuota", "message": self._quota_text(usage)}, limit="disk")
                result.notes.append(f"Not run: {self._quota_text(usage)}. Delete files to go on.")
                self.last = result
                return result
            rid = next(self._ids)
            proc, forks_failed, ooms = self._proc, self._fork_failures(), self._oom_kills()
            self._inflight = rid
            try:
                self._send({"id": rid, "op": op, "timeout": limit, **fields})
            except (BrokenPipeError, OSError, ValueError):
                self._inflight = None
                self.kill()
                raise EnvironmentFailure("the sandbox process is gone; the next call starts a new one") from None
            deadline = time.monotonic() + limit + 2.0
            answer = self._read_line(deadline)
            while answer is not None and answer.get("id") not in (rid, None):  # a late answer to an older call
                answer = self._read_line(deadline)
            self._inflight = None
            # the supervisor checks the run folder after every call and watches it all the time
            burst = (
                tuple(answer["disk"]) if answer is not None and answer.get("id") == rid and answer.get("disk") else None
            )
            if answer is not None and (answer.get("died") or {}).get("disk"):  # the watch stopped everything
                answer = {"disk": tuple(answer["died"]["disk"])}
            if answer is not None and "disk" in answer and answer.get("id") != rid:
                self.kill()
                self._over = True
                self.last = self._killed_at_quota(answer["disk"], restarted)
                return self.last
            death = answer.get("died") if answer is not None else None  # reported by the supervisor
            if death is not None:
                answer = None
            if answer is None and self._proc is not proc:  # stopped from outside (the run ended)
                result = ExecResult(error={"type": "SandboxStopped", "message": "the session was stopped"})
                result.notes.append("The sandbox was stopped while the code ran; variables were lost.")
                self.last = result
                return result
            if answer is None:
                died = death is not None or (self._proc is not None and self._proc.poll() is not None)
                if death is not None:
                    signal_no = death.get("signal")
                else:
                    signal_no = -self._proc.returncode if died and self._proc.returncode < 0 else None
                out_of_memory = not died and self._at_memory_limit()
                cgroup_oom = self._oom_kills() > ooms
                self.kill()
                if out_of_memory:
                    result = ExecResult(error={"type": "MemoryError", "message": "no answer"}, limit="memory")
                    result.notes.append(
                        f"Killed: the code used up the memory limit of {self.memory_mb} MB and the interpreter "
                        f"stopped responding; the session was restarted and variables were lost."
                    )
                elif cgroup_oom:
                    result = ExecResult(error={"type": "MemoryError", "message": "killed"}, limit="memory")
                    result.notes.append(
                        f"Killed: the sandbox as a whole (its processes, memory files, shared memory, /tmp) went "
                        f"past its memory limit of {self.memory_mb + 2 * self.tmp_mb + 64} MB; the session was "
                        "restarted and variables were lost."
                    )
                elif died:
                    cause = self._death_cause(signal_no)
                    result = ExecResult(
                        error={"type": "SandboxDied", "message": cause}, limit=self._death_limit(signal_no)
                    )
                    result.notes.append(f"The sandbox process died ({cause}); variables were lost.")
                else:
                    result = ExecResult(error={"type": "LimitHit", "message": "no answer"}, limit="timeout")
                    result.notes.append(
                        f"Killed at the wall-clock limit of {limit:g} s; the session was restarted and variables "
                        "were lost."
                    )
                result.restarted = restarted
                self.last = result
                return result
            result = ExecResult(
                stdout=answer.get("stdout", ""),
                stderr=answer.get("stderr", ""),
                value=answer.get("value") if op in ("exec", "call") else None,
                error=answer.get("error"),
                limit=answer.get("limit"),
                exit_code=answer.get("exit_code"),
                duration=answer.get("duration", 0.0),
                restarted=restarted,
            )
            for stream in ("stdout", "stderr"):
                size = answer.get(f"{stream}_size", 0)
                if size > self.max_output:
                    result.notes.append(f"({stream} truncated: {size:,} bytes in all, first {self.max_output:,} shown)")
            if result.limit and result.limit != "interrupted":
                result.notes.append(self._limit_note(result.limit, limit))
                self._reap_strays()
            elif self._fork_failures() > forks_failed:  # a shell (or caught error) met the process limit
                result.notes.append(
                    f"Sandbox limit: the process limit of {self.processes} processes was reached during this "
                    "call (starting a process failed); processes left over were stopped."
                )
                self._reap_strays()
            if burst is not None:
                self._over = True
                result.limit = "disk"
                result.error = result.error or {"type": "DiskQuota", "message": self._quota_text(burst)}
                result.notes.append(
                    f"Sandbox limit: this call went past the disk quota: {self._quota_text(burst)}. The next call "
                    "is refused until files are deleted."
                )
            if restarted:
                result.notes.append("(the sandbox had stopped and was restarted: earlier variables are gone)")
            self.last = result
            return result

    def _killed_at_quota(self, usage: tuple[int, int], restarted: bool) -> ExecResult:
        result = ExecResult(error={"type": "DiskQuota", "message": self._quota_text(usage)}, limit="disk")
        result.notes.append(
            f"Killed at the disk quota: {self._quota_text(usage)}; the session was restarted and "
            "variables were lost. Delete files to go on."
        )
        result.restarted = restarted
        return result

    def _quota_death(self) -> tuple[int, int] | None:
        """The run folder's usage a sandbox that has exited reported when it stopped at the quota
        (after a call, for files deleted but held open, or by its watch), from what it left on the
        channel; None when it ended otherwise."""
        deadline = time.monotonic() + 0.5  # its channel is at its end: this only bounds a stuck read
        while (message := self._read_line(deadline)) is not None:
            disk = (message.get("died") or {}).get("disk")
            if disk:
                return tuple(disk)
        return None

    def _limit_note(self, kind: str, timeout: float) -> str:
        text = LIMIT_TEXT.get(kind, kind).format(
            timeout=timeout,
            cpu=self.cpu_seconds,
            memory_mb=self.memory_mb,
            processes=self.processes,
            file_mb=min(self.file_mb, self.quota_mb),
            quota_mb=self.quota_mb,
        )
        return f"Sandbox limit: {text}. The session continues with its variables."

    def _fork_failures(self) -> int:
        """How often the pids cgroup refused a new process (0 without one)."""
        return sum(f.count(b"max") for f in self._events.get("pids", ()))

    def _oom_kills(self) -> int:
        """How often the memory cgroup killed a process of the sandbox (0 without one)."""
        return max([f.count(b"oom_kill") for f in self._events.get("memory", ())], default=0)

    def _at_memory_limit(self) -> bool:
        """True when the interpreter's address space reached (nearly) its limit."""
        pid = self._main or (self._proc.pid if self._proc is not None else None)
        for line in _read(Path(f"/proc/{pid}/status")).splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) >= self.memory_mb * 1024 * 0.95
        return False

    @staticmethod
    def _death_limit(signal_no: int | None) -> str | None:
        return {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file_size"}.get(signal_no)

    @staticmethod
    def _death_cause(signal_no: int | None) -> str:
        if signal_no == signal.SIGXCPU:
            return "killed by SIGXCPU at the CPU-time budget of the session"
        if signal_no:
            return f"killed by signal {signal.Signals(signal_no).name}"
        return "it exited"

    def _reap_strays(self) -> None:
        """After a limit hit, kill what user code left in the sandbox's process group (forked copies of
        a fork bomb, a shell's children) but keep the interpreter with its variables. Strays are
        stopped before they are killed so a fork bomb cannot refill the slots."""
        if self._proc is None:
            return
        main = self._main or self._proc.pid
        keep = {main, self._proc.pid, *_ancestors(main, self._proc.pid)}  # bwrap, its init, the supervisor
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            strays = set(_group_members(self._proc.pid, exclude=keep)) | (set(_descendants(self._proc.pid)) - keep)
            if "pids" in self._groups:  # also what left the process group (setsid)
                procs = _read(self._groups["pids"] / "cgroup.procs").split()
                strays.update(int(p) for p in procs if int(p) not in keep)
            if not strays:
                return
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                for pid in strays:
                    try:
                        os.kill(pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass
            time.sleep(0.01)

    async def _call(self, op: str, timeout: float | None, **fields: Any) -> ExecResult:
        work = asyncio.ensure_future(asyncio.to_thread(self.request, op, timeout, **fields))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            stop = getattr(self.context, "cancel", None)
            if stop is not None and stop.is_set():
                # the run was stopped: kill the child (restarted on the next call) so nothing the
                # code was about to do lands after the stop, even code that swallows KeyboardInterrupt
                self.kill()
            else:
                self.interrupt()  # a time limit: stop the code, keep the session
            raise

    # -- actions -------------------------------------------------------------------------------
    @action
    async def run_python(self, code: str, timeout: float | None = None) -> str:
        """Run Python code in the sandbox; variables persist across calls in this run.

        Args:
            code: Python source. The value of a final expression is shown, like a REPL.
            timeout: Seconds before the code is stopped (at most the sandbox's limit).
        """
        result = await self._call("exec", self._cap(timeout), code=code)
        return self._observe(result)

    @action
    async def run_shell(self, command: str, timeout: float | None = None) -> str:
        """Run a shell command (``/bin/sh -c``) in the sandbox's working directory with the same limits.

        Args:
            command: The command line.
            timeout: Seconds before the command is stopped (at most the sandbox's limit).
        """
        result = await self._call("shell", self._cap(timeout), command=command)
        return self._observe(result)

    @action
    async def reset_session(self) -> str:
        """Forget all variables and start a fresh interpreter (files in the working directory stay)."""
        await asyncio.to_thread(self._restart)
        return "The sandbox was reset: a fresh interpreter, no variables."

    def _restart(self) -> None:
        with self._lock:
            self.kill()
            self._spawn()

    def _cap(self, timeout: float | None) -> float:
        return self.timeout if not timeout or timeout <= 0 else min(float(timeout), self.timeout)

    def _observe(self, result: ExecResult) -> str:
        warning = self.boundary.warning if self.boundary is not None else None
        if warning and not self._warned_run:  # once per session, so the trajectory says it too
            self._warned_run = True
            result.notes.append(f"WARNING: {warning}")
        if result.error is not None or result.limit is not None:
            raise EnvironmentFailure(result.text())
        return result.text()

    # -- for the prompt and for people ------------------------------------------------------
    def state(self) -> str:
        alive = self._proc is not None and self._proc.poll() is None
        status = "running" if alive else "stopped (restarts on the next call)"
        user = self.boundary.describe() if self.boundary is not None else "not started"
        if self._info.get("warning"):
            user += f" ({self._info['warning']})"
        last = ""
        if self.last is not None:
            last = f"; last call {'ok' if self.last.ok else 'failed'} in {self.last.duration * 1000:.0f} ms"
        return (
            f"Python {self._info.get('python', '?')} sandbox, {status} in {user}; working directory {self.workdir}; "
            f"limits: {self.timeout:g} s wall, {self.cpu_seconds:g} s CPU, {self.memory_mb} MB, "
            f"{self.processes} processes; {self.calls} calls{last}"
        )

    @property
    def pid(self) -> int | None:
        """The interpreter's process id (None when stopped)."""
        return self._proc.pid if self._proc is not None else None

    def exec_sync(self, code: str, timeout: float | None = None) -> ExecResult:
        """Run Python code and return the full :class:`ExecResult` (for tool validation and tests)."""
        if self._proc is None:
            self._spawn()
        return self.request("exec", self._cap(timeout), code=code)


def _stats() -> dict[int, list[bytes]]:
    """pid → the fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, …) of every
    live (not zombie) process."""
    stats = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields and fields[0] != b"Z":
                stats[int(entry.name)] = fields
    return stats


def _group_members(pgid: int, exclude: set[int]) -> list[int]:
    """Live processes of a process group."""
    return [pid for pid, fields in _stats().items() if int(fields[2]) == pgid and pid not in exclude]


def _hand_over(root_fd: int, uid: int, gid: int) -> None:
    """Give the files and folders this process owns under the run folder (``root_fd``) to ``uid``:
    walked by folder descriptors, links neither followed nor changed, a file with other hard links
    left alone (its other name may be outside), at most :data:`MAX_ENTRIES` entries."""
    me, seen = os.geteuid(), 0
    for _top, dirs, files, top_fd in os.fwalk(".", dir_fd=root_fd, follow_symlinks=False):
        for name in dirs + files:
            seen += 1
            if seen > MAX_ENTRIES:
                return
            try:
                info = os.stat(name, dir_fd=top_fd, follow_symlinks=False)
                if info.st_uid != me or stat.S_ISLNK(info.st_mode):
                    continue
                if not stat.S_ISDIR(info.st_mode) and info.st_nlink > 1:
                    continue
                os.chown(name, uid, gid, dir_fd=top_fd, follow_symlinks=False)
            except OSError:
                continue


def _plain_folder(parent: int, name: str) -> int:
    """Open (creating it when missing) the folder ``name`` under the folder descriptor ``parent``,
    never through a symlink: a symlink or file in its place is removed first. Returns its descriptor."""
    for _ in range(5):
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
        except FileNotFoundError:
            try:
                os.mkdir(name, 0o755, dir_fd=parent)
            except FileExistsError:
                pass
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            os.unlink(name, dir_fd=parent)  # a symlink (or a file) where the folder belongs
    raise EnvironmentFailure(f"cannot make {name!r} a plain folder of the sandbox (it keeps changing)")


def _parents() -> dict[int, int]:
    """pid → parent pid of every live process."""
    return {pid: int(fields[1]) for pid, fields in _stats().items()}


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid``: through the kernel's children lists (only our own tree is
    read), or a scan of all of /proc where those lists are missing."""
    out, stack = [], [pid]
    try:
        while stack:
            current = stack.pop()
            for task in os.listdir(f"/proc/{current}/task"):
                for child in Path(f"/proc/{current}/task/{task}/children").read_text().split():
                    out.append(int(child))
                    stack.append(int(child))
    except OSError:  # a process ended during the walk, or no children lists here
        return _descendants_by_scan(pid)
    return [p for p in out if _alive(p)]


def _alive(pid: int) -> bool:
    """True unless ``pid`` is gone or a zombie."""
    stat = _read(Path(f"/proc/{pid}/stat"))
    return bool(stat) and stat.rsplit(")", 1)[1].split()[0] != "Z"


def _descendants_by_scan(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    out, stack = [], list(children.get(pid, []))
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(children.get(current, []))
    return out


def _ancestors(pid: int, top: int) -> list[int]:
    """The processes between ``top`` and ``pid`` (both excluded)."""
    parents, out = _parents(), []
    current = parents.get(pid)
    while current and current != top and current not in out:
        out.append(current)
        current = parents.get(current)
    return out


def _host_pid(candidates: list[int], inner_pid: int | None) -> int | None:
    """The host pid of the process among ``candidates`` whose pid in its own namespace is ``inner_pid``."""
    for pid in candidates:
        for line in _read(Path(f"/proc/{pid}/status")).splitlines():
            if line.startswith("NSpid:") and line.split()[-1] == str(inner_pid):
                return pid
    return None


def _readable_by_others(python: str) -> bool:
    """True when a user with no privileges could run ``python`` and read its standard library
    (``<prefix>/lib`` of that interpreter, which need not be this one)."""
    real = Path(os.path.realpath(python))
    try:
        if (real.stat().st_mode & 0o005) != 0o005:  # readable and runnable by others
            return False
    except OSError:
        return False
    return all(_reachable_by_others(path) for path in (real.parent, real.parent.parent / "lib"))


def _reachable_by_others(folder: Path) -> bool:
    """True when every existing folder on the way to ``folder`` can be entered by other users."""
    path = Path(os.path.abspath(folder))
    for part in [path, *path.parents]:
        try:
            mode = part.stat().st_mode
        except FileNotFoundError:
            continue  # created later (as root, 0o755 under the default umask)
        except OSError:
            return False
        if not mode & 0o001:
            return False
    return True


_SPAWNER: "concurrent.futures.ThreadPoolExecutor | None" = None


def _exit_status(proc: "subprocess.Popen[bytes] | None") -> int | None:
    """The exit status of a process that has ended or ends within a second (None: still running)."""
    if proc is None:
        return None
    try:
        return proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        return None


_SPAWNER_LOCK = threading.Lock()


def _popen(*args: Any, **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` from one long-lived thread. bwrap's ``--die-with-parent`` is a parent-death
    signal, which Linux ties to the thread that started the child: a sandbox started from a
    short-lived worker thread (``asyncio.to_thread``) would be killed when that thread ends."""
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tea-sandbox-spawner")
    return _SPAWNER.submit(subprocess.Popen, *args, **kwargs).result()


_PREFIX: list[str] | None = None


def _namespace_prefix() -> list[str]:
    """``unshare`` arguments that give the sandbox its own process (and /proc) namespace, so it
    cannot see other processes, the parent's environment among them; [] when unavailable."""
    global _PREFIX
    if _PREFIX is None:
        tool = shutil.which("unshare")
        _PREFIX = []
        if tool is not None:
            user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
            candidate = [tool, *user, "--pid", "--fork", "--mount-proc", "--kill-child"]
            try:
                ok = subprocess.run([*candidate, "true"], capture_output=True, timeout=10).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
            _PREFIX = candidate if ok else []
    return _PREFIX


_CGROUP_IDS = itertools.count(1)


def _cgroups(limits: dict[str, dict[str, str]], pids: list[int]) -> dict[str, Path]:
    """Cgroups holding ``pids`` with ``limits`` ({controller: {file: value}}; a file named with a
    leading "?" may be missing): one group in the v2 hierarchy for the controllers it has, one group
    per v1 hierarchy for the others. Returns {controller: group}; controllers that could not be set
    up are left out."""
    made: dict[str, Path] = {}
    wanted = dict(limits)
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        available = set(_read(root / "cgroup.controllers").split()) & set(wanted)
        if (root / "cgroup.procs").exists() and available:
            group = _make_group(root, {c: wanted[c] for c in available}, pids)
            if group is not None:
                made.update({c: group for c in available})
                wanted = {c: v for c, v in wanted.items() if c not in available}
            break
    for controller, files in wanted.items():
        root = Path("/sys/fs/cgroup") / controller
        if (root / "cgroup.procs").exists():
            group = _make_group(root, {controller: files}, pids)
            if group is not None:
                made[controller] = group
    return made


def _make_group(root: Path, limits: dict[str, dict[str, str]], pids: list[int]) -> Path | None:
    _remove_stale_groups(root)
    group = root / f"tea-sandbox-{os.getpid()}-{next(_CGROUP_IDS)}"
    try:
        group.mkdir(exist_ok=True)
        for files in limits.values():
            for name, value in files.items():
                target = group / name.lstrip("?")
                if name.startswith("?") and not target.exists():
                    continue
                target.write_text(value)
        for pid in dict.fromkeys(pids):
            (group / "cgroup.procs").write_text(str(pid))
        return group
    except OSError:
        _remove_cgroup(group)
        return None


class _EventFile:
    """A cgroup's key-value event file (pids.events, memory.events), opened once and re-read from
    its start on every call: a read through a held descriptor costs a microsecond, an open by path
    some twenty. A file the kernel does not have reads as empty. The descriptor closes when the
    object is no longer referenced (a call still reading it keeps it open through ``kill``)."""

    def __init__(self, path: Path):
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = None
        if self._fd is not None:
            weakref.finalize(self, os.close, self._fd)

    def count(self, key: bytes) -> int:
        """The number after ``key`` (0 when absent, or once the group is gone)."""
        if self._fd is None:
            return 0
        try:
            fields = os.pread(self._fd, 4096, 0).split()
            return int(fields[fields.index(key) + 1])
        except (OSError, ValueError, IndexError):
            return 0


def _remove_stale_groups(root: Path) -> None:
    """Remove the empty groups that sandboxes of processes which died without cleaning up left."""
    for group in root.glob("tea-sandbox-*-*"):
        owner = group.name.split("-")[2]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            try:
                group.rmdir()
            except OSError:
                pass


def _remove_cgroup(group: Path) -> None:
    for _ in range(50):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
