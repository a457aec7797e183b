"""Hybrid retrieval: BM25 keyword scores fused with embedding cosine similarity.

The keyword index lives in memory and is rebuilt from the database; the vector index is a faiss
file in the workspace (see ``store.vectors``). Both follow the database's change log.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Callable, Generic, TypeVar

from tea_notebook._lazy import LazyModule

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads with the first search or indexed document, not with the workspace
    np = LazyModule("numpy", globals(), "np")

_TOKEN = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an and are as at be by for from has have how i in into is it its me my of on or that the "
    "this to was what when where which who will with you your can do does please want need".split()
)


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens without stop words; snake_case and camelCase are split."""
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).replace("_", " ").lower()
    return [_stem(t) for t in _TOKEN.findall(text) if len(t) > 1 and t not in _STOP]


def _stem(token: str) -> str:
    """A light plural/verb-ending fold so 'files' matches 'file' and 'reads' matches 'read'."""
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


class KeywordIndex:
    """Okapi BM25 over integer document ids, updated one document at a time."""

    def __init__(self, k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        # term counts per document as plain dicts of str -> int, which the garbage collector does not
        # track (a Counter it does: 10,000 documents were ~10k objects every full collection walked)
        self._docs: dict[int, dict[str, int]] = {}
        self._postings: dict[str, dict[int, int]] = {}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        # a term's BM25 contributions, kept until the term's postings or the index's size change
        self._parts: dict[str, tuple[tuple[int, int], np.ndarray]] = {}
        # float32 lengths by id, allocated with the first document: until then an empty tuple stands in
        # (so that an empty index does not import numpy)
        self._lengths: np.ndarray = ()  # type: ignore[assignment]
        self._total = 0

    def __len__(self) -> int:
        return len(self._docs)

    def upsert(self, doc_id: int, text: str) -> None:
        """Index (or re-index) a document."""
        self.remove(doc_id)
        tf: dict[str, int] = {}
        for term in tokenize(text):
            tf[term] = tf.get(term, 0) + 1
        self._docs[doc_id] = tf
        for term, n in tf.items():
            self._postings.setdefault(term, {})[doc_id] = n
            self._arrays.pop(term, None)
            self._parts.pop(term, None)
        if doc_id >= len(self._lengths):
            grown = np.zeros(max(doc_id + 1, 2 * len(self._lengths), 1024), np.float32)
            grown[: len(self._lengths)] = self._lengths
            self._lengths = grown
        length = sum(tf.values())
        self._lengths[doc_id] = length
        self._total += length

    def remove(self, doc_id: int) -> None:
        """Forget a document (absent ids are ignored)."""
        tf = self._docs.pop(doc_id, None)
        if tf is None:
            return
        for term in tf:
            posting = self._postings.get(term)
            if posting is not None:
                posting.pop(doc_id, None)
                if not posting:
                    del self._postings[term]
            self._arrays.pop(term, None)
            self._parts.pop(term, None)
        self._total -= sum(tf.values())
        self._lengths[doc_id] = 0

    def _posting(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        cached = self._arrays.get(term)
        if cached is None:
            posting = self._postings.get(term)
            if not posting:
                return None
            ids = np.fromiter(posting.keys(), np.int64, len(posting))
            tfs = np.fromiter(posting.values(), np.float32, len(posting))
            cached = self._arrays[term] = (ids, tfs)
        return cached

    def search(self, query: str, k: int, allowed: set[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ``(ids, scores)`` for a query; only ids in ``allowed`` when given.

        Scores are BM25 divided by what a document of average length containing every query term
        once would score (the sum of the terms' idf), capped at 1: 1.0 means "matches all of the
        query", and a document sharing one incidental word with a long query scores low, whatever
        the other documents do.
        """
        n = len(self._docs)
        if n == 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        avg = self._total / n if self._total else 1.0
        acc_ids: list[np.ndarray] = []
        acc_scores: list[np.ndarray] = []
        ceiling = 0.0
        for term in set(tokenize(query)):
            posting = self._posting(term)
            df = 0 if posting is None else len(posting[0])
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            ceiling += idf
            if posting is None:
                continue
            ids, tfs = posting
            cached = self._parts.get(term)
            if cached is not None and cached[0] == (n, self._total):
                part = cached[1]
            else:
                lens = self._lengths[ids]
                part = idf * tfs * (self.k1 + 1) / (tfs + self.k1 * (1 - self.b + self.b * lens / avg))
                part = part.astype(np.float32)
                self._parts[term] = ((n, self._total), part)
            acc_ids.append(ids)
            acc_scores.append(part)
        if not acc_ids:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        all_ids = np.concatenate(acc_ids)
        all_scores = np.concatenate(acc_scores)
        # ids are small dense integers (entity ids): summing per id with bincount beats np.unique
        summed_all = np.bincount(all_ids, weights=all_scores, minlength=1)
        uniq = np.flatnonzero(summed_all != 0)  # on a boolean mask: several times faster than on floats
        summed = summed_all[uniq].astype(np.float32)
        if allowed is not None:
            keep = np.fromiter((i in allowed for i in uniq.tolist()), bool, len(uniq))
            uniq, summed = uniq[keep], summed[keep]
        if len(uniq) > k:
            top = np.argpartition(-summed, k)[:k]
            uniq, summed = uniq[top], summed[top]
        order = np.argsort(-summed, kind="stable")
        return uniq[order], np.minimum(summed[order] / max(ceiling, 1e-9), 1.0)


R = TypeVar("R")


class SearchHit(Generic[R]):
    """One search result with the parts of its score; ``record`` is loaded on first access."""

    __slots__ = ("name", "score", "semantic", "keyword", "_record", "_load")

    def __init__(
        self,
        name: str,
        score: float,
        semantic: float,
        keyword: float,
        record: R | None = None,
        load: Callable[[str], R] | None = None,
    ):
        self.name, self.score, self.semantic, self.keyword = name, score, semantic, keyword
        self._record, self._load = record, load

    @property
    def record(self) -> R:
        """The matching record (current version)."""
        if self._record is None and self._load is not None:
            self._record = self._load(self.name)
        assert self._record is not None  # a hit is made with its record or a way to load it
        return self._record

    def __repr__(self) -> str:
        return (
            f"SearchHit({self.name!r}, score={self.score:.3f}, "
            f"semantic={self.semantic:.3f}, keyword={self.keyword:.3f})"
        )


class Ranking:
    """The query-dependent part of a fused ranking, worked out once: cosine and normalised BM25
    combined per id (see :func:`fuse`), ordered. :meth:`top` then adds a usage prior and returns
    the best ids, touching only the head of the order and the ids that have a prior.

    An agent routing its tools asks the same query (its task) every step while only the usage
    prior moves: keeping this object per query makes a step's ranking cost independent of how
    many documents the query matched.
    """

    __slots__ = ("_rows", "_keys")

    def __init__(self, semantic: dict[int, float], keyword: dict[int, float], keyword_weight: float = 0.2):
        ids = set(semantic) | set(keyword)
        floor_sem = min(semantic.values(), default=0.0)
        rows: dict[int, tuple[float, float, float, int]] = {}
        for pos, i in enumerate(ids):  # ``pos``: the set's order, which breaks ties (as a stable sort of it would)
            sem = semantic.get(i, floor_sem)
            kw = keyword.get(i, 0.0)
            rows[i] = ((1 - keyword_weight) * sem + keyword_weight * kw, float(sem), float(kw), pos)
        self._rows = rows
        self._keys = sorted((-row[0], row[3], i) for i, row in rows.items())

    def __len__(self) -> int:
        return len(self._rows)

    def top(
        self, k: int | None = None, usage_prior: dict[int, float] | None = None
    ) -> list[tuple[int, float, float, float]]:
        """The ``k`` best (all when None) ``(id, score, cosine, keyword)``, score including the prior.

        Exactly what sorting every id by its score (prior added) would give, ties in the same
        order: the ids without a prior keep their relative order, so the best ``k`` of them are
        among the first ``k`` + (ids with a prior) of the stored order, and only those and the
        ids with a prior are compared.
        """
        rows = self._rows
        n = len(rows) if k is None else max(0, min(k, len(rows)))
        if n == 0:
            return []
        boosted: dict[int, float] = {}
        if usage_prior:
            for i, bonus in usage_prior.items():
                row = rows.get(i)
                if row is not None:
                    boosted[i] = float(row[0] + bonus)
        if boosted:
            pool = [key for key in self._keys[: n + len(boosted)] if key[2] not in boosted]
            pool.extend((-score, rows[i][3], i) for i, score in boosted.items())
            pool.sort()
        else:
            pool = self._keys
        out = []
        for neg, _pos, i in pool[:n]:
            row = rows[i]
            out.append((i, float(-neg), row[1], row[2]))
        return out


def fuse(
    semantic: dict[int, float],
    keyword: dict[int, float],
    usage_prior: dict[int, float] | None = None,
    keyword_weight: float = 0.2,
) -> list[tuple[int, float, float, float]]:
    """Combine cosine and normalised BM25 (both in [0, 1]-ish ranges) into one score per id:
    ``(id, score, cosine, keyword)``, best first.

    A candidate only the keyword side found gets the weakest retrieved cosine, not zero, so a
    strong keyword match is not sunk by a missing vector neighbour.
    """
    return Ranking(semantic, keyword, keyword_weight).top(None, usage_prior)
