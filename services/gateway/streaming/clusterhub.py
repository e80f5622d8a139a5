"""The gateway's stream hub on Redis Cluster (rule O9, docs/operations.md "Redis Cluster").

A multi-key ``XREAD`` may only name streams of one hash slot, and a blocking one would hold a
connection to one node. ``ClusterHub`` keeps ``StreamHub``'s subscriptions, buffers, catch-up reads
and errors, and replaces its one blocking read by rounds of non-blocking reads: one
``XREAD COUNT <count> STREAMS <logs of one shard...>`` per task shard that has subscribers (the
task logs of a shard share its hash tag, rule O8), sent as one pipeline (one round trip per node).
A round that read nothing waits ``poll_s`` seconds, or less when a new task is subscribed; with no
subscriber it waits for one. So an event reaches its streams within about ``poll_s`` (20 ms) of its
append instead of at once, and the hub holds one connection per node only during a round.
"""

from __future__ import annotations

import asyncio

from redis.exceptions import RedisError

from conduit.records import slots
from services.gateway.streaming.hub import StreamHub, _Topic

POLL_S = 0.02
"""Seconds between two read rounds that found nothing."""


class ClusterHub(StreamHub):
    """``StreamHub`` for Redis Cluster (``reader``: a ``RedisCluster`` client); see the module doc.

    Same arguments as ``StreamHub``; ``block_ms`` is the longest wait without subscribers.
    """

    def __init__(self, *args, poll_s: float = POLL_S, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.poll_s = poll_s
        self._changed = asyncio.Event()

    def _wake(self) -> None:
        """A new task to read: end the current wait at once."""
        self._changed.set()

    async def _round(self) -> tuple[list, dict[bytes, _Topic]]:
        """One read of every subscribed log: ``(rows [(key, entries)], topics by key)``. Raises ``RedisError``."""
        groups: dict[int, dict[bytes, _Topic]] = {}
        for task_id, topic in self._topics.items():
            groups.setdefault(slots.shard(task_id), {})[topic.key] = topic
        read = {key: topic for group in groups.values() for key, topic in group.items()}
        if not groups:
            return [], read
        async with self.reader.pipeline(transaction=False) as pipe:
            for group in groups.values():
                pipe.xread({key: b"%d-0" % topic.cursor for key, topic in group.items()}, count=self.count)
            replies = await pipe.execute()
        rows = []
        for reply in replies:
            if reply:
                rows.extend(reply.items() if isinstance(reply, dict) else reply)
        return rows, read

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            self._changed.clear()
            try:
                rows, read = await self._round()
            except RedisError as exc:
                self._read_failed(exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            self.rounds += 1
            backoff = 0.1
            if rows:
                self._dispatch(rows, read)
                continue
            wait = self.poll_s if self._topics else self.block_ms / 1000
            try:
                await asyncio.wait_for(self._changed.wait(), wait)
            except TimeoutError:
                pass
