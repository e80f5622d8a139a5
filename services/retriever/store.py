"""``VectorStore``: one small adapter over Qdrant Edge (embedded) and qdrant-client (server).

Both backends hold one collection of chunks with two named vectors:
- ``dense``: the embedder's unit vectors, cosine distance;
- ``sparse``: BM25-weighted term vectors (``sparse.py``) with Qdrant's IDF modifier.

Payload fields every chunk carries (indexed: ``tenant_id``, ``document_id``,
``position``): ``tenant_id`` (``"_public"`` for the shared corpus),
``document_id``, ``position`` (0-based chunk index in its document),
``content_hash`` and the display fields (``title``, ``locator``, ``text``...).

``hybrid_query`` runs ONE query: one dense prefetch per query vector (kb_search passes
two: the question as asked and its expansion) and a sparse prefetch, fused by RRF with
``k = settings.rrf_k`` (60; always explicit: qdrant-client's plain RRF uses k=2,
FIELD-NOTES). Each hit also carries its dense cosine similarity to the query
(``Hit.dense_score``, the best over the query vectors; from the returned dense
vectors, or on Edge from an id-filtered exact query), because the seed 000
thresholds apply to the dense cosine, never to the fused RRF score. Dense search
looks at a tenant's own chunks and the public corpus apart (``SearchFilter.dense_parts``).

Backends:
- ``EdgeVectorStore``: Qdrant Edge shard in ``settings.data_dir / "qdrant"``
  (default). One process at a time may open a shard (the WAL is locked): ingest
  while the retriever is stopped, or use a Qdrant server.
- ``ClientVectorStore``: qdrant-client against ``settings.qdrant_url``, or its
  local mode (``location=":memory:"`` or ``path=``; brute force, tests only).
"""

from __future__ import annotations

import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from conduit.runtime.settings import Settings
from services.retriever.sparse import SparseVec

DENSE = "dense"
SPARSE = "sparse"
PUBLIC_TENANT = "_public"
"""Tenant of the shared corpus (the law database): visible to every tenant."""
INDEXED_KEYWORDS = ("tenant_id", "document_id")
INDEXED_INTEGERS = ("position",)
DEFAULT_PREFETCH = 50
"""Candidates per prefetch branch before fusion (at least 4x the result limit)."""


class StoreError(RuntimeError):
    """The vector store cannot be opened or used (message names the store and the fix)."""


@dataclass
class ChunkPoint:
    """One chunk to store.

    Fields: ``id`` (UUID string, deterministic: see ``ingest.point_id``), ``dense``
    (float32 ``(dim,)`` unit vector), ``sparse``, ``payload`` (JSON-serialisable).
    """

    id: str
    dense: np.ndarray
    sparse: SparseVec
    payload: dict[str, Any]


@dataclass(frozen=True)
class SearchFilter:
    """Backend-neutral filter; ``None`` fields do not filter.

    ``tenant_ids``: chunk's tenant must be one of these (a search passes
    ``[request tenant, "_public"]``). ``document_ids``: restrict to these documents.
    """

    tenant_ids: tuple[str, ...] | None = None
    document_ids: tuple[str, ...] | None = None

    @classmethod
    def for_tenant(cls, tenant_id: str) -> "SearchFilter":
        """What a tenant may read: its own chunks and the public corpus."""
        return cls(tenant_ids=tuple(dict.fromkeys([tenant_id, PUBLIC_TENANT])))

    def dense_parts(self) -> list["SearchFilter"]:
        """The filter split for dense search: ``[own tenants, public corpus]`` when it spans the
        public corpus and other tenants, else ``[self]``.

        Why: the HNSW graph is dominated by the 38,795 public law chunks, and a tenant's few
        chunks (another language, another topic) sit on an island that graph search can miss:
        with law item chunks added, the USE dense top 10 of 「Nebula API rate limit per key」
        missed its tenant chunk (cosine 0.45; exact search ranks it first). Searched apart, a
        small tenant's chunks are scored exactly (Qdrant plans a filtered scan on the indexed
        ``tenant_id`` below its full-scan threshold), and both lists are re-ranked by cosine.
        """
        if not self.tenant_ids or PUBLIC_TENANT not in self.tenant_ids or len(self.tenant_ids) < 2:
            return [self]
        own = tuple(t for t in self.tenant_ids if t != PUBLIC_TENANT)
        return [SearchFilter(own, self.document_ids), SearchFilter((PUBLIC_TENANT,), self.document_ids)]


@dataclass
class Hit:
    """One search result.

    ``score``: the score of the query that found it (RRF fused score for
    ``hybrid_query``, cosine for ``dense_query``, BM25*IDF for ``sparse_query``).
    ``dense_score``: cosine similarity of the chunk's dense vector to the query
    vector in [-1, 1] (None for ``sparse_query``).
    """

    id: str
    score: float
    payload: dict[str, Any] = field(default_factory=dict)
    dense_score: float | None = None


def _cosines(queries_unit: np.ndarray, vectors: Sequence[Sequence[float] | None]) -> list[float | None]:
    """Best cosine of each stored vector (None stays None) to the unit query rows ``(m, dim)``,
    in one matrix product (per-hit numpy calls cost ~0.5 ms per search)."""
    present = [i for i, v in enumerate(vectors) if v is not None]
    out: list[float | None] = [None] * len(vectors)
    if present:
        matrix = np.asarray([vectors[i] for i in present], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1)
        norms[norms == 0] = 1.0
        best = (matrix @ queries_unit.T).max(axis=1) / norms
        for i, value in zip(present, best.tolist()):
            out[i] = value
    return out


def _units(dense: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """Query vector(s) as float32 unit rows ``(m, dim)`` (a single ``(dim,)`` vector gives m = 1)."""
    m = np.asarray(dense, dtype=np.float32)
    m = m.reshape(1, -1) if m.ndim == 1 else m
    n = np.linalg.norm(m, axis=1, keepdims=True)
    n[n == 0] = 1.0
    return m / n


class VectorStore(ABC):
    """Chunk storage and search; see the module docstring for the layout.

    Args (subclasses): ``dim`` is the dense vector size (checked against an
    existing collection: a mismatch raises ``StoreError``); ``rrf_k`` the RRF
    constant (``settings.rrf_k``).
    """

    def __init__(self, dim: int, rrf_k: int) -> None:
        self.dim = dim
        self.rrf_k = rrf_k
        self.rrf_weights: tuple[float, float] | None = None
        """(dense, sparse) RRF weights (the dense one applies to each dense branch); None = equal (plain RRF)."""
        self.exact = False
        """True: dense search scans every vector (exact) instead of the HNSW graph."""

    # ---- writes
    @abstractmethod
    def upsert(self, points: Sequence[ChunkPoint]) -> None:
        """Insert or replace ``points`` by id."""

    @abstractmethod
    def _delete(self, flt: Any) -> None: ...

    def delete_by_document(self, document_id: str, from_position: int = 0,
                           keep_ids: Sequence[str] | None = None) -> int:
        """Delete a document's chunks: those with ``position >= from_position`` and, when
        ``keep_ids`` is given, whose point id is not in ``keep_ids`` (a new version's ids:
        parent/child chunking changes ids when the split moves, so stale points are found by id).

        Returns how many chunks were deleted.
        """
        before = self.count(SearchFilter(document_ids=(document_id,)))
        if before:
            self._delete(self._native_filter(SearchFilter(document_ids=(document_id,)), min_position=from_position,
                                             exclude_ids=keep_ids))
        return before - self.count(SearchFilter(document_ids=(document_id,)))

    # ---- reads
    @abstractmethod
    def count(self, flt: SearchFilter | None = None) -> int:
        """Exact number of chunks matching ``flt`` (all chunks for None)."""

    @abstractmethod
    def payloads(self, ids: Sequence[str], keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Payload fields ``keys`` of the existing points among ``ids`` (missing ids absent)."""

    @abstractmethod
    def _query(self, *, dense: np.ndarray | None, sparse: SparseVec | None, flt: SearchFilter | None,
               limit: int, prefetch_limit: int, weights: Sequence[float] | None = None,
               with_vectors: bool = True) -> list[tuple[str, float, dict, Sequence[float] | None]]:
        """(id, score, payload, dense vector or None) rows. ``dense``: unit query rows ``(m, dim)``
        or None; one prefetch per row plus the sparse one, fused by RRF when there are two or more
        branches, with ``weights`` (one per branch, dense rows first) or None for plain RRF.
        ``with_vectors``: return the stored dense vectors (else None in their place)."""

    vectors_for_scores = True
    """True: ``_dense_cosines`` computes cosines from vectors returned by the query."""

    def _dense_cosines(self, queries_unit: np.ndarray,
                       rows: list[tuple[str, float, dict, Sequence[float] | None]]) -> list[float | None]:
        """Best cosine of each row's chunk to the unit query rows (from the returned vectors)."""
        return _cosines(queries_unit, [vec for *_, vec in rows])

    def branch_weights(self, dense_rows: int) -> list[float] | None:
        """RRF weights (``rrf_weights``: dense per dense branch, then sparse) for ``dense_rows`` dense
        branches and one sparse branch; None for plain RRF. Qdrant's weighted RRF rescales the
        position (``1 / ((pos + 1) / w + k - 1)``), so at k = 60 a weight of 2 changes a top
        hit's share by ~1 %: to count a list twice, give it twice (``hybrid_query``)."""
        if not self.rrf_weights:
            return None
        wd, ws = self.rrf_weights
        return [wd] * dense_rows + [ws]

    def hybrid_query(self, dense: np.ndarray | Sequence[np.ndarray], sparse: SparseVec,
                     flt: SearchFilter | None = None, limit: int = 10,
                     prefetch_limit: int | None = None) -> list[Hit]:
        """Dense + sparse prefetches fused by RRF(k=rrf_k) in one query call.

        ``dense``: one query vector ``(dim,)`` or several ``(m, dim)`` (one dense prefetch
        each, e.g. the question and its expansion); ``sparse``: query term vector (when it
        is empty, e.g. only stop words, only the dense branches are fused). ``prefetch_limit``:
        candidates per branch (default ``max(DEFAULT_PREFETCH, 4 * limit)``). The same vector
        given twice is searched twice and so counts twice in the fusion (kb_search does that
        for a question without expansion, keeping dense:sparse at 2:1).
        Returns up to ``limit`` hits in fused order, each with ``dense_score`` = the best
        cosine to any of the query vectors.
        """
        q = _units(dense)
        pl = prefetch_limit or max(DEFAULT_PREFETCH, 4 * limit)
        rows = self._query(dense=q, sparse=sparse if len(sparse) else None, flt=flt, limit=limit, prefetch_limit=pl,
                           weights=self.branch_weights(len(q)), with_vectors=self.vectors_for_scores)
        cosines = self._dense_cosines(q, rows)
        return [Hit(pid, score, payload, cos) for (pid, score, payload, _), cos in zip(rows, cosines)]

    def dense_query(self, dense: np.ndarray, flt: SearchFilter | None = None, limit: int = 10) -> list[Hit]:
        """Nearest chunks by dense cosine only (benchmarks); ``score == dense_score``."""
        q = _units(dense)[:1]
        rows = self._query(dense=q, sparse=None, flt=flt, limit=limit, prefetch_limit=limit,
                           with_vectors=self.vectors_for_scores)
        cosines = self._dense_cosines(q, rows)
        return [Hit(pid, score, payload, cos) for (pid, score, payload, _), cos in zip(rows, cosines)]

    def sparse_query(self, sparse: SparseVec, flt: SearchFilter | None = None, limit: int = 10) -> list[Hit]:
        """Best chunks by sparse BM25*IDF only (benchmarks); ``dense_score`` is None."""
        if not len(sparse):
            return []
        rows = self._query(dense=None, sparse=sparse, flt=flt, limit=limit, prefetch_limit=limit, with_vectors=False)
        return [Hit(pid, score, payload, None) for pid, score, payload, _ in rows]

    # ---- lifecycle
    def optimize(self) -> None:
        """Build indexes after a bulk load (no-op where the server does it)."""

    def flush(self) -> None:
        """Make written points durable (no-op where writes are synchronous)."""

    def close(self) -> None:
        """Release the store (flushes first)."""

    @abstractmethod
    def _native_filter(self, flt: SearchFilter | None, min_position: int = 0,
                       exclude_ids: Sequence[str] | None = None) -> Any:
        """Native filter for ``flt``, plus ``position >= min_position`` (when > 0) and
        "id not in ``exclude_ids``" (when given)."""

    def __enter__(self) -> "VectorStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ====================================================================== Qdrant Edge
class EdgeVectorStore(VectorStore):
    """Qdrant Edge shard at ``path`` (created on first open).

    Raises ``StoreError`` when the shard is locked by another process or was
    built with another dense dimension.
    """

    def __init__(self, path: Path, dim: int, rrf_k: int) -> None:
        super().__init__(dim, rrf_k)
        import qdrant_edge as qe  # noqa: PLC0415

        self._qe = qe
        self.path = Path(path)
        self._lock = threading.RLock()
        config = qe.EdgeConfig(
            vectors={DENSE: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)},
            sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        )
        exists = (self.path / "edge_config.json").exists()
        try:
            if exists:
                self._shard = qe.EdgeShard.load(str(self.path), config)
            else:
                self.path.mkdir(parents=True, exist_ok=True)
                self._shard = qe.EdgeShard.create(str(self.path), config)
                for name in INDEXED_KEYWORDS:
                    self._shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))
                for name in INDEXED_INTEGERS:
                    self._shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Integer))
        except Exception as exc:  # noqa: BLE001 - qdrant_edge raises plain Exception
            msg = str(exc)
            if "WouldBlock" in msg:
                hint = "another process has it open (stop the retriever before ingesting, or use a Qdrant server)"
            elif "ncompatible" in msg:
                hint = f"it was built with another embedding (dense size != {dim}); re-ingest into a fresh data dir"
            else:
                hint = "see the cause above"
            raise StoreError(f"cannot open Qdrant Edge shard {self.path}: {msg}; {hint}") from exc
        self._closed = False

    def _native_filter(self, flt: SearchFilter | None, min_position: int = 0,
                       exclude_ids: Sequence[str] | None = None) -> Any:
        qe = self._qe
        must: list[Any] = []
        if flt and flt.tenant_ids is not None:
            must.append(qe.FieldCondition("tenant_id", match=qe.MatchAny(list(flt.tenant_ids))))
        if flt and flt.document_ids is not None:
            must.append(qe.FieldCondition("document_id", match=qe.MatchAny(list(flt.document_ids))))
        if min_position > 0:
            must.append(qe.FieldCondition("position", range=qe.RangeFloat(gte=float(min_position))))
        must_not = [qe.HasIdCondition({uuid.UUID(i) for i in exclude_ids})] if exclude_ids else []
        if must_not:
            return qe.Filter(must=must, must_not=must_not)
        return qe.Filter(must=must) if must else None

    def upsert(self, points: Sequence[ChunkPoint]) -> None:
        qe = self._qe
        native = [
            qe.Point(
                id=uuid.UUID(p.id),
                vector={DENSE: np.asarray(p.dense, dtype=np.float32).tolist(),
                        SPARSE: qe.SparseVector(list(p.sparse.indices), list(p.sparse.values))},
                payload=p.payload,
            )
            for p in points
        ]
        if native:
            with self._lock:
                self._shard.update(qe.UpdateOperation.upsert_points(native))

    def _delete(self, flt: Any) -> None:
        with self._lock:
            self._shard.update(self._qe.UpdateOperation.delete_points_by_filter(flt))

    def count(self, flt: SearchFilter | None = None) -> int:
        with self._lock:
            return int(self._shard.count(self._qe.CountRequest(exact=True, filter=self._native_filter(flt))))

    def payloads(self, ids: Sequence[str], keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        with self._lock:
            records = self._shard.retrieve(
                [uuid.UUID(i) for i in ids], with_payload=self._qe.PayloadSelector.Include(list(keys)), with_vector=False
            )
        return {str(r.id): dict(r.payload or {}) for r in records}

    vectors_for_scores = False  # see _dense_cosines

    def _dense_cosines(self, queries_unit: np.ndarray, rows) -> list[float | None]:
        """Cosines by a second, id-filtered query per query vector (exact: Qdrant scans the few ids).

        Cheaper in process than returning the vectors: 18 hits x 512 floats as Python lists
        plus numpy cost ~0.9 ms per search, the id-filtered queries ~0.2 ms each (measured
        on the full corpus, bench/retrieval)."""
        if not rows:
            return []
        qe = self._qe
        ids = {uuid.UUID(pid) for pid, *_ in rows}
        flt = qe.Filter(must=[qe.HasIdCondition(ids)])
        best: dict[str, float] = {}
        for row in np.unique(queries_unit, axis=0):  # the same vector twice (no expansion) is scored once
            request = qe.QueryRequest(limit=len(ids), query=qe.Query.Nearest(row.tolist(), using=DENSE), filter=flt,
                                      params=qe.SearchParams(exact=True), with_payload=False, with_vector=False)
            with self._lock:
                points = self._shard.query(request)
            for p in points:
                key = str(p.id)
                best[key] = max(best.get(key, -1.0), float(p.score))
        return [best.get(pid) for pid, *_ in rows]

    def _query(self, *, dense, sparse, flt, limit, prefetch_limit, weights=None, with_vectors=True):
        qe = self._qe
        nf = self._native_filter(flt)
        exact = qe.SearchParams(exact=True) if self.exact else None
        parts = [self._native_filter(f) for f in (flt.dense_parts() if flt else [None])]

        def dense_branch(row: np.ndarray, n: int):
            near = qe.Query.Nearest(row.tolist(), using=DENSE)
            if len(parts) == 1:
                return qe.Prefetch(limit=n, query=near, filter=nf, params=exact)
            # own tenants and public corpus searched apart, then re-ranked together by cosine
            return qe.Prefetch(limit=n, query=near, prefetches=[
                qe.Prefetch(limit=n, query=near, filter=part, params=exact) for part in parts])

        branches = [dense_branch(row, prefetch_limit) for row in (dense if dense is not None else [])]
        if sparse is not None:
            branches.append(qe.Prefetch(limit=prefetch_limit, filter=nf, query=qe.Query.Nearest(
                qe.SparseVector(list(sparse.indices), list(sparse.values)), using=SPARSE)))
        else:
            weights = weights[:-1] if weights else None
        with_vector = [DENSE] if dense is not None and with_vectors else False
        if len(branches) >= 2:
            # the prefetches are filtered; the fusion only ranks their candidates, so no second filter
            request = qe.QueryRequest(
                limit=limit, prefetches=branches,
                query=qe.Fusion.Rrf(k=self.rrf_k, weights=list(weights) if weights else None),
                with_payload=True, with_vector=with_vector,
            )
        else:
            one = branches[0]
            if one.prefetches:
                request = qe.QueryRequest(limit=limit, query=one.query, prefetches=one.prefetches,
                                          with_payload=True, with_vector=with_vector)
            else:
                request = qe.QueryRequest(limit=limit, query=one.query, filter=nf, params=one.params,
                                          with_payload=True, with_vector=with_vector)
        with self._lock:
            points = self._shard.query(request)
        return [
            (str(p.id), float(p.score), dict(p.payload or {}), (p.vector or {}).get(DENSE) if isinstance(p.vector, dict) else None)
            for p in points
        ]

    def optimize(self) -> None:
        with self._lock:
            self._shard.optimize()

    def flush(self) -> None:
        with self._lock:
            if not self._closed:
                self._shard.flush()

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._shard.flush()
                self._shard.close()
                self._closed = True


# ====================================================================== qdrant-client
class ClientVectorStore(VectorStore):
    """A Qdrant collection through qdrant-client.

    Args:
        collection: collection name (``settings.qdrant_collection``), created if missing.
        url / api_key: a Qdrant server; or ``location=":memory:"`` / ``path=DIR`` for
            qdrant-client's local mode (brute force in Python: tests only).
    """

    def __init__(self, collection: str, dim: int, rrf_k: int, *, url: str | None = None, api_key: str | None = None,
                 location: str | None = None, path: str | Path | None = None) -> None:
        super().__init__(dim, rrf_k)
        from qdrant_client import QdrantClient, models  # noqa: PLC0415

        self._m = models
        self.collection = collection
        try:
            if url:
                self._client = QdrantClient(url=url, api_key=api_key)
            elif path is not None:
                self._client = QdrantClient(path=str(path))
            else:
                self._client = QdrantClient(location=location or ":memory:")
            if not self._client.collection_exists(collection):
                self._client.create_collection(
                    collection,
                    vectors_config={DENSE: models.VectorParams(size=dim, distance=models.Distance.COSINE)},
                    sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
                )
                if url:  # local mode has no payload indexes
                    for name in INDEXED_KEYWORDS:
                        self._client.create_payload_index(collection, name, models.PayloadSchemaType.KEYWORD)
                    for name in INDEXED_INTEGERS:
                        self._client.create_payload_index(collection, name, models.PayloadSchemaType.INTEGER)
            else:
                vectors = self._client.get_collection(collection).config.params.vectors
                size = vectors[DENSE].size if isinstance(vectors, dict) and DENSE in vectors else None
                if size != dim:
                    raise StoreError(
                        f"collection {collection!r} has dense size {size}, the embedder gives {dim}; "
                        "use another CONDUIT_QDRANT_COLLECTION or re-ingest"
                    )
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001
            where = url or path or location or ":memory:"
            raise StoreError(f"cannot open Qdrant collection {collection!r} at {where}: {type(exc).__name__}: {exc}") from exc

    def _native_filter(self, flt: SearchFilter | None, min_position: int = 0,
                       exclude_ids: Sequence[str] | None = None) -> Any:
        m = self._m
        must: list[Any] = []
        if flt and flt.tenant_ids is not None:
            must.append(m.FieldCondition(key="tenant_id", match=m.MatchAny(any=list(flt.tenant_ids))))
        if flt and flt.document_ids is not None:
            must.append(m.FieldCondition(key="document_id", match=m.MatchAny(any=list(flt.document_ids))))
        if min_position > 0:
            must.append(m.FieldCondition(key="position", range=m.Range(gte=min_position)))
        if exclude_ids:
            return m.Filter(must=must, must_not=[m.HasIdCondition(has_id=list(exclude_ids))])
        return m.Filter(must=must) if must else None

    def upsert(self, points: Sequence[ChunkPoint]) -> None:
        m = self._m
        if not points:
            return
        self._client.upsert(self.collection, wait=True, points=[
            m.PointStruct(
                id=p.id,
                vector={DENSE: np.asarray(p.dense, dtype=np.float32).tolist(),
                        SPARSE: m.SparseVector(indices=list(p.sparse.indices), values=list(p.sparse.values))},
                payload=p.payload,
            )
            for p in points
        ])

    def _delete(self, flt: Any) -> None:
        self._client.delete(self.collection, points_selector=self._m.FilterSelector(filter=flt), wait=True)

    def count(self, flt: SearchFilter | None = None) -> int:
        return int(self._client.count(self.collection, count_filter=self._native_filter(flt), exact=True).count)

    def payloads(self, ids: Sequence[str], keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        records = self._client.retrieve(self.collection, ids=list(ids), with_payload=list(keys), with_vectors=False)
        return {str(r.id): dict(r.payload or {}) for r in records}

    def _query(self, *, dense, sparse, flt, limit, prefetch_limit, weights=None, with_vectors=True):
        m = self._m
        nf = self._native_filter(flt)
        sparse_q = m.SparseVector(indices=list(sparse.indices), values=list(sparse.values)) if sparse is not None else None
        exact = m.SearchParams(exact=True) if self.exact else None
        rows = list(dense) if dense is not None else []
        parts = [self._native_filter(f) for f in (flt.dense_parts() if flt else [None])]

        def dense_branch(row: np.ndarray):
            if len(parts) == 1:
                return m.Prefetch(query=row.tolist(), using=DENSE, limit=prefetch_limit, filter=nf, params=exact)
            return m.Prefetch(query=row.tolist(), using=DENSE, limit=prefetch_limit, prefetch=[  # see dense_parts
                m.Prefetch(query=row.tolist(), using=DENSE, limit=prefetch_limit, filter=part, params=exact)
                for part in parts])

        prefetch = [dense_branch(row) for row in rows]
        if sparse_q is not None:
            prefetch.append(m.Prefetch(query=sparse_q, using=SPARSE, limit=prefetch_limit, filter=nf))
        else:
            weights = weights[:-1] if weights else None
        if len(prefetch) >= 2:
            response = self._client.query_points(
                self.collection, prefetch=prefetch,
                query=m.RrfQuery(rrf=m.Rrf(k=self.rrf_k, weights=list(weights) if weights else None)),
                query_filter=nf, limit=limit, with_payload=True, with_vectors=[DENSE] if rows else False,
            )
        elif rows and len(parts) > 1:
            response = self._client.query_points(self.collection, query=rows[0].tolist(), using=DENSE,
                                                 prefetch=prefetch[0].prefetch, limit=limit, with_payload=True,
                                                 with_vectors=[DENSE])
        elif rows:
            response = self._client.query_points(self.collection, query=rows[0].tolist(), using=DENSE, query_filter=nf,
                                                 search_params=exact, limit=limit, with_payload=True, with_vectors=[DENSE])
        else:
            response = self._client.query_points(self.collection, query=sparse_q, using=SPARSE, query_filter=nf,
                                                 limit=limit, with_payload=True, with_vectors=False)
        return [
            (str(p.id), float(p.score), dict(p.payload or {}), (p.vector or {}).get(DENSE) if isinstance(p.vector, dict) else None)
            for p in response.points
        ]

    def close(self) -> None:
        self._client.close()


def edge_path(settings: Settings) -> Path:
    """Directory of the embedded Qdrant Edge shard: ``settings.data_dir / "qdrant"``."""
    return Path(settings.data_dir) / "qdrant"


def open_store(settings: Settings, dim: int) -> VectorStore:
    """Open the configured store: a Qdrant server when ``settings.qdrant_url`` is set,
    else the embedded Edge shard in ``edge_path(settings)``. Raises ``StoreError``."""
    store: VectorStore
    if settings.qdrant_url:
        store = ClientVectorStore(settings.qdrant_collection, dim, settings.rrf_k, url=settings.qdrant_url,
                                  api_key=settings.qdrant_api_key)
    else:
        store = EdgeVectorStore(edge_path(settings), dim, settings.rrf_k)
    return configure(store, settings)


def configure(store: VectorStore, settings: Settings) -> VectorStore:
    """Apply the search settings to ``store``: RRF weights (None when both are 1.0,
    i.e. plain RRF) and exact dense search (``retrieval_exact``). Returns ``store``."""
    weights = (settings.retrieval_dense_weight, settings.retrieval_sparse_weight)
    store.rrf_weights = None if weights == (1.0, 1.0) else weights
    store.exact = settings.retrieval_exact
    return store
