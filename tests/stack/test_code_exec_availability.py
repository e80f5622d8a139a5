"""The model is not offered code_exec while no sandbox can isolate code (seed 000: a tool that
cannot run is not shown). The status comes from the sandbox replicas' real status hash in the session's Redis."""

from __future__ import annotations

import asyncio
import json
import time

from redis.asyncio import Redis

from conduit.records import keys, sandboxstatus
from conduit.runtime.settings import Settings
from conduit.runtime.toolcatalog import available_tools, unavailable_tools
from services.sandbox.isolation import NOT_INSTALLED, off_message
from services.sandbox.main import build_service, publish_status, status_field


async def test_code_exec_is_hidden_while_the_sandbox_reports_no_isolation(infra_stack, settings: Settings) -> None:
    url = infra_stack.redis_url.rsplit("/", 1)[0] + "/8"  # a database of its own: no real replica's keys
    missing = (None, NOT_INSTALLED)
    service = build_service(settings.changed({"redis_url": url}), setup=missing)
    redis: Redis = service.redis
    await redis.flushdb()
    try:
        assert await unavailable_tools(redis) == frozenset(), "no sandbox reported yet: nothing hidden"
        status = asyncio.create_task(publish_status(service, setup=missing))
        try:
            for _ in range(100):
                if await redis.hexists(keys.SANDBOX_STATUSES, status_field()):
                    break
                await asyncio.sleep(0.02)
            body = json.loads(await redis.hget(keys.SANDBOX_STATUSES, status_field()))
            assert body["reason"] == off_message(NOT_INSTALLED)
            hidden = await unavailable_tools(redis)
            assert hidden == {"code_exec"}
            assert "code_exec" not in available_tools(settings.web, None, hidden)
            assert "kb_search" in available_tools(settings.web, None, hidden)
            # one replica that isolates is enough
            await redis.hset(keys.SANDBOX_STATUSES, "other-host:1",
                             sandboxstatus.encode(True, False, "bubblewrap", time.time()))
            assert await unavailable_tools(redis) == frozenset()
            assert "code_exec" in available_tools(settings.web, None, await unavailable_tools(redis))
        finally:
            status.cancel()
    finally:
        await redis.flushdb()
        await redis.aclose()
