"""Benchmarks of the TEA protocol core (issue: protocol core).

    .venv/bin/python bench/bench_protocol.py [--write]

Measures, on this machine:
  1. registering 10,000 tools with precomputed embeddings (batch and one by one);
  2. hybrid top-10 search over 100,000 tools (median per query, with and without query embedding);
  3. embedding 1,000 tool descriptions with the default offline embedder;
  4. ``python -c "import tea_notebook"``.
With --write the figures replace the protocol section of docs/benchmarks.md.
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
SIZES = {"register": 10_000, "search": 100_000, "embed": 1000, "import_runs": 7}


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
    queries = [f"I need to {v} the {o} {e}" for v, o, e in zip(VERBS * 5, OBJECTS * 4, EXTRAS * 10)][:100]
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(Path(tmp) / "big", embedder=embedder)
        t0 = time.perf_counter()
        for start in range(0, n, 10_000):
            ws.tools.register_many(tools[start : start + 10_000], embeddings=vecs[start : start + 10_000])
        register_100k = time.perf_counter() - t0
        t0 = time.perf_counter()
        ws.tools.index()
        build = time.perf_counter() - t0
        kind = ws.tools._vectors.kind if ws.tools._vectors else "none"
        ws.tools.search("warm up the keyword index", k=10)
        cold, warm = [], []
        for q in queries:
            t0 = time.perf_counter()
            hits = ws.tools.search(q, k=10)
            cold.append(time.perf_counter() - t0)
            assert len(hits) == 10
        for q in queries:  # query vectors now cached: the index work alone
            t0 = time.perf_counter()
            ws.tools.search(q, k=10)
            warm.append(time.perf_counter() - t0)
        ws.close()
    return {
        "n": n,
        "index_kind": kind,
        "register_100k_s": register_100k,
        "index_build_s": build,
        "median_ms_with_query_embedding": 1000 * statistics.median(cold),
        "p95_ms_with_query_embedding": 1000 * sorted(cold)[int(0.95 * len(cold))],
        "median_ms_index_only": 1000 * statistics.median(warm),
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

    def timed(batch: list[str]) -> float:
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            embedder.embed(batch)
            runs.append(time.perf_counter() - t0)
        return statistics.median(runs)

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
        "descriptions_s": timed(descriptions),
        "descriptions_tokens": tokens(descriptions),
        "search_texts_s": timed(texts),
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


def render(results: dict) -> str:
    r, s, e, i = results["register"], results["search"], results["embed"], results["import"]
    ok = lambda cond: "✅" if cond else "❌"  # noqa: E731
    return f"""## Protocol core

Command: `.venv/bin/python bench/bench_protocol.py --write` — machine: {results["machine"]}; run {results["when"]}.

| what | figure | target | |
|---|---|---|---|
| register 10,000 tools, embeddings precomputed, one transaction (`register_many`) | {r["batch_s"]:.2f} s | < 5 s | {ok(r["batch_s"] < 5)} |
| register 10,000 tools one `register()` call each | {r["one_by_one_s"]:.2f} s | < 5 s | {ok(r["one_by_one_s"] < 5)} |
| build the vector index of those 10,000 (first search) | {r["index_build_s"]:.2f} s | | |
| hybrid top-10 search over {s["n"]:,} tools, median per query, **including** embedding the query with MiniLM | {s["median_ms_with_query_embedding"]:.2f} ms (p95 {s["p95_ms_with_query_embedding"]:.2f} ms) | < 5 ms | {ok(s["median_ms_with_query_embedding"] < 5)} |
| the same, query vector cached (BM25 + {s["index_kind"]} index + fusion only) | {s["median_ms_index_only"]:.2f} ms | | |
| register 100,000 tools (10 batches) / build their {s["index_kind"]} index | {s["register_100k_s"]:.1f} s / {s["index_build_s"]:.1f} s | | |
| embed 1,000 tool descriptions (mean {e["descriptions_tokens"]:.0f} tokens) with the default offline embedder | {e["descriptions_s"]:.2f} s | < 3 s | {ok(e["descriptions_s"] < 3)} |
| embed 1,000 whole tool texts (name + description + parameters, mean {e["search_texts_tokens"]:.0f} tokens) | {e["search_texts_s"]:.2f} s | | |
| index 1,000 new tools from scratch (3 views each: name, description, schema; what a first search costs) | {e["index_1000_tools_s"]:.2f} s | | |
| `python -c "import tea_notebook"`, CPU time of the child (wall; python alone: {i["python_startup_cpu_s"] * 1000:.0f} ms CPU) | {i["import_cpu_s"] * 1000:.0f} ms ({i["import_s"] * 1000:.0f} ms wall) | < 500 ms | {ok(i["import_cpu_s"] < 0.5)} |
| `import tea_notebook` + open a `Workspace` in a fresh folder (no jsonschema, faiss, onnxruntime or litellm), CPU time (min–max over n={i["n"]}; wall) | {i["import_and_open_cpu_s"] * 1000:.0f} ms ({i["import_and_open_cpu_range_s"][0] * 1000:.0f}–{i["import_and_open_cpu_range_s"][1] * 1000:.0f}; {i["import_and_open_s"] * 1000:.0f} ms wall) | ≤ 200 ms | {ok(i["import_and_open_cpu_s"] <= 0.2)} |

The 100k search uses vectors scattered around real MiniLM embeddings of 1,000 synthetic tool texts (embedding 100k
texts for real would take minutes and measures the embedder, which row "embed 1,000" covers); queries are real
sentences embedded live.
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parse_args(parser)
    if args.quick:
        SIZES.update(register=200, search=2_000, embed=20, import_runs=1)
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
    publish(render(results), args.write)


if __name__ == "__main__":
    main()
