"""``EdgeVectorStore``: the store on an embedded Qdrant Edge shard (the default backend).

One process at a time may open a shard (its WAL is locked): ingest while the retriever is
stopped, or use a Qdrant server (``client.ClientVectorStore``). Retriever replicas each open a copy
of their own (rule K10, ``services/retriever/replicas.py``).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from services.retriever.store.base import VectorStore, distinct_rows
from services.retriever.store.points import (DENSE, INDEXED_INTEGERS, INDEXED_KEYWORDS, SPARSE, ChunkPoint,
                                             SearchFilter, StoreError)


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
        scope = [qe.FieldCondition(key, match=qe.MatchAny(list(values)))
                 for key, values in (flt.scope_conditions() if flt else [])]
        if len(scope) == 1:
            must += scope
        should = scope if len(scope) > 1 else None  # rule Q3: the scope is a union
        if min_position > 0:
            must.append(qe.FieldCondition("position", range=qe.RangeFloat(gte=float(min_position))))
        must_not = [qe.HasIdCondition({uuid.UUID(i) for i in exclude_ids})] if exclude_ids else []
        if must_not or should:
            return qe.Filter(must=must, should=should, must_not=must_not or None)
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

    def delete_ids(self, ids: Sequence[str]) -> None:
        if ids:
            self._delete(self._qe.Filter(must=[self._qe.HasIdCondition({uuid.UUID(i) for i in ids})]))

    def count(self, flt: SearchFilter | None = None) -> int:
        with self._lock:
            return int(self._shard.count(self._qe.CountRequest(exact=True, filter=self._native_filter(flt))))

    def payloads(self, ids: Sequence[str], keys: Sequence[str] | None) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        selector = True if keys is None else self._qe.PayloadSelector.Include(list(keys))
        with self._lock:
            records = self._shard.retrieve([uuid.UUID(i) for i in ids], with_payload=selector, with_vector=False)
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
        for row in distinct_rows(queries_unit):  # the same vector twice (no expansion) is scored once
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
