"""Service liveness marks in Redis, read by readiness checks and the stack launcher.

Each running service process sets ``conduit:alive:{service}:{host}:{pid}`` with a
short TTL every ``every_s`` seconds; a key that expired means the process is gone.
The host name keeps replicas apart in containers, where every service is pid 1.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from redis.asyncio import Redis

from conduit.records import keys

log = logging.getLogger("conduit.runtime.liveness")


def alive_key(service: str, pid: int | None = None) -> str:
    """Liveness key of ``service`` in process ``pid`` (default: this process) on this host."""
    return keys.alive(service, socket.gethostname(), pid or os.getpid())


async def heartbeat(redis: Redis, service: str, every_s: float = 2.0) -> None:
    """Forever: mark ``service`` (this process) alive, TTL 3 x ``every_s`` seconds."""
    key = alive_key(service)
    while True:
        try:
            await redis.set(key, "1", ex=max(1, int(every_s * 3)))
        except Exception:  # noqa: BLE001 - Redis down: keep trying
            log.warning("liveness heartbeat to redis failed")
        await asyncio.sleep(every_s)


async def alive_services(redis: Redis) -> dict[str, int]:
    """Return ``{service: live process count}`` from the liveness keys."""
    counts: dict[str, int] = {}
    async for key in redis.scan_iter(match=keys.alive_pattern(), count=200):
        k = key.decode() if isinstance(key, bytes) else key
        service = k.split(":")[2]
        counts[service] = counts.get(service, 0) + 1
    return counts
