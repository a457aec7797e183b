"""A fork at step N finds the run folder as it was after step N (issue 28): files written later are
absent, files deleted later are back; contents are kept once by sha256; links are never followed."""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

from pathlib import Path  # noqa: E402

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
