"""Pending approvals in Redis: written by the orchestrator, read by the gateway.

Key ``conduit:approval:{task_id}:{call_id}`` holds a ``contracts.api.ApprovalRecord``
(TTL: its expiry plus an hour) so any gateway replica can validate a decision
before it goes on the bus; the orchestrator stays the authority.

Rule: one decision per call. The gateway takes ``claim`` (``SET NX`` of
``conduit:approval:{task_id}:{call_id}:decision``) before it publishes, so a second decision
is refused (409) even while the orchestrator has not yet recorded the first.
"""

from __future__ import annotations

from datetime import UTC, datetime

from redis.asyncio import Redis

from conduit.records import keys, slots
from contracts.api import ApprovalRecord

DECIDED = {"approve": "approved", "reject": "rejected", "edit": "edited"}
"""The record status each decision leads to."""


def key(task_id: str, call_id: str) -> str:
    """Redis key of one approval record."""
    return keys.approval(task_id, call_id)


async def save(redis: Redis, record: ApprovalRecord) -> None:
    """Write the record; it lives until an hour after it expires."""
    ttl = max(60, int((record.expires_at - datetime.now(UTC)).total_seconds()) + 3600)
    await redis.set(key(record.task_id, record.call_id), record.model_dump_json(), ex=ttl)


async def load(redis: Redis, task_id: str, call_id: str) -> ApprovalRecord | None:
    """The record or None."""
    raw = await redis.get(key(task_id, call_id))
    return ApprovalRecord.model_validate_json(raw) if raw else None


async def claim(redis: Redis, record: ApprovalRecord, decision: str) -> str | None:
    """Take the one decision of ``record``'s call: None when taken now, else the earlier decision's
    status (``approved``, ``rejected``, ``edited``). The claim lives as long as the record."""
    name = keys.approval_decision(record.task_id, record.call_id)
    ttl = max(60, int((record.expires_at - datetime.now(UTC)).total_seconds()) + 3600)
    async with slots.atomic(redis) as pipe:
        pipe.set(name, DECIDED[decision], nx=True, ex=ttl).get(name)
        taken, current = await pipe.execute()
    if taken:
        return None
    return current.decode() if isinstance(current, bytes) else str(current)


async def release(redis: Redis, task_id: str, call_id: str) -> None:
    """Give a claim back (its decision could not be published)."""
    await redis.delete(keys.approval_decision(task_id, call_id))
