"""Keyed lanes: run a consumer's messages concurrently, each key's in order (rule B2, docs/rules.md).

``KeyedLanes(limit)`` runs at most ``limit`` jobs at once. ``submit(key, handler, event)`` waits for a
free slot (so a consumer that calls it takes no more messages while ``limit`` jobs run: the rest wait
in the topic), then starts ``handler(event)`` as a job that first waits for the previous job of the
same ``key`` (a task id: its question, tool results and control events keep their order) and returns
the job. A job's exception is logged unless the caller awaits the job (``propagate=True``: the caller
re-raises it, e.g. to have the message redelivered). ``drain`` waits for the running jobs (a stop).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("conduit.runtime.lanes")

Handler = Callable[[Any], Awaitable[None]]


class KeyedLanes:
    """At most ``limit`` handlers at once, one after another per key (see the module doc).

    Args:
        limit: jobs running at once (≥ 1).
        name: the consumer's name, for log lines.
    """

    def __init__(self, limit: int, name: str) -> None:
        self.limit = limit
        self.name = name
        self._slots = asyncio.Semaphore(limit)
        self._last: dict[str, asyncio.Task[None]] = {}
        self.jobs: set[asyncio.Task[None]] = set()
        """The jobs started and not yet done."""

    async def submit(self, key: str, handler: Handler, event: Any, propagate: bool = False) -> asyncio.Task[None]:
        """Wait for a slot, start ``handler(event)`` after ``key``'s previous job and return the job.

        With ``propagate`` the job raises what the handler raised (the caller awaits it); otherwise
        a failure is logged with the event's type.
        """
        await self._slots.acquire()
        job = asyncio.create_task(self._run(self._last.get(key), key, handler, event, propagate))
        self._last[key] = job
        self.jobs.add(job)
        job.add_done_callback(self.jobs.discard)
        return job

    async def _run(self, before: asyncio.Task[None] | None, key: str, handler: Handler, event: Any,
                   propagate: bool) -> None:
        try:
            if before is not None:
                await asyncio.gather(before, return_exceptions=True)  # the key's order; its failure is not ours
            await handler(event)
        except Exception:
            if propagate:
                raise
            log.exception("%s: handling %s failed", self.name, type(event).__name__)
        finally:
            self._slots.release()
            if self._last.get(key) is asyncio.current_task():
                del self._last[key]

    async def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` seconds for the running jobs."""
        if self.jobs:
            await asyncio.wait(set(self.jobs), timeout=timeout_s)
