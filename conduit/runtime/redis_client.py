"""One way to open Redis for every service."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import BlockingConnectionPool, Connection, Redis
from redis.exceptions import TimeoutError as RedisTimeoutError

from conduit.runtime.settings import Settings


class InlineSendConnection(Connection):
    """redis-py's TCP ``Connection``, sending each command inline under ``asyncio.timeout``.

    With ``socket_timeout`` set, redis-py 8 sends through ``asyncio.wait_for``, which on
    Python 3.11 wraps the write in a new Task: the bytes leave only when the event loop
    next gets to that task, after whatever else is ready. On the orchestrator's first
    ``answer.delta`` that put ~1.5 ms between the append and Redis (docs/benchmarks.md,
    "Where the time goes"). Here the same send runs in the caller's task, bounded by the
    same ``socket_timeout`` (seconds); a send that times out raises redis-py's
    ``TimeoutError`` as before, and redis-py's own handling (disconnect on failure) is kept.
    """

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        """Send ``command`` (bytes or chunks) within ``socket_timeout`` seconds.

        Raises ``redis.exceptions.TimeoutError`` when the send (health check included)
        takes longer, ``ConnectionError`` as redis-py does.
        """
        timeout = self.socket_timeout
        if not timeout:
            return await super().send_packed_command(command, check_health)
        self.socket_timeout = None  # redis-py then writes inline; the timeout is ours
        try:
            async with asyncio.timeout(timeout):
                await super().send_packed_command(command, check_health)
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        finally:
            self.socket_timeout = timeout


def make_redis(settings: Settings, client_name: str | None = None) -> Redis:
    """Return an asyncio Redis client for ``settings.redis()`` (bytes responses).

    ``client_name``: the ``CLIENT SETNAME`` of every connection of the pool (a tool service's
    owner name: its connections are its liveness, rule T8, ``conduit.runtime.owners``).

    The pool is bounded (``redis_max_connections``) and blocking: when every connection
    is busy a command waits for one (up to ``redis_socket_timeout_s`` seconds) instead of
    opening more. SSE streams do not hold connections (the gateway's ``StreamHub``
    reads every stream on its own client), so a burst of requests no longer grows a
    pool that never shrinks (bench/sse_fanout.py saw 783 connections unbounded).
    """
    # redis-py 8 times socket reads out after 5 s by default, which cut the hub's blocking
    # XREAD: the read timeout is a setting, kept above the SSE poll block
    url = settings.redis()
    # plain TCP only: unix:// and rediss:// keep redis-py's own connection classes
    inline: dict[str, Any] = {"connection_class": InlineSendConnection} if url.startswith("redis://") else {}
    pool = BlockingConnectionPool.from_url(url, decode_responses=False, health_check_interval=30, **inline,
                                           max_connections=settings.redis_max_connections,
                                           **({"client_name": client_name} if client_name else {}),
                                           timeout=settings.redis_socket_timeout_s,
                                           socket_timeout=settings.redis_socket_timeout_s)
    return Redis.from_pool(pool)  # closing the client closes its pool
