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
``k = settings.retrieval.rrf_k`` (60; always explicit, rule K6: qdrant-client's plain RRF uses k=2). Each hit also carries its dense cosine similarity to the query
(``Hit.dense_score``, the best over the query vectors; from the returned dense
vectors, or on Edge from an id-filtered exact query), because the relevance thresholds
(rule R2, docs/rules.md) apply to the dense cosine, never to the fused RRF score. Dense search
looks at a tenant's own chunks and the public corpus apart (``SearchFilter.dense_parts``).

Modules, one job each: ``points`` (the data types: ``ChunkPoint``, ``SearchFilter``, ``Hit``,
``StoreError``), ``base`` (``VectorStore``: queries, fusion weights, cosines, written once),
``edge`` and ``client`` (the two backends); this package opens the configured one.

Backends:
- ``EdgeVectorStore``: Qdrant Edge shard in ``settings.stack.data_dir / "qdrant"``
  (default). One process at a time may open a shard (the WAL is locked): ingest
  while the retriever is stopped, or use a Qdrant server. Retriever replicas each open a
  copy of their own (``edge_path``; rule K10, ``services/retriever/replicas.py``).
- ``ClientVectorStore``: qdrant-client against ``settings.retrieval.qdrant_url``, or its
  local mode (``location=":memory:"`` or ``path=``; brute force, tests only).
"""

from __future__ import annotations

from pathlib import Path

from conduit.runtime.settings import Settings
from services.retriever.replicas import shard_dir
from services.retriever.store.base import VectorStore
from services.retriever.store.client import ClientVectorStore
from services.retriever.store.edge import EdgeVectorStore
from services.retriever.store.points import (DEFAULT_PREFETCH, DENSE, PUBLIC_TENANT, SPARSE, ChunkPoint, Hit,
                                             SearchFilter, StoreError)

__all__ = ["DEFAULT_PREFETCH", "DENSE", "PUBLIC_TENANT", "SPARSE", "ChunkPoint", "ClientVectorStore", "EdgeVectorStore",
           "Hit", "SearchFilter", "StoreError", "VectorStore", "configure", "edge_path", "open_store"]


def edge_path(settings: Settings) -> Path:
    """Directory of the embedded Qdrant Edge shard: ``settings.stack.data_dir / "qdrant"`` for retriever
    replica 1, ``settings.stack.data_dir / "replicas" / K / "qdrant"`` for replica K > 1 (rule K10)."""
    return shard_dir(settings, "qdrant")


def open_store(settings: Settings, dim: int) -> VectorStore:
    """Open the configured store: a Qdrant server when ``settings.retrieval.qdrant_url`` is set,
    else the embedded Edge shard in ``edge_path(settings)``. Raises ``StoreError``."""
    store: VectorStore
    if settings.retrieval.qdrant_url:
        store = ClientVectorStore(settings.retrieval.qdrant_collection, dim, settings.retrieval.rrf_k, url=settings.retrieval.qdrant_url,
                                  api_key=settings.retrieval.qdrant_api_key)
    else:
        store = EdgeVectorStore(edge_path(settings), dim, settings.retrieval.rrf_k)
    return configure(store, settings)


def configure(store: VectorStore, settings: Settings) -> VectorStore:
    """Apply the search settings to ``store``: RRF weights (None when both are 1.0,
    i.e. plain RRF) and exact dense search (``retrieval_exact``). Returns ``store``."""
    weights = (settings.retrieval.retrieval_dense_weight, settings.retrieval.retrieval_sparse_weight)
    store.rrf_weights = None if weights == (1.0, 1.0) else weights
    store.exact = settings.retrieval.retrieval_exact
    return store
