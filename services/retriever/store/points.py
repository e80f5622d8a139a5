"""The store's data types: chunks to write, filters, hits, and the names every backend shares.

``ChunkPoint`` goes in, ``SearchFilter`` narrows a read, ``Hit`` comes out; ``StoreError`` is
raised by every backend when it cannot open or use its store (``services.retriever.store``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from services.retriever.sparse import SparseVec

DENSE = "dense"
SPARSE = "sparse"
PUBLIC_TENANT = "_public"
"""Tenant of the shared corpus (the law database): visible to every tenant."""
INDEXED_KEYWORDS = ("tenant_id", "document_id", "collection")
COLLECTION = "collection"
"""Payload field of a posted document's chunks naming its collection (``contracts.scope``; rule Q3)."""
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
    ``[request tenant, "_public"]``). The scope fields (rule Q3) restrict further, as a union: a
    chunk passes when ANY of those given matches: ``document_ids`` (its document is one of these),
    ``collections`` (its payload ``collection`` is one of these), ``scope_tenants`` (its tenant is
    one of these: a whole collection, ``law`` = the public corpus, ``documents`` = the tenant's own).
    """

    tenant_ids: tuple[str, ...] | None = None
    document_ids: tuple[str, ...] | None = None
    collections: tuple[str, ...] | None = None
    scope_tenants: tuple[str, ...] | None = None

    @classmethod
    def for_tenant(cls, tenant_id: str) -> "SearchFilter":
        """What a tenant may read: its own chunks and the public corpus."""
        return cls(tenant_ids=tuple(dict.fromkeys([tenant_id, PUBLIC_TENANT])))

    @classmethod
    def scoped(cls, tenant_id: str, document_ids: list[str] | None = None,
               collections: list[str] | None = None) -> "SearchFilter":
        """Rule Q3: what a tenant may read (``for_tenant``) limited to a question's scope: its store
        ``document_ids`` and ``collections`` (``law``, ``documents`` or named ones; ``contracts.scope``),
        a union. The tenants no part of the scope can reach are left out of ``tenant_ids`` (so a scope
        of the tenant's documents never searches the public corpus), and a scope that covers whole
        tenants only keeps no union condition. No scope: ``for_tenant``."""
        base = cls.for_tenant(tenant_id)
        if not document_ids and not collections:
            return base
        names = set(collections or [])
        whole = tuple(t for t, name in ((PUBLIC_TENANT, "law"), (tenant_id, "documents")) if name in names)
        named = tuple(n for n in dict.fromkeys(collections or []) if n not in ("law", "documents"))
        ids = tuple(dict.fromkeys(document_ids or []))
        reached = set(whole) | ({tenant_id} if named else set())
        reached |= {PUBLIC_TENANT if d.startswith("law:") else tenant_id for d in ids}
        tenants = tuple(t for t in base.tenant_ids or () if t in reached)
        if set(whole) >= set(tenants):  # every reachable tenant is in scope whole: the tenant filter says it all
            return cls(tenant_ids=tenants)
        return cls(tenant_ids=tenants, document_ids=ids or None, collections=named or None,
                   scope_tenants=whole or None)

    def scope_conditions(self) -> list[tuple[str, tuple[str, ...]]]:
        """The union's ``(payload key, values)`` conditions (rule Q3), in a fixed order; a chunk must
        match at least one (none: no scope)."""
        pairs = (("document_id", self.document_ids), (COLLECTION, self.collections), ("tenant_id", self.scope_tenants))
        return [(key, values) for key, values in pairs if values is not None]

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
        return [replace(self, tenant_ids=own), replace(self, tenant_ids=(PUBLIC_TENANT,))]


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
