"""Idle-quiet consumers on a broker that answers a fetch only when its wait ends (tansu).

tansu does not wake a waiting fetch when data arrives, so Conduit's consumers poll it with a
short fetch wait (``kafka_fetch_max_wait_ms``, 2 ms): prompt, but an idle stack of four
consumers and the broker kept more than a core busy (docs/benchmarks.md, "Idle CPU"). Rule B1
(docs/rules.md): a consumer that short-polls goes quiet after ``kafka_idle_after_s`` without a
message and is woken by a doorbell:

- ``FetchGate`` (one per ``bus.subscribe``): while messages flow the consumer polls at the short
  wait. After ``kafka_idle_after_s`` seconds without a message or a bell it pauses every
  assigned partition (aiokafka then sends no fetch at all), unless a fetch saw records past the
  position (work queued behind a long handler). A bell, or the end of a handler, resumes them at
  once and keeps them polling for another ``kafka_idle_after_s``; without a bell a probe resumes
  them every ``kafka_idle_probe_s`` seconds until each partition was fetched once, so a message
  whose bell was lost (Redis down, a publisher that died between its publish and its bell) waits
  at most that long.
- ``Doorbell`` (one per process): one Redis pub/sub connection subscribed to the bell channel of
  every gated topic (``keys.doorbell(topic)``); a message on it rings that topic's gates.
- ``Ringer`` (one per broker that publishes): ``bus.publish`` rings the topic's channel with each
  Kafka publish, at most once per ``idle_after_s / 4`` per topic: a gate stays awake for
  ``idle_after_s`` after a bell, so every publish has a bell less than a quarter of that before it.

Real Kafka answers a waiting fetch when data arrives: with a long wait (``kafka_fetch_max_wait_ms``
≥ ``LONG_POLL_MS``) consumers are idle-quiet and prompt by themselves, and no gate, bell or doorbell
runs (``enabled``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from conduit.records import keys
from conduit.runtime.settings import BusSettings

log = logging.getLogger("conduit.runtime.idlefetch")

LONG_POLL_MS = 100
"""A fetch wait at least this long (ms) is a long poll: no gate needed (real Kafka)."""
PROBE_STEP_S = 0.005
"""Seconds between two looks of a probe at whether every partition was fetched."""
PROBE_MAX_S = 1.0
"""Longest a probe keeps the consumers fetching while waiting for one fetch of every partition."""
RECONNECT_S = 1.0
"""Seconds between two attempts of the doorbell to (re)subscribe after a Redis error."""


def enabled(bus: BusSettings) -> bool:
    """True when consumers short-poll (fetch wait < ``LONG_POLL_MS``) and may go idle (``kafka_idle_after_s`` > 0)."""
    return bus.kafka_fetch_max_wait_ms < LONG_POLL_MS and bus.kafka_idle_after_s > 0


def positions(consumer: Any) -> list[tuple[Any, int, int]]:
    """``[(TopicPartition, position, high watermark of its last fetch)]`` of an aiokafka consumer's
    assigned partitions that have both, read without a request (empty during a rebalance)."""
    found = []
    with contextlib.suppress(Exception):  # a rebalance under way: the caller looks again later
        assignment = consumer._subscription.subscription.assignment  # noqa: SLF001 - positions without an await
        for tp in consumer.assignment():
            state = assignment.state_value(tp)
            if state.highwater is not None and state.has_valid_position:
                found.append((tp, state.position, state.highwater))
    return found


class FetchGate:
    """Pauses one subscriber's consumers when idle and resumes them on a bell or a probe.

    Args:
        topics: the topics the subscriber reads (their bells ring this gate).
        idle_after_s: seconds without a message or bell before the consumers pause.
        probe_s: seconds between two probes of a paused gate.
    ``subscriber`` (the FastStream subscriber) is set by ``bus.subscribe``; ``touch`` is called
    around every handled message.
    """

    def __init__(self, topics: Iterable[str], idle_after_s: float, probe_s: float) -> None:
        self.topics = tuple(topics)
        self.idle_after_s = idle_after_s
        self.probe_s = probe_s
        self.subscriber: Any = None
        self.paused = False
        self.pauses = 0
        """How many times the consumers paused (for tests and metrics)."""
        self._last = time.monotonic()
        self._bell = asyncio.Event()

    def touch(self) -> None:
        """Note activity: the consumers poll for ``idle_after_s`` from now (resumed at once if paused)."""
        self._last = time.monotonic()
        if self.paused:
            self._bell.set()

    def ring(self) -> None:
        """A bell for one of the topics: resume at once if paused, and stay awake ``idle_after_s``."""
        self._last = time.monotonic()
        self._bell.set()

    def consumers(self) -> list[Any]:
        """The aiokafka consumers of the gated subscriber (one, or its workers' group)."""
        sub = self.subscriber
        group = getattr(sub, "consumer_subgroup", None) or [getattr(sub, "consumer", None)]
        return [c for c in group if c is not None]

    def _pause(self) -> None:
        for c in self.consumers():
            with contextlib.suppress(Exception):  # a rebalance under way: the next probe pauses again
                c.pause(*c.assignment())
        self.paused = True

    def _resume(self) -> None:
        self.paused = False
        for c in self.consumers():
            with contextlib.suppress(Exception):
                c.resume(*c.paused())

    def _lagging(self) -> bool:
        """True when a partition's last fetch saw records past the consumer's position (queued work)."""
        return any(highwater > position for c in self.consumers() for _, position, highwater in positions(c))

    def _polled_since(self, since_ms: int) -> bool:
        for c in self.consumers():
            with contextlib.suppress(Exception):
                for tp in c.assignment():
                    stamp = c.last_poll_timestamp(tp)
                    if stamp is None or stamp < since_ms:
                        return False
        return True

    async def _probe(self) -> bool:
        """Resume until every partition was fetched once (at most ``PROBE_MAX_S``); True when work
        is queued (the gate stays awake), else pause again."""
        since_ms, started = int(1000 * time.time()) - 1, time.monotonic()
        self._resume()
        deadline = time.monotonic() + PROBE_MAX_S
        while time.monotonic() < deadline and not self._bell.is_set():
            await asyncio.sleep(PROBE_STEP_S)
            if self._polled_since(since_ms):
                break
        if self._bell.is_set() or self._last > started or self._lagging():  # rung, handled or queued
            self._last = time.monotonic()
            return True
        self._pause()
        return False

    async def run(self) -> None:
        """Gate the consumers until cancelled (then they are left resumed)."""
        try:
            while True:
                while (left := self._last + self.idle_after_s - time.monotonic()) > 0:
                    await asyncio.sleep(left)
                if self._lagging():  # messages wait behind a long handler: keep fetching
                    self._last = time.monotonic()
                    continue
                self._bell.clear()  # before the pause: a bell from now on is kept
                self._pause()
                self.pauses += 1
                while True:
                    try:
                        await asyncio.wait_for(self._bell.wait(), self.probe_s)
                        break
                    except TimeoutError:
                        if await self._probe():
                            break
                self._resume()
        finally:
            self._resume()


class Doorbell:
    """One process's Redis pub/sub listener ringing its gates (see the module doc).

    Args:
        redis_url: the Redis the publishers ring (``settings.store.url()``).
        gates: every gate of the process's consumers.
    """

    def __init__(self, redis_url: str, gates: Iterable[FetchGate], cluster: bool = False) -> None:
        self.redis_url = redis_url
        self.cluster = cluster
        self.by_channel: dict[bytes, list[FetchGate]] = {}
        for gate in gates:
            for topic in gate.topics:
                self.by_channel.setdefault(keys.doorbell(topic).encode(), []).append(gate)

    async def run(self) -> None:
        """Listen until cancelled; on a Redis error wait ``RECONNECT_S`` and subscribe again (the
        gates' probes deliver meanwhile)."""
        attempt = 0
        while True:
            redis = self._client(attempt)
            try:
                await self._listen(redis)
            except (RedisError, OSError) as exc:
                log.info("doorbell: %r; again in %.0f s", exc, RECONNECT_S)
                await asyncio.sleep(RECONNECT_S)
            finally:
                with contextlib.suppress(Exception):
                    await redis.aclose()
            attempt += 1

    def _client(self, attempt: int) -> Redis:
        """The connection to listen on: ``redis_url``; on Redis Cluster one startup node after another (rule O9:
        a message published on any node of a cluster reaches the subscribers of every node)."""
        if not self.cluster:
            return Redis.from_url(self.redis_url, socket_timeout=None)
        from conduit.runtime.redis_client import node_url  # noqa: PLC0415 - only on Redis Cluster

        return Redis.from_url(node_url(self.redis_url, attempt), socket_timeout=None)  # user and password kept

    async def _listen(self, redis: Redis) -> None:
        async with redis.pubsub() as pubsub:
            await pubsub.subscribe(*self.by_channel)
            for gates in self.by_channel.values():  # bells missed while (re)subscribing
                for gate in gates:
                    gate.ring()
            while True:
                msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=60.0)
                if msg and msg.get("type") == "message":
                    for gate in self.by_channel.get(msg["channel"], ()):
                        gate.ring()


class Ringer:
    """Rings the bell of a topic after a publish, at most once per ``min_interval_s`` per topic.

    Args:
        redis: the Redis to publish bells on.
        min_interval_s: least seconds between two bells of one topic from this process.
    """

    def __init__(self, redis: Redis, min_interval_s: float) -> None:
        self.redis = redis
        self.min_interval_s = min_interval_s
        self._last: dict[str, float] = {}

    async def ring(self, topic: str) -> None:
        """Publish ``topic``'s bell unless one went out less than ``min_interval_s`` ago; never raises
        (a lost bell is covered by the gates' probes)."""
        now = time.monotonic()
        if now - self._last.get(topic, -1e9) < self.min_interval_s:
            return
        self._last[topic] = now
        try:
            await self.redis.publish(keys.doorbell(topic), b"1")
        except (RedisError, OSError) as exc:
            self._last.pop(topic, None)
            log.debug("bell for %s not rung: %r", topic, exc)
