"""The orchestrator's memory and cache I/O: the recall before a task and the writes after it.

- ``before``: one ``MemoryRecallRequested`` to the retriever (it owns the memory shard and the
  embedder), sent only when the user has memory items or the tenant cache entries to look up
  (rule M8; ``records.recall_marks``, read beside the new task's other reads), and a wait of at most ``memory_recall_timeout_s`` for its ``RecallReply`` in Redis
  (``keys.reply``); then the ranking (rule M3, ``agent.memory.rank``), ``last_used_at`` of the
  chosen items and the TTL of a hit are renewed. Fail-open: a timeout or an error means a task
  without memory and without a cache hit (said in the trace).
- ``remember``: after the announcement, the user's facts and the episode (rules M1, M2) and a
  cache entry (rule C2) are written to Redis (the truth) and sent to the retriever for their vectors.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import structlog
from faststream.kafka import KafkaBroker
from redis.asyncio import Redis

from conduit.records import keys
from conduit.records import memory as records
from conduit.records import replies
from conduit.runtime import bus
from conduit.runtime.settings import Settings
from contracts import topics
from contracts.envelope import utcnow
from contracts.events import QuestionAsked
from contracts.evidence import Citation
from contracts.memory import (
    MemoryIndexPayload,
    MemoryIndexRequested,
    MemoryRecallPayload,
    MemoryRecallRequested,
    RecallReply,
)
from services.orchestrator.agent import cache, dates, memory
from services.orchestrator.agent.cache import Recalled
from services.orchestrator.agent.state import TaskState

log = structlog.get_logger("conduit.orchestrator.memory")

RECALL_CANDIDATES = 20
"""Items the retriever returns by relevance before the ranking picks ``memory_recall_k``."""


def weights(s: Settings) -> memory.Weights:
    """Rule M3's weights from the settings."""
    return memory.Weights(recency=s.memory_recency_weight, importance=s.memory_importance_weight,
                          relevance=s.memory_relevance_weight, decay=s.memory_recency_decay,
                          min_relevance=s.memory_min_relevance, k=s.memory_recall_k)


class MemoryIO:
    """Recall and remember for the orchestrator (see the module docstring)."""

    def __init__(self, settings: Settings, redis: Redis, broker: KafkaBroker) -> None:
        self.settings, self.redis, self.broker = settings, redis, broker
        self.retriever_up = True
        """False while no retriever process is alive (``watch_retriever``): recall is skipped instead of
        waiting ``memory_recall_timeout_s`` for a reply nobody sends."""

    def memory_on(self, tenant_id: str, user_id: str | None) -> bool:
        """Long-term memory applies to this tenant's user (``memory_off_tenants``; ``*``: no tenant)."""
        off = self.settings.memory_off_tenants
        return bool(user_id) and tenant_id not in off and "*" not in off

    async def refresh_retriever(self) -> None:
        """Set ``retriever_up`` from the retriever's liveness marks (one SCAN)."""
        async for _ in self.redis.scan_iter(match=keys.alive_pattern("retriever"), count=100):
            self.retriever_up = True
            return
        self.retriever_up = False

    async def marks(self, event: QuestionAsked) -> tuple[bool, bool]:
        """Rule M8's ``(has_items, tenant_cached)`` for ``event`` (one round trip)."""
        return await records.recall_marks(self.redis, event.tenant_id, event.user_id)

    async def before(self, event: QuestionAsked, first_turn: bool, marks: tuple[bool, bool] = (True, True)) -> Recalled:
        """The memory items and the cache lookup for ``event`` (see the module docstring);
        ``marks``: ``self.marks(event)``, read by the caller beside its other reads."""
        s = self.settings
        on = self.memory_on(event.tenant_id, event.user_id)
        outcome = cache.lookup_outcome(first_turn, s.cache_enabled, event.payload.use_cache,
                                       scoped=event.payload.scope is not None,
                                       relative_year=dates.names_relative_year(event.payload.question))
        with_memory, with_cache = cache.recall_asks(on and s.memory_recall_k > 0, marks[0], outcome, marks[1])
        if not (with_memory or with_cache):  # rule M8: nothing the retriever could return
            return Recalled(memory_on=on, outcome=outcome)
        if not self.retriever_up:
            return Recalled(memory_on=on, outcome=outcome, error="no retriever is running")
        started = time.perf_counter()
        reply, error = await self._ask(event, with_memory, with_cache)
        ms = round((time.perf_counter() - started) * 1000, 2)
        if reply is None or reply.outcome != "ok":
            log.warning("memory recall failed; the task runs without it", task_id=event.task_id, error=error)
            return Recalled(memory_on=on, outcome=outcome, duration_ms=ms, error=error or (reply and reply.message))
        now = utcnow()
        ranked = [r.item for r in memory.rank(reply.candidates, now, weights(s))]
        if ranked:
            await records.touch(self.redis, ranked, now)
        if reply.cached is not None:
            await records.renew_cache(self.redis, reply.cached, s.cache_ttl_s)
            outcome = "hit"
        return Recalled(items=ranked, memory_on=on, outcome=outcome, cached=reply.cached,
                        similarity=reply.similarity, duration_ms=ms)

    async def _ask(self, event: QuestionAsked, with_memory: bool, with_cache: bool) -> tuple[RecallReply | None, str | None]:
        s = self.settings
        request_id = uuid.uuid4().hex
        deadline = utcnow() + timedelta(seconds=s.memory_recall_timeout_s)
        request = MemoryRecallRequested(
            task_id=event.task_id, session_id=event.session_id, tenant_id=event.tenant_id, user_id=event.user_id,
            traceparent=event.traceparent, causation_id=event.event_id,
            payload=MemoryRecallPayload(request_id=request_id, query=event.payload.question, with_memory=with_memory,
                                        with_cache=with_cache, limit=RECALL_CANDIDATES,
                                        min_similarity=s.cache_min_similarity, deadline_at=deadline))
        try:
            await bus.publish(self.broker, topics.RETRIEVER_REQUESTS, request)
            got = await replies.wait(self.redis, request_id, s.memory_recall_timeout_s)
        except Exception as exc:  # noqa: BLE001 - recall is an aid: any failure means a task without it
            return None, f"{type(exc).__name__}: {exc}"[:300]
        if got is None:
            return None, f"no reply within {s.memory_recall_timeout_s} s"
        return RecallReply.model_validate_json(got), None

    async def remember(self, state: TaskState, citations: list[Citation]) -> None:
        """Write what ``state`` (a completed task) leaves for later: facts, episode, cache entry."""
        s, now = self.settings, utcnow()
        upserts = []
        if state.memory_on and state.user_id:
            facts = memory.extract_facts(state.question, tenant_id=state.tenant_id, user_id=state.user_id,
                                         task_id=state.task_id, session_id=state.session_id, now=now,
                                         temporary_days=s.memory_temporary_days)
            new = list(facts)
            if memory.worth_an_episode(state):
                new.append(memory.episode(tenant_id=state.tenant_id, user_id=state.user_id, task_id=state.task_id,
                                          session_id=state.session_id, question=state.question, answer=state.answer,
                                          citations=citations, now=now, episode_days=s.memory_episode_days))
            if new:
                existing = await records.list_items(self.redis, state.tenant_id, state.user_id, now)
                upserts = memory.merge(existing, new, now)
                await records.put_items(self.redis, upserts)
        entry = cache.entry_for(state, citations, now) if s.cache_enabled else None
        if entry is not None:
            await records.put_cache(self.redis, entry, s.cache_ttl_s)
        if not upserts and entry is None:
            return
        request = MemoryIndexRequested(task_id=state.task_id, session_id=state.session_id, tenant_id=state.tenant_id,
                                       user_id=state.user_id, traceparent=state.traceparent, causation_id=state.cause_id,
                                       payload=MemoryIndexPayload(items=upserts, cache=entry))
        await bus.publish(self.broker, topics.RETRIEVER_WRITES, request)  # a store write (rule K10)
