"""Hash-slot placement of Conduit's Redis keys on Redis Cluster (rule O8, docs/operations.md "Redis Cluster").

On one Redis node (the default) nothing here changes a key name. ``configure(N)`` (called by
``conduit.runtime.redis_client.make_redis`` when ``CONDUIT_REDIS_CLUSTER`` is on) makes
``conduit.records.keys`` put a hash tag ``{sN}`` in every key of a task and in the shard copy of each
task-wide set the task's scripts write, so each script's keys share one hash slot.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

_shards = 0
"""0: one Redis node, the key names above; N > 0: Redis Cluster with N task shards (rule O8, ``configure``)."""


def configure(cluster_shards: int) -> None:
    """Name keys for Redis Cluster with ``cluster_shards`` task shards (0: one node, the names as documented).

    Rule O8 (docs/operations.md, "Redis Cluster"): a Lua script touches keys of one hash slot only, so
    every key of a task (checkpoint, event log and its counters, record, question, cancel flag,
    approvals) and the shard of each task-wide set it writes in the same script (leases, tool
    deadlines, the public outbox) carry the hash tag ``{sN}`` of the task's shard
    ``N = crc32(task id) % cluster_shards``. Called once per process by ``make_redis``."""
    global _shards
    _shards = max(0, int(cluster_shards))


def clustered() -> bool:
    """True when keys are named for Redis Cluster (``configure`` was given shards)."""
    return _shards > 0


def shard(name: str) -> int:
    """The shard (0..N-1) of a task id or idempotency key; 0 on one node."""
    return zlib.crc32(name.encode()) % _shards if _shards else 0


def tag(name: str) -> str:
    """``""`` on one node, else ``":{sN}"``: the hash tag of ``name``'s shard (rule O8)."""
    return f":{{s{shard(name)}}}" if _shards else ""


def sharded(base: str) -> list[str]:
    """Every shard's copy of the task-wide key ``base`` (``[base]`` on one node)."""
    return [f"{base}:{{s{n}}}" for n in range(_shards)] if _shards else [base]


def shard_of(base: str, name: str) -> str:
    """The copy of ``base`` in ``name``'s shard (``base`` on one node)."""
    return f"{base}:{{s{shard(name)}}}" if _shards else base


def atomic(redis: Any) -> Any:
    """A pipeline for writes that belong together: ``MULTI``/``EXEC`` on one node; on Redis Cluster, where a
    transaction may only touch one hash slot, a plain pipeline sent in order, one batch per node (rule O9:
    atomic per key, not across keys; each caller writes the record others find last, see docs/operations.md)."""
    return redis.pipeline(transaction=not clustered())


async def zrange_due(redis: Any, zsets: list[str], limit: int) -> list[str]:
    """Members of the sorted sets ``zsets`` (the shards of one task-wide set) whose score is <= now
    (epoch seconds), at most ``limit`` per set, as ``str``; one round trip per node."""
    now = time.time()
    async with redis.pipeline(transaction=False) as pipe:
        for z in zsets:
            pipe.zrangebyscore(z, "-inf", now, start=0, num=limit)
        found = await pipe.execute()
    return [r.decode() if isinstance(r, bytes) else r for rows in found for r in rows]


async def mget(redis: Any, names: list[str]) -> list[Any]:
    """``MGET names`` (values in order, None where missing); on Redis Cluster one ``MGET`` per hash slot
    (``mget_nonatomic``: each value as of its own read, rule O9)."""
    if not names:
        return []
    return await (redis.mget_nonatomic(names) if clustered() else redis.mget(names))
