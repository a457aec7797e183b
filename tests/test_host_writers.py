"""Host code never follows what the sandbox left in a run folder; no set-id file from inside (issue 19,
findings 2 and 6).

The whole run folder is writable by sandboxed code. Every test plays that code: it leaves a
symbolic link to a host file where the host is about to write or read (``todo.md``, the tool maker's
check folder, a document's copy, an export), a link in a parent folder, a named pipe where a file is
expected, or a hard link to a host file; then the host code runs. Each asserts that the host file
is untouched and unread, and that the write landed safely in the run folder or was refused with an
error naming the path. The end-to-end attack (a scripted model whose sandboxed code plants the link,
then calls ``todo``) and the set-id attacks run as root and as an unprivileged user the tests create
(``test_boundary``'s ``host`` fixture); without bubblewrap they skip, or fail under
``TEA_REQUIRE_BUBBLEWRAP=1``. The unit tests plant with the test's own hands and need no sandbox.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import asyncio  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import test_boundary  # noqa: E402
from test_boundary import ATTEMPT, SANDBOX_OPTIONS, Host, report_of  # noqa: E402

from tea_notebook._safe_open import read_beneath, write_beneath  # noqa: E402
from tea_notebook.errors import EnvironmentFailure, TeaError  # noqa: E402
from tea_notebook.runtime.render import _folder_payload  # noqa: E402
from tea_notebook.runtime.todo import TodoList  # noqa: E402

HOST_SCRIPT = Path(__file__).with_name("host_writers_host.py")
# the boundary tests' fixtures: bubblewrap (skip, or fail under TEA_REQUIRE_BUBBLEWRAP=1, without it)
# and the host as root and as an unprivileged user
bwrap = test_boundary.bwrap
host = test_boundary.host
SECRET = "FAKE-ROOT-ONLY-SECRET-3c1f9a"
VICTIM = "# a file of the host's that a shell sources\nexport PS1='$ '\n"


# -- helpers --------------------------------------------------------------------------------------
@pytest.fixture
def outside(tmp_path) -> dict[str, Path]:
    """Host files next to the run folder, not in it: a 0600 victim to overwrite, a 0600 secret to
    read, an empty folder to write into."""
    victim, secret, folder = tmp_path / "victim", tmp_path / "secret", tmp_path / "outside-folder"
    victim.write_text(VICTIM)
    secret.write_text(SECRET + "\n")
    for path in (victim, secret):
        path.chmod(0o600)
    folder.mkdir()
    return {"victim": victim, "secret": secret, "folder": folder}


@pytest.fixture
def run(tmp_path) -> Path:
    """A run folder (its parent, like a workspace's runs/, is not writable by sandboxed code)."""
    folder = tmp_path / "ws" / "runs" / "r1"
    folder.mkdir(parents=True)
    return folder


def untouched(outside: dict[str, Path]) -> None:
    assert outside["victim"].read_text() == VICTIM, "the host file was written through a planted link"
    assert stat.S_IMODE(outside["victim"].stat().st_mode) == 0o600
    assert list(outside["folder"].iterdir()) == [], "the host wrote outside the run folder"


def finishes(fn: Any, seconds: float = 10.0) -> Any:
    """``fn()`` in a thread that must end in time (a named pipe must never block the host)."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        # unblock the writer (open a named pipe for reading) so the thread can end, then fail
        pytest.fail(f"the host blocked for {seconds} s (it opened a named pipe the sandbox left?)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def plant(run: Path, name: str, how: str, outside: dict[str, Path]) -> None:
    """What sandboxed code can leave at ``run/name``."""
    target = run / name
    target.parent.mkdir(parents=True, exist_ok=True)
    if how == "link":
        target.symlink_to(outside["victim"])
    elif how == "fifo":
        os.mkfifo(target)
    elif how == "hardlink":  # needs a host file on the same file system the sandbox cannot see
        os.link(outside["victim"], target)
    else:
        raise AssertionError(how)


# -- todo.md -------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["link", "fifo", "hardlink"])
def test_todo_write_replaces_what_was_planted_at_todo_md(run, outside, how):
    plant(run, "todo.md", how, outside)
    todo = finishes(lambda: TodoList(run / "todo.md"))
    shown = finishes(lambda: todo.apply("add", steps=[{"description": "boil water"}]))
    assert "- [ ] 1. boil water (priority: medium)" in shown
    assert (run / "todo.md").is_file() and not (run / "todo.md").is_symlink()
    assert (run / "todo.md").read_text() == "# Todo\n\n- [ ] 1. boil water (priority: medium)\n"
    untouched(outside)
    assert SECRET not in shown


def test_todo_read_never_brings_a_host_file_into_the_prompt(run, outside):
    (run / "todo.md").symlink_to(outside["secret"])
    todo = TodoList(run / "todo.md")
    shown = todo.render()
    assert SECRET not in shown
    assert "todo.md cannot be read" in shown and "leads outside the run folder" in shown
    assert SECRET not in todo.apply("list")
    # a link that stays inside the run folder is followed, like the files environment does
    (run / "todo.md").unlink()
    (run / "plan.md").write_text("- [ ] check the kettle\n")
    (run / "todo.md").symlink_to("plan.md")
    assert "check the kettle" in TodoList(run / "todo.md").apply("list")


@pytest.mark.parametrize("target", ["todo.md", "nowhere/todo.md", "sandbox"])
def test_todo_survives_a_link_loop_a_dangling_link_and_a_folder(run, outside, target):
    (run / "sandbox").mkdir()
    (run / "todo.md").symlink_to(target)  # itself (a loop), into a missing folder, to a folder
    todo = TodoList(run / "todo.md")
    shown = todo.render()  # assembled into every prompt: must never raise
    assert "todo.md" in shown or shown == ""
    assert "boil" in todo.apply("add", steps=[{"description": "boil"}])
    assert (run / "todo.md").is_file() and not (run / "todo.md").is_symlink()


def test_todo_read_refuses_a_named_pipe_without_blocking(run, outside):
    os.mkfifo(run / "todo.md")
    todo = finishes(lambda: TodoList(run / "todo.md"))
    shown = finishes(todo.render)
    assert "named pipe" in shown


def test_todo_export_stays_in_the_run_folder(run, outside):
    todo = TodoList(run / "todo.md")
    todo.apply("add", steps=[{"description": "pour"}])
    (run / "todo-export.md").symlink_to(outside["victim"])
    assert todo.apply("export") == f"exported to {run / 'todo-export.md'}"
    assert "pour" in (run / "todo-export.md").read_text() and not (run / "todo-export.md").is_symlink()
    for bad in (str(outside["victim"]), "../../victim", "/etc/cron.d/tea"):
        with pytest.raises(ValueError, match="export path .* refused: give a path inside the run folder"):
            todo.apply("export", path=bad)
    (run / "exports").symlink_to(outside["folder"])  # a link in a parent folder
    with pytest.raises(ValueError, match="leads outside the run folder"):
        todo.apply("export", path="exports/plan.md")
    assert todo.apply("export", path="notes/plan.md") == f"exported to {run / 'notes' / 'plan.md'}"
    untouched(outside)


# -- the run's view (notebook output and the stored bundle) ------------------------------------------
def test_run_view_lists_and_shows_nothing_from_outside(run, outside):
    (run / "todo.md").symlink_to(outside["secret"])
    (run / "linked-file").symlink_to(outside["secret"])
    (run / "linked-folder").symlink_to(outside["folder"].parent)  # would list the host's files
    (run / "sandbox").mkdir()
    (run / "sandbox" / "result.csv").write_text("a,b\n")
    os.mkfifo(run / "sandbox" / "pipe")
    shown = finishes(lambda: _folder_payload(str(run)))
    text = json.dumps(shown)
    assert SECRET not in text
    assert shown["files"] == ["sandbox/result.csv"]
    assert shown["todo"].startswith("(todo.md is not shown: ") and "leads outside the run folder" in shown["todo"]


# -- the one helper ------------------------------------------------------------------------------------
def test_write_beneath_never_leaves_the_folder(run, outside):
    (run / "up").symlink_to(outside["folder"])
    with pytest.raises(EnvironmentFailure, match=r"'up/x' cannot be written: path 'up' refused: it leads outside"):
        write_beneath(run, "up/x", "data")
    for bad in ("/etc/passwd", "../escape", "a/../../escape"):
        with pytest.raises(EnvironmentFailure, match="refused"):
            write_beneath(run, bad, "data")
    (run / "dir").mkdir()
    (run / "dir" / "inside").mkdir()
    with pytest.raises(EnvironmentFailure, match="a folder is in its place"):
        write_beneath(run, "dir/inside", "data")
    assert write_beneath(run, "new/deeper/file.txt", b"ok", mode=0o600) == "new/deeper/file.txt"
    assert stat.S_IMODE((run / "new" / "deeper" / "file.txt").stat().st_mode) == 0o600
    assert sorted(p.name for p in (run / "new" / "deeper").iterdir()) == ["file.txt"]  # no temporary left
    untouched(outside)


def test_read_beneath_refuses_links_out_pipes_and_oversized_files(run, outside):
    (run / "secret").symlink_to(outside["secret"])
    (run / "up").symlink_to(outside["folder"].parent)
    os.mkfifo(run / "pipe")
    (run / "big").write_bytes(b"x" * 100)
    with pytest.raises(EnvironmentFailure, match="leads outside the run folder"):
        read_beneath(run, "secret", 1000)
    with pytest.raises(EnvironmentFailure, match="leads outside the run folder"):
        read_beneath(run, "up/secret", 1000)
    with pytest.raises(EnvironmentFailure, match=r"'pipe' is a named pipe \(FIFO\)"):
        finishes(lambda: read_beneath(run, "pipe", 1000))
    with pytest.raises(EnvironmentFailure, match="'big' is 100 bytes, over the limit of 99"):
        read_beneath(run, "big", 99)
    assert read_beneath(run, "big", 100) == b"x" * 100
    assert read_beneath(run, "missing", 10) is None


# -- the tool maker's check folders ------------------------------------------------------------------
def test_a_sandbox_within_a_run_folder_is_never_made_through_a_planted_link(run, outside):
    """The tool maker's check sandboxes live in runs/<id>/toolmaker/, where the run's other sandboxes
    write: a link there must not become the check sandbox's writable folder (bound, chowned)."""
    from tea_notebook.envs.sandbox import PythonSandbox

    (run / "toolmaker").symlink_to(outside["folder"])
    sb = PythonSandbox(run / "toolmaker" / "count-0", within=run, isolation="process", timeout=5)
    try:
        with pytest.raises(EnvironmentFailure, match="'toolmaker/count-0' refused: it leads outside the run folder"):
            sb._spawn()
    finally:
        sb.kill()
    untouched(outside)
    with pytest.raises(ValueError, match="is not inside within="):
        PythonSandbox(outside["folder"], within=run)


def test_bubblewrap_binds_the_folder_the_host_checked_not_what_its_path_leads_to_later(bwrap, run, outside):
    """Swap the run folder's path for a link to a host folder between the host's check and bwrap's
    mount: the sandbox still gets the folder that was checked (bound by descriptor)."""
    from tea_notebook.envs.sandbox import PythonSandbox

    decoy = outside["folder"] / "count-0" / "sandbox" / ".tmp"  # what the link must lead to, ready
    decoy.mkdir(parents=True)
    sb = PythonSandbox(run / "toolmaker" / "count-0", within=run, **SANDBOX_OPTIONS)
    prepare = sb._prepare_folders
    moved = run / "toolmaker-moved"

    def prepare_then_swap(uid: Any, gid: Any) -> int:
        fd = prepare(uid, gid)
        (run / "toolmaker").rename(moved)
        (run / "toolmaker").symlink_to(outside["folder"])
        return fd

    sb._prepare_folders = prepare_then_swap  # type: ignore[method-assign]
    from tea_notebook.envs import boundary
    from tea_notebook.envs.base import EnvironmentFailure

    if boundary.unprivileged_host() is not None:
        # root starts the sandbox as nobody: its binds are staged by path, then checked against the
        # descriptor the host opened; a folder swapped meanwhile is refused, never bound
        try:
            with pytest.raises(EnvironmentFailure, match="no longer the one the host checked"):
                sb.exec_sync("open('made-inside.txt', 'w').write('hello')")
        finally:
            sb.kill()
        assert not (moved / "count-0" / "sandbox" / "made-inside.txt").exists()
        assert [p for p in outside["folder"].rglob("*") if p.is_file()] == []
        return
    try:
        result = sb.exec_sync("open('made-inside.txt', 'w').write('hello')")
        assert result.error is None, result.text()
        assert sb.disk_usage()[1] >= 3  # counted in the folder it has, not through the link
    finally:
        sb.kill()
    assert (moved / "count-0" / "sandbox" / "made-inside.txt").read_text() == "hello"
    # bound by path, bwrap would have followed the link and the file would be here
    assert [p for p in outside["folder"].rglob("*") if p.is_file()] == []


def test_the_tool_maker_refuses_a_check_folder_behind_a_planted_link(ws, outside):
    from test_toolmaker import TASK, scripted

    def plant_at_start(event: Any) -> None:  # what the run's own sandbox could do at any moment
        link = ws.path / "runs" / event.run_id / "toolmaker"
        if event.type == "run_started" and not os.path.lexists(link):
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(outside["folder"])

    ws.events.subscribe(plant_at_start)
    creation = ws.tools.create(TASK, model=scripted().name)
    assert creation.status == "discarded", creation.summary()
    assert "the check folder cannot be prepared" in creation.summary()
    assert "leads outside the run folder" in creation.summary()
    untouched(outside)


# -- document conversions and exports -------------------------------------------------------------------
def test_a_documents_copy_replaces_a_link_left_at_its_name(ws, tmp_path, outside):
    from tea_notebook.envs.documents import DocumentConverter

    data = b"# Tea\n\nGreen tea has less caffeine than black tea.\n"
    source = tmp_path / "notes.md"
    source.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    session = ws.envs.manager.folder("interactive")  # where conversions outside runs happen
    plant(session, f"documents/{sha[:16]}/notes.md", "link", outside)
    converter = DocumentConverter(ws, timeout=60)
    conversion = asyncio.run(converter.convert(source))
    assert "less caffeine" in conversion.markdown
    copy = session / "documents" / sha[:16] / "notes.md"
    assert copy.is_file() and not copy.is_symlink() and copy.read_bytes() == data
    untouched(outside)


def test_training_data_export_into_a_run_folder_never_follows_a_planted_link(ws, outside):
    from tea_notebook.agents.training_data import export_training_data

    run = ws.path / "runs" / "r-export"
    run.mkdir(parents=True)
    (run / "exports").symlink_to(outside["folder"])
    with pytest.raises(TeaError, match="leads outside"):
        export_training_data(ws, [], run / "exports" / "train.jsonl")
    (run / "train.jsonl").symlink_to(outside["victim"])
    with pytest.raises(FileExistsError):
        export_training_data(ws, [], run / "train.jsonl")
    export_training_data(ws, [], run / "train.jsonl", overwrite=True)
    assert (run / "train.jsonl").is_file() and not (run / "train.jsonl").is_symlink()
    assert stat.S_IMODE((run / "train.jsonl").stat().st_mode) == 0o600  # like the export outside run folders
    export_training_data(ws, [], ws.path / "runs" / "r-new" / "exports" / "train.jsonl")  # folders made
    assert (ws.path / "runs" / "r-new" / "exports" / "train.jsonl").read_text() == ""
    untouched(outside)


# -- end to end: a scripted model whose sandboxed code plants, as root and as a user ---------------------
def run_as(host: Host, config: dict[str, Any]) -> dict[str, Any]:
    """``host_writers_host.py`` as the host user; its report."""
    return host.run_script(HOST_SCRIPT, config, timeout=180)


ATTACKS = {
    # the reported attack: a link at ../todo.md to a file a shell sources, then `todo add`
    "overwrite": ("os.symlink(VICTIM, '../todo.md')", [{"action": "add", "steps": [{"description": "boil water"}]}]),
    # a link to a file only the host user can read, then `todo list` and the run's view
    "disclose": ("os.symlink(SECRET, '../todo.md')", [{"action": "list"}]),
    # a named pipe where todo.md belongs: the host must not hang on it
    "pipe": ("os.mkfifo('../todo.md')", [{"action": "add", "steps": [{"description": "boil water"}]}]),
}


def test_a_scripted_models_planted_todo_md_never_reaches_a_host_file(host):
    # a start-up file and a private key of the host user, private to it (names of this test's own:
    # other tests share the unprivileged user's home)
    tag = uuid.uuid4().hex[:8]
    victim, secret = host.home / f".profile-{tag}", host.home / f".key-{tag}"
    victim.write_text(VICTIM)
    secret.write_text(f"-----BEGIN KEY-----\n{SECRET}-{tag}\n-----END KEY-----\n")
    for path in (victim, secret):
        path.chmod(0o600)
        if os.geteuid() == 0:
            os.chown(path, host.uid, host.gid)
    before = {path: (path.read_bytes(), path.stat()) for path in (victim, secret)}
    prelude = f"import os\nVICTIM = {str(victim)!r}\nSECRET = {str(secret)!r}\n"
    attacks = {
        name: {"ws": str(host.home / f"ws-{name}"), "plant": f"{prelude}{code}\n'planted'", "actions": actions}
        for name, (code, actions) in ATTACKS.items()
    }
    try:
        runs = run_as(host, {"attacks": attacks})["runs"]
        for path, (data, st) in before.items():
            now = path.stat()
            assert path.read_bytes() == data, f"as {host.kind}: {path} was written through a planted todo.md"
            assert (now.st_mode, now.st_uid, now.st_ino) == (st.st_mode, st.st_uid, st.st_ino)
        key_text = before[secret][0].decode().strip().splitlines()[1]
        for attack, report in runs.items():
            assert report["status"] == "success", (attack, report["observations"])
            assert report["observations"][0] == "value: 'planted'", (attack, report["observations"][0])
            for where in ("observations", "prompts", "payload", "bundle"):
                assert key_text not in json.dumps(report[where]), f"as {host.kind}: {attack} put the key in the {where}"
            if attack == "disclose":
                assert "todo.md cannot be read" in report["observations"][1]
                assert "leads outside the run folder" in report["observations"][1]
                assert report["todo_kind"] == stat.S_IFLNK  # left as it was: nothing wrote there
            else:  # the write landed in the run folder, replacing what was planted
                assert report["todo_kind"] == stat.S_IFREG, attack
                assert report["todo_text"] == "# Todo\n\n- [ ] 1. boil water (priority: medium)\n", attack
    finally:
        for attack in attacks.values():
            subprocess.run(["rm", "-rf", attack["ws"]], check=False)
        for path in (victim, secret):
            path.unlink(missing_ok=True)


# -- finding 6: no set-id file from inside ---------------------------------------------------------
SET_ID = (
    r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
"""
    + ATTEMPT
    + r"""
def raw(name, number, *args):
    # the system call itself, as a C program (or a static binary) would make it
    ctypes.set_errno(0)
    fd = libc.syscall(number, *args)
    out[name] = "ok" if fd >= 0 else os.strerror(ctypes.get_errno())
    if fd >= 0 and name.startswith(("open", "creat")):
        os.close(fd)

class OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

how = OpenHow(os.O_WRONLY | os.O_CREAT, 0o4755, 0)
attempt("os.open O_CREAT 4755", lambda: os.close(os.open("id-open", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o4755)))
attempt("os.mknod 104755", lambda: os.mknod("id-mknod", 0o104755))
attempt("os.mknod set-gid", lambda: os.mknod("id-mknod-g", 0o102755))
raw("open(2)", 2, b"id-open2", os.O_WRONLY | os.O_CREAT, 0o6755)
raw("creat(85)", 85, b"id-creat", 0o4755)
raw("mknod(133)", 133, b"id-mknod2", 0o104755, 0)
raw("mknodat(259)", 259, -100, b"id-mknodat", 0o106755, 0)
raw("openat(257) O_TMPFILE", 257, -100, b".", os.O_TMPFILE | os.O_WRONLY, 0o4755)
raw("openat2(437)", 437, -100, b"id-openat2", ctypes.byref(how), ctypes.sizeof(how))
attempt("device node", lambda: os.mknod("id-null", 0o20666, os.makedev(1, 3)))  # no CAP_MKNOD, no filter
# file capabilities (CAP_SETUID, permitted and effective) would do what set-uid does: no CAP_SETFCAP
open("id-caps", "w").close()
caps = (0x02000001).to_bytes(4, "little") + (1 << 7).to_bytes(4, "little") + bytes(12)
attempt("file capabilities", lambda: os.setxattr("id-caps", "security.capability", caps))
# what programs do every day still works
attempt("mkdir 6777", lambda: os.mkdir("id-folder", 0o6777))  # Linux keeps no set-id bit of mkdir's mode
attempt("plain create", lambda: os.close(os.open("plain", os.O_WRONLY | os.O_CREAT, 0o755)))
raw("open(2) no O_CREAT, junk mode", 2, b"plain", os.O_RDONLY, 0o4755)
attempt("mkfifo", lambda: os.mkfifo("fifo"))
json.dumps(out)
"""
)
REFUSED = {"Operation not permitted"}


def test_no_set_id_file_can_be_created_from_inside(host):
    """Seen from a root host a file made inside is root-owned: a set-uid one would make any local
    user who reaches the run folder root (the bind mount is nosuid inside, the host's disk is not)."""
    folder = host.run_folder()
    report = host.run([{"code": SET_ID}], folder=folder)
    [result] = report["results"]
    assert result["error"] is None, result["text"]
    out = report_of(result["value"])
    left = {}
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            st = os.lstat(os.path.join(top, name))
            if st.st_mode & 0o6000:
                left[os.path.join(top, name)] = (oct(st.st_mode), st.st_uid)
    assert left == {}, f"as {host.kind}: set-id files left for the host (mode, owner uid): {left}"
    creating = [k for k in out if k.startswith(("os.", "creat", "mknod", "openat(257)")) or k == "open(2)"]
    assert len(creating) == 8 and {k: out[k] for k in creating if out[k] not in REFUSED} == {}, out
    assert out["openat2(437)"] == "Function not implemented", out  # ENOSYS: callers fall back to openat
    assert out["device node"] == "Operation not permitted", out
    assert out["file capabilities"] == "Operation not permitted", out
    with pytest.raises(OSError):  # no capability left on the host either
        os.getxattr(folder / "sandbox" / "id-caps", "security.capability")
    everyday = ("mkdir 6777", "plain create", "open(2) no O_CREAT, junk mode", "mkfifo")
    assert {k: out[k] for k in everyday} == dict.fromkeys(everyday, "ok"), out
    assert stat.S_ISFIFO(os.lstat(folder / "sandbox" / "fifo").st_mode)
    assert not os.path.lexists(folder / "sandbox" / "id-null")
