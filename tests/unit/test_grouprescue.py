"""Rule B5's schedule, in process (the rescue itself runs against tansu in tests/stack/test_group_rescue.py):

- a consumer counts as rebalancing from its subscription until an assignment, and not once assigned;
- a consumer rebalancing for ``after_s`` is rescued, then not again before another ``after_s``;
- an assigned consumer, or one without a group, is never rescued; a failing rescue is counted and retried later.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from prometheus_client import REGISTRY

from conduit.runtime import grouprescue


def _consumer(group: str | None, in_progress: bool) -> SimpleNamespace:
    subscription = SimpleNamespace(active=True, _reassignment_in_progress=in_progress)
    return SimpleNamespace(_group_id=group, _subscription=SimpleNamespace(subscription=subscription))


def test_rebalancing_reads_the_subscription() -> None:
    assert grouprescue.rebalancing(_consumer("g", True))
    assert not grouprescue.rebalancing(_consumer("g", False))
    assert not grouprescue.rebalancing(SimpleNamespace(_subscription=SimpleNamespace(subscription=None)))
    assert not grouprescue.rebalancing(object())


async def _watch(consumers: list, after_s: float, run_s: float, outcome: str = "taken_over") -> list[str]:
    calls: list[str] = []

    async def rescue(consumer: SimpleNamespace) -> str:
        calls.append(consumer._group_id)
        if outcome == "raise":
            raise ConnectionError("coordinator gone")
        return outcome

    task = asyncio.create_task(grouprescue.watch(lambda: consumers, after_s, every_s=0.02, rescue_one=rescue))
    await asyncio.sleep(run_s)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return calls


async def test_a_consumer_rebalancing_past_the_deadline_is_rescued_once_per_deadline() -> None:
    calls = await _watch([_consumer("stuck", True), _consumer("fine", False), _consumer(None, True)], 0.3, 0.8)
    assert set(calls) == {"stuck"} and 1 <= len(calls) <= 2, calls
    assert REGISTRY.get_sample_value("conduit_consumer_group_rescues_total", {"group": "stuck", "outcome": "taken_over"})


async def test_nothing_is_rescued_before_the_deadline() -> None:
    assert await _watch([_consumer("early", True)], 1.0, 0.5) == []


async def test_a_failing_rescue_is_counted_and_tried_again_later() -> None:
    calls = await _watch([_consumer("flaky", True)], 0.2, 0.9, outcome="raise")
    assert calls and len(calls) <= 4, calls
    assert REGISTRY.get_sample_value("conduit_consumer_group_rescues_total", {"group": "flaky", "outcome": "error"})
