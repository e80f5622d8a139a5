"""A private stack for the end-to-end benchmarks: infra + orchestrator + gateway + scripted model."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx

from ops import infra
from conduit.runtime.settings import Settings
from ops.stack import Stack
from testkit.scripted_model import ScriptedModel, Turn


NO_RATE_LIMITS = {"CONDUIT_RATE_LIMIT_KEY_PER_MINUTE": "0", "CONDUIT_RATE_LIMIT_TENANT_PER_MINUTE": "0",
                  "CONDUIT_RUNNING_TASKS_PER_KEY": "0", "CONDUIT_RUNNING_TASKS_PER_TENANT": "0"}
"""Benchmarks measure Conduit, not its request budgets."""


@contextlib.contextmanager
def model_stack(turn: Turn, services: tuple[str, ...] = ("orchestrator", "gateway")) -> Iterator[tuple[Stack, ScriptedModel]]:
    """Start a scripted model answering ``turn`` every time, and the embedded stack using it
    (requests carry ``stack.admin_key``)."""
    model = ScriptedModel(default=turn).start()
    data_dir = Path(tempfile.mkdtemp(prefix="conduit-bench-"))
    settings = Settings(data_dir=data_dir, embedded_kafka_port=infra.free_port(), embedded_redis_port=infra.free_port(),
                        gateway_port=infra.free_port())
    stack = Stack(settings, services=services,
                  extra_env={"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "bench", "CONDUIT_MODEL": "scripted",
                             "CONDUIT_LOG_LEVEL": "WARNING", **NO_RATE_LIMITS})
    try:
        stack.start()
        yield stack, model
    finally:
        stack.stop()
        model.stop()


async def sse_events(client: httpx.AsyncClient, method: str, url: str, **kw) -> AsyncIterator[tuple[str, dict]]:
    """Yield ``(event type, data)`` of an SSE response."""
    event = None
    async with client.stream(method, url, timeout=httpx.Timeout(120), **kw) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event:
                yield event, json.loads(line[6:])
