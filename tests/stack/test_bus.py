"""The bus runtime on a real broker and Redis: dead-lettering after 5 failed deliveries, serve_process.

- a handler that raises on every delivery of one event sees it exactly ``MAX_ATTEMPTS`` (5)
  times; then the event is on ``conduit.dead-letter`` (with the error), its attempt count in
  Redis is 5, and the consumer goes on with the next event;
- ``serve_process`` starts the broker, the heartbeat and the background tasks, and on stop
  stops the subscribers before ``drain`` runs, cancels the background and closes Redis.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from prometheus_client import REGISTRY
from redis.asyncio import Redis

from conduit.records import keys
from conduit.runtime import bus
from conduit.runtime.liveness import alive_key
from conduit.runtime.process import serve_process
from conduit.runtime.settings import Settings
from testkit.bus import await_dead_letter
from contracts import topics
from contracts.events import QuestionAsked, QuestionPayload


def _question(task_id: str) -> QuestionAsked:
    return QuestionAsked(task_id=task_id, session_id="s1", payload=QuestionPayload(question="q"))


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_an_event_failing_every_time_is_dead_lettered_after_5_attempts(settings: Settings, redis: Redis) -> None:
    consumer = f"dl-{uuid.uuid4().hex[:6]}"
    poison, after = f"poison-{uuid.uuid4().hex[:8]}", f"after-{uuid.uuid4().hex[:8]}"
    deliveries: list[str] = []
    handled_after = asyncio.Event()

    async def handler(event: QuestionAsked) -> None:
        if event.task_id == poison:
            deliveries.append(event.task_id)
            raise RuntimeError("always fails")
        if event.task_id == after:
            handled_after.set()

    await bus.ensure_topics(settings.bus)
    broker = bus.make_broker(settings, client_id=consumer)
    bus.subscribe(broker, settings.bus, redis, topic=topics.QUESTIONS, group_id=consumer, model=QuestionAsked,
                  handler=handler, consumer_name=consumer)
    await broker.start()
    try:
        event = _question(poison)
        await bus.publish(broker, topics.QUESTIONS, event)
        dead = await await_dead_letter(settings.bus.bootstrap_servers(), consumer, poison)
        await bus.publish(broker, topics.QUESTIONS, _question(after))
        await asyncio.wait_for(handled_after.wait(), timeout=60)
    finally:
        await broker.stop()
    assert len(deliveries) == bus.MAX_ATTEMPTS == 5
    assert dead.payload.topic == topics.QUESTIONS and "RuntimeError: always fails" in dead.payload.error
    assert QuestionAsked.model_validate_json(dead.payload.raw).event_id == event.event_id
    assert await redis.get(keys.attempts(consumer, str(event.event_id))) == b"5"
    assert _sample("conduit_dead_letters_total", consumer=consumer, reason="failed") == 1
    assert _sample("conduit_consumer_handling_seconds_count", consumer=consumer, outcome="error") == 4
    assert _sample("conduit_consumer_handling_seconds_count", consumer=consumer, outcome="dead_letter") == 1


async def test_serve_process_starts_and_stops_in_order(settings: Settings) -> None:
    service = f"proc-{uuid.uuid4().hex[:6]}"
    redis = Redis.from_url(settings.store.url())
    broker = bus.make_broker(settings, client_id=service)

    async def handler(event: QuestionAsked) -> None:
        pass

    bus.subscribe(broker, settings.bus, redis, topic=topics.QUESTIONS, group_id=service, model=QuestionAsked,
                  handler=handler, consumer_name=service)
    ready, background_started, background_cancelled = asyncio.Event(), asyncio.Event(), asyncio.Event()
    order: list[str] = []

    async def background() -> None:
        background_started.set()
        try:
            await asyncio.Event().wait()
        finally:
            background_cancelled.set()

    async def on_ready() -> None:
        ready.set()

    async def drain() -> None:
        order.append("drain")
        assert not any(sub.running for sub in broker.subscribers), "drain ran before the subscribers stopped"
        assert background_cancelled.is_set()

    stop = asyncio.Event()
    served = asyncio.create_task(serve_process(service, settings, broker, redis, background=[background],
                                               ready=on_ready, drain=drain, stop=stop))
    await asyncio.wait_for(ready.wait(), timeout=60)
    await asyncio.wait_for(background_started.wait(), timeout=10)
    probe = Redis.from_url(settings.store.url())
    try:
        async def beating() -> None:  # the heartbeat's first write follows ready within a loop turn or two
            while not await probe.exists(alive_key(service)):
                await asyncio.sleep(0.02)

        await asyncio.wait_for(beating(), timeout=10)
        stop.set()
        await asyncio.wait_for(served, timeout=60)
    finally:
        await probe.aclose()
    assert order == ["drain"]
    assert background_cancelled.is_set()


async def _serve_gated(settings: Settings, service: str, handler) -> tuple[asyncio.Task, asyncio.Event, Any]:
    """Serve one consumer of ``conduit.questions`` through ``serve_process`` (so its fetch gate runs)."""
    broker = bus.make_broker(settings, client_id=service)
    bus.subscribe(broker, settings.bus, Redis.from_url(settings.store.url()), topic=topics.QUESTIONS, group_id=service,
                  model=QuestionAsked, handler=handler, consumer_name=service)
    ready, stop = asyncio.Event(), asyncio.Event()

    async def on_ready() -> None:
        ready.set()

    served = asyncio.create_task(serve_process(service, settings, broker, Redis.from_url(settings.store.url()),
                                               ready=on_ready, stop=stop))
    await asyncio.wait_for(ready.wait(), timeout=60)
    [gate] = bus.fetch_gates(broker)
    return served, stop, gate


async def _until(check, timeout: float) -> None:
    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll(), timeout=timeout)


async def test_an_idle_consumer_stops_fetching_and_a_publish_wakes_it(settings: Settings) -> None:
    """Rule B1: after the quiet period the consumer sends no fetch; the publisher's doorbell wakes it,
    well before its next probe (60 s), also after a long idle period."""
    gated = settings.changed({"kafka_idle_after_s": 0.3, "kafka_idle_probe_s": 60.0})
    service = f"idle-{uuid.uuid4().hex[:6]}"
    got: dict[str, float] = {}
    served, stop, gate = await _serve_gated(gated, service, lambda e: _note(got, e))
    publisher = bus.make_broker(gated, client_id=f"{service}-pub")
    await publisher.start()
    try:
        first = f"first-{uuid.uuid4().hex[:8]}"
        await bus.publish(publisher, topics.QUESTIONS, _question(first))  # joined and fetching: delivered
        await _until(lambda: first in got, 60)
        await _until(lambda: gate.paused, 30)
        await asyncio.sleep(0.5)  # a fetch already on the wire when the gate closed lands first (CI saw one 3 ms later)
        [consumer] = gate.consumers()
        polls = {tp: consumer.last_poll_timestamp(tp) for tp in consumer.assignment()}
        await asyncio.sleep(3.0)  # idle ten times the quiet period
        assert gate.paused and {tp: consumer.last_poll_timestamp(tp) for tp in consumer.assignment()} == polls
        late = [f"late-{uuid.uuid4().hex[:8]}" for _ in range(2)]
        sent = asyncio.get_running_loop().time()
        for task_id in late:  # the second publish rings no bell (one per quarter second): still delivered
            await bus.publish(publisher, topics.QUESTIONS, _question(task_id))
        await _until(lambda: all(t in got for t in late), 30)
        assert max(got[t] for t in late) - sent < 30  # the bell, not the 60 s probe
    finally:
        stop.set()
        await asyncio.wait_for(served, timeout=60)
        await publisher.stop()


async def test_a_message_without_a_bell_is_fetched_by_the_idle_probe(settings: Settings) -> None:
    """A lost bell (the publisher rings none here) costs at most the probe interval, not the message."""
    gated = settings.changed({"kafka_idle_after_s": 0.3, "kafka_idle_probe_s": 1.0})
    service = f"probe-{uuid.uuid4().hex[:6]}"
    got: dict[str, float] = {}
    served, stop, gate = await _serve_gated(gated, service, lambda e: _note(got, e))
    silent = bus.make_broker(settings.changed({"kafka_idle_after_s": 0.0}), client_id=f"{service}-pub")
    await silent.start()
    try:
        await _until(lambda: gate.paused and gate.consumers() and gate.consumers()[0].assignment(), 60)
        task_id = f"nobell-{uuid.uuid4().hex[:8]}"
        await bus.publish(silent, topics.QUESTIONS, _question(task_id))
        await _until(lambda: task_id in got, 30)
        await _until(lambda: gate.paused, 30)  # and quiet again afterwards
    finally:
        stop.set()
        await asyncio.wait_for(served, timeout=60)
        await silent.stop()


async def _note(got: dict[str, float], event: QuestionAsked) -> None:
    got[event.task_id] = asyncio.get_running_loop().time()
