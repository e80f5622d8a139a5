"""Control events on their way to an orchestrator: the re-send of an approval decision or a cancel
the bus lost (rule G5, docs/rules.md).

The gateway records each ``ApprovalDecided`` and ``TaskCancelled`` before it publishes it
(``record``); the orchestrator forgets it once it handled it from the bus (``forget``), and its
sweeper hands every record still there ``CONTROL_RESEND_S`` seconds later to the same handler
(``due``, ``load``). The embedded broker keeps topics in memory, so a decision it acked and lost in a
restart left the call waiting for an approval already given; handling is idempotent (a repeat of a
decision or a cancel changes nothing), so a late bus delivery is harmless.
"""

from __future__ import annotations

import time

from redis.asyncio import Redis

from conduit.records import keys, slots
from contracts.events import ApprovalDecided, TaskCancelled

CONTROL_RESEND_S = 5.0
"""Seconds after publishing before a control event the orchestrator has not handled is handled from its record."""
_KINDS: dict[str, type[ApprovalDecided] | type[TaskCancelled]] = {"ApprovalDecided": ApprovalDecided,
                                                                   "TaskCancelled": TaskCancelled}


async def record(redis: Redis, event: ApprovalDecided | TaskCancelled, ttl_s: int,
                 resend_s: float = CONTROL_RESEND_S) -> None:
    """Keep ``event`` (``ttl_s`` seconds) and its re-send ``resend_s`` seconds from now."""
    event_id = str(event.event_id)
    async with slots.atomic(redis) as pipe:
        pipe.set(keys.control(event_id), f"{type(event).__name__}\n{event.model_dump_json()}", ex=ttl_s)
        pipe.zadd(keys.CONTROLS_PENDING, {event_id: time.time() + resend_s})
        await pipe.execute()


async def due(redis: Redis, limit: int = 50) -> list[str]:
    """Event ids whose re-send is due."""
    raw = await redis.zrangebyscore(keys.CONTROLS_PENDING, "-inf", time.time(), start=0, num=limit)
    return [r.decode() if isinstance(r, bytes) else r for r in raw]


async def load(redis: Redis, event_id: str) -> ApprovalDecided | TaskCancelled | None:
    """The recorded event, or None when it expired or was forgotten."""
    raw = await redis.get(keys.control(event_id))
    if raw is None:
        return None
    kind, body = (raw.decode() if isinstance(raw, bytes) else raw).split("\n", 1)
    return _KINDS[kind].model_validate_json(body)


async def forget(redis: Redis, event_id: object) -> None:
    """Drop the event's record and re-send (it was handled); ``event_id`` as str or UUID."""
    event_id = str(event_id)
    async with slots.atomic(redis) as pipe:
        pipe.delete(keys.control(event_id))
        pipe.zrem(keys.CONTROLS_PENDING, event_id)
        await pipe.execute()
