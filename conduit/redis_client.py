"""One way to open Redis for every service."""

from __future__ import annotations

from redis.asyncio import Redis

from conduit.settings import Settings


def make_redis(settings: Settings) -> Redis:
    """Return an asyncio Redis client for ``settings.redis()`` (bytes responses)."""
    # redis-py 8's asyncio pool allows only 100 connections by default, and every open
    # SSE stream holds one for its blocking XREAD (bench/sse_fanout.py found the limit)
    return Redis.from_url(settings.redis(), decode_responses=False, health_check_interval=30,
                          max_connections=settings.redis_max_connections)
