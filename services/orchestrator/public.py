"""The public agent events (``conduit.agent.events``, docs/events.md): built, kept, relayed.

A transition's ``Public`` effects become ``AgentEvent`` envelopes (``agent_event``) that are
written to the Redis stream ``PUBLIC_OUTBOX`` in the same Lua script as the checkpoint
(``StateStore.save``) or as the terminal client event (``StateStore.append_terminal``): a
process killed right after the save loses none of them (the transactional outbox, like the
client events). ``PublicRelay`` then publishes them to Kafka, oldest first, as CloudEvents in
binary mode (``contracts.cloudevents``), and deletes each entry once Kafka acked it.

One relay at a time keeps each task's events in order: a replica holds ``PUBLIC_RELAY``
(``lock_ttl_s`` seconds, renewed every pass) while it relays; when it dies another replica's
relay takes over after the lock lapses and first republishes what was sent but not yet deleted
(delivery is at least once; consumers deduplicate on ``ce_id``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from faststream.kafka import KafkaBroker
from redis.asyncio import Redis

from conduit.records import keys
from conduit.runtime import bus
from contracts import cloudevents, topics
from contracts.envelope import Envelope
from contracts.events import AgentEvent, AgentEventPayload
from services.orchestrator.agent.state import TaskState

log = logging.getLogger("conduit.orchestrator.public")

OUTBOX = keys.PUBLIC_OUTBOX
LOCK = keys.PUBLIC_RELAY

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0
"""
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


def parent_of(state: TaskState) -> Envelope:
    """The envelope header of the event that last moved ``state`` (parent of what the task sends).

    A checkpoint without a cause (written before causes were kept) gets a fixed id per task.
    """
    cause = state.cause_id or uuid.uuid5(uuid.NAMESPACE_URL, f"conduit:task:{state.task_id}")
    return Envelope(type="orchestrator.cause", event_id=cause, **state.envelope_fields())


def agent_event(state: TaskState, kind: str, fields: dict[str, Any]) -> AgentEvent:
    """The public ``AgentEvent`` of ``kind`` (``AgentEventPayload`` fields) for ``state``'s task; a
    worker's task (team mode) names its supervisor's task in ``parent_task_id``."""
    parent = state.child.parent_task_id if state.child else None
    return parent_of(state).child(AgentEvent, payload=AgentEventPayload(  # type: ignore[return-value]
        kind=kind, parent_task_id=parent, **fields))


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

    async def hold(self) -> bool:
        """Take or renew the relay lock; True while this replica holds it."""
        return bool(await self._renew(keys=[LOCK], args=[self.owner, int(self.lock_ttl_s * 1000)]))

    async def pump(self) -> int:
        """Publish the oldest waiting entries (waiting up to ``block_ms`` for one); return how many.

        An entry that does not parse is dropped with an error log. Raises what the publish
        raises (broker down): the entries stay for the next pass.
        """
        found = await self.redis.xread({OUTBOX: "0-0"}, count=self.batch, block=self.block_ms)
        entries = found[0][1] if found else []
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
        await self.redis.xdel(OUTBOX, *[entry_id for entry_id, _ in entries])
        self.published += len(events)
        return len(entries)

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
