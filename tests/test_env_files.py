"""The ``files`` environment: every action, confinement to the run folder (absolute paths, ``..``,
symbolic links out of the folder, also for files that do not exist yet), size limits, search and
replace edge cases, and the ECP path (``ws.envs.add`` / ``invoke``, session folders, agent runs)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tea_notebook.envs.base import EnvironmentFailure
from tea_notebook.envs.files import FileSystem


def started(folder: Path, **config) -> FileSystem:
    env = FileSystem(folder, **config)
    asyncio.run(env.start())
    return env


@pytest.fixture
def fs(tmp_path) -> FileSystem:
    return started(tmp_path / "root")


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder next to the root with a secret file in it."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("top secret needle\n")
    return out


def refused(fn, *args, match: str, **kwargs) -> str:
    with pytest.raises(EnvironmentFailure) as info:
        fn(*args, **kwargs)
    assert match in str(info.value), str(info.value)
    return str(info.value)


# -- construction --------------------------------------------------------------------------------
def test_init_has_no_side_effects_and_start_creates_the_folder(tmp_path):
    folder = tmp_path / "a" / "b"
    env = FileSystem(folder, max_read_bytes=10, max_write_bytes=20)
    assert not folder.exists()
    assert "not created yet" in env.state()
    asyncio.run(env.start())
    assert folder.is_dir()
    assert (env.max_read_bytes, env.max_write_bytes) == (10, 20)
    with pytest.raises(TypeError):
        FileSystem(folder, bogus=1)
    with pytest.raises(ValueError):
        FileSystem(folder, max_read_bytes=0)


def test_actions_have_typed_schemas():
    specs = {a.name: a for a in FileSystem.actions()}
    assert list(specs) == ["list", "read", "write", "append", "search", "replace"]
    read = specs["read"].parameters
    assert read["required"] == ["path"]
    assert read["properties"]["start_line"]["type"] == "integer"
    assert read["properties"]["start_line"]["default"] == 1
    assert "last line" in read["properties"]["end_line"]["description"]
    assert specs["search"].parameters["properties"]["regex"]["type"] == "boolean"
    assert specs["replace"].parameters["required"] == ["path", "old", "new"]
    assert all(s.description for s in specs.values())
    record = FileSystem.record()
    assert record.name == "files" and record.rules


# -- list ---------------------------------------------------------------------------------------
def test_list_flat_recursive_file_and_errors(fs):
    fs.write("b.txt", "bee\n")
    fs.write("a/deep/c.md", "sea")
    fs.write("a/x.txt", "x")
    flat = fs.list()
    assert flat.splitlines()[0] == "./ (2 entries):"
    assert flat.splitlines()[1:] == ["a/", "b.txt  (4 B)"]
    rec = fs.list(".", recursive=True).splitlines()
    assert rec[0] == "./ (5 entries, recursive):"
    assert rec[1:] == ["a/", "a/deep/", "a/deep/c.md  (3 B)", "a/x.txt  (1 B)", "b.txt  (4 B)"]
    assert fs.list("a").splitlines()[1:] == ["a/deep/", "a/x.txt  (1 B)"]
    assert fs.list("b.txt") == "b.txt  (4 B)"
    (fs.folder / "empty").mkdir()
    assert fs.list("empty") == "empty/ is empty"
    refused(fs.list, "nope", match="'nope' does not exist")


def test_list_is_bounded(fs):
    for i in range(12):
        fs.write(f"f{i:02d}.txt", "")
    fs.max_list_entries = 5
    out = fs.list().splitlines()
    assert out[0] == "./ (12 entries):"
    assert len(out) == 1 + 5 + 1
    assert out[-1].startswith("… 7 more entries not shown (limit 5)")


# -- read ---------------------------------------------------------------------------------------
def test_read_whole_file_and_line_ranges(fs):
    fs.write("poem.txt", "".join(f"line {i}\n" for i in range(1, 11)))
    whole = fs.read("poem.txt")
    assert whole.splitlines()[0] == "poem.txt: lines 1-10 of 10"
    assert whole.endswith("line 10\n")
    part = fs.read("poem.txt", start_line=3, end_line=5)
    assert part == "poem.txt: lines 3-5 of 10\nline 3\nline 4\nline 5\n"
    assert fs.read("poem.txt", start_line=9, end_line=50) == "poem.txt: lines 9-10 of 10\nline 9\nline 10\n"
    assert fs.read("poem.txt", 10).splitlines() == ["poem.txt: lines 10-10 of 10", "line 10"]
    refused(fs.read, "poem.txt", 11, match="has 10 lines; start_line 11 is past the end")
    refused(fs.read, "poem.txt", 0, match="start_line must be 1 or more")
    refused(fs.read, "poem.txt", 5, 4, match="end_line (4) is before start_line (5)")


def test_read_edge_cases(fs):
    fs.write("empty.txt", "")
    assert fs.read("empty.txt") == "empty.txt: empty file (0 lines)"
    fs.write("no-newline.txt", "one\ntwo")
    assert fs.read("no-newline.txt") == "no-newline.txt: lines 1-2 of 2\none\ntwo"
    (fs.folder / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)))
    refused(fs.read, "image.png", match="'image.png' is a binary file")
    (fs.folder / "latin.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    assert "not valid UTF-8" in fs.read("latin.txt")
    refused(fs.read, "missing.txt", match="'missing.txt' does not exist")
    (fs.folder / "sub").mkdir()
    refused(fs.read, "sub", match="'sub' is a folder")
    fs.write("crlf.txt", "a\r\nb\r\n")
    assert fs.read("crlf.txt") == "crlf.txt: lines 1-2 of 2\na\r\nb\r\n"


def test_read_limit_cuts_with_a_note_and_keeps_counting_lines(tmp_path):
    env = started(tmp_path / "r", max_read_bytes=100)
    env.write("big.txt", "".join(f"row {i:04d} ..........\n" for i in range(1, 201)))  # 20 bytes a line
    out = env.read("big.txt")
    header, body = out.split("\n", 1)
    assert header == "big.txt: lines 1-5 of 200; output cut by the 100 B read limit, continue with start_line=6"
    assert body.count("\n") == 5
    follow = env.read("big.txt", start_line=6).split("\n", 1)
    assert follow[0].startswith("big.txt: lines 6-10 of 200")
    assert follow[1].startswith("row 0006")
    # one huge line: cut inside it, the count still right, multi-byte characters never split
    env.write("long.txt", "é" * 5000 + "\nsecond\n")
    header, body = env.read("long.txt").split("\n", 1)
    assert header.startswith("long.txt: lines 1-1 of 2; output cut inside line 1")
    assert body == "é" * 50


# -- write / append -------------------------------------------------------------------------------
def test_write_creates_parents_and_overwrites(fs):
    assert fs.write("out/report/summary.md", "# Hi\nthere\n") == "created out/report/summary.md (11 B, 2 lines)"
    assert (fs.folder / "out" / "report" / "summary.md").read_text() == "# Hi\nthere\n"
    assert fs.write("out/report/summary.md", "x").startswith("overwrote out/report/summary.md (1 B, 1 lines)")
    assert fs.write("./a/./b.txt", "ü").startswith("created a/b.txt (2 B")
    refused(fs.write, "out", "x", match="'out' is a folder")
    # '..' that stays inside the folder is fine
    assert fs.write("out/../inside.txt", "ok").startswith("created inside.txt")


def test_append_creates_and_extends(fs):
    assert fs.append("log/run.log", "one\n") == "appended 4 B to log/run.log (now 4 B)"
    assert fs.append("log/run.log", "two\n") == "appended 4 B to log/run.log (now 8 B)"
    assert (fs.folder / "log" / "run.log").read_text() == "one\ntwo\n"
    refused(fs.append, "log", "x", match="'log' is a folder")


def test_write_and_append_size_limits(tmp_path):
    env = started(tmp_path / "w", max_write_bytes=10)
    assert env.write("ok.txt", "0123456789").startswith("created ok.txt (10 B")
    refused(
        env.write, "big.txt", "x" * 11, match="write to 'big.txt' refused: the content is 11 B, over the 10 B limit"
    )
    assert not (env.folder / "big.txt").exists()
    refused(env.append, "ok.txt", "!", match="the resulting file is 11 B, over the 10 B limit")
    assert (env.folder / "ok.txt").read_text() == "0123456789"
    # the limit counts encoded bytes
    refused(env.write, "u.txt", "é" * 6, match="12 B")


# -- confinement ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path, why",
    [
        ("../x", "leads outside the run folder"),
        ("../outside/secret.txt", "leads outside the run folder"),
        ("a/../../x", "leads outside the run folder"),
        ("/etc/passwd", "absolute paths are not allowed"),
        (os.sep + "tmp", "absolute paths are not allowed"),
        ("bad\0name", "NUL character"),
    ],
)
def test_paths_out_of_the_folder_are_refused(fs, outside, path, why):
    for call in (
        lambda: fs.read(path),
        lambda: fs.write(path, "pwned"),
        lambda: fs.append(path, "pwned"),
        lambda: fs.list(path),
        lambda: fs.search("needle", path),
        lambda: fs.replace(path, "top", "bottom"),
    ):
        message = refused(call, match=why)
        assert repr(path) in message  # the offending path is named
    assert not (fs.folder.parent / "x").exists()
    assert (outside / "secret.txt").read_text() == "top secret needle\n"


def test_symlinks_out_of_the_folder_are_refused(fs, outside):
    root = fs.folder
    (root / "etc").symlink_to("/etc")  # a link to a system folder
    (root / "out").symlink_to(outside)  # a linked folder
    (root / "secret.txt").symlink_to(outside / "secret.txt")  # a linked file
    (root / "dangling").symlink_to(outside / "new.txt")  # a link to a file that does not exist yet
    refused(
        fs.read, "etc/passwd", match="'etc/passwd' refused: it leads outside the run folder (through a symbolic link"
    )
    refused(fs.list, "etc", match="'etc' refused")
    refused(fs.write, "etc/tea-test-file", "x", match="'etc/tea-test-file' refused")
    refused(fs.read, "out/secret.txt", match="'out/secret.txt' refused")
    refused(fs.write, "out/new/deeper.txt", "x", match="'out/new/deeper.txt' refused")  # parents do not exist
    refused(fs.replace, "secret.txt", "top", "bottom", match="'secret.txt' refused")
    refused(fs.append, "secret.txt", "more", match="'secret.txt' refused")
    refused(fs.write, "dangling", "x", match="'dangling' refused")
    refused(fs.write, "out/../../escape.txt", "x", match="refused")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret needle\n"
    assert not Path("/etc/tea-test-file").exists()
    # walking never goes through the links: listings mark them, search skips them
    listing = fs.list(".", recursive=True)
    assert "out  (link to outside the run folder, not accessible)" in listing
    assert "secret.txt  (link to outside the run folder, not accessible)" in listing
    assert "passwd" not in listing and "out/secret.txt" not in listing
    assert fs.search("needle").startswith("no matches")
    assert fs.state().splitlines()[1] == "files: 0"


def test_symlinks_inside_the_folder_work(fs):
    fs.write("data/real.txt", "hello\n")
    (fs.folder / "alias.txt").symlink_to(fs.folder / "data" / "real.txt")
    (fs.folder / "datalink").symlink_to("data")  # relative link to a folder inside
    assert fs.read("alias.txt").endswith("hello\n")
    assert fs.read("datalink/real.txt").startswith("data/real.txt: lines 1-1 of 1")
    fs.append("datalink/real.txt", "world\n")
    assert (fs.folder / "data" / "real.txt").read_text() == "hello\nworld\n"
    assert "alias.txt  (link to data/real.txt)" in fs.list()


def test_root_behind_a_symlink_still_works(tmp_path):
    real = tmp_path / "real-root"
    real.mkdir()
    (tmp_path / "linked-root").symlink_to(real)
    env = started(tmp_path / "linked-root")
    env.write("a.txt", "x")
    assert (real / "a.txt").read_text() == "x"
    assert env.read("a.txt").startswith("a.txt: lines 1-1 of 1")
    assert env.read("../real-root/a.txt").startswith("a.txt:")  # the same file, inside
    refused(env.read, "../a.txt", match="leads outside")


# -- search --------------------------------------------------------------------------------------
def test_search_text_regex_and_bounds(fs):
    fs.write("a.py", "import os\nx = 1  # TODO fix\n")
    fs.write("notes/b.md", "todo: TODO later\nnothing\n")
    (fs.folder / "blob.bin").write_bytes(b"TODO\0\0binary")
    assert fs.search("TODO").splitlines() == ["a.py:2: x = 1  # TODO fix", "notes/b.md:1: todo: TODO later"]
    assert fs.search("TODO", path="notes") == "notes/b.md:1: todo: TODO later"
    assert fs.search("import", path="a.py") == "a.py:1: import os"
    assert fs.search(r"^x = \d", regex=True) == "a.py:2: x = 1  # TODO fix"
    assert fs.search(r"x = \d") == "no matches for text 'x = \\\\d' in . (2 text files searched)"
    refused(fs.search, "(", regex=True, match="invalid regular expression '('")
    refused(fs.search, "", match="non-empty pattern")
    refused(fs.search, "x", "missing", match="'missing' does not exist")
    fs.write("many.txt", "hit\n" * 30)
    fs.max_search_results = 4
    hits = fs.search("hit", "many.txt").splitlines()
    assert hits[:4] == [f"many.txt:{i}: hit" for i in range(1, 5)]
    assert hits[4].startswith("… 26 more matches not shown (limit 4)")
    fs.write("wide.txt", "needle " + "x" * 500 + "\n")
    assert len(fs.search("needle", "wide.txt")) < 230


def test_search_skips_files_over_the_limit(fs):
    fs.write("small.txt", "needle\n")
    fs.write("huge.txt", "needle\n" * 10)
    fs.max_search_file_bytes = 20
    assert fs.search("needle").splitlines() == ["small.txt:1: needle", "skipped 1 file(s) over 20 B: huge.txt"]


# -- replace -------------------------------------------------------------------------------------
def test_replace_all_first_and_errors(fs):
    fs.write("cfg.ini", "a=1\nb=1\nc=1\n")
    assert fs.replace("cfg.ini", "=1", "=2", count=1) == "replaced 1 of 3 occurrences in cfg.ini"
    assert (fs.folder / "cfg.ini").read_text() == "a=2\nb=1\nc=1\n"
    assert fs.replace("cfg.ini", "=1", "=3") == "replaced 2 of 2 occurrences in cfg.ini"
    assert (fs.folder / "cfg.ini").read_text() == "a=2\nb=3\nc=3\n"
    assert fs.replace("cfg.ini", "c=3\n", "", count=5) == "replaced 1 of 1 occurrence in cfg.ini"
    assert fs.replace("cfg.ini", "a=2\nb", "A=2\nB") == "replaced 1 of 1 occurrence in cfg.ini"  # across lines
    assert (fs.folder / "cfg.ini").read_text() == "A=2\nB=3\n"
    refused(fs.replace, "cfg.ini", "zzz", "y", match="'zzz' not found in cfg.ini")
    refused(fs.replace, "cfg.ini", "", "y", match="non-empty old text")
    refused(fs.replace, "cfg.ini", "A", "y", count=0, match="count must be 1 or more")
    refused(fs.replace, "nope.ini", "A", "y", match="'nope.ini' does not exist")
    (fs.folder / "b.bin").write_bytes(b"A\0B")
    refused(fs.replace, "b.bin", "A", "y", match="binary file")
    fs.write("crlf.txt", "x\r\ny\r\n")
    fs.replace("crlf.txt", "y", "z")
    assert (fs.folder / "crlf.txt").read_bytes() == b"x\r\nz\r\n"  # line endings kept


def test_replace_respects_the_write_limit(tmp_path):
    env = started(tmp_path / "r", max_write_bytes=8)
    env.write("f.txt", "abcd")
    refused(env.replace, "f.txt", "a", "aaaaaa", match="the resulting file is 9 B, over the 8 B limit")
    assert (env.folder / "f.txt").read_text() == "abcd"


# -- state ----------------------------------------------------------------------------------------
def test_state_shows_root_count_and_recent_files(fs):
    for i, name in enumerate(["old.txt", "mid.txt", "sub/new.txt"]):
        fs.write(name, "x")
        os.utime(fs.folder / name, (1_000_000 + i, 1_000_000 + i))
    lines = fs.state().splitlines()
    assert lines[0] == f"root: {fs.folder.resolve()}"
    assert lines[1] == "files: 3"
    assert lines[2].startswith("recently modified: sub/new.txt (")
    assert lines[2].index("sub/new.txt") < lines[2].index("mid.txt") < lines[2].index("old.txt")


# -- through ECP ---------------------------------------------------------------------------------
def test_through_ecp_outside_a_run_uses_the_interactive_folder(ws):
    ws.envs.add(FileSystem)
    r = ws.envs.invoke("files", "write", {"path": "notes/todo.md", "content": "- tea\n- cake\n"})
    assert r.ok, r.error
    assert r.value == "created notes/todo.md (13 B, 2 lines)"
    folder = ws.path / "sessions" / "interactive"
    assert (folder / "notes" / "todo.md").read_text() == "- tea\n- cake\n"
    assert ws.envs.runtime("files").session().folder == folder
    assert ws.envs.invoke("files", "append", {"path": "notes/todo.md", "content": "- milk\n"}).ok
    read = ws.envs.invoke("files", "read", {"path": "notes/todo.md", "start_line": 2})
    assert read.value == "notes/todo.md: lines 2-3 of 3\n- cake\n- milk\n"
    assert ws.envs.invoke("files", "list", {"recursive": True}).value.splitlines()[1:] == [
        "notes/",
        "notes/todo.md  (20 B)",
    ]
    assert ws.envs.invoke("files", "search", {"pattern": "cake"}).value == "notes/todo.md:2: - cake"
    assert ws.envs.invoke("files", "replace", {"path": "notes/todo.md", "old": "milk", "new": "lemon"}).ok
    assert "root: " in ws.envs.state("files")
    [live] = ws.envs.sessions()
    assert (live.environment, live.key, live.folder) == ("files", "interactive", folder)


def test_through_ecp_errors_come_back_structured(ws, tmp_path):
    ws.envs.add(FileSystem, max_write_bytes=5)
    bad = ws.envs.invoke("files", "read", {"path": "../../etc/passwd"})
    assert not bad.ok and bad.error["type"] == "EnvironmentFailure"
    assert "'../../etc/passwd' refused" in bad.error["message"]
    absolute = ws.envs.invoke("files", "write", {"path": "/etc/passwd", "content": "x"})
    assert absolute.error["type"] == "EnvironmentFailure" and "'/etc/passwd'" in absolute.error["message"]
    big = ws.envs.invoke("files", "write", {"path": "a.txt", "content": "123456"})
    assert not big.ok and "over the 5 B limit" in big.error["message"]
    missing = ws.envs.invoke("files", "replace", {"path": "a.txt", "old": "x", "new": "y"})
    assert "'a.txt' does not exist" in missing.error["message"]
    typed = ws.envs.invoke("files", "read", {"path": "a.txt", "start_line": "two"})
    assert typed.error["type"] == "ValidationError"
    with pytest.raises(TypeError):
        ws.envs.add(FileSystem, max_bytes=1)


def test_builtin_files_env_is_added_on_first_use(ws):
    record = ws.envs.ensure("files")
    assert {a.name for a in record.actions} == {"list", "read", "write", "append", "search", "replace"}
    assert ws.envs.invoke("files", "write", {"path": "x.txt", "content": "1"}).ok
    assert (ws.path / "sessions" / "interactive" / "x.txt").exists()


def test_agent_run_gets_its_own_run_folder(ws, warm_litellm):
    from tea_notebook.models.offline import ScriptedModel, call

    ws.envs.add(FileSystem)
    script = ScriptedModel(
        [
            call("files_write", path="result.txt", content="42\n"),
            call("files_read", path="result.txt"),
            call("done", success=True, text="wrote it"),
        ]
    )
    result = ws.agent("scribe", model=script.name, envs=["files"]).run_sync("write the answer")
    assert result.success, result.error
    assert (ws.path / "runs" / result.run_id / "result.txt").read_text() == "42\n"
    assert not (ws.path / "sessions" / "interactive" / "result.txt").exists()
    assert ws.envs.sessions() == []  # released when the run ended
    actions = [a for step in result.trajectory.steps for a in step.actions]
    assert [a["name"] for a in actions[:2]] == ["files_write", "files_read"]
    assert actions[1]["observation"] == "result.txt: lines 1-1 of 1\n42\n"
