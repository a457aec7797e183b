"""The retrieval building blocks: tokenizer, BM25 index, score fusion and the faiss vector index."""

from __future__ import annotations

import numpy as np
import pytest

from tea_notebook.protocol.retrieval import KeywordIndex, fuse, tokenize
from tea_notebook.store.vectors import VectorIndex


def test_tokenize_splits_names_and_drops_noise():
    assert tokenize("readCsvFile read_csv_file") == ["read", "csv", "file", "read", "csv", "file"]
    assert tokenize("What's the weather in the cities?") == ["weather", "city"]
    assert tokenize("files reads classes") == ["file", "read", "classe"]


def test_bm25_normalises_against_the_whole_query():
    idx = KeywordIndex()
    idx.upsert(1, "convert currency amounts between currencies")
    idx.upsert(2, "crop an image to the right size")
    idx.upsert(3, "translate text")
    ids, scores = idx.search("convert currency", k=5)
    assert ids.tolist() == [1] and scores[0] == pytest.approx(1.0)
    # one incidental word of a long query: a small score, not the best possible one
    ids, scores = idx.search("how much is one apple share worth right now", k=5)
    assert ids.tolist() == [2] and 0 < scores[0] < 0.3


def test_bm25_update_remove_and_filter():
    idx = KeywordIndex()
    idx.upsert(1, "send an email")
    idx.upsert(2, "send a slack message")
    assert set(idx.search("send", 5)[0].tolist()) == {1, 2}
    assert idx.search("send", 5, allowed={2})[0].tolist() == [2]
    idx.upsert(1, "write a letter")  # re-index replaces the old text
    assert idx.search("email", 5)[0].tolist() == []
    idx.remove(2)
    assert idx.search("send", 5)[0].tolist() == [] and len(idx) == 1
    idx.remove(99)  # absent ids are ignored


def test_fuse_weights_and_floors():
    fused = fuse({1: 0.9, 2: 0.5}, {2: 1.0, 3: 0.8}, keyword_weight=0.2)
    by_id = {i: (score, sem, kw) for i, score, sem, kw in fused}
    assert by_id[1][0] == pytest.approx(0.8 * 0.9)
    assert by_id[2][0] == pytest.approx(0.8 * 0.5 + 0.2 * 1.0)
    # 3 was found by keywords only: it gets the weakest retrieved cosine, not zero
    assert by_id[3][1] == pytest.approx(0.5)
    assert [i for i, *_ in fused] == sorted(by_id, key=lambda i: -by_id[i][0])
    assert fuse({}, {}) == []


def _unit(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_flat_index_upsert_remove_and_allowed():
    vecs = _unit(50, 16, 0)
    index = VectorIndex(16)
    index.rebuild(np.arange(100, 150), vecs)
    ids, scores = index.search(vecs[7], 3)
    assert ids[0] == 107 and scores[0] == pytest.approx(1.0, abs=1e-5)
    index.upsert(np.array([107]), vecs[8:9])  # same id, new vector
    assert index.search(vecs[7], 1)[0][0] != 107 and len(index) == 50
    index.remove(np.array([108]))
    assert 108 not in index.search(vecs[8], 5)[0].tolist()
    ids, _ = index.search(vecs[3], 5, allowed={120, 121})
    assert set(ids.tolist()) == {120, 121}
    assert index.kind == "flat"


def test_ivf_past_threshold_still_finds_exact_neighbours(tmp_path):
    vecs = _unit(3000, 32, 1)
    index = VectorIndex(32, ivf_threshold=1000)
    index.rebuild(np.arange(3000), vecs)
    assert index.kind == "ivf"
    found = sum(index.search(vecs[i], 1)[0][0] == i for i in range(0, 3000, 30))
    assert found >= 95  # of 100 self-queries
    index.remove(np.array([0]))
    assert 0 not in index.search(vecs[0], 10)[0].tolist()
    ids, _ = index.search(vecs[5], 3, allowed={5, 6})
    assert ids[0] == 5
    index.seq = 42
    index.save(tmp_path / "v.faiss")
    loaded = VectorIndex.load(tmp_path / "v.faiss", 32, ivf_threshold=1000)
    assert loaded is not None and loaded.kind == "ivf" and loaded.seq == 42 and len(loaded) == 2999
    assert loaded.search(vecs[9], 1)[0][0] == 9


def test_saved_index_refuses_damage(tmp_path):
    index = VectorIndex(8)
    index.rebuild(np.arange(10), _unit(10, 8, 2))
    path = tmp_path / "v.faiss"
    index.save(path)
    assert VectorIndex.load(path, 8) is not None
    assert VectorIndex.load(path, 9) is None  # another dimension
    raw = bytearray(path.read_bytes())
    raw[-20] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert VectorIndex.load(path, 8) is None  # checksum mismatch
    assert VectorIndex.load(tmp_path / "missing.faiss", 8) is None
    assert list(tmp_path.glob("*.tmp")) == []
