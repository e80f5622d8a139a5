"""Long-term memory and the semantic cache in the retriever's vector store (its own shard or
collection, the knowledge base's embedder): ``MemoryIndex`` (blocking store work) and
``MemoryRequests`` (the bus handlers of ``contracts.memory``'s three events).

Layout: one point per memory item (id ``uuid5("memory:{item id}")``, embedded as a passage,
scope ``document_id = "mem:{tenant}:{owner digest}"``) and one per cache entry (id
``uuid5("cache:{tenant}:{entry id}")``, the question embedded as a query, scope
``"cache:{tenant}"``), both with ``tenant_id``. Every read is filtered by tenant and scope
first, then scored by cosine (exact: a user's items are few). The Redis records
(``conduit.records.memory``) are the truth: a hit whose record is gone (deleted, expired,
invalidated) is dropped and its point removed.

Replicas on the embedded store (rule K10, ``services/retriever/replicas.py``): every replica reads
every ``MemoryIndexRequested``, but only its owner (``replicas.owner_replica`` of the event id)
embeds it and publishes the vectors as ``MemoryVectorsIndexed`` on the writes topic, which every
replica (the owner too) upserts: the embedding, most of a memory write's cost, is done once.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from conduit.records import memory as records
from conduit.records import replies
from conduit.runtime import tracing
from conduit.runtime.settings import Settings
from contracts.envelope import Envelope, utcnow
from contracts.memory import (
    CacheEntry,
    MemoryForgetRequested,
    MemoryIndexRequested,
    MemoryItem,
    MemoryPoint,
    MemoryVectorsIndexed,
    MemoryVectorsPayload,
    MemoryRecallRequested,
    RecallCandidate,
    RecallReply,
)
from services.retriever.embeddings import Embedder, EmbeddingError
from services.retriever.memorybatch import IndexBatcher
from services.retriever.replicas import owner_replica, shard_dir
from services.retriever.sparse import SparseVec
from services.retriever.store import ChunkPoint, ClientVectorStore, EdgeVectorStore, SearchFilter, StoreError, VectorStore

log = logging.getLogger("conduit.retriever.memory")

EMPTY = SparseVec([], [])
FLUSH_EVERY_S = 5.0
"""Seconds between two flushes of the memory shard after writes (a flush costs 50-120 ms here, and
the recall behind it in the consumer's queue waits for it); deletions and closing flush at once."""


def open_memory_store(settings: Settings, dim: int) -> VectorStore:
    """The memory shard: ``{data_dir}/memory`` (Qdrant Edge; replica K > 1 of the retriever:
    ``{data_dir}/replicas/K/memory``, rule K10) or collection ``{qdrant_collection}_memory`` on the
    configured server; exact dense search. Raises ``StoreError``."""
    store: VectorStore
    if settings.retrieval.qdrant_url:
        store = ClientVectorStore(f"{settings.retrieval.qdrant_collection}_memory", dim, settings.retrieval.rrf_k,
                                  url=settings.retrieval.qdrant_url, api_key=settings.retrieval.qdrant_api_key)
    else:
        store = EdgeVectorStore(shard_dir(settings, "memory"), dim, settings.retrieval.rrf_k)
    store.exact = True
    return store


def _point_id(kind: str, key: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{kind}:{key}"))


def user_scope(tenant_id: str, user_id: str) -> str:
    """The ``document_id`` every point of one user's memory carries."""
    return f"mem:{tenant_id}:{records.owner_digest(tenant_id, user_id)}"


def cache_scope(tenant_id: str) -> str:
    """The ``document_id`` every cache point of a tenant carries."""
    return f"cache:{tenant_id}"


class MemoryIndex:
    """Blocking vector work for memory and cache (run it in a worker thread).

    Args:
        store: the memory store (``open_memory_store``); embedder: the knowledge base's.
    """

    def __init__(self, store: VectorStore, embedder: Embedder) -> None:
        self.store, self.embedder = store, embedder
        self._flushed_at = time.monotonic()

    def index(self, items: list[MemoryItem], replaced: list[str], cache: CacheEntry | None) -> None:
        """Embed and upsert ``items`` (passages) and ``cache`` (its question, as a query); drop ``replaced`` ids."""
        self.apply(*self.embed(items, replaced, cache))

    def embed(self, items: list[MemoryItem], replaced: list[str],
              cache: CacheEntry | None) -> tuple[list[ChunkPoint], list[str]]:
        """The points of ``items`` and ``cache`` (embedded) and the point ids of ``replaced`` items:
        ``(points, delete_ids)`` for ``apply``. Raises ``EmbeddingError``."""
        return self.embed_many([(items, replaced, cache)])[0]

    def embed_many(self, requests: list[tuple[list[MemoryItem], list[str], CacheEntry | None]]
                   ) -> list[tuple[list[ChunkPoint], list[str]]]:
        """``embed`` of several requests with one backend call for all their items and one for all their
        cache questions (rule M15); ``(points, delete_ids)`` per request, in order. Raises ``EmbeddingError``."""
        vecs = iter(self.embedder.embed([i.text for items, _, _ in requests for i in items]))
        queries = [c.question for _, _, c in requests if c is not None]
        qvecs = iter(self.embedder.embed_queries(queries) if queries else [])
        out = []
        for items, replaced, cache in requests:
            points = [ChunkPoint(_point_id("memory", i.id), next(vecs), EMPTY,
                                 {"tenant_id": i.tenant_id, "document_id": user_scope(i.tenant_id, i.user_id),
                                  "item_id": i.id, "position": 0}) for i in items]
            if cache is not None:
                points.append(ChunkPoint(_point_id("cache", f"{cache.tenant_id}:{cache.id}"), next(qvecs), EMPTY,
                                         {"tenant_id": cache.tenant_id, "document_id": cache_scope(cache.tenant_id),
                                          "entry_id": cache.id, "position": 0}))
            out.append((points, [_point_id("memory", i) for i in replaced]))
        return out

    def apply(self, points: list[ChunkPoint], delete_ids: list[str]) -> None:
        """Delete the points ``delete_ids``, upsert ``points``, flush at most every ``FLUSH_EVERY_S``
        (idempotent: the same call twice leaves the same shard). Raises ``StoreError``."""
        if delete_ids:
            self.store.delete_ids(delete_ids)
        self.store.upsert(points)
        if time.monotonic() - self._flushed_at >= FLUSH_EVERY_S:  # a crash loses at most these seconds of
            self.store.flush()                                     # vectors; the Redis records stay
            self._flushed_at = time.monotonic()

    def forget(self, tenant_id: str, user_id: str, ids: list[str] | None) -> None:
        """Remove the vectors of the user's items ``ids`` (None: all of them)."""
        if ids is None:
            self.store.delete_by_document(user_scope(tenant_id, user_id))
        else:
            self.store.delete_ids([_point_id("memory", i) for i in ids])
        self.store.flush()

    def drop_cache(self, tenant_id: str, entry_ids: list[str]) -> None:
        """Remove the points of cache entries whose records are gone."""
        self.store.delete_ids([_point_id("cache", f"{tenant_id}:{e}") for e in entry_ids])

    def cosines(self, query: str, texts: list[str]) -> list[float]:
        """Cosine of ``query`` (embedded as a query) to each of ``texts`` (as passages), as stored items are.
        Raises ``EmbeddingError``."""
        if not texts:
            return []
        return [float(x) for x in self.embedder.embed(texts) @ self.embedder.embed_query(query)]

    def search(self, tenant_id: str, user_id: str | None, query: str, limit: int,
               with_memory: bool, with_cache: bool) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        """(memory item id, cosine) of the user's best ``limit`` items and (cache entry id, cosine) of
        the tenant's best 3 entries, each list best first. Rule M14: one query vector serves both searches,
        and the embedder's query cache serves a ``kb_search`` of the same text."""
        vec = self.embedder.embed_query(query)
        mem: list[tuple[str, float]] = []
        hits_cache: list[tuple[str, float]] = []
        if with_memory and user_id:
            flt = SearchFilter(tenant_ids=(tenant_id,), document_ids=(user_scope(tenant_id, user_id),))
            mem = [(h.payload["item_id"], float(h.dense_score if h.dense_score is not None else h.score))
                   for h in self.store.dense_query(vec, flt, limit=limit) if "item_id" in h.payload]
        if with_cache:
            flt = SearchFilter(tenant_ids=(tenant_id,), document_ids=(cache_scope(tenant_id),))
            hits_cache = [(h.payload["entry_id"], float(h.dense_score if h.dense_score is not None else h.score))
                          for h in self.store.dense_query(vec, flt, limit=3) if "entry_id" in h.payload]
        return mem, hits_cache


class MemoryRequests:
    """Handles ``MemoryIndexRequested``, ``MemoryRecallRequested``, ``MemoryForgetRequested`` and
    ``MemoryVectorsIndexed`` with an open ``MemoryIndex`` and the service's Redis.

    Args:
        publish: sends an event to the writes topic; with ``replicas`` N > 1 (rule K10) a
            ``MemoryIndexRequested`` is embedded by its owner replica only, which publishes
            the vectors with it. None (or N = 1): every index request is embedded here.
        replica: this replica's index K; replicas: the count N (copies of the embedded store).
    """

    def __init__(self, index: MemoryIndex, redis: Redis, publish: Callable[[Envelope], Awaitable[None]] | None = None,
                 replica: int = 1, replicas: int = 1) -> None:
        self.index, self.redis = index, redis
        self.batcher = IndexBatcher(index)
        """Rule M15: index requests embedded in batches, after the recalls."""
        self.publish = publish if replicas > 1 else None
        self.replica, self.replicas = replica, replicas

    async def handle(self, event: Envelope) -> None:
        """Bus handler; raises only for Redis failures (redelivery). Store and embedding errors are
        logged (index, forget) or answered as an ``error`` reply (recall)."""
        if isinstance(event, MemoryRecallRequested):
            await self.recall(event)
        elif isinstance(event, MemoryIndexRequested):
            await self._index(event)
        elif isinstance(event, MemoryVectorsIndexed):
            points = [ChunkPoint(pt.id, pt.vector, EMPTY, pt.payload) for pt in event.payload.points]
            try:
                await asyncio.to_thread(self.index.apply, points, event.payload.delete_ids)
            except StoreError as exc:
                log.warning("memory vectors for task %s not applied: %s", event.task_id, exc)
        elif isinstance(event, MemoryForgetRequested):
            if event.user_id:
                try:
                    await asyncio.to_thread(self.index.forget, event.tenant_id, event.user_id, event.payload.ids)
                except StoreError as exc:
                    log.warning("memory forget failed: %s", exc)

    async def _index(self, event: MemoryIndexRequested) -> None:
        """Embed and store here, or (rule K10) embed if this replica owns the event and publish the
        vectors for every replica; a replica that does not own it does nothing. Raises only for a
        failed publish (redelivery: the owner embeds it again)."""
        p = event.payload
        try:
            if self.publish is None:
                await asyncio.to_thread(self.index.apply, *await self.batcher.submit(p.items, p.replaced, p.cache))
                return
            if owner_replica(str(event.event_id), self.replicas) != self.replica:
                return
            points, delete_ids = await self.batcher.submit(p.items, p.replaced, p.cache)
        except (EmbeddingError, StoreError) as exc:
            log.warning("memory index for task %s failed: %s", event.task_id, exc)
            return
        log.info("memory index for task %s embedded by replica %d: %d points", event.task_id, self.replica,
                 len(points))
        vectors = MemoryVectorsPayload(delete_ids=delete_ids, points=[
            MemoryPoint(id=pt.id, vector=[float(x) for x in pt.dense], payload=pt.payload) for pt in points])
        await self.publish(event.child(MemoryVectorsIndexed, payload=vectors))

    async def recall(self, event: MemoryRecallRequested) -> None:
        """Search, join with the Redis records (dropping and removing stale points) and LPUSH a ``RecallReply``."""
        p = event.payload
        if p.deadline_at is not None and utcnow() > p.deadline_at:
            return
        started = time.perf_counter()
        reply = RecallReply(request_id=p.request_id)
        with tracing.span("memory recall", tracing.current_traceparent(event.traceparent), task_id=event.task_id):
            await self._recall(event, reply)
            tracing.annotate(**{"conduit.recall.outcome": reply.outcome, "conduit.recall.candidates": len(reply.candidates),
                                "conduit.recall.cached": reply.cached is not None})
        reply.duration_ms = round((time.perf_counter() - started) * 1000, 2)
        await replies.push(self.redis, p.request_id, reply.model_dump_json())
        log.info("recall %s served by replica %d: %s in %.0f ms", p.request_id, self.replica, reply.outcome,
                 reply.duration_ms)

    async def _recall(self, event: MemoryRecallRequested, reply: RecallReply) -> None:
        """Fill ``reply``: the memory candidates and the cache entry, or ``outcome`` ``error`` (rule O6: in the
        ``memory recall`` span, so a trace shows the recall's own time)."""
        p = event.payload
        try:
            with self.batcher.recalling():  # rule M15: no index batch is embedded meanwhile
                # rule M13: the user's records are read while the question is embedded and searched
                live = asyncio.ensure_future(self._live(event))
                started = time.perf_counter()
                try:
                    mem, cache = await asyncio.to_thread(self.index.search, event.tenant_id, event.user_id, p.query,
                                                         p.limit, p.with_memory, p.with_cache)
                except BaseException:
                    live.cancel()
                    raise
                searched = time.perf_counter()
                items = await live
                read = time.perf_counter()
                reply.candidates = await self._candidates(event, mem, items)
                reply.cached, reply.similarity = await self._cached(event.tenant_id, cache, p.min_similarity)
                tracing.annotate(**{"conduit.recall.search_ms": round((searched - started) * 1000, 2),
                                    "conduit.recall.records_wait_ms": round((read - searched) * 1000, 2),
                                    "conduit.recall.join_ms": round((time.perf_counter() - read) * 1000, 2),
                                    "conduit.recall.user_items": len(items)})
        except (EmbeddingError, StoreError) as exc:
            reply.candidates, reply.cached, reply.similarity = [], None, None
            reply.outcome, reply.message = "error", str(exc)[:300]
            tracing.fail("recall_failed", reply.message)

    async def _live(self, event: MemoryRecallRequested) -> dict[str, MemoryItem]:
        """The user's stored items by id (none without a user or when memory was not asked for)."""
        if not event.user_id or not event.payload.with_memory:
            return {}
        return {i.id: i for i in await records.list_items(self.redis, event.tenant_id, event.user_id, utcnow())}

    async def _candidates(self, event: MemoryRecallRequested, hits: list[tuple[str, float]],
                          live: dict[str, MemoryItem]) -> list[RecallCandidate]:
        """The hits joined with their records (``live``), plus every fact of the user the search did not return,
        with its cosine (rule M10 may admit a fact by its words or topic; a user has one fact per topic, so few)."""
        if not event.user_id or not (hits or event.payload.with_memory):
            return []
        stale = [i for i, _ in hits if i not in live]
        if stale:
            await asyncio.to_thread(self.index.store.delete_ids, [_point_id("memory", i) for i in stale])
        out = [RecallCandidate(item=live[i], relevance=cos) for i, cos in hits if i in live]
        seen = {i for i, _ in hits}
        facts = [i for i in live.values() if i.type == "fact" and i.id not in seen]
        if facts:
            cosines = await asyncio.to_thread(self.index.cosines, event.payload.query, [i.text for i in facts])
            out += [RecallCandidate(item=i, relevance=c) for i, c in zip(facts, cosines)]
        return out

    async def _cached(self, tenant_id: str, hits: list[tuple[str, float]],
                      min_similarity: float) -> tuple[CacheEntry | None, float | None]:
        stale = []
        chosen: tuple[CacheEntry | None, float | None] = (None, hits[0][1] if hits else None)
        for entry_id, cos in hits:
            if cos < min_similarity:
                break
            entry = await records.get_cache(self.redis, tenant_id, entry_id)
            if entry is None:
                stale.append(entry_id)
                continue
            chosen = (entry, cos)
            break
        if stale:
            await asyncio.to_thread(self.index.drop_cache, tenant_id, stale)
        return chosen
