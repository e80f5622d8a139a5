"""Conduit on a real Redis Cluster (rules O8, O9; docs/operations.md "Redis Cluster"): three masters and
three replicas on loopback (``testkit.rediscluster``), the services started with
``CONDUIT_REDIS_CLUSTER=true`` over the session's broker, the scripted model.

- a tool-using question runs end to end: streamed, cited, resumable with ``Last-Event-ID``, its
  record complete; its keys carry its shard's hash tag (one slot for the checkpoint's script);
- a master is SIGKILLed while a question runs (the one holding the task's slot): its replica takes
  over and the task still ends with exactly one terminal event, the answer the script gives.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from conduit.records import keys, slots
from conduit.records.taskstream import TaskEventLog
from conduit.runtime.redis_client import make_redis, make_sync
from ops.client import create_task, stream_task
from ops.stack import Stack
from testkit.rediscluster import LocalCluster, start_cluster
from testkit.scripted_model import cite_vat, vat_kb_call
from testkit.stack import auth, model_env, start_stack

VAT_LAW = "中华人民共和国增值税法"
QUESTION = "小规模纳税人适用简易计税方法的征收率是多少？"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    c = start_cluster(tmp_path_factory.mktemp("redis-cluster"), masters=3, replicas=1, node_timeout_ms=2000)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def stack(infra_stack, cluster, tmp_path_factory, model) -> Iterator[Stack]:
    env = model_env(model.base_url, tool_timeout_s=30) | {"CONDUIT_REDIS_CLUSTER": "true"}
    st = start_stack(infra_stack.bootstrap, cluster.url, tmp_path_factory.mktemp("cluster-data"),
                     ("retriever", "orchestrator", "gateway"), env, laws=[VAT_LAW])
    try:
        yield st
    finally:
        st.stop()
        slots.configure(0)  # this process named keys for the cluster (the admin key): back to one node


def terminal_count(stack: Stack, task_id: str) -> int:
    async def count() -> int:
        client = make_redis(stack.settings.store)
        try:
            return sum(e.terminal for e in await TaskEventLog(client).read(task_id, count=100_000))
        finally:
            await client.aclose()

    return asyncio.run(count())


def test_a_tool_using_question_runs_end_to_end_on_redis_cluster(stack, model):
    model.push(vat_kb_call(), cite_vat)
    created = create_task(stack.gateway_url, QUESTION, api_key=stack.admin_key)
    task_id = created["task_id"]
    events = list(stream_task(stack.gateway_url, task_id, read_timeout_s=60, reconnects=0, api_key=stack.admin_key))
    types = [e.event for e in events]
    assert types[0] == "task.accepted" and types[-1] == "task.completed" and types.count("task.completed") == 1
    assert types.index("tool.requested") < types.index("tool.completed") < types.index("evidence")
    evidence = [i for e in events if e.event == "evidence" for i in e.data["items"]]
    vat = [i for i in evidence if VAT_LAW in i["title"] and i["locator"] == "第十一条"]
    assert vat, [(i["title"], i["locator"]) for i in evidence]
    assert f"[{vat[0]['index']}]" in events[-1].data["answer"]

    k = events[2].id  # resume after the third event: exactly the later ones
    replay = list(stream_task(stack.gateway_url, task_id, last_event_id=k, api_key=stack.admin_key))
    assert [e.id for e in replay] == [e.id for e in events if e.id > k]
    view = httpx.get(f"{stack.gateway_url}/v1/tasks/{task_id}", headers=auth(stack.admin_key)).json()
    assert view["status"] == "completed" and view["answer"] == events[-1].data["answer"]

    # rule O8: the task's keys share its shard's hash tag, so they live in one slot
    r = make_sync(stack.settings.store)
    try:
        tagged = [keys.state(task_id), keys.task(task_id), *TaskEventLog.keys(task_id)]
        assert all(f"{{s{slots.shard(task_id)}}}" in k for k in tagged)
        assert len({r.keyslot(k) for k in [*tagged, keys.leases_of(task_id), keys.public_outbox_of(task_id)]}) == 1
        assert r.exists(keys.state(task_id)) and r.exists(keys.task(task_id))
    finally:
        r.close()
    assert terminal_count(stack, task_id) == 1
    model.script.clear()


def test_a_master_killed_mid_question_the_task_still_ends_once(stack, cluster, model):
    """The master holding the task's slot is SIGKILLed while the model streams its answer; its replica
    takes over (cluster-node-timeout 2 s) and the task ends once, with the scripted answer."""
    started = threading.Event()

    def slow_answer(body: dict) -> Turn:
        started.set()
        return cite_vat(body, chunks=20, chunk_delay_s=0.5)

    # the step resumed on another connection (rule A16) asks again: a plain answer
    model.push(vat_kb_call(), slow_answer, cite_vat, cite_vat)
    created = create_task(stack.gateway_url, QUESTION, api_key=stack.admin_key)
    task_id = created["task_id"]
    assert started.wait(60), "the model was not asked to answer"
    r = make_sync(stack.settings.store)
    try:
        node = r.get_node_from_key(keys.state(task_id))
    finally:
        r.close()
    killed = cluster.kill_master(node.port)
    cluster.wait_failover(killed, timeout_s=30)

    deadline = time.monotonic() + 120
    final = None
    while time.monotonic() < deadline:
        view = httpx.get(f"{stack.gateway_url}/v1/tasks/{task_id}", headers=auth(stack.admin_key), timeout=10)
        if view.status_code == 200 and view.json()["status"] in ("completed", "failed", "cancelled"):
            final = view.json()
            break
        time.sleep(0.5)
    assert final is not None, "the task did not end after the failover"
    assert final["status"] == "completed" and "百分之三" in final["answer"], final
    events = list(stream_task(stack.gateway_url, task_id, read_timeout_s=60, reconnects=3, api_key=stack.admin_key))
    assert [e.event for e in events].count("task.completed") == 1 and events[-1].event == "task.completed"
    assert terminal_count(stack, task_id) == 1
    model.script.clear()
