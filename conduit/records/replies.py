"""Replies of the retriever's request/reply calls (``/v1/search``, the memory recall) in Redis.

The caller publishes a request naming a ``request_id`` and BLPOPs ``keys.reply(request_id)`` (or, for a
recall sent ahead of its question, rule M13, BLMOVEs it onto itself, ``wait_kept``); the retriever LPUSHes
one JSON reply there, which expires after ``REPLY_TTL_S`` when nobody waits.
"""

from __future__ import annotations

from redis.asyncio import Redis

from conduit.records import keys, slots
from contracts.documents import REPLY_TTL_S


async def push(redis: Redis, request_id: str, body_json: str) -> None:
    """Hand the reply ``body_json`` to whoever waits for ``request_id`` (kept ``REPLY_TTL_S`` seconds)."""
    key = keys.reply(request_id)
    async with slots.atomic(redis) as pipe:
        pipe.lpush(key, body_json)
        pipe.expire(key, REPLY_TTL_S)
        await pipe.execute()


async def wait(redis: Redis, request_id: str, timeout_s: float) -> bytes | None:
    """The reply to ``request_id``, or None after ``timeout_s`` seconds without one."""
    popped = await redis.blpop([keys.reply(request_id)], timeout=timeout_s)
    return None if popped is None else popped[1]


async def wait_kept(redis: Redis, request_id: str, timeout_s: float) -> bytes | None:
    """Like ``wait``, but the reply stays in Redis (until ``REPLY_TTL_S``): a redelivered question whose
    recall was sent ahead of it (rule M13) reads it again. ``timeout_s`` <= 0 only looks (no wait)."""
    key = keys.reply(request_id)
    if timeout_s <= 0:
        return await redis.lindex(key, 0)
    return await redis.blmove(key, key, timeout_s, "LEFT", "RIGHT")
