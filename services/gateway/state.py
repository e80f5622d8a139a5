"""Per-process gateway resources, opened by the app's lifespan and shared by routes, and ``publish`` with the
gateway's timeout (used by the task, document and memory routes)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from faststream.kafka import KafkaBroker
from fastapi import Request
from redis.asyncio import Redis

from conduit.runtime import bus
from conduit.runtime.settings import Settings
from conduit.records.taskstore import TaskStore
from conduit.records.taskstream import TaskEventLog
from contracts.envelope import Envelope
from services.gateway.streaming.hub import StreamHub


@dataclass
class GatewayState:
    """What a request handler needs.

    Attributes:
        settings: the process settings.
        redis: asyncio Redis client (bytes responses).
        broker: started FastStream KafkaBroker, used only to publish.
        store: task records (``TaskStore``).
        events: per-task event logs (``TaskEventLog``).
        open_streams: SSE streams currently running in this process (a gauge;
            tests use it to prove a disconnected client leaves no loop behind).
        hub: the process's shared task-log reader (``StreamHub``) every SSE
            stream subscribes to; set by the app's lifespan.
        limiter: the Redis-backed rate limiter (``services.gateway.identity.ratelimit``), made on first use.
    """

    settings: Settings
    redis: Redis
    broker: KafkaBroker
    store: TaskStore
    events: TaskEventLog
    open_streams: int = 0
    hub: StreamHub | None = None
    limiter: Any = None


async def get_state(request: Request) -> GatewayState:
    """FastAPI dependency: the ``GatewayState`` stored on ``app.state.gateway``.

    ``async`` so FastAPI calls it on the event loop: a plain ``def`` dependency
    runs in anyio's thread pool, one thread hop per request (up to 40 threads,
    each with its own malloc arena, seen as gateway RSS that never came back).
    """
    return request.app.state.gateway


async def publish(state: GatewayState, topic: str, event: Envelope) -> None:
    """Publish ``event`` on ``topic`` and wait for Kafka's ack at most ``gateway_publish_timeout_s`` seconds.

    Raises ``TimeoutError`` after that wait and the broker's error when the publish fails.
    """
    await asyncio.wait_for(bus.publish(state.broker, topic, event), state.settings.gateway.gateway_publish_timeout_s)
