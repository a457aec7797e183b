"""A query is embedded once per embedder: the vectors of recent query texts are kept with the
workspace's embedder, so a routed agent's run embeds its task once for its memory recall and its
tool routing, and a cell run again embeds nothing. A routed run offers the same tool definition
objects step after step (one per stored version), so the stored context encodes each once.

The embedder is a real one (hashing) that writes down every text it is asked to embed."""

from __future__ import annotations

import numpy as np

import tea_notebook
from tea_notebook.models.embedders import HashingEmbedder, QueryVectors, query_vectors
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.protocol.records import ToolRecord


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, noting each text it embeds."""

    def __init__(self) -> None:
        super().__init__(256)
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed (and note) the texts."""
        self.texts += texts
        return super().embed(texts)


class UnhashableEmbedder(CountingEmbedder):
    """An embedder object that cannot be a dictionary key (it compares by value, with no hash)."""

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnhashableEmbedder)


def lookup(key: str) -> str:
    """Look a key up in the reference table."""
    return f"value of {key}"


def routed_workspace(path, embedder) -> tea_notebook.Workspace:  # noqa: ANN001
    """A workspace with more tools than a step offers (so routing searches) and one memory."""
    ws = tea_notebook.Workspace(path, embedder=embedder)
    ws.tools.tool(lookup)
    ws.tools.register_many(
        [
            ToolRecord(
                name=f"tool_{i}",
                description=f"Does thing number {i} with widgets",
                parameters={"type": "object", "properties": {"x": {"type": "string"}}},
            )
            for i in range(30)
        ]
    )
    ws.memory_store.save("old", "look things up", "Looked the key up in the reference table.", [])
    ws.tools.index()
    return ws


def run_routed(ws: tea_notebook.Workspace, task: str, steps: int = 3, seen: list | None = None) -> None:
    script = iter(range(steps + 2))

    def reply(messages: list[dict], tools: list[dict]) -> object:
        if seen is not None:
            seen.append(list(tools))
        return call("lookup", key="k") if next(script) < steps - 1 else call("done", success=True, text="ok")

    agent = ws.agent("router", max_steps=steps + 1)  # names no tools: every step routes by the task
    assert agent.run_sync(task, model=ScriptedModel(reply).name).status == "success"


def test_a_routed_run_with_memory_embeds_its_task_once(tmp_path):
    embedder = CountingEmbedder()
    ws = routed_workspace(tmp_path / "ws", embedder)
    embedder.texts.clear()
    run_routed(ws, "look up the key k in the reference table")
    assert embedder.texts.count("look up the key k in the reference table") == 1  # recall and routing share it
    embedder.texts.clear()
    run_routed(ws, "look up the key k in the reference table")  # the cell run again
    assert "look up the key k in the reference table" not in embedder.texts
    run_routed(ws, "a task never asked before")
    assert embedder.texts.count("a task never asked before") == 1
    ws.close()


def test_each_embedder_object_keeps_its_own_queries(tmp_path):
    one, two = CountingEmbedder(), CountingEmbedder()
    ws1 = tea_notebook.Workspace(tmp_path / "a", embedder=one)
    ws2 = tea_notebook.Workspace(tmp_path / "b", embedder=two)
    for ws in (ws1, ws2):
        ws.tools.tool(lookup)
        ws.tools.search("look a key up", k=1)
    assert one.texts.count("look a key up") == 1 and two.texts.count("look a key up") == 1
    assert query_vectors(one) is not query_vectors(two)
    ws1.close()
    ws2.close()


def test_the_cache_keeps_the_most_recently_used_queries():
    cache = QueryVectors(size=2)
    a, b, c = (np.full(3, v, np.float32) for v in (1, 2, 3))
    cache.put("a", a)
    cache.put("b", b)
    assert cache.get("a") is a  # now the most recent
    cache.put("c", c)
    assert "b" not in cache and cache.get("a") is a and cache.get("c") is c and len(cache) == 2


def test_an_embedder_that_cannot_be_a_key_embeds_every_query(tmp_path):
    embedder = UnhashableEmbedder()
    assert query_vectors(embedder) is None
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder=embedder)
    ws.tools.tool(lookup)
    first = ws.tools.search("look a key up", k=1)
    again = ws.tools.search("look a key up", k=1)
    assert [h.name for h in first] == [h.name for h in again] == ["lookup"]
    assert embedder.texts.count("look a key up") == 1  # the second search reused the ranking, not a vector
    ws.tools.similar("look a key up", k=1)
    assert embedder.texts.count("look a key up") == 2  # no cache of its query vectors
    ws.close()


def test_a_routed_run_offers_the_same_definition_of_a_tool_version_every_step(tmp_path):
    ws = routed_workspace(tmp_path / "ws", CountingEmbedder())
    seen: list[list[dict]] = []
    run_routed(ws, "look up the key k in the reference table", steps=4, seen=seen)
    assert len(seen) == 4
    first = {t["function"]["name"]: t for t in seen[0]}
    for tools in seen[1:]:
        for tool in tools:
            name = tool["function"]["name"]
            if name in first and name in ws.tools:
                assert tool is first[name]  # one object: its JSON is made once for the stored context
                assert tool == ws.tools.get(name).to_openai()
    ws.close()
