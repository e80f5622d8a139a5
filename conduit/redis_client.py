"""One way to open Redis for every service."""

from __future__ import annotations

from redis.asyncio import Redis

from conduit.settings import Settings


def make_redis(settings: Settings) -> Redis:
    """Return an asyncio Redis client for ``settings.redis()`` (bytes responses)."""
    # redis-py 8's asyncio pool allows only 100 connections by default, and every open
    # SSE stream holds one for its blocking XREAD (bench/sse_fanout.py found the limit)
    # redis-py 8 times socket reads out after 5 s by default, which cut SSE streams that
    # block in XREAD: the read timeout is a setting, kept above the SSE poll block
    return Redis.from_url(settings.redis(), decode_responses=False, health_check_interval=30,
                          max_connections=settings.redis_max_connections,
                          socket_timeout=settings.redis_socket_timeout_s)
