"""The memory recall request (rules M8, M13, docs/agent-rules.md): its shape, and the one the gateway
sends beside a question so that the retriever's search runs while the question travels.

- ``memory_on``: whether long-term memory applies to a tenant's user (``memory_off_tenants``).
- ``request``: a ``MemoryRecallRequested`` for a question (the orchestrator's own and the gateway's).
- ``ahead``: rule M13's decision at the gateway, from rule M8's marks (``records.memory.recall_marks``,
  read beside the gateway's other reads): what to ask for, or None. It may ask for more than the
  orchestrator will use (rule V5's relative years are not checked here), and for less when it cannot
  know (a first turn of a session the client named): the orchestrator still decides (rule M8), uses
  only what it decided, and asks itself for what the gateway did not ask for.
- ``send_ahead``: publish it; a failure is logged, never the question's.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from faststream.kafka import KafkaBroker

from conduit.runtime import bus
from conduit.runtime.settings import MemorySettings
from contracts import topics
from contracts.envelope import utcnow
from contracts.events import QuestionAsked, RecallAhead
from contracts.memory import MemoryRecallPayload, MemoryRecallRequested

log = logging.getLogger("conduit.runtime.recalls")

RECALL_CANDIDATES = 20
"""Items the retriever returns by relevance before the ranking picks ``memory_recall_k``."""


def memory_on(memory: MemorySettings, tenant_id: str, user_id: str | None) -> bool:
    """Long-term memory applies to this tenant's user (``memory_off_tenants``; ``*``: no tenant)."""
    off = memory.memory_off_tenants
    return bool(user_id) and tenant_id not in off and "*" not in off


def request(memory: MemorySettings, event: QuestionAsked, request_id: str, with_memory: bool, with_cache: bool,
            deadline_at: datetime) -> MemoryRecallRequested:
    """The recall of ``event``'s question: the user's best ``RECALL_CANDIDATES`` items (``with_memory``) and
    the tenant's cached answer at cosine >= ``cache_min_similarity`` (``with_cache``); the retriever drops it
    past ``deadline_at`` (UTC) and LPUSHes its ``RecallReply`` to ``keys.reply(request_id)``."""
    return MemoryRecallRequested(
        task_id=event.task_id, session_id=event.session_id, tenant_id=event.tenant_id, user_id=event.user_id,
        traceparent=event.traceparent, causation_id=event.event_id,
        payload=MemoryRecallPayload(request_id=request_id, query=event.payload.question, with_memory=with_memory,
                                    with_cache=with_cache, limit=RECALL_CANDIDATES,
                                    min_similarity=memory.cache_min_similarity, deadline_at=deadline_at))


def ahead(memory: MemorySettings, tenant_id: str, user_id: str | None, marks: tuple[bool, bool], new_session: bool,
          use_cache: bool, scoped: bool) -> RecallAhead | None:
    """Rule M13: the recall the gateway sends beside a question, or None (nothing could come back, rule M8).

    ``marks``: ``(has_items, tenant_cached)`` (``records.memory.recall_marks``); ``new_session``: the
    question opens a session (the only first turn the gateway knows without reading the session's turns;
    rule C1); ``use_cache`` False: ``Cache-Control: no-cache``; ``scoped``: rule Q4 (no cache).
    """
    with_memory = memory_on(memory, tenant_id, user_id) and memory.memory_recall_k > 0 and marks[0]
    with_cache = memory.cache_enabled and use_cache and new_session and not scoped and marks[1]
    if not (with_memory or with_cache):
        return None
    return RecallAhead(request_id=uuid.uuid4().hex, with_memory=with_memory, with_cache=with_cache,
                       deadline_at=utcnow() + timedelta(seconds=memory.memory_recall_timeout_s))


async def send_ahead(broker: KafkaBroker, memory: MemorySettings, sent: RecallAhead, event: QuestionAsked) -> None:
    """Publish the recall ``sent`` of the question ``event`` (rule M13; ``event`` need not be published yet:
    the gateway sends it before its own writes). Never raises: after a failed publish the orchestrator waits
    for its reply until ``sent.deadline_at`` and runs without it, as after any lost recall (fail-open)."""
    try:
        await bus.publish(broker, topics.RETRIEVER_REQUESTS, request(
            memory, event, sent.request_id, sent.with_memory, sent.with_cache, sent.deadline_at))
    except Exception as exc:  # noqa: BLE001 - an aid: the question goes on without it
        log.warning("the recall sent ahead of task %s failed: %r", event.task_id, exc)
