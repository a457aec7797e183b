"""Memory recall costs one query embedding: each summary and insight is embedded once, when it is
saved, and its vector kept in the workspace; summaries kept before that are embedded once, lazily.

The embedder is a real one (hashing) that writes down every text it is asked to embed."""

from __future__ import annotations

import threading

import numpy as np

import tea_notebook
from tea_notebook.errors import EmbeddingError
from tea_notebook.models.embedders import HashingEmbedder
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.protocol.records import MemoryRecord
from tea_notebook.store.vectors import VectorIndex


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, noting each text it embeds; ``failing`` makes it raise instead."""

    def __init__(self) -> None:
        super().__init__(256)
        self.texts: list[str] = []
        self.failing = False

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed (and note) the texts, or fail like an embedder whose service is down."""
        if self.failing:
            raise EmbeddingError("the embedding service is down")
        self.texts += texts
        return super().embed(texts)


def open_ws(path) -> tuple[tea_notebook.Workspace, CountingEmbedder]:
    embedder = CountingEmbedder()
    return tea_notebook.Workspace(path, embedder=embedder), embedder


def test_saving_embeds_the_texts_once_and_recall_embeds_only_its_query(tmp_path):
    ws, emb = open_ws(tmp_path)
    ws.memory_store.save("r1", "boil water", "Filled the kettle and boiled the water.", ["A kettle needs water."])
    assert {"Filled the kettle and boiled the water.", "A kettle needs water.", "boil water"} <= set(emb.texts)
    emb.texts.clear()
    assert ws.memory_store.recall("boil some water in the kettle", min_score=0.0)
    assert emb.texts == ["boil some water in the kettle"]
    ws.close()

    again, emb2 = open_ws(tmp_path)  # another kernel: the vectors are kept in the workspace
    assert again.memory_store.recall("boil the kettle water", min_score=0.0)
    assert emb2.texts == ["boil the kettle water"]
    again.close()


def test_memory_kept_before_the_change_is_embedded_once_lazily(tmp_path):
    ws, emb = open_ws(tmp_path)
    # what save() stored before: the records alone, no vectors
    ws.memory.register_many(
        [
            MemoryRecord(name=f"mem_old_{i}", description=f"old summary {i} of the water", kind="summary", run_id="old")
            for i in range(3)
        ]
    )
    assert emb.texts == []
    ws.memory_store.recall("water", min_score=0.0)
    assert sorted(emb.texts) == sorted(["water"] + [f"old summary {i} of the water" for i in range(3)])
    emb.texts.clear()
    ws.memory_store.recall("the water again", min_score=0.0)
    assert emb.texts == ["the water again"]
    ws.close()
    again, emb2 = open_ws(tmp_path)
    again.memory_store.recall("water once more", min_score=0.0)
    assert emb2.texts == ["water once more"]
    again.close()


def test_a_save_whose_embedding_fails_keeps_the_memory_and_recall_embeds_it_later(tmp_path):
    ws, emb = open_ws(tmp_path)
    emb.failing = True
    ws.memory_store.save("r1", "boil water", "Filled the kettle.", [])  # no error: the fold is kept
    assert "mem_r1_0" in ws.memory
    emb.failing = False
    hits = ws.memory_store.recall("fill the kettle", min_score=0.0)
    assert hits == ["(earlier run) Filled the kettle."]
    assert sorted(emb.texts) == sorted(["fill the kettle", "Filled the kettle.", "boil water"])
    ws.close()


def test_a_run_after_a_long_one_embeds_only_its_task(tmp_path):
    ws, emb = open_ws(tmp_path)

    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}: " + "recorded; " * 40

    ws.tools.tool(lookup)
    agent = ws.agent("long", tools=["lookup"], max_steps=30, memory_budget=400, keep_recent_steps=2)
    script = ScriptedModel([call("lookup", key=f"k{i}") for i in range(25)] + [call("done", success=True, text="ok")])
    assert agent.run_sync("look up every key", model=script.name).status == "success"
    assert len(ws.memory) >= 3  # the run folded its steps into memory
    emb.texts.clear()
    short = ws.agent("short", tools=["lookup"], max_steps=3)
    script = ScriptedModel([call("lookup", key="k1"), call("done", success=True, text="ok")])
    result = short.run_sync("look up key k1", model=script.name)
    assert result.status == "success"
    assert emb.texts == ["look up key k1"]  # the recall's query, nothing of the long run's memory
    ws.close()


def test_a_search_from_another_thread_uses_one_openmp_thread():
    import faiss

    index = VectorIndex(8)
    vectors = np.eye(8, dtype=np.float32)
    index.rebuild(np.arange(8), vectors)
    index.search(vectors[0], 3)  # this thread first
    seen: list[int] = []

    def other() -> None:
        ids, _ = index.search(vectors[1], 3)
        assert ids[0] == 1
        seen.append(faiss.omp_get_max_threads())

    worker = threading.Thread(target=other)
    worker.start()
    worker.join()
    assert seen == [1]  # set in that thread too (a team of threads made a 9-vector search take ~7 ms)
