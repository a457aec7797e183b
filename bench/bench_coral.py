"""Benchmarks of CORAL's A2A messages: the framework latency of one message hop and message throughput.

    .venv/bin/python bench/bench_coral.py [--write] [--hops 2000] [--messages 1000] [--profile]

Measures, on this machine, in one run:
  1. Hop latency at the A2ASession + TCP tool level. One CORAL session (the team's RunLog, one child
     RunLog per member, the session in the team context's ``a2a`` state, as ``CoralTeam.run`` sets it up)
     with the orchestrator and 4 workers. The tools are invoked the way the agent loop does it:
     ``ws.tools.ainvoke(name, args, member_ctx)``. For each hop the recipient first calls
     ``wait_for_mentions`` (30 s timeout) and blocks; then the clock starts, the sender invokes
     ``send_message`` mentioning it, and the clock stops when the recipient's ``ainvoke`` of
     ``wait_for_mentions`` returns (taken in the recipient's own task). Hops alternate instruction
     (orchestrator → worker k) and reply (worker k → orchestrator), k cycling over the 4 workers. Also
     split: the ``send_message`` call itself, and from its return to the wait's return (the wake-up).
  2. Throughput, tool level: 5 concurrent tasks (orchestrator + 4 workers) on one event loop. The
     orchestrator sends one instruction to each worker, then waits until the 4 replies are in, and so
     on; each worker waits, replies once per instruction it received, waits again. --messages messages
     in all (half instructions, half replies); messages per second of wall time.
  3. Throughput, whole team: ``CoralTeam.run`` with scripted models (the offline ``tea`` provider
     through litellm) for all 5 members, planner off: every step of the orchestrator sends 2
     instructions (alternating worker pairs) and waits; every worker step replies to its unanswered
     instructions (at most 2) and waits. Same number of messages; this adds the agent loop, prompts
     (the ``coral`` transcript), model calls and step events.
With --write the figures replace the "CORAL: message hops" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import re
import statistics
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
from tea_notebook._sync import run_sync  # noqa: E402
from tea_notebook.agents.a2a import MAIN_THREAD, SYSTEM_SENDER, A2ASession, ensure_toolkit  # noqa: E402
from tea_notebook.agents.coral import ORCHESTRATOR  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.runtime.runlog import RunLog  # noqa: E402

HOP_TARGET_MS = 2.0
WORKERS = ("w1", "w2", "w3", "w4")
MODEL = "tea/test"


class Session:
    """A CORAL session wired as ``CoralTeam.run`` wires it, without the agents' loops."""

    def __init__(self, ws: tea_notebook.Workspace, max_messages: int):
        ensure_toolkit(ws)
        self.ws = ws
        self.log = RunLog(ws, "bench_coral", "bench", MODEL, "explicit", None)
        self.log.start(coral=True, members=[ORCHESTRATOR, *WORKERS])
        members = {ORCHESTRATOR: "coordinates", **{w: f"worker {w}" for w in WORKERS}}
        self.session = A2ASession(
            self.log, ORCHESTRATOR, members, max_messages=max_messages, budget_seconds=3600, wait_timeout_ms=30000
        )
        self.log.ctx.state("a2a")["session"] = self.session
        self.session.create_thread(SYSTEM_SENDER, MAIN_THREAD, list(members), thread_id=MAIN_THREAD)
        self.ctx = {}
        self.runs: list[RunLog] = []
        for name in members:
            run = RunLog(ws, name, "bench", MODEL, "explicit", self.log.ctx)
            run.start()
            self.session.join(name, run.run_id)
            self.ctx[name] = run.ctx
            self.runs.append(run)

    async def invoke(self, name: str, tool: str, args: dict[str, Any]) -> str:
        result = await self.ws.tools.ainvoke(tool, args, self.ctx[name])
        assert result.ok, result
        return result.to_observation()

    def close(self) -> None:
        self.session.close("bench over")
        for run in self.runs:
            run.close("success", "", None, 0)
        self.log.close("success", "", None, len(self.session.messages))


# -- 1. hop latency ---------------------------------------------------------------------------------
async def hops(s: Session, n: int) -> dict[str, list[float]]:
    total, sending, waking = [], [], []
    for i in range(n):
        worker = WORKERS[(i // 2) % len(WORKERS)]
        sender, receiver = (ORCHESTRATOR, worker) if i % 2 == 0 else (worker, ORCHESTRATOR)
        returned: dict[str, float] = {}

        async def receive(name: str = receiver, returned: dict[str, float] = returned) -> str:
            text = await s.invoke(name, "wait_for_mentions", {"timeout_ms": 30000})
            returned["t"] = time.perf_counter()
            return text

        waiting = asyncio.ensure_future(receive())
        while not s.session.members[receiver].waiting:  # the recipient is blocked in its wait
            await asyncio.sleep(0)
        content = f"hop {i}"
        t0 = time.perf_counter()
        sent = await s.invoke(sender, "send_message", {"content": content, "mentions": [receiver]})
        t1 = time.perf_counter()
        text = await waiting
        assert sent.startswith("Sent message #") and f": {content}" in text, text
        total.append(returned["t"] - t0)
        sending.append(t1 - t0)
        waking.append(returned["t"] - t1)
    return {"total": total, "send": sending, "wake": waking}


def bench_hops(n: int, profile: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tea-bench-coral-") as tmp:
        ws = tea_notebook.Workspace(Path(tmp) / "ws", embedder="hashing")
        s = Session(ws, max_messages=10 * n + 100)
        run_sync(hops(s, 50))  # warm-up (first calls, tool runtimes loaded)
        samples = run_sync(hops(s, n))
        out: dict[str, Any] = {k: summary(v) for k, v in samples.items()}
        for k, v in samples.items():
            ordered = sorted(v)
            out[k]["p99_ms"] = ordered[min(len(v) - 1, round(0.99 * (len(v) - 1)))] * 1000
            out[k]["max_ms"] = ordered[-1] * 1000
        over = out["total"]["median_ms"] > HOP_TARGET_MS
        if profile or over:
            prof = cProfile.Profile()

            async def profiled() -> None:
                prof.enable()
                await hops(s, min(n, 1000))
                prof.disable()

            run_sync(profiled())
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(18)
            out["profile"] = _trim_profile(text.getvalue())
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(25)
            out["profile_cumulative"] = _trim_profile(text.getvalue())
        out["emit"] = summary(emit_times(ws, n))
        s.close()
        events = [e for e in ws.events.events(s.log.run_id, nested=False) if e.type == "message"]
        out["events"], out["stored"] = len(events), len(s.session.messages)
        assert [e.data["seq"] for e in events] == list(range(1, out["stored"] + 1))
        ws.close()
    return out


def emit_times(ws: tea_notebook.Workspace, n: int) -> list[float]:
    """The ``message`` event alone (what ``A2ASession._append`` emits), in a run of its own."""
    log = RunLog(ws, "bench_emit", "bench", MODEL, "explicit", None)
    log.start()
    times = []
    for i in range(n):
        data = {"seq": i + 1, "thread": MAIN_THREAD, "sender": ORCHESTRATOR, "mentions": ["w1"], "content": f"hop {i}"}
        t0 = time.perf_counter()
        log.emit("message", {**data, "replayed": False})
        times.append(time.perf_counter() - t0)
    log.close("success", "", None, 0)
    return times


def _trim_profile(text: str) -> str:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    keep = [re.sub(r"/\S*/(site-packages|tea_notebook|lib/python3\.\d+)/", r"\1/", line) for line in lines[start:]]
    return "\n".join(line.rstrip() for line in keep if line.strip())


# -- 2. throughput, tool level ------------------------------------------------------------------------
async def exchange(s: Session, messages: int) -> float:
    rounds = messages // (2 * len(WORKERS))

    async def worker(name: str) -> int:
        replies = 0
        while True:
            text = await s.invoke(name, "wait_for_mentions", {"timeout_ms": 30000})
            if text.startswith("The conversation is over"):
                return replies
            for _ in range(text.count(f"→ @{name}:")):
                replies += 1
                await s.invoke(name, "send_message", {"content": f"{name} reply {replies}", "mentions": [ORCHESTRATOR]})

    async def orchestrator() -> None:
        got = 0
        for r in range(rounds):
            for w in WORKERS:
                await s.invoke(ORCHESTRATOR, "send_message", {"content": f"task {r} for {w}", "mentions": [w]})
            while got < (r + 1) * len(WORKERS):
                text = await s.invoke(ORCHESTRATOR, "wait_for_mentions", {"timeout_ms": 30000})
                got += sum(1 for line in text.splitlines() if line.startswith("#"))
        await s.invoke(ORCHESTRATOR, "submit_answer", {"answer": "done"})

    started = time.perf_counter()
    tasks = [asyncio.ensure_future(worker(w)) for w in WORKERS]
    await orchestrator()
    replies = await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    assert sum(replies) == rounds * len(WORKERS), replies
    return elapsed


def bench_exchange(messages: int, reps: int) -> dict[str, Any]:
    times = []
    with tempfile.TemporaryDirectory(prefix="tea-bench-coral-") as tmp:
        for rep in range(reps + 1):  # the first is a warm-up
            ws = tea_notebook.Workspace(Path(tmp) / f"ws{rep}", embedder="hashing")
            s = Session(ws, max_messages=messages + 10)
            elapsed = run_sync(exchange(s, messages))
            assert len(s.session.messages) == messages, len(s.session.messages)
            s.close()
            ws.close()
            if rep:
                times.append(elapsed)
    median = statistics.median(times)
    return {"messages": messages, "seconds": times, "median_s": median, "per_s": messages / median}


# -- 3. throughput, whole team -----------------------------------------------------------------------
def team_scripts(instructions: int) -> tuple[ScriptedModel, dict[str, ScriptedModel]]:
    line = re.compile(r"^#(\d+) \[thread main\] (\S+) → @(\S+?): (.*)$", re.M)
    state = {"sent": 0, "pair": 0}
    replies_seen: set[int] = set()

    def transcript(messages: list[dict]) -> str:
        found = re.search(r'<environment name="coral"><state>(.*?)</state>', messages[-1]["content"], re.S)
        return found[1] if found else ""

    def orchestrator(messages: list[dict], tools: list[dict]) -> Any:
        for seq, sender, _to, _text in line.findall(transcript(messages)):
            if sender != ORCHESTRATOR:
                replies_seen.add(int(seq))
        if state["sent"] < instructions:
            pair = WORKERS[2 * state["pair"] : 2 * state["pair"] + 2]
            state["pair"] = (state["pair"] + 1) % 2
            batch = []
            for w in pair[: instructions - state["sent"]]:
                state["sent"] += 1
                batch.append(call("send_message", content=f"task {state['sent']}", mentions=[w]))
            return [*batch, call("wait_for_mentions", timeout_ms=30000)]
        if len(replies_seen) >= instructions or "Deadlock" in messages[-1]["content"][-3000:]:
            return call("submit_answer", answer=str(len(replies_seen)))
        return call("wait_for_mentions", timeout_ms=30000)

    def worker(name: str) -> ScriptedModel:
        answered: set[int] = set()

        def fn(messages: list[dict], tools: list[dict]) -> Any:
            todo = [
                int(seq)
                for seq, sender, to, _ in line.findall(transcript(messages))
                if sender == ORCHESTRATOR and to == name and int(seq) not in answered
            ][:2]
            answered.update(todo)
            return [
                *(call("send_message", content=f"done #{seq}") for seq in todo),
                call("wait_for_mentions", timeout_ms=30000),
            ][:3]

        return ScriptedModel(fn)

    return ScriptedModel(orchestrator), {w: worker(w) for w in WORKERS}


def bench_team(messages: int, reps: int) -> dict[str, Any]:
    results = []
    with tempfile.TemporaryDirectory(prefix="tea-bench-coral-") as tmp:
        for rep in range(reps + 1):  # the first is a warm-up (litellm's import and first call)
            ws = tea_notebook.Workspace(Path(tmp) / f"team{rep}", embedder="hashing")

            @ws.tools.tool
            def noop() -> str:
                """Does nothing."""
                return "ok"

            orchestrator, workers = team_scripts(messages // 2)
            team = ws.coral(
                "bench_team",
                workers={w: {"tools": ["noop"], "model": m.name} for w, m in workers.items()},
                planner=False,
                models={"orchestrator": orchestrator.name},
                max_messages=messages + 10,
                max_steps=messages,
                budget_seconds=600,
            )
            started = time.perf_counter()
            result = team.run_sync("Exchange messages.")
            elapsed = time.perf_counter() - started
            stored = len(result.trajectory.messages)
            assert result.status == "success" and stored == messages, (result, stored)
            calls = len(orchestrator.calls) + sum(len(m.calls) for m in workers.values())
            if rep:
                results.append({"seconds": elapsed, "model_calls": calls})
            ws.close()
    median = statistics.median(r["seconds"] for r in results)
    return {
        "messages": messages,
        "seconds": [r["seconds"] for r in results],
        "median_s": median,
        "per_s": messages / median,
        "model_calls": statistics.median(r["model_calls"] for r in results),
    }


# -- report -----------------------------------------------------------------------------------------
def render(results: dict[str, Any], command: str) -> str:
    h, x, t = results["hops"], results["exchange"], results["team"]
    ok = "✅" if h["total"]["median_ms"] < HOP_TARGET_MS else "❌"
    rows = [
        f"| **one hop**: `send_message` invoked → the recipient's pending `wait_for_mentions` returns, median "
        f"(n={h['total']['n']:,}) | **{h['total']['median_ms']:.3f} ms** | < {HOP_TARGET_MS:g} ms | {ok} |",
        f"| the same, p95 / p99 / max / min | {h['total']['p95_ms']:.3f} / {h['total']['p99_ms']:.3f} / "
        f"{h['total']['max_ms']:.3f} / {h['total']['min_ms']:.3f} ms | | |",
        f"| of which the `send_message` call (rules, ℋ append, `message` event), median / p95 | "
        f"{h['send']['median_ms']:.3f} / {h['send']['p95_ms']:.3f} ms | | |",
        f"| of which emitting the `message` event (redaction, clipping, JSON, buffer; timed alone), median / p95 | "
        f"{h['emit']['median_ms']:.3f} / {h['emit']['p95_ms']:.3f} ms | | |",
        f"| of which the wake-up (send returned → the wait's `ainvoke` returned), median / p95 | "
        f"{h['wake']['median_ms']:.3f} / {h['wake']['p95_ms']:.3f} ms | | |",
        f"| throughput, tool level: {x['messages']:,} messages, orchestrator + 4 workers, concurrent "
        f"(median of {len(x['seconds'])} runs, {x['median_s'] * 1000:.0f} ms) | {x['per_s']:,.0f} messages/s | | |",
        f"| throughput, whole team: `CoralTeam.run` with scripted models, {t['messages']:,} messages, "
        f"~{t['model_calls']:.0f} model calls, i.e. agent steps (median of {len(t['seconds'])} runs, "
        f"{t['median_s']:.2f} s, {1000 * t['median_s'] / t['model_calls']:.1f} ms a step) | "
        f"{t['per_s']:,.0f} messages/s | | |",
    ]
    profile = ""
    if "profile" in h:
        profile = "\ncProfile of the hop loop (top functions by own time):\n\n```\n" + h["profile"].strip() + "\n```\n"
    return f"""## CORAL: message hops

Command: `{command}` — machine: {results["machine"]}; run {results["when"]}. The machine is shared: its
1-minute load average was {results["load"][0]:.2f} before the run and {results["load"][1]:.2f} after.

| what | measured | target | |
|---|---|---|---|
{chr(10).join(rows)}

**One hop.** A CORAL session wired as `CoralTeam.run` wires it (the team's run, one child run per member, the
`A2ASession` in the team context's `a2a` state, the `main` thread), orchestrator + 4 workers, in a fresh
workspace (hashing embedder). The tools are called the way the agent loop calls them:
`ws.tools.ainvoke(name, args, member_run_context)` (the TCP registry: argument validation, the caller found through
the run context, the tool's `ToolContext`). For each hop the recipient's task calls `wait_for_mentions`
(30 s timeout) and blocks; the clock starts when the sender invokes `send_message` mentioning it and stops in the
recipient's task, when its `ainvoke` returns the new message. Hops alternate instruction (orchestrator → worker k)
and reply (worker k → orchestrator), k cycling over the 4 workers; {h["total"]["n"]:,} hops after 50 warm-up hops,
every message numbered and stored once (checked: {h["events"]:,} `message` events for the session's
{h["stored"]:,} messages, warm-up{" and profiled hops" if "profile" in h else ""} included, seq 1..N). A hop does not
include the agent loop around the tool calls (the model call, the `tool_call`/`tool_result` and step events): the
whole-team row below does. Every 200th event emitted flushes the event buffer to SQLite inside `send_message`
(no other event is emitted here, so every 200th hop): those hops make the max, not the p95.

**Throughput.** Tool level: 5 concurrent tasks on one event loop; the orchestrator sends one instruction to each
worker (4 messages) and waits until their 4 replies are in (its waits return whatever arrived), {x["messages"] // 8}
rounds; each worker waits, replies once per instruction it received and waits again; then `submit_answer` ends
the conversation. Runs: {", ".join(f"{v * 1000:.0f}" for v in x["seconds"])} ms. Whole team: `CoralTeam.run` with
a `ScriptedModel` per member (offline: `ModelClient` serves `tea/` models itself, no litellm), planner off; each orchestrator step sends
2 instructions (alternating worker pairs) and waits, each worker step answers its unanswered instructions (at most 2)
and waits; each member reads ℋ from its `coral` transcript in the prompt. Runs: {", ".join(f"{v:.2f}" for v in t["seconds"])} s,
after a warm-up run. Most of that time is the agent loop per step (prompt with the transcript, the model call,
parsing, step events), not the messages: compare the tool-level row. No peer framework is measured:
the floor of a hop is its wake-up row (one asyncio hand-off between two tasks) plus the registry call around it.
{profile}"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--hops", type=int, default=2000, help="timed message hops (≥ 1000)")
    parser.add_argument("--messages", type=int, default=1000, help="messages of the throughput runs")
    parser.add_argument("--reps", type=int, default=3, help="throughput runs (after a warm-up run)")
    parser.add_argument("--profile", action="store_true", help="profile the hops even when on target")
    args = parse_args(parser, hops=20, messages=16, reps=1)
    command = command_line()
    results: dict[str, Any] = {"machine": machine(), "when": time.strftime("%Y-%m-%d")}
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    results["hops"] = bench_hops(args.hops, args.profile)
    print("hops", {k: v for k, v in results["hops"].items() if not k.startswith("profile")}, flush=True)
    if "profile" in results["hops"]:
        print(results["hops"]["profile"], "\n", results["hops"]["profile_cumulative"], flush=True)
    results["exchange"] = bench_exchange(args.messages, args.reps)
    print("exchange", results["exchange"], flush=True)
    results["team"] = bench_team(args.messages, args.reps)
    print("team", results["team"], flush=True)
    results["load"] = (load_before, os.getloadavg()[0])
    print(f"bench time: {time.perf_counter() - started:.0f} s", flush=True)
    publish(render(results, command), args.write)


if __name__ == "__main__":
    main()
