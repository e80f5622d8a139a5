"""Service liveness marks in Redis, read by readiness checks and the stack launcher.

Each running service process sets ``conduit:alive:{service}:{pid}`` with a short
TTL every ``every_s`` seconds; a key that expired means the process is gone.
"""

from __future__ import annotations

import asyncio
import logging
import os

from redis.asyncio import Redis

log = logging.getLogger("conduit.liveness")


async def heartbeat(redis: Redis, service: str, every_s: float = 2.0) -> None:
    """Forever: mark ``service`` (this pid) alive, TTL 3 x ``every_s`` seconds."""
    key = f"conduit:alive:{service}:{os.getpid()}"
    while True:
        try:
            await redis.set(key, "1", ex=max(1, int(every_s * 3)))
        except Exception:  # noqa: BLE001 - Redis down: keep trying
            log.warning("liveness heartbeat to redis failed")
        await asyncio.sleep(every_s)


async def alive_services(redis: Redis) -> dict[str, int]:
    """Return ``{service: live process count}`` from the liveness keys."""
    counts: dict[str, int] = {}
    async for key in redis.scan_iter(match="conduit:alive:*", count=200):
        k = key.decode() if isinstance(key, bytes) else key
        service = k.split(":")[2]
        counts[service] = counts.get(service, 0) + 1
    return counts
