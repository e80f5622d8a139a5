"""One service process's life: start, heartbeat, wait for a signal, shut down gracefully.

``serve_process`` is shared by the orchestrator and every tool service. Order:

1. create missing topics, start the broker (its subscribers join their groups; a group still rebalancing
   after ``kafka_group_rescue_after_s`` is rescued, rule B5, ``conduit.runtime.grouprescue``);
2. start the liveness heartbeat (``conduit.runtime.liveness``) and the ``background`` coroutines;
3. call ``ready()``, then wait for SIGTERM / SIGINT (or ``stop``);
4. stop announcing liveness (and a tool service's partitions), then stop every subscriber: no new messages are taken, and a
   handler already running finishes and commits its offset;
5. cancel the background tasks, then await ``drain()`` (the orchestrator hands its running
   model steps over there);
6. stop the broker last (a finishing step may still publish), then close Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from faststream.kafka import KafkaBroker
from redis.asyncio import Redis

from conduit.runtime import bus, grouprescue, liveness
from conduit.runtime.settings import Settings

log = logging.getLogger("conduit.runtime.process")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""Signals that start a graceful shutdown."""


async def _start_announced(broker: KafkaBroker, announce: Callable[[], Coroutine[Any, Any, Any]] | None,
                           rescue_after_s: float = 0.0) -> list[asyncio.Task]:
    """Start ``announce`` (if any) and the group rescue (rule B5, when ``rescue_after_s`` > 0), then
    the broker; return those tasks. Both run from before the consumers' first group join, which
    ``broker.start`` awaits (3-19 s under a rebalance, forever in a group tansu left leaderless): a
    joining process is a rebalance under way, not a service that is gone (rule A37). Re-raises a
    failed start."""
    announcing = [asyncio.create_task(announce())] if announce else []
    if rescue_after_s > 0:
        announcing.append(asyncio.create_task(grouprescue.watch(lambda: bus.consumers(broker), rescue_after_s)))
    try:
        await broker.start()
    except BaseException:
        for t in announcing:
            t.cancel()
        await asyncio.gather(*announcing, return_exceptions=True)
        raise
    return announcing


async def serve_process(
    service: str,
    settings: Settings,
    broker: KafkaBroker,
    redis: Redis,
    *,
    background: Sequence[Callable[[], Coroutine[Any, Any, Any]]] = (),
    ready: Callable[[], Awaitable[None]] | None = None,
    drain: Callable[[], Awaitable[None]] | None = None,
    stop: asyncio.Event | None = None,
    announce: Callable[[], Coroutine[Any, Any, Any]] | None = None,
) -> None:
    """Run ``service`` until SIGTERM/SIGINT (or until ``stop`` is set), then shut down in order.

    Args:
        service: liveness name (``orchestrator``, ``retriever``, ``web``, ``sandbox``).
        settings: topics are created with ``settings.bus.kafka_partitions`` partitions.
        broker: subscribers already registered (``bus.subscribe``); started here, stopped last.
        redis: used by the heartbeat; closed at the end.
        background: coroutine functions run as tasks while serving, cancelled at shutdown.
        ready: awaited once the broker and heartbeat run (e.g. a readiness announcement).
        drain: awaited after the subscribers stopped, before the broker stops.
        stop: set it to stop without a signal (tests); a fresh event by default.
        announce: run from before the broker starts (its consumers' first join) and cancelled first at
            shutdown (a tool service's partitions, ``conduit.runtime.owners.announce``: a stopping process
            is no rescue's target; a joining one holds none yet).
    """
    stop = stop or asyncio.Event()
    await bus.ensure_topics(settings.bus)
    announcing = await _start_announced(broker, announce, settings.bus.kafka_group_rescue_after_s)
    idle = bus.start_idle_fetch(broker, settings.store)  # rule B1: idle consumers pause until a doorbell
    loop = asyncio.get_running_loop()
    signals = SIGNALS if threading.current_thread() is threading.main_thread() else ()  # a test's thread: ``stop`` only
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    heartbeat = asyncio.create_task(liveness.heartbeat(redis, service))
    tasks = [asyncio.create_task(fn()) for fn in background]
    try:
        if ready:
            await ready()
        log.info("%s serving", service)
        await stop.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        heartbeat.cancel()  # stop announcing liveness first
        for t in announcing:
            t.cancel()
        await asyncio.gather(*announcing, return_exceptions=True)
        for t in idle:
            t.cancel()
        await asyncio.gather(*idle, return_exceptions=True)  # consumers left resumed
        for sub in broker.subscribers:  # stop taking messages; in-flight handlers finish and commit
            await sub.stop()
        for t in tasks:
            t.cancel()
        await asyncio.gather(heartbeat, *tasks, return_exceptions=True)
        try:
            if drain:
                await drain()
        finally:
            await broker.stop()
            with contextlib.suppress(Exception):
                await redis.aclose()
