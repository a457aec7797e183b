"""Benchmarks of the security boundary (issue 10): what bubblewrap and out-of-process tools cost.

    .venv/bin/python bench/bench_boundary.py [--write] [--calls 500] [--cold 20] [--base 0c4a81b]

Measures, on this machine, in one run:
  1. the sandbox's warm round trip for ``1+1`` (``PythonSandbox.request``, median and p95 of --calls)
     and its cold start (spawn to ready, median of --cold) for: the bubblewrap sandbox (default),
     the fallback child process (``isolation="process"``), and the previous implementation — the
     sandbox modules as they were at commit --base, loaded from git into a temporary package;
  2. a generated tool's call through ``ws.tools.invoke``: out of process (its warm sandbox session,
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

from _common import machine, parse_args, publish, summary  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.envs.sandbox import PythonSandbox  # noqa: E402
from tea_notebook.protocol.records import ToolRecord  # noqa: E402

WARM_TARGET_MS, COLD_TARGET_MS, TOOL_EXTRA_TARGET_MS = 1.0, 100.0, 2.0
TOOL_SOURCE = '''def count_vowels(text: str) -> int:
    """Count the vowels in a text."""
    return sum(1 for ch in text.lower() if ch in "aeiou")

TOOL_CONFIG = {"name": "count_vowels", "description": "Count vowels.", "function": count_vowels,
               "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}
'''


def previous_sandbox(base: str, folder: Path) -> Any:
    """The ``PythonSandbox`` class of commit ``base`` (its sandbox.py and child script from git)."""
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


def warm_and_cold(cls: Any, base: Path, tag: str, calls: int, cold: int, **options: Any) -> dict[str, Any]:
    box = cls(base / f"{tag}-warm", timeout=30, **options)
    try:
        box._spawn()
        for _ in range(max(50, calls // 10)):
            box.request("exec", code="1+1")
        samples = []
        for _ in range(calls):
            t0 = time.perf_counter()
            result = box.request("exec", code="1+1")
            samples.append(time.perf_counter() - t0)
            assert result.value == "2", result.text()
        described = box.state() if hasattr(box, "boundary") else "the previous implementation"
    finally:
        box.kill()
    starts = []
    for i in range(cold + 2):
        box = cls(base / f"{tag}-cold-{i}", timeout=30, **options)
        t0 = time.perf_counter()
        box._spawn()
        if i >= 2:  # two warm-ups: page cache, the bwrap probe
            starts.append(time.perf_counter() - t0)
        box.kill()
    return {"warm": summary(samples), "cold": summary(starts), "state": described}


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

Command: `.venv/bin/python bench/bench_boundary.py --filter-only --filter-base {commit}`
Machine: {machine()}. "before" is the seccomp filter of commit {commit} (set-id bits refused in chmod
calls only), "after" this one (also in open/openat with O_CREAT or O_TMPFILE, creat, mknod, mknodat;
openat2 refused with ENOSYS). Both run in the same process, interleaved round by round. The open row
is timed inside the sandbox: 20,000 `os.open(path, O_WRONLY | O_CREAT)` + `os.close` per sample.

| measure | filter | min | median | max | n |
|---|---|---|---|---|---|
{chr(10).join(rows)}

Warm round trip {warm:.2f} ms (target ≤ {WARM_TARGET_MS:g} ms), cold start {cold:.0f} ms (target ≤ {COLD_TARGET_MS:g} ms).
Load average over the last minute when the run ended: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (other
work on the machine inflates medians and maxima alike; minima show the cost of the filter best).
"""


def report(figures: dict[str, Any], args: argparse.Namespace) -> str:
    rows = []
    for key, label in (
        ("bubblewrap", "bubblewrap (default)"),
        ("process", "fallback child process"),
        ("previous", f"previous implementation ({args.base})"),
    ):
        f = figures[key]
        rows.append(
            f"| {label} | {f['warm']['median_ms']:.2f} | {f['warm']['p95_ms']:.2f} | {f['cold']['median_ms']:.0f} |"
        )
    new, old = figures["bubblewrap"], figures["previous"]
    warm_ratio = new["warm"]["median_ms"] / old["warm"]["median_ms"]
    cold_ratio = new["cold"]["median_ms"] / old["cold"]["median_ms"]
    tools = figures["tools"]
    extra = tools["sandbox"]["median_ms"] - tools["in_process"]["median_ms"]

    def mark(ok: bool) -> str:
        return "✅" if ok else "❌"

    return f"""## Security boundary

Command: `.venv/bin/python bench/bench_boundary.py --write --calls {args.calls} --cold {args.cold} --base {args.base}`
Machine: {machine()}. Every figure below comes from the same run.

Sandbox round trip (`PythonSandbox.request("exec", code="1+1")`, warm, {args.calls} calls) and cold start
(spawn to ready, median of {args.cold}):

| sandbox | warm median ms | warm p95 ms | cold median ms |
|---|---|---|---|
{chr(10).join(rows)}

- Warm: {new["warm"]["median_ms"]:.2f} ms with bubblewrap, {warm_ratio:.2f}× the previous implementation
  (target ≤ {WARM_TARGET_MS:g} ms {mark(new["warm"]["median_ms"] <= WARM_TARGET_MS)}). The extra cost is the supervisor's hop (it
  owns the control channel so that user code cannot write onto it) and its check of the run folder's
  size after every call (the disk quota).
- Cold: {new["cold"]["median_ms"]:.0f} ms with bubblewrap, {cold_ratio:.2f}× the previous implementation
  (target ≤ {COLD_TARGET_MS:g} ms {mark(new["cold"]["median_ms"] <= COLD_TARGET_MS)}).
- Boundary measured: {new["state"]}

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
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--cold", type=int, default=20)
    parser.add_argument("--base", default="0c4a81b", help="the commit whose sandbox is 'previous'")
    parser.add_argument("--filter-base", default="cb59f56", help="the commit whose seccomp filter is 'before'")
    parser.add_argument("--filter-only", action="store_true", help="only the seccomp filter before/after")
    args = parse_args(parser, calls=5, cold=1)
    if args.filter_only:
        with tempfile.TemporaryDirectory(prefix="tea-bench-filter-") as tmp:
            figures = filter_before_after(args.filter_base, Path(tmp), args.calls, args.cold)
        publish(filter_report(figures, args.filter_base), args.write)
        return
    with tempfile.TemporaryDirectory(prefix="tea-bench-boundary-") as tmp:
        base = Path(tmp)
        figures = {
            "bubblewrap": warm_and_cold(PythonSandbox, base, "bwrap", args.calls, args.cold, isolation="bubblewrap"),
            "process": warm_and_cold(PythonSandbox, base, "process", args.calls, args.cold, isolation="process"),
            "previous": warm_and_cold(
                previous_sandbox(args.base, base / "previous"), base, "prev", args.calls, args.cold
            ),
            "tools": tool_calls(base, args.calls),
        }
    publish(report(figures, args), args.write)


if __name__ == "__main__":
    main()
