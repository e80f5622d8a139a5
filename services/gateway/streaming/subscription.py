"""One SSE stream's view of a task log through the gateway's ``StreamHub`` (``services/gateway/streaming/hub.py``).

The hub pushes what its shared ``XREAD`` reads into each subscriber's bounded buffer
(``_push``); the stream's one coroutine takes it with ``next_batch``. A subscriber whose
buffer overflowed, or that joined behind the hub's cursor, is *stale* and reads its gap from
the durable log (``XRANGE``) before it takes buffered events again; no event is dropped silently.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from conduit.records.taskstream import LoggedEvent, TaskEventLog


class Hub(Protocol):
    """What a subscription reads of its ``StreamHub``: the durable log (``events``) and the size of one
    catch-up ``XRANGE`` page (``catchup_count``, events). A protocol, so this module does not import the hub."""

    events: TaskEventLog
    catchup_count: int


class Subscription:
    """One SSE stream's view of one task log through a ``StreamHub``.

    Created by ``StreamHub.subscribe``; consumed by a single coroutine with
    ``next_batch``; ended by ``StreamHub.unsubscribe``.

    Attributes:
        task_id: the task whose log is followed.
        last: seq of the last event returned by ``next_batch`` (starts at the
            subscriber's ``after``).
        stale: True while the subscriber must read its gap from the log with
            ``XRANGE`` (joined behind the hub's cursor, or its buffer overflowed).
        overflows: how many times the buffer overflowed (each one cost one catch-up read).
    """

    __slots__ = ("task_id", "last", "stale", "overflows", "_hub", "_buf", "_maxsize", "_waiter",
                 "_error", "_interrupted")

    def __init__(self, hub: Hub, task_id: str, after: int, maxsize: int) -> None:
        self.task_id = task_id
        self.last = after
        self.stale = False
        self.overflows = 0
        self._hub = hub
        self._buf: deque[LoggedEvent] = deque()
        self._maxsize = maxsize
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._interrupted = False

    # ------------------------------------------------------------ hub side
    def _push(self, events: list[LoggedEvent]) -> None:
        """Buffer ``events`` (seq order) or, past ``maxsize``, mark the subscriber stale."""
        if self.stale:
            return  # the catch-up read will cover these: they are already in the log
        if len(self._buf) + len(events) > self._maxsize:
            self._buf.clear()
            self.stale = True
            self.overflows += 1
        else:
            self._buf.extend(events)
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    # ------------------------------------------------------------ consumer side
    def interrupt(self) -> None:
        """Make the pending and every later ``next_batch`` return ``None`` (e.g. on server shutdown)."""
        self._interrupted = True
        self._wake()

    async def catch_up(self, count: int | None = None) -> list[LoggedEvent]:
        """Read events with seq > ``last`` straight from the log (``XRANGE``, at most ``count``); advances ``last``.

        Raises ``RedisError``.
        """
        batch = await self._hub.events.read(self.task_id, after=self.last, count=count or self._hub.catchup_count)
        out = [ev for ev in batch if ev.seq > self.last]
        if out:
            self.last = out[-1].seq
        return out

    async def next_batch(self, timeout_s: float) -> list[LoggedEvent] | None:
        """The next events with seq > ``last``, oldest first; ``[]`` after ``timeout_s`` s idle; ``None`` if interrupted.

        Raises the hub's ``RedisError`` (shared read failed, or hub not running)
        and ``RedisError`` of a catch-up read.
        """
        waited = False
        while True:
            if self._interrupted:
                return None
            if self._error is not None:
                raise self._error
            if self.stale:
                self.stale = False  # cleared first: an overflow during the read marks it again
                self._buf.clear()  # everything buffered so far is in the log at or before its end
                n = self._hub.catchup_count
                out = await self.catch_up(n)
                if len(out) >= n:
                    self.stale = True  # more to read: keep the hub from buffering meanwhile
                if out:
                    return out
                continue
            if self._buf:
                last = self.last
                out = [ev for ev in self._buf if ev.seq > last]
                self._buf.clear()
                if out:
                    self.last = out[-1].seq
                    return out
                continue
            if waited:
                return []
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            self._waiter = fut
            timer = loop.call_later(timeout_s, _resolve, fut)
            try:
                await fut
            finally:
                timer.cancel()
                self._waiter = None
            waited = True


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
