"""The store's data types: chunks to write, filters, hits, and the names every backend shares.

``ChunkPoint`` goes in, ``SearchFilter`` narrows a read, ``Hit`` comes out; ``StoreError`` is
raised by every backend when it cannot open or use its store (``services.retriever.store``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
    vector in [-1, 1] (None for ``sparse_query``). ``second``: the second stage's e5 cosine
    (``rescoring``; None when it is off or the chunk has no e5 vector).
    """

    id: str
    score: float
    payload: dict[str, Any] = field(default_factory=dict)
    dense_score: float | None = None
    second: float | None = None
