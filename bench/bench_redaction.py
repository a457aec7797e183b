"""What content-based secret detection adds to redaction, per step of a 50-step run (issue 31, N10).

    .venv/bin/python bench/bench_redaction.py [--steps 50] [--rounds 30] [--base bd75986] [--write] [--quick]

1. Record: a scripted agent runs ``--steps`` lookup steps (the trajectory of bench_runtime.py: each
   observation 200 characters; and a second one whose observations are 2,000 characters of this
   repository's Python source) while every value handed to ``redact`` anywhere in the package is
   recorded, in order.
2. Replay the recorded calls through two redactions, interleaved round by round: **before**, the
   redaction of commit ``--base`` (``git show BASE:tea_notebook/redaction.py``: environment secrets, key names
   and secret shapes) and **after**, the working tree's (the same plus content detection: formats,
   entropy, prose, encodings). Each replay starts with an empty memo, as a run does, so each text is
   scanned as often as in the run. Two secrets are in the environment (``BENCH_*_API_KEY``), as a
   configured workspace has them.
CPU time (``time.process_time``) per step = replay time / steps; n rounds, min / median / max, and
the paired difference after - before (wall time too). The target: the CPU difference at most 0.1 ms
per step.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish  # noqa: E402

TARGET_MS = 0.1
FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit; " * 5


def committed_redaction(base: str) -> ModuleType:
    """The redaction module of commit ``base``, loaded beside the working tree's."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{base}:tea_notebook/redaction.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    folder = Path(tempfile.mkdtemp(prefix="tea-bench-redaction-"))
    path = folder / "redaction_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("redaction_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def source_chunks(size: int = 2000) -> list[str]:
    """Pieces of this repository's Python source, ``size`` characters each."""
    text = "".join(p.read_text() for p in sorted((ROOT / "tea_notebook" / "runtime").glob("*.py")))
    return [text[i : i + size] for i in range(0, len(text) - size, size)]


def run_steps(steps: int, observations: list[str]) -> None:
    """One scripted run of ``steps`` lookup steps in a fresh workspace."""
    import tea_notebook
    from tea_notebook.models.offline import ScriptedModel, call

    with tempfile.TemporaryDirectory() as tmp:
        ws = tea_notebook.Workspace(tmp, embedder="hashing")

        @tea_notebook.tool(workspace=ws)
        def lookup(key: str) -> str:
            """Look up a key in the reference table and return its value."""
            return observations[int(key[1:]) % len(observations)]

        script = ScriptedModel(
            [call("lookup", key=f"k{i}") for i in range(1, steps + 1)] + [call("done", success=True, text="ok")]
        )
        agent = ws.agent("bench", tools=["lookup"], max_steps=steps + 1, model=script.name)
        result = agent.run_sync("Look up the keys k1, k2, k3, ... one at a time, then report that you are done.")
        assert result.status == "success", result.error
        ws.close()


def record(steps: int, observations: list[str]) -> list[tuple[Any, bool]]:
    """The values (and ``keys`` flags) handed to ``redact`` during one scripted run of ``steps`` steps
    (after a first run that imports every module the run uses)."""
    from tea_notebook import redaction

    run_steps(3, observations)
    calls: list[tuple[Any, bool]] = []
    original = redaction.redact

    def recording(value: Any, *, keys: bool = True, **options: Any) -> Any:
        calls.append((value, keys))
        return original(value, keys=keys, **options)

    # every module that imported ``redact`` by name calls it through its own global
    users = [m for m in list(sys.modules.values()) if getattr(m, "redact", None) is original]
    for module in users:
        module.redact = recording  # type: ignore[attr-defined]
    try:
        run_steps(steps, observations)
    finally:
        for module in users:
            module.redact = original  # type: ignore[attr-defined]
    return calls


def replay(module: ModuleType, calls: list[tuple[Any, bool]]) -> tuple[float, float]:
    """CPU and wall seconds to redact the recorded calls with ``module``, from an empty memo."""
    module._memo.clear()  # noqa: SLF001 - a run starts with whatever the memo holds; a fresh one is the worst case
    redact = module.redact
    start, wall = time.process_time(), time.perf_counter()
    for value, keys in calls:
        redact(value, keys=keys)
    return time.process_time() - start, time.perf_counter() - wall


def spread(values: list[float]) -> str:
    """min / median / max in milliseconds."""
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def loadavg() -> str:
    """The 1-minute load average now."""
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    """Record, replay interleaved, print the figures (and with ``--write`` put them in docs/benchmarks.md)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--write", action="store_true", help="replace the section in docs/benchmarks.md")
    parser.add_argument("--base", default="bd75986", help="the commit whose redaction is 'before' (before issue 31)")
    args = parse_args(parser, steps=5, rounds=2)
    os.environ["BENCH_OPENAI_API_KEY"] = "sk-bench-" + "Zq8k3LmN0pX7" * 4
    os.environ["BENCH_OTHER_API_KEY"] = "bench-other-secret-value-42"
    from tea_notebook import redaction as after

    before = committed_redaction(args.base)
    workloads = {
        "lookup (200-char observations)": [("value of k: " + FILLER)[:200]],
        "source (2,000-char observations of Python source)": source_chunks(),
    }
    load_before = loadavg()
    print(f"load: {Path('/proc/loadavg').read_text().strip()}")
    rows = []
    for name, observations in workloads.items():
        calls = record(args.steps, observations)
        chars = sum(len(str(v)) for v, _ in calls)
        for module in (before, after):  # warm: the environment snapshot, compiled patterns
            replay(module, calls)
        times: dict[str, list[float]] = {"before": [], "after": []}
        walls: dict[str, list[float]] = {"before": [], "after": []}
        for i in range(args.rounds):
            order = (("before", before), ("after", after)) if i % 2 == 0 else (("after", after), ("before", before))
            for label, module in order:
                cpu, wall = replay(module, calls)
                times[label].append(cpu / args.steps * 1000)
                walls[label].append(wall / args.steps * 1000)
        diff = [a - b for a, b in zip(times["after"], times["before"])]
        wall_diff = [a - b for a, b in zip(walls["after"], walls["before"])]
        print(f"\n{name}: {len(calls)} redact calls, {chars:,} characters, {args.steps} steps, n={args.rounds}")
        print(f"  CPU ms per step, before ({args.base})    min/median/max: {spread(times['before'])}")
        print(f"  CPU ms per step, after (content too) min/median/max: {spread(times['after'])}")
        print(f"  added by content detection, paired   min/median/max: {spread(diff)}")
        print(
            f"  wall ms per step, before / after (median): {statistics.median(walls['before']):.3f} / "
            f"{statistics.median(walls['after']):.3f}; added, paired min/median/max: {spread(wall_diff)}"
        )
        verdict = "within" if statistics.median(diff) <= TARGET_MS else "OVER"
        print(f"  {verdict} the target of +{TARGET_MS} ms per step")
        rows.append(
            f"| {name}: {len(calls)} `redact` calls, {chars:,} characters | {spread(times['before'])} | "
            f"{spread(times['after'])} | **{spread(diff)}** | {spread(wall_diff)} | {args.rounds} | "
            f"{'✅' if verdict == 'within' else '❌'} |"
        )
    section = f"""## Redaction: content-based secret detection

Command: `{command_line()}` — machine: {machine()}; run {time.strftime("%Y-%m-%d")}; load average (1-min)
{load_before} before, {loadavg()} after, on 2 cores shared with other work.

Every value handed to `redact` during a {args.steps}-step scripted run (the trajectory of the runtime benchmark:
one `lookup` a step) is recorded, then replayed through two redactions taking turns round by round, each from an
empty memo as a run starts: **before**, `tea_notebook/redaction.py` of commit {args.base} (environment secrets, key
names, secret shapes) and **after**, the working tree's (the same plus content detection: formats, entropy, prose,
encodings). Two secrets are in the environment, as in a configured workspace. CPU time (`time.process_time`) per
step of the run; min / median / max over n rounds; "added" is the paired difference after − before. The peer is
that redaction in the same rounds; target: content detection adds at most {TARGET_MS} ms CPU a step.

| run's observations | before, CPU ms/step | after, CPU ms/step | added, CPU ms/step | added, wall ms/step | n | |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}
"""
    publish(section, args.write)


if __name__ == "__main__":
    main()
