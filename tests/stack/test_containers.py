"""What only a real Kafka shows (pytest ``--containers``, a Docker engine; skipped otherwise):
a consumer group rebalancing its partitions when a member joins and when one is killed, and a
broker restart that keeps its topics and committed offsets (tansu keeps them in memory only).

Apache Kafka (KRaft), Redis and Qdrant containers from ``testkit.containers``; the
Conduit stack is real retriever, orchestrator (two replicas, no model: retrieval-only answers)
and gateway processes.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ops.client import create_task, stream_task
from ops.stack import Stack
from testkit.stack import add_replica, start_stack

pytestmark = pytest.mark.containers

VAT_LAW = "中华人民共和国增值税法"


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory) -> Iterator[Stack]:
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("containers"),
                     ("retriever", "orchestrator", "gateway"),
                     {"CONDUIT_TOOL_TIMEOUT_S": "20", "CONDUIT_KAFKA_FETCH_MAX_WAIT_MS": "100"}, laws=[VAT_LAW])
    yield st
    st.stop()


def _ask_all(stack: Stack, n: int, tag: str) -> list[str]:
    return [create_task(stack.gateway_url, f"增值税的征收率是多少？({tag} {i})", api_key=stack.admin_key)["task_id"]
            for i in range(n)]


def _ended(stack: Stack, task_ids: list[str]) -> list[str]:
    return [list(stream_task(stack.gateway_url, t, read_timeout_s=120, api_key=stack.admin_key))[-1].event
            for t in task_ids]


def test_orchestrator_group_rebalances_when_a_replica_joins_and_is_killed(stack: Stack) -> None:
    before = _ask_all(stack, 4, "one replica")
    second = add_replica(stack, "orchestrator", "orchestrator-2")
    stack.wait_ready(120)
    during = _ask_all(stack, 8, "two replicas")
    second.proc.send_signal(signal.SIGKILL)  # its partitions go back to the first after the session timeout
    second.proc.wait(30)
    after = _ask_all(stack, 8, "after the kill")
    assert set(_ended(stack, before + during + after)) == {"task.completed"}


async def _produce_restart_consume(infra, topic: str, n: int) -> tuple[list[int], list[int]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=infra.bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=infra.bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    for i in range(n):
        await producer.send_and_wait(topic, str(i).encode(), key=str(i % 5).encode())
    await producer.stop()
    group = f"restart-{uuid.uuid4().hex[:8]}"
    first = await _consume(infra.bootstrap, topic, group, n // 2)  # commits half
    await asyncio.to_thread(infra.containers.restart_kafka)
    rest = await _consume(infra.bootstrap, topic, group, n - len(first))
    return first, rest


async def _consume(bootstrap: str, topic: str, group: str, want: int, timeout_s: float = 90) -> list[int]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    got: list[int] = []
    try:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while len(got) < want and asyncio.get_running_loop().time() < deadline:
            for records in (await consumer.getmany(timeout_ms=500, max_records=want - len(got))).values():
                got += [int(r.value) for r in records]
            await consumer.commit()
    finally:
        await consumer.stop()
    return got


def test_broker_restart_keeps_topics_and_committed_offsets(stack: Stack, infra_stack) -> None:
    n = 60
    first, rest = asyncio.run(_produce_restart_consume(infra_stack, f"durable-{uuid.uuid4().hex[:8]}", n))
    assert sorted(first + rest) == list(range(n)), "records lost or read twice across the restart"
    # Conduit's own topics survived too: the running services answer a new question without recreating them
    assert set(_ended(stack, _ask_all(stack, 2, "after the broker restart"))) == {"task.completed"}
