"""Fault injection for crash tests: a test hook module for the orchestrator.

Loaded only when ``CONDUIT_TEST_HOOKS=testkit.faults`` is set (see
``services.orchestrator.hooks``). With ``CONDUIT_FAULT_CRASH_ONCE`` naming a fault
point (``question``, ``started``, ``tool_result``, ``cancel``), the process exits with code 70 the
first time each task reaches that point (once per task: a Redis flag, 600 s).
"""

from __future__ import annotations

import logging
import os

from redis.asyncio import Redis

from conduit.records import keys

CRASH_ENV = "CONDUIT_FAULT_CRASH_ONCE"
"""Environment variable naming the fault point to crash at."""
EXIT_CODE = 70
"""Exit code of an injected crash."""


class CrashOnce:
    """Exit the process at fault point ``point`` once per task (``point`` None: never)."""

    def __init__(self, redis: Redis, point: str | None) -> None:
        self.redis = redis
        self.point = point

    async def reached(self, point: str, task_id: str) -> None:
        """Exit with ``EXIT_CODE`` if ``point`` is the configured one and this task has not crashed yet."""
        if point == self.point and await self.redis.set(keys.fault(task_id), "1", nx=True, ex=600):
            logging.getLogger("testkit.faults").error("fault injection: exiting at %s", point)
            os._exit(EXIT_CODE)


def make_hooks(redis: Redis) -> CrashOnce:
    """The hooks ``services.orchestrator.hooks.load_hooks`` installs: crash at ``CONDUIT_FAULT_CRASH_ONCE``."""
    return CrashOnce(redis, os.environ.get(CRASH_ENV) or None)
