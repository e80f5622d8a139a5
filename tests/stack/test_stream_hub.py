"""The gateway's shared SSE reader (``services.gateway.streaming.hub.StreamHub``) against the session's real Redis.

Writers append with the real ``TaskEventLog``; subscribers consume with
``Subscription.next_batch`` exactly as ``services.gateway.streaming.sse`` does.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from ops import infra
from conduit.records.taskstream import TaskEventLog
from contracts.stream import AnswerDelta, TaskCompleted
from conduit.runtime.allocator import release_memory
from testkit.waits import until
from services.gateway.streaming.hub import StreamHub, Subscription


@pytest.fixture
def log(redis: Redis) -> TaskEventLog:
    return TaskEventLog(redis, ttl_s=600)


@pytest.fixture
async def make_hub(infra_stack, log) -> AsyncIterator:
    hubs: list[StreamHub] = []

    def make(**kw: object) -> StreamHub:
        hub = StreamHub(Redis.from_url(infra_stack.redis_url, socket_timeout=30), log, **kw)
        hub.start()
        hubs.append(hub)
        return hub

    yield make
    for hub in hubs:
        await hub.stop()


def tid() -> str:
    return uuid.uuid4().hex


async def drain(sub: Subscription, until_seq: int, timeout: float = 20) -> list[int]:
    """Seqs from ``sub`` until ``until_seq`` arrives (fails on timeout or on a seq out of order)."""
    seen: list[int] = []
    deadline = time.monotonic() + timeout
    while not seen or seen[-1] < until_seq:
        assert time.monotonic() < deadline, f"{sub.task_id}: stuck after {seen[-1:]}"
        batch = await sub.next_batch(0.5)
        assert batch is not None
        seen.extend(ev.seq for ev in batch)
    return seen


async def test_many_concurrent_subscribers_get_every_event_in_order(make_hub, log):
    hub = make_hub(block_ms=5000, count=7)  # a small count: several rounds per burst
    tasks = [tid() for _ in range(40)]
    n = 60
    for t in tasks:
        await log.append(t, AnswerDelta(text="0"))  # seq 1 exists before anyone subscribes
    subs: list[tuple[Subscription, int]] = []
    for i, t in enumerate(tasks):
        for after in (0, 1, i % 5):  # three streams per task, resuming from different ids
            subs.append((hub.subscribe(t, after), after))
    assert hub.subscribers == 120 and hub.tasks == 40

    async def write() -> None:
        for j in range(n):
            await asyncio.gather(*(log.append(t, AnswerDelta(text=str(j))) for t in tasks))
            if j % 10 == 0:
                await asyncio.sleep(0.01)
        await asyncio.gather(*(log.append(t, TaskCompleted(answer="x", latency_ms=1.0)) for t in tasks))

    writer = asyncio.create_task(write())
    results = await asyncio.gather(*(drain(sub, n + 2) for sub, _ in subs))
    await writer
    for (sub, after), seqs in zip(subs, results):
        assert seqs == list(range(after + 1, n + 3)), sub.task_id
        hub.unsubscribe(sub)
    assert hub.subscribers == 0 and hub.tasks == 0
    assert hub.rounds < 40 * n  # one read serves many streams


async def test_subscriber_added_while_the_read_blocks_gets_its_first_event_promptly(make_hub, log):
    hub = make_hub(block_ms=10_000)
    idle = hub.subscribe(tid(), 0)  # keeps the reader blocked on one quiet log
    assert await until(lambda: hub._blocking, 10)

    # promptly = well inside the 10 s block: without the wake, next_batch(5) would return [] first
    t = tid()
    await log.append(t, AnswerDelta(text="already there"))
    rounds = hub.rounds
    sub = hub.subscribe(t, 0)
    batch = await sub.next_batch(5)
    assert [ev.seq for ev in batch] == [1] and hub.wakes >= 1

    assert await until(lambda: hub._blocking and hub.rounds > rounds, 10)  # blocked again, now on both logs
    await log.append(t, AnswerDelta(text="live"))
    batch = await sub.next_batch(5)
    assert [ev.seq for ev in batch] == [2]
    hub.unsubscribe(sub)
    hub.unsubscribe(idle)


async def test_late_subscriber_behind_the_hub_reads_its_gap_from_the_log(make_hub, log):
    hub = make_hub(block_ms=5000)
    t = tid()
    first = hub.subscribe(t, 0)
    for j in range(5):
        await log.append(t, AnswerDelta(text=str(j)))
    assert await drain(first, 5) == [1, 2, 3, 4, 5]
    late = hub.subscribe(t, 2)  # the hub's cursor is at 5
    assert late.stale
    await log.append(t, AnswerDelta(text="6"))
    assert await drain(late, 6) == [3, 4, 5, 6]
    assert await drain(first, 6) == [6]
    hub.unsubscribe(first)
    hub.unsubscribe(late)


async def test_queue_overflow_falls_back_to_the_log_without_loss(make_hub, log):
    hub = make_hub(block_ms=5000, count=10, queue_max=5, catchup_count=7)
    t = tid()
    slow = hub.subscribe(t, 0)
    fast = hub.subscribe(t, 0)
    fast_seen = asyncio.create_task(drain(fast, 41))
    for j in range(40):  # nobody reads ``slow`` meanwhile: its 5-event buffer overflows
        await log.append(t, AnswerDelta(text=str(j)))
    await log.append(t, TaskCompleted(answer="x", latency_ms=1.0))
    assert await fast_seen == list(range(1, 42))
    deadline = time.monotonic() + 5
    while not slow.overflows and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert slow.overflows >= 1 and slow.stale
    seqs = await drain(slow, 41)
    assert seqs == list(range(1, 42))
    hub.unsubscribe(slow)
    hub.unsubscribe(fast)


async def test_unsubscribe_on_disconnect_leaves_no_registration(make_hub, log):
    hub = make_hub(block_ms=5000)
    t = tid()
    subs = [hub.subscribe(t, 0) for _ in range(3)]

    async def stream(sub: Subscription) -> None:  # what the SSE generator does
        try:
            while True:
                await sub.next_batch(10)
        finally:
            hub.unsubscribe(sub)

    runners = [asyncio.create_task(stream(s)) for s in subs]
    await log.append(t, AnswerDelta(text="x"))
    assert await until(lambda: all(s.last == 1 and s._waiter is not None for s in subs), 10)  # read, waiting again
    assert hub.subscribers == 3 and hub.tasks == 1
    for r in runners:  # the client went away: sse-starlette cancels the generator
        r.cancel()
    await asyncio.gather(*runners, return_exceptions=True)
    assert hub.subscribers == 0 and hub.tasks == 0 and hub._topics == {}
    assert all(s._waiter is None for s in subs)
    hub.unsubscribe(subs[0])  # idempotent
    assert hub.subscribers == 0
    # the reader keeps serving new subscribers afterwards
    sub = hub.subscribe(t, 0)
    assert [ev.seq for ev in await sub.next_batch(5)] == [1]
    hub.unsubscribe(sub)


async def test_interrupt_ends_the_wait_at_once(make_hub):
    hub = make_hub(block_ms=5000)
    sub = hub.subscribe(tid(), 0)
    waiting = asyncio.create_task(sub.next_batch(10))
    assert await until(lambda: sub._waiter is not None, 5)
    sub.interrupt()
    assert await asyncio.wait_for(waiting, 1) is None
    hub.unsubscribe(sub)


async def test_redis_error_reaches_subscribers_and_a_stopped_hub_refuses(log):
    dead = Redis.from_url(f"redis://127.0.0.1:{infra.free_port()}/0", socket_connect_timeout=1)
    hub = StreamHub(dead, log, block_ms=200)
    sub = hub.subscribe(tid(), 0)  # not started yet
    with pytest.raises(RedisError):
        await sub.next_batch(1)
    hub.start()
    sub = hub.subscribe(tid(), 0)
    with pytest.raises(RedisError):
        await sub.next_batch(5)
    hub.unsubscribe(sub)
    await hub.stop()
    assert not hub.running


async def test_release_memory_after_the_last_subscriber_leaves(make_hub, monkeypatch):
    import services.gateway.streaming.hub as hub_module

    calls: list[int] = []
    monkeypatch.setattr(hub_module, "release_memory", lambda: calls.append(1) or True)
    hub = make_hub(block_ms=5000, release_delay_s=0.1, release_min_peak=2)
    a, b = hub.subscribe(tid(), 0), hub.subscribe(tid(), 0)
    hub.unsubscribe(a)
    assert calls == [] and hub._release is None  # one stream still open: no release scheduled
    hub.unsubscribe(b)
    assert await until(lambda: calls == [1], 5)
    assert isinstance(release_memory(), bool)


async def test_direct_writes_reach_a_waiting_stream_in_order_and_the_terminal_event_wakes_it(make_hub, log):
    """``Subscription.sink``: events that find the stream parked in ``next_batch`` are written through the sink
    without waking it; a refused write (a full socket) and the terminal event come back through ``next_batch``."""
    hub = make_hub(block_ms=5000)
    t = tid()
    await log.append(t, AnswerDelta(text="0"))  # seq 1
    sub = hub.subscribe(t, 0)
    written: list[int] = []
    refuse = {4}  # the write of seq 4 is refused: it must come through next_batch, in order

    def sink(events: list) -> bool:
        if any(ev.seq in refuse for ev in events):
            return False
        written.extend(ev.seq for ev in events)
        return True

    got = await sub.next_batch(5)  # no sink yet: seq 1 comes through next_batch
    assert [ev.seq for ev in got] == [1]
    sub.sink = sink
    returned: list[int] = []

    async def stream() -> None:
        while True:
            batch = await sub.next_batch(5)
            assert batch is not None
            returned.extend(ev.seq for ev in batch)
            if batch and batch[-1].terminal:
                return

    reader = asyncio.create_task(stream())
    for j in range(2, 7):  # seqs 2..6, one per hub round
        assert await until(lambda: sub._waiter is not None and not sub._waiter.done(), 10)
        await log.append(t, AnswerDelta(text=str(j)))
        assert await until(lambda j=j: sub.last >= j, 10)
    await log.append(t, TaskCompleted(answer="x", latency_ms=1.0))  # seq 7
    await asyncio.wait_for(reader, 10)
    assert sorted(written + returned) == list(range(2, 8)) and len(written + returned) == 6
    assert 4 in returned and 7 in returned and sub.written == len(written) >= 3
    assert sub.last == 7
    hub.unsubscribe(sub)
