"""The ``files`` environment: every action, confinement to the run folder (absolute paths, ``..``,
symbolic links out of the folder, also for files that do not exist yet), size limits, search and
replace edge cases, and the ECP path (``ws.envs.add`` / ``invoke``, session folders, agent runs).

The last part attacks it as a hostile model would (issue 10): a folder swapped for a link while
actions run, named pipes and sockets, link loops, a catastrophic regular expression, and actions
that block forever trying to starve the worker threads."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from tea_notebook.envs.base import Environment, EnvironmentFailure, action
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


# -- a hostile model: races, special files, runaway patterns, stuck actions (issue 10) -----------
def quick(fn, *args, limit: float = 5.0, **kwargs):
    """Run ``fn`` in a helper thread and fail the test (instead of hanging it) when it blocks."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(limit)
    assert not worker.is_alive(), f"{getattr(fn, '__name__', fn)}{args} still blocked after {limit} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_a_folder_swapped_for_a_link_mid_action_never_leads_out(fs, outside):
    """Something else that can write in the run folder (code in the sandbox, say) keeps swapping
    sub/ for a link to a folder outside, while the agent writes, appends, reads, lists and searches
    under sub/: whatever interleaving happens, nothing is written, read or listed outside."""
    root = fs.folder
    sub, held = root / "sub", root / "held"
    sub.mkdir()
    (sub / "secret.txt").write_text("inside\n")
    stop = threading.Event()
    swaps = 0

    def put_back() -> None:
        # a write may have re-created sub/ while it was away: keep the held folder, drop the new one
        try:
            if sub.is_symlink():
                sub.unlink()
            elif sub.is_dir() and held.is_dir():
                shutil.rmtree(sub)
            if held.is_dir():
                held.rename(sub)
        except OSError:
            pass

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            try:
                sub.rename(held)
                sub.symlink_to(outside)
                sub.unlink()
                held.rename(sub)
                swaps += 1
            except OSError:
                put_back()

    # switch threads often, so the swaps fall between the steps of each action
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    attacker = threading.Thread(target=swapper, daemon=True)
    attacker.start()
    done = refused_count = 0
    seen: list[str] = []
    deadline = time.monotonic() + 10
    try:
        for i in range(1000):
            if time.monotonic() > deadline:
                break
            for op in (
                lambda i=i: fs.write(f"sub/w{i}.txt", "pwned\n"),
                lambda: fs.append("sub/log.txt", "pwned\n"),
                lambda: fs.read("sub/secret.txt"),
                lambda: fs.list("sub"),
                lambda: fs.search("needle", "sub"),
                lambda: fs.replace("sub/secret.txt", "top", "bottom"),
            ):
                try:
                    seen.append(str(op()))
                    done += 1
                except EnvironmentFailure:
                    refused_count += 1
    finally:
        stop.set()
        attacker.join(5)
        sys.setswitchinterval(interval)
    assert swaps > 20, f"the race never ran ({swaps} swaps)"
    assert done > 100, f"too few actions went through to show anything ({done} done, {refused_count} refused)"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret needle\n"
    # outside's secret.txt holds "top secret needle\n" (18 B); sub's own holds "inside\n" (7 B)
    leaks = [s for s in seen if "secret needle" in s or "secret.txt  (18 B)" in s]
    assert leaks == [], leaks[:3]


def test_special_files_are_refused_at_once_naming_what_they_are(fs, monkeypatch):
    os.mkfifo(fs.folder / "pipe")
    monkeypatch.chdir(fs.folder)  # a socket path must be short: bind it by its relative name
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("sock")
    fs.write("ok.txt", "fine\n")
    try:
        for call in (
            lambda: fs.read("pipe"),
            lambda: fs.write("pipe", "x"),
            lambda: fs.append("pipe", "x"),
            lambda: fs.replace("pipe", "a", "b"),
        ):
            with pytest.raises(EnvironmentFailure, match=r"'pipe' is a named pipe \(FIFO\), not a regular file"):
                quick(call)
        with pytest.raises(EnvironmentFailure, match=r"'sock' is a socket, not a regular file"):
            quick(fs.read, "sock")
        with pytest.raises(EnvironmentFailure, match=r"'sock' is a socket"):
            quick(fs.write, "sock", "x")
        # walking past them neither blocks nor reads them
        assert quick(fs.search, "fine") == "ok.txt:1: fine"
        listing = quick(fs.list).splitlines()
        assert "pipe  (named pipe (FIFO), not readable)" in listing
        assert "sock  (socket, not readable)" in listing
    finally:
        server.close()


def test_twenty_fifo_reads_fail_fast_and_later_calls_still_run(ws):
    ws.envs.add(FileSystem)
    assert ws.envs.invoke("files", "write", {"path": "ok.txt", "content": "fine\n"}).ok
    folder = ws.path / "sessions" / "interactive"
    for i in range(20):
        os.mkfifo(folder / f"p{i}")

    @ws.tools.tool
    def shout(text: str) -> str:
        """Upper-case a text.

        Args:
            text: the text
        """
        return text.upper()

    started = time.monotonic()
    for i in range(20):
        r = quick(ws.envs.invoke, "files", "read", {"path": f"p{i}"})
        assert not r.ok and r.error["type"] == "EnvironmentFailure"
        assert f"'p{i}' is a named pipe (FIFO)" in r.error["message"]
    assert time.monotonic() - started < 5
    assert quick(ws.envs.invoke, "files", "read", {"path": "ok.txt"}).value == "ok.txt: lines 1-1 of 1\nfine\n"
    assert quick(ws.tools.invoke, "shout", {"text": "still here"}).value == "STILL HERE"


class Stuck(Environment):
    """An environment whose ``hang`` action blocks its thread until the test lets go."""

    name = "stuck"
    description = "Hangs."
    rules = "Call hang."
    release = threading.Event()

    @action(timeout=0.2)
    def hang(self) -> str:
        """Block until released."""
        Stuck.release.wait(60)
        return "released"

    @action
    def ping(self) -> str:
        """Answer at once."""
        return "pong"


def test_actions_stuck_past_their_timeout_cannot_starve_other_calls(ws):
    """A dozen actions that never return (more than asyncio's default executor has threads) only
    jam their own session: tools and other environments keep working, and calls of the jammed
    session are refused with a reason instead of being queued to run later."""
    ws.envs.add(Stuck)
    ws.envs.add(FileSystem)

    @ws.tools.tool
    def shout(text: str) -> str:
        """Upper-case a text.

        Args:
            text: the text
        """
        return text.upper()

    Stuck.release.clear()
    cap = Stuck.max_running_actions
    try:
        results = [quick(ws.envs.invoke, "stuck", "hang") for _ in range(cap + 4)]
        assert all(not r.ok and r.error["type"] == "ActionTimeout" for r in results)
        assert all("did not finish within 0.2 s" in r.error["message"] for r in results[:cap])
        for r in results[cap:]:
            assert "did not start within 0.2 s" in r.error["message"], r.error
            assert f"all {cap} action threads of this session are held" in r.error["message"]
        started = time.monotonic()
        assert quick(ws.tools.invoke, "shout", {"text": "hi"}).value == "HI"
        assert quick(ws.envs.invoke, "files", "write", {"path": "a.txt", "content": "x"}).ok
        assert time.monotonic() - started < 5
    finally:
        Stuck.release.set()
    # once the blocked actions end, the session has its threads back
    deadline = time.monotonic() + 5
    while (r := ws.envs.invoke("stuck", "ping")).value != "pong" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.value == "pong", r.error


def test_a_catastrophic_regex_is_stopped_within_its_budget(fs):
    fs.max_search_seconds = 1.0
    fs.write("evil.txt", ("a" * 5000 + "b\n") * 3)
    box: dict = {}

    def search() -> None:
        try:
            fs.search("(a+)+$", regex=True)
        except EnvironmentFailure as exc:
            box["error"] = str(exc)

    worker = threading.Thread(target=search, daemon=True)
    started = time.monotonic()
    worker.start()
    ticks = 0  # the main thread must keep running meanwhile (the old matcher held the GIL)
    while worker.is_alive() and time.monotonic() - started < 10:
        time.sleep(0.01)
        ticks += 1
    elapsed = time.monotonic() - started
    assert not worker.is_alive() and elapsed < 5, elapsed
    budget = f"{fs.max_search_seconds:g} s"
    assert "'(a+)+$'" in box["error"] and budget in box["error"], box
    assert ticks >= 20


def test_link_loops_and_files_used_as_folders_give_clear_errors(fs, outside):
    (fs.folder / "loop1").symlink_to("loop2")
    (fs.folder / "loop2").symlink_to("loop1")
    fs.write("plain.txt", "x")
    refused(fs.read, "loop1", match="'loop1' refused: too many levels of symbolic links")
    refused(fs.write, "loop2/x.txt", "x", match="'loop2/x.txt' refused: too many levels")
    refused(fs.write, "plain.txt/x.txt", "x", match="'plain.txt' is a file, not a folder")
    # a relative link that climbs out with '..' and comes back in by another name stays refused
    (fs.folder / "up").symlink_to(Path("..") / outside.name)
    refused(fs.read, "up/secret.txt", match="'up/secret.txt' refused: it leads outside the run folder")
    # an absolute link naming the run folder itself is followed, and stays inside
    (fs.folder / "home").symlink_to(fs.folder)
    assert fs.read("home/home/plain.txt").startswith("plain.txt: lines 1-1 of 1")
    assert "home/  (link to .)" in fs.list()


def test_bad_patterns_are_refused_naming_the_pattern(fs):
    fs.write("a.txt", "abc\n")
    message = refused(fs.search, "a(b", regex=True, match="invalid regular expression 'a(b'")
    assert "missing )" in message
    refused(fs.search, "x" * 5000, regex=True, match="longer than")
    refused(fs.search, "x" * 5000, match="longer than")
