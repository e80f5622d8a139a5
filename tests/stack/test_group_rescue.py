"""Rule B5 on the real broker: a consumer group whose leader left mid-round is rescued.

tansu keeps the departed leader of a forming group, and the group never forms (testkit.leaderless).
A consumer of such a group, served by ``serve_process``:

- with the rescue off, is still waiting for its assignment 12 s later (a normal join here takes 3-11 s);
- with ``kafka_group_rescue_after_s`` = 5, takes over the named leader, finishes its round and leaves,
  and is then assigned: a message published to the topic is handled, and
  ``conduit_consumer_group_rescues_total{outcome="taken_over"}`` counts the rescue.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from prometheus_client import REGISTRY
from redis.asyncio import Redis

from conduit.runtime import bus, grouprescue
from conduit.runtime.process import serve_process
from conduit.runtime.settings import Settings
from contracts import topics
from contracts.events import QuestionAsked, QuestionPayload
from testkit.leaderless import strand_group


async def _serve(settings: Settings, group: str, handled: list[str]) -> tuple[asyncio.Task, asyncio.Event, object]:
    redis = Redis.from_url(settings.store.url())
    broker = bus.make_broker(settings, client_id=group)

    async def handler(event: QuestionAsked) -> None:
        handled.append(event.task_id)

    bus.subscribe(broker, settings.bus, redis, topic=topics.QUESTIONS, group_id=group, model=QuestionAsked,
                  handler=handler, consumer_name=group)
    stop = asyncio.Event()
    return asyncio.create_task(serve_process(group, settings, broker, redis, stop=stop)), stop, broker


async def _stranded(settings: Settings) -> str:
    group = f"rescue-{uuid.uuid4().hex[:8]}"
    await bus.ensure_topics(settings.bus)
    await strand_group(settings.bus.bootstrap_servers(), group, [topics.QUESTIONS])
    return group


async def test_a_group_whose_leader_left_mid_round_stays_unassigned_without_the_rescue(settings: Settings) -> None:
    settings.bus.kafka_group_rescue_after_s = 0
    group = await _stranded(settings)
    task, stop, broker = await _serve(settings, group, [])
    try:
        await asyncio.sleep(12)
        consumers = bus.consumers(broker)
        assert consumers and all(grouprescue.rebalancing(c) for c in consumers), "the group formed by itself"
        assert bus.assigned(broker, topics.QUESTIONS) == []
    finally:
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_rescue_takes_over_the_departed_leader_and_the_consumer_is_assigned(settings: Settings) -> None:
    settings.bus.kafka_group_rescue_after_s = 5
    group = await _stranded(settings)
    handled: list[str] = []
    task, stop, broker = await _serve(settings, group, handled)
    started = time.monotonic()
    try:
        while not bus.assigned(broker, topics.QUESTIONS):
            assert time.monotonic() - started < 45, "still unassigned 45 s after start"
            assert not task.done(), task
            await asyncio.sleep(0.2)
        rescued = REGISTRY.get_sample_value("conduit_consumer_group_rescues_total",
                                            {"group": group, "outcome": "taken_over"})
        assert rescued and rescued >= 1
        marker = f"after-rescue-{uuid.uuid4().hex[:8]}"
        publisher = bus.make_broker(settings, client_id=f"{group}-pub")
        await publisher.start()
        try:
            await bus.publish(publisher, topics.QUESTIONS,
                              QuestionAsked(task_id=marker, session_id="s1", payload=QuestionPayload(question="q")))
        finally:
            await publisher.stop()
        while marker not in handled:
            assert time.monotonic() - started < 75, "assigned, but the message was not handled"
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
