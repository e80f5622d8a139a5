"""Test hooks: named points where a test may act inside the orchestrator (crash it).

The orchestrator calls ``await hooks.reached(point, task_id)`` at its fault points:
``question`` (mid-handler, before the new task's checkpoint), ``started`` (right after
the new task's first checkpoint, and its outbox, is saved), ``tool_result`` (right
after a tool result's checkpoint is saved) and ``cancel`` (right after a cancelled
task is saved, before its end is announced). By default nothing happens. The hook
is owned by test code: when the environment variable ``CONDUIT_TEST_HOOKS`` names a
module (``package.module``), that module's ``make_hooks(redis)`` builds the hooks;
``testkit.faults`` is the one the crash tests use.
"""

from __future__ import annotations

import importlib
import os
from typing import Protocol

from redis.asyncio import Redis

HOOKS_ENV = "CONDUIT_TEST_HOOKS"
"""Environment variable naming a test hook module (tests and evals only)."""


class Hooks(Protocol):
    """Called at each fault point."""

    async def reached(self, point: str, task_id: str) -> None:
        """The orchestrator reached fault point ``point`` for ``task_id``."""
        ...


class NoHooks:
    """The default: nothing happens at a fault point."""

    async def reached(self, point: str, task_id: str) -> None:
        """Do nothing."""


def load_hooks(redis: Redis) -> Hooks:
    """The hooks named by ``CONDUIT_TEST_HOOKS``, else ``NoHooks()``.

    Raises ImportError / AttributeError when the named module or its ``make_hooks`` is missing.
    """
    name = os.environ.get(HOOKS_ENV)
    if not name:
        return NoHooks()
    return importlib.import_module(name).make_hooks(redis)
