"""Cross-cutting consumer work as FastStream middlewares (``faststream.BaseMiddleware.consume_scope``).

Every message a Conduit consumer receives is first decoded into a ``Delivery`` (the raw
record and its parsed envelope, or why it did not parse), then passes, outermost first:

1. ``MetricsMiddleware``: times the handling and counts its outcome
   (``conduit_consumer_messages_total{consumer, outcome}``: ok, error, invalid, dead_letter);
2. ``TracingMiddleware``: a CONSUMER span continuing the record's ``traceparent`` and
   ``tracestate`` headers (or the envelope's traceparent), so logs inside carry ``task_id`` and
   ``trace_id`` (rule O7; tracing off: only the log context, rule O5);
3. ``DeadLetterMiddleware``: a message that does not parse, or whose handler raised on its
   ``MAX_ATTEMPTS``-th delivery (rule: 5), goes to ``conduit.dead-letter`` and is acknowledged,
   so one poison message never stops a consumer; any other failure is raised again, so
   FastStream's ``NACK_ON_ERROR`` policy redelivers it;
4. ``AttemptsMiddleware``: counts a failed delivery in Redis (``keys.attempts``, kept one hour,
   shared by every replica of the group) and logs it.

``consumer_middlewares(config)`` returns the four factories in that order for a
``KafkaRouter(middlewares=...)``; ``conduit.runtime.bus.subscribe`` wires them.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition
from faststream import BaseMiddleware
from pydantic import TypeAdapter, ValidationError

from conduit.records import keys
from conduit.runtime import metrics, tracing
from contracts.envelope import Envelope
from contracts.events import DeadLetter, DeadLetterPayload

if TYPE_CHECKING:
    from faststream.message import StreamMessage
    from redis.asyncio import Redis

log = logging.getLogger("conduit.runtime.bus")

MAX_ATTEMPTS = 5
"""Deliveries of one event that raise before it is dead-lettered."""
ATTEMPTS_TTL_S = 3600
"""Seconds a message's failed-delivery count is kept."""


@dataclass
class Delivery:
    """One received record as the middlewares and the handler see it.

    ``event`` is the parsed envelope, or None when the body did not parse (``invalid``
    says why). ``attempts`` is set by ``AttemptsMiddleware`` after a failure;
    ``outcome`` (ok, error, invalid, dead_letter) is what ``MetricsMiddleware`` counts.
    """

    raw: bytes
    topic: str
    partition: int | None
    offset: int | None
    key: str | None
    traceparent: str | None
    tracestate: str | None = None
    event: Envelope | None = None
    invalid: str | None = None
    attempts: int = 0
    outcome: str = "ok"


@dataclass(frozen=True)
class ConsumerConfig:
    """What the middlewares of one subscription need.

    Attributes:
        consumer: consumer name (metrics label, dead-letter ``consumer``, attempts key).
        group_id: Kafka consumer group (span attribute).
        topics: subscribed topics (the first names a record whose topic is unknown).
        redis: holds the attempt counts.
        dead_letter: publishes a ``DeadLetter`` to ``conduit.dead-letter`` (``bus.publish``, bound).
        max_attempts: failed deliveries before dead-lettering (``MAX_ATTEMPTS``).
    """

    consumer: str
    group_id: str
    redis: "Redis"
    dead_letter: Callable[[DeadLetter], Awaitable[None]]
    max_attempts: int = MAX_ATTEMPTS


def make_decoder(model: Any, default_topic: str) -> Callable[..., Awaitable[Delivery]]:
    """FastStream decoder: ``KafkaMessage -> Delivery`` validated into ``model``; never raises.

    A body that is not a valid ``model`` must reach the dead-letter path, not fail in a decoder.
    """
    adapter = TypeAdapter(model)

    async def decode(msg: "StreamMessage[Any]", _default: Any = None) -> Delivery:
        record = getattr(msg, "raw_message", None)
        key = getattr(record, "key", None)
        body = msg.body if isinstance(msg.body, bytes | bytearray) else str(msg.body).encode()
        delivery = Delivery(
            raw=bytes(body), topic=getattr(record, "topic", None) or default_topic,
            partition=getattr(record, "partition", None), offset=getattr(record, "offset", None),
            key=key.decode("utf-8", "replace") if isinstance(key, bytes) else key,
            traceparent=(msg.headers or {}).get("traceparent"), tracestate=(msg.headers or {}).get("tracestate"))
        try:
            delivery.event = adapter.validate_json(delivery.raw)
        except ValidationError as exc:
            delivery.invalid = f"invalid message: {exc.errors(include_url=False)[:3]}"
        return delivery

    return decode


class _ConsumerMiddleware(BaseMiddleware):
    """A middleware bound to one subscription's ``ConsumerConfig``."""

    def __init__(self, msg: Any, /, *, context: Any, config: ConsumerConfig) -> None:
        super().__init__(msg, context=context)
        self.config = config

    @classmethod
    def factory(cls, config: ConsumerConfig) -> Callable[..., "_ConsumerMiddleware"]:
        """The ``(msg, *, context) -> middleware`` callable FastStream instantiates per message."""
        return functools.partial(cls, config=config)


class MetricsMiddleware(_ConsumerMiddleware):
    """Times each message's handling and counts its ``Delivery.outcome`` (``error`` when it raised)."""

    async def consume_scope(self, call_next: Any, msg: "StreamMessage[Any]") -> Any:
        delivery: Delivery = await msg.decode()
        started = time.perf_counter()
        try:
            return await call_next(msg)
        except Exception:
            delivery.outcome = "error"
            raise
        finally:
            metrics.consumer_handled(self.config.consumer, delivery.outcome, time.perf_counter() - started)
            _record_lag(self.config.consumer, msg, delivery)


def _record_lag(consumer: str, msg: Any, delivery: Delivery) -> None:
    """Set ``conduit_consumer_lag_messages`` from the consumer's high watermark of the record's partition
    (aiokafka keeps it from the last fetch); a record without partition or offset sets nothing."""
    client = getattr(msg, "consumer", None)
    if client is None or delivery.partition is None or delivery.offset is None:
        return
    try:
        highwater = client.highwater(TopicPartition(delivery.topic, delivery.partition))
    except Exception:  # noqa: BLE001 - an unassigned partition (rebalance): no sample this time
        return
    metrics.consumer_lag(consumer, delivery.topic, delivery.partition, highwater, delivery.offset)


class TracingMiddleware(_ConsumerMiddleware):
    """Runs the rest of the chain in a CONSUMER span (none for a message that did not parse)."""

    async def consume_scope(self, call_next: Any, msg: "StreamMessage[Any]") -> Any:
        delivery: Delivery = await msg.decode()
        event = delivery.event
        if event is None:
            return await call_next(msg)
        # rule O7: the record's W3C headers (else the envelope's traceparent) are the parent
        with tracing.span(f"{delivery.topic} process", delivery.traceparent or event.traceparent,
                          kind=tracing.SpanKind.CONSUMER, task_id=event.task_id,
                          tracestate=delivery.tracestate if delivery.traceparent else None,
                          **{"messaging.system": "kafka", "messaging.operation.type": "process",
                             "messaging.destination.name": delivery.topic,
                             "messaging.consumer.group.name": self.config.group_id,
                             "conduit.event_type": event.type}):
            return await call_next(msg)


class DeadLetterMiddleware(_ConsumerMiddleware):
    """Dead-letters (and acknowledges) an invalid message or one that failed ``max_attempts`` times."""

    async def consume_scope(self, call_next: Any, msg: "StreamMessage[Any]") -> Any:
        delivery: Delivery = await msg.decode()
        if delivery.event is None:
            await self._dead_letter(delivery, delivery.invalid or "invalid message")
            delivery.outcome = "invalid"
            return None
        try:
            return await call_next(msg)
        except Exception as exc:
            if delivery.attempts < self.config.max_attempts:
                raise  # redelivered (NACK_ON_ERROR)
            await self._dead_letter(delivery, f"{type(exc).__name__}: {exc}")
            delivery.outcome = "dead_letter"
            return None

    async def _dead_letter(self, delivery: Delivery, error: str) -> None:
        """Publish ``delivery`` as a ``DeadLetter`` (raw body cut at 100,000 bytes, error at 2,000 chars)."""
        event = delivery.event
        dead = DeadLetter(
            task_id=event.task_id if event else "unknown",
            session_id=event.session_id if event else "unknown",
            payload=DeadLetterPayload(
                topic=delivery.topic, partition=delivery.partition, offset=delivery.offset, key=delivery.key,
                consumer=self.config.consumer, error=error[:2000],
                raw=delivery.raw[:100_000].decode("utf-8", "replace")))
        await self.config.dead_letter(dead)
        metrics.dead_lettered(self.config.consumer, "invalid" if event is None else "failed")
        log.warning("dead-lettered message from %s: %s", delivery.topic, error[:300])


class AttemptsMiddleware(_ConsumerMiddleware):
    """Counts a failed delivery of the message's event in Redis and logs it; the error goes on."""

    async def consume_scope(self, call_next: Any, msg: "StreamMessage[Any]") -> Any:
        delivery: Delivery = await msg.decode()
        try:
            return await call_next(msg)
        except Exception:
            assert delivery.event is not None  # DeadLetterMiddleware stops invalid messages first
            key = keys.attempts(self.config.consumer, str(delivery.event.event_id))
            async with self.config.redis.pipeline(transaction=False) as pipe:
                pipe.incr(key).expire(key, ATTEMPTS_TTL_S)
                delivery.attempts, _ = await pipe.execute()
            log.exception("handler %s failed on %s (attempt %s)", self.config.consumer,
                          delivery.event.event_id, delivery.attempts)
            raise


def consumer_middlewares(config: ConsumerConfig) -> tuple[Callable[..., BaseMiddleware], ...]:
    """The middleware factories of one subscription, outermost first (see the module docstring); starts the
    consumer's dead-letter series at 0."""
    metrics.consumer_subscribed(config.consumer)
    return tuple(m.factory(config) for m in (MetricsMiddleware, TracingMiddleware, DeadLetterMiddleware,
                                             AttemptsMiddleware))
