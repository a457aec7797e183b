"""The Python / shell sandbox environment: real child processes, no mocks.

Every action, the ECP paths (interactive session and a session per agent run), each limit as an
observation that names it while the caller survives, secrets, cancellation and cleanup at exit.
Time limits are small (1-2 s) so the whole file stays well under a minute.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import asyncio  # noqa: E402
import itertools  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from child_processes import alive, gone_soon  # noqa: E402
from prompt_parts import section, user_text  # noqa: E402

from tea_notebook.envs.base import EnvironmentFailure  # noqa: E402
from tea_notebook.envs.sandbox import UNPRIVILEGED, PythonSandbox, _group_members  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SECRET = "s3cr3t-tea-sandbox-7f1c2d9e"
API_KEY = "sk-proj-sandboxtest-0123456789abcdefABCDEF"


# -- helpers --------------------------------------------------------------------------------
def act(sb: PythonSandbox, name: str, **args) -> str:
    """Run one action the way ECP does (``Environment.call``); failures raise EnvironmentFailure."""
    return asyncio.run(sb.call(name, args))


def fails(sb: PythonSandbox, name: str, **args) -> str:
    """Run an action that must fail and return the observation the agent would read."""
    with pytest.raises(EnvironmentFailure) as info:
        act(sb, name, **args)
    return str(info.value)


def timed(fn, *args, **kwargs):
    started = time.monotonic()
    out = fn(*args, **kwargs)
    return out, time.monotonic() - started


def strays(sb: PythonSandbox) -> list[int]:
    """Processes of the sandbox's process group other than the interpreter (seen from here)."""
    return _group_members(sb.pid, exclude={sb.pid, sb._main})


@pytest.fixture
def make(tmp_path):
    """Build sandboxes in tmp_path/<name>; every one is killed at the end of the test."""
    made: list[PythonSandbox] = []

    def build(name: str = "run", **options) -> PythonSandbox:
        sb = PythonSandbox(tmp_path / name, **options)
        made.append(sb)
        return sb

    yield build
    for sb in made:
        sb.kill()


@pytest.fixture(scope="module")
def warm(warm_litellm):
    """Agent runs measure the sandbox, not litellm's first import."""


# -- the actions ----------------------------------------------------------------------------
def test_run_python_value_output_and_state_across_calls(make):
    sb = make(timeout=5)
    assert act(sb, "run_python", code="x = 41\nx + 1") == "value: 42"
    out = act(sb, "run_python", code="import sys\nprint('to out')\nprint('to err', file=sys.stderr)\nx * 2")
    assert out == "stdout:\nto out\nstderr:\nto err\nvalue: 82"
    assert act(sb, "run_python", code="def double(v):\n    return 2 * v\ny = double(x)") == "(no output)"
    assert act(sb, "run_python", code="double(y), x") == "value: (164, 41)"
    assert act(sb, "run_python", code="_") == "value: (164, 41)"  # like a REPL, _ is the last value
    assert act(sb, "run_python", code="None") == "(no output)"
    assert sb.last is not None and sb.last.ok and sb.calls == 6
    assert act(sb, "run_python", code="import os\nos.getcwd() == str(os.path.realpath('.'))") == "value: True"


def test_run_python_traceback_names_the_cell_line_and_the_session_survives(make):
    sb = make(timeout=5)
    act(sb, "run_python", code="a = 1")
    text = fails(sb, "run_python", code="b = 2\nc = 3\nd = a / 0\ne = 4")
    assert 'File "<cell 2>", line 3, in <module>' in text
    assert "d = a / 0" in text and text.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "_sandbox_child" not in text  # only the user's frames
    nested = fails(sb, "run_python", code="def inner():\n    raise KeyError('k')\n\ninner()")
    assert 'File "<cell 3>", line 4, in <module>' in nested and 'File "<cell 3>", line 2, in inner' in nested
    assert "KeyError: 'k'" in nested
    syntax = fails(sb, "run_python", code="x = (1,\n")
    assert "SyntaxError" in syntax
    assert act(sb, "run_python", code="a + 1") == "value: 2"


def test_run_shell_exit_codes_output_and_working_directory(make, tmp_path):
    sb = make(timeout=5)
    workdir = (tmp_path / "run" / "sandbox").resolve()
    assert act(sb, "run_shell", command="pwd") == f"stdout:\n{workdir}\nexit code: 0"
    failed = act(sb, "run_shell", command="echo out; echo err >&2; exit 3")
    assert failed == "stdout:\nout\nstderr:\nerr\nexit code: 3"  # a failed command is an observation
    assert sb.last is not None and sb.last.exit_code == 3 and not sb.last.ok
    assert "exit code: 127" in act(sb, "run_shell", command="no-such-command-xyz")
    act(sb, "run_python", code="open('made_by_python.txt', 'w').write('hello')")
    assert act(sb, "run_shell", command="cat made_by_python.txt") == "stdout:\nhello\nexit code: 0"
    act(sb, "run_shell", command="echo from-shell > shell.txt")
    assert (workdir / "shell.txt").read_text() == "from-shell\n"
    assert act(sb, "run_python", code="open('shell.txt').read().strip()") == "value: 'from-shell'"


def test_reset_session_forgets_variables_but_keeps_files(make, tmp_path):
    sb = make(timeout=5)
    act(sb, "run_python", code="kept = 'variable'\nopen('kept.txt', 'w').write('file')")
    before = sb.pid
    assert act(sb, "reset_session") == "The sandbox was reset: a fresh interpreter, no variables."
    assert sb.pid != before and gone_soon(before)
    assert "NameError: name 'kept' is not defined" in fails(sb, "run_python", code="kept")
    assert act(sb, "run_python", code="open('kept.txt').read()") == "value: 'file'"
    assert (tmp_path / "run" / "sandbox" / "kept.txt").exists()


def test_state_describes_the_session(make, tmp_path):
    sb = make(timeout=3, memory_mb=512, processes=32)
    act(sb, "run_python", code="1")
    state = sb.state()
    assert "sandbox, running in" in state and f"working directory {tmp_path / 'run' / 'sandbox'}" in state
    assert "limits: 3 s wall, 3 s CPU, 512 MB, 32 processes; 1 calls; last call ok" in state
    if sb.boundary.mechanism == "bubblewrap":
        assert "in bubblewrap: uid 65534 in its own user/pid/ipc/uts/net namespaces, no capabilities" in state
        assert "; no network;" in state
    sb.kill()
    assert "stopped (restarts on the next call)" in sb.state() and sb.pid is None
    # a stopped session restarts on the next call, and says that the variables are gone
    assert (
        act(sb, "run_python", code="2")
        == "value: 2\n(the sandbox had stopped and was restarted: earlier variables are gone)"
    )


# -- through ECP ----------------------------------------------------------------------------
def test_ecp_interactive_session_outside_a_run(ws):
    ws.envs.ensure("python")
    assert ws.envs.sessions() == []
    first = ws.envs.invoke("python", "run_python", {"code": "import os\nn = 7\nos.getcwd()"})
    folder = ws.path / "sessions" / "interactive"
    assert first.ok and first.error is None
    assert first.value == f"value: {str(folder / 'sandbox')!r}"
    assert ws.envs.invoke("python", "run_python", {"code": "n * 6"}).value == "value: 42"
    shell = ws.envs.invoke("python", "run_shell", {"command": "pwd; exit 5"})
    assert shell.ok and shell.value == f"stdout:\n{folder / 'sandbox'}\nexit code: 5"

    bad = ws.envs.invoke("python", "run_python", {"code": "n / 0"})
    assert not bad.ok and bad.value is None
    assert bad.error["type"] == "EnvironmentFailure" and "ZeroDivisionError" in bad.error["message"]
    assert 'File "<cell 3>", line 1' in bad.error["message"]  # shell commands are not cells
    wrong = ws.envs.invoke("python", "run_python", {"cod": "1"})  # schema violations never reach the child
    assert not wrong.ok and wrong.error["type"] == "ValidationError"
    unknown = ws.envs.invoke("python", "no_such_action", {})
    assert not unknown.ok and "run_python" in unknown.error["message"]

    (info,) = ws.envs.sessions()
    assert (info.environment, info.key, info.folder) == ("python", "interactive", folder)
    assert "sandbox, running" in info.state and "4 calls; last call failed" in info.state  # invalid calls never ran
    assert "sandbox, running" in ws.envs.state("python")
    env = ws.envs.runtime("python").session()
    assert env is ws.envs.manager.sessions[("python", "interactive")]
    pid = env.pid
    assert alive(pid)
    assert ws.envs.release() == ["python@interactive"]
    assert ws.envs.sessions() == [] and gone_soon(pid)
    # the next call starts a new interactive session, without the old variables
    again = ws.envs.invoke("python", "run_python", {"code": "n"})
    assert not again.ok and "NameError" in again.error["message"]


def test_agent_run_gets_its_own_session_in_the_run_folder(ws, warm):
    prompts: list[str] = []
    seen: dict = {}

    def brain(messages, tools):
        prompts.append(user_text(messages))
        seen.setdefault("tools", sorted(t["function"]["name"] for t in tools))
        step = len(prompts)
        if step == 1:
            return call("python_run_python", code="import os\ntotal = sum(range(10))\nprint('sum done')\nos.getcwd()")
        if step == 2:
            seen["sessions"] = dict(ws.envs.manager.sessions)
            return call("python_run_shell", command="pwd; echo $total; exit 2")
        if step == 3:
            return call("python_run_python", code="total / 0")
        return call("done", success=True, text="total is 45")

    script = ScriptedModel(brain)
    result = ws.agent("coder", model=script.name, envs=["python"]).run_sync("Sum 0..9 in the sandbox")
    # its last call (total / 0) failed and nothing after it succeeded: the script's success=True is
    # not taken at its word (first-ten-minutes item 1)
    assert result.status == "failed" and result.answer == "total is 45"
    run_dir = ws.path / "runs" / result.run_id
    workdir = run_dir / "sandbox"
    assert seen["tools"] == ["done", "python_reset_session", "python_run_python", "python_run_shell"]

    actions = [a for s in result.trajectory.steps for a in s.actions]
    assert [a["name"] for a in actions] == ["python_run_python", "python_run_shell", "python_run_python", "done"]
    assert actions[0]["ok"] and actions[0]["observation"] == f"stdout:\nsum done\nvalue: {str(workdir)!r}"
    assert actions[1]["ok"] and actions[1]["observation"] == f"stdout:\n{workdir}\nexit code: 2"  # no $total in sh
    assert not actions[2]["ok"] and "ZeroDivisionError" in actions[2]["observation"]
    assert "line 1" in actions[2]["observation"]
    assert workdir.is_dir() and run_dir.parent == ws.path / "runs"

    # the session was this run's (key = run id, folder = the run folder)
    ((key, env),) = seen["sessions"].items()
    assert key == ("python", result.run_id) and env.folder == run_dir and env.workdir == workdir
    # the prompt showed the environment's state: not started at step 1, the live sandbox after
    assert '<environment name="python"><state>python: not started' in section(prompts[0], "environment_state")
    state = section(prompts[1], "environment_state")
    assert '<environment name="python"><state>Python ' in state
    assert f"working directory {workdir};" in state and "1 calls; last call ok" in state
    assert "3 calls; last call failed" in section(prompts[3], "environment_state")
    # and it ended with the run
    assert ws.envs.sessions() == []
    assert env.pid is None and gone_soon(env._main)


# -- limits ---------------------------------------------------------------------------------
def test_infinite_loop_stops_at_the_wall_clock_limit_and_keeps_variables(make):
    sb = make(timeout=2)
    act(sb, "run_python", code="kept = 'still here'")
    pid = sb.pid
    text, took = timed(fails, sb, "run_python", code="n = 0\nwhile True:\n    n += 1")
    assert 1.8 < took < 3.5
    assert "Sandbox limit: stopped at the wall-clock limit of 2 s. The session continues with its variables." in text
    assert 'File "<cell 2>", line' in text
    assert sb.last.limit == "timeout" and sb.pid == pid
    assert act(sb, "run_python", code="kept, n > 0") == "value: ('still here', True)"
    # a shorter per-call timeout is honoured, a longer one is capped at the sandbox's limit
    text, took = timed(fails, sb, "run_python", code="while True: pass", timeout=0.5)
    assert took < 1.5 and "wall-clock limit of 0.5 s" in text
    assert sb._cap(60) == 2 and sb._cap(None) == 2


def test_shell_command_stops_at_the_wall_clock_limit(make):
    sb = make(timeout=2)
    act(sb, "run_python", code="kept = 1")
    text, took = timed(fails, sb, "run_shell", command="echo started; sleep 100; echo never")
    assert took < 3.5
    assert "stdout:\nstarted" in text and "never" not in text
    assert "wall-clock limit of 2 s" in text
    assert act(sb, "run_python", code="kept") == "value: 1"
    assert strays(sb) == []  # the shell's sleep went with it
    assert act(sb, "run_shell", command="echo ok") == "stdout:\nok\nexit code: 0"


@pytest.mark.parametrize(
    "code",
    [
        # a C loop never returns to the interpreter, so the timer's handler cannot run
        "import itertools\nsum(itertools.repeat(1, 10**13))",
        # the code ignores the timer's signal
        "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\ntime.sleep(100)",
    ],
    ids=["c-loop", "sigalrm-ignored"],
)
def test_code_that_ignores_the_timer_is_killed_and_the_next_call_starts_fresh(make, code):
    sb = make(timeout=1)
    act(sb, "run_python", code="lost = 'gone after the kill'")
    pid, main = sb.pid, sb._main
    text, took = timed(fails, sb, "run_python", code=code)
    assert took < 4.5  # the limit plus the grace period before the hard kill
    assert "Killed at the wall-clock limit of 1 s; the session was restarted and variables were lost." in text
    assert sb.last.limit == "timeout" and sb.pid is None
    assert gone_soon(pid) and gone_soon(main)
    nxt = fails(sb, "run_python", code="lost")
    assert "NameError" in nxt and "(the sandbox had stopped and was restarted: earlier variables are gone)" in nxt
    assert sb.pid not in (None, pid) and sb.restarts == 1
    assert act(sb, "run_python", code="1 + 1") == "value: 2"


def test_blocking_the_timer_in_one_thread_does_not_escape_the_limit(make):
    """SIGALRM goes to the process: with it blocked in the main thread the kernel hands it to
    another thread and Python still runs the handler in the main thread, so the code is stopped
    (not killed) and the variables stay."""
    sb = make(timeout=1)
    act(sb, "run_python", code="kept = 3")
    code = "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\nwhile True: pass"
    text, took = timed(fails, sb, "run_python", code=code)
    assert took < 3 and "wall-clock limit of 1 s" in text
    assert act(sb, "run_python", code="kept") == "value: 3"


def test_cpu_limit_is_named(make):
    sb = make(timeout=10, cpu_seconds=1)
    act(sb, "run_python", code="kept = 'cpu'")
    text, took = timed(fails, sb, "run_python", code="while True:\n    pass")
    assert took < 8  # the CPU limit (about 2 s of CPU), before the 10 s wall-clock limit
    assert "Sandbox limit: stopped at the CPU-time limit of 1 s." in text
    assert sb.last.limit == "cpu"
    assert act(sb, "run_python", code="kept") == "value: 'cpu'"
    # sleeping uses no CPU: the CPU limit does not stop it
    assert act(sb, "run_python", code="import time\ntime.sleep(1.2)\n'slept'") == "value: 'slept'"


def test_memory_bomb_is_stopped_at_the_memory_limit(make):
    sb = make(timeout=5, memory_mb=256)
    act(sb, "run_python", code="kept = 'memory'")
    text = fails(sb, "run_python", code="big = bytearray(2 * 1024**3)")
    assert "MemoryError" in text and "Sandbox limit: stopped at the memory limit of 256 MB." in text
    # a list that keeps growing (and stays referenced) until the memory runs out
    text, took = timed(fails, sb, "run_python", code="grow = []\nwhile True:\n    grow.append(len(grow))")
    assert "memory limit of 256 MB" in text and sb.last.limit == "memory" and took < 5
    assert act(sb, "run_python", code="kept, len(grow) > 10**6") == "value: ('memory', True)"
    act(sb, "run_python", code="del grow")
    assert act(sb, "run_python", code="len(bytearray(50 * 1024**2))") == "value: 52428800"
    # a child process is held to the same limit
    out = act(sb, "run_shell", command=f"{sys.executable} -c 'bytearray(400 * 1024**2)'")
    assert "MemoryError" in out and "exit code: 1" in out


def test_fork_bomb_is_stopped_at_the_process_limit(make):
    sb = make(timeout=5, processes=16)
    act(sb, "run_python", code="kept = 'forks'")
    text, took = timed(fails, sb, "run_python", code="import os\nwhile True:\n    os.fork()")
    assert took < 5
    assert "Sandbox limit: stopped at the process limit of 16 processes." in text
    assert "BlockingIOError" in text and sb.last.limit == "processes"
    assert act(sb, "run_python", code="kept") == "value: 'forks'"
    assert strays(sb) == []
    live = "import os\nsorted(int(p) for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{p}/stat').read().split(') ')[1][0] != 'Z')"
    if sb.boundary.mechanism == "bubblewrap":  # alone again with the supervisor (pid 1)
        assert act(sb, "run_python", code=live) == "value: [1, 2]"
    elif sb._info["isolated"]:  # inside its own namespace the interpreter is alone again
        assert act(sb, "run_python", code=live) == "value: [1]"
    out = act(
        sb,
        "run_python",
        code="import subprocess\nsubprocess.run(['echo', 'works'], capture_output=True, text=True).stdout",
    )
    assert out == "value: 'works\\n'"
    if "pids" in sb._groups:  # root: the pids cgroup counts refused forks, the shell's too
        shell = act(sb, "run_shell", command="(f() { f | f & }; f; sleep 0.5); echo survived")
        assert "survived" in shell
        assert "Sandbox limit: the process limit of 16 processes was reached during this call" in shell
        assert strays(sb) == []
    assert act(sb, "run_shell", command="echo fine") == "stdout:\nfine\nexit code: 0"


def test_output_bomb_is_truncated_with_the_total_size(make):
    sb = make(timeout=5, max_output=1000)
    out = act(sb, "run_python", code="print('x' * 5_000_000)\n'after'")
    assert "(stdout truncated: 5,000,001 bytes in all, first 1,000 shown)" in out
    assert out.startswith("stdout:\n" + "x" * 1000 + "\n") and "value: 'after'" in out
    assert len(out) < 1300
    assert len(sb.last.stdout) == 1000
    out = act(sb, "run_shell", command="yes abc | head -c 3000000 >&2; echo done")
    assert "(stderr truncated: 3,000,000 bytes in all, first 1,000 shown)" in out and "stdout:\ndone" in out
    value = act(sb, "run_python", code="'v' * 5000")
    assert value.endswith("… (5002 characters in all)") and len(value) < 1100


def test_file_bomb_is_stopped_at_the_file_size_limit(make, tmp_path):
    sb = make(timeout=5, file_mb=5)
    act(sb, "run_python", code="kept = 'files'")
    text = fails(
        sb, "run_python", code="with open('bomb.bin', 'wb') as f:\n    while True:\n        f.write(b'x' * 1024**2)"
    )
    assert "File too large" in text and "Sandbox limit: stopped at the file-size limit of 5 MB." in text
    assert sb.last.limit == "file_size"
    bomb = tmp_path / "run" / "sandbox" / "bomb.bin"
    assert bomb.stat().st_size == 5 * 1024**2
    assert act(sb, "run_python", code="kept") == "value: 'files'"
    shell = act(sb, "run_shell", command="head -c 20000000 /dev/zero > shell.bin")
    assert "File size limit exceeded" in shell and "exit code: 1" in shell
    assert (bomb.parent / "shell.bin").stat().st_size == 5 * 1024**2
    assert act(sb, "run_python", code="open('small.txt', 'w').write('ok')") == "value: 2"


# -- secrets --------------------------------------------------------------------------------
def test_no_secrets_reach_the_sandbox(make, monkeypatch):
    monkeypatch.setenv("TEA_TEST_SECRET", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    sb = make(timeout=5)
    env = act(sb, "run_python", code="import os\ndict(os.environ)")
    assert SECRET not in env and API_KEY not in env and "TEA_TEST_SECRET" not in env
    assert "OPENAI_API_KEY" not in env and "PATH" in env
    shell = act(sb, "run_shell", command="env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'")
    assert "HOME=" in shell and SECRET not in shell and API_KEY not in shell
    ours = Path("/proc/self/cmdline").read_bytes()  # this test process, the sandbox's parent
    scan = textwrap.dedent(
        f"""
        import os
        readable, leaked = [], []
        for entry in os.listdir('/proc'):
            if entry.isdigit() or entry in ('self', 'thread-self'):
                try:
                    data = open(f'/proc/{{entry}}/environ', 'rb').read()
                except OSError:
                    continue
                readable.append(entry)
                if {SECRET!r}.encode() in data or {API_KEY!r}.encode() in data:
                    leaked.append(entry)
        commands = []
        for entry in os.listdir('/proc'):
            try:
                commands.append(open(f'/proc/{{entry}}/cmdline', 'rb').read())
            except OSError:
                pass
        (len(readable) > 0, leaked, {ours!r} in commands, os.getppid())
        """
    )
    isolated = sb._info["isolated"] or sb._info["uid"] == UNPRIVILEGED
    if not isolated:
        pytest.xfail("no pid namespace and the same user: the parent's /proc/<pid>/environ is readable")
    readable, leaked, parent_visible, ppid = eval(act(sb, "run_python", code=scan).removeprefix("value: "))
    assert readable and leaked == []
    if sb._info["isolated"]:
        # the test process (our parent) is not in its world; its parent is the in-sandbox supervisor at most
        assert not parent_visible and ppid != os.getpid() and ppid < 10


def test_ecp_sessions_do_not_see_secrets_either(ws, monkeypatch):
    monkeypatch.setenv("TEA_TEST_SECRET", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    ws.envs.ensure("python")
    out = ws.envs.invoke("python", "run_shell", {"command": "env; cat /proc/*/environ 2>/dev/null"})
    assert out.ok and "HOME=" in out.value and SECRET not in out.value and API_KEY not in out.value


@pytest.mark.skipif(os.geteuid() != 0, reason="privileges are dropped only when tea_notebook runs as root")
def test_fallback_runs_the_sandbox_as_nobody_when_it_can_and_still_starts_when_it_cannot(make):
    """The fallback (no bubblewrap): as root it drops to nobody where the interpreter allows it, and
    where it cannot it runs as root — saying so (see test_boundary for the warning)."""
    system = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
    from tea_notebook.envs.sandbox import _readable_by_others

    if system is None or not _readable_by_others(system):
        pytest.skip("no Python interpreter that other users can run")
    base = Path(tempfile.mkdtemp(prefix="tea-sandbox-open-"))
    try:
        os.chmod(base, 0o755)
        open_sb = PythonSandbox(base / "run", python=system, timeout=5, processes=8, isolation="process")
        try:
            value = act(open_sb, "run_python", code="import os\nos.getuid(), os.getcwd()")
            assert value.startswith(f"value: ({UNPRIVILEGED}, {str(base / 'run' / 'sandbox')!r})\nWARNING: sandbox")
            assert "a fallback child process as user nobody" in open_sb.state()
            assert "PermissionError" in fails(open_sb, "run_python", code="import os\nos.listdir('/root')")
            forks = fails(open_sb, "run_python", code="import os\nwhile True:\n    os.fork()")
            assert "process limit of 8 processes" in forks
            assert act(open_sb, "run_python", code="1") == "value: 1"
        finally:
            open_sb.kill()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    # under a folder that nobody cannot enter (pytest's tmp_path is 0700) it stays root, and starts
    closed = make("closed", python=system, timeout=5, isolation="process")
    assert act(closed, "run_python", code="import os\nos.getuid()").startswith("value: 0\nWARNING: sandbox without")


# -- cancellation ---------------------------------------------------------------------------
@pytest.mark.parametrize("code", ["while True:\n    pass", "import time\ntime.sleep(100)"], ids=["busy", "sleep"])
def test_interrupt_stops_running_code_and_the_session_survives(make, code):
    sb = make(timeout=30)
    act(sb, "run_python", code="kept = 'interrupt'")
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(result=sb.request("exec", code=code)))
    worker.start()
    time.sleep(0.4)
    started = time.monotonic()
    sb.interrupt()
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - started < 1.0
    result = box["result"]
    assert result.limit == "interrupted" and result.error["type"] == "KeyboardInterrupt"
    assert "KeyboardInterrupt" in result.text()
    assert act(sb, "run_python", code="kept") == "value: 'interrupt'"
    sb.interrupt()  # nothing running: a stray interrupt must not stop the next call
    assert act(sb, "run_python", code="import time\ntime.sleep(0.2)\nkept") == "value: 'interrupt'"


def test_interrupt_that_arrives_before_the_code_starts_is_not_lost(make):
    sb = make(timeout=10)
    act(sb, "run_python", code="kept = 1")
    sb._ids = itertools.count(100)
    sb._inflight = 100  # as if request 100 had been sent and not yet started
    sb.interrupt()
    sb._inflight = None
    result, took = timed(sb.request, "exec", code="import time\ntime.sleep(5)")
    assert took < 1 and result.limit == "interrupted"
    assert act(sb, "run_python", code="kept") == "value: 1"


def test_cancelling_a_run_stops_the_sandbox_code_quickly(ws, warm):
    started = threading.Event()
    ws.events.subscribe(lambda e: started.set() if e.type == "tool_call" else None)
    script = ScriptedModel(
        [
            call("python_run_python", code="import time\nwhile True:\n    time.sleep(0.01)"),
            call("done", success=True, text="never"),
        ]
    )
    agent = ws.agent("looper", model=script.name, envs=["python"])
    ctx = ws.context()
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(result=agent.run_sync("loop forever", context=ctx)))
    worker.start()
    assert started.wait(30)
    deadline = time.monotonic() + 10
    while not any(k[0] == "python" for k in ws.envs.manager.sessions) and time.monotonic() < deadline:
        time.sleep(0.02)
    env = next(e for k, e in ws.envs.manager.sessions.items() if k[0] == "python")
    time.sleep(0.3)  # the code is running now
    t0 = time.monotonic()
    ctx.cancel.set()
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - t0 < 3.0
    result = box["result"]
    assert result.status == "interrupted" and result.error == "stopped by the user"
    assert ws.db.run_row(result.run_id)["status"] == "interrupted"
    # the code itself was interrupted, not left running until its limit
    deadline = time.monotonic() + 3
    while (env.last is None or env.last.limit != "interrupted") and env.pid is not None:
        assert time.monotonic() < deadline, "the sandbox code kept running after the run was cancelled"
        time.sleep(0.02)
    # and the session ended with the run
    deadline = time.monotonic() + 3
    while ws.envs.sessions() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ws.envs.sessions() == [] and gone_soon(env._main)
    assert env.folder == ws.path / "runs" / result.run_id


def test_a_run_started_with_a_context_owns_and_releases_its_session(ws, warm):
    script = ScriptedModel([call("python_run_python", code="1"), call("done", success=True, text="ok")])
    seen: dict = {}
    ws.events.subscribe(
        lambda e: seen.update(keys=[k for k in ws.envs.manager.sessions]) if e.type == "tool_result" else None
    )
    result = ws.agent("ctx", model=script.name, envs=["python"]).run_sync("one", context=ws.context())
    assert result.success
    assert seen["keys"] == [("python", result.run_id)]
    assert (ws.path / "runs" / result.run_id / "sandbox").is_dir()
    assert ws.envs.sessions() == []


# -- cleanup at exit ------------------------------------------------------------------------
EXIT_SCRIPT = """
import os, sys
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
import tea_notebook
ws = tea_notebook.Workspace(sys.argv[1], embedder="hashing")
ws.envs.ensure("python")
result = ws.envs.invoke("python", "run_python", {"code": "import os; os.getpid()"})
assert result.ok, result.error
env = ws.envs.manager.sessions[("python", "interactive")]
print(env.pid, env._main, flush=True)
if sys.argv[2] == "crash":
    os.kill(os.getpid(), 9)  # no atexit: the child notices its parent is gone
"""


@pytest.mark.parametrize("how", ["exit", "crash"])
def test_the_session_dies_with_the_interpreter(tmp_path, how):
    script = tmp_path / "exit_script.py"
    script.write_text(EXIT_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ws"), how],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == (0 if how == "exit" else -9), done.stderr
    pid, main = (int(p) for p in done.stdout.split())
    assert pid > 0 and main > 0
    assert gone_soon(pid, 5) and gone_soon(main, 5)
