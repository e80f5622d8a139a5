"""The public agent events (``conduit.agent.events``, docs/events.md): built, kept, relayed.

A transition's ``Public`` effects become ``AgentEvent`` envelopes (``agent_event``) that are
written to the Redis stream ``PUBLIC_OUTBOX`` in the same Lua script as the checkpoint
(``StateStore.save``) or as the terminal client event (``StateStore.append_terminal``): a
process killed right after the save loses none of them (the transactional outbox, like the
client events). ``PublicRelay`` then publishes them to Kafka, oldest first, as CloudEvents in
binary mode (``contracts.cloudevents``), and deletes each entry once Kafka acked it.

One relay at a time keeps each task's events in order: a replica holds ``PUBLIC_RELAY``
(``lock_ttl_s`` seconds, renewed at most every ``block_ms``) while it relays; when it dies another replica's
relay takes over after the lock lapses and first republishes what was sent but not yet deleted
(delivery is at least once; consumers deduplicate on ``ce_id``). On Redis Cluster the outbox is one
stream per task shard, in the task's hash slot (rule O8), and the relay reads every shard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

from faststream.kafka import KafkaBroker
from redis.asyncio import Redis

from conduit.records import keys, slots
from conduit.runtime import bus
from contracts import cloudevents, topics
from contracts.events import AgentEvent

log = logging.getLogger("conduit.orchestrator.public")

OUTBOX = keys.PUBLIC_OUTBOX
LOCK = keys.PUBLIC_RELAY
CLUSTER_POLL_MS = 200
"""On Redis Cluster: milliseconds between two reads of the outbox shards when all were empty."""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0
"""
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


class PublicRelay:
    """Publishes ``PUBLIC_OUTBOX`` to ``conduit.agent.events`` while this replica holds ``LOCK``.

    Args:
        redis: asyncio Redis client (the blocking read takes one pooled connection).
        broker: a started KafkaBroker.
        owner: this replica's lock value (unique per process).
        block_ms: longest wait of one read for new entries (ms); also how often the lock is renewed.
        batch: entries published per pass.
        lock_ttl_s: seconds the lock outlives a relay that stopped renewing it (died).
    """

    def __init__(self, redis: Redis, broker: KafkaBroker, owner: str | None = None, block_ms: int = 1000,
                 batch: int = 100, lock_ttl_s: float = 10.0) -> None:
        self.redis, self.broker = redis, broker
        self.owner = owner or uuid.uuid4().hex
        self.block_ms, self.batch, self.lock_ttl_s = block_ms, batch, lock_ttl_s
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)
        self.published = 0
        """Entries this relay published (for tests and logs)."""
        self._renewed_at = float("-inf")
        self._sent: list[tuple[str, list[bytes]]] = []
        """Rule O11: (outbox, entry ids) published and not yet deleted: deleted in the next read's round trip."""

    async def hold(self) -> bool:
        """Take or renew the relay lock; True while this replica holds it. Rule O11: renewed at most every
        ``block_ms`` (a pass per event would renew it per event; it lives ``lock_ttl_s``, 10 times that)."""
        now = time.monotonic()
        if now - self._renewed_at < self.block_ms / 1000:
            return True
        held = bool(await self._renew(keys=[LOCK], args=[self.owner, int(self.lock_ttl_s * 1000)]))
        self._renewed_at = now if held else float("-inf")
        return held

    async def pump(self) -> int:
        """Publish the oldest waiting entries (waiting up to ``block_ms`` for one); return how many.

        An entry that does not parse is dropped with an error log. Raises what the publish
        raises (broker down): the entries stay for the next pass.
        """
        boxes = await self._read()
        entries = [entry for _, rows in boxes for entry in rows]
        if not entries:
            return 0
        events: list[AgentEvent] = []
        for _, fields in entries:
            try:
                events.append(AgentEvent.model_validate_json(fields[b"data"]))
            except Exception:  # noqa: BLE001 - a bad entry must not block the feed
                log.error("dropping an unreadable public outbox entry: %r", fields)
        # sends enter the producer in order (one partition per task keeps each task's order)
        await asyncio.gather(*(bus.publish(self.broker, topics.AGENT_EVENTS, e, headers=cloudevents.headers(e))
                               for e in events))
        self._sent = [(box, [entry_id for entry_id, _ in rows]) for box, rows in boxes]
        if slots.clustered():
            await self._delete_sent()
        self.published += len(events)
        return len(entries)

    async def _delete_sent(self) -> None:
        for box, ids in self._sent:
            await self.redis.xdel(box, *ids)
        self._sent = []

    async def _read(self) -> list[tuple[str, list]]:
        """``[(outbox key, entries)]``: the oldest ``batch`` entries of the outbox (waiting up to ``block_ms``);
        on Redis Cluster of each outbox shard (rule O8), read without blocking, then a short sleep when all are empty."""
        if not slots.clustered():  # rule O11: the last pass's deletion and this read in one round trip
            async with self.redis.pipeline(transaction=False) as pipe:
                for box, ids in self._sent:
                    pipe.xdel(box, *ids)
                pipe.xread({OUTBOX: "0-0"}, count=self.batch, block=self.block_ms)
                found = (await pipe.execute())[-1]
            self._sent = []
            return [(OUTBOX, found[0][1])] if found else []
        boxes = keys.all_public_outboxes()
        async with self.redis.pipeline(transaction=False) as pipe:
            for box in boxes:
                pipe.xrange(box, count=self.batch)
            found = await pipe.execute()
        got = [(box, rows) for box, rows in zip(boxes, found) if rows]
        if not got:
            await asyncio.sleep(min(self.block_ms, CLUSTER_POLL_MS) / 1000)
        return got

    async def run(self) -> None:
        """Forever: relay while holding the lock, else wait for it; a failed pass is retried after 1 s."""
        try:
            while True:
                try:
                    if await self.hold():
                        await self.pump()
                    else:
                        await asyncio.sleep(self.lock_ttl_s / 3)
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - Redis or Kafka briefly away: the entries wait
                    log.warning("public event relay pass failed; retrying", exc_info=True)
                    await asyncio.sleep(1.0)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._release(keys=[LOCK], args=[self.owner]))
