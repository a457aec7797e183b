"""Benchmarks of time travel (issue 22): stored contexts, forks and context views.

    .venv/bin/python bench/bench_time_travel.py [--write] [--repeat 3] [--steps 10 100 1000]
        [--cost-steps 200] [--cost-repeat 5] [--fork-steps 100 500 900] [--fork-repeat 5]
        [--render-repeat 10] [--quick]

Every run is the same scripted agent-loop run: native tool mode, the default memory budget
(3,000 tokens, 4 recent steps: long runs fold their history into summaries), a ``lookup`` tool that
returns 300 characters, model call i asks for ``lookup(key="k{i}")`` and the last one calls
``done``. Each run has a fresh workspace (hashing embedder) in a fresh folder, after a warm-up run;
configurations are interleaved (on/off order alternates between repeats). Figures are
min / median / max over n runs; CPU time is ``time.process_time`` (every thread of the process),
given beside wall time because the machine is shared.

  1. Storage: bytes of tea.db per step with full contexts stored ("on") and with the recorder
     switched off ("off": ``ContextRecorder.record`` not called and no ``context`` key in the
     ``model_request`` event: the run as it was stored before issue 22), at each ``--steps``.
     Two measures: the file's growth (``PRAGMA wal_checkpoint(TRUNCATE)`` before and after, so
     every byte is in tea.db, pages included) and the logical bytes (events' ``data`` of the run +
     the ``blobs`` rows written during it); and per table from SQLite's ``dbstat``.
  2. The per-step cost of storing contexts: CPU and wall time per step of a ``--cost-steps`` run, on
     vs off, and ``ContextRecorder.record`` alone per call (the requests of a real run replayed into a
     fresh recorder, ``EventLog.keep`` stubbed).
  3. Time to fork at step 900 of a 1,000-step run up to the first live model call (the fork's
     scripted model notes ``time.perf_counter()`` when first called), beside forks at other steps.
  4. Rendering a step's context: ``ws.trajectory(run).context(900)`` (loads the whole trajectory),
     ``load_context(ws, run, 900)`` (reads only the run's ``model_request`` events) and
     ``StepContext._repr_html_()``.

With --write the figures replace the "Time travel" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import gc
import io
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook._sync import run_sync  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.protocol.tools import make_tool  # noqa: E402
from tea_notebook.runtime import contexts as contexts_mod  # noqa: E402
from tea_notebook.runtime.contexts import ContextRecorder  # noqa: E402
from tea_notebook.runtime.folder_snapshots import RACY_NS  # noqa: E402
from tea_notebook.runtime.runlog import RunLog  # noqa: E402

PROFILING = False  # no gc.collect() inside a profiled call (it would top the profile)
TASK = "Look up the keys k1, k2, k3, ... one at a time with the lookup tool, then report that you are done."
FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit; " * 8
OBSERVATION_CHARS = 300
STORAGE_RATIO_TARGET = 2.0  # on / off bytes per step at the longest run
FORK_TARGET_MS = 200.0
RENDER_TARGET_MS = 50.0
FILE_BYTES = 10 * 1024  # the file a "10kb" run writes at each step
UNCHANGED_FILES = 10  # the files an "unchanged" run writes once
FOLDER_RATIO_TARGET = 2.0  # unchanged / empty bytes per step at the longest run
RESTORE_TARGET_MS = 300.0  # fork with the folder restored, resume after kill -9: to the first model call
HANG_MARKER = "hanging.txt"
#: the figures measured before a resume read the stopped run's events once, checked the folder against
#: its seal, and a fork or resume stopped searching memory again (same machine, same bench)
BEFORE = {
    "fork": "Before the cuts of issue 28 (first measured 2026-11-29): 362 ms wall (321–557), 178 ms CPU (161–257), n = 5.",
    "resume": "Before the cuts of issue 28 (first measured 2026-11-29): 842 ms wall (609–854), 414 ms CPU (342–504), n = 3, "
    "most of it the memory search (the memory registry's first load, numpy's and faiss's imports, embeddings), the "
    "whole folder read and hashed, and the run's events decoded four times.",
}


def lookup_value(key: str) -> str:
    """The tool's answer: 300 characters."""
    return (f"value of {key}: " + FILLER)[:OBSERVATION_CHARS]


# -- switching the recorder off -------------------------------------------------------------------
class RecorderOff:
    """Within: no context is recorded and the ``model_request`` event has no ``context`` key (the
    event as it was before stored contexts)."""

    def __enter__(self) -> "RecorderOff":
        self._record, self._request = ContextRecorder.record, RunLog.request_event
        original = self._request

        def request_event(run: RunLog, client: Any, model: str, **data: Any) -> dict[str, Any]:
            event: dict[str, Any] = dict(original(run, client, model, **data))
            if event.get("context", 0) is None:
                del event["context"]
            return event

        ContextRecorder.record = lambda self, *a, **k: None  # type: ignore[method-assign]
        RunLog.request_event = request_event  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        ContextRecorder.record = self._record  # type: ignore[method-assign]
        RunLog.request_event = self._request  # type: ignore[method-assign]


# -- one run ----------------------------------------------------------------------------------------
def file_payload(key: str) -> bytes:
    """A file of ``FILE_BYTES`` bytes whose content is its own (it starts with ``key``)."""
    return ((key + ":").encode() + FILLER.encode() * (FILE_BYTES // len(FILLER) + 1))[:FILE_BYTES]


def new_workspace(base: Path, name: str, folder: str = "empty", hang_at: str | None = None) -> Any:
    """A workspace with the ``lookup`` tool. ``folder``: what the tool does to the run folder —
    ``empty`` nothing; ``unchanged`` writes ``UNCHANGED_FILES`` files of 10 KB at its first call and
    never touches them again; ``10kb`` writes one new 10 KB file per call. ``hang_at``: the key at
    which the tool writes ``HANG_MARKER`` in the workspace and sleeps (to be killed there)."""
    ws = tea_notebook.Workspace(base / name, embedder="hashing")
    state: dict[str, Path] = {}

    def lookup(key: str) -> str:
        """Look up the value of a key."""
        if key == hang_at:  # killed here, before it writes (a resume refuses a folder changed since the stop)
            (ws.path / HANG_MARKER).write_text(key)
            time.sleep(600)
        if folder != "empty":
            run = state.get("folder")
            if run is None:
                run = state["folder"] = ws.path / "runs" / ws.db.runs(1, parent_id=None)[0]["id"]
                run.mkdir(parents=True, exist_ok=True)
                if folder == "unchanged":
                    for i in range(UNCHANGED_FILES):
                        (run / f"kept-{i}.bin").write_bytes(file_payload(f"kept-{i}"))
            if folder == "10kb":
                (run / f"{key}.bin").write_bytes(file_payload(key))
        return lookup_value(key)

    ws.tools.register(make_tool(lookup, idempotent=True))
    return ws


def checkpoint(ws: Any) -> int:
    """Flush the workspace's events, move the WAL into tea.db and return the file's size."""
    ws.events.flush()
    with ws.db._lock:
        ws.db._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = ws.db.path.with_name(ws.db.path.name + "-wal")
    return ws.db.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def table_bytes(ws: Any) -> dict[str, int]:
    """Bytes of each table and index of tea.db (SQLite's dbstat, whole pages)."""
    rows = ws.db._read("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")
    return {name: int(size) for name, size in rows}


def one_run(
    base: Path, steps: int, on: bool, *, keep: bool = False, hook: Callable | None = None, folder: str = "empty"
) -> dict[str, Any]:
    """A ``steps``-step run in a fresh workspace: its time, CPU and the bytes it added to tea.db
    (``folder``: what its tool does to the run folder, see :func:`new_workspace`)."""
    name = f"ws-{steps}-{'on' if on else 'off'}-{folder}-{time.monotonic_ns()}"
    ws = new_workspace(base, name, folder)
    script = ScriptedModel(
        [call("lookup", key=f"k{i}") for i in range(1, steps)] + [call("done", success=True, text="all looked up")]
    )
    agent = ws.agent("looker", model=script.name, tools=["lookup"], max_steps=steps, tool_mode="native")
    size0, tables0 = checkpoint(ws), table_bytes(ws)
    blobs0 = ws.db._read(
        "SELECT coalesce(sum(length(data)), 0) + coalesce(sum(length(recipe)), 0), count(*) FROM blobs"
    )[0]
    if not PROFILING:
        gc.collect()
    switch = None if on else RecorderOff()
    if switch:
        switch.__enter__()
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        result = agent.run_sync(TASK) if hook is None else hook(agent)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        if switch:
            switch.__exit__()
    assert result.success and result.steps == steps, (result.status, result.steps)
    size1, tables1 = checkpoint(ws), table_bytes(ws)
    events, event_bytes = ws.db._read(
        "SELECT count(*), coalesce(sum(length(data)), 0) FROM events WHERE run_id=?", (result.run_id,)
    )[0]
    blobs1 = ws.db._read(
        "SELECT coalesce(sum(length(data)), 0) + coalesce(sum(length(recipe)), 0), count(*) FROM blobs"
    )[0]
    contexts = ws.db._read(
        "SELECT coalesce(sum(length(json_extract(data, '$.context'))), 0) FROM events WHERE run_id=? AND type='model_request'",
        (result.run_id,),
    )[0][0]
    folds = ws.db._read("SELECT count(*) FROM events WHERE run_id=? AND type='memory_written'", (result.run_id,))[0][0]
    file_blobs = ws.db._read("SELECT coalesce(sum(length(data)), 0), count(*) FROM file_blobs")[0]
    folder_records = ws.db._read(
        "SELECT coalesce(sum(length(json_extract(data, '$.folder'))), 0) FROM events WHERE run_id=? AND type='step'",
        (result.run_id,),
    )[0][0]
    out = {
        "steps": steps,
        "on": on,
        "wall": wall,
        "cpu": cpu,
        "file_bytes": size1 - size0,
        "event_bytes": event_bytes,
        "context_bytes": contexts,
        "blob_bytes": blobs1[0] - blobs0[0],
        "blob_rows": blobs1[1] - blobs0[1],
        "events": events,
        "folds": folds,
        "folder": folder,
        "file_blob_bytes": file_blobs[0],
        "file_blob_rows": file_blobs[1],
        "folder_record_bytes": folder_records,
        "tables": {k: tables1.get(k, 0) - tables0.get(k, 0) for k in set(tables0) | set(tables1)},
        "run_id": result.run_id,
    }
    if keep:
        out["ws"] = ws
    else:
        ws.close() if hasattr(ws, "close") else None
        shutil.rmtree(base / name, ignore_errors=True)
    return out


def stats(values: list[float], scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    """``median (min–max)`` of values times ``scale``."""
    v = sorted(x * scale for x in values)
    return f"{fmt.format(statistics.median(v))} ({fmt.format(v[0])}–{fmt.format(v[-1])})"


def ok(flag: bool) -> str:
    return "met" if flag else "**not met**"


# -- 1 and 2: storage and per-step cost -----------------------------------------------------------
def storage(base: Path, steps: list[int], repeat: int) -> tuple[dict[tuple[int, bool], list[dict]], Any]:
    """Every size, on and off, interleaved; keeps the workspace of the last longest "on" run."""
    runs: dict[tuple[int, bool], list[dict]] = {}
    kept = None
    for rep in range(repeat):
        for n in steps:
            for on in (True, False) if rep % 2 == 0 else (False, True):
                keep = on and n == max(steps) and rep == repeat - 1
                r = one_run(base, n, on, keep=keep)
                if keep:
                    kept = r
                runs.setdefault((n, on), []).append(r)
                print(
                    f"  storage: {n} steps, {'on ' if on else 'off'}: {r['file_bytes'] / n:,.0f} B/step (file), "
                    f"{r['wall']:.1f} s, cpu {r['cpu']:.1f} s",
                    flush=True,
                )
    return runs, kept


def capture_requests(base: Path, steps: int) -> tuple[list[tuple], list[float], dict]:
    """The arguments of every ``ContextRecorder.record`` call of a run (and each call's time there)."""
    captured: list[tuple] = []
    timed: list[float] = []
    original = ContextRecorder.record

    def record(
        self: ContextRecorder,
        messages: Any,
        tools: Any = None,
        params: Any = None,
        stream: str = "",
        text_pieces: Any = None,
    ) -> Any:
        captured.append(json.loads(json.dumps([messages, tools, params, stream, text_pieces], default=str)))
        t = time.perf_counter()
        out = original(self, messages, tools, params, stream, text_pieces=text_pieces)
        timed.append(time.perf_counter() - t)
        return out

    ContextRecorder.record = record  # type: ignore[method-assign]
    try:
        r = one_run(base, steps, True)
    finally:
        ContextRecorder.record = original  # type: ignore[method-assign]
    return captured, timed, r


class _Keep:
    def __init__(self) -> None:
        self.kept: dict[str, str] = {}

    def keep(self, texts: dict[str, str]) -> None:
        for k, v in texts.items():
            self.kept.setdefault(k, v)


def replay_record(captured: list[tuple], repeat: int) -> tuple[list[float], list[float], list[float]]:
    """``ContextRecorder.record`` alone: each captured request into a fresh recorder, in order.
    Returns per-call wall times (all calls of all repeats), per-run CPU per call and wall per call."""
    per_call: list[float] = []
    run_cpu: list[float] = []
    run_wall: list[float] = []
    for _ in range(repeat):
        recorder = ContextRecorder(_Keep())  # type: ignore[arg-type]
        if not PROFILING:
            gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        for messages, tools, params, stream, pieces in captured:
            t = time.perf_counter()
            recorder.record(messages, tools, params, stream, text_pieces=None if pieces is None else tuple(pieces))
            per_call.append(time.perf_counter() - t)
        run_cpu.append((time.process_time() - c0) / len(captured))
        run_wall.append((time.perf_counter() - t0) / len(captured))
    return per_call, run_cpu, run_wall


def profile_top(fn: Callable[[], Any], limit: int = 14, sort: str = "tottime") -> str:
    """The top of a cProfile of ``fn`` (which must run on this thread: see :func:`on_this_thread`)."""
    global PROFILING
    prof = cProfile.Profile()
    PROFILING = True
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
        PROFILING = False
    out = io.StringIO()
    pstats.Stats(prof, stream=out).strip_dirs().sort_stats(sort).print_stats(limit)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return "\n".join(lines[start : start + limit + 1])


class on_this_thread:
    """Within: ``run_sync`` runs coroutines on an event loop of this thread (cProfile sees one thread
    only; the library runs them on its background loop's thread)."""

    def __enter__(self) -> "on_this_thread":
        global run_sync
        self.loop = asyncio.new_event_loop()
        self._ours, run_sync = run_sync, self.loop.run_until_complete
        return self

    def __exit__(self, *exc: Any) -> None:
        global run_sync
        run_sync = self._ours
        self.loop.close()


def history_blobs(ws: Any) -> dict[str, float]:
    """The kept history blocks (``<step_N>`` parts) of a workspace: how many per step, and their bytes."""
    rows = ws.db._read("SELECT size, substr(CAST(data AS TEXT), 1, 16) FROM blobs WHERE data IS NOT NULL")
    steps: dict[str, int] = {}
    size = 0
    for n, head in rows:
        if head.startswith("<step_"):
            key = head.split(">", 1)[0]
            steps[key] = steps.get(key, 0) + 1
            size += n
    count = sum(steps.values())
    return {"per_step": count / max(1, len(steps)), "bytes": size, "blobs": count, "steps": len(steps)}


def event_cost(ws: Any, run_id: str, repeat: int) -> dict[bool, list[float]]:
    """CPU per ``model_request`` event of what ``EventLog.emit`` does to its data (redaction,
    clipping, JSON), with and without its ``context`` record (the run's stored events, replayed)."""
    from tea_notebook.redaction import redact
    from tea_notebook.store.blobs import clip_value

    datas = [json.loads(d) for *_, d in ws.db.run_events_of_type([run_id], ["model_request"])]
    out: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(repeat):
        for with_context in (True, False):
            ds = datas if with_context else [{k: v for k, v in d.items() if k != "context"} for d in datas]
            c0 = time.process_time()
            for d in ds:
                json.dumps(clip_value(redact(d), {}))
            out[with_context].append((time.process_time() - c0) / len(ds))
    return out


# -- 3: forks ---------------------------------------------------------------------------------------
def fork_parts(ws: Any, run_id: str, step: int, repeat: int) -> dict[str, list[float]]:
    """Where a fork's CPU time goes up to its first model call: reading the run's events, the plan,
    and writing (emit: redaction, clipping, JSON; flush: the transactions), each timed by a wrapper."""
    import tea_notebook.agents.forks as forks_mod
    from tea_notebook.runtime.events import EventLog

    acc: dict[str, float] = {}
    depth = {"n": 0}

    def timed(name: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*a: Any, **k: Any) -> Any:
            depth["n"] += 1
            c = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                depth["n"] -= 1
                acc[name] = acc.get(name, 0.0) + time.process_time() - c

        return wrapper

    saved = (EventLog.events, forks_mod.plan_fork, EventLog.emit, EventLog.flush)
    EventLog.events = timed("read the run's events (EventLog.events)", EventLog.events)  # type: ignore[method-assign]
    forks_mod.plan_fork = timed("plan_fork", forks_mod.plan_fork)
    EventLog.emit = timed("emit (incl. flush)", EventLog.emit)  # type: ignore[method-assign]
    EventLog.flush = timed("flush (transactions)", EventLog.flush)  # type: ignore[method-assign]
    out: dict[str, list[float]] = {}
    try:
        for _ in range(repeat):
            acc.clear()
            first: dict[str, Any] = {}

            def model(messages: Any, tools: Any, first: dict[str, Any] = first) -> Any:
                if not first:
                    first["c"], first["parts"] = time.process_time(), dict(acc)
                return call("done", success=True, text="forked")

            script = ScriptedModel(model)
            gc.collect()
            c0 = time.process_time()
            run_sync(ws.fork(run_id, step, model=script.name))
            out.setdefault("to the first model call", []).append(first["c"] - c0)
            for k, v in first["parts"].items():
                out.setdefault(k, []).append(v)
    finally:
        EventLog.events, forks_mod.plan_fork, EventLog.emit, EventLog.flush = saved  # type: ignore[method-assign]
    return out


def fork_once(ws: Any, run_id: str, step: int) -> dict[str, float]:
    first: dict[str, float] = {}

    def model(messages: Any, tools: Any) -> Any:
        if not first:
            first["t"], first["c"] = time.perf_counter(), time.process_time()
        return call("done", success=True, text="forked")

    script = ScriptedModel(model)
    if not PROFILING:
        gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    forked = run_sync(ws.fork(run_id, step, model=script.name))
    t_end = time.perf_counter()
    assert forked.success and first, forked.status
    return {"wall": first["t"] - t0, "cpu": first["c"] - c0, "total": t_end - t0}


# -- 5 to 7: run folders, forks that restore them, resume after kill -9 ----------------------------
FOLDER_LABELS = {
    "empty": "no files (empty run folder)",
    "unchanged": f"{UNCHANGED_FILES} files × 10 KB written at step 1, unchanged after",
    "10kb": "one new 10 KB file per step",
}


def folder_storage(
    base: Path, steps: list[int], repeat: int
) -> tuple[dict[tuple[int, str], list[dict]], dict[str, Any]]:
    """Every size in every folder mode, order rotated per repeat; keeps the workspaces of the last
    longest ``empty`` and ``10kb`` runs (the forks' sources)."""
    runs: dict[tuple[int, str], list[dict]] = {}
    kept: dict[str, Any] = {}
    modes = list(FOLDER_LABELS)
    for rep in range(repeat):
        order = modes[rep % 3 :] + modes[: rep % 3]
        for n in steps:
            for mode in order:
                keep = mode in ("empty", "10kb") and n == max(steps) and rep == repeat - 1
                r = one_run(base, n, True, keep=keep, folder=mode)
                if keep:
                    kept[mode] = r
                runs.setdefault((n, mode), []).append(r)
                print(
                    f"  folder storage: {n} steps, {mode}: {r['file_bytes'] / n:,.0f} B/step (file), "
                    f"{r['wall']:.1f} s, cpu {r['cpu']:.1f} s",
                    flush=True,
                )
    return runs, kept


def restore_parts(ws: Any, run_id: str, step: int) -> dict[str, float]:
    """One fork at ``step``: wall time to the first model call, and the CPU of the folder's pieces up
    to it (``manifest``, ``restore``, the fork's first ``FolderSnapshots.changes``), each timed by a wrapper."""
    import tea_notebook.runtime.loop as loop_mod
    from tea_notebook.runtime.folder_snapshots import FolderSnapshots

    acc: dict[str, float] = {}

    def timed(name: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*a: Any, **k: Any) -> Any:
            c = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                acc[name] = acc.get(name, 0.0) + time.process_time() - c

        return wrapper

    saved = (loop_mod.manifest, loop_mod.restore, FolderSnapshots.changes)
    loop_mod.manifest = timed("manifest", loop_mod.manifest)
    loop_mod.restore = timed("restore (write the files)", loop_mod.restore)
    FolderSnapshots.changes = timed("FolderSnapshots.changes", FolderSnapshots.changes)  # type: ignore[method-assign]
    try:
        out = fork_once(ws, run_id, step)
        first = dict(acc)
    finally:
        loop_mod.manifest, loop_mod.restore, FolderSnapshots.changes = saved  # type: ignore[method-assign]
    return {**out, **{k: v for k, v in first.items()}}


CHILD = r"""
import json, os, sys, time
t_exec = time.time()
sys.path.insert(0, {root!r}); sys.path.insert(0, {bench!r})
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import bench_time_travel as b
from tea_notebook._sync import run_sync
from tea_notebook.models.offline import ScriptedModel, call
mode, path, steps, hang = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if mode == "run":
    ws = b.new_workspace(b.Path(path).parent, b.Path(path).name, "10kb", hang_at=hang)
    script = ScriptedModel([call("lookup", key=f"k{{i}}") for i in range(1, steps)]
                           + [call("done", success=True, text="all looked up")], name="killed-looker")
    ws.agent("looker", model=script.name, tools=["lookup"], max_steps=steps, tool_mode="native").run_sync(b.TASK)
    sys.exit(0)
t_imported = time.time()
ws = b.new_workspace(b.Path(path).parent, b.Path(path).name, "10kb")
t_open = time.time()
run_id = sys.argv[5]
first = {{}}
n = {{"i": int(hang[1:])}}

def model(messages, tools):
    if not first:
        first["t"], first["c"] = time.perf_counter(), time.process_time()
    n["i"] += 1
    if n["i"] >= steps:
        return call("done", success=True, text="all looked up")
    return call("lookup", key=f"k{{n['i']}}")

ScriptedModel(model, name="killed-looker")
ws.agent("looker", model="tea/script:killed-looker", tools=["lookup"], max_steps=steps, tool_mode="native")
out = {{"exec_to_open": t_open - t_exec, "import": t_imported - t_exec}}
for what in sys.argv[6].split(","):
    first.clear()
    t0, c0 = time.perf_counter(), time.process_time()
    if what == "resume":
        result = run_sync(ws.resume(run_id))
    else:
        fork_model = ScriptedModel(lambda m, t: first or first.update(t=time.perf_counter(), c=time.process_time())
                                   or call("done", success=True, text="forked"))
        result = run_sync(ws.fork(run_id, int(hang[1:]) - 1, model=fork_model.name))
    out[what] = {{"wall": first["t"] - t0, "cpu": first["c"] - c0, "status": result.status, "steps": result.steps}}
print("RESULT " + json.dumps(out))
"""


def resume_after_kill(base: Path, steps: int, at: int, repeat: int) -> list[dict[str, Any]]:
    """``repeat`` times: a child process runs a ``steps``-step ``10kb`` run and is killed with SIGKILL
    while its tool runs at step ``at``; a fresh process then resumes it (and forks it at its last
    finished step, the peer, in the same process; which goes first alternates)."""
    import signal
    import subprocess

    code = CHILD.format(root=str(ROOT), bench=str(ROOT / "bench"))
    out = []
    for rep in range(repeat):
        folder = base / f"killed-{rep}-{time.monotonic_ns()}"
        marker = folder / HANG_MARKER
        t0 = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", code, "run", str(folder), str(steps), f"k{at}"])
        while not marker.exists():
            if child.poll() is not None:
                raise RuntimeError(f"the run to kill ended on its own (exit {child.returncode})")
            time.sleep(0.02)
        ran = time.perf_counter() - t0
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        probe = tea_notebook.Workspace(folder, embedder="hashing")
        run_id = probe.db.runs(1, parent_id=None)[0]["id"]
        probe.close() if hasattr(probe, "close") else None
        order = "resume,fork" if rep % 2 == 0 else "fork,resume"
        c0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", code, "resume", str(folder), str(steps), f"k{at}", run_id, order],
            capture_output=True,
            text=True,
            timeout=300,
        )
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"the resuming process failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        r = json.loads(line[7:])
        r["process"] = time.perf_counter() - c0
        r["ran_before_kill"] = ran
        r["order"] = order
        out.append(r)
        print(
            f"  resume after kill -9 at step {at}: {r['resume']['wall'] * 1000:.0f} ms to the first model call "
            f"({r['resume']['status']}); fork at {at - 1}: {r['fork']['wall'] * 1000:.0f} ms",
            flush=True,
        )
        shutil.rmtree(folder, ignore_errors=True)
    return out


# -- 4: rendering -----------------------------------------------------------------------------------
def render_configs(ws: Any, run_id: str, step: int) -> dict[str, Callable[[], Any]]:
    configs: dict[str, Callable[[], Any]] = {
        "ws.trajectory(run).context(step)": lambda: ws.trajectory(run_id).context(step),
        # issue 32: loading reads the run tree's rows; the steps are decoded on first use
        "ws.trajectory(run)": lambda: ws.trajectory(run_id),
        "ws.trajectory(run).steps": lambda: ws.trajectory(run_id).steps,
    }
    load_context = getattr(contexts_mod, "load_context", None)
    if load_context is not None:
        configs["load_context(ws, run, step)"] = lambda: load_context(ws, run_id, step)
    ctx = (load_context or (lambda w, r, s: w.trajectory(r).context(s)))(ws, run_id, step)
    if load_context is not None:  # the fast path rebuilds exactly what the trajectory's path does
        assert ctx.to_dict() == ws.trajectory(run_id).context(step).to_dict()
    configs["StepContext._repr_html_()"] = ctx._repr_html_
    configs["StepContext.to_dict()"] = ctx.to_dict
    return configs


def contexts_section(args: argparse.Namespace) -> None:
    """Parts 1 to 4: stored contexts, their cost, forks and rendering; the section printed (and written)."""
    steps = sorted(args.steps)
    longest = steps[-1]
    fork_steps = [s for s in args.fork_steps if s < longest]
    view_step = max(fork_steps) if fork_steps else max(1, longest - 1)
    command = f"`{command_line()}`"
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tea-bench-tt-") as tmp:
        base = Path(tmp)
        print("warm-up run", flush=True)
        one_run(base, min(steps[0], 10), True)
        one_run(base, min(steps[0], 10), False)

        # 2 first (short runs, the machine's state closest for on and off)
        print(f"per-step cost: {args.cost_steps}-step runs, on/off interleaved", flush=True)
        cost: dict[bool, list[dict]] = {True: [], False: []}
        for rep in range(args.cost_repeat):
            for on in (True, False) if rep % 2 == 0 else (False, True):
                cost[on].append(one_run(base, args.cost_steps, on))
        captured, in_run, _ = capture_requests(base, args.cost_steps)
        per_call, replay_cpu, replay_wall = replay_record(captured, max(1, args.cost_repeat))

        print("storage", flush=True)
        runs, kept = storage(base, steps, args.repeat)
        ws, run_id = kept["ws"], kept["run_id"]

        print(f"render: step {view_step} of the {longest}-step run", flush=True)
        configs = render_configs(ws, run_id, view_step)
        render: dict[str, list[tuple[float, float]]] = {k: [] for k in configs}
        for rep in range(args.render_repeat):
            order = list(configs.items()) if rep % 2 == 0 else list(reversed(configs.items()))
            for name, fn in order:
                gc.collect()
                t0, c0 = time.perf_counter(), time.process_time()
                fn()
                render[name].append((time.perf_counter() - t0, time.process_time() - c0))
        ctx = configs["StepContext._repr_html_()"].__self__
        html_chars = len(ctx._repr_html_())

        print(f"forks of the {longest}-step run at steps {fork_steps}", flush=True)
        forks: dict[int, list[dict[str, float]]] = {s: [] for s in fork_steps}
        for rep in range(args.fork_repeat):
            for s in fork_steps if rep % 2 == 0 else list(reversed(fork_steps)):
                forks[s].append(fork_once(ws, run_id, s))
                print(f"  fork at {s}: {forks[s][-1]['wall'] * 1000:.0f} ms to the first model call", flush=True)

        parts = fork_parts(ws, run_id, view_step, args.fork_repeat) if fork_steps else {}
        emit_cost = event_cost(ws, run_id, max(1, args.cost_repeat))
        history = history_blobs(ws)

        profiles: dict[str, str] = {}
        if args.profile:
            with on_this_thread() as here:
                profiles[f"a {args.cost_steps}-step run, contexts on (tottime)"] = profile_top(
                    lambda: one_run(
                        base, args.cost_steps, True, hook=lambda a: here.loop.run_until_complete(a.run(TASK))
                    ),
                    limit=30,
                )
                profiles[f"fork at {view_step} (tottime)"] = profile_top(
                    lambda: fork_once(ws, run_id, view_step), limit=30
                )
            profiles["ContextRecorder.record replayed (tottime)"] = profile_top(lambda: replay_record(captured, 1))
            profiles[f"ws.trajectory(run).context({view_step}) (cumulative)"] = profile_top(
                configs["ws.trajectory(run).context(step)"], limit=20, sort="cumulative"
            )
            if "load_context(ws, run, step)" in configs:
                profiles[f"load_context(ws, run, {view_step}) (cumulative)"] = profile_top(
                    configs["load_context(ws, run, step)"], limit=20, sort="cumulative"
                )
        ws.close() if hasattr(ws, "close") else None

    # -- the section ---------------------------------------------------------------------------
    lines = [
        "## Time travel: stored contexts, forks and context views",
        "",
        f"{command}, {time.strftime('%Y-%m-%d')}; {machine()}; load average (1-min) {load:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after; the machine was shared with other work, so CPU time "
        "(`time.process_time`, every thread) is given beside wall time. Every run: the same scripted agent-loop "
        f"run in a fresh workspace, native tool mode, default memory budget (3,000 tokens, 4 recent steps), a tool "
        f"returning {OBSERVATION_CHARS} characters; configurations interleaved; figures are median (min–max) over n runs. "
        '"on": every model request stored (issue 22); "off": `ContextRecorder.record` switched off and no `context` '
        "key in the `model_request` event, i.e. the run as stored before issue 22.",
        "",
        "**Bytes stored per step** (tea.db's growth over the run after `PRAGMA wal_checkpoint(TRUNCATE)`, "
        "whole pages; logical: the run's events' `data` + the `blobs` rows it added):",
        "",
        "| steps | n | on: file B/step | off: file B/step | on / off | on: logical B/step (events + blobs) | "
        "off: logical B/step | contexts' records B/step | memory folds | CPU ms/step on | CPU ms/step off |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratio_at: dict[int, float] = {}
    per_step_on: dict[int, float] = {}
    for n in steps:
        on, off = runs[(n, True)], runs[(n, False)]
        fon = [r["file_bytes"] / n for r in on]
        foff = [r["file_bytes"] / n for r in off]
        ratio_at[n] = statistics.median(fon) / statistics.median(foff)
        per_step_on[n] = statistics.median(fon)
        lon = [(r["event_bytes"] + r["blob_bytes"]) / n for r in on]
        loff = [(r["event_bytes"] + r["blob_bytes"]) / n for r in off]
        lines.append(
            f"| {n:,} | {len(on)} | {stats(fon, fmt='{:,.0f}')} | {stats(foff, fmt='{:,.0f}')} | {ratio_at[n]:.2f}× | "
            f"{stats(lon, fmt='{:,.0f}')} ({statistics.median([r['event_bytes'] for r in on]) / n:,.0f} + "
            f"{statistics.median([r['blob_bytes'] for r in on]) / n:,.0f}) | {stats(loff, fmt='{:,.0f}')} | "
            f"{statistics.median([r['context_bytes'] for r in on]) / n:,.0f} | {on[0]['folds']} | "
            f"{stats([r['cpu'] / n for r in on], 1000)} | {stats([r['cpu'] / n for r in off], 1000)} |"
        )
    big_on, big_off = runs[(longest, True)][0], runs[(longest, False)][0]
    names = sorted(set(big_on["tables"]) | set(big_off["tables"]), key=lambda k: -big_on["tables"].get(k, 0))
    lines += [
        "",
        f"Where the bytes of one {longest:,}-step run go (dbstat, bytes per step, on / off): "
        + "; ".join(
            f"`{k}` {big_on['tables'].get(k, 0) / longest:,.0f} / {big_off['tables'].get(k, 0) / longest:,.0f}"
            for k in names
            if big_on["tables"].get(k, 0) or big_off["tables"].get(k, 0)
        )
        + f". History blocks kept: {history['blobs']:,} blobs for {history['steps']:,} steps "
        f"({history['per_step']:.2f} per step, {history['bytes'] / max(1, history['steps']):,.0f} B per step)"
        + (
            ": each step's history block is stored once."
            if history["per_step"] < 1.05
            else ": some blocks are stored more than once (e.g. with and without a trailing newline)."
        ),
        "",
    ]
    mid = [n for n in steps if n >= 100] if sum(n >= 100 for n in steps) > 1 else steps[-2:]
    linear = max(per_step_on[n] for n in mid) / min(per_step_on[n] for n in mid) if len(mid) > 1 else float("nan")
    lines += [
        f"Targets: linear (bytes per step with contexts on, {' vs '.join(f'{n:,}' for n in mid)} steps: "
        f"{linear:.2f}× apart) — {ok(linear <= 1.5)}; ≤ {STORAGE_RATIO_TARGET:.0f}× today's bytes per step at "
        f"{longest:,} steps ({ratio_at[longest]:.2f}×) — {ok(ratio_at[longest] <= STORAGE_RATIO_TARGET)}.",
        "",
        f"**Per-step cost of storing contexts** ({args.cost_steps}-step runs, on/off interleaved, n = "
        f"{len(cost[True])} each):",
        "",
        "| | CPU ms/step | wall ms/step |",
        "|---|---|---|",
    ]
    cpu_on = [r["cpu"] / r["steps"] for r in cost[True]]
    cpu_off = [r["cpu"] / r["steps"] for r in cost[False]]
    for label, rs in (("on", cost[True]), ("off", cost[False])):
        lines.append(
            f"| {label} | {stats([r['cpu'] / r['steps'] for r in rs], 1000)} | {stats([r['wall'] / r['steps'] for r in rs], 1000)} |"
        )
    lines += [
        f"| on − off (medians) | {1000 * (statistics.median(cpu_on) - statistics.median(cpu_off)):+.2f} | "
        f"{1000 * (statistics.median([r['wall'] / r['steps'] for r in cost[True]]) - statistics.median([r['wall'] / r['steps'] for r in cost[False]])):+.2f} |",
        "",
        f"`ContextRecorder.record` alone (the {len(captured)} requests of a {args.cost_steps}-step run replayed into a "
        f"fresh recorder, {max(1, args.cost_repeat)} times): {stats(per_call, 1000, '{:.3f}')} ms per call "
        f"(n = {len(per_call)} calls); CPU per call over a whole replay {stats(replay_cpu, 1000, '{:.3f}')} ms "
        f"(n = {len(replay_cpu)}); inside a live run {stats(in_run, 1000, '{:.3f}')} ms per call (n = {len(in_run)}). "
        "What `EventLog.emit` does to a `model_request` event's data (redaction, clipping, JSON), CPU per event over "
        f"the {longest:,} events of the kept run: {stats(emit_cost[True], 1000, '{:.3f}')} ms with its context record, "
        f"{stats(emit_cost[False], 1000, '{:.3f}')} ms without (n = {len(emit_cost[True])}). The tool's argument is "
        'named `key`, so every new history block holds `"key":` and redaction scans it for key-value secrets.',
        "",
        f"**Time to fork** a {longest:,}-step run (from `await ws.fork(run, step, model=...)` to the fork's first "
        "live model call; fork's own scripted model):",
        "",
        "| fork at step | n | wall ms | CPU ms | whole fork (to its end) ms |",
        "|---|---|---|---|---|",
    ]
    for s in fork_steps:
        f = forks[s]
        lines.append(
            f"| {s:,} | {len(f)} | {stats([x['wall'] for x in f], 1000, '{:.0f}')} | "
            f"{stats([x['cpu'] for x in f], 1000, '{:.0f}')} | {stats([x['total'] for x in f], 1000, '{:.0f}')} |"
        )
    if fork_steps:
        fork_ms = statistics.median(x["wall"] for x in forks[view_step]) * 1000
        fork_cpu_ms = statistics.median(x["cpu"] for x in forks[view_step]) * 1000
        lines += [
            "",
            f"Target < {FORK_TARGET_MS:.0f} ms at step {view_step}: median {fork_ms:.0f} ms wall, "
            f"{fork_cpu_ms:.0f} ms CPU — {ok(fork_ms < FORK_TARGET_MS)}.",
        ]
        lines += [
            "",
            f"Where a fork at step {view_step} spends its CPU up to the first model call (each piece timed by a "
            f"wrapper in separate forks, n = {len(parts['to the first model call'])}; emit includes flush): "
            + "; ".join(f"{k} {stats(v, 1000, '{:.0f}')} ms" for k, v in parts.items())
            + ".",
        ]
    lines += [
        "",
        f"**Rendering the context of step {view_step}** of the {longest:,}-step run ({ctx.chars:,} characters in "
        f"{len(ctx.parts)} parts; HTML {html_chars:,} characters; n = {args.render_repeat} each, interleaved):",
        "",
        "| call | wall ms | CPU ms |",
        "|---|---|---|",
    ]
    for name, samples in render.items():
        lines.append(f"| `{name}` | {stats([s[0] for s in samples], 1000)} | {stats([s[1] for s in samples], 1000)} |")
    full = statistics.median(s[0] for s in render["ws.trajectory(run).context(step)"]) * 1000
    html_ms = statistics.median(s[0] for s in render["StepContext._repr_html_()"]) * 1000
    fast = render.get("load_context(ws, run, step)")
    fast_ms = statistics.median(s[0] for s in fast) * 1000 if fast else None
    verdict = (
        f"Target < {RENDER_TARGET_MS:.0f} ms (rebuild + HTML): through the whole trajectory {full + html_ms:.0f} ms — "
        f"{ok(full + html_ms < RENDER_TARGET_MS)}"
    )
    if fast_ms is not None:
        verdict += f"; through `load_context` {fast_ms + html_ms:.0f} ms — {ok(fast_ms + html_ms < RENDER_TARGET_MS)}"
    lines += ["", verdict + "."]
    publish("\n".join(lines) + "\n", args.write)
    for title, text in profiles.items():
        print(f"\n-- profile: {title}\n{text}")


def folders_section(args: argparse.Namespace) -> None:
    """Parts 5 to 7: bytes per step with run-folder snapshots, forks that restore the folder, resume
    after ``kill -9``; the section printed (and written)."""
    steps = sorted(args.steps)
    longest = steps[-1]
    fork_at = longest // 2
    kill_at = args.kill_steps // 2
    command = f"`{command_line()}`"
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tea-bench-folders-") as tmp:
        base = Path(tmp)
        print("warm-up runs", flush=True)
        for mode in FOLDER_LABELS:
            one_run(base, min(steps[0], 10), True, folder=mode)
        print("folder storage", flush=True)
        runs, kept = folder_storage(base, steps, args.folder_repeat)
        print(f"forks at step {fork_at} of the {longest}-step runs, with and without a folder", flush=True)
        forks: dict[str, list[dict[str, float]]] = {"10kb": [], "empty": []}
        for rep in range(args.fork_repeat):
            for mode in ("10kb", "empty") if rep % 2 == 0 else ("empty", "10kb"):
                r = kept[mode]
                forks[mode].append(restore_parts(r["ws"], r["run_id"], fork_at))
                print(f"  fork at {fork_at}, {mode}: {forks[mode][-1]['wall'] * 1000:.0f} ms", flush=True)
        profiles: dict[str, str] = {}
        if args.profile:
            with on_this_thread():
                r = kept["10kb"]
                profiles[f"fork at {fork_at} with the folder restored (cumulative)"] = profile_top(
                    lambda: fork_once(r["ws"], r["run_id"], fork_at), limit=30, sort="cumulative"
                )
        for r in kept.values():
            r["ws"].close() if hasattr(r["ws"], "close") else None
        print(f"resume after kill -9 at step {kill_at} of a {args.kill_steps}-step run", flush=True)
        killed = resume_after_kill(base, args.kill_steps, kill_at, args.kill_repeat)

    lines = [
        "## Time travel: run folders, forks that restore them, resume after kill -9",
        "",
        f"{command}, {time.strftime('%Y-%m-%d')}; {machine()}; load average (1-min) {load:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after; the machine was shared with other work, so CPU time "
        "(`time.process_time`) is given beside wall time; figures are median (min–max) over n runs, configurations "
        "interleaved. The runs are those of the section above (scripted agent loop, contexts stored), but the tool "
        "also works on the run folder, which is snapshotted after every step (`tea_notebook/runtime/folder_snapshots.py`: "
        "changed files hashed, each content kept once in `file_blobs`, the step event lists what changed and seals "
        "the folder): " + "; ".join(f"**{k}**: {v}" for k, v in FOLDER_LABELS.items()) + ".",
        "",
        "**Bytes stored per step** (tea.db's growth after `PRAGMA wal_checkpoint(TRUNCATE)`, whole pages; "
        "`file_blobs`: the file contents kept; folder records: the `folder` lists of the step events):",
        "",
        "| steps | folder | n | file B/step | ÷ empty | file B/step without `file_blobs` (dbstat) | `file_blobs` B/step "
        "(contents, rows) | folder records B/step | CPU ms/step | wall ms/step |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    per_step: dict[tuple[int, str], float] = {}
    for n in steps:
        for mode in FOLDER_LABELS:
            rs = runs[(n, mode)]
            per_step[(n, mode)] = statistics.median(r["file_bytes"] / n for r in rs)
        for mode in FOLDER_LABELS:
            rs = runs[(n, mode)]
            without = [(r["file_bytes"] - sum(v for k, v in r["tables"].items() if "file_blobs" in k)) / n for r in rs]
            lines.append(
                f"| {n:,} | {mode} | {len(rs)} | {stats([r['file_bytes'] / n for r in rs], fmt='{:,.0f}')} | "
                f"{per_step[(n, mode)] / per_step[(n, 'empty')]:.2f}× | {stats(without, fmt='{:,.0f}')} | "
                f"{statistics.median(r['file_blob_bytes'] for r in rs) / n:,.0f} ({rs[0]['file_blob_rows']:,}) | "
                f"{statistics.median(r['folder_record_bytes'] for r in rs) / n:,.0f} | "
                f"{stats([r['cpu'] / n for r in rs], 1000)} | {stats([r['wall'] / n for r in rs], 1000)} |"
            )
    ratio = per_step[(longest, "unchanged")] / per_step[(longest, "empty")]
    grow = {n: per_step[(n, "10kb")] for n in steps}
    mid = [n for n in steps if n >= 100] or steps
    linear = max(grow[n] for n in mid) / min(grow[n] for n in mid)
    extra = {n: per_step[(n, "10kb")] - per_step[(n, "empty")] for n in steps}
    lines += [
        "",
        f"Targets: files that do not change cost ≤ {FOLDER_RATIO_TARGET:.0f}× a run with an empty folder at "
        f"{longest:,} steps ({ratio:.2f}×; the {UNCHANGED_FILES} files' contents are stored once, at step 1, and later "
        f"steps record nothing for them) — {ok(ratio <= FOLDER_RATIO_TARGET)}; one new 10 KB file per step grows "
        f"linearly (bytes per step at {' vs '.join(f'{n:,}' for n in mid)} steps {linear:.2f}× apart; above the empty "
        "run: " + ", ".join(f"{extra[n]:,.0f} B/step at {n:,}" for n in steps) + f", for {FILE_BYTES:,} B of content) "
        f"— {ok(linear <= 1.5)}. Peer of the per-step CPU: the empty run's (the walk of an unchanged folder stats "
        "every file; a changed one is read and hashed).",
        "",
        f"**Fork at step {fork_at:,} of the {longest:,}-step run, folder restored** (from `await ws.fork(run, {fork_at}, "
        "model=...)` to the fork's first live model call, in the process that made the run; compared with the same "
        "fork of the run with an empty folder (the peer: the difference is what the folder costs); "
        f"the 10kb fork writes the {fork_at:,} files the run had written by step {fork_at}, "
        f"{fork_at * FILE_BYTES / 2**20:.1f} MiB; CPU of the folder's pieces timed by wrappers):",
        "",
        "| run folder | n | wall ms | CPU ms | whole fork ms | manifest CPU ms | restore CPU ms | snapshot CPU ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode in ("10kb", "empty"):
        f = forks[mode]
        lines.append(
            f"| {FOLDER_LABELS[mode]} | {len(f)} | {stats([x['wall'] for x in f], 1000, '{:.0f}')} | "
            f"{stats([x['cpu'] for x in f], 1000, '{:.0f}')} | {stats([x['total'] for x in f], 1000, '{:.0f}')} | "
            f"{stats([x.get('manifest', 0.0) for x in f], 1000, '{:.0f}')} | "
            f"{stats([x.get('restore (write the files)', 0.0) for x in f], 1000, '{:.0f}')} | "
            f"{stats([x.get('FolderSnapshots.changes', 0.0) for x in f], 1000, '{:.0f}')} |"
        )
    fork_ms = statistics.median(x["wall"] for x in forks["10kb"]) * 1000
    fork_cpu = statistics.median(x["cpu"] for x in forks["10kb"]) * 1000
    lines += [
        "",
        f"Target ≤ {RESTORE_TARGET_MS:.0f} ms: median {fork_ms:.0f} ms wall, {fork_cpu:.0f} ms CPU — "
        f"{ok(fork_ms <= RESTORE_TARGET_MS)}. {BEFORE['fork']}",
        "",
        f"**Resume after `kill -9`**: a child process runs a {args.kill_steps:,}-step 10kb run and is killed (SIGKILL) "
        f"while its tool runs at step {kill_at:,}, before the tool writes its file (the tool is idempotent, so the resume "
        "runs that call again; the resume first checks that the run folder is as the last snapshot left it: against "
        "the seal that snapshot recorded, reading and hashing only the files written within "
        f"{RACY_NS // 1_000_000} ms before it); a fresh process opens the workspace and times `await ws.resume(run)` to "
        "the first live model call (the resumed step's call runs again first). The resume reads the stopped run's "
        "events once (without its finished steps' calls), and, like a fork, takes the insights the run recalled from "
        "memory at its start from its record instead of searching memory again. Compared with: a fork of the killed "
        f"run at its last finished step ({kill_at - 1:,}) in the same fresh process (the peer: the same reading and "
        "restoring without the resume's checks and its re-run call); which goes first alternates, and the first pays "
        "the process's first-use costs (lazy imports), so each is given first and second. Also: the fresh process's "
        "imports + workspace open, and the whole process (to the resumed run's end).",
        "",
        "| | n | wall ms | CPU ms |",
        "|---|---|---|---|",
    ]
    for what, label in (("resume", "resume to the first model call"), ("fork", f"fork at step {kill_at - 1:,} (peer)")):
        for first, when in ((True, "first in its process"), (False, "second, after the other")):
            ks = [k[what] for k in killed if k["order"].startswith(what) == first]
            if ks:
                lines.append(
                    f"| {label}, {when} | {len(ks)} | {stats([k['wall'] for k in ks], 1000, '{:.0f}')} | "
                    f"{stats([k['cpu'] for k in ks], 1000, '{:.0f}')} |"
                )
    lines += [
        f"| the fresh process: imports + workspace open | {len(killed)} | "
        f"{stats([k['exec_to_open'] for k in killed], 1000, '{:.0f}')} | — |",
        f"| the fresh process, start to end (incl. the resumed run's {args.kill_steps - kill_at:,} steps) | "
        f"{len(killed)} | {stats([k['process'] for k in killed], 1000, '{:.0f}')} | — |",
    ]
    cold = [k["resume"] for k in killed if k["order"].startswith("resume")] or [k["resume"] for k in killed]
    resume_ms = statistics.median(k["wall"] for k in cold) * 1000
    resume_cpu = statistics.median(k["cpu"] for k in cold) * 1000
    statuses = sorted({k["resume"]["status"] for k in killed})
    lines += [
        "",
        f"Target ≤ {RESTORE_TARGET_MS:.0f} ms for the resume done first in a fresh process: median {resume_ms:.0f} ms "
        f"wall, {resume_cpu:.0f} ms CPU — {ok(resume_ms <= RESTORE_TARGET_MS)} (resumed runs ended: "
        f"{', '.join(statuses)}). {BEFORE['resume']}",
    ]
    publish("\n".join(lines) + "\n", args.write)
    for title, text in profiles.items():
        print(f"\n-- profile: {title}\n{text}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write the figures into docs/benchmarks.md")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each size and mode (storage)")
    parser.add_argument("--steps", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--cost-steps", type=int, default=200)
    parser.add_argument("--cost-repeat", type=int, default=5)
    parser.add_argument("--fork-steps", type=int, nargs="+", default=[100, 500, 900])
    parser.add_argument("--fork-repeat", type=int, default=5)
    parser.add_argument("--render-repeat", type=int, default=10)
    parser.add_argument("--profile", action="store_true", help="print cProfile tops of a run, a fork and a render")
    parser.add_argument(
        "--parts",
        nargs="+",
        default=["contexts", "folders"],
        choices=("contexts", "folders"),
        help="which sections to measure (and write): stored contexts (1-4), run folders (5-7)",
    )
    parser.add_argument("--folder-repeat", type=int, default=3, help="runs of each size and folder mode")
    parser.add_argument("--kill-steps", type=int, default=1000, help="steps of the run killed mid-run")
    parser.add_argument("--kill-repeat", type=int, default=6, help="runs killed and resumed")
    args = parse_args(
        parser,
        repeat=1,
        steps=[5, 20],
        cost_steps=8,
        cost_repeat=1,
        fork_steps=[3, 18],
        fork_repeat=1,
        render_repeat=1,
        folder_repeat=1,
        kill_steps=20,
        kill_repeat=1,
    )
    if "contexts" in args.parts:
        contexts_section(args)
    if "folders" in args.parts:
        folders_section(args)


if __name__ == "__main__":
    main()
