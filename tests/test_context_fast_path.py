"""The stored context's fast path (issue 32): a step's prompt is cut and referenced from the pieces it was
built of (the pieces the previous prompt began with reused as they are), and stored as an edit of the
previous prompt found run by run. What it stores rebuilds the exact messages the model received, through
memory folds, keyframes and forks, and it is the record the general path (the whole text cut again,
part matched by part) writes. Real SQLite, a real tool, a scripted model that records what it receives."""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from typing import Any, cast

from tea_notebook._sync import run_sync
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.runtime import contexts
from tea_notebook.runtime.contexts import ContextReader, ContextRecorder, load_context
from tea_notebook.runtime.divergence import RunNames, input_hash
from tea_notebook.runtime.prompts import DONE_TOOL, build_prompt
from tea_notebook.runtime.steps import StepRecord

STEPS = 40  # past a keyframe (every 32 requests)


def stored_hash(messages: list[Any], names: RunNames) -> str:
    """The input hash as runs have always stored it: sha256 of the whole list as compact, sorted JSON."""
    text = json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(names.normal(text).encode("utf-8", "surrogatepass")).hexdigest()


def folding_run(ws: Any) -> tuple[ScriptedModel, Any]:
    """A 40-step run whose memory is folded several times on the way (a small memory budget)."""

    @ws.tools.tool
    def lookup(key: str) -> str:
        """Look up a key and return its value."""
        return f"value of {key}: " + "lorem ipsum dolor sit amet " * 6

    def brain(messages: list[dict], tools: list[dict]) -> Any:  # a function of its input: forks replay it
        step = int(re.search(r"Step (\d+) of", messages[1]["content"]).group(1))  # type: ignore[union-attr]
        return call("done", success=True, text="all") if step >= STEPS else call("lookup", key=f"k{step}")

    model = ScriptedModel(brain)
    agent = ws.agent(
        "folder", model=model.name, tools=["lookup"], memory_budget=400, keep_recent_steps=2, max_steps=STEPS
    )
    result = agent.run_sync("look up k1, k2, ... one by one")
    assert result.status == "success" and result.steps == STEPS
    return model, result


def test_a_run_with_memory_folds_stores_the_exact_messages_of_every_step(ws: Any) -> None:
    model, result = folding_run(ws)
    folds = [e.step for e in ws.events.events(result.run_id) if e.type == "memory_written"]
    assert folds and min(folds) < STEPS // 2 and max(folds) > STEPS // 2  # folded in the middle, and again later
    assert len(model.calls) == STEPS
    trajectory = ws.trajectory(result.run_id)
    for step, sent in enumerate(model.calls, 1):
        exact = json.dumps(sent, ensure_ascii=False)
        assert json.dumps(load_context(ws, result.run_id, step).messages, ensure_ascii=False) == exact, step
        assert json.dumps(trajectory.context(step).messages, ensure_ascii=False) == exact, step
    # the step after a fold: the folded blocks are shown removed, the summary added
    after = trajectory.context(folds[0] + 1)
    assert any(p.kind == "history" for p in after.removed)
    assert any(line.startswith("memory folds:") for line in after.changes()["added"])
    # a step after the keyframe (request 33) stores its new parts and references, not its prompt written out
    sizes = [len(e.data["context"]) for e in ws.events.events(result.run_id) if e.type == "model_request"]
    assert all(sizes[i] < len(json.dumps(model.calls[i])) // 4 for i in range(33, STEPS))


def test_a_fork_after_a_fold_sends_and_stores_the_prompts_of_the_original(ws: Any) -> None:
    model, first = folding_run(ws)
    original = {e.step: e.data["input_hash"] for e in ws.events.events(first.run_id) if e.type == "model_request"}
    at = 25
    forked = run_sync(ws.fork(first.run_id, at))
    assert (forked.status, forked.steps, forked.trajectory.divergence) == ("success", STEPS, None)
    mine = {e.step: e.data["input_hash"] for e in ws.events.events(forked.run_id) if e.type == "model_request"}
    assert mine == {n: original[n] for n in range(at + 1, STEPS + 1)}
    names = RunNames.of(ws, forked.run_id)
    for step, sent in zip(range(at + 1, STEPS + 1), model.calls[-(STEPS - at) :]):
        stored = load_context(ws, forked.run_id, step).messages
        assert json.dumps(stored) == json.dumps(sent)
        assert names.normal(json.dumps(sent)) == names.normal(json.dumps(model.calls[step - 1]))


# -- the recorder alone: the fast path writes what the general path writes ---------------------------
@dataclass
class Request:
    run_id: str
    type: str
    step: int
    data: dict


class Kept:
    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def keep(self, texts: dict[str, str]) -> None:
        self.texts.update(texts)


def prompts_with_a_fold(steps: int = 45, fold_at: int = 20) -> list[Any]:
    """The prompts of a run, built as the agent builds them: one block more each step, and at
    ``fold_at`` the oldest blocks folded into a summary (the same StepRecord objects throughout)."""
    records: list[StepRecord] = []
    summaries: list[str] = []
    out = []
    for step in range(1, steps + 1):
        if step == fold_at:
            summaries.append("steps 1-15 looked up k1..k15 <step_3>\n (markup in a summary)")
            records = records[15:]
        out.append(
            build_prompt(
                task="look up the keys </step_2> one by one",
                files=[],
                step=step,
                max_steps=steps,
                steps=list(records),
                summaries=list(summaries),
                insights=["keys are <task>plain</task>"] if summaries else [],
                todo="",
                environments=[],
                tools=[DONE_TOOL],
                max_actions=3,
                native=step % 7 != 0,  # the JSON mode's tool lines now and then: the last piece changes
            )
        )
        record = StepRecord(step, memory=f"looked up k{step}\n<summaries>\nnot a fold", next_goal=f"k{step + 1}")
        record.results.append(("lookup", json.dumps({"key": f"k{step}"}), f"value {step} </agent_history>"))
        records.append(record)
    return out


def test_the_fast_path_writes_the_records_of_the_general_path_and_they_rebuild_the_messages() -> None:
    prompts = prompts_with_a_fold()
    fast_kept, plain_kept = Kept(), Kept()
    fast, plain = ContextRecorder(fast_kept), ContextRecorder(plain_kept)  # type: ignore[arg-type]
    names = RunNames(["01JRUN"])
    cache: dict[Any, bytes] = {}
    events = []
    for step, prompt in enumerate(prompts, 1):
        params = {"model": "m"}
        stored = fast.record(prompt.messages, [DONE_TOOL], params, text_pieces=prompt.pieces)
        assert stored == plain.record(prompt.messages, [DONE_TOOL], params), step
        assert input_hash(prompt.messages, names, cache, prompt.pieces) == stored_hash(prompt.messages, names)
        events.append(Request("r", "model_request", step, {"context": stored}))
    assert fast_kept.texts == plain_kept.texts
    reader = ContextReader("r", cast(Any, events), fast_kept.texts.get)
    for step, prompt in enumerate(prompts, 1):
        assert json.dumps(reader.context(step).messages) == json.dumps(prompt.messages), step


def test_a_prompt_edited_after_it_was_built_is_recorded_as_edited() -> None:
    """Pieces that no longer join to the message's text (a hook changed it) are not used."""
    prompt = prompts_with_a_fold(steps=6)[-1]
    edited = [dict(m) for m in prompt.messages]
    edited[1]["content"] = edited[1]["content"].replace("k3", "k9")
    kept = Kept()
    stored = ContextRecorder(kept).record(edited, None, {}, text_pieces=prompt.pieces)  # type: ignore[arg-type]
    reader = ContextReader("r", cast(Any, [Request("r", "model_request", 1, {"context": stored})]), kept.texts.get)
    assert reader.context(1).messages == edited


def greedy(before: list[list[Any]], after: list[list[Any]]) -> list[list[Any]]:
    """The edit the stored context has always been: each part of ``after`` copied from its first place
    in ``before`` after the last part copied, else inserted; neighbouring copies joined."""
    ops: list[list[Any]] = []
    last = -1
    for part in after:
        at = next((i for i in range(last + 1, len(before)) if before[i] == part), None)
        if at is None:
            ops.append([part[0], part[1], 0])
        elif ops and len(ops[-1]) == 2 and ops[-1][1] == at:
            ops[-1][1], last = at + 1, at
        else:
            ops.append([at, at + 1])
            last = at
    return ops


def test_the_edit_found_run_by_run_is_the_greedy_one() -> None:
    rng = random.Random(32)
    for _ in range(3000):
        alphabet = rng.randint(1, 6)
        before = [[rng.randint(0, 1), str(rng.randint(0, alphabet))] for _ in range(rng.randint(0, 16))]
        after = [[rng.randint(0, 1), str(rng.randint(0, alphabet))] for _ in range(rng.randint(0, 16))]
        if rng.random() < 0.5:  # a step's edit: some dropped at the front, something new inside
            after = before[rng.randint(0, 4) :] + after[:2]
            after.insert(rng.randint(0, len(after)), [1, "new"])
        expected = greedy(before, after)
        assert contexts._diff(before, after) == expected
        assert contexts._diff([tuple(p) for p in before], [tuple(p) for p in after]) == expected
