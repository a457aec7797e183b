"""The redaction caches (environment snapshot, per-text memo) never serve a stale answer: a secret
exported, changed or removed after a text was redacted once is seen on the very next call."""

from __future__ import annotations

import os

from tea_notebook.redaction import redact

NAME = "TEA_TEST_CACHE_API_KEY"
LABEL = f"[{NAME} redacted]"


def test_text_redacted_before_a_secret_is_exported_is_redacted_after(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)
    text = "the value is cache-secret-Qx7!"
    event = {"observation": text, "args": [text]}
    assert redact(text) == text and redact(event) == event  # memoised without the secret
    monkeypatch.setenv(NAME, "cache-secret-Qx7!")
    assert redact(text) == f"the value is {LABEL}"
    assert redact(event) == {"observation": f"the value is {LABEL}", "args": [f"the value is {LABEL}"]}


def test_a_changed_secret_value_replaces_the_old_one_at_once(monkeypatch):
    monkeypatch.setenv(NAME, "first-secret-Ab12")
    assert redact("a first-secret-Ab12 b") == f"a {LABEL} b"
    os.environ[NAME] = "second-secret-Cd34"  # same name, same number of variables
    assert redact("a first-secret-Ab12 b") == "a first-secret-Ab12 b"
    assert redact("a second-secret-Cd34 b") == f"a {LABEL} b"
    del os.environ[NAME]
    assert redact("a second-secret-Cd34 b") == "a second-secret-Cd34 b"


def test_key_value_scan_still_runs_on_repeated_and_mixed_case_text():
    for _ in range(3):  # the memo answers the same as the scan
        assert redact("X-Api-KEY: abcdef123456\nother: 1") == "X-Api-KEY: [redacted]\nother: 1"
        assert redact('{"Password": "pw-123456"}') == '{"Password": "[redacted]"}'
