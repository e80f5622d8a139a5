"""Pending approvals in Redis: written by the orchestrator, read by the gateway.

Key ``conduit:approval:{task_id}:{call_id}`` holds a ``contracts.api.ApprovalRecord``
(TTL: its expiry plus an hour) so any gateway replica can validate a decision
before it goes on the bus; the orchestrator stays the authority.
"""

from __future__ import annotations

from datetime import UTC, datetime

from redis.asyncio import Redis
from conduit.records import keys

from contracts.api import ApprovalRecord


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
