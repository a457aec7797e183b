"""Secrets never reach storage or renderings (issue 10, finding 7): one redaction, applied before
encoding, by value (environment secrets in every escaped form, secret-shaped strings) and by key
name (password, api_key, token, secret, authorization, *_key …), on events, runs, memory,
experiences and exported manifests. The model is assumed hostile and scripted (no network)."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import html  # noqa: E402
import json  # noqa: E402
import sqlite3  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

import tea_notebook  # noqa: E402
from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402
from tea_notebook.notebook.live import LiveView  # noqa: E402
from tea_notebook.protocol.manifest import export_manifest, import_manifest  # noqa: E402
from tea_notebook.redaction import REDACTED, is_secret_name, redact  # noqa: E402
from tea_notebook.runtime.render import mimebundle  # noqa: E402

# A secret with a double quote and a backslash: JSON escapes both, so comparing the raw value with
# encoded text (what the old redactor did) misses it. Nothing about its shape gives it away.
SECRET = 'Q7"zp\\x!9Lm-TeaSecret'
ENV_NAME = "TEA_TEST_SERVICE_TOKEN"
LABEL = f"[{ENV_NAME} redacted]"
PASSWORD = "hunter2-Tea-0042"  # not in the environment: only its argument's name marks it


def forms(secret: str) -> list[str]:
    """Every way the secret could sit in a file or a page once something encoded it."""
    escaped = json.dumps(secret)[1:-1]
    return sorted(
        {
            secret,
            escaped,
            json.dumps(secret, ensure_ascii=False)[1:-1],
            json.dumps(escaped)[1:-1],
            repr(secret)[1:-1],
            html.escape(secret, quote=True),
            html.escape(escaped, quote=True),
        }
    )


def leaks(text: str) -> list[str]:
    """The forms of SECRET and PASSWORD found in ``text``."""
    return [f for f in forms(SECRET) + [PASSWORD] if f in text]


@pytest.fixture
def secret_env(monkeypatch):
    monkeypatch.setenv(ENV_NAME, SECRET)


pytestmark = pytest.mark.usefixtures("warm_litellm")  # litellm imported once for the module.


# -- the function -----------------------------------------------------------------------------
def test_environment_secret_with_quote_and_backslash_is_redacted_in_every_encoding(secret_env):
    inputs = [
        f"the token is {SECRET}.",
        json.dumps({"config": {"token_value": SECRET}}),
        json.dumps({"v": SECRET}, ensure_ascii=False),
        json.dumps(json.dumps({"v": SECRET})),
        repr({"v": SECRET}),
        f"<p>{html.escape(SECRET)}</p>",
    ]
    for text in inputs:
        assert any(f in text for f in forms(SECRET))  # the input does hold it
        out = redact(text)
        assert not leaks(out), (text, out)
        assert LABEL in out
    # walking values: the secret is found before any encoding, keys and nested lists included
    value = {"a": [1, (2, SECRET)], SECRET: {"b": f"x{SECRET}y"}}
    clean = redact(value)
    assert not leaks(json.dumps(clean)) and not leaks(repr(clean))
    assert clean["a"] == [1, [2, LABEL]] and clean[LABEL] == {"b": f"x{LABEL}y"}
    # a secret exported a moment ago is known at once (no time-based cache)
    os.environ["TEA_TEST_FRESH_API_KEY"] = "fresh-value-Zq81!"
    try:
        assert redact("use fresh-value-Zq81! now") == "use [TEA_TEST_FRESH_API_KEY redacted] now"
    finally:
        del os.environ["TEA_TEST_FRESH_API_KEY"]
    assert redact("use fresh-value-Zq81! now") == "use fresh-value-Zq81! now"


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "PASSWORD",
        "Password",
        "db_password",
        "passwd",
        "api_key",
        "apiKey",
        "API_KEY",
        "X-Api-Key",
        "openai_api_key",
        "private_key",
        "token",
        "access_token",
        "Token",
        "secret",
        "client_secret",
        "authorization",
        "Authorization",
        "Proxy-Authorization",
        "credentials",
        "cookie",
    ],
)
def test_secret_like_key_names_are_redacted_whatever_the_value(name):
    assert is_secret_name(name)
    for value in ("hunter2", 12345, True, ["a", "b"], {"nested": "x"}):
        out = redact({name: value, "user": "bob"})
        assert out == {name: REDACTED, "user": "bob"}, (name, value)
    assert redact({"outer": {name: "s3cr3t-value"}})["outer"][name] == REDACTED


@pytest.mark.parametrize(
    "name", ["prompt_tokens", "completion_tokens", "max_tokens", "key", "keys", "author", "monkey", "name"]
)
def test_ordinary_key_names_are_kept(name):
    assert not is_secret_name(name)
    assert redact({name: "value-12345"}) == {name: "value-12345"}


@pytest.mark.parametrize(
    "text, kept, gone",
    [
        ('```json\n{"args": {"user": "bob", "password": "hunter\\"2x"}}\n```', ['"user": "bob"'], ["hunter"]),
        ("GET https://h.example/v1?token=abc123xyz&page=2", ["page=2", "https://h.example/v1?token="], ["abc123xyz"]),
        ("url=https://h.example/?api_key=Zx81aa7", ["url=https://h.example/?api_key="], ["Zx81aa7"]),
        ("DB_PASSWORD: swordfish99\nhost: db", ["host: db"], ["swordfish99"]),
        ("{'secret': 'pa55-word', 'n': 1}", ["'n': 1"], ["pa55-word"]),
        ("Authorization: Bearer abcDEF123456789", ["Authorization:"], ["abcDEF123456789"]),
        ("OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwx", ["OPENAI_API_KEY="], ["abcdefghijklmnop"]),
        ("postgres://bob:pa55word@db:5432/app", ["postgres://bob:", "@db:5432/app"], ["pa55word"]),
        ("token ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ012345 here", ["token", "here"], ["ghp_ABCDEF"]),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----", [], ["MIIEabc"]),
        ("jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4", ["jwt"], ["SflKxwRJ"]),
    ],
)
def test_secrets_in_text_by_key_and_by_shape(text, kept, gone):
    out = redact(text)
    for part in kept:
        assert part in out, out
    for part in gone:
        assert part not in out, out


def test_prose_and_code_annotations_are_left_alone():
    for text in (
        "The secret: I need to add the numbers first.",
        "def login(user: str, password: str) -> None: ...",
        "tokens: 1234 used, max_tokens=5",
        "Basic authentication is used here",
    ):
        assert redact(text) == text


def test_keys_false_redacts_values_only(secret_env):
    schema = {"properties": {"api_key": {"type": "string", "default": SECRET}, "password": {"type": "string"}}}
    out = redact(schema, keys=False)
    assert out["properties"]["password"] == {"type": "string"}
    assert out["properties"]["api_key"]["type"] == "string"
    assert out["properties"]["api_key"]["default"] == LABEL
    assert redact('x = {"password": "hunter2"}', keys=False) == 'x = {"password": "hunter2"}'


def test_result_is_plain_json_types():
    class Thing:
        def __str__(self) -> str:
            return "thing password=hunter2x"

    out = redact({"t": Thing(), "b": b"password=abc12345", "s": {1, 2}, 3: None})
    json.dumps(out)  # encodable as it is
    assert out["t"] == "thing password=[redacted]" and out["b"] == "password=[redacted]"
    assert sorted(out["s"]) == [1, 2] and out["3"] is None


def test_a_cut_in_a_model_free_summary_never_leaves_half_a_secret(secret_env):
    from tea_notebook.runtime.memory import extractive_summary
    from tea_notebook.runtime.prompts import StepRecord

    for pad in range(85, 125, 3):  # the secret straddles the cut at 120 characters
        step = StepRecord(1, memory="x" * pad + SECRET)
        step.results.append(("probe", "{}", "Error: " + "y" * pad + SECRET))
        summary, insights = extractive_summary([step])
        for text in [summary, *insights]:
            assert SECRET[:6] not in text and 'Q7\\"zp' not in text, text


def test_hostile_inputs_take_linear_time():
    """Texts shaped to make naive patterns quadratic are redacted in seconds, not hours."""
    size = 2_000_000
    shapes = [
        "x=" * (size // 2),
        "a.b/" * (size // 4),
        "token=" * (size // 6),
        "'password': '" * (size // 13),
        "a" * size,
    ]
    for text in shapes:
        started = time.perf_counter()
        redact(text)
        assert time.perf_counter() - started < 10, text[:20]


# -- everything stored and rendered -----------------------------------------------------------
def _raw_files(path: Path) -> str:
    blobs = b"".join(p.read_bytes() for p in sorted(path.glob("tea.db*")) if p.is_file())
    return blobs.decode("utf-8", "replace") + blobs.decode("latin-1")


def _all_text_in_tables(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        out = []
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in con.execute(f"SELECT * FROM {table}"):
                for cell in row:
                    if isinstance(cell, bytes):
                        out.append(cell.decode("utf-8", "replace"))
                    elif cell is not None:
                        out.append(str(cell))
        return "\n".join(out)
    finally:
        con.close()


def test_no_secret_anywhere_in_the_database_or_the_renderings(tmp_path, secret_env):
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    received: dict[str, str] = {}

    @ws.tools.tool
    def login(user: str, password: str) -> str:
        """Log in to the service."""
        received["password"] = password
        return f"logged in as {user}"

    @ws.tools.tool
    def read_config() -> str:
        """Read the service configuration."""
        token = os.environ[ENV_NAME]
        return f"token={token}\n" + json.dumps({"service": {"token_value": token}})

    @ws.tools.tool
    def fail_with(reason: str) -> str:
        """Fail with a reason."""
        raise RuntimeError(reason)

    big = "padding " * 20_000  # a long reply: clipped in storage, its full text kept as a blob
    script = ScriptedModel(
        [
            {
                "content": json.dumps({"thinking": f"The token is {SECRET}. {big}", "memory": f"token {SECRET}"}),
                "tool_calls": [
                    call("login", user="bob", password=PASSWORD),
                    call("read_config"),
                ],
            },
            {
                "content": json.dumps({"thinking": "try the failing path", "memory": f"saw {SECRET}"}),
                "tool_calls": [call("fail_with", reason=f"rejected {SECRET}")],
            },
            call("read_config"),
            call("done", success=True, text=f"The token is {SECRET}; password={PASSWORD}"),
        ]
    )
    agent = ws.agent(
        "leaky",
        model=script.name,
        tools=["login", "read_config", "fail_with"],
        memory_budget=20,
        keep_recent_steps=1,
    )
    live = LiveView(display=False)
    unsubscribe = ws.events.subscribe(live)
    result = agent.run_sync(f"Use the token {SECRET} to log in")
    unsubscribe()
    assert result.success
    assert LABEL in live.html() and not leaks(live.html())  # the live view sees redacted events only
    assert received["password"] == PASSWORD  # the tool itself got the real value
    # JSON mode: the arguments sit inside the model's text
    json_script = ScriptedModel(
        [
            json.dumps(
                {
                    "thinking": f"again with {SECRET}",
                    "action": [{"name": "login", "args": {"user": "eve", "password": PASSWORD}}],
                }
            ),
            json.dumps({"thinking": "done", "action": [{"name": "done", "args": {"success": True, "text": "ok"}}]}),
        ]
    )
    json_agent = ws.agent("leaky_json", model=json_script.name, tools=["login"], tool_mode="json")
    json_result = json_agent.run_sync("log in again")
    assert json_result.success
    # memory and experience written directly
    ws.memory_store.save(result.run_id, f"task {SECRET}", f"summary with {SECRET}", [f"insight: {SECRET}"])
    record, _ = ws.experiences.add(
        "failure",
        f"Do not print {SECRET}",
        f"Printing {SECRET} leaks it",
        use_cases=[f"when holding {SECRET}"],
        content=f"- never echo {SECRET}\n- password={PASSWORD}",
        metadata={"api_key": "abcdefgh-1234", "note": f"n {SECRET}"},
    )

    # what was stored is redacted, and redaction really ran (the label is there)
    events = [e for run in (result.run_id,) for e in ws.events.events(run)]
    calls = [e.data for e in events if e.type == "tool_call" and e.data["name"] == "login"]
    assert calls and calls[0]["arguments"] == {"user": "bob", "password": REDACTED}
    reply = next(e.data for e in events if e.type == "model_response")
    assert {"user": "bob", "password": REDACTED} in [c["arguments"] for c in reply["tool_calls"]]
    assert any(LABEL in json.dumps(e.data) for e in events if e.type == "tool_result")
    insights = [i for e in events if e.type == "memory_written" for i in e.data["insights"]]
    assert any("fail_with failed" in i and LABEL in i for i in insights)  # the fold ran, the failure in it
    assert LABEL in record.title and record.metadata["api_key"] == REDACTED
    memory_texts = [r.description for r in ws.memory.list()]
    assert len(memory_texts) >= 3 and any(LABEL in t for t in memory_texts)
    assert LABEL in ws.db.run_row(result.run_id)["task"] and LABEL in ws.db.run_row(result.run_id)["answer"]

    traj = ws.trajectory(result.run_id)
    json_traj = ws.trajectory(json_result.run_id)
    renderings = []
    for t in (traj, json_traj):
        data, metadata = mimebundle(t)
        renderings += [data["text/html"], data["text/plain"], json.dumps(data), t.text(), repr(t)]
    for text in renderings:
        assert not leaks(text), leaks(text)
    assert "[redacted]" in traj.text() and LABEL in renderings[0]

    con_text = _all_text_in_tables(ws.path / "tea.db")
    assert not leaks(con_text), leaks(con_text)
    assert not leaks(_raw_files(ws.path))  # the WAL while the workspace is open
    ws.close()
    raw = _raw_files(ws.path)
    assert len(raw) > 100_000 and LABEL in raw
    assert not leaks(raw), leaks(raw)


def test_exported_manifest_holds_no_secret_and_still_imports(tmp_path, secret_env):
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    source = f'def call_service(api_key: str) -> str:\n    """Call the service."""\n    return {SECRET!r}\n'
    ws.tools.register(
        {
            "name": "call_service",
            "description": f"Calls the service (default key {SECRET})",
            "parameters": {
                "type": "object",
                "properties": {"api_key": {"type": "string", "description": "the key to use"}},
                "required": ["api_key"],
            },
            "source": source,
        }
    )
    path = tmp_path / "tools.json"
    manifest = export_manifest(ws.tools, path)
    text = path.read_text()
    assert not leaks(text) and not leaks(json.dumps(manifest))
    entry = manifest["tools"][0]
    assert entry["parameters"]["properties"]["api_key"] == {"type": "string", "description": "the key to use"}
    assert LABEL in entry["code"] and LABEL in entry["description"]
    other = tea_notebook.Workspace(tmp_path / "other", embedder="hashing")
    report = import_manifest(other.tools, path)
    assert report.added == ["call_service"]
    ws.close()
    other.close()
