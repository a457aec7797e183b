"""A fork at step N finds the run folder as it was after step N (issue 28): files written later are
absent, files deleted later are back; contents are kept once by sha256; links are never followed."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from tea_notebook.models.offline import ScriptedModel, call  # noqa: E402


def current_folder(ws) -> Path:
    """The folder of the run going on now (the newest run)."""
    folder = ws.path / "runs" / ws.db.runs(1, parent_id=None)[0]["id"]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def file_tools(ws, outside: Path):
    @ws.tools.tool
    def put(name: str, text: str) -> str:
        """Write a file in the run folder.

        Args:
            name: the file's name.
            text: what it holds.
        """
        (current_folder(ws) / name).write_text(text)
        return f"wrote {name}"

    @ws.tools.tool
    def drop(name: str) -> str:
        """Delete a file in the run folder.

        Args:
            name: the file's name.
        """
        (current_folder(ws) / name).unlink()
        return f"deleted {name}"

    @ws.tools.tool
    def plant(name: str) -> str:
        """Plant a link in the run folder to a file outside it.

        Args:
            name: the link's name.
        """
        (current_folder(ws) / name).symlink_to(outside)
        return f"linked {name}"


def original(ws, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("outside")
    file_tools(ws, outside)
    script = ScriptedModel(
        [
            call("put", name="a.txt", text="A"),
            call("plant", name="link"),
            call("put", name="b.txt", text="B"),
            call("drop", name="a.txt"),
            call("done", success=True, text="ok"),
        ]
    )
    return ws.agent("filer", model=script.name, tools=["put", "drop", "plant"]).run_sync("files")


def fork_folder(ws, run_id: str, step: int) -> Path:
    script = ScriptedModel([call("done", success=True, text="forked")])
    result = ws.fork(run_id, step=step, model=script.name)
    if hasattr(result, "__await__"):
        from tea_notebook._sync import run_sync

        result = run_sync(result)
    return ws.path / "runs" / result.run_id


def names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.is_file() or p.is_symlink()}


def test_a_fork_finds_the_folder_as_it_was_after_its_step(ws, tmp_path):
    run = original(ws, tmp_path)
    assert names(ws.path / "runs" / run.run_id) == {"b.txt", "link"}
    at2 = fork_folder(ws, run.run_id, 2)
    assert "a.txt" in names(at2) and "b.txt" not in names(at2)
    assert (at2 / "a.txt").read_text() == "A"
    at3 = fork_folder(ws, run.run_id, 3)
    assert {"a.txt", "b.txt"} <= names(at3)
    at4 = fork_folder(ws, run.run_id, 4)
    assert "b.txt" in names(at4) and "a.txt" not in names(at4)
    for folder in (at2, at3, at4):  # the planted link is neither followed nor restored
        assert not (folder / "link").exists() and not (folder / "link").is_symlink()


def test_contents_are_kept_once_and_links_are_not_read(ws, tmp_path):
    run = original(ws, tmp_path)
    kept = ws.db._read("SELECT data FROM file_blobs")
    assert sorted(bytes(d) for (d,) in kept) == [b"A", b"B"]
    steps = [e for e in ws.events.events(run.run_id, nested=False) if e.type == "step"]
    changes = [e.data.get("folder") for e in steps]
    assert changes[1] == {"link": "!link"}
    assert changes[3] == {"a.txt": None}
    assert all(b"outside" not in bytes(d) for (d,) in kept)


def test_a_resume_starts_from_the_folder_of_its_last_finished_step(ws, tmp_path):
    """Stopped as step 3 (delete a.txt) was chosen: the resumed run's own folder holds a.txt and b.txt
    again, so the delete it takes up succeeds there."""
    file_tools(ws, tmp_path / "unused")
    ctx = ws.context()

    def writer(messages, tools):
        step = len(asked) + 1
        asked.append(step)
        if step == 1:
            return call("put", name="a.txt", text="A")
        if step == 2:
            return call("put", name="b.txt", text="B")
        if step == 3:
            ctx.cancel.set()
            return call("drop", name="a.txt")
        return call("done", success=True, text="resumed")

    asked: list[int] = []
    model = ScriptedModel(writer)
    stopped = ws.agent("writer", model=model.name, tools=["put", "drop", "plant"]).run_sync("w", context=ctx)
    assert stopped.status == "interrupted"
    from tea_notebook._sync import run_sync

    resumed = run_sync(ws.resume(stopped.run_id))
    folder = ws.path / "runs" / resumed.run_id
    assert resumed.success and (folder / "b.txt").read_text() == "B" and not (folder / "a.txt").exists()
    assert [a["observation"] for a in resumed.trajectory.steps[2].actions] == ["deleted a.txt"]


def test_a_fork_of_a_fork_finds_its_source_files(ws, tmp_path):
    run = original(ws, tmp_path)
    first = ws.path / "runs" / run.run_id
    at3 = fork_folder(ws, run.run_id, 3)
    again = fork_folder(ws, at3.name, 2)
    assert "a.txt" in names(again) and "b.txt" not in names(again)
    assert names(first) == {"b.txt", "link"}  # the source's own folder is left as it is


def moved(ws, tmp_path, run_id: str, change=None):
    """The run tree of ``run_id`` exported from ``ws`` (changed by ``change``) and a fresh workspace
    to import it into."""
    import tea_notebook

    ws.events.flush()
    tree = ws.db.export_run_tree(run_id)
    if change is not None:
        change(tree)
    return tree, tea_notebook.Workspace(tmp_path / "elsewhere", embedder="hashing")


def test_a_run_tree_imported_elsewhere_carries_its_folder_and_a_fork_there_restores_it(ws, tmp_path):
    run = original(ws, tmp_path)
    tree, other = moved(ws, tmp_path, run.run_id)
    try:
        assert tree["version"] == 2 and sorted(bytes(d) for _, d in tree["file_blobs"]) == [b"A", b"B"]
        assert other.db.import_run_tree(tree) == 1
        file_tools(other, tmp_path / "secret.txt")
        other.agent("filer", model=ScriptedModel([]).name, tools=["put", "drop", "plant"])
        at2 = fork_folder(other, run.run_id, 2)
        assert (at2 / "a.txt").read_text() == "A" and not (at2 / "b.txt").exists()
        at4 = fork_folder(other, run.run_id, 4)
        assert (at4 / "b.txt").read_text() == "B" and not (at4 / "a.txt").exists()
    finally:
        other.close()


def test_only_the_files_the_trees_steps_name_travel(ws, tmp_path):
    original(ws, tmp_path)
    ws.db.put_file_blobs({__import__("hashlib").sha256(b"other run").hexdigest(): b"other run"})
    file_tools(ws, tmp_path / "unused")
    second = ws.agent(
        "one", model=ScriptedModel([call("put", name="c.txt", text="C"), call("done", success=True, text="ok")]).name
    ).run_sync("one file")
    tree, other = moved(ws, tmp_path, second.run_id)
    other.close()
    assert [bytes(d) for _, d in tree["file_blobs"]] == [b"C"]


def test_a_tree_exported_before_files_travelled_still_imports(ws, tmp_path):
    def as_version_1(tree):
        del tree["version"], tree["file_blobs"]

    run = original(ws, tmp_path)
    tree, other = moved(ws, tmp_path, run.run_id, as_version_1)
    try:
        assert other.db.import_run_tree(tree) == 1 and other.trajectory(run.run_id).answer == "ok"
        assert other.db._read("SELECT count(*) FROM file_blobs")[0][0] == 0
    finally:
        other.close()


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda t: t["file_blobs"].__setitem__(0, [t["file_blobs"][0][0], b"tampered"]), "is damaged: its content"),
        (lambda t: t["file_blobs"].pop(), r"names 1 run-folder file\(s\) it does not carry"),
        (lambda t: t.__setitem__("file_blobs", [["x", "not bytes"]]), r"file_blobs\[0\] of the run tree must be"),
        (lambda t: t.__setitem__("version", 3), "exported by a newer tea_notebook"),
        (lambda t: t.__setitem__("version", "2"), "version must be a whole number"),
    ],
)
def test_a_damaged_or_incomplete_tree_is_refused_and_nothing_imported(ws, tmp_path, damage, words):
    from tea_notebook.errors import WorkspaceError

    run = original(ws, tmp_path)
    tree, other = moved(ws, tmp_path, run.run_id, damage)
    try:
        with pytest.raises(WorkspaceError, match=words):
            other.db.import_run_tree(tree)
        counts = [other.db._read(f"SELECT count(*) FROM {t}")[0][0] for t in ("runs", "events", "file_blobs")]
        assert counts == [0, 0, 0]
    finally:
        other.close()


def test_a_run_imported_without_its_files_exports_again_saying_so(ws, tmp_path):
    import tea_notebook

    def as_version_1(tree):
        del tree["version"], tree["file_blobs"], tree["missing_files"]

    run = original(ws, tmp_path)
    tree, middle = moved(ws, tmp_path, run.run_id, as_version_1)
    last = tea_notebook.Workspace(tmp_path / "last", embedder="hashing")
    try:
        middle.db.import_run_tree(tree)
        again = middle.db.export_run_tree(run.run_id)
        assert again["file_blobs"] == [] and len(again["missing_files"]) == 2
        assert last.db.import_run_tree(again) == 1  # what it says it lacks is no damage
    finally:
        middle.close()
        last.close()
