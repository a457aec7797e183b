"""Benchmark of ToolSelf's stage resets: prompt tokens of a long run with and without reconfigurations.

    .venv/bin/python bench/bench_toolself.py [--write] [--steps 100] [--every 10]

The paper's point (ToolSelf §3): a ``reconfigure`` call discards the stage's interaction history, so the
context an agent carries is bounded by one stage instead of growing with the whole run. Measured here, in one
run, with scripted models (the offline ``tea`` provider through litellm; prompt tokens are the provider's
estimate, about 4 characters a token, the same estimator on every side):

  1. **ToolSelf, reconfiguring**: ``--steps`` agent steps; every ``--every``-th step calls ``reconfigure``
     (the sub-goal moves to the next block of keys), the last calls ``finish``, every other step calls
     ``lookup`` (an observation of ~320 characters, like a short search result).
  2. **ToolSelf, one stage**: the same steps, no reconfiguration (``max_stage_steps`` above the run, the
     context cleanup off): the stage's history grows with every step.
  3. **Plain tool-calling agent** (``ws.agent``, the same lookups then ``done``), with its default memory
     folding (old steps summarised once the history passes its memory budget): a reference row.

Reported: the agent's prompt tokens (its own model calls) and, for ToolSelf, the reconfiguration engine μ's
prompt tokens too (the cost of the resets), and the ratio reconfiguring / one stage.
With --write the figures replace the "ToolSelf: stage resets and prompt tokens" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import command_line, machine, parse_args, publish  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402

ENGINE = "Agent Configuration Engineer"
TASK = "Collect the supplier notes for every key item1 … itemN and report how many mention 'organic'."
NOTE = (
    "Supplier note for {key}: shipped from the Hillside gardens in 5 kg sacks, first flush, picked in April, "
    "withered 14 hours, rolled twice and dried at 95 °C; certified organic since 2019; tasting notes: floral, "
    "light muscatel, a little astringent; price band B; contact: orders desk, weekdays 8–16."
)


def register(ws: tea_notebook.Workspace) -> None:
    @ws.tools.tool
    def lookup(key: str) -> str:
        """Read the supplier note of one item."""
        return NOTE.format(key=key)


def agent_script(steps: int, every: int, engine_calls: list[int], agent_calls: list[int]) -> ScriptedModel:
    """π answers by its own step count; μ (recognised by its system prompt) gives the next block's config."""
    count = {"agent": 0, "engine": 0}

    def fn(messages: list[dict], tools: list[dict]) -> Any:
        if ENGINE in messages[0]["content"]:
            count["engine"] += 1
            engine_calls.append(count["engine"])
            block = count["engine"]
            return json.dumps(
                {
                    "next_sub_goal": f"collect the notes of block {block}",
                    "execution_strategy": "As a Supplier Analyst, I will look up each key of the block in turn.",
                    "toolbox": ["lookup"],
                    "inter_agent_knowledge": "",
                }
            )
        count["agent"] += 1
        k = count["agent"]
        agent_calls.append(k)
        if k == steps:
            summary = {"detailed_execution": [f"looked up {steps} notes"], "tools_used": ["lookup"]}
            return call("finish", task_completion_status="complete", final_result="all", execution_summary=summary)
        if every and k % every == 0:
            return call(
                "reconfigure",
                execution_summary=f"looked up item{k - every + 1} … item{k - 1}; all certified organic",
                update_content="sub_goal",
                update_reason="block done",
                new_sub_goal="collect the notes of the next block",
            )
        return call("lookup", key=f"item{k}")

    return ScriptedModel(fn)


def plain_script(steps: int) -> ScriptedModel:
    count = {"agent": 0}

    def fn(messages: list[dict], tools: list[dict]) -> Any:
        count["agent"] += 1
        k = count["agent"]
        if k == steps:
            return call("done", success=True, text="all")
        return call("lookup", key=f"item{k}")

    return ScriptedModel(fn)


def prompt_tokens(ws: tea_notebook.Workspace, run_id: str) -> dict[str, int]:
    """Prompt tokens of the run's model calls: the agent's steps, μ's configurations (stage
    ``reconfigure``) and any other call without tools (the plain agent's memory folding)."""
    out = {"agent": 0, "engine": 0, "other": 0, "calls": 0}
    for e in ws.events.events(run_id):
        if e.type != "model_response":
            continue
        tokens = int(e.data.get("prompt_tokens") or 0)
        stage = e.data.get("stage")
        if stage is None:
            out["agent"] += tokens
            out["calls"] += 1
        else:
            out["engine" if stage == "reconfigure" else "other"] += tokens
    return out


def run_toolself(steps: int, every: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        ws = tea_notebook.Workspace(folder, embedder="hashing")
        try:
            register(ws)
            engine_calls: list[int] = []
            agent_calls: list[int] = []
            model = agent_script(steps, every, engine_calls, agent_calls)
            options: dict[str, Any] = {"max_steps": steps + 5}
            if not every:  # one stage: no step limit per stage, no context cleanup
                options.update(max_stage_steps=steps + 5, context_window=10**9)
            agent = ws.toolself("ts", tools=["lookup"], model=model.name, **options)
            started = time.perf_counter()
            result = agent.run_sync(TASK)
            seconds = time.perf_counter() - started
            assert result.status == "success" and result.steps == steps, (result.status, result.steps, result.answer)
            stages = result.trajectory.stages
            assert len(stages) == (steps - 1) // every + 1 if every else len(stages) == 1, len(stages)
            tokens = prompt_tokens(ws, result.run_id)
            assert tokens["calls"] == steps, tokens
            per_step = [s.prompt_tokens for s in result.trajectory.steps]
            return {**tokens, "stages": len(stages), "engine_calls": len(engine_calls), "seconds": seconds,
                    "max_step": max(per_step), "last_step": per_step[-1]}  # fmt: skip
        finally:
            ws.close()


def run_plain(steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        ws = tea_notebook.Workspace(folder, embedder="hashing")
        try:
            register(ws)
            model = plain_script(steps)
            agent = ws.agent("plain", tools=["lookup"], model=model.name, max_steps=steps + 5)
            started = time.perf_counter()
            result = agent.run_sync(TASK)
            seconds = time.perf_counter() - started
            assert result.status == "success" and result.steps == steps, (result.status, result.steps)
            per_step = [s.prompt_tokens for s in result.trajectory.steps]
            tokens = prompt_tokens(ws, result.run_id)
            folds = sum(1 for e in ws.events.events(result.run_id) if e.type == "memory_written")
            return {**tokens, "seconds": seconds, "max_step": max(per_step), "last_step": per_step[-1], "folds": folds}
        finally:
            ws.close()


def render(r: dict[str, Any], command: str) -> str:
    staged, single, plain = r["staged"], r["single"], r["plain"]
    ratio = staged["agent"] / single["agent"]
    with_engine = (staged["agent"] + staged["engine"]) / single["agent"]
    steps, every = r["steps"], r["every"]
    rows = [
        f"| ToolSelf, `reconfigure` every {every} steps ({staged['stages']} stages) | {staged['agent']:,} | "
        f"{staged['engine']:,} ({staged['engine_calls']} calls) | {staged['max_step']:,} | {staged['seconds']:.2f} s |",
        f"| ToolSelf, the same steps in one stage | {single['agent']:,} | {single['engine']:,} "
        f"({single['engine_calls']} call) | {single['max_step']:,} | {single['seconds']:.2f} s |",
        f"| plain tool-calling agent, the same lookups, its memory folding on ({plain['folds']} folds) | "
        f"{plain['agent']:,} | — | {plain['max_step']:,} | {plain['seconds']:.2f} s |",
    ]
    return f"""## ToolSelf: stage resets and prompt tokens

Command: `{command}` — machine: {r["machine"]}; run {r["when"]}.

A {steps}-step run with scripted models: every step but the ones below calls `lookup` (a ~320-character
observation); with reconfigurations, every {every}th step calls `reconfigure` and the {steps}th calls `finish`.
Token counts are the offline provider's **estimates** (about 4 characters a token, the same estimator for
every row), summed over the agent's {steps} model calls; μ's calls (the reconfiguration engine) are counted apart.

| run | agent prompt tokens | μ prompt tokens | largest single prompt | wall time |
|---|---|---|---|---|
{chr(10).join(rows)}

**Ratio, reconfiguring / one stage: {ratio:.2f}×** the agent's prompt tokens ({with_engine:.2f}× counting μ's calls
too). Without resets each prompt carries every earlier step, so the total grows with the square of the run's
length; with a reset every {every} steps a prompt carries at most {every} steps plus the stage's configuration,
so the total grows linearly. The plain agent's memory folding also bounds its context (to its memory budget
rather than to a stage); offline its summaries are extractive, so no summarisation call is counted for it here,
where a real model would add one per fold. Wall times are after a warm-up run (first imports) and include
writing every event to SQLite.
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--every", type=int, default=10, help="reconfigure every N steps")
    args = parse_args(parser, steps=12, every=4)
    command = command_line()
    results: dict[str, Any] = {"machine": machine(), "when": time.strftime("%Y-%m-%d"), **vars(args)}
    run_toolself(min(args.steps, 20), args.every)  # warm-up: litellm's import, the first workspace
    results["staged"] = run_toolself(args.steps, args.every)
    print("staged", results["staged"], flush=True)
    results["single"] = run_toolself(args.steps, 0)
    print("single", results["single"], flush=True)
    results["plain"] = run_plain(args.steps)
    print("plain", results["plain"], flush=True)
    publish(render(results, command), args.write)


if __name__ == "__main__":
    main()
