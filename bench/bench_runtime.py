"""Benchmarks of the agent runtime against smolagents' ToolCallingAgent (issue: agent runtime).

    .venv/bin/python bench/bench_runtime.py [--write] [--repeat 3] [--steps 50 200]

Both agents follow the same scripted trajectory: model call i (1-based) asks for
``lookup(key="k{i}-{run}")`` (keys new in every run) for i <= N, then call N+1 finishes (``done`` on our side, smolagents'
``final_answer`` on theirs). ``lookup`` is instant and returns a 200-character string. So a run is
N+1 steps and N tool calls, and every millisecond that is not spent inside the model call is the
framework's.

Two ways of plugging in the scripted model, both measured side by side:
  (a) direct: no litellm. Ours: a ``ModelClient`` subclass whose ``complete`` answers from the
      script; smolagents: a ``Model`` subclass whose ``generate`` returns a ``ChatMessage``.
  (b) by name: a ``ScriptedModel`` named ``tea/script:ID``, as each framework serves a model name.
      Ours: ``ModelClient.complete``, which serves offline ``tea/`` models itself (no litellm);
      smolagents: ``LiteLLMModel(model_id=script.name)`` → ``litellm.completion`` → our ``tea``
      litellm provider. Before offline models bypassed litellm, both went through litellm here.
Measured (median of --repeat runs, each in a fresh workspace / fresh agent, after a warm-up run;
the configurations interleaved; CPU time (``time.process_time``, every thread) alongside wall time,
because the machine is shared and wall time is noisy; ``--quick``: a smoke run):
  1. per-step framework overhead = (wall time of the run - time inside the model call) / steps,
     where the model call is ``ModelClient.complete`` (ours) or ``Model.generate`` (smolagents);
     also the total wall time per step;
  2. prompt size (tokens of the messages sent) at step 50 and 200, our memory budget on
     (memory_budget=3000, keep_recent_steps=4), with one tokenizer for both;
  3. where our per-step time goes (each piece timed alone).
With --write the figures replace the "Agent runtime" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

# litellm must not try to download its price list (this machine is offline; ModelClient sets the
# same for our side, smolagents' LiteLLMModel would not).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.models.client import ModelClient, ModelReply, ToolCall  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.models.provider import ensure_registered  # noqa: E402

TASK = "Look up the keys k1, k2, k3, ... one at a time with the lookup tool, then report that you are done."
FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit; " * 5
MEMORY_BUDGET, KEEP_RECENT = 3000, 4
PROMPT_STEPS = (50, 200)
OVERHEAD_TARGET = 0.2  # ours / smolagents, per-step overhead
CPU_TARGETS = {10: 1.0, 50: 1.0, 200: 0.5}  # ours / smolagents, CPU time per step (issue: fast at every scale)
PROMPT_TARGET = 0.5  # ours / smolagents, prompt tokens at step 200


def lookup_value(key: str) -> str:
    """The instant tool's answer: 200 characters."""
    return (f"value of {key}: " + FILLER)[:200]


_RUNS = itertools.count(1)


class Script:
    """The shared trajectory: call i is lookup(key=f"k{i}-{run}") for i <= n, then ``finish``.

    Each script (each run, on either side) has keys of its own, so its tool results are texts no run
    before it saw, as a real run's are: a cache of earlier runs' texts (the redaction memo) helps no
    more than it would in a kernel that runs one new task after another."""

    def __init__(self, n: int, finish: dict[str, Any]):
        self.n, self.finish, self.i = n, finish, 0
        self.run = next(_RUNS)

    def __call__(self, messages: Any = None, tools: Any = None) -> dict[str, Any]:
        self.i += 1
        item = call("lookup", key=f"k{self.i}-{self.run}") if self.i <= self.n else self.finish
        return {**item, "id": f"call_{self.i}"}  # the same ids on every side and way (smolagents shows them)


OUR_FINISH = call("done", success=True, text="ok")
SMOL_FINISH = call("final_answer", answer="ok")


# -- tokens -----------------------------------------------------------------------------------
def _tokenizer() -> tuple[Callable[[str], int], str]:
    """tiktoken cl100k_base when it loads offline (litellm ships the file), else len(text) // 4."""
    try:
        import litellm.litellm_core_utils.default_encoding  # noqa: F401 - points TIKTOKEN_CACHE_DIR at the bundled files
        import tiktoken

        enc = tiktoken.get_encoding("cl100k_base")
        return (lambda text: len(enc.encode(text, disallowed_special=()))), "tiktoken cl100k_base"
    except Exception:  # noqa: BLE001 - any failure: the rough estimate
        return (lambda text: len(text) // 4), "len(text) // 4"


def message_text(m: Any) -> str:
    """Role and text of one message: our dicts and smolagents' ChatMessage alike."""
    if isinstance(m, dict):
        role, content = m.get("role", ""), m.get("content")
    else:
        role, content = getattr(m.role, "value", m.role), m.content
    if isinstance(content, list):
        content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return f"{role}\n{content or ''}"


def prompt_tokens(messages: list[Any], count: Callable[[str], int]) -> int:
    """Tokens of the messages' text (no per-message framing tokens, no tool schemas)."""
    return sum(count(message_text(m)) for m in messages)


# -- our side ----------------------------------------------------------------------------------
class TimedClient(ModelClient):
    """``ModelClient`` through litellm (way b), timing ``complete`` and keeping chosen prompts."""

    def __init__(self, capture: set[int] | None = None):
        super().__init__()
        self.model_s, self.calls = 0.0, 0
        self.capture = capture or set()
        self.prompts: dict[int, tuple[list, list | None]] = {}

    async def _reply(self, model: str, messages: list[dict], tools: list[dict] | None, **params: Any) -> ModelReply:
        return await super().complete(model, messages, tools, **params)

    async def complete(
        self, model: str, messages: list[dict], tools: list[dict] | None = None, **params: Any
    ) -> ModelReply:
        start = time.perf_counter()
        try:
            return await self._reply(model, messages, tools, **params)
        finally:
            self.calls += 1
            if self.calls in self.capture:
                self.prompts[self.calls] = (messages, tools)  # a reference: counted after the run
            self.model_s += time.perf_counter() - start


class DirectClient(TimedClient):
    """Way (a): the script answers inside ``complete``, no litellm (like smolagents' ``Model`` subclass)."""

    def __init__(self, script: Script, capture: set[int] | None = None):
        super().__init__(capture)
        self.script = script

    async def _reply(self, model: str, messages: list[dict], tools: list[dict] | None, **params: Any) -> ModelReply:
        item = self.script(messages, tools)
        raw = json.dumps(item["arguments"])
        return ModelReply(
            model=model,
            content=None,
            tool_calls=[ToolCall(item["id"], item["name"], json.loads(raw), raw)],
            scripted=True,
        )


def run_ours(n: int, way: str, capture: set[int] | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        ws = tea_notebook.Workspace(tmp, embedder="hashing")

        @tea_notebook.tool(workspace=ws)
        def lookup(key: str) -> str:
            """Look up a key in the reference table and return its value."""
            return lookup_value(key)

        script = Script(n, OUR_FINISH)
        if way == "a":
            # an offline name (native tools, extractive memory) that never reaches litellm
            client: TimedClient = DirectClient(script, capture)
            model = "tea/script:bench-direct"
        else:
            client = TimedClient(capture)
            model = ScriptedModel(script).name
        agent = ws.agent(
            "bench",
            tools=["lookup"],
            max_steps=n + 1,
            memory_budget=MEMORY_BUDGET,
            keep_recent_steps=KEEP_RECENT,
            client=client,
            model=model,
        )
        start, cpu = time.perf_counter(), time.process_time()
        result = agent.run_sync(TASK)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        assert result.status == "success" and result.answer == "ok", (result.status, result.error)
        assert client.calls == n + 1 and script.i == n + 1, (client.calls, script.i)
        ws.close()
    return {"wall": wall, "cpu": cpu, "model": client.model_s, "steps": client.calls, "prompts": client.prompts}


# -- smolagents' side ----------------------------------------------------------------------------
def smol_classes() -> dict[str, Any]:
    from smolagents import LiteLLMModel, Model, ToolCallingAgent, tool
    from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole
    from smolagents.monitoring import TokenUsage

    @tool
    def lookup(key: str) -> str:
        """Look up a key in the reference table and return its value.

        Args:
            key: the key to look up
        """
        return lookup_value(key)

    class Timed:
        """Times ``generate`` (the model call) and keeps chosen prompts."""

        def setup(self, capture: set[int] | None) -> None:
            self.model_s, self.calls = 0.0, 0
            self.capture = capture or set()
            self.prompts: dict[int, tuple[list, list | None]] = {}

        def generate(self, messages: list, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return super().generate(messages, *args, **kwargs)
            finally:
                self.calls += 1
                if self.calls in self.capture:
                    self.prompts[self.calls] = (messages, kwargs.get("tools_to_call_from"))
                self.model_s += time.perf_counter() - start

    class Direct(Model):
        """Way (a): a ``Model`` subclass answering from the script with a ``ChatMessage``."""

        def __init__(self, script: Script):
            super().__init__(model_id="scripted")
            self.script = script

        def generate(self, messages: list, stop_sequences=None, response_format=None, tools_to_call_from=None, **kw):
            item = self.script(messages, tools_to_call_from)
            fn = ChatMessageToolCallFunction(name=item["name"], arguments=json.dumps(item["arguments"]))
            return ChatMessage(
                role=MessageRole.ASSISTANT,
                content=None,
                tool_calls=[ChatMessageToolCall(function=fn, id=item["id"], type="function")],
                token_usage=TokenUsage(input_tokens=0, output_tokens=0),
            )

    class TimedDirect(Timed, Direct):
        pass

    class TimedLiteLLM(Timed, LiteLLMModel):
        pass

    return {"agent": ToolCallingAgent, "tool": lookup, "direct": TimedDirect, "litellm": TimedLiteLLM}


def run_smol(n: int, way: str, capture: set[int] | None = None) -> dict[str, Any]:
    from smolagents.memory import ActionStep

    classes = smol_classes()
    script = Script(n, SMOL_FINISH)
    if way == "a":
        model = classes["direct"](script)
    else:
        model = classes["litellm"](model_id=ScriptedModel(script).name)
    model.setup(capture)
    agent = classes["agent"](tools=[classes["tool"]], model=model, max_steps=n + 1, verbosity_level=0)
    start, cpu = time.perf_counter(), time.process_time()
    answer = agent.run(TASK)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    actions = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
    assert answer == "ok" and len(actions) == n + 1 and all(s.error is None for s in actions), answer
    assert model.calls == n + 1 and script.i == n + 1, (model.calls, script.i)
    return {"wall": wall, "cpu": cpu, "model": model.model_s, "steps": model.calls, "prompts": model.prompts}


RUNNERS = {"ours": run_ours, "smolagents": run_smol}


# -- measurements -----------------------------------------------------------------------------------
def bench_overhead(steps: list[int], repeat: int) -> dict[str, Any]:
    """Per-step overhead and wall time, median of ``repeat`` runs, configurations interleaved."""
    configs = [(side, way, n) for n in steps for way in ("a", "b") for side in RUNNERS]
    for side, way, _ in configs:  # warm-up: imports, litellm's first call, caches
        RUNNERS[side](5, way)
    samples: dict[tuple, list[dict]] = {c: [] for c in configs}
    for _ in range(repeat):
        for c in configs:
            side, way, n = c
            gc.collect()  # start every run from the same heap state
            samples[c].append(RUNNERS[side](n, way))
    out = {}
    for (side, way, n), runs in samples.items():
        per = [(r["wall"] - r["model"]) / r["steps"] for r in runs]
        cpu = [r["cpu"] / r["steps"] for r in runs]
        out[f"{side}/{way}/{n}"] = {
            "cpu_ms": 1000 * statistics.median(cpu),
            "cpu_ms_runs": [round(1000 * c, 3) for c in cpu],
            "overhead_ms": 1000 * statistics.median(per),
            "overhead_ms_runs": [round(1000 * p, 3) for p in per],
            "wall_ms": 1000 * statistics.median(r["wall"] / r["steps"] for r in runs),
            "model_ms": 1000 * statistics.median(r["model"] / r["steps"] for r in runs),
            "run_s": statistics.median(r["wall"] for r in runs),
        }
        print(f"{side:10s} way {way} {n:4d} steps: {out[f'{side}/{way}/{n}']}", flush=True)
    return out


def bench_prompts(n: int) -> dict[str, Any]:
    """Prompt tokens at every step of an n-step run (way a; the prompts are the same in way b)."""
    count, tokenizer = _tokenizer()
    every = set(range(1, n + 2))
    out: dict[str, Any] = {"tokenizer": tokenizer}
    for side, runner in RUNNERS.items():
        prompts = runner(n, "a", every)["prompts"]
        curve = {i: prompt_tokens(m, count) for i, (m, _) in sorted(prompts.items())}
        tools = prompts[1][1] or []
        if side == "smolagents":
            from smolagents.models import get_tool_json_schema

            tools = [get_tool_json_schema(t) for t in tools]
        first_half = max(v for i, v in curve.items() if i <= n // 2)
        second_half = max(v for i, v in curve.items() if i > n // 2)
        out[side] = {
            "curve": curve,
            "tool_schema_tokens": count(json.dumps(tools)),
            "max_first_half": first_half,
            "max_second_half": second_half,
        }
    # way (b) sends the same prompts: check it at the reported steps
    for side, runner in RUNNERS.items():
        prompts = runner(n, "b", set(PROMPT_STEPS))["prompts"]
        for step in PROMPT_STEPS:
            if step in prompts:
                assert prompt_tokens(prompts[step][0], count) == out[side]["curve"][step], (side, step)
    return out


def bench_breakdown() -> dict[str, Any]:
    """Our per-step pieces, each timed alone (median microseconds per call)."""
    from tea_notebook.redaction import redact
    from tea_notebook.runtime.agent import AgentRun
    from tea_notebook.runtime.prompts import StepRecord, build_messages

    def per_call(fn: Callable[[], Any], k: int = 300) -> float:
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(k):
                fn()
            runs.append((time.perf_counter() - start) / k)
        return 1e6 * statistics.median(runs)

    out: dict[str, Any] = {"env_vars": len(os.environ)}
    with tempfile.TemporaryDirectory() as tmp:
        ws = tea_notebook.Workspace(tmp, embedder="hashing")

        @tea_notebook.tool(workspace=ws)
        def lookup(key: str) -> str:
            """Look up a key in the reference table and return its value."""
            return lookup_value(key)

        agent = ws.agent("bench", tools=["lookup"], max_steps=201, model="tea/script:bench-direct")
        run = AgentRun(agent, TASK, [], None, None, 201, None, None)
        ws.db.start_run(
            {
                "id": run.run_id,
                "parent_id": None,
                "agent": "bench",
                "task": TASK,
                "model": run.model,
                "started": time.time(),
                "forked_from": None,
                "fork_step": None,
            }
        )
        payload = {
            "id": "call_1",
            "name": "lookup",
            "ok": True,
            "error_type": None,
            "observation": lookup_value("k1"),
            "latency": 1e-5,
        }
        text = json.dumps({"root_run": run.run_id, "agent": "bench", **payload})
        ids = itertools.count()
        out["emit_us"] = per_call(lambda: run.emit("tool_result", payload, 1))
        out["redact_us"] = per_call(lambda: redact(text))
        out["append_event_us"] = per_call(
            lambda: ws.db.append_events([(f"x{next(ids)}", run.run_id, None, "tool_result", 1, time.time(), text)])
        )
        out["offered_us"] = per_call(run._offered)
        tools, _ = run._offered()
        steps = [
            StepRecord(i, results=[("lookup", json.dumps({"key": f"k{i}"}), lookup_value(f"k{i}"))])
            for i in range(1, 5)
        ]
        out["build_messages_us"] = per_call(
            lambda: build_messages(
                task=TASK,
                files=[],
                step=50,
                max_steps=201,
                steps=steps,
                summaries=["step 1: lookup -> value of k1"] * 10,
                insights=[],
                todo="",
                environments=[],
                tools=tools,
                max_actions=3,
                native=True,
            )
        )

        loop = asyncio.new_event_loop()
        out["tool_invoke_us"] = per_call(
            lambda: loop.run_until_complete(ws.tools.ainvoke("lookup", {"key": "k1"}, run.ctx)), k=200
        )
        out["run_action_us"] = per_call(
            lambda: loop.run_until_complete(run._run_action(ToolCall("c", "lookup", {"key": "k1"}), 1)), k=200
        )
        loop.close()
        out["tool_direct_us"] = per_call(lambda: lookup("k1"))
        ws.close()
    return out


# -- interleaved pairs and the ablation --------------------------------------------------------------
def ablations() -> dict[str, list[tuple[Any, str, Any]]]:
    """Each guarantee (or cost) of a step, and how the bench switches it off: ``(object, attribute,
    stand-in)`` patches, applied for one run only. Switched off, a run is not what the runtime
    promises (nothing redacted, nothing stored, ...): these runs measure, they are not a mode."""
    import tea_notebook.protocol.tcp as tcp
    import tea_notebook.runtime.contexts as contexts
    import tea_notebook.runtime.events as events
    from tea_notebook.protocol.context import Context
    from tea_notebook.runtime.divergence import DivergenceWatch
    from tea_notebook.runtime.folder_snapshots import FolderSnapshots
    from tea_notebook.runtime.loop import AgentRun
    from tea_notebook.store.database import Database

    ids = itertools.count()

    async def inline(owner: Any, limit: int, label: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return fn(*args, **kw)

    class NoTimer:
        def cancel(self) -> None:
            pass

    return {
        "SQLite event writes (the step's one transaction)": [(Database, "append_events", lambda self, *a, **k: None)],
        "durable before a tool acts (intent journal write)": [
            (AgentRun, "_durable_before_tool", lambda self: NoTimer())
        ],
        "stored context (parts, diff, blobs)": [(contexts.ContextRecorder, "record", lambda self, *a, **k: None)],
        "redaction (events and context parts)": [
            (events, "redact", lambda d, **k: d),
            (contexts, "redact", lambda d: d),
        ],
        "input_hash (sha256 of the messages)": [(DivergenceWatch, "input_hash", lambda self, *a, **k: "")],
        "toolkit-context snapshot and compare": [
            (Context, "snapshot", lambda self: {"succeeded": [], "state": {}}),
        ],
        "folder walk and seal": [(FolderSnapshots, "changes", lambda self, ws: {})],
        "event ids": [(events.EventLog, "new_id", lambda self: f"{next(ids):021x}")],
        "the tool's thread hop (sync tool)": [(tcp, "run_sync_call", inline)],
    }


class switched_off:
    """Apply patches for the ``with`` block (see :func:`ablations`)."""

    def __init__(self, patches: list[tuple[Any, str, Any]]):
        self.patches = patches
        self.saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> None:
        self.saved = [(obj, name, getattr(obj, name)) for obj, name, _ in self.patches]
        for obj, name, value in self.patches:
            setattr(obj, name, value)

    def __exit__(self, *exc: Any) -> None:
        for obj, name, value in self.saved:
            setattr(obj, name, value)


def spread3(values: list[float]) -> dict[str, float]:
    """min / median / max."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def bench_pairs(steps: list[int], pairs: int) -> dict[str, Any]:
    """Ours and smolagents (way a), run back to back ``pairs`` times per length: process CPU per
    step of each, and the ratio within each pair; between them ours with every part of
    :func:`ablations` switched off at once (the loop itself, without its guarantees)."""
    every_part = [patch for patches in ablations().values() for patch in patches]
    for n in steps:  # warm-up at every length (a 50-step run folds memory: its first fold imports numpy)
        run_ours(n, "a"), run_smol(n, "a")
        with switched_off(every_part):
            run_ours(n, "a")
    out: dict[str, Any] = {}
    for n in steps:
        ours, smol, ratio, ours_wall, smol_wall, bare = [], [], [], [], [], []
        for _ in range(pairs):
            gc.collect()
            o = run_ours(n, "a")
            gc.collect()
            with switched_off(every_part):
                b = run_ours(n, "a")
            gc.collect()
            s = run_smol(n, "a")
            bare.append(1000 * b["cpu"] / b["steps"])
            ours.append(1000 * o["cpu"] / o["steps"])
            smol.append(1000 * s["cpu"] / s["steps"])
            ours_wall.append(1000 * o["wall"] / o["steps"])
            smol_wall.append(1000 * s["wall"] / s["steps"])
            ratio.append(ours[-1] / smol[-1])
        out[str(n)] = {
            "ours_cpu_ms": spread3(ours),
            "bare_cpu_ms": spread3(bare),
            "smol_cpu_ms": spread3(smol),
            "ratio": spread3(ratio),
            "ours_wall_ms": spread3(ours_wall),
            "smol_wall_ms": spread3(smol_wall),
        }
        print(f"pairs {n} steps: {out[str(n)]}", flush=True)
    return out


def bench_ablation(steps: list[int], pairs: int) -> dict[str, Any]:
    """What each guarantee costs a step: a full run and a run with that one part switched off, back
    to back ``pairs`` times; the difference of process CPU per step within each pair."""
    for n in steps:
        run_ours(n, "a")
    out: dict[str, Any] = {}
    for name, patches in ablations().items():
        out[name] = {}
        for n in steps:
            with switched_off(patches):
                run_ours(n, "a")  # warm-up of the patched path
            diffs = []
            for _ in range(pairs):
                gc.collect()
                full = run_ours(n, "a")
                gc.collect()
                with switched_off(patches):
                    part = run_ours(n, "a")
                diffs.append(1000 * (full["cpu"] - part["cpu"]) / full["steps"])
            out[name][str(n)] = spread3(diffs)
        print(f"ablation {name}: {out[name]}", flush=True)
    return out


def render_pairs(results: dict) -> str:
    """The interleaved pairs and the ablation as Markdown tables."""
    lines = []
    pairs = results.get("pairs")
    if pairs:
        lines += [
            f"Interleaved pairs (way a; {results['n_pairs']} pairs per length; process CPU time per step, every "
            "thread; min / median / max):",
            "",
            "| steps | ours CPU | smolagents CPU | ours ÷ smolagents (per pair) | ours wall | smolagents wall "
            "| ours, every part of the ablation below switched off (the loop alone), CPU |",
            "|---|---|---|---|---|---|---|",
        ]
        for n, r in pairs.items():

            def f(d: dict) -> str:
                return f"{d['min']:.2f} / **{d['median']:.2f}** / {d['max']:.2f}"

            lines.append(
                f"| {n} | {f(r['ours_cpu_ms'])} ms | {f(r['smol_cpu_ms'])} ms | {f(r['ratio'])}× | "
                f"{f(r['ours_wall_ms'])} ms | {f(r['smol_wall_ms'])} ms | {f(r['bare_cpu_ms'])} ms |"
            )
        lines.append("")
    ablation = results.get("ablation")
    if ablation:
        steps = list(next(iter(ablation.values())))
        lines += [
            f"What each part of a step costs (ablation: a full run and one with that part switched off, back to "
            f"back, {results['n_pairs']} pairs; process CPU per step of the difference, min / median / max; "
            "a median below the spread is noise):",
            "",
            "| part | " + " | ".join(f"{n}-step run" for n in steps) + " |",
            "|---|" + "---|" * len(steps),
        ]
        for name, by_n in ablation.items():
            cells = [
                f"{d['min'] * 1000:.0f} / **{d['median'] * 1000:.0f}** / {d['max'] * 1000:.0f} µs"
                for d in by_n.values()
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


# -- report ------------------------------------------------------------------------------------


def versions() -> str:
    from importlib.metadata import version

    return ", ".join(f"{p} {version(p)}" for p in ("tea_notebook", "smolagents", "litellm"))


def standing(results: dict) -> str:
    """The headline: ours against smolagents per step at each run length, slower or faster said plainly."""
    parts = []
    for n, r in (results.get("pairs") or {}).items():
        ours, smol, ratio = r["ours_cpu_ms"]["median"], r["smol_cpu_ms"]["median"], r["ratio"]["median"]
        word = "slower" if ratio > 1 else "faster"
        bare = r["bare_cpu_ms"]["median"]
        parts.append(
            f"{n}-step run **{ratio:.2f}×** ({ours:.2f} vs {smol:.2f} ms, {word}; the loop alone, every part of "
            f"the ablation switched off, {bare:.2f} ms: {bare / smol:.2f}×)"
        )
    o = results["overhead"]
    for n in results["steps"]:
        ours, smol = o[f"ours/a/{n}"]["cpu_ms"], o[f"smolagents/a/{n}"]["cpu_ms"]
        word = "slower" if ours > smol else "faster"
        parts.append(f"{n}-step run {ours / smol:.2f}× in the table below ({ours:.2f} vs {smol:.2f} ms, {word})")
    return (
        "**Where we stand.** CPU per step, ours ÷ smolagents (way a, both models answering at once; interleaved "
        "pairs, median of the per-pair ratios, then the medians of the table): " + "; ".join(parts) + ". "
        "smolagents rebuilds its whole message list at every step, so its cost per step grows with the run's "
        "length while ours stays flat: a ratio below 1 in long runs is a property of their length, not of a step. "
        "Way (b) puts litellm on smolagents' side only, so its ratios measure litellm, not the two frameworks."
    )


def per_step_reading(results: dict) -> str:
    """Why CPU per step at 10-50 steps misses ≤ 1× smolagents: the loop alone against the guarantees."""
    pairs = results.get("pairs") or {}
    if not pairs:
        return ""
    rows, kept = [], []
    for n, r in pairs.items():
        ours, bare, smol = (r[k]["median"] for k in ("ours_cpu_ms", "bare_cpu_ms", "smol_cpu_ms"))
        kept.append(ours - bare)
        rows.append(
            f"{n} steps: {ours:.2f} ms, of which the loop alone {bare:.2f} ms ({bare / smol:.2f}× smolagents' "
            f"{smol:.2f} ms) and the guarantees {ours - bare:.2f} ms"
        )
    return (
        "*CPU per step at 10–50 steps (missed: ≤ 1× smolagents).* With every part of the ablation switched off at "
        "once, our loop costs about what smolagents' whole step does; the rest is what a step of ours keeps that "
        "smolagents' does not (" + "; ".join(rows) + "). Each guarantee has a floor: the step's one SQLite "
        "transaction (five rows, their indexes, the tools' usage counts: 7–9 WAL pages; a bare SQLite commit of "
        'the same five rows costs about 30 µs CPU when nothing else runs, "Event writes against a bare SQLite '
        'commit", and 2–4× that inside a run, where other work has evicted its caches); the intent journal that '
        "makes the step durable before its tool acts (one `write`); the thread that runs a synchronous tool, so a "
        "tool that blocks can be stopped and timed out (two bare threads handing a lock to each other cost 6 µs on "
        "one core, 18–38 µs across the two: most of the hop is the wake-up of the other core); redaction of every "
        "new text a step makes (about six, once each: a text seen again in the same step is answered from "
        "a memo); the stored context (the new history block cut, hashed and kept). None of them is given up to "
        f"meet the peer, so this target stays missed. Against the field's limit issue 32 sets for a step's "
        f"bookkeeping (≤ 0.4 ms CPU), the guarantees cost {min(kept):.2f}–{max(kept):.2f} ms here."
    )


def render(results: dict) -> str:
    o, p, b = results["overhead"], results["prompts"], results["breakdown"]
    steps = results["steps"]
    ok = lambda cond: "✅" if cond else "❌"  # noqa: E731

    def spread(r: dict) -> str:
        return f"{r['overhead_ms']:.2f} ms ({min(r['overhead_ms_runs']):.2f}–{max(r['overhead_ms_runs']):.2f})"

    def cpu_spread(r: dict) -> str:
        return f"{r['cpu_ms']:.2f} ms ({min(r['cpu_ms_runs']):.2f}–{max(r['cpu_ms_runs']):.2f})"

    rows = []
    for n in steps:
        for way, label in (("a", "(a) direct"), ("b", "(b) by name")):
            ours, smol = o[f"ours/{way}/{n}"], o[f"smolagents/{way}/{n}"]
            ratio = ours["cpu_ms"] / smol["cpu_ms"]
            target = CPU_TARGETS.get(n) if way == "a" else None
            rows.append(
                f"| **CPU time per step** (all threads, model call included: both scripted), {n}-step run, {label} | "
                f"{cpu_spread(ours)} | {cpu_spread(smol)} | {ratio:.2f}× | "
                + (f"≤ {target:g}× | {ok(ratio <= target)} |" if target else "| |")
            )
    flat_cpu = [o[f"ours/a/{n}"]["cpu_ms"] for n in steps]
    smol_cpu = [o[f"smolagents/a/{n}"]["cpu_ms"] for n in steps]
    rows.append(
        f"| our CPU time per step at {' / '.join(map(str, steps))} steps, (a): flat? (largest ÷ smallest) | "
        f"{' / '.join(f'{v:.2f}' for v in flat_cpu)} ms | "
        f"{' / '.join(f'{v:.2f}' for v in smol_cpu)} ms | "
        f"{max(flat_cpu) / min(flat_cpu):.2f} | ≤ 1.2 | {ok(max(flat_cpu) / min(flat_cpu) <= 1.2)} |"
    )
    for n in steps:
        for way, label in (("a", "(a) direct"), ("b", "(b) by name")):
            ours, smol = o[f"ours/{way}/{n}"], o[f"smolagents/{way}/{n}"]
            ratio = ours["overhead_ms"] / smol["overhead_ms"]
            rows.append(
                f"| framework overhead per step, {n}-step run, {label} | {spread(ours)} | "
                f"{spread(smol)} | {ratio:.2f}× | ≤ {OVERHEAD_TARGET:g}× | {ok(ratio <= OVERHEAD_TARGET)} |"
            )
    for n in steps:
        for way, label in (("a", "(a) direct"), ("b", "(b) by name")):
            ours, smol = o[f"ours/{way}/{n}"], o[f"smolagents/{way}/{n}"]
            rows.append(
                f"| total wall time per step, {n}-step run, {label} (of which in the model call: ours "
                f"{ours['model_ms']:.2f} ms, smolagents {smol['model_ms']:.2f} ms) | {ours['wall_ms']:.2f} ms | "
                f"{smol['wall_ms']:.2f} ms | {ours['wall_ms'] / smol['wall_ms']:.2f}× | | |"
            )
    po, ps = p["ours"], p["smolagents"]
    last = max(po["curve"])
    for step in PROMPT_STEPS:
        if step not in po["curve"]:
            continue
        a, s = po["curve"][step], ps["curve"][step]
        target = f"≤ {PROMPT_TARGET:g}×" if step == max(PROMPT_STEPS) else ""
        mark = ok(a / s <= PROMPT_TARGET) if target else ""
        rows.append(f"| prompt tokens at step {step} | {a:,} | {s:,} | {a / s:.2f}× | {target} | {mark} |")
    half = last // 2
    # by design: the prompt at step 1 (system + task + tools) + the history budget + summaries
    # (merged at half the budget); 2× the budget leaves room for the tokenizer differing from our
    # len/4 estimate and for the step that triggers a fold
    bound = po["curve"][1] + 2 * MEMORY_BUDGET
    bounded = max(po["max_first_half"], po["max_second_half"]) <= bound
    rows.append(
        f"| largest prompt in steps 1–{half} / in steps {half + 1}–{last} | {po['max_first_half']:,} / "
        f"{po['max_second_half']:,} | {ps['max_first_half']:,} / {ps['max_second_half']:,} | | bounded "
        f"(≤ step-1 prompt + 2 × memory budget = {bound:,}) | {ok(bounded)} |"
    )
    rows.append(
        f"| tool schemas sent with every call (not in the prompt figures) | {po['tool_schema_tokens']} | "
        f"{ps['tool_schema_tokens']} | | | |"
    )
    table = "\n".join(rows)
    curve_steps = [s for s in (1, 10, 25, 50, 75, 100, 125, 150, 175, 200) if s in po["curve"]]
    curve = "\n".join(f"| {s} | {po['curve'][s]:,} | {ps['curve'][s]:,} |" for s in curve_steps)
    n_lo, n_hi = min(steps), max(steps)
    ratios = [o[f"ours/{w}/{n}"]["overhead_ms"] / o[f"smolagents/{w}/{n}"]["overhead_ms"] for w in "ab" for n in steps]
    flat = [o[f"ours/a/{n}"]["overhead_ms"] for n in steps]
    smol_a = [o[f"smolagents/a/{n}"]["overhead_ms"] for n in steps]
    need_us = 1000 * OVERHEAD_TARGET * o[f"smolagents/a/{n_lo}"]["overhead_ms"]
    b_minus_a = o[f"ours/b/{n_hi}"]["overhead_ms"] - o[f"ours/a/{n_hi}"]["overhead_ms"]
    wall_b = {n: (o[f"ours/b/{n}"]["wall_ms"], o[f"smolagents/b/{n}"]["wall_ms"]) for n in steps}
    lo_step, hi_step = min(PROMPT_STEPS), last - 1
    slope = (po["curve"][hi_step] - po["curve"][lo_step]) / (hi_step - lo_step)
    prompt_ratio = po["curve"][hi_step] / ps["curve"][hi_step]
    explanation = f"""**Reading the figures, and where a target is missed.**

{per_step_reading(results)}

*Overhead ({"met" if max(ratios) <= OVERHEAD_TARGET else "missed"}).* Our per-step overhead is {min(ratios):.1f}–{max(ratios):.1f}× smolagents', not
≤ {OVERHEAD_TARGET:g}×. It does not grow with the run's length ({" / ".join(f"{v:.2f}" for v in flat)} ms at {" / ".join(map(str, steps))} steps, way a)
while smolagents' grows ({" / ".join(f"{v:.2f}" for v in smol_a)} ms) because it rebuilds its whole message list at every
step; at longer runs the ratio keeps falling. Meeting ≤ {OVERHEAD_TARGET:g}× at {n_lo} steps would mean ≤ {need_us:.0f} µs a step.
smolagents keeps everything in memory and calls tools inline. A step of ours also makes the run
durable and checked: its events go to SQLite in one transaction at the end of the step (~{b["emit_us"]:.0f} µs an
event to prepare), the tool call is validated against its JSON Schema and runs a sync function in a
worker thread so a blocking tool cannot freeze the loop (or a notebook kernel): ~{b["tool_invoke_us"]:.0f} µs through
TCP for a function that itself takes {b["tool_direct_us"]:.1f} µs; the offered tools are pruned by the relation
graph (~{b["offered_us"]:.0f} µs) and the prompt is rebuilt from state. We keep those properties (nothing is lost when a
run breaks; bad arguments never reach a tool) and miss this target.

*Way (b) is not symmetric.* Our `ModelClient` serves offline `tea/` models itself, so our side of (b)
never touches litellm, while smolagents' `LiteLLMModel` goes through litellm to our provider (and its
`generate` holds its message conversion over the whole history, counted as model time there). Our
(b) − (a) difference at {n_hi} steps is {b_minus_a:.2f} ms a step. Wall time per step: ours
{wall_b[n_lo][0]:.1f} ms vs {wall_b[n_lo][1]:.1f} ms at {n_lo} steps, {wall_b[n_hi][0]:.1f} ms vs {wall_b[n_hi][1]:.1f} ms at {n_hi}.

*Prompt size: ≤ {PROMPT_TARGET:g}× {"met" if prompt_ratio <= PROMPT_TARGET else "missed"} ({prompt_ratio:.2f}× at step {hi_step}), bounded {"met" if bounded else "missed"}.* Our prompt is rebuilt
each step from state. When the live steps pass the memory budget ({MEMORY_BUDGET} tokens) the oldest are folded
into a summary, and when the summaries pass half the budget they are merged into one, so the prompt
saw-tooths inside a fixed band (largest {max(po["max_first_half"], po["max_second_half"]):,} tokens over {last} steps) instead of growing
(mean growth {slope:.0f} tokens a step between steps {lo_step} and {hi_step}, the band's noise). smolagents resends the full
history: {ps["curve"][hi_step]:,} tokens at step {hi_step}.
"""
    return f"""## Agent runtime

Command: `{results["command"]}` — machine: {results["machine"]}; {results["versions"]}; run {results["when"]}; load
average (1-min) {results["load"][0]:.2f} before, {results["load"][1]:.2f} after, on 2 cores shared with other work.

{standing(results)}

Both agents follow the same scripted trajectory: model call *i* asks for `lookup(key="k<i>-<run>")` for
*i* ≤ N, then call N+1 finishes (`done` for ours, `final_answer` for smolagents), so an N-step run
is N+1 steps. `lookup` is instant and returns 200 characters. The keys are new in every run (`<run>` counts
the runs of the process, on both sides), so each run's tool results are texts no earlier run saw, as a real
run's are: before 2026-11-29 every run repeated the same keys, and our redaction memo answered them from the
run before (worth about 0.1 ms a step to us, not to smolagents, which redacts nothing). Ours: `ws.agent("bench",
tools=["lookup"], max_steps=N+1, memory_budget={MEMORY_BUDGET}, keep_recent_steps={KEEP_RECENT})` in a fresh workspace
(hashing embedder); smolagents: `ToolCallingAgent(tools=[lookup], model=..., max_steps=N+1,
verbosity_level=0)`. The scripted model is plugged in two ways:
**(a) direct**, no litellm — ours a `ModelClient` subclass answering in `complete`, smolagents a
`Model` subclass returning a `ChatMessage` from `generate`; **(b) by name** — a `ScriptedModel`
named `tea/script:…`: ours `ModelClient.complete`, which serves offline models itself (no litellm),
smolagents `LiteLLMModel(model_id=script.name)` → `litellm.completion` → our `tea` provider.

**Definitions.** *Per-step framework overhead* = (wall time of the run − time spent inside the
model call) / steps, steps = N+1 model calls; the model call is `ModelClient.complete` on our side
and `Model.generate` on smolagents' side, timed by wrapping them. *Wall time per step* = wall
time of the run / steps. Wall time is `agent.run_sync(task)` / `agent.run(task)`; building the
workspace and the agent is not counted. Each figure is the median of {results["repeat"]} runs (configurations
interleaved, after one warm-up run of each). *Prompt tokens* = tokens of the role and text of
every message sent to the model at that step (captured inside `complete` / `generate`), counted
with {p["tokenizer"]} for both, without per-message framing tokens and without the tool schemas
(listed on their own row).

| what | ours | smolagents | ours ÷ smolagents | target | |
|---|---|---|---|---|---|
{table}

Prompt tokens along the {last - 1}-step run:

| step | ours | smolagents |
|---|---|---|
{curve}

Where our time per step goes (each piece timed alone, warm, in a tight loop: median per call, wall; a step is
1 model call, 1 tool call and 5 events: `model_request`, `model_response`, `tool_call`, `tool_result`, `step`).
The rows are separate measurements, not parts of one another; inside a run the same work costs more (see the
ablation below, measured inside runs):

| piece | time | compare with |
|---|---|---|
| one event prepared (`EventLog.emit`: JSON, `redact`, into the step's buffer; it writes nothing: the step's events go to SQLite in one transaction at the step's end) | {b["emit_us"]:.0f} µs | |
| `redact` of one such payload alone (environment compared with its snapshot: {b["env_vars"]} variables) | {b["redact_us"]:.0f} µs | |
| one SQLite transaction holding one event row (`Database.append_events`), timed apart from the emit above | {b["append_event_us"]:.0f} µs | a bare SQLite commit of one row: "Event writes against a bare SQLite commit" |
| tool call through TCP (`ws.tools.ainvoke`: lookup, schema check, thread hop, usage row) | {b["tool_invoke_us"]:.0f} µs | the tool function called directly: {b["tool_direct_us"]:.1f} µs |
| the same with its two events (`AgentRun._run_action`) | {b["run_action_us"]:.0f} µs | |
| tools offered this step (`AgentRun._offered`: registry read + relation pruning) | {b["offered_us"]:.0f} µs | |
| prompt assembly (`build_messages`, 4 live steps + 10 summaries) | {b["build_messages_us"]:.0f} µs | |

{render_pairs(results)}
{explanation}"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration (median)")
    parser.add_argument("--steps", type=int, nargs="+", default=[50, 200], help="run lengths N")
    parser.add_argument("--pairs", type=int, default=9, help="interleaved pairs (ours/smolagents, ablation)")
    parser.add_argument("--pair-steps", type=int, nargs="+", default=[10, 50], help="run lengths of the pairs")
    parser.add_argument("--only-pairs", action="store_true", help="only the pairs and the ablation (no --write)")
    args = parse_args(parser, repeat=1, steps=[10, 60], pairs=1, pair_steps=[5])
    if args.only_pairs and args.write:
        parser.error("--only-pairs measures part of the section: it cannot be combined with --write")
    results: dict[str, Any] = {
        "machine": machine(),
        "versions": versions(),
        "when": time.strftime("%Y-%m-%d"),
        "repeat": args.repeat,
        "steps": args.steps,
        "command": command_line(),
        "load": [os.getloadavg()[0]],
    }
    ensure_registered()
    results["n_pairs"] = args.pairs
    results["pairs"] = bench_pairs(args.pair_steps, args.pairs)
    results["ablation"] = bench_ablation(args.pair_steps, args.pairs)
    if args.only_pairs:
        print(render_pairs(results))
        return
    results["overhead"] = bench_overhead(args.steps, args.repeat)
    results["prompts"] = bench_prompts(max(args.steps))
    print(
        "prompts",
        {
            k: (v if k == "tokenizer" else {s: v["curve"][s] for s in PROMPT_STEPS if s in v["curve"]})
            for k, v in results["prompts"].items()
        },
        flush=True,
    )
    results["breakdown"] = bench_breakdown()
    print("breakdown", results["breakdown"], flush=True)
    results["load"].append(os.getloadavg()[0])
    publish(render(results), args.write)


if __name__ == "__main__":
    main()
