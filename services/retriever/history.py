"""The ``history_search`` tool (rules M11, M12, docs/agent-rules.md): the user's own earlier questions and
answers, found in the memory shard where rule M1 keeps them as episodes (same embedder, same records).

Whose history is searched is the request's envelope (``tenant_id``, ``user_id``: the task's, set by the
orchestrator), never the model's arguments; the search is filtered by tenant and the user's scope first
(``memory.user_scope``), and every hit is joined with its Redis record under the same user's key, so
another user's item cannot come back even if a vector were mislabelled. Only episodes are returned (facts
reach the model by recall, rule M4), only those whose cosine reaches the floor measured for search words
(``conduit.policy.recall.MEASURED_QUERY_FLOORS``), best first, at most ``HISTORY_RESULTS``; each is
evidence of kind ``history`` the answer can cite.
"""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from conduit.policy.recall import query_floor
from conduit.records import memory as records
from conduit.runtime.settings import RetrievalSettings
from conduit.runtime.toolservice import ToolFailure, ToolOutput
from contracts.envelope import utcnow
from contracts.events import ToolRequested
from contracts.evidence import EvidenceItem
from contracts.memory import MemoryItem
from contracts.tools import HistorySearchArgs
from services.retriever.embeddings import EmbeddingError
from services.retriever.memory import MemoryIndex
from services.retriever.store import StoreError

HISTORY_CANDIDATES = 20
"""Hits read from the user's memory before the floor and the episode filter."""
HISTORY_RESULTS = 5
"""Earlier questions and answers returned at most."""


def as_evidence(item: MemoryItem, cosine: float) -> EvidenceItem:
    """One episode as ``history`` evidence: titled with the day it was asked, its task as locator."""
    day = item.created_at.date().isoformat()
    return EvidenceItem(chunk_id=f"history:{item.id}", document_id=f"history:{item.task_id}", kind="history",
                        title=f"以前的对话（{day}）", locator=f"任务 {item.task_id}", score=round(cosine, 4),
                        text=item.text, metadata={"task_id": item.task_id, "session_id": item.session_id,
                                                  "asked_at": item.created_at.isoformat()})


def make_history_search_tool(index: MemoryIndex, redis: Redis, retrieval: RetrievalSettings):
    """The ``history_search`` tool function for ``ToolService.tool``.

    Errors given back to the model: ``history_no_results`` (business: none of the user's earlier
    questions and answers reaches the floor), ``history_unavailable`` (transient: store or embedder).
    """
    floor = query_floor(retrieval.embedding_backend)  # rule M12: measured for search words, not questions

    async def history_search_tool(args: HistorySearchArgs, request: ToolRequested) -> ToolOutput:
        if not request.user_id:
            raise ToolFailure("history_no_results", "this question has no user, so no history", kind="business")
        try:
            hits, _ = await asyncio.to_thread(index.search, request.tenant_id, request.user_id, args.query,
                                              HISTORY_CANDIDATES, True, False)
        except (EmbeddingError, StoreError) as exc:
            raise ToolFailure("history_unavailable", str(exc)[:500], hint="retry later", kind="transient") from exc
        found = await records.get_items(redis, request.tenant_id, request.user_id, [i for i, _ in hits], utcnow())
        evidence = [as_evidence(found[i], cos) for i, cos in hits
                    if i in found and found[i].type == "episode" and cos >= floor][:HISTORY_RESULTS]
        if not evidence:
            raise ToolFailure("history_no_results", f"none of this user's earlier questions matched {args.query!r}",
                              hint="answer from the knowledge base instead", kind="business")
        return ToolOutput(evidence=evidence)

    return history_search_tool
