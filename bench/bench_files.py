"""Benchmark of the files environment's read and search (issue 10: the safe opener), today's
implementation against the one before it, in the same run.

    .venv/bin/python bench/bench_files.py [--write] [--base COMMIT] [--reads 300] [--searches 40]

The previous implementation is ``tea_notebook/envs/files.py`` as of ``--base`` (the commit the
change started from), loaded from git into a temporary module; both run against the same files,
alternating call by call so that drift of the machine hits both alike, and their answers are checked
to be identical. Measured:
  1. ``read`` of a 100 KB text file (1,280 lines), warm;
  2. ``search`` for a text and for a regular expression in a folder of 200 files (20 folders of 10
     files, 4 KB each), warm;
  3. the action layer around a sync action: ``Environment.call("read")`` on the background loop, on
     the new action threads versus ``asyncio.to_thread`` as before.
With --write the figures replace the "Files environment" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish, summary  # noqa: E402

from tea_notebook import _sync  # noqa: E402
from tea_notebook.envs.files import FileSystem  # noqa: E402

BASE = "0c4a81bfc05278c801913b10c802505aefad9914"  # HEAD when the safe opener work started


def previous_module(base: str) -> ModuleType:
    """``tea_notebook/envs/files.py`` as of ``base``, imported as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{base}:tea_notebook/envs/files.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", prefix="files_before_", delete=False) as f:
        f.write(source)
    try:
        spec = importlib.util.spec_from_file_location("tea_files_before", f.name)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        os.unlink(f.name)
    return module


def make_tree(root: Path) -> None:
    """The benchmark's files: one 100 KB text file and 200 files of 4 KB in 20 folders."""
    root.mkdir(parents=True, exist_ok=True)
    line = "the quick brown fox jumps over the lazy dog; lorem ipsum dolor sit amet, 0123456\n"  # 80 B
    (root / "big.txt").write_text(line * 1280)
    for d in range(20):
        folder = root / f"pkg{d:02d}"
        folder.mkdir(exist_ok=True)
        for i in range(10):
            rows = [f"def helper_{d}_{i}_{n}(x):  # plain code line, nothing to find here {n:04d}\n" for n in range(50)]
            if i % 5 == 0:
                rows[25] = f"    return needle_{d}_{i}  # the one to find\n"
            (folder / f"mod{i}.py").write_text("".join(rows)[:4096])


def alternate(calls: dict[str, Callable[[], Any]], n: int) -> dict[str, list[float]]:
    """Time each callable ``n`` times, round robin; their answers must agree."""
    samples: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(n):
        answers = []
        for name, fn in calls.items():
            t0 = time.perf_counter()
            answers.append(fn())
            samples[name].append(time.perf_counter() - t0)
        if any(a != answers[0] for a in answers):
            raise RuntimeError(f"the implementations disagree: {[str(a)[:120] for a in answers]}")
    return samples


def bench(base: Path, commit: str, reads: int, searches: int) -> dict[str, Any]:
    before_cls = previous_module(commit).FileSystem
    make_tree(base / "run")
    old = before_cls(base / "run")
    new = FileSystem(base / "run")
    asyncio.run(old.start())
    asyncio.run(new.start())
    cases = {
        "read": (lambda fs: fs.read("big.txt"), reads),
        "search_text": (lambda fs: fs.search("needle"), searches),
        "search_regex": (lambda fs: fs.search(r"return needle_\d+_0\b", regex=True), searches),
    }
    out: dict[str, Any] = {}
    for name, (call, n) in cases.items():
        pair = {"before": lambda c=call: c(old), "now": lambda c=call: c(new)}
        alternate(pair, max(3, n // 10))  # warm-up
        samples = alternate(pair, n)
        out[name] = {k: summary(v) for k, v in samples.items()}
        out[name]["answer"] = call(new)

    async def via_to_thread() -> str:  # what Environment.call did before for a sync action
        return await asyncio.wait_for(asyncio.to_thread(new.read, "big.txt"), new.action_timeout)

    layer = alternate(
        {
            "before": lambda: _sync.run_sync(via_to_thread()),
            "now": lambda: _sync.run_sync(new.call("read", {"path": "big.txt"})),
        },
        reads,
    )
    out["layer"] = {k: summary(v) for k, v in layer.items()}
    return out


def render(results: dict[str, Any]) -> str:
    r = results["figures"]

    def row(label: str, key: str) -> str:
        b, n = r[key]["before"], r[key]["now"]
        return (
            f"| {label} | {b['min_ms']:.3f} / {b['median_ms']:.3f} / {b['max_ms']:.3f} ms "
            f"| {n['min_ms']:.3f} / {n['median_ms']:.3f} / {n['max_ms']:.3f} ms | {n['p95_ms']:.3f} ms "
            f"| {n['median_ms'] / b['median_ms']:.2f} |"
        )

    hits = r["search_text"]["answer"].count("\n") + 1
    rhits = r["search_regex"]["answer"].count("\n") + 1
    return f"""## Files environment: read and search

Command: `{command_line()}` — machine: {results["machine"]}; run {results["when"]}.

| what | before (`{results["base"][:7]}`), min / median / max | now, min / median / max | now, p95 | now / before (medians) |
|---|---|---|---|---|
{row(f"`read` of a 100 KB text file, whole, warm (n={r['read']['now']['n']})", "read")}
{row(f"`search` for a text in 200 files of 4 KB in 20 folders ({hits} hits; n={r['search_text']['now']['n']})", "search_text")}
{row(f"`search` for a regular expression, same folder ({rhits} hits; n={r['search_regex']['now']['n']})", "search_regex")}
{row(f"action layer: `Environment.call('read')` from a caller thread through the background loop (n={r['layer']['now']['n']})", "layer")}

"Before" is `tea_notebook/envs/files.py` as of `{results["base"][:7]}`, loaded from git into a temporary module
and run in the same process on the same files, alternating call by call with the current one; every
pair of answers is checked to be identical. The current implementation opens every path through
`envs/safe_open.Beneath` (one `openat` with `O_NOFOLLOW` per path component, relative to the run
folder's descriptor, then `fstat`), where the previous one resolved the path and then opened it by
name. `search` now walks the tree by descriptors too, reads each file once (at most the search size
limit) and skips files that do not contain a plain-text pattern before splitting lines; regular
expressions use the `regex` module with a time limit and without holding the GIL instead of `re`.
That is what the regular-expression row pays for: the `regex` module's per-call time limit costs
about 2 µs per line (10,000 lines here), where `re` matched these lines in 0.1 µs but could hold
the GIL for minutes on a pattern like `(a+)+$`. The limit counts the matching thread's CPU time, so
on a loaded machine the wall time of a runaway search can exceed the budget (2 s by default).
The last row times the whole action layer around a `read` (including the read itself): the new
per-session action threads (`envs/base.ActionThreads`) against `asyncio.to_thread` on the loop's
default executor, as `Environment.call` did before.
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--base", default=BASE, help="commit holding the previous implementation")
    parser.add_argument("--reads", type=int, default=300, help="timed reads per implementation")
    parser.add_argument("--searches", type=int, default=40, help="timed searches per implementation and kind")
    args = parse_args(parser, reads=3, searches=2)
    results: dict[str, Any] = {"machine": machine(), "when": time.strftime("%Y-%m-%d"), "base": args.base}
    with tempfile.TemporaryDirectory(prefix="tea-bench-files-") as tmp:
        results["figures"] = bench(Path(tmp), args.base, args.reads, args.searches)
    for key, value in results["figures"].items():
        print(key, {k: v for k, v in value.items() if k != "answer"}, flush=True)
    publish(render(results), args.write)


if __name__ == "__main__":
    main()
