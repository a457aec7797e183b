"""The cheap write path of a step's events (issue 32) keeps every guarantee: one walk redacts and
clips each event; a text that recurs within a step (a tool's result in its ``tool_result`` and its
step, arguments in ``model_response`` and ``tool_call``) is answered from the redaction memo and
still redacted in every event, in the journal, the database and what subscribers see; ``name=value``
pairs are looked for only near their key words, and find exactly what a scan of the whole text finds."""

from __future__ import annotations

import enum
import json
import random
import sqlite3
import time
from collections import OrderedDict

import pytest

import tea_notebook
from tea_notebook import redaction
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.redaction import REDACTED, redact
from tea_notebook.runtime import loop
from tea_notebook.store.blobs import FIELD_LIMIT, blob_ref
from tea_notebook.store.database import INTENTS_SUFFIX, Database

SECRET = "Zq8#tea-event-path-Secret"
ENV_NAME = "TEA_TEST_EVENT_PATH_TOKEN"
LABEL = f"[{ENV_NAME} redacted]"


def _db_text(path) -> str:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT data FROM events").fetchall() + conn.execute("SELECT data FROM blobs").fetchall()
        return "\n".join(r[0].decode("utf-8") if isinstance(r[0], bytes) else str(r[0]) for r in rows if r[0])
    finally:
        conn.close()


def test_a_secret_in_a_long_result_is_redacted_in_both_events_and_the_step_resolves_its_full_text(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(ENV_NAME, SECRET)
    monkeypatch.setattr(loop, "COMMIT_SLOW_TOOL", 60.0)  # the journal, not a timer, holds the call
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    journal_seen: list[str] = []
    long_text = ("row " * (FIELD_LIMIT // 2)) + f"token of the service: {SECRET} end"

    @ws.tools.tool
    def dump() -> str:
        """Dump the service's table."""
        return long_text

    @ws.tools.tool
    def echo(text: str) -> str:
        """Say a text back."""
        folder = ws.path / ("tea.db" + INTENTS_SUFFIX)
        journal_seen.extend(p.read_text() for p in folder.iterdir())  # durable before this tool acts
        return f"echo: {text}"

    seen: list = []
    ws.events.subscribe(seen.append)
    # a hostile model passes the secret on as an argument: in model_response, tool_call and the step
    model = ScriptedModel([call("dump"), call("echo", text=SECRET), call("done", success=True, text="ok")])
    result = ws.agent("a", model=model.name, tools=["dump", "echo"]).run_sync("dump and echo")
    assert result.success

    journal = "\n".join(journal_seen)
    assert '"tool_call"' in journal and SECRET not in journal and LABEL in journal.replace("\\", "")
    for event in seen:
        assert SECRET not in json.dumps(event.data), event.type
    db_text = _db_text(ws.path / "tea.db")
    assert SECRET not in db_text and json.dumps(SECRET)[1:-1] not in db_text

    events = ws.events.events(result.run_id)
    first = [e for e in events if e.step == 1]
    observation = next(e.data["observation"] for e in first if e.type == "tool_result")
    in_step = next(e.data["results"][0][2] for e in first if e.type == "step")
    for clipped in (observation, in_step):  # clipped in both events, the same full text behind both
        assert len(clipped) < len(long_text) and blob_ref(clipped) is not None
        full = ws.events.full_text(clipped)
        assert full.startswith("row row") and full.endswith(f"token of the service: {LABEL} end")
        assert SECRET not in full
    assert blob_ref(observation) == blob_ref(in_step)

    second = [e for e in events if e.step == 2]
    response = next(e for e in second if e.type == "model_response")
    called = next(e for e in second if e.type == "tool_call")
    step = next(e for e in second if e.type == "step")
    assert response.data["tool_calls"][0]["arguments"] == {"text": LABEL}
    assert called.data["arguments"] == {"text": LABEL}
    assert SECRET not in json.dumps(step.data) and LABEL in json.dumps(step.data)
    ws.close()


def test_a_text_redacted_before_a_secret_is_exported_is_redacted_after_however_long(monkeypatch):
    monkeypatch.delenv(ENV_NAME, raising=False)
    long_text = "x " * 5000 + f"the value {SECRET}"  # past the per-text memo: the long-text memo
    assert redact({"a": long_text}) == {"a": long_text}
    monkeypatch.setenv(ENV_NAME, SECRET)
    assert redact({"a": long_text, "b": [long_text]}) == {"a": "x " * 5000 + f"the value {LABEL}"} | {
        "b": ["x " * 5000 + f"the value {LABEL}"]
    }
    pairs = "y " * 5000 + "password=hunter2-Tea-77"  # by value only, then by key too: two answers
    assert redact(pairs, keys=False) == pairs
    assert redact(pairs) == "y " * 5000 + f"password={REDACTED}"


def test_one_walk_clips_texts_after_redacting_them_and_only_values():
    seen: list[str] = []

    def clip(text: str) -> str:
        seen.append(text)
        return text[:4] + "…"

    class Thing:
        def __str__(self) -> str:
            return "thing of a long name"

    value = {"k" * 30: "short", "long": "password=abcdefgh", "list": ["z" * 30, 7, None], "obj": Thing()}
    out = redact(value, clip=clip, limit=16)
    assert out == {"k" * 30: "short", "long": "pass…", "list": ["zzzz…", 7, None], "obj": "thin…"}
    assert seen == [f"password={REDACTED}", "z" * 30, "thing of a long name"]  # a key is never clipped


class Colour(enum.IntEnum):
    RED = 1


class Name(str):
    pass


def test_the_walk_keeps_what_any_value_becomes():
    nested: list = []
    inner = nested
    for _ in range(80):
        inner.append([])
        inner = inner[0]
    value = {
        "tuple": (1, "a", None),
        "set": frozenset({"b"}),
        "bytes": b"password=abc12345",
        "bytearray": bytearray(b"plain"),
        "enum": Colour.RED,
        "name": Name("a name"),
        "ordered": OrderedDict(api_key="x", n=1.5),
        3: True,
        "nested": nested,
        "api_key": "",
        "token": None,
    }
    out = redact(value)
    assert out["tuple"] == [1, "a", None] and out["set"] == ["b"]
    assert out["bytes"] == f"password={REDACTED}" and out["bytearray"] == "plain"
    assert out["enum"] is Colour.RED and out["name"] == "a name"
    assert out["ordered"] == {"api_key": REDACTED, "n": 1.5} and out["3"] is True
    assert out["api_key"] == "" and out["token"] is None  # nothing to hide
    text = json.dumps(out["nested"])
    assert text.endswith('"[nested too deep]"' + "]" * 63)  # lists at depths 1 to 63, then the mark
    assert redact(value) == out  # the memo answers as the walk did


KEY_PIECES = [
    '"', "'", "=", ":", " ", "\t", "\n", "-", "_", "key", "KEY", "api_key", "Password", "pass", "token",
    "secret", "auth", "cookie", "cred", "abc", "12", ": ", "{", "}", ",", "&", "?", "url=", "--", "  - ",
    "str", "None", "[", "]", "X-Api-Key", "my_token", "\\", "x" * 30, "y" * 59, "z" * 61, "é",
]  # fmt: skip


def _whole_text(text: str) -> str:
    for pattern in redaction._KEY_VALUE:
        text = redaction._key_values(text, pattern)
    return text


def test_name_value_pairs_found_near_their_key_words_are_those_a_whole_text_scan_finds():
    rng = random.Random(32)
    changed = 0
    for _ in range(20000):
        text = "".join(rng.choice(KEY_PIECES) for _ in range(rng.randint(1, 40)))
        expected = _whole_text(text)
        assert redaction._all_key_values(text, text.lower()) == expected, text
        changed += expected != text
    assert changed > 1000  # the texts held secrets to find
    many = "api_key=abc12345 " * 400  # more key words than are looked at one by one
    assert redaction._all_key_values(many, many.lower()) == _whole_text(many) != many


@pytest.mark.parametrize(
    "text",
    [
        "lookup(" + "a" * 40 + ') -> {"config": {"db_password": "pw-123456", "user": "me"}}',
        "  - api_token: abcd-1234-efgh\nnext: line with key words but no pair, key and token",
        "x" * 70 + "_api_key=abc12345 and " + "y" * 55 + "_token=zz-99-yy",
    ],
)
def test_pairs_in_longer_texts_are_found_as_by_a_whole_text_scan(text):
    assert redaction._all_key_values(text, text.lower()) == _whole_text(text)
    assert REDACTED in redact(text)


def test_many_key_words_without_new_lines_take_linear_time():
    """Key words just far enough apart to be tried one by one, on one 2 MB line, in seconds."""
    for unit in ("a key " + "y" * 34, "'token': 'v' " + "z" * 28, "- api_key: " + "q" * 30):
        text = unit * (2_000_000 // len(unit))
        started = time.perf_counter()
        redact(text)
        assert time.perf_counter() - started < 10, unit
        small = text[:20_000]
        assert redaction._all_key_values(small, small.lower()) == _whole_text(small)


def test_events_written_in_one_statement_keep_their_order_and_a_bad_row_writes_nothing(tmp_path):
    db = Database(tmp_path / "tea.db")
    for count in (1, 5, 32, 33, 70):  # one statement up to 32 rows, executemany past it
        rows = [
            (f"{count}-{i:03d}", f"run{count}", None, "notice", i, float(i), json.dumps({"i": i})) for i in range(count)
        ]
        db.append_events(rows, uses=[("tool", [("lookup", 1, 0, 1, 0.01, 1.0)])])
        stored = db.events_of([f"run{count}"])
        assert [(r[1], r[5], json.loads(r[7])["i"]) for r in stored] == [(r[0], r[4], r[4]) for r in rows]
    bad = [("b-1", "runbad", None, "notice", 1, 1.0, "{}"), ("b-2", "runbad", None, "notice", 2, 2.0)]
    with pytest.raises(sqlite3.ProgrammingError, match="bindings"):
        db.append_events(bad)
    assert db.events_of(["runbad"]) == []
    db.close()


def test_a_clean_text_is_passed_on_unscanned_but_clipped_and_the_runtime_marks_only_its_own_records(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(ENV_NAME, SECRET)
    scanned: list[str] = []
    real_scan = redaction._scan
    monkeypatch.setattr(redaction, "_scan", lambda text, *a, **k: scanned.append(text) or real_scan(text, *a, **k))
    record = redaction.Clean('{"n":1,"parts":[[0,"=made of redacted parts"]]}')
    out = redact({"context": record, "note": f"key {SECRET}"})
    assert out["context"] == record and type(out["context"]) is str  # a plain str comes out
    assert record not in scanned and out["note"] == f"key {LABEL}"  # the other field is still redacted
    long_record = redaction.Clean("x" * (FIELD_LIMIT + 10))
    clipped = redact([long_record], clip=lambda t: t[:5] + "[clipped]", limit=FIELD_LIMIT)
    assert clipped == ["xxxxx[clipped]"]
    # a str that is not Clean (whatever its content) is scanned
    assert redact(f"a {SECRET}") == f"a {LABEL}"

    # in a run: the stored context and the input hash are the runtime's Clean texts; a secret the model
    # sent in its arguments, and one in the prompt (the task), are redacted in every event all the same
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")

    @ws.tools.tool
    def echo(text: str) -> str:
        """Say a text back."""
        return f"echo: {text}"

    model = ScriptedModel([call("echo", text=f"the {SECRET}"), call("done", success=True, text="ok")])
    agent = ws.agent("cleaner", tools=["echo"], model=model.name)
    result = agent.run_sync(f"Echo the word {SECRET} once")
    assert result.status == "success"
    requests = [e for e in result.trajectory.events if e.type == "model_request"]
    assert requests and all(isinstance(e.data["input_hash"], str) and len(e.data["input_hash"]) == 64 for e in requests)
    assert SECRET not in _db_text(ws.db.path) and LABEL in _db_text(ws.db.path)
    assert SECRET not in json.dumps(ws.trajectory(result.run_id).context(1).messages)
    ws.close()
