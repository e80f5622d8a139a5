"""Kafka plumbing shared by every service: broker, topics, publishing, safe consumers.

- ``make_broker``: a FastStream ``KafkaBroker`` for the configured cluster.
- ``ensure_topics``: create Conduit's topics with the configured partition count.
- ``publish``: send one contract ``Envelope`` keyed by ``task_id`` (ordering per task), only
  to a topic whose row of ``contracts.channels.CHANNELS`` lists its type.
- ``subscribe``: register a handler with at-least-once delivery. FastStream's default
  ack policy (ACK_FIRST) commits the offset before the handler runs, so a crash
  mid-handler would lose the message; Conduit uses ``NACK_ON_ERROR`` so the offset
  is committed only after the handler returns, and a raised error redelivers.
  Metrics, tracing, attempt counting and dead-lettering (a message that cannot be
  parsed, or fails ``MAX_ATTEMPTS`` = 5 times) are middlewares: ``conduit.runtime.middlewares``.
- ``start_idle_fetch``: with a short fetch wait (tansu), idle consumers pause and a Redis
  doorbell rung by ``publish`` wakes them (rule B1, ``conduit.runtime.idlefetch``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from faststream import AckPolicy
from faststream.kafka import KafkaBroker, KafkaRouter
from redis.asyncio import Redis

from conduit.runtime import idlefetch, recreated, tracing
from conduit.runtime.redis_client import make_redis
from conduit.runtime.middlewares import MAX_ATTEMPTS, ConsumerConfig, Delivery, consumer_middlewares, make_decoder
from conduit.runtime.settings import BusSettings, Settings, StoreSettings
from contracts import channels, topics
from contracts.envelope import Envelope

log = logging.getLogger("conduit.runtime.bus")

Handler = Callable[[Any], Awaitable[None]]

__all__ = ["MAX_ATTEMPTS", "assigned", "ensure_topics", "make_broker", "fetch_gates", "publish", "start_idle_fetch", "subscribe"]

_ringers: weakref.WeakKeyDictionary[KafkaBroker, idlefetch.Ringer] = weakref.WeakKeyDictionary()
"""The doorbell ringer of each broker that publishes with idle fetching on (``make_broker``)."""
_gates: weakref.WeakKeyDictionary[KafkaBroker, list[idlefetch.FetchGate]] = weakref.WeakKeyDictionary()
"""The fetch gates of each broker's subscribers (``subscribe``), started by ``start_idle_fetch``."""


def make_broker(settings: Settings, client_id: str, redis: Redis | None = None) -> KafkaBroker:
    """Return a FastStream KafkaBroker for ``settings.bus.bootstrap_servers()``.

    Produces with ``acks=all`` so a published event is durable before
    ``publish`` returns; the idempotent producer is a setting
    (``kafka_idempotent_producer``) because tansu 0.6.0 rejects InitProducerId.
    With idle fetching on (``idlefetch.enabled``), ``publish`` on this broker also rings the
    topic's doorbell (rule B1) on ``redis``, or on a client of its own for ``settings.store.url()``.
    """
    broker = KafkaBroker(
        settings.bus.bootstrap_servers(),
        graceful_timeout=settings.tools.tool_timeout_s + 5,  # in-flight handlers may finish a tool call on SIGTERM
        client_id=client_id,
        acks="all",
        request_timeout_ms=settings.bus.kafka_request_timeout_ms,  # rule B4
        enable_idempotence=settings.bus.kafka_idempotent_producer,
        logger=logging.getLogger(f"conduit.{client_id}.faststream"),
        log_level=logging.DEBUG,
        # no FastDepends: handlers take the message body; with it, resolving the ``KafkaMessage``
        # annotation (a sync ``Context`` field) hopped to a worker thread on every message
        apply_types=False,
    )
    if idlefetch.enabled(settings.bus):
        bell = redis if redis is not None else make_redis(settings.store)
        _ringers[broker] = idlefetch.Ringer(bell, settings.bus.kafka_idle_after_s / 4)
    return broker


async def ensure_topics(bus: BusSettings, names: tuple[str, ...] = topics.ALL_TOPICS) -> None:
    """Create Conduit's topics with ``bus.kafka_partitions`` partitions.

    Existing topics are left alone (tansu answers error 36 in the response, real
    Kafka raises TopicAlreadyExistsError per topic: both are ignored).
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bus.bootstrap_servers(), client_id="conduit-admin")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [n for n in names if n not in existing]
        if missing:
            try:
                await admin.create_topics(
                    [NewTopic(name=n, num_partitions=bus.kafka_partitions, replication_factor=1) for n in missing]
                )
            except Exception as exc:  # noqa: BLE001 - already exists races are fine
                log.info("create_topics: %s", exc)
    finally:
        await admin.close()


async def publish(broker: KafkaBroker, topic: str, event: Envelope, headers: dict[str, str] | None = None,
                  partition: int | None = None) -> None:
    """Publish ``event`` to ``topic`` keyed by its ``task_id`` and wait for the broker's ack.

    ``headers``: more record headers (the public topic's CloudEvents ``ce_*`` attributes).
    ``partition``: send there instead of the key's partition (a rescue re-send to a live member, rule A23).

    Raises ``contracts.channels.UnknownChannel`` (a ``ValueError``) before sending when
    ``topic`` does not carry ``event.type`` in ``contracts.channels.CHANNELS``. Headers carry ``type`` and
    ``traceparent`` (and ``tracestate`` when the context has entries) so consumers and tracing can route
    without parsing the body. With tracing on the publish runs in a PRODUCER span continuing the
    active span (a consumer's, a step's) or the envelope's ``traceparent``; the header carries that
    span's traceparent, so the consumer's span is its child (rule O7). With tracing off the header is
    the envelope's ``traceparent`` and no span is made (rule O5).
    """
    channels.check(topic, event.type)
    ringer = _ringers.get(broker)
    if ringer is None:
        await _publish(broker, topic, event, headers, partition)
    else:  # the bell may land before the record: a rung consumer polls for idle_after_s (rule B1)
        await asyncio.gather(_publish(broker, topic, event, headers, partition), ringer.ring(topic))


async def _publish(broker: KafkaBroker, topic: str, event: Envelope, extra: dict[str, str] | None,
                   partition: int | None = None) -> None:
    headers = {"type": event.type, "content-type": "application/json", **(extra or {})}
    body = event.model_dump_json().encode("utf-8")
    key = channels.partition_key(event)
    if not tracing.enabled():  # rule O5: tracing off costs no span; the envelope's trace context still travels
        if event.traceparent:
            headers["traceparent"] = event.traceparent
        await broker.publish(body, topic, key=key, headers=headers, partition=partition)
        return
    parent = tracing.current_traceparent(event.traceparent)
    # rule O7: a PRODUCER span per message; its context rides in the W3C headers
    state = tracing.current_tracestate()  # the W3C entries of the active span go on with its trace
    with tracing.span(f"{topic} publish", parent, kind=tracing.SpanKind.PRODUCER, task_id=event.task_id,
                      tracestate=state, **{"messaging.system": "kafka", "messaging.operation.type": "send",
                         "messaging.destination.name": topic, "conduit.event_type": event.type}) as tp:
        headers["traceparent"] = tp
        if state:
            headers["tracestate"] = state
        await broker.publish(body, topic, key=key, headers=headers, partition=partition)


def subscribe(
    broker: KafkaBroker,
    bus: BusSettings,
    redis: Redis,
    *,
    group_id: str,
    handler: Handler,
    consumer_name: str,
    topic: str | tuple[str, ...] | None = None,
    model: Any = None,
    max_workers: int = 1,
    fetch_max_wait_ms: int | None = None,  # this consumer's fetch wait (default: the setting; rule K10)
) -> None:
    """Register ``handler`` for ``topic`` (one or several topics) in consumer group ``group_id``.

    ``topic`` and ``model`` default to what ``contracts.channels.subscription(group_id)``
    says the group reads (its topics; the union of their events). One subscriber per
    service keeps group joins to one (each join costs seconds on tansu) and gives every
    member of a group identical subscriptions.

    ``model`` is a pydantic model or an annotated union; the raw message is validated
    into it before ``handler(event)`` is called. Delivery is at least once
    (``AckPolicy.NACK_ON_ERROR``): handlers must be idempotent. Parse failures and events
    that raised ``MAX_ATTEMPTS`` times go to ``topics.DEAD_LETTER``
    (``conduit.runtime.middlewares``).

    ``max_workers`` > 1 (one topic only) starts that many consumers in the group, each
    handling one message at a time (FastStream's ``ConcurrentBetweenPartitionsSubscriber``):
    at most ``max_workers`` handlers run at once, offsets still commit after each handler,
    and waiting messages stay in the topic.
    """
    if topic is None or model is None:
        read, read_model = channels.subscription(group_id)
        topic = read if topic is None else topic
        model = read_model if model is None else model
    subscribed = (topic,) if isinstance(topic, str) else topic
    config = ConsumerConfig(consumer=consumer_name, group_id=group_id, redis=redis,
                            dead_letter=functools.partial(publish, broker, topics.DEAD_LETTER))
    router = KafkaRouter(middlewares=consumer_middlewares(config))
    gate = None
    if idlefetch.enabled(bus):
        gate = idlefetch.FetchGate(subscribed, bus.kafka_idle_after_s, bus.kafka_idle_probe_s)
        _gates.setdefault(broker, []).append(gate)

    async def _consume(delivery: Delivery) -> None:
        if gate is None:
            return await handler(delivery.event)
        gate.touch()
        try:
            await handler(delivery.event)
        finally:
            gate.touch()  # the quiet second counts from the end of the last handler

    subscriber = router.subscriber(
        *subscribed,
        group_id=group_id,
        ack_policy=AckPolicy.NACK_ON_ERROR,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=bus.kafka_fetch_max_wait_ms if fetch_max_wait_ms is None else fetch_max_wait_ms,
        session_timeout_ms=6_000,
        heartbeat_interval_ms=1_000,
        rebalance_timeout_ms=10_000,
        title=f"{consumer_name}:{','.join(subscribed)}",
        decoder=make_decoder(model, subscribed[0]),
        **({"max_workers": max_workers} if max_workers > 1 else {}),
    )
    subscriber(_consume)
    if gate is not None:
        gate.subscriber = subscriber
    broker.include_router(router)


def consumers(broker: KafkaBroker) -> list[Any]:
    """The aiokafka consumers of ``broker``'s subscribers now (one per subscriber, or its workers'
    group; none before a subscriber starts)."""
    found: list[Any] = []
    for sub in broker.subscribers:
        found += [c for c in getattr(sub, "consumer_subgroup", None) or [getattr(sub, "consumer", None)] if c is not None]
    return found


def assigned(broker: KafkaBroker, topic: str) -> list[int]:
    """The partitions of ``topic`` this process's consumers hold now (sorted; empty during a rebalance)."""
    held: set[int] = set()
    for consumer in consumers(broker):
        try:
            held.update(tp.partition for tp in consumer.assignment() if tp.topic == topic)
        except Exception:  # noqa: BLE001 - not started, stopping, or rebalancing: nothing held now
            continue
    return sorted(held)


def fetch_gates(broker: KafkaBroker) -> list[idlefetch.FetchGate]:
    """The fetch gates of ``broker``'s subscribers (none when idle fetching is off)."""
    return list(_gates.get(broker, []))


def start_idle_fetch(broker: KafkaBroker, store: StoreSettings) -> list[asyncio.Task]:
    """Start the fetch gates of ``broker``'s subscribers and the process's doorbell (rule B1), and each
    gate's check for logs recreated shorter than the consumer's position (rule B3).

    Call after ``broker.start()``; cancel the returned tasks before stopping the subscribers.
    Returns no task when idle fetching is off (``idlefetch.enabled``) or nothing subscribed.
    """
    gates = _gates.get(broker, [])
    if not gates:
        return []
    tasks = [asyncio.create_task(g.run(), name=f"fetch-gate:{','.join(g.topics)}") for g in gates]
    # rule B3: the embedded broker loses its topics in a restart; a position past the new log's end rewinds
    tasks += [asyncio.create_task(recreated.watch(g.consumers), name=f"rewind:{','.join(g.topics)}") for g in gates]
    tasks.append(asyncio.create_task(idlefetch.Doorbell(store.url(), gates, store.redis_cluster).run(), name="doorbell"))
    return tasks
