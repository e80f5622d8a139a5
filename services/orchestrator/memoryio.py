"""The orchestrator's memory and cache I/O: the recall before a task and the writes after it.

- ``before``: one ``MemoryRecallRequested`` to the retriever (it owns the memory shard and the
  embedder), sent only when the user has memory items or the tenant cache entries to look up
  (rule M8; ``records.recall_marks``, read beside the new task's other reads), and a wait of at most ``memory_recall_timeout_s`` for its ``RecallReply`` in Redis
  (``keys.reply``). Rule M13: the gateway usually sent it beside the question (``payload.recall``), so
  its reply is waited for (``ahead``, started with the new task's reads) and no request is sent here;
  only what rule M8 asks for is used of it. Then the ranking (rule M3, ``agent.memory.rank``);
  ``last_used_at`` of the chosen items and the TTL of a hit are renewed in the background, off the
  question's path. Fail-open: a timeout or an error means a task without memory and without a cache
  hit (said in the trace).
- ``remember``: after the announcement, the user's facts and the episode (rules M1, M2) and a
  cache entry (rule C2), as the core decided them (``agent.announcing``), are written to Redis (the
  truth) and sent to the retriever for their vectors.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

import structlog
from faststream.kafka import KafkaBroker
from redis.asyncio import Redis

from conduit.policy import recall
from conduit.records import keys
from conduit.records import memory as records
from conduit.records import replies
from conduit.runtime import bus, recalls
from conduit.runtime.settings import Settings
from contracts import topics
from contracts.envelope import utcnow
from contracts.events import QuestionAsked, RecallAhead
from contracts.memory import CacheEntry, CacheOutcome, MemoryIndexPayload, MemoryIndexRequested, MemoryItem, RecallReply
from services.orchestrator.agent import cache, dates, memory
from services.orchestrator.agent.cache import Recalled
from services.orchestrator.agent.state import TaskState

log = structlog.get_logger("conduit.orchestrator.memory")

Answer = tuple[RecallReply | None, str | None, float]
"""A recall's ``(reply, error, ms waited)``."""

EXPIRED = "the recall sent ahead expired unanswered"
"""``_wait_ahead``'s error when the question came after its recall's deadline and no reply is there."""


def weights(s: Settings) -> memory.Weights:
    """Rule M3's weights from the settings; the floor is rule M10's (``memory_min_relevance``, else the
    floor measured for the embedding backend)."""
    return memory.Weights(recency=s.memory.memory_recency_weight, importance=s.memory.memory_importance_weight,
                          relevance=s.memory.memory_relevance_weight, decay=s.memory.memory_recency_decay,
                          min_relevance=recall.relevance_floor(s.memory.memory_min_relevance, s.retrieval.embedding_backend), k=s.memory.memory_recall_k)


class MemoryIO:
    """Recall and remember for the orchestrator (see the module docstring)."""

    def __init__(self, settings: Settings, redis: Redis, broker: KafkaBroker) -> None:
        self.settings, self.redis, self.broker = settings, redis, broker
        self.retriever_up = True
        """False while no retriever process is alive (``watch_retriever``): recall is skipped instead of
        waiting ``memory_recall_timeout_s`` for a reply nobody sends."""
        self._after: set[asyncio.Task[None]] = set()
        """Writes after a recall (rule M13: ``last_used_at``, a hit's TTL), off the question's path."""

    def memory_on(self, tenant_id: str, user_id: str | None) -> bool:
        """Long-term memory applies to this tenant's user (``memory_off_tenants``; ``*``: no tenant)."""
        return recalls.memory_on(self.settings.memory, tenant_id, user_id)

    async def refresh_retriever(self) -> None:
        """Set ``retriever_up`` from the retriever's liveness marks (one SCAN)."""
        async for _ in self.redis.scan_iter(match=keys.alive_pattern("retriever"), count=100):
            self.retriever_up = True
            return
        self.retriever_up = False

    async def marks(self, event: QuestionAsked) -> tuple[bool, bool]:
        """Rule M8's ``(has_items, tenant_cached)`` for ``event`` (one round trip)."""
        return await records.recall_marks(self.redis, event.tenant_id, event.user_id)

    def ahead(self, event: QuestionAsked) -> asyncio.Task[Answer] | None:
        """Rule M13: start waiting for the reply of the recall the gateway sent beside ``event`` (None: none
        was sent, or no retriever runs); ``before`` uses it or cancels it. Start it with the new task's reads."""
        if event.payload.recall is None or not self.retriever_up:
            return None
        return asyncio.ensure_future(self._wait_ahead(event.payload.recall))

    async def before(self, event: QuestionAsked, first_turn: bool, marks: tuple[bool, bool] = (True, True),
                     waiting: asyncio.Task[Answer] | None = None) -> Recalled:
        """The memory items and the cache lookup for ``event`` (see the module docstring);
        ``marks``: ``self.marks(event)``, read by the caller beside its other reads; ``waiting``:
        ``self.ahead(event)``, started beside them (rule M13)."""
        s = self.settings.memory
        on = self.memory_on(event.tenant_id, event.user_id)
        outcome = cache.lookup_outcome(first_turn, s.cache_enabled, event.payload.use_cache,
                                       scoped=event.payload.scope is not None,
                                       relative_year=dates.names_relative_year(event.payload.question))
        with_memory, with_cache = cache.recall_asks(on and s.memory_recall_k > 0, marks[0], outcome, marks[1])
        sent = event.payload.recall
        if waiting is not None and not (sent is not None and sent.with_memory >= with_memory
                                        and sent.with_cache >= with_cache and (with_memory or with_cache)):
            waiting.cancel()  # rule M13: not needed, or it asked for less than rule M8 wants
            waiting = None
        if not (with_memory or with_cache):  # rule M8: nothing the retriever could return
            return Recalled(memory_on=on, outcome=outcome)
        if not self.retriever_up:
            return Recalled(memory_on=on, outcome=outcome, error="no retriever is running")
        reply, error, ms = await waiting if waiting is not None else (None, EXPIRED, 0.0)
        if error == EXPIRED:  # none sent ahead, or it expired before its question came: ask now
            started = time.perf_counter()
            reply, error = await self._ask(event, with_memory, with_cache)
            ms = round((time.perf_counter() - started) * 1000, 2)
        if reply is None or reply.outcome != "ok":
            log.warning("memory recall failed; the task runs without it", task_id=event.task_id, error=error)
            return Recalled(memory_on=on, outcome=outcome, duration_ms=ms, error=error or (reply and reply.message))
        return self._found(event, reply, on, outcome, ms, with_memory, with_cache)

    def _found(self, event: QuestionAsked, reply: RecallReply, on: bool, outcome: CacheOutcome, ms: float,
               with_memory: bool, with_cache: bool) -> Recalled:
        """What ``reply`` gives the task, limited to what rule M8 asked for (a recall sent ahead may hold
        more, rule M13); its writes run in the background."""
        s, now = self.settings.memory, utcnow()
        candidates = reply.candidates if with_memory else []
        cached = reply.cached if with_cache else None
        ranked = [r.item for r in memory.rank(candidates, now, weights(self.settings), event.payload.question)]
        if ranked:
            self._later(records.touch(self.redis, ranked, now))
        if cached is not None:
            self._later(records.renew_cache(self.redis, cached, s.cache_ttl_s))
            outcome = "hit"
        history = on and any(c.item.type == "episode" for c in candidates)  # rule M11
        return Recalled(items=ranked, memory_on=on, outcome=outcome, cached=cached,
                        similarity=reply.similarity if with_cache else None, duration_ms=ms, has_history=history)

    def _later(self, write: Coroutine[Any, Any, None]) -> None:
        """Rule M13: run a recall's write after the question's path (logged if it fails; a later recall
        only ranks with an older ``last_used_at``, a hit's entry may expire a little sooner)."""
        task = asyncio.ensure_future(write)
        self._after.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._after.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a write after the recall failed", error=repr(task.exception()))

    async def _wait_ahead(self, sent: RecallAhead) -> Answer:
        """The reply of the recall sent ahead (rule M13), waited for until its deadline: ``(reply, error,
        ms waited)``; error ``EXPIRED`` when its deadline had passed before and no reply is there."""
        started = time.perf_counter()
        left = (sent.deadline_at - utcnow()).total_seconds()
        try:
            got = await replies.wait_kept(self.redis, sent.request_id, left)
        except Exception as exc:  # noqa: BLE001 - recall is an aid: any failure means a task without it
            return None, f"{type(exc).__name__}: {exc}"[:300], round((time.perf_counter() - started) * 1000, 2)
        ms = round((time.perf_counter() - started) * 1000, 2)
        if got is None:
            return None, EXPIRED if left <= 0 else f"no reply within {self.settings.memory.memory_recall_timeout_s} s", ms
        return RecallReply.model_validate_json(got), None, ms

    async def _ask(self, event: QuestionAsked, with_memory: bool, with_cache: bool) -> tuple[RecallReply | None, str | None]:
        s = self.settings.memory
        request_id = uuid.uuid4().hex
        deadline = utcnow() + timedelta(seconds=s.memory_recall_timeout_s)
        request = recalls.request(s, event, request_id, with_memory, with_cache, deadline)
        try:
            await bus.publish(self.broker, topics.RETRIEVER_REQUESTS, request)
            got = await replies.wait(self.redis, request_id, s.memory_recall_timeout_s)
        except Exception as exc:  # noqa: BLE001 - recall is an aid: any failure means a task without it
            return None, f"{type(exc).__name__}: {exc}"[:300]
        if got is None:
            return None, f"no reply within {s.memory_recall_timeout_s} s"
        return RecallReply.model_validate_json(got), None

    async def remember(self, state: TaskState, items: list[MemoryItem], entry: CacheEntry | None) -> None:
        """Keep what the core decided ``state`` (a completed task) leaves for later (``announcing.remember``):
        merge ``items`` (facts, episode) into the user's memory in Redis (the truth; rule M1's merge needs
        the stored items), write ``entry`` to the semantic cache, then send both to the retriever for their
        vectors (a store write, rule K10)."""
        s, upserts, stale = self.settings.memory, [], []
        if items and state.user_id:
            now = utcnow()
            existing = await records.list_items(self.redis, state.tenant_id, state.user_id, now)
            upserts = memory.merge(existing, items, now)
            await records.put_items(self.redis, upserts)
            stale = memory.evicted(existing, upserts, s.memory_max_episodes)  # rule M16: their vectors go too
            if stale:
                await records.delete_items(self.redis, state.tenant_id, state.user_id, stale)
        if entry is not None:
            await records.put_cache(self.redis, entry, s.cache_ttl_s)
        if not upserts and entry is None:
            return
        request = MemoryIndexRequested(task_id=state.task_id, session_id=state.session_id, tenant_id=state.tenant_id,
                                       user_id=state.user_id, traceparent=state.traceparent, causation_id=state.cause_id,
                                       payload=MemoryIndexPayload(items=upserts, replaced=stale, cache=entry))
        await bus.publish(self.broker, topics.RETRIEVER_WRITES, request)  # a store write (rule K10)
