"""One SSE stream's view of a task log through the gateway's ``StreamHub`` (``services/gateway/streaming/hub.py``).

The hub pushes what its shared ``XREAD`` reads into each subscriber's bounded buffer
(``_push``); the stream's one coroutine takes it with ``next_batch``. A subscriber whose
buffer overflowed, or that joined behind the hub's cursor, is *stale* and reads its gap from
the durable log (``XRANGE``) before it takes buffered events again; no event is dropped silently.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
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
        sink: the stream's direct writer, or None: ``sink(events) -> bool`` writes ``events`` (seq order, none
            terminal) to the client at once and says whether it did (False: nothing written, e.g. the
            socket's buffer is full). Set by the stream before its first ``next_batch``.
        written: events handed to ``sink`` so far; ``written_at``: loop time of the last one (0.0 before).
    """

    __slots__ = ("task_id", "last", "stale", "overflows", "sink", "written", "written_at", "_hub", "_buf",
                 "_maxsize", "_waiter", "_error", "_interrupted", "_deadline", "_timeout_s", "_timer")

    def __init__(self, hub: Hub, task_id: str, after: int, maxsize: int) -> None:
        self.task_id = task_id
        self.last = after
        self.stale = False
        self.overflows = 0
        self.sink: Callable[[list[LoggedEvent]], bool] | None = None
        self.written = 0
        self.written_at = 0.0
        self._hub = hub
        self._buf: deque[LoggedEvent] = deque()
        self._maxsize = maxsize
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._interrupted = False
        self._deadline = 0.0  # loop time at which the pending wait ends idle
        self._timeout_s = 0.0  # the pending wait's idle timeout
        self._timer: asyncio.TimerHandle | None = None  # armed at or before ``_deadline``; kept across waits

    # ------------------------------------------------------------ hub side
    def _push(self, events: list[LoggedEvent]) -> None:
        """Hand ``events`` (seq order) to the stream: written at once through ``sink`` while the stream waits
        with nothing in hand, else buffered, or, past ``maxsize``, the subscriber marked stale."""
        if self.stale:
            return  # the catch-up read will cover these: they are already in the log
        if self.sink is not None and self._write(events):
            return
        if len(self._buf) + len(events) > self._maxsize:
            self._buf.clear()
            self.stale = True
            self.overflows += 1
        else:
            self._buf.extend(events)
        self._wake()

    def _write(self, events: list[LoggedEvent]) -> bool:
        """Write ``events`` through ``sink`` without waking the stream's coroutine, when that keeps the order
        and the stream's own checks: it is parked in ``next_batch`` with nothing buffered, no error or
        interrupt is pending, and no event ends the stream (a terminal event goes through ``next_batch``).
        True when written (``last`` advanced; the pending wait's idle deadline starts again)."""
        w = self._waiter
        if w is None or w.done() or self._buf or self._error is not None or self._interrupted:
            return False
        last = self.last
        fresh = [ev for ev in events if ev.seq > last]
        if not fresh:
            return True  # nothing new for this stream: already delivered
        for ev in fresh:
            if ev.terminal:
                return False
        if not self.sink(fresh):  # type: ignore[misc]
            return False
        self.last = fresh[-1].seq
        self.written += len(fresh)
        self.written_at = now = asyncio.get_running_loop().time()
        self._deadline = now + self._timeout_s
        return True

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
            self._timeout_s = timeout_s
            self._deadline = loop.time() + timeout_s
            if self._timer is not None and self._timer.when() > self._deadline:  # a shorter wait than the last
                self._timer.cancel()
                self._timer = None
            if self._timer is None:
                self._timer = loop.call_at(self._deadline, self._on_timer)
            try:
                await fut
            finally:
                self._waiter = None
            waited = True

    def _on_timer(self) -> None:
        """The idle timer: ends the pending wait once its deadline passed, else re-arms for the rest.

        One timer serves the waits of a busy stream (an event every few ms) instead of one timer
        created and cancelled per wait; it fires at most once per ``timeout_s`` of a stream."""
        self._timer = None
        w = self._waiter
        if w is None or w.done():
            return
        loop = asyncio.get_running_loop()
        if loop.time() >= self._deadline:
            w.set_result(None)
        else:
            self._timer = loop.call_at(self._deadline, self._on_timer)

    def close(self) -> None:
        """Cancel the idle timer (the stream ended; called by ``StreamHub.unsubscribe``)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
