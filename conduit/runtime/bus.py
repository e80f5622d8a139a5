"""Kafka plumbing shared by every service: broker, topics, publishing, safe consumers.

- ``make_broker``: a FastStream ``KafkaBroker`` for the configured cluster.
- ``ensure_topics``: create Conduit's topics with the configured partition count.
- ``publish``: send one contract ``Envelope`` keyed by ``task_id`` (ordering per task).
- ``subscribe``: register a handler with at-least-once delivery. FastStream's default
  ack policy (ACK_FIRST) commits the offset before the handler runs, so a crash
  mid-handler would lose the message; Conduit uses ``NACK_ON_ERROR`` so the offset
  is committed only after the handler returns, and a raised error redelivers.
  A message that cannot be parsed, or fails ``max_attempts`` times, is sent to the
  dead-letter topic and acknowledged, so one poison message never stops a consumer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from pydantic import TypeAdapter, ValidationError
from redis.asyncio import Redis

from conduit.runtime import metrics, tracing
from conduit.runtime.settings import Settings
from contracts import topics
from contracts.envelope import Envelope
from contracts.events import DeadLetter, DeadLetterPayload

log = logging.getLogger("conduit.runtime.bus")

E = TypeVar("E", bound=Envelope)
Handler = Callable[[Any], Awaitable[None]]

MAX_ATTEMPTS = 5
"""Deliveries of one event that raise before it is dead-lettered."""


def make_broker(settings: Settings, client_id: str) -> KafkaBroker:
    """Return a FastStream KafkaBroker for ``settings.bootstrap_servers()``.

    Produces with ``acks=all`` so a published event is durable before
    ``publish`` returns; the idempotent producer is a setting
    (``kafka_idempotent_producer``) because tansu 0.6.0 rejects InitProducerId.
    """
    return KafkaBroker(
        settings.bootstrap_servers(),
        graceful_timeout=settings.tool_timeout_s + 5,  # in-flight handlers may finish a tool call on SIGTERM
        client_id=client_id,
        acks="all",
        enable_idempotence=settings.kafka_idempotent_producer,
        logger=logging.getLogger(f"conduit.{client_id}.faststream"),
        log_level=logging.DEBUG,
        # no FastDepends: handlers take the message body; with it, resolving the ``KafkaMessage``
        # annotation (a sync ``Context`` field) hopped to a worker thread on every message
        apply_types=False,
    )


async def ensure_topics(settings: Settings, names: tuple[str, ...] = topics.ALL_TOPICS) -> None:
    """Create Conduit's topics with ``settings.kafka_partitions`` partitions.

    Existing topics are left alone (tansu answers error 36 in the response, real
    Kafka raises TopicAlreadyExistsError per topic: both are ignored).
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers(), client_id="conduit-admin")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [n for n in names if n not in existing]
        if missing:
            try:
                await admin.create_topics(
                    [NewTopic(name=n, num_partitions=settings.kafka_partitions, replication_factor=1) for n in missing]
                )
            except Exception as exc:  # noqa: BLE001 - already exists races are fine
                log.info("create_topics: %s", exc)
    finally:
        await admin.close()


async def publish(broker: KafkaBroker, topic: str, event: Envelope) -> None:
    """Publish ``event`` to ``topic`` keyed by its ``task_id`` and wait for the broker's ack.

    Headers carry ``type`` and ``traceparent`` so consumers and tracing can route
    without parsing the body. The publish runs in a PRODUCER span continuing the
    active span (a consumer's) or the envelope's ``traceparent``; the header
    carries that span's traceparent, so the consumer's span is its child.
    """
    headers = {"type": event.type, "content-type": "application/json"}
    parent = tracing.current_traceparent(event.traceparent)
    body = event.model_dump_json().encode("utf-8")
    if parent is None:
        await broker.publish(body, topic, key=topics.partition_key(event.task_id), headers=headers)
        return
    with tracing.span(f"{topic} publish", parent, kind=tracing.SpanKind.PRODUCER, task_id=event.task_id,
                      **{"messaging.system": "kafka", "messaging.destination.name": topic,
                         "conduit.event_type": event.type}) as tp:
        headers["traceparent"] = tp
        await broker.publish(body, topic, key=topics.partition_key(event.task_id), headers=headers)


async def _raw_body(msg: KafkaMessage, _default: Any = None) -> bytes:
    """FastStream decoder that hands the handler the body bytes as received (it is validated there,
    and a body that is not JSON must reach the dead-letter path instead of failing in a decoder)."""
    return msg.body


def subscribe(
    broker: KafkaBroker,
    settings: Settings,
    redis: Redis,
    *,
    topic: str | tuple[str, ...],
    group_id: str,
    model: Any,
    handler: Handler,
    consumer_name: str,
    max_workers: int = 1,
) -> None:
    """Register ``handler`` for ``topic`` (one or several topics) in consumer group ``group_id``.

    One subscriber per service keeps group joins to one (each join costs seconds
    on tansu) and gives every member of a group identical subscriptions.

    ``model`` is a pydantic model or an annotated union; the raw message is
    validated into it before ``handler`` is called. Delivery is at least once
    (``AckPolicy.NACK_ON_ERROR``): handlers must be idempotent. Parse failures
    and events that raised ``MAX_ATTEMPTS`` times go to ``topics.DEAD_LETTER``.

    ``max_workers`` > 1 (one topic only) starts that many consumers in the group, each
    handling one message at a time (FastStream's ``ConcurrentBetweenPartitionsSubscriber``):
    at most ``max_workers`` handlers run at once, offsets still commit after each handler,
    and waiting messages stay in the topic.
    """
    adapter = TypeAdapter(model)
    subscribed = (topic,) if isinstance(topic, str) else topic

    async def _dead_letter(msg: Any, error: str, task_id: str = "unknown", session_id: str = "unknown") -> None:
        raw = msg.body if isinstance(msg.body, bytes | bytearray) else str(msg.body).encode()
        record = getattr(msg, "raw_message", None)
        key = getattr(record, "key", None)
        dead = DeadLetter(
            task_id=task_id,
            session_id=session_id,
            payload=DeadLetterPayload(
                topic=getattr(record, "topic", None) or subscribed[0],
                partition=getattr(record, "partition", None),
                offset=getattr(record, "offset", None),
                key=key.decode("utf-8", "replace") if isinstance(key, bytes) else key,
                consumer=consumer_name,
                error=error[:2000],
                raw=bytes(raw[:100_000]).decode("utf-8", "replace"),
            ),
        )
        await publish(broker, topics.DEAD_LETTER, dead)
        metrics.dead_lettered(consumer_name, "invalid" if task_id == "unknown" else "failed")
        log.warning("dead-lettered message from %s: %s", dead.payload.topic, error[:300])

    async def _consume(_body: bytes) -> None:
        msg: KafkaMessage = broker.context.get_local("message")  # set by FastStream around each call
        started = time.perf_counter()
        try:
            event = adapter.validate_json(msg.body)
        except ValidationError as exc:
            await _dead_letter(msg, f"invalid message: {exc.errors(include_url=False)[:3]}")
            metrics.consumer_handled(consumer_name, "invalid", time.perf_counter() - started)
            return
        attempts_key = f"conduit:attempts:{consumer_name}:{event.event_id}"
        record_topic = getattr(getattr(msg, "raw_message", None), "topic", None) or subscribed[0]
        parent = (msg.headers or {}).get("traceparent") or event.traceparent
        outcome = "ok"
        # span + structlog context (task_id, trace_id) around the handler; logs inside carry both
        with tracing.span(f"{record_topic} process", parent, kind=tracing.SpanKind.CONSUMER, task_id=event.task_id,
                          **{"messaging.system": "kafka", "messaging.source.name": record_topic,
                             "messaging.consumer.group.name": group_id, "conduit.event_type": event.type}):
            try:
                await handler(event)
            except Exception as exc:  # noqa: BLE001 - decide between redelivery and dead-letter
                attempts = await redis.incr(attempts_key)
                await redis.expire(attempts_key, 3600)
                log.exception("handler %s failed on %s (attempt %s)", consumer_name, event.event_id, attempts)
                if attempts >= MAX_ATTEMPTS:
                    await _dead_letter(msg, f"{type(exc).__name__}: {exc}", event.task_id, event.session_id)
                    outcome = "dead_letter"
                    return
                outcome = "error"
                raise
            finally:
                metrics.consumer_handled(consumer_name, outcome, time.perf_counter() - started)

    broker.subscriber(
        *subscribed,
        group_id=group_id,
        ack_policy=AckPolicy.NACK_ON_ERROR,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
        session_timeout_ms=6_000,
        heartbeat_interval_ms=1_000,
        rebalance_timeout_ms=10_000,
        title=f"{consumer_name}:{','.join(subscribed)}",
        decoder=_raw_body,
        **({"max_workers": max_workers} if max_workers > 1 else {}),
    )(_consume)
