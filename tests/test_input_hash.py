"""The model input's hash is computed message by message (a recurring system prompt encoded once), and
it stays the value earlier runs stored: the sha256 of the whole list as compact, key-sorted JSON."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tea_notebook.runtime.divergence import RunNames, input_hash

RUN = "01JRUNIDAAAAAAAAAAAAAAAAAA"
SOURCE = "01JSOURCEBBBBBBBBBBBBBBBBB"


def stored_hash(messages: list[Any], names: RunNames) -> str:
    """How the hash was computed before (the form stored in earlier runs' ``model_request`` events)."""
    text = json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(names.normal(text).encode("utf-8", "surrogatepass")).hexdigest()


PROMPTS: list[list[Any]] = [
    [],
    [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": f"runs/{RUN}/notes.md"}],
    [{"content": 'ünïcode ✓ and "quotes"\n\ttabs', "role": "user"}],
    [{"role": "user", "content": "a lone surrogate \ud800 survives"}],
    [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": f"see {SOURCE}"},
                {"type": "image_url", "image_url": {"url": "data:x"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "content": 3, "extra": object.__name__},
    ],
]


def test_the_hash_is_the_stored_one_for_every_kind_of_prompt() -> None:
    names = RunNames([RUN, SOURCE])
    for messages in PROMPTS:
        assert input_hash(messages, names) == stored_hash(messages, names)


def test_kept_pieces_give_the_same_hash_step_after_step() -> None:
    names = RunNames([RUN])
    pieces: dict[tuple[str, str], bytes] = {}
    system = {"role": "system", "content": f"rules for {RUN}"}
    for step in range(1, 6):
        messages = [dict(system), {"role": "user", "content": f"step {step} of {RUN}"}]
        assert input_hash(messages, names, pieces) == stored_hash(messages, names)
    assert ("system", f"rules for {RUN}") in pieces  # the system prompt was encoded once and kept


def test_a_run_id_is_replaced_in_every_message() -> None:
    one = [{"role": "user", "content": f"runs/{RUN}/a"}]
    other = [{"role": "user", "content": f"runs/{SOURCE}/a"}]
    assert input_hash(one, RunNames([RUN])) == input_hash(other, RunNames([SOURCE]))


# -- a prompt built in pieces: the stored context's parts and the hash are those of the whole text --------
def built(steps: int, summaries: list[str], native: bool = True) -> Any:
    from tea_notebook.runtime.prompts import DONE_TOOL, build_prompt
    from tea_notebook.runtime.steps import StepRecord

    records = []
    for n in range(1, steps + 1):
        record = StepRecord(n, memory=f"line one\n<summaries>\nnot a fold {RUN}", next_goal="<task>inside</task>")
        record.results.append(("lookup", '{"key": "k"}', f"<step_{n}>\n</step_{n}> \n</agent_history> {RUN} ünï"))
        records.append(record)
    return build_prompt(
        task=f"look in runs/{RUN}",
        files=[],
        step=steps + 1,
        max_steps=steps + 2,
        steps=records,
        summaries=summaries,
        insights=["an insight"] if summaries else [],
        todo="",
        environments=[],
        tools=[DONE_TOOL],
        max_actions=3,
        native=native,
    )


def test_a_prompt_built_in_pieces_is_cut_and_hashed_as_its_whole_text(tmp_path: Path) -> None:
    import tea_notebook
    from tea_notebook.runtime.contexts import ContextRecorder, split_text

    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    names = RunNames([RUN])
    for steps, summaries, native in [(0, [], True), (1, [], True), (3, ["older"], False), (7, [], True)]:
        prompt = built(steps, summaries, native)
        user = prompt.messages[-1]["content"]
        assert "".join(prompt.pieces) == user
        assert [part for piece in prompt.pieces for part in split_text(piece)] == split_text(user)
        cached: dict[Any, bytes] = {}
        for _ in range(2):  # the second time from the kept pieces
            assert input_hash(prompt.messages, names, cached, prompt.pieces) == stored_hash(prompt.messages, names)
        plain = ContextRecorder(ws.events).record(prompt.messages, [], {})
        assert ContextRecorder(ws.events).record(prompt.messages, [], {}, text_pieces=prompt.pieces) == plain
    ws.close()
