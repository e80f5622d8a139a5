"""One shared Redis reader per gateway process, fanning task events out to SSE streams.

Before the hub, every open SSE stream ran its own blocking ``XREAD`` and so held one
Redis connection. ``StreamHub`` instead runs one background task that issues a single
multi-key ``XREAD COUNT <count> BLOCK <block_ms> STREAMS <wake> <task logs...>`` over
every task log (``conduit:events:{task_id}``) that currently has at least one
subscriber, on one dedicated connection, and hands what it reads to per-subscriber
bounded buffers.

Shapes and units:

- a *subscriber* is a ``Subscription`` (``services/gateway/streaming/subscription.py``): ``(task_id, last)`` where ``last`` is the seq
  (the SSE ``id:``, an int >= 0) of the last event the stream already delivered.
  ``Subscription.next_batch(timeout_s)`` returns the events with seq > ``last`` in
  seq order as ``list[LoggedEvent]`` (each seq exactly once), ``[]`` after
  ``timeout_s`` seconds without one, or ``None`` once ``interrupt()`` was called.
- per task the hub keeps one *topic*: its subscribers and the hub's cursor (the
  highest seq it has read for that log). ``count`` bounds the entries read per log
  and per ``XREAD``; ``queue_max`` bounds the events buffered per subscriber.
- changing the subscription set while the ``XREAD`` blocks adds no latency: adding a
  task that is not read yet XADDs to a private wake stream
  (``conduit:gateway:hub:{uuid}:wake``, ``MAXLEN 1``, expires after an hour) that is
  always the first key of the ``XREAD``, so the blocked read returns at once and
  the next one includes the new log. Removing a task needs no wake.

A subscriber with a ``sink`` (an SSE stream, ``services/gateway/streaming/sse.py``) that waits in
``next_batch`` with nothing buffered gets its events written through the sink at once, without a
wake-up (``Subscription._write``); the terminal event always goes through ``next_batch``.

No event is ever dropped silently. A subscriber that joins a task the hub already
reads past its ``last`` (a second client resuming from an older ``Last-Event-ID``)
or whose buffer overflows (a slow client) is marked *stale*: its buffer is cleared
and its next ``next_batch`` reads the gap from the durable log with ``XRANGE``
(``TaskEventLog.read``), in chunks of ``catchup_count``, before it takes buffered
events again (duplicates are skipped by seq).

Errors: a ``RedisError`` of the shared read is handed to every current subscriber
(``next_batch`` raises it; the SSE stream ends and the client resumes with
``Last-Event-ID``) and the hub retries with a capped backoff. ``subscribe`` on a hub
that is not running returns a subscription whose ``next_batch`` raises
``redis.exceptions.ConnectionError``.

Reading: the ``XREAD`` is packed by hand and its reply parsed by hiredis' C reader
(``conduit.runtime.resp.read_reply``) straight from the connection's stream (redis-py's pure-Python parser cost ~50 µs per
stream entry, more than everything else the gateway does per event); the connection itself
(connect, AUTH, SELECT, TLS, ``HELLO``) is still redis-py's, taken from ``reader``'s pool.

Memory: when the number of subscribers drops to 0 after a peak of at least
``release_min_peak``, the hub waits ``release_delay_s`` seconds (the HTTP
responses finish closing) and, if still idle, runs ``conduit.runtime.allocator.release_memory()``:
``gc.collect()`` and glibc ``malloc_trim(0)`` (skipped off glibc), which hands
freed heap pages back to the OS. CPython keeps a 1 MiB small-object arena while
any block in it lives, so after a large burst RSS settles at a high-water mark
that the next burst reuses (docs/benchmarks.md, section 3).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import uuid

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from conduit.records import keys
from conduit.records.taskstream import LoggedEvent, TaskEventLog
from conduit.runtime.allocator import release_memory
from conduit.runtime.resp import bulk, read_reply, text
from services.gateway.streaming.subscription import Subscription

log = logging.getLogger("conduit.gateway.hub")


class _Topic:
    """The hub's state for one task log: its key, the hub's read cursor (seq) and subscribers."""

    __slots__ = ("key", "bulk_key", "cursor", "bulk_id", "subs", "live")

    def __init__(self, key: bytes, cursor: int) -> None:
        self.key = key
        self.bulk_key = bulk(key)
        self.advance(cursor)
        self.subs: set[Subscription] = set()
        self.live = True  # False once removed: a read in flight must not feed a newer topic of the task

    def advance(self, cursor: int) -> None:
        """Set the read cursor (seq) and its ``XREAD`` id, packed once per change rather than once per round."""
        self.cursor = cursor
        self.bulk_id = bulk(b"%d-0" % cursor)


class StreamHub:
    """Shared multi-key ``XREAD`` over the task logs that have subscribers (see the module docstring).

    Args:
        reader: a Redis client used only by the hub (its blocking read, and the wakes that interrupt it);
            its socket read timeout must exceed ``block_ms``. Closed by ``stop``.
        events: the task logs (``TaskEventLog``); its client serves the
            subscribers' catch-up ``XRANGE`` reads.
        block_ms: ``XREAD BLOCK`` per round, in milliseconds (> 0).
        count: entries read per task log per round (bounds one round's size).
        queue_max: events buffered per subscriber before it falls back to ``XRANGE``.
        catchup_count: events per catch-up ``XRANGE`` read.
        release_delay_s: seconds of zero subscribers before ``release_memory`` runs.
        release_min_peak: the peak of concurrent subscribers since the last release
            that makes releasing worth its ``gc.collect()`` (0 = always).
    """

    def __init__(self, reader: Redis, events: TaskEventLog, *, block_ms: int = 2000, count: int = 100,
                 queue_max: int = 1000, catchup_count: int = 500, release_delay_s: float = 2.0,
                 release_min_peak: int = 32) -> None:
        if block_ms <= 0 or count <= 0 or queue_max <= 0 or catchup_count <= 0:
            raise ValueError("block_ms, count, queue_max and catchup_count must be positive")
        self.reader = reader
        self.events = events
        self.block_ms = block_ms
        self.count = count
        self.queue_max = queue_max
        self.catchup_count = catchup_count
        self.release_delay_s = release_delay_s
        self.release_min_peak = release_min_peak
        self.wake_key = keys.hub_wake(uuid.uuid4().hex).encode()
        self.rounds = 0
        """``XREAD`` calls made so far (a counter for tests and benchmarks)."""
        self.wakes = 0
        """Wake XADDs sent so far."""
        self._wake_id = b"0-0"
        self._topics: dict[str, _Topic] = {}
        self._nsubs = 0
        self._peak = 0
        self._task: asyncio.Task[None] | None = None
        self._blocking = False
        self._wake_pending = False
        self._wake_tasks: set[asyncio.Task[None]] = set()
        self._release: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------ lifecycle
    @property
    def running(self) -> bool:
        """True between ``start`` and ``stop`` (the reader task is alive)."""
        return self._task is not None and not self._task.done()

    @property
    def subscribers(self) -> int:
        """Subscriptions currently registered."""
        return self._nsubs

    @property
    def tasks(self) -> int:
        """Task logs currently read (tasks with at least one subscriber)."""
        return len(self._topics)

    def start(self) -> None:
        """Start the reader task on the running event loop (idempotent)."""
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="gateway-stream-hub")

    async def stop(self) -> None:
        """Stop the reader, fail remaining subscribers (``ConnectionError``), delete the wake stream, close ``reader``."""
        task, self._task = self._task, None
        while task is not None and not task.done():
            # cancel again until it lands: Python 3.11's ``asyncio.wait_for`` (used by redis-py's send)
            # drops a cancellation that arrives as its inner call completes
            task.cancel()
            await asyncio.wait([task], timeout=0.1)
        if task is not None and not task.cancelled() and task.exception() is not None:
            log.warning("stream hub reader ended with %r", task.exception())
        for t in list(self._wake_tasks):
            t.cancel()
        if self._release is not None:
            self._release.cancel()
            self._release = None
        for topic in self._topics.values():
            for sub in topic.subs:
                sub._fail(RedisConnectionError("stream hub stopped"))
        self._topics.clear()
        self._nsubs = 0
        with contextlib.suppress(RedisError, OSError):
            await self.events.redis.delete(self.wake_key)
        with contextlib.suppress(RedisError, OSError):
            await self.reader.aclose()

    # ------------------------------------------------------------ subscriptions
    def subscribe(self, task_id: str, after: int) -> Subscription:
        """Register a subscriber for ``task_id``'s events with seq > ``after`` (>= 0); never blocks."""
        sub = Subscription(self, task_id, after, self.queue_max)
        if not self.running:
            sub._fail(RedisConnectionError("stream hub is not running"))
            return sub
        topic = self._topics.get(task_id)
        if topic is None:
            topic = self._topics[task_id] = _Topic(TaskEventLog.keys(task_id)[0].encode(), after)
            self._wake()
        elif topic.cursor > after:
            sub.stale = True  # the hub is past ``after``: read the gap from the log first
        topic.subs.add(sub)
        self._nsubs += 1
        self._peak = max(self._peak, self._nsubs)
        if self._release is not None:
            self._release.cancel()
            self._release = None
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Remove ``sub`` (idempotent); a task without subscribers is no longer read."""
        sub.close()
        topic = self._topics.get(sub.task_id)
        if topic is None or sub not in topic.subs:
            return
        topic.subs.discard(sub)
        if not topic.subs:
            topic.live = False
            del self._topics[sub.task_id]
        self._nsubs -= 1
        sub._buf.clear()
        if self._nsubs == 0 and self._peak >= self.release_min_peak and self.running:
            self._release = asyncio.get_running_loop().call_later(self.release_delay_s, self._release_if_idle)

    def _release_if_idle(self) -> None:
        self._release = None
        if self._nsubs == 0:
            self._peak = 0
            release_memory()

    # ------------------------------------------------------------ reader
    def _wake(self) -> None:
        """Interrupt the blocked ``XREAD`` (at most one wake in flight per round)."""
        if not self._blocking or self._wake_pending:
            return
        self._wake_pending = True
        t = asyncio.get_running_loop().create_task(self._send_wake())
        self._wake_tasks.add(t)
        t.add_done_callback(self._wake_tasks.discard)

    async def _send_wake(self) -> None:
        self.wakes += 1
        try:
            # on the hub's own client: the shared pool can be exhausted by a burst of streams,
            # and a wake queued behind it left new streams unread for up to block_ms
            async with self.reader.pipeline(transaction=False) as pipe:
                pipe.xadd(self.wake_key, {b"w": b"1"}, maxlen=1, approximate=False)
                pipe.expire(self.wake_key, 3600)
                await pipe.execute()
        except RedisError as exc:  # the read ends by itself within block_ms
            log.warning("stream hub wake failed: %r", exc)

    async def _run(self) -> None:
        backoff = 0.1
        conn: AbstractConnection | None = None
        try:
            while True:
                parts = [b"", bulk(b"XREAD"), bulk(b"COUNT"), bulk(b"%d" % self.count), bulk(b"BLOCK"),
                         bulk(b"%d" % self.block_ms), bulk(b"STREAMS"), bulk(self.wake_key)]
                ids = [bulk(self._wake_id)]
                read: dict[bytes, _Topic] = {}
                for topic in self._topics.values():
                    parts.append(topic.bulk_key)
                    ids.append(topic.bulk_id)
                    read[topic.key] = topic
                parts[0] = b"*%d\r\n" % (len(parts) - 1 + len(ids))
                parts.extend(ids)
                self._wake_pending = False  # this read includes every topic known now
                self._blocking = True
                try:
                    if conn is None:
                        conn = await self.reader.connection_pool.get_connection()
                    await self._xread(conn, b"".join(parts), read)
                except RedisError as exc:
                    self._blocking = False
                    self._read_failed(exc)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                backoff = 0.1
        finally:
            self._blocking = False
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.disconnect(nowait=True)
                with contextlib.suppress(Exception):
                    await self.reader.connection_pool.release(conn)

    def _read_failed(self, exc: RedisError) -> None:
        """Hand a failed read's ``exc`` to every current subscriber (their streams end; clients resume)."""
        log.warning("stream hub read failed (%d tasks): %r", len(self._topics), exc)
        for topic in self._topics.values():
            for sub in topic.subs:
                sub._fail(exc)

    async def _xread(self, conn: AbstractConnection, command: bytes, read: dict[bytes, _Topic]) -> None:
        """Send one packed ``XREAD`` on the hub's connection, parse its reply (``conduit.runtime.resp.read_reply``;
        waits ``block_ms`` plus the socket timeout) and hand the events to the subscribers. Raises ``RedisError``.

        The cyclic GC is paused from the reply's first bytes until it is dispatched and dropped (a few ms): its
        thousands of lists are acyclic and die right after; a collection that ran while a reply was half read
        moved them to the older generations, which then triggered full collections over every open stream's
        objects (a third of the gateway's CPU with 1,000 streams, bench/sse_fanout.py under py-spy --native)."""
        timeout = self.block_ms / 1000 + (getattr(conn, "socket_timeout", None) or 30.0)
        paused = False

        def pause() -> None:
            nonlocal paused
            if gc.isenabled():
                gc.disable()
                paused = True

        try:
            res = await read_reply(conn, command, timeout, on_data=pause)
            self._blocking = False
            self.rounds += 1
            if res:
                self._dispatch(res, read)
            del res
        finally:
            if paused:
                gc.enable()

    def _dispatch(self, res: list | dict, read: dict[bytes, _Topic]) -> None:
        rows = res.items() if isinstance(res, dict) else res
        for key, entries in rows:
            if not entries:
                continue
            if key == self.wake_key:
                self._wake_id = entries[-1][0]
                continue
            topic = read.get(key)
            if topic is None or not topic.live:
                continue  # unsubscribed while the read was in flight
            batch = []
            cursor = topic.cursor
            for entry_id, fields in entries:
                seq = int(entry_id[: entry_id.index(b"-")])
                if seq <= cursor:
                    continue
                if isinstance(fields, dict):
                    etype, data = fields.get(b"type"), fields.get(b"data")
                else:  # [field, value, field, value, ...]
                    etype = data = None
                    for i in range(0, len(fields) - 1, 2):
                        if fields[i] == b"type":
                            etype = fields[i + 1]
                        elif fields[i] == b"data":
                            data = fields[i + 1]
                batch.append(LoggedEvent(seq=seq, type=text(etype), data=text(data)))
            if not batch:
                continue
            topic.advance(batch[-1].seq)
            for sub in topic.subs:
                sub._push(batch)
