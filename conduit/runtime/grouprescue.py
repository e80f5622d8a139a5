"""Rescue a consumer group whose leader left while it was forming (rule B5).

tansu's group coordinator (0.6.x, and its successor's main as read on 2026-12-07) keeps the
leader of a forming group when that leader sends ``LeaveGroup``: the member is removed, the
leader's id is not. From then on every other member's ``SyncGroup`` is answered
``REBALANCE_IN_PROGRESS`` (only the leader may finish the round), every ``JoinGroup`` names the
departed leader again, and the expiry of silent members cannot clear it (the leader is no longer
a member). No consumer of the group holds a partition until the broker restarts. A rollout hits
it when a replica is SIGTERMed in the seconds after another replica joined (its group was
forming and it was the leader): the stuck web group of issue 39's flaky rollout test.

The rescue, run by a process whose consumer has been rebalancing for longer than
``kafka_group_rescue_after_s``: with a client of its own it joins the group (a new member id),
reads the leader the coordinator names, joins *as that leader*, finishes the round (tansu wants an
assignment for every member: all partitions to the leader, none to the others), then leaves as the
leader and as its own member. The group is forming again with no leader, and the next member to
join (the stuck consumer, within a second) becomes leader and assigns every partition among the
live members. On a real Kafka coordinator a join with a made-up member id is refused
(``UNKNOWN_MEMBER_ID``): the rescue stops there and costs one extra rebalance.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiokafka.client import CoordinationType
from aiokafka.coordinator.protocol import ConsumerProtocol, ConsumerProtocolMemberAssignment
from aiokafka.protocol.group import JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

from conduit.runtime.metrics import GROUP_RESCUES

log = logging.getLogger("conduit.runtime.grouprescue")

RESCUE_TIMEOUT_S = 30.0
"""Bound of one rescue (seconds): its own join waits out tansu's 3 s follower pause, and a join or
sync tansu retries for a member without an assignment can take another 3 s."""

MEMBER_ID_REQUIRED = 79
"""Kafka error code: the coordinator assigned a member id; join again with it (KIP-394)."""


def rebalancing(consumer: Any) -> bool:
    """True while ``consumer`` (an ``AIOKafkaConsumer`` of a group) waits for its next assignment:
    from its subscription until the first assignment, and from every rejoin until the next."""
    try:
        subscription = consumer._subscription.subscription  # noqa: SLF001 - no public flag for it
    except AttributeError:
        return False
    return subscription is not None and subscription.active and bool(subscription._reassignment_in_progress)  # noqa: SLF001


async def join_group(client: Any, node: int, group: str, member_id: str, protocols: list[tuple[str, bytes]],
                     session_timeout_ms: int, rebalance_timeout_ms: int) -> Any:
    """Send ``JoinGroup`` for ``member_id`` ("" for a new member) with ``protocols`` (assignor name,
    metadata bytes) to coordinator ``node`` over ``client`` (an ``AIOKafkaClient``), joining again
    with the id the coordinator hands out (``MEMBER_ID_REQUIRED``). Returns the last
    ``JoinGroupResponse`` (check its ``error_code``); raises ``aiokafka.errors.KafkaError`` on a lost connection."""
    while True:
        response = await client.send(node, JoinGroupRequest(group, session_timeout_ms, rebalance_timeout_ms, member_id,
                                                             None, ConsumerProtocol.PROTOCOL_TYPE, protocols))
        if response.error_code != MEMBER_ID_REQUIRED:
            return response
        member_id = response.member_id


async def rescue(consumer: Any) -> str:
    """Take over the departed leader of ``consumer``'s group once, as the module says.

    Returns the outcome: ``taken_over`` (the named leader's round finished and left),
    ``refused:<step>:<error code>`` (the coordinator refused ``join``, ``join_as_leader`` or ``sync``: a
    real Kafka, or the group moved on),
    ``not_started`` (the consumer has no group client yet). Raises what the client raises on a lost
    connection (``aiokafka.errors.KafkaError``); the caller logs it and tries again later.
    """
    client, coordinator = getattr(consumer, "_client", None), getattr(consumer, "_coordinator", None)
    subscription = consumer._subscription.subscription  # noqa: SLF001
    if client is None or coordinator is None or subscription is None:
        return "not_started"
    group = consumer._group_id  # noqa: SLF001
    topics = sorted(subscription.topics)
    protocols = [(a.name, a.metadata(set(topics)).encode()) for a in coordinator._assignors]  # noqa: SLF001
    node = await client.coordinator_lookup(CoordinationType.GROUP, group)

    async def join(member_id: str) -> Any:
        return await join_group(client, node, group, member_id, protocols,
                                coordinator._session_timeout_ms, coordinator._rebalance_timeout_ms)  # noqa: SLF001

    own = await join("")
    if own.error_code:
        return f"refused:join:{own.error_code}"
    me = own.member_id
    leader = own.leader_id or me
    try:
        as_leader = own if leader == me else await join(leader)
        if as_leader.error_code:
            return f"refused:join_as_leader:{as_leader.error_code}"
        everything = ConsumerProtocolMemberAssignment(
            0, [(t, sorted(client.cluster.partitions_for_topic(t) or ())) for t in topics], b"").encode()
        nothing = ConsumerProtocolMemberAssignment(0, [], b"").encode()
        assignments = [(m[0], everything if m[0] == leader else nothing) for m in as_leader.members]
        synced = await client.send(node, SyncGroupRequest(group, as_leader.generation_id, leader, None, assignments))
        if synced.error_code:
            return f"refused:sync:{synced.error_code}"
        await client.send(node, LeaveGroupRequest(group, leader))
        return "taken_over"
    finally:
        if leader != me:
            await client.send(node, LeaveGroupRequest(group, me))


async def watch(consumers: Any, after_s: float, every_s: float = 1.0,
                rescue_one: Callable[[Any], Awaitable[str]] = rescue) -> None:
    """Run forever: rescue the group of any consumer of ``consumers()`` (a callable returning the
    process's ``AIOKafkaConsumer`` objects now) that has been rebalancing for ``after_s`` seconds
    plus up to 25 % jitter (so two stuck replicas seldom rescue at once); after a rescue, that
    consumer gets another ``after_s`` before the next. Each rescue (``rescue_one``, ``rescue`` by
    default) is bounded by ``RESCUE_TIMEOUT_S``. Cancel the task to stop it."""
    since: dict[int, float] = {}
    while True:
        await asyncio.sleep(every_s)
        now, seen = time.monotonic(), set()
        for consumer in _groups(consumers()):
            key = id(consumer)
            seen.add(key)
            if not rebalancing(consumer):
                since.pop(key, None)
                continue
            start = since.setdefault(key, now + random.uniform(0, after_s / 4))  # noqa: S311 - jitter
            if now - start < after_s:
                continue
            group = consumer._group_id  # noqa: SLF001
            try:
                outcome = await asyncio.wait_for(rescue_one(consumer), timeout=RESCUE_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - a lost connection or timeout: try again after another after_s
                outcome = f"error:{type(exc).__name__}"
            GROUP_RESCUES.labels(group=group, outcome=outcome.split(":")[0]).inc()
            log.warning("consumer group %s rebalancing for %.0f s: rescue %s", group, now - start, outcome)
            since[key] = time.monotonic()
        for key in set(since) - seen:
            del since[key]


def _groups(consumers: Iterable[Any]) -> list[Any]:
    return [c for c in consumers if getattr(c, "_group_id", None)]
