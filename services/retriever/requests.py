"""The retriever's side of ``POST /v1/search`` and ``/v1/documents`` (topics ``conduit.retriever.requests``,
the reads, and ``conduit.retriever.writes``, the writes: rule K10).

``RetrieverRequests(searcher, redis).handle(event)`` is registered with
``ToolService.consume`` so these events share the retriever's one Kafka consumer with
the ``kb_search`` tool requests (one group join; per-key order). With replicas on the embedded
store each replica also reads every write with a consumer of its own
(``ToolService.consume_apart``, group ``conduit-retriever-writes-K``; ``services/retriever/replicas.py``).

- ``SearchRequested``: runs the same ``KbSearcher.search`` the ``kb_search`` tool runs
  (``top_k`` other than ``RETRIEVAL_TOP_K`` uses a copy of the settings with that value),
  then LPUSHes a ``SearchReply`` to ``keys.reply(request_id)`` with TTL ``REPLY_TTL_S``.
  A request past its ``deadline_at`` is dropped (the gateway already answered 504).
- ``DocumentIngestRequested``: chunks the text like a Markdown file
  (``documents.markdown_chunks``; store document id ``doc:{tenant}:{id}``), indexes it with
  the open store (embedding only changed chunks; the old version's other points are deleted),
  and sets the Redis record to ``ingested`` (with ``chunks``) or ``failed`` (with ``reason``).
  With ``applies_needed`` N > 1 (rule K10) each replica adds its index to the request's applied set
  (``replicas.mark_applied``) and only the one completing the set writes ``ingested``; a failure
  on any replica writes ``failed``.
- ``DocumentDeleteRequested``: deletes the document's chunks, then its record.
- Ingesting or deleting a document removes the semantic-cache entries citing it
  (``conduit.records.memory.invalidate_document``).
- ``MemoryIndexRequested`` / ``MemoryRecallRequested`` / ``MemoryForgetRequested`` /
  ``MemoryVectorsIndexed`` (rule K10): long-term memory and the semantic cache
  (``services/retriever/memory.py``).

Idempotence: the Redis record's ``request_id`` names the latest request about a document;
an ingest whose event is not that request (superseded, or replayed after a delete) is
skipped, and a delete removes the record only when it is still the latest request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from pathlib import Path

from redis.asyncio import Redis

from conduit.records import keys, slots
from conduit.records import memory as memory_records
from conduit.records import replies
from contracts.documents import (
    DocumentDeleteRequested,
    DocumentIngestRequested,
    DocumentView,
    SearchAttempt,
    SearchReply,
    SearchRequested,
)
from contracts.envelope import Envelope, utcnow
from contracts.memory import MemoryForgetRequested, MemoryIndexRequested, MemoryRecallRequested, MemoryVectorsIndexed
from services.retriever.documents import Chunk, DocumentError, markdown_chunks
from services.retriever.embeddings import EmbeddingError
from services.retriever.ingest import Indexer, IngestSummary
from services.retriever.memory import MemoryRequests
from services.retriever.pipeline import KbSearcher
from services.retriever.replicas import mark_applied
from services.retriever.store import StoreError
from services.retriever.store.points import COLLECTION

log = logging.getLogger("conduit.retriever.requests")


def posted_document_chunks(index_id: str, tenant_id: str, title: str, text: str, source: str | None,
                           collection: str | None = None) -> list[Chunk]:
    """Chunks of a posted Markdown/plain-text document, stored under ``index_id``.

    Same splitting as a ``.md`` file (parents of <= 4,000 chars on headings and paragraphs,
    children of <= 800 chars, ``documents.markdown_chunks``); payload
    ``source`` is ``api`` (``source_ref`` keeps the client's ``source``), ``version_date``
    is today (UTC), ``collection`` its named collection when it has one (rule Q3: filterable).
    Raises ``DocumentError("no text")``.
    """
    chunks = markdown_chunks(text, Path(f"{index_id}.md"), tenant_id, title=title, document_id=index_id)
    today = datetime.now(UTC).date().isoformat()
    for c in chunks:
        c.document_id = index_id
        c.payload.pop("source_path", None)
        c.payload.pop("file_name", None)
        c.payload.update(document_id=index_id, source="api", source_ref=source, version_date=today)
        if collection:
            c.payload[COLLECTION] = collection
    return chunks


class RetrieverRequests:
    """Handles the events of ``topics.RETRIEVER_REQUESTS`` (``contracts.channels``) with an open ``KbSearcher`` and the service's Redis."""

    def __init__(self, searcher: KbSearcher, redis: Redis, memory: MemoryRequests | None = None,
                 replica: int = 1, applies_needed: int = 1) -> None:
        self.searcher = searcher
        self.redis = redis
        self.memory = memory
        self.replica = replica
        """This replica's index K (rule K10), named in the logs."""
        self.applies_needed = applies_needed
        """Replicas that must index a document before its record says ``ingested`` (rule K10)."""

    async def handle(self, event: Envelope) -> None:
        """Bus handler (see the module docstring); raises only for Redis failures (redelivery)."""
        if isinstance(event, SearchRequested):
            await self.search(event)
        elif isinstance(event, DocumentIngestRequested):
            await self.ingest(event)
        elif isinstance(event, DocumentDeleteRequested):
            await self.delete(event)
        elif isinstance(event, (MemoryIndexRequested, MemoryRecallRequested, MemoryForgetRequested,
                                MemoryVectorsIndexed)):
            if self.memory is not None:
                await self.memory.handle(event)
        else:  # pragma: no cover - the union model admits nothing else
            raise TypeError(type(event).__name__)

    # ------------------------------------------------------------------ search
    def _searcher_for(self, top_k: int | None) -> KbSearcher:
        s = self.searcher
        if top_k is None or top_k == s.retrieval.retrieval_top_k:
            return s
        return KbSearcher(s.retrieval.model_copy(update={"retrieval_top_k": top_k}), s.embedder, s.store, s.encoder,
                          stage2=s.stage2, assist=s.assist, refs=s.refs)

    async def search(self, event: SearchRequested) -> None:
        """Run the search and LPUSH its ``SearchReply`` (dropped when past ``deadline_at``)."""
        p = event.payload
        if p.deadline_at is not None and utcnow() > p.deadline_at:
            log.info("search %s arrived after its deadline; dropped", p.request_id)
            return
        started = time.perf_counter()
        try:
            outcome = await asyncio.to_thread(self._searcher_for(p.top_k).search, p.query, event.tenant_id,
                                              p.document_ids, None, p.collections)
            reply = SearchReply(request_id=p.request_id, outcome="ok", items=outcome.evidence,
                                attempts=[SearchAttempt(kind=a.kind, query=a.query, returned=a.returned, kept=a.kept,
                                                        best=a.best, duration_ms=a.duration_ms)
                                          for a in outcome.attempts])
        except (EmbeddingError, StoreError) as exc:
            reply = SearchReply(request_id=p.request_id, outcome="error", error_code="kb_backend_unavailable",
                                message=str(exc)[:500])
        reply.duration_ms = round((time.perf_counter() - started) * 1000, 2)
        await replies.push(self.redis, p.request_id, reply.model_dump_json())
        log.info("search %s served by replica %d: %s in %.0f ms", p.request_id, self.replica, reply.outcome,
                 reply.duration_ms)

    # ------------------------------------------------------------------ documents
    async def _record(self, tenant_id: str, document_id: str) -> DocumentView | None:
        raw = await self.redis.get(keys.document(tenant_id, document_id))
        return DocumentView.model_validate_json(raw) if raw else None

    async def ingest(self, event: DocumentIngestRequested) -> None:
        """Index the document when its record still names this request; record the outcome."""
        p = event.payload
        record = await self._record(event.tenant_id, p.document_id)
        if record is None or record.request_id != str(event.event_id):
            log.info("ingest of %s skipped: superseded by a later request", p.document_id)
            return
        update: dict = {"updated_at": utcnow()}
        try:
            chunks = posted_document_chunks(p.index_document_id, event.tenant_id, p.title, p.text, p.source,
                                            p.collection)
            summary = IngestSummary()
            s = self.searcher
            indexer = Indexer(s.store, s.embedder, s.encoder, batch_size=s.retrieval.ingest_batch_size,
                              second=s.stage2.embedder if s.stage2 else None)  # rule K7: the doc's e5 vectors
            await asyncio.to_thread(indexer.index, [(p.index_document_id, chunks)], summary)
            await memory_records.invalidate_document(self.redis, event.tenant_id, p.index_document_id)
            log.info("document %s ingested by replica %d: %d chunks (%d embedded)", p.index_document_id,
                     self.replica, summary.chunks, summary.embedded)
            if not await mark_applied(self.redis, event.tenant_id, p.document_id, str(event.event_id),
                                      self.replica, self.applies_needed):
                return  # rule K10: another replica has still to index it; the last one writes the status
            update |= {"status": "ingested", "chunks": summary.chunks, "reason": None}
        except DocumentError as exc:
            update |= {"status": "failed", "reason": str(exc)}
        except (EmbeddingError, StoreError) as exc:
            where = f" (retriever replica {self.replica})" if self.applies_needed > 1 else ""
            update |= {"status": "failed",
                       "reason": f"knowledge base unavailable{where}: {str(exc)[:300]}; post it again"}
        # write unless a newer request replaced the record meanwhile
        current = await self._record(event.tenant_id, p.document_id)
        if current is not None and current.request_id == str(event.event_id):
            await self.redis.set(keys.document(event.tenant_id, p.document_id),
                                 current.model_copy(update=update).model_dump_json())

    async def delete(self, event: DocumentDeleteRequested) -> None:
        """Delete the document's chunks (idempotent), then its record if this is still the latest request."""
        p = event.payload
        removed = await asyncio.to_thread(self.searcher.store.delete_by_document, p.index_document_id)
        await asyncio.to_thread(self.searcher.store.flush)
        log.info("document %s deleted: %d chunks", p.index_document_id, removed)
        await memory_records.invalidate_document(self.redis, event.tenant_id, p.index_document_id)
        record = await self._record(event.tenant_id, p.document_id)
        if record is not None and record.request_id == str(event.event_id):
            async with slots.atomic(self.redis) as pipe:
                pipe.delete(keys.document(event.tenant_id, p.document_id))
                pipe.srem(keys.documents(event.tenant_id), p.document_id)
                await pipe.execute()
