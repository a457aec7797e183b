"""A short run after a long one with the default embedder, and a query embedding quiet and under load.

    .venv/bin/python bench/bench_memory_recall.py [--write] [--pairs 5] [--long 300] [--short 3]
        [--queries 30] [--procs 3] [--busy 3] [--quick]

* **Recall** (``--pairs`` fresh processes a configuration, configurations interleaved): in one process, a
  warm-up run in a scratch workspace, then — in alternating order — the ``--short``-step run in a fresh
  workspace (no memory: nothing is recalled) and, in another workspace, a ``--long``-step run followed by
  the same short run (its start recalls the long run's memory; its task is new to the embedder's
  query-vector cache, checked before the run), then that short run once more (``again``: a cell run
  again, its task's vector kept). Process CPU time (``time.process_time``,
  every thread) and wall time of each short run, and of the long run. Configurations: ``after`` (as
  shipped: each memory text is embedded once, when the run keeps it, a recall embeds its query) and
  ``before`` (``MemoryStore.embed_kept`` switched off: keeping embeds nothing, so the next recall embeds
  every text the long run kept, as before issue 32).
  Then a new process opens the long run's workspace and makes the short run (``reopened``): the first
  recall of a kernel loads the embedder's model.
* **Query embedding** (``--procs`` fresh processes a setting, interleaved): one short query embedded
  ``--queries`` times by the default embedder with onnxruntime's thread spinning on (its default) and
  off (as shipped); CPU and wall per query. With no load of the benchmark's own, then with ``--busy``
  busy-looping processes running (the machine's load average is printed with each). Where one goes
  (spinning off, no added load): the tokenizer, onnxruntime's ``session.run``, and the whole ``embed``
  call, each timed on its own over the same queries.

The default embedder throughout (all-MiniLM-L6-v2 int8 on onnxruntime); the scripted model answers
instantly, so the runs' cost is the framework's own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish, run_child  # noqa: E402

RATIO_TARGET = 1.5
LOOKUP_SOURCE = 'def lookup(key: str) -> str:\n    """Look a key up."""\n    return f"value of {key}: " + "the value is recorded; " * 8\n'


# --- children (fresh processes) ------------------------------------------------------------------


def _workspace(path: str):  # noqa: ANN202 - a Workspace
    import tea_notebook

    ws = tea_notebook.Workspace(path)  # the default embedder
    if "lookup" not in ws.tools:
        namespace: dict = {}
        exec(LOOKUP_SOURCE, namespace)  # noqa: S102 - the benchmark's own tool
        ws.tools.tool(namespace["lookup"], source=LOOKUP_SOURCE)
    return ws


def _run(ws, name: str, steps: int, task: str) -> tuple[float, float]:  # noqa: ANN001
    """CPU and wall seconds of one scripted ``steps``-step run."""
    from tea_notebook.models.offline import ScriptedModel, call

    agent = ws.agent(name, tools=["lookup"], max_steps=steps + 1)
    script = [call("lookup", key=f"k{i}") for i in range(steps - 1)] + [call("done", success=True, text="ok")]
    model = ScriptedModel(script)
    cpu, wall = time.process_time(), time.perf_counter()
    result = agent.run_sync(task, model=model.name)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert result.status == "success", result
    return cpu, wall


def child_pair(config: str, long_steps: int, short_steps: int, fresh_first: bool, keep: str, pair: int) -> dict:
    """One pair in this process: the short run in a fresh workspace, and after a long run (in ``keep``).

    The short run's task is new to the embedder's query-vector cache (checked): its recall embeds
    it. The same run once more, after it, shows what a notebook's re-run of the cell costs (its
    task's vector kept)."""
    from tea_notebook.models.embedders import query_vectors
    from tea_notebook.runtime.memory import MemoryStore

    recalls = timed_recalls(MemoryStore)
    if config == "before":
        # memory kept without its vectors: the next recall embeds every text missing one, as before issue 32
        MemoryStore.embed_kept = lambda self: None  # type: ignore[method-assign]
    out: dict = {}
    short_task = f"look up key k{pair + 1} and report it"
    with tempfile.TemporaryDirectory(prefix="tea-bench-recall-") as tmp:
        scratch = _workspace(str(Path(tmp) / "scratch"))
        _run(scratch, "warm", short_steps, "warm up")
        scratch.close()

        def fresh() -> None:
            ws = _workspace(str(Path(tmp) / "fresh"))
            out["fresh"] = _run(ws, "short", short_steps, short_task)
            ws.close()

        def after_long() -> None:
            ws = _workspace(keep)
            out["long"] = _run(ws, "long", long_steps, "look up every key in the list and report them")
            out["memory_texts"] = len(ws.memory)
            cache = query_vectors(ws.embedder)
            assert cache is not None and short_task not in cache, "the short run's task must be new to the cache"
            recalls.clear()
            out["after_long"] = _run(ws, "short", short_steps, short_task)
            # of it, the recall (its query's embedding and the search; none when the long run kept no memory)
            out["recall"] = recalls[0] if recalls else (0.0, 0.0)
            out["again"] = _run(ws, "short", short_steps, short_task)
            ws.close()

        for part in (fresh, after_long) if fresh_first else (after_long, fresh):
            part()
    return out


def timed_recalls(store: type) -> list[tuple[float, float]]:
    """Time every ``store.recall`` of this process from now on: CPU and wall seconds of each, in a
    list (cleared by the caller)."""
    plain = store.recall
    times: list[tuple[float, float]] = []

    def recall(self, task: str, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        c, w = time.process_time(), time.perf_counter()
        try:
            return plain(self, task, *args, **kwargs)
        finally:
            times.append((time.process_time() - c, time.perf_counter() - w))

    store.recall = recall
    return times


def child_reopened(keep: str, short_steps: int) -> dict:
    """The short run in a new process on the long run's workspace (the kernel's first recall)."""
    ws = _workspace(keep)
    out = {"reopened": _run(ws, "short2", short_steps, "look up key k2 and report it")}
    ws.close()
    return out


def child_queries(spin: str, queries: int) -> dict:
    """CPU and wall seconds of ``queries`` short query embeddings by the default embedder."""
    from tea_notebook.models.embedders import MiniLMEmbedder

    embedder = MiniLMEmbedder(spin=spin == "on")
    embedder.embed(["warm up"])
    cpu, wall = [], []
    for i in range(queries):
        c, w = time.process_time(), time.perf_counter()
        embedder.embed([f"look up key k{i} and report it"])
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return {"cpu": cpu, "wall": wall, "parts": query_parts(embedder, queries)}


def query_parts(embedder, queries: int) -> dict:  # noqa: ANN001 - a loaded MiniLMEmbedder
    """CPU seconds of a short query's whole ``embed`` call, its tokenizing alone and onnxruntime's run
    alone (the inputs ``embed`` gives it), the three taking turns, ``queries`` times each."""
    import numpy as np

    tokenizer, session = embedder._tokenizer, embedder._session  # noqa: SLF001 - the parts being timed
    whole, tokens, runs = [], [], []
    for i in range(queries):
        c = time.process_time()
        embedder.embed([f"look up key k{i} and report it"])
        whole.append(time.process_time() - c)
        c = time.process_time()
        enc = tokenizer.encode_batch([f"look up key k{i} and report it"])
        tokens.append(time.process_time() - c)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        c = time.process_time()
        session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
        runs.append(time.process_time() - c)
    return {"embed": whole, "tokenize": tokens, "run": runs, "tokens": int(ids.shape[1])}


# --- the parent ----------------------------------------------------------------------------------


def spawn(*args: str) -> dict:
    """This script's ``--child ARGS`` in a fresh interpreter: what it prints."""
    return run_child(__file__, *args)


def loadavg() -> float:
    """The 1-minute load average now."""
    return os.getloadavg()[0]


def spread(values: list[float], scale: float = 1000, fmt: str = "{:.1f}") -> str:
    """min / median / max of ``values`` (seconds) in milliseconds."""
    v = [x * scale for x in values]
    return " / ".join(fmt.format(x) for x in (min(v), statistics.median(v), max(v)))


def measure_recall(args: argparse.Namespace) -> dict:
    samples: dict[str, dict[str, list]] = {c: {} for c in ("before", "after")}
    loads = []
    for i in range(args.pairs):
        for config in ("before", "after") if i % 2 == 0 else ("after", "before"):
            with tempfile.TemporaryDirectory(prefix="tea-bench-recall-keep-") as keep:
                loads.append(loadavg())
                pair = spawn("pair", config, str(args.long), str(args.short), str(i % 2), keep, str(i))
                pair.update(spawn("reopened", keep, str(args.short)))
            for key, value in pair.items():
                samples[config].setdefault(key, []).append(value)
    return {"samples": samples, "loads": loads}


def measure_queries(args: argparse.Namespace, busy: int) -> dict:
    workers = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        time.sleep(1.0 if busy else 0)
        out: dict[str, dict[str, list[float]]] = {"on": {"cpu": [], "wall": []}, "off": {"cpu": [], "wall": []}}
        parts: dict[str, list] = {"tokenize": [], "run": [], "embed": [], "tokens": []}
        loads = []
        for i in range(args.procs):
            for spin in ("on", "off") if i % 2 == 0 else ("off", "on"):
                loads.append(loadavg())
                got = spawn("queries", spin, str(args.queries))
                out[spin]["cpu"] += got["cpu"]
                out[spin]["wall"] += got["wall"]
                if spin == "off":
                    parts["tokenize"] += got["parts"]["tokenize"]
                    parts["run"] += got["parts"]["run"]
                    parts["embed"] += got["parts"]["embed"]
                    parts["tokens"].append(got["parts"]["tokens"])
        return {"samples": out, "loads": loads, "parts": parts}
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()


def section(args: argparse.Namespace, recall: dict, quiet: dict, loaded: dict) -> str:
    s = recall["samples"]
    rows = []
    for config in ("before", "after"):
        c = s[config]
        ratios = [a[0] / f[0] for a, f in zip(c["after_long"], c["fresh"])]
        for label, key in (
            (f"{args.short}-step run, fresh workspace", "fresh"),
            (f"{args.short}-step run after the {args.long}-step run (its task new to the query cache)", "after_long"),
            ("of which its recall (its task's embedding and the search)", "recall"),
            (f"the same {args.short}-step run once more (a cell run again: its task's vector kept)", "again"),
            (f"{args.short}-step run after it, in a new process (first recall of a kernel)", "reopened"),
            (f"the {args.long}-step run itself ({statistics.median(c['memory_texts']):.0f} memory texts)", "long"),
        ):
            cpu, wall = [x[0] for x in c[key]], [x[1] for x in c[key]]
            rows.append(f"| {config} | {label} | {spread(cpu)} | {spread(wall)} |")
        rows.append(
            f"| {config} | **after-long ÷ fresh, CPU (paired)** | **{spread(ratios, 1, '{:.2f}×')}** | "
            f"target ≤ {RATIO_TARGET:g}× |"
        )
    med = statistics.median
    b, a = s["before"], s["after"]

    def cpu_ms(config: dict, key: str) -> float:
        return 1000 * med([x[0] for x in config[key]])

    ratio = med([x[0] / f[0] for x, f in zip(a["after_long"], a["fresh"])])
    parts = quiet["parts"]
    run_ms, embed_ms = 1000 * med(parts["run"]), 1000 * med(parts["embed"])
    reading = (
        f"**Reading it.** *after* is the code as shipped. Its {args.short}-step run after the long one costs "
        f"{cpu_ms(a, 'after_long'):.1f} ms CPU against {cpu_ms(a, 'fresh'):.1f} ms in a fresh workspace ({ratio:.2f}× "
        f"paired; target ≤ {RATIO_TARGET:g}× {'✅' if ratio <= RATIO_TARGET else '❌'}): the fresh workspace has no "
        "memory, so its run recalls nothing, while the run after the long one embeds its query once and searches "
        f"the stored memory; the difference, {cpu_ms(a, 'after_long') - cpu_ms(a, 'fresh'):.1f} ms, is mostly its "
        f"recall, {cpu_ms(a, 'recall'):.1f} ms: one query embedding, dearer inside a run than the "
        f"{embed_ms:.1f} ms of back-to-back queries in the parts table below (between two queries other work, the run's "
        "and on a shared machine its neighbours', evicts the model's weights from the cache; see the next paragraph), and a search of ~0.2 ms. Embedding the long run's memory texts has moved, not gone: *after* embeds "
        f"each text once, when the run keeps it, inside the long run ({cpu_ms(a, 'long'):.0f} ms CPU, against "
        f"{cpu_ms(b, 'long'):.0f} ms *before*; the first embedding also loads the model), where *before* "
        f"embedded them all again at the start of every later run ({cpu_ms(b, 'after_long'):.0f} ms). In a new "
        f"process the first recall loads the model either way ({cpu_ms(a, 'reopened'):.0f} ms CPU). Run again with "
        f"the same task (a cell re-run), the query's vector is kept with the embedder and the run costs "
        f"{cpu_ms(a, 'again'):.1f} ms; the benchmark's ratio is taken on a task the cache has not seen.\n\n"
        "**Why ≤ 1.5× is out of reach with the default embedder.** One short query's embedding, in the "
        f"parts table below, is {embed_ms:.2f} ms CPU (median), of which onnxruntime's `session.run` is "
        f"{run_ms:.2f} ms and the tokenizer {1000 * med(parts['tokenize']):.2f} ms (the rest, arrays, mean pooling "
        "and normalising, is the difference). onnxruntime's own profile of that run (2026-11-29, one-off: "
        "`SessionOptions.enable_profiling`) puts ~70% of its kernels in the 42 float32 `MatMul`s: the int8 "
        "weights are dequantised to float32 when the session loads, so each query streams ~42 MB of weights "
        "through the cache for ~10 tokens, memory-bound (3.2 ms with the weights warm in cache, ~5.5 ms when "
        "other work has evicted them). Session options change little (measured the same day, 40 runs each, "
        "alternating: one intra-op thread ~0.4 ms, ~10%, less CPU a query than two, which are kept for the wall "
        "time of batch embedding when a second core is free; "
        "graph optimisation levels basic / extended / all and the memory arena within noise; spinning is "
        "already off). A short query is already ~10 tokens, so truncation has nothing to cut. With a fresh "
        f"{args.short}-step run at {cpu_ms(a, 'fresh'):.1f} ms, one embedding alone makes the run after a long one "
        f"≥ {(cpu_ms(a, 'fresh') + run_ms) / cpu_ms(a, 'fresh'):.1f}× it: 1.5× needs a query embedding under "
        f"{cpu_ms(a, 'fresh') / 2:.1f} ms CPU. What would close it: weight-only int8 matrix products "
        "(activations kept in float, unlike the `quantize_dynamic` model the docs rejected for retrieval "
        "quality) or a smaller embedder: a new embedder id, every kept vector embedded again, and the "
        "retrieval-quality test passed again first."
    )
    queries = []
    for label, got in (("no load of ours", quiet), (f"+ {args.busy} busy-looping processes", loaded)):
        for spin in ("on", "off"):
            q = got["samples"][spin]
            queries.append(
                f"| {label} | spinning {spin}{' (onnxruntime default)' if spin == 'on' else ' (as shipped)'} | "
                f"{spread(q['cpu'], fmt='{:.2f}')} | {spread(q['wall'], fmt='{:.2f}')} | "
                f"{min(got['loads']):.2f}–{max(got['loads']):.2f} |"
            )
    parts_n = len(quiet["parts"]["run"])
    return f"""## Memory recall and query embedding

Command: `{command_line()}` — machine: {machine()}; run {time.strftime("%Y-%m-%d")}; load average
(1-min) {min(recall["loads"]):.2f}–{max(recall["loads"]):.2f} during the recall pairs, {loadavg():.2f} at the end, on 2 cores shared
with other work.

**A short run after a long one** ({args.pairs} pairs a configuration, each pair in a fresh process,
configurations and order interleaved; min / median / max, ms):

| configuration | what | CPU ms | wall ms |
|---|---|---|---|
{chr(10).join(rows)}

{reading}

**One short query embedding** (default embedder, {args.procs} fresh processes × {args.queries} queries a setting,
interleaved; min / median / max, ms):

| machine | onnxruntime threads | CPU ms | wall ms | load (1-min) |
|---|---|---|---|---|
{chr(10).join(queries)}

Where one goes (no load of ours, spinning off; the same processes, {parts_n} queries each part, a query of
{max(quiet["parts"]["tokens"])} tokens; min / median / max, ms CPU): the whole `embed` call
{spread(quiet["parts"]["embed"], fmt="{:.2f}")}, onnxruntime's `session.run` alone
{spread(quiet["parts"]["run"], fmt="{:.2f}")}, the tokenizer alone {spread(quiet["parts"]["tokenize"], fmt="{:.3f}")}.

The busy-looping processes are the benchmark's own added load, on top of whatever else the machine runs (the
load column); onnxruntime's threads spinning between runs is what it does by default, and what the embedder
switches off. Compare the two settings within a row pair: they ran in the same minutes.
"""


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, rest = sys.argv[2], sys.argv[3:]
        if kind == "pair":
            out = child_pair(rest[0], int(rest[1]), int(rest[2]), rest[3] == "1", rest[4], int(rest[5]))
        elif kind == "reopened":
            out = child_reopened(rest[0], int(rest[1]))
        else:
            out = child_queries(rest[0], int(rest[1]))
        print(json.dumps(out))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--pairs", type=int, default=5, help="fresh-process pairs a configuration")
    parser.add_argument("--long", type=int, default=300, help="steps of the long run")
    parser.add_argument("--short", type=int, default=3, help="steps of the short run")
    parser.add_argument("--queries", type=int, default=30, help="query embeddings a process")
    parser.add_argument("--procs", type=int, default=3, help="fresh processes a spinning setting")
    parser.add_argument("--busy", type=int, default=3, help="busy-looping processes for the loaded figures")
    args = parse_args(parser, pairs=1, long=12, queries=3, procs=1, busy=1)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    recall = measure_recall(args)
    quiet = measure_queries(args, 0)
    loaded = measure_queries(args, args.busy)
    publish(section(args, recall, quiet, loaded), args.write)


if __name__ == "__main__":
    main()
