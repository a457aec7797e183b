"""A workspace has one memory store, made on first use, so what it keeps between a run's folds (the
number of the run's next record) is kept: a fold no longer lists every memory record of every
earlier run to number its own. Another workspace object on the folder, one reopened after close or
with another embedder, has its own store over the same records."""

from __future__ import annotations

import pytest

import tea_notebook
from tea_notebook.errors import WorkspaceSettingChanged
from tea_notebook.protocol.records import MemoryRecord


def test_the_store_is_made_once_and_numbers_a_runs_folds_without_listing_the_registry(tmp_path):
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    ws.memory.register_many(
        [MemoryRecord(name=f"mem_old_{i}", description=f"summary {i}", kind="summary", run_id="old") for i in range(5)]
    )
    store = ws.memory_store
    assert ws.memory_store is store
    listed: list[int] = []
    names = ws.memory.names

    def counting_names() -> list[str]:
        listed.append(1)
        return names()

    ws.memory.names = counting_names  # type: ignore[method-assign]
    for fold in range(4):
        store.keep("r1", "boil water", f"fold {fold} of the kettle", [f"insight {fold}"] if fold % 2 else [])
    assert listed == [1]  # the run's first fold looked for earlier records of the run, once
    kept = sorted(n for n in names() if n.startswith("mem_r1_"))
    assert kept == [f"mem_r1_{i}" for i in range(6)]  # numbered on, none replaced
    assert [ws.memory.get(f"mem_r1_{i}").description for i in (0, 1, 2)] == [
        "fold 0 of the kettle",
        "fold 1 of the kettle",
        "insight 1",
    ]
    store.embed_kept()
    ws.close()
    assert store.recall("the kettle", min_score=0.0)  # the store of a closed workspace still answers


def test_other_workspace_objects_have_their_own_store_over_the_same_records(tmp_path):
    one = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    one.memory_store.save("r1", "boil water", "Filled the kettle and boiled the water.", [])
    with pytest.warns(WorkspaceSettingChanged):  # another embedder for this folder from now on
        two = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing:512")
    try:
        assert two.memory_store is not one.memory_store
        assert two.memory_store.registry is two.memory and two.embedder.id != one.embedder.id
        assert two.memory_store.recall("boil the kettle water", min_score=0.0) == [
            "(earlier run) Filled the kettle and boiled the water."
        ]
    finally:
        one.close()
        two.close()
    again = tea_notebook.Workspace(tmp_path / "ws")
    try:
        assert again.memory_store.recall("boil the kettle water", min_score=0.0)
    finally:
        again.close()
