"""One way to open Redis for every service."""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis

from conduit.settings import Settings


def make_redis(settings: Settings) -> Redis:
    """Return an asyncio Redis client for ``settings.redis()`` (bytes responses).

    The pool is bounded (``redis_max_connections``) and blocking: when every connection
    is busy a command waits for one (up to ``redis_socket_timeout_s`` seconds) instead of
    opening more. SSE streams do not hold connections (the gateway's ``StreamHub``
    reads every stream on its own client), so a burst of requests no longer grows a
    pool that never shrinks (bench/sse_fanout.py saw 783 connections unbounded).
    """
    # redis-py 8 times socket reads out after 5 s by default, which cut the hub's blocking
    # XREAD: the read timeout is a setting, kept above the SSE poll block
    pool = BlockingConnectionPool.from_url(settings.redis(), decode_responses=False, health_check_interval=30,
                                           max_connections=settings.redis_max_connections,
                                           timeout=settings.redis_socket_timeout_s,
                                           socket_timeout=settings.redis_socket_timeout_s)
    return Redis.from_pool(pool)  # closing the client closes its pool
