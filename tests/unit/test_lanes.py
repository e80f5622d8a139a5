"""Rule B2: keyed lanes run different keys at once, each key's jobs in order, at most ``limit`` at once."""

import asyncio

import pytest

from conduit.runtime.lanes import KeyedLanes


async def test_each_key_in_order_other_keys_at_once_never_over_the_limit():
    lanes, done, running, peak = KeyedLanes(3, "test"), [], [0], [0]

    async def handler(event: tuple[str, int]) -> None:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.01 if event[1] == 0 else 0)  # a key's first job is the slow one
        done.append(event)
        running[0] -= 1

    for i in range(3):
        for key in "abcd":
            await lanes.submit(key, handler, (key, i))
    await lanes.drain(5)
    assert len(done) == 12 and peak[0] <= 3
    for key in "abcd":
        assert [i for k, i in done if k == key] == [0, 1, 2]
    assert done.index(("b", 0)) < done.index(("a", 2))  # another key did not wait for a's lane


async def test_a_failed_job_is_logged_and_does_not_stop_its_lane_unless_propagated():
    lanes, done = KeyedLanes(2, "test"), []

    async def handler(event: str) -> None:
        if event.startswith("bad"):
            raise ValueError(event)
        done.append(event)

    await lanes.submit("k", handler, "bad1")
    await lanes.submit("k", handler, "ok1")
    job = await lanes.submit("k", handler, "bad2", propagate=True)
    with pytest.raises(ValueError, match="bad2"):
        await job
    await lanes.submit("k", handler, "ok2")
    await lanes.drain(5)
    assert done == ["ok1", "ok2"] and not lanes.jobs
