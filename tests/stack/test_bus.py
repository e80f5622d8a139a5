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

from prometheus_client import REGISTRY
from redis.asyncio import Redis

from conduit.records import keys
from conduit.runtime import bus
from conduit.runtime.liveness import alive_key
from conduit.runtime.process import serve_process
from conduit.runtime.settings import Settings
from conduit.testing.bus import await_dead_letter
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

    await bus.ensure_topics(settings)
    broker = bus.make_broker(settings, client_id=consumer)
    bus.subscribe(broker, settings, redis, topic=topics.QUESTIONS, group_id=consumer, model=QuestionAsked,
                  handler=handler, consumer_name=consumer)
    await broker.start()
    try:
        event = _question(poison)
        await bus.publish(broker, topics.QUESTIONS, event)
        dead = await await_dead_letter(settings.bootstrap_servers(), consumer, poison)
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
    redis = Redis.from_url(settings.redis())
    broker = bus.make_broker(settings, client_id=service)

    async def handler(event: QuestionAsked) -> None:
        pass

    bus.subscribe(broker, settings, redis, topic=topics.QUESTIONS, group_id=service, model=QuestionAsked,
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
    probe = Redis.from_url(settings.redis())
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
