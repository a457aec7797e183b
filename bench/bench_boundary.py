"""Benchmarks of the security boundary (issues 10 and 23): what bubblewrap and out-of-process tools cost.

    .venv/bin/python bench/bench_boundary.py [--write] [--calls 2000] [--rounds 20] [--cold 20] [--base 6d7243d]

Measures, on this machine, in one run:
  1. the sandbox's warm round trip for ``1+1`` (``PythonSandbox.request``), interleaved round by
     round (the order rotates) with its peer, a bare pipe round trip to a child process (a line
     written to a Python child that echoes it), for: the bubblewrap sandbox (default), the fallback
     child process (``isolation="process"``) and the implementation of commit --base (its
     sandbox.py and child script loaded from git, behind bubblewrap too): wall time per call
     (min/median/max over --calls) and CPU time per call (this process's thread, per call; the
     child's processes, every thread, per round from the kernel's schedstat);
  2. the cold start (spawn to ready, min/median/max of --cold, the three taking turns) of the same three sandboxes;
  3. a generated tool's call through ``ws.tools.invoke``: out of process (its warm sandbox session,
     the default) vs in this process (the ``trust("in_process")`` opt-in), same function.
With --write the figures replace the "Security boundary" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish, summary  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.envs.sandbox import PythonSandbox, _descendants  # noqa: E402
from tea_notebook.protocol.records import ToolRecord  # noqa: E402

WARM_TARGET_MS, COLD_TARGET_MS, TOOL_EXTRA_TARGET_MS = 0.5, 100.0, 2.0
AFTER, BEFORE, FALLBACK = "bubblewrap (default)", "bubblewrap, before (commit --base)", "fallback child process"
FILTER_WARM_TARGET_MS = 1.0  # the target of issue 19's filter comparison, when it was measured
ECHO = "import os\nwhile True:\n    data = os.read(0, 65536)\n    if not data:\n        break\n    os.write(1, data)\n"
TOOL_SOURCE = '''def count_vowels(text: str) -> int:
    """Count the vowels in a text."""
    return sum(1 for ch in text.lower() if ch in "aeiou")

TOOL_CONFIG = {"name": "count_vowels", "description": "Count vowels.", "function": count_vowels,
               "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}
'''


def previous_sandbox(base: str, folder: Path) -> Any:
    """The ``PythonSandbox`` class of commit ``base`` (its sandbox.py and child script from git). They
    go in ``folder``/envs: the class binds the folder above its own read-only into the sandbox."""
    folder = folder / "envs"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("sandbox.py", "_sandbox_child.py"):
        text = subprocess.run(
            ["git", "show", f"{base}:tea_notebook/envs/{name}"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        (folder / name).write_text(text)
    spec = importlib.util.spec_from_file_location("tea_previous_sandbox", folder / "sandbox.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module.PythonSandbox


def cpu_ns(pids: list[int]) -> int:
    """CPU time (ns) the processes ``pids`` have used so far, every thread: the kernel's schedstat
    (on-CPU time in ns), or utime + stime in clock ticks where schedstat is missing."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                    total += int(fh.read().split()[0])
            except (OSError, ValueError, IndexError):
                try:
                    with open(f"/proc/{pid}/task/{task}/stat") as fh:
                        fields = fh.read().rsplit(")", 1)[1].split()
                    total += (int(fields[11]) + int(fields[12])) * 10**9 // os.sysconf("SC_CLK_TCK")
                except (OSError, ValueError, IndexError):
                    pass
    return total


class Contender:
    """One side of the interleaved round trip: a call to time and the processes that serve it."""

    def __init__(self, label: str, call: Any, pids: list[int], close: Any):
        self.label, self.call, self.pids, self.close = label, call, pids, close
        self.wall: list[float] = []
        self.host_cpu: list[float] = []  # this thread's CPU per call, seconds
        self.child_cpu: list[float] = []  # the serving processes' CPU per call, seconds (one per round)
        self.by_process = {pid: 0 for pid in pids}  # CPU ns of each serving process over the timed calls


IN_SANDBOX = """
import os, sys, time
sys.path.insert(0, PACKAGE)
from envs._sandbox_child import folder_usage
def per_call(fn, n=300):
    fn()
    t0 = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - t0) / n * 1e6
def held():
    for pid in os.listdir("/proc"):
        if pid.isdigit() and pid != "1":
            for fd in os.listdir("/proc/%s/fd" % pid):
                try:
                    os.stat("/proc/%s/fd/%s" % (pid, fd))
                except OSError:
                    pass
def code():
    import ast
    tree = ast.parse("1+1", "c", "exec")
    last = ast.Expression(tree.body.pop().value)
    namespace = {}
    exec(compile(tree, "c", "exec"), namespace)
    repr(eval(compile(last, "c", "eval"), namespace))
(per_call(lambda: folder_usage(ROOT, 100000)), per_call(held), per_call(code))
"""


def in_sandbox_costs(box: Any) -> tuple[float, float, float]:
    """CPU µs, timed warm inside the sandbox (in the worker, in a loop): the run folder's walk, the
    scan of the sandbox's open descriptors (the two halves of the supervisor's quota check; the
    supervisor itself runs them once per call, with cold caches) and compiling + running ``1+1``."""
    code = IN_SANDBOX.replace("PACKAGE", repr(str(ROOT / "tea_notebook"))).replace("ROOT", repr(str(box.folder)))
    result = box.request("exec", code=code)
    assert result.ok, result.text()
    return tuple(float(x) for x in result.value.strip("()").split(","))


def sandbox_contender(label: str, cls: Any, folder: Path, **options: Any) -> tuple[Contender, Any]:
    """A warm sandbox of class ``cls`` as a contender, and the sandbox itself."""
    box = cls(folder, timeout=30, **options)
    box._spawn()
    pids = [box._proc.pid, *_descendants(box._proc.pid)]

    def call() -> None:
        result = box.request("exec", code="1+1")
        assert result.value == "2", result.text()

    return Contender(label, call, pids, box.kill), box


def pipe_contender() -> Contender:
    """The peer: a bare pipe round trip to a child process (one short line there and back)."""
    child = subprocess.Popen([sys.executable, "-I", "-c", ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out, back = child.stdin.fileno(), child.stdout.fileno()
    line = b'{"id": 1, "op": "exec", "code": "1+1"}\n'

    def call() -> None:
        os.write(out, line)
        got = b""
        while len(got) < len(line):
            got += os.read(back, 65536)

    def close() -> None:
        child.stdin.close()
        child.wait(timeout=5)

    return Contender("bare pipe round trip to a child process (the peer)", call, [child.pid], close)


def warm_interleaved(contenders: list[Contender], calls: int, rounds: int) -> None:
    """``calls`` timed calls of each contender in ``rounds`` rounds; each round runs every contender
    in turn, the order rotating from round to round, after a warm-up of each."""
    rounds = max(1, min(rounds, calls))
    for who in contenders:
        for _ in range(max(20, calls // 10)):
            who.call()
    for r in range(rounds):
        per_round = calls // rounds + (1 if r < calls % rounds else 0)
        order = contenders[r % len(contenders) :] + contenders[: r % len(contenders)]
        for who in order:
            before = {pid: cpu_ns([pid]) for pid in who.pids}
            for _ in range(per_round):
                c0 = time.thread_time()
                t0 = time.perf_counter()
                who.call()
                who.wall.append(time.perf_counter() - t0)
                who.host_cpu.append(time.thread_time() - c0)
            used = {pid: cpu_ns([pid]) - before[pid] for pid in who.pids}
            for pid, ns in used.items():
                who.by_process[pid] += ns
            who.child_cpu.append(sum(used.values()) / 1e9 / per_round)


def cold_starts(sandboxes: dict[str, tuple[Any, str, dict[str, Any]]], base: Path, cold: int) -> dict[str, Any]:
    """Spawn to ready of each sandbox ``label: (class, tag, options)``, ``cold`` times after two
    warm-ups each (page cache, the bwrap probe), the sandboxes taking turns, the order rotating."""
    starts: dict[str, list[float]] = {label: [] for label in sandboxes}
    labels = list(sandboxes)
    for i in range(cold + 2):
        for label in labels[i % len(labels) :] + labels[: i % len(labels)]:
            cls, tag, options = sandboxes[label]
            box = cls(base / f"{tag}-cold-{i}", timeout=30, **options)
            t0 = time.perf_counter()
            box._spawn()
            if i >= 2:
                starts[label].append(time.perf_counter() - t0)
            box.kill()
    return {label: summary(values) for label, values in starts.items()}


def tool_calls(base: Path, calls: int) -> dict[str, Any]:
    ws = tea_notebook.Workspace(base / "ws", embedder="hashing")
    try:
        record = ToolRecord(
            name="count_vowels",
            description="Count vowels.",
            parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            source=TOOL_SOURCE,
            source_hash=hashlib.sha256(TOOL_SOURCE.encode()).hexdigest(),
            entrypoint="source:count_vowels",
            origin="generated",
        )
        ws.tools.register(record)
        out: dict[str, Any] = {}
        for mode in ("sandbox", "in_process"):
            if mode == "in_process":
                ws.tools.trust("count_vowels", "in_process", reason="benchmark")
            call = lambda: ws.tools.invoke("count_vowels", {"text": "banana"})  # noqa: E731
            for _ in range(max(50, calls // 10)):
                call()
            samples = []
            for _ in range(calls):
                t0 = time.perf_counter()
                result = call()
                samples.append(time.perf_counter() - t0)
                assert result.ok and result.value == 3, result.error
            out[mode] = summary(samples)
        return out
    finally:
        ws.close()


OPEN_LOOP = """
import os, time
t0 = time.perf_counter()
for _ in range(OPENS):
    os.close(os.open("bench-open", os.O_WRONLY | os.O_CREAT, 0o644))
(time.perf_counter() - t0) / OPENS
"""


def filter_of(commit: str, folder: Path) -> bytes:
    """The seccomp program of commit ``commit`` (its boundary.py from git, loaded on its own)."""
    folder.mkdir(parents=True, exist_ok=True)
    text = subprocess.run(
        ["git", "show", f"{commit}:tea_notebook/envs/boundary.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    (folder / "boundary_before.py").write_text(text)
    spec = importlib.util.spec_from_file_location("tea_boundary_before", folder / "boundary_before.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.seccomp_program()


def filter_before_after(commit: str, base: Path, calls: int, cold: int, rounds: int = 10) -> dict[str, Any]:
    """The bubblewrap sandbox under the seccomp filter of ``commit`` ("before") and under this one
    ("after"), interleaved round by round (the order alternates): warm round trips, cold starts, and
    an open(O_CREAT)+close loop timed inside the sandbox (each such call now passes the mode check)."""
    from tea_notebook.envs import boundary

    programs = {"before": filter_of(commit, base / "filter-before"), "after": boundary.seccomp_program()}
    assert programs["before"] != programs["after"], f"commit {commit} has the same seccomp filter"
    samples: dict[str, dict[str, list[float]]] = {tag: {"warm": [], "cold": [], "open": []} for tag in programs}
    original = boundary.seccomp_program
    boxes: dict[str, Any] = {}
    try:
        for tag, program in programs.items():
            boundary.seccomp_program = lambda p=program: p  # read by bwrap_command at each start
            boxes[tag] = PythonSandbox(base / f"filter-{tag}-warm", timeout=30, isolation="bubblewrap")
            boxes[tag]._spawn()
            for _ in range(max(50, calls // 10)):
                boxes[tag].request("exec", code="1+1")
        for r in range(rounds):
            order = list(programs) if r % 2 == 0 else list(reversed(programs))
            for tag in order:
                box = boxes[tag]
                for _ in range(max(1, calls // rounds)):
                    t0 = time.perf_counter()
                    result = box.request("exec", code="1+1")
                    samples[tag]["warm"].append(time.perf_counter() - t0)
                    assert result.value == "2", result.text()
                result = box.request("exec", code=OPEN_LOOP.replace("OPENS", "20000"))
                samples[tag]["open"].append(float(result.value))
                boundary.seccomp_program = lambda p=programs[tag]: p
                for i in range(max(1, cold // rounds)):
                    fresh = PythonSandbox(base / f"filter-{tag}-cold-{r}-{i}", timeout=30, isolation="bubblewrap")
                    t0 = time.perf_counter()
                    fresh._spawn()
                    samples[tag]["cold"].append(time.perf_counter() - t0)
                    fresh.kill()
    finally:
        boundary.seccomp_program = original
        for box in boxes.values():
            box.kill()
    return {tag: {kind: values for kind, values in kinds.items()} for tag, kinds in samples.items()}


def filter_report(figures: dict[str, Any], commit: str) -> str:
    def row(tag: str, kind: str, scale: float, unit: str) -> str:
        values = sorted(figures[tag][kind])
        mid = statistics.median(values)
        return (
            f"| {kind} ({unit}) | {tag} | {values[0] * scale:.2f} | {mid * scale:.2f} | {values[-1] * scale:.2f} "
            f"| {len(values)} |"
        )

    rows = [
        row(tag, kind, scale, unit)
        for kind, scale, unit in (("warm", 1e3, "ms"), ("cold", 1e3, "ms"), ("open", 1e6, "µs per open+close"))
        for tag in ("before", "after")
    ]
    warm = statistics.median(figures["after"]["warm"]) * 1e3
    cold = statistics.median(figures["after"]["cold"]) * 1e3
    return f"""## Seccomp filter: set-id modes at creation (issue 19)

Command: `{command_line()}`
Machine: {machine()}; run {time.strftime("%Y-%m-%d")}. "before" is the seccomp filter of commit {commit} (set-id bits refused in chmod
calls only), "after" this one (also in open/openat with O_CREAT or O_TMPFILE, creat, mknod, mknodat;
openat2 refused with ENOSYS). Both run in the same process, interleaved round by round. The open row
is timed inside the sandbox: 20,000 `os.open(path, O_WRONLY | O_CREAT)` + `os.close` per sample.

| measure | filter | min | median | max | n |
|---|---|---|---|---|---|
{chr(10).join(rows)}

Warm round trip {warm:.2f} ms (target ≤ {FILTER_WARM_TARGET_MS:g} ms), cold start {cold:.0f} ms (target ≤ {COLD_TARGET_MS:g} ms).
Load average over the last minute when the run ended: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (other
work on the machine inflates medians and maxima alike; minima show the cost of the filter best).
"""


def stats_ms(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    return ordered[0] * 1e3, statistics.median(ordered) * 1e3, ordered[-1] * 1e3


def report(figures: dict[str, Any], args: argparse.Namespace) -> str:
    warm: list[Contender] = figures["warm"]
    by = {who.label: who for who in warm}
    pipe = next(who for who in warm if who.label.startswith("bare pipe"))
    pipe_median = statistics.median(pipe.wall)
    rows = []
    for who in warm:
        lo, mid, hi = stats_ms(who.wall)
        host = statistics.median(who.host_cpu) * 1e6
        child = statistics.median(who.child_cpu) * 1e6
        rows.append(
            f"| {who.label.replace('commit --base', args.base)} | {lo:.3f} | **{mid:.3f}** | {hi:.2f} | {len(who.wall)} | {host:.0f} | {child:.0f} "
            f"| {host + child:.0f} | {statistics.median(who.wall) / pipe_median:.1f}× |"
        )
    cold_rows = [
        f"| {label.replace('commit --base', args.base)} | {figures['cold'][label]['min_ms']:.0f} "
        f"| **{figures['cold'][label]['median_ms']:.0f}** | {figures['cold'][label]['max_ms']:.0f} | {figures['cold'][label]['n']} |"
        for label in figures["cold"]
    ]
    new, old = by[AFTER], by[BEFORE]
    new_mid, old_mid = statistics.median(new.wall) * 1e3, statistics.median(old.wall) * 1e3
    new_cpu = (statistics.median(new.host_cpu) + statistics.median(new.child_cpu)) * 1e6
    old_cpu = (statistics.median(old.host_cpu) + statistics.median(old.child_cpu)) * 1e6
    cold_new = figures["cold"][AFTER]["median_ms"]
    names = ("bwrap", "supervisor", "worker")
    profile = ", ".join(
        f"{names[i] if i < len(names) else pid} {ns / len(new.wall) / 1e3:.0f} µs"
        for i, (pid, ns) in enumerate(new.by_process.items())
    )
    inside = figures["inside"]
    tools = figures["tools"]
    extra = tools["sandbox"]["median_ms"] - tools["in_process"]["median_ms"]

    def mark(ok: bool) -> str:
        return "✅" if ok else "❌"

    return f"""## Security boundary

Command: `{command_line()}`
Machine: {machine()}; run {time.strftime("%Y-%m-%d")}. Every figure below comes from the same run; the machine is
shared (load average {figures["load"][0]:.1f} when the run started, {os.getloadavg()[0]:.1f} when it ended, on {os.cpu_count()} cores), so
minima and CPU time show cost best, medians and maxima include waiting for the other work.

Warm round trip, `PythonSandbox.request("exec", code="1+1")` ({args.calls} calls each, in {args.rounds} rounds;
each round runs every row in turn, the order rotating), against its peer, a bare pipe round trip to
a child process (one short line written to a Python child that echoes it). Wall time per call; CPU
time per call (medians) of this process's calling thread ("host") and of the processes that serve
the call ("child side": bwrap, the supervisor and the worker, every thread, from the kernel's
schedstat, per round):

| round trip | min ms | median ms | max ms | n | host CPU µs | child side CPU µs | CPU µs in all | median ÷ pipe |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

- Warm: **{new_mid:.3f} ms** with bubblewrap (target ≤ {WARM_TARGET_MS:g} ms {mark(new_mid <= WARM_TARGET_MS)}), was {old_mid:.3f} ms at
  {args.base} (now {new_mid / old_mid:.2f}× that); CPU per call {new_cpu:.0f} µs, was {old_cpu:.0f} µs (now {new_cpu / old_cpu:.2f}× that).
  This run's median is the figure to quote for a warm sandbox call; medians of other runs differ with the machine's
  load (the minima, 0.2–0.3 ms, move least), so compare a sandbox call only with a peer measured in the same run.
- Where it goes (CPU per call of the bubblewrap row, by process: {profile}): three processes and
  three pipe hops instead of one process and two (the request goes straight to the worker, its id
  to the supervisor, and the answer through the supervisor, which owns the control channel so that
  user code cannot write onto it; each hop wakes a process whose caches the others have emptied),
  the supervisor's check of the run folder after every call, before it passes the answer
  on (the disk quota: a walk of the run folder by descriptor, {inside[0]:.0f} µs warm; its scan of the
  sandbox's open descriptors for files deleted but held open, {inside[1]:.0f} µs warm, runs right after the
  answer has left, off the call's path), and per call in the worker: the output files, the
  CPU limit, the wall-clock timer, the memory reserve, parsing and compiling the code (compiling and
  running `1+1` the worker's way, parse to a tree then two compiles, alone: {inside[2]:.0f} µs warm). As root the host also reads the sandbox's pids and memory
  cgroup counters around each call (through descriptors held open).
- Boundary measured: {figures["state"]}

Cold start, spawn to ready (wall; the three sandboxes' starts interleaved):

| sandbox | min ms | median ms | max ms | n |
|---|---|---|---|---|
{chr(10).join(cold_rows)}

Cold start {cold_new:.0f} ms with bubblewrap (target ≤ {COLD_TARGET_MS:g} ms {mark(cold_new <= COLD_TARGET_MS)}), against
{figures["cold"][BEFORE]["median_ms"]:.0f} ms for {args.base}'s sandbox in the same run. Since issue 31 a bubblewrap sandbox started by
root first starts a staging child that drops to the host uid nobody and then starts bubblewrap, so the sandbox holds no
root-owned process; that child is one more interpreter start on the way to ready.

A generated tool's call through `ws.tools.invoke` (warm, {args.calls} calls, same function):

| where it runs | median ms | p95 ms |
|---|---|---|
| out of process: its run's sandbox session (default) | {tools["sandbox"]["median_ms"]:.2f} | {tools["sandbox"]["p95_ms"]:.2f} |
| in this process (`ws.tools.trust(name, "in_process")`) | {tools["in_process"]["median_ms"]:.2f} | {tools["in_process"]["p95_ms"]:.2f} |

Out of process costs {extra:.2f} ms more a call (target ≤ {TOOL_EXTRA_TARGET_MS:g} ms {mark(extra <= TOOL_EXTRA_TARGET_MS)}).
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace the section in docs/benchmarks.md")
    parser.add_argument("--calls", type=int, default=2000, help="warm round trips of each contender")
    parser.add_argument("--rounds", type=int, default=20, help="rounds the warm round trips are interleaved in")
    parser.add_argument("--cold", type=int, default=20)
    parser.add_argument("--base", default="6d7243d", help="the commit whose sandbox is 'before'")
    parser.add_argument("--filter-base", default="cb59f56", help="the commit whose seccomp filter is 'before'")
    parser.add_argument("--filter-only", action="store_true", help="only the seccomp filter before/after")
    args = parse_args(parser, calls=6, rounds=2, cold=1)
    if args.filter_only:
        with tempfile.TemporaryDirectory(prefix="tea-bench-filter-") as tmp:
            figures = filter_before_after(args.filter_base, Path(tmp), args.calls, args.cold)
        publish(filter_report(figures, args.filter_base), args.write)
        return
    with tempfile.TemporaryDirectory(prefix="tea-bench-boundary-") as tmp:
        base = Path(tmp)
        previous = previous_sandbox(args.base, base / "previous")
        figures: dict[str, Any] = {"load": os.getloadavg()}
        contenders: list[Contender] = []
        try:
            after, box = sandbox_contender(AFTER, PythonSandbox, base / "after", isolation="bubblewrap")
            contenders.append(after)
            contenders.append(sandbox_contender(BEFORE, previous, base / "before", isolation="bubblewrap")[0])
            contenders.append(sandbox_contender(FALLBACK, PythonSandbox, base / "fallback", isolation="process")[0])
            contenders.append(pipe_contender())
            warm_interleaved(contenders, args.calls, args.rounds)
            figures["state"] = box.state()
            figures["inside"] = in_sandbox_costs(box)
        finally:
            for who in contenders:
                who.close()
        figures["warm"] = contenders
        figures["cold"] = cold_starts(
            {
                AFTER: (PythonSandbox, "bwrap", {"isolation": "bubblewrap"}),
                BEFORE: (previous, "before", {"isolation": "bubblewrap"}),
                FALLBACK: (PythonSandbox, "process", {"isolation": "process"}),
            },
            base,
            args.cold,
        )
        figures["tools"] = tool_calls(base, args.calls)
    publish(report(figures, args), args.write)


if __name__ == "__main__":
    main()
