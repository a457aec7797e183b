"""The `tea` command in a real child process, as a user runs it (and as scripts/run.sh does)."""

from __future__ import annotations

import json

import pytest
from conftest import tea_cli as tea


@pytest.fixture(scope="module")
def demo_ws(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "demo"
    out = tea("demo", "--workspace", str(path))
    assert out.returncode == 0, out.stderr
    return path, out.stdout


@pytest.mark.slow
def test_demo_walks_through_the_protocol(demo_ws):
    path, stdout = demo_ws
    assert "'how hot is 30 degrees in fahrenheit' -> convert_temperature" in stdout
    assert "86.0" in stdout
    assert "'field': 'value', 'expected': 'number'" in stdout
    assert "offered before opening: ['notes_open']" in stdout
    assert "offered after opening:  ['notes_open', 'notes_read']" in stdout
    assert "scripted runner, no LLM" in stdout
    assert "status unverified, 2 steps" in stdout  # the demo model cannot check its answer
    assert "convert_temperature(value=30.0) -> 86.0" in stdout
    assert "tea/demo (scripted, not an LLM)" in stdout
    assert (path / "tools.json").exists() and (path / "tea.db").exists()


@pytest.mark.slow
def test_search_describe_versions_rollback(demo_ws):
    path, _ = demo_ws
    hits = json.loads(tea("tools", "fahrenheit to celsius", "--json", "-w", str(path)).stdout)
    assert hits[0]["name"] == "convert_temperature"
    described = tea("describe", "convert_temperature", "-w", str(path)).stdout
    assert "value: number" in described and "Celsius" in described
    versions = tea("versions", "count_words", "-w", str(path)).stdout.splitlines()
    assert len(versions) == 2 and versions[0].startswith("* v1")  # the demo rolled back to v1
    assert tea("rollback", "count_words", "2", "-w", str(path)).returncode == 0
    assert tea("versions", "count_words", "-w", str(path)).stdout.splitlines()[1].startswith("* v2")


@pytest.mark.slow
def test_export_import_and_errors(demo_ws, tmp_path):
    path, _ = demo_ws
    manifest = tmp_path / "m.json"
    assert "wrote 6 tools" in tea("export", str(manifest), "-w", str(path)).stdout
    out = tea("import", str(manifest), "-w", str(tmp_path / "other"))
    assert "added 6" in out.stdout
    missing = tea("describe", "no_such_tool", "-w", str(path))
    assert missing.returncode == 2 and "no tool named 'no_such_tool'" in missing.stderr
    (tmp_path / "bad.json").write_text("{not json")
    bad = tea("import", str(tmp_path / "bad.json"), "-w", str(tmp_path / "other"))
    assert bad.returncode == 2 and "not valid JSON" in bad.stderr
