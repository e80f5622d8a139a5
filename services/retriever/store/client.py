"""``ClientVectorStore``: the store on a Qdrant collection through qdrant-client.

A Qdrant server (``settings.retrieval.qdrant_url``), or qdrant-client's local mode (brute force in
Python: tests only).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from services.retriever.store.base import VectorStore
from services.retriever.store.points import (DENSE, INDEXED_INTEGERS, INDEXED_KEYWORDS, SPARSE, ChunkPoint,
                                             SearchFilter, StoreError)


class ClientVectorStore(VectorStore):
    """A Qdrant collection through qdrant-client.

    Args:
        collection: collection name (``settings.retrieval.qdrant_collection``), created if missing.
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
        scope = [m.FieldCondition(key=key, match=m.MatchAny(any=list(values)))
                 for key, values in (flt.scope_conditions() if flt else [])]
        if len(scope) == 1:
            must += scope
        should = scope if len(scope) > 1 else None  # rule Q3: the scope is a union
        if min_position > 0:
            must.append(m.FieldCondition(key="position", range=m.Range(gte=min_position)))
        if exclude_ids or should:
            return m.Filter(must=must, should=should,
                            must_not=[m.HasIdCondition(has_id=list(exclude_ids))] if exclude_ids else None)
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

    def delete_ids(self, ids: Sequence[str]) -> None:
        if ids:
            self._delete(self._m.Filter(must=[self._m.HasIdCondition(has_id=list(ids))]))

    def count(self, flt: SearchFilter | None = None) -> int:
        return int(self._client.count(self.collection, count_filter=self._native_filter(flt), exact=True).count)

    def payloads(self, ids: Sequence[str], keys: Sequence[str] | None) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        records = self._client.retrieve(self.collection, ids=list(ids), with_payload=True if keys is None else list(keys),
                                        with_vectors=False)
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
