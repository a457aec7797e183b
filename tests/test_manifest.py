"""The TEA tool manifest: export, import (added / unchanged / updated / skipped_older), refusing
bad files without touching the registry, trusting code, hot reload, and a round-trip property."""

from __future__ import annotations

import copy
import hashlib
import json
import sqlite3
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from workspace_on_disk import make_ws

import tea_notebook
from tea_notebook.errors import ManifestError
from tea_notebook.protocol.records import Relation, ToolRecord

DOUBLE_SRC = 'def double(x: int) -> int:\n    """Double x."""\n    return 2 * x\n'
ENTRY_KEYS = {
    "id",
    "name",
    "description",
    "version",
    "parameters",
    "returns",
    "dependencies",
    "permissions",
    "code",
    "fingerprint",
}


# -- tools to export (module level, so their source is visible) ----------------------------
def celsius_to_fahrenheit(celsius: float) -> float:
    """Convert a temperature from Celsius to Fahrenheit.

    Args:
        celsius: temperature in degrees Celsius
    """
    return celsius * 9 / 5 + 32


def vector_norm(values: list[float]) -> float:
    """Euclidean length of a vector of numbers.

    Args:
        values: the vector's components
    """
    import numpy as np

    return float(np.linalg.norm(values))


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def manifest(*tools: dict) -> dict:
    return {"format": "tea-tool-manifest", "format_version": 1, "tools": list(tools)}


def write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return path


def double_entry(**extra) -> dict:
    entry = {
        "name": "double",
        "description": "Double x.",
        "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
        "returns": {"type": "integer"},
        "code": DOUBLE_SRC,
        "fingerprint": sha(DOUBLE_SRC),
        "version": 1,
    }
    entry.update(extra)
    return entry


def registry_state(ws: tea_notebook.Workspace) -> tuple:
    """Everything an import could change: current records, every stored version, the change log."""
    con = sqlite3.connect(ws.path / "tea.db")
    try:
        versions = con.execute("SELECT count(*) FROM versions WHERE kind='tool'").fetchone()[0]
        changes = con.execute("SELECT count(*) FROM changes WHERE kind='tool'").fetchone()[0]
    finally:
        con.close()
    current = {r.name: (r.version, r.content_hash()) for r in ws.tools.list()}
    return len(ws.tools), versions, changes, current


@pytest.fixture
def source_ws(tmp_path):
    ws = make_ws(tmp_path / "source")
    ws.tools.register(celsius_to_fahrenheit)
    ws.tools.register(vector_norm)
    ws.tools.register(
        ToolRecord(
            name="rotate_logs",
            description="Rotate and compress old log files",
            category="ops",
            permissions=["filesystem:write"],
            parameters={"type": "object", "properties": {"days": {"type": "integer", "description": "age"}}},
        )
    )
    # a second version of one tool so versions differ
    ws.tools.register(
        ToolRecord(
            name="rotate_logs",
            description="Rotate, compress and delete old log files",
            category="ops",
            permissions=["filesystem:write", "filesystem:delete"],
            parameters={"type": "object", "properties": {"days": {"type": "integer", "description": "age"}}},
        )
    )
    yield ws
    ws.close()


# -- export -----------------------------------------------------------------------------------
def test_export_writes_tea_manifest(source_ws, tmp_path):
    path = tmp_path / "tools.json"
    returned = source_ws.tools.export_manifest(path)
    on_disk = json.loads(path.read_text())
    assert on_disk == returned
    assert on_disk["format"] == "tea-tool-manifest"
    assert on_disk["format_version"] == 1
    entries = {e["name"]: e for e in on_disk["tools"]}
    assert set(entries) == {"celsius_to_fahrenheit", "vector_norm", "rotate_logs"}
    for entry in entries.values():
        assert ENTRY_KEYS <= set(entry), ENTRY_KEYS - set(entry)
        assert entry["id"] == f"{entry['name']}@{entry['version']}"
        assert "source" not in entry  # the code travels as "code"

    c2f = entries["celsius_to_fahrenheit"]
    assert c2f["code"].startswith("def celsius_to_fahrenheit(celsius: float) -> float:")
    assert c2f["fingerprint"] == sha(c2f["code"])
    assert c2f["parameters"]["properties"]["celsius"]["type"] == "number"
    assert c2f["parameters"]["required"] == ["celsius"]
    assert c2f["returns"]["type"] == "number"
    assert c2f["version"] == 1
    assert entries["vector_norm"]["dependencies"] == ["numpy"]
    assert entries["vector_norm"]["fingerprint"] == sha(entries["vector_norm"]["code"])
    assert entries["rotate_logs"]["version"] == 2
    assert entries["rotate_logs"]["permissions"] == ["filesystem:write", "filesystem:delete"]
    assert entries["rotate_logs"]["code"] == ""
    assert not (tmp_path / "tools.json.tmp").exists()


# -- import -----------------------------------------------------------------------------------
def test_import_added_then_unchanged(source_ws, tmp_path):
    path = tmp_path / "tools.json"
    source_ws.tools.export_manifest(path)
    dest = make_ws(tmp_path / "dest")
    report = dest.tools.import_manifest(path)
    assert sorted(report.added) == ["celsius_to_fahrenheit", "rotate_logs", "vector_norm"]
    assert report.updated == report.unchanged == report.skipped_older == []
    assert report.changed
    for original in source_ws.tools.list():
        imported = dest.tools.get(original.name)
        assert imported.version == 1  # a fresh registry numbers its own versions
        a, b = original.content(), imported.content()
        assert b["trusted"] is False  # without trust_code nothing imported is trusted
        a.pop("trusted"), b.pop("trusted")
        assert a == b
    state = registry_state(dest)

    again = dest.tools.import_manifest(path)
    assert sorted(again.unchanged) == ["celsius_to_fahrenheit", "rotate_logs", "vector_norm"]
    assert again.added == again.updated == again.skipped_older == []
    assert not again.changed
    assert registry_state(dest) == state
    # imported tools are searchable
    assert dest.tools.search("convert temperature celsius", k=1)[0].name == "celsius_to_fahrenheit"
    dest.close()


def test_import_newer_version_updates_and_older_is_skipped(source_ws, tmp_path):
    path = tmp_path / "tools.json"
    data = source_ws.tools.export_manifest(path)
    dest = make_ws(tmp_path / "dest")
    dest.tools.import_manifest(path)

    newer = copy.deepcopy(data)
    entry = next(e for e in newer["tools"] if e["name"] == "celsius_to_fahrenheit")
    entry["version"] = entry["version"] + 1
    entry["description"] = "Convert Celsius degrees into Fahrenheit degrees (rounded)"
    report = dest.tools.import_manifest(write(tmp_path / "newer.json", newer))
    assert report.updated == ["celsius_to_fahrenheit"]
    assert sorted(report.unchanged) == ["rotate_logs", "vector_norm"]
    assert report.added == report.skipped_older == []
    current = dest.tools.get("celsius_to_fahrenheit")
    assert current.version == 2
    assert current.description == "Convert Celsius degrees into Fahrenheit degrees (rounded)"
    assert [v.version for v in dest.tools.versions("celsius_to_fahrenheit")] == [1, 2]
    assert dest.tools.versions("celsius_to_fahrenheit")[-1].note == "manifest newer.json"
    state = registry_state(dest)

    older = copy.deepcopy(data)
    entry = next(e for e in older["tools"] if e["name"] == "celsius_to_fahrenheit")
    entry["version"] = 1
    entry["description"] = "An outdated description that must not win"
    report = dest.tools.import_manifest(write(tmp_path / "older.json", older))
    assert report.skipped_older == ["celsius_to_fahrenheit"]
    assert report.added == report.updated == []
    assert registry_state(dest) == state
    assert dest.tools.get("celsius_to_fahrenheit").description.startswith("Convert Celsius degrees into")
    dest.close()


# -- bad files ---------------------------------------------------------------------------------
def _good() -> dict:
    return manifest(
        {"name": "alpha_tool", "description": "First tool", "version": 1},
        {"name": "beta_tool", "description": "Second tool", "version": 1},
    )


def _bad_not_json():
    return "this is not json at all {"


def _bad_truncated():
    return json.dumps(_good(), indent=2)[:-40]


def _bad_other_format():
    return {"format": "openapi", "format_version": 1, "tools": _good()["tools"]}


def _bad_no_format():
    return [{"name": "alpha_tool", "description": "First tool"}]


def _bad_format_version():
    data = _good()
    data["format_version"] = 2
    return data


def _bad_name():
    data = _good()
    data["tools"].append({"name": "has spaces!", "description": "Invalid name", "version": 1})
    return data


def _bad_duplicate():
    data = _good()
    data["tools"].append({"name": "alpha_tool", "description": "Same name again", "version": 3})
    return data


def _bad_fingerprint():
    data = _good()
    data["tools"].append(double_entry(fingerprint=sha(DOUBLE_SRC.replace("2 * x", "3 * x"))))
    return data


def _bad_tools_not_list():
    data = _good()
    data["tools"] = {"alpha_tool": {"description": "First tool"}}
    return data


def _bad_missing_description():
    data = _good()
    data["tools"].append({"name": "gamma_tool", "version": 1})
    return data


BAD = {
    "not_json": (_bad_not_json, "not valid JSON"),
    "truncated_json": (_bad_truncated, "not valid JSON"),
    "other_format": (_bad_other_format, "not a tea tool manifest"),
    "json_list": (_bad_no_format, "not a tea tool manifest"),
    "wrong_format_version": (_bad_format_version, "format_version"),
    "invalid_name": (_bad_name, "not a valid name"),
    "duplicate_names": (_bad_duplicate, "appears twice"),
    "fingerprint_mismatch": (_bad_fingerprint, "fingerprint"),
    "tools_not_a_list": (_bad_tools_not_list, "must be a list"),
    "missing_description": (_bad_missing_description, "description"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_manifest_raises_and_changes_nothing(tmp_path, case):
    make, words = BAD[case]
    ws = make_ws(tmp_path / "ws")
    # a registry that already holds one of the names, so a partial import would show
    ws.tools.register(ToolRecord(name="alpha_tool", description="Existing first tool"))
    ws.tools.register(ToolRecord(name="other_tool", description="Unrelated tool"))
    before = registry_state(ws)
    path = write(tmp_path / f"{case}.json", make())
    with pytest.raises(ManifestError) as info:
        ws.tools.import_manifest(path)
    assert words in str(info.value)
    assert str(path) in str(info.value)
    assert registry_state(ws) == before
    assert "beta_tool" not in ws.tools
    ws.close()


def test_manifest_with_unknown_relation_type_raises_manifest_error(tmp_path):
    ws = make_ws(tmp_path / "ws")
    before = registry_state(ws)
    data = _good()
    data["tools"].append(
        {"name": "gamma_tool", "description": "Third", "relations": [{"type": "bogus", "target": "alpha_tool"}]}
    )
    path = write(tmp_path / "rel.json", data)
    try:
        with pytest.raises(ManifestError):
            ws.tools.import_manifest(path)
    finally:
        assert registry_state(ws) == before  # (this part holds: register_many is all or nothing)
        ws.close()


# -- trusting code -------------------------------------------------------------------------------
def test_untrusted_code_does_not_run(tmp_path):
    ws = make_ws(tmp_path / "ws")
    path = write(tmp_path / "m.json", manifest(double_entry()))
    assert ws.tools.import_manifest(path).added == ["double"]
    rec = ws.tools.get("double")
    assert rec.source == DOUBLE_SRC and rec.trusted is False
    result = ws.tools.invoke("double", {"x": 21})
    assert result.ok is False and result.value is None
    assert "not trusted" in result.error["message"]
    assert "trust_code=True" in result.error["message"]
    ws.close()


def test_manifest_cannot_declare_itself_trusted(tmp_path):
    ws = make_ws(tmp_path / "ws")
    path = write(tmp_path / "m.json", manifest(double_entry(trusted=True)))
    ws.tools.import_manifest(path)
    assert ws.tools.get("double").trusted is False
    result = ws.tools.invoke("double", {"x": 21})
    assert result.ok is False and "not trusted" in result.error["message"]
    ws.close()


def test_trusted_code_runs(tmp_path):
    ws = make_ws(tmp_path / "ws")
    path = write(tmp_path / "m.json", manifest(double_entry()))
    ws.tools.import_manifest(path, trust_code=True)
    assert ws.tools.get("double").trusted is True
    result = ws.tools.invoke("double", {"x": 21})
    assert result.ok is True, result.error
    assert result.value == 42
    # the manifest's schema is enforced before the code runs
    bad = ws.tools.invoke("double", {"x": "seven"})
    assert bad.ok is False and bad.error["type"] == "ValidationError" and bad.error["field"] == "x"
    ws.close()


def test_reimport_with_trust_code_makes_tool_runnable(tmp_path):
    ws = make_ws(tmp_path / "ws")
    path = write(tmp_path / "m.json", manifest(double_entry()))
    ws.tools.import_manifest(path)
    assert ws.tools.invoke("double", {"x": 21}).ok is False
    ws.tools.import_manifest(path, trust_code=True)
    try:
        assert ws.tools.invoke("double", {"x": 21}).value == 42
    finally:
        ws.close()


# -- hot reload ------------------------------------------------------------------------------------
def wait_for(condition, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_watch_manifest_hot_reload(tmp_path):
    ws = make_ws(tmp_path / "ws")
    path = write(tmp_path / "watched.json", manifest({"name": "first_tool", "description": "The first tool"}))
    watcher = ws.tools.watch_manifest(path, interval=0.1)
    try:
        assert ws.tools.names() == ["first_tool"]  # imported once at start
        assert watcher.reloads == 1 and watcher.last_error is None

        write(path, manifest(
            {"name": "first_tool", "description": "The first tool"},
            {"name": "second_tool", "description": "Added while watching"},
        ))  # fmt: skip
        assert wait_for(lambda: "second_tool" in ws.tools), "the added tool never appeared"
        assert wait_for(lambda: watcher.reloads == 2)
        assert watcher.last_report.added == ["second_tool"]
        good_state = registry_state(ws)

        write(path, '{"format": "tea-tool-manifest", "format_version": 1, "tools": [{"name": ')
        assert wait_for(lambda: watcher.last_error is not None), "corrupt file not reported"
        assert "not valid JSON" in watcher.last_error
        time.sleep(0.3)  # a few more polls of the same bad file
        assert registry_state(ws) == good_state
        assert watcher.reloads == 2

        write(path, manifest(
            {"name": "first_tool", "description": "The first tool, revised"},
            {"name": "second_tool", "description": "Added while watching"},
            {"name": "third_tool", "description": "After the corrupt file"},
        ))  # fmt: skip
        assert wait_for(lambda: "third_tool" in ws.tools), "good file after a bad one not reloaded"
        assert wait_for(lambda: watcher.last_error is None)
        assert watcher.reloads == 3
        assert ws.tools.get("first_tool").description == "The first tool, revised"
        assert ws.tools.get("first_tool").version == 2
    finally:
        watcher.stop()
    assert not watcher._thread.is_alive()
    # stopped: later edits are ignored
    write(path, manifest({"name": "fourth_tool", "description": "Written after stop"}))
    time.sleep(0.4)
    assert "fourth_tool" not in ws.tools
    ws.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_watcher_survives_manifest_rejected_by_registry(tmp_path):
    ws = make_ws(tmp_path / "ws")
    path = write(tmp_path / "watched.json", manifest({"name": "first_tool", "description": "The first tool"}))
    watcher = ws.tools.watch_manifest(path, interval=0.1)
    try:
        write(path, manifest(
            {"name": "first_tool", "description": "The first tool"},
            {"name": "bad_rel", "description": "Bad relation", "relations": [{"type": "bogus", "target": "x"}]},
        ))  # fmt: skip
        reported = wait_for(lambda: watcher.last_error is not None, timeout=2.0)
        write(path, manifest(
            {"name": "first_tool", "description": "The first tool"},
            {"name": "second_tool", "description": "A good file again"},
        ))  # fmt: skip
        assert wait_for(lambda: "second_tool" in ws.tools, timeout=3.0), "watcher stopped reloading"
        assert reported, "the rejected file was not reported in last_error"
    finally:
        watcher.stop()
        ws.close()


# -- property: export → import round-trips ------------------------------------------------------
NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_\-]{0,20}", fullmatch=True)
TEXT = st.text(min_size=1, max_size=60).filter(lambda s: s.strip())
PARAM = st.fixed_dictionaries(
    {"type": st.sampled_from(["string", "integer", "number", "boolean"])},
    optional={"description": st.text(max_size=30)},
)


@st.composite
def parameter_schemas(draw):
    props = draw(st.dictionaries(NAME, PARAM, max_size=4))
    schema = {"type": "object", "properties": props}
    if props:
        schema["required"] = draw(st.lists(st.sampled_from(sorted(props)), unique=True))
    return schema


@st.composite
def tool_records(draw):
    names = draw(st.lists(NAME, min_size=1, max_size=5, unique=True))
    records = []
    for name in names:
        others = [n for n in names if n != name]
        relations = []
        if others and draw(st.booleans()):
            relations = [
                Relation(type=draw(st.sampled_from(["depends_on", "conflicts_with", "precondition"])),
                         target=draw(st.sampled_from(others)))
            ]  # fmt: skip
        records.append(
            ToolRecord(
                name=name,
                description=draw(TEXT),
                category=draw(st.sampled_from(["general", "web", "files", "math"])),
                parameters=draw(parameter_schemas()),
                returns=draw(st.sampled_from([{}, {"type": "string"}, {"type": "integer", "description": "n"}])),
                permissions=draw(
                    st.lists(st.text(alphabet="abcdefghijklmnop:_-", min_size=1, max_size=12), max_size=3)
                ),
                dependencies=draw(st.lists(st.sampled_from(["numpy", "requests", "pandas"]), unique=True)),
                toolkit=draw(st.one_of(st.none(), NAME)),
                metadata=draw(
                    st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=10)), max_size=2)
                ),
                relations=relations,
                source=draw(st.sampled_from(["", DOUBLE_SRC])),
                trusted=draw(st.booleans()),
            )
        )
    return records


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=tool_records())
def test_export_import_round_trip(records):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = make_ws(tmp / "src")
        src.tools.register_many(records)
        path = tmp / "m.json"
        src.tools.export_manifest(path)
        src.close()

        dest = make_ws(tmp / "dest")
        report = dest.tools.import_manifest(path)
        assert sorted(report.added) == sorted(r.name for r in records)
        for original in records:
            imported = dest.tools.get(original.name)
            a, b = original.content(), imported.content()
            a.pop("trusted"), b.pop("trusted")
            assert a == b
        # and a second import of the same file changes nothing
        assert sorted(dest.tools.import_manifest(path).unchanged) == sorted(r.name for r in records)
        dest.close()
