"""Rule K10 over the real stack: two retriever replicas on the embedded Qdrant Edge store.

Gateway and two retriever processes over their own embedded tansu and redis-server (replicas on
the embedded store need the embedded broker), with one real law ingested before the start, so
replica 2 starts from a copy of replica 1's shards. Checked:

- replica 2's copy holds the law: every one of the searches finds it, whichever replica answers;
- a document posted through the gateway is ``ingested`` only once both replicas indexed it, and
  then every one of ~10 searches finds it; both replicas served some of those reads (their logs);
- a deleted document is gone from every search once the delete is through;
- a memory write is embedded by one replica only and then found by every recall, whichever replica
  answers (eventually consistent: counted from the first hit);
- ``mark_applied`` on the stack's Redis: exactly the replica that completes the set sees it complete.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from redis.asyncio import Redis

from ops.stack import Stack
from conduit.records import memory as records
from conduit.records import replies
from conduit.runtime import bus
from contracts import topics
from contracts.envelope import utcnow
from contracts.memory import (MemoryIndexPayload, MemoryIndexRequested, MemoryItem, MemoryRecallPayload,
                              MemoryRecallRequested, RecallReply)
from testkit.stack import admin_client, start_stack
from testkit.waits import wait_until
from services.retriever.replicas import mark_applied

VAT_LAW = "中华人民共和国增值税法"
QUESTION = "小规模纳税人适用简易计税方法的征收率是多少？"
DOC_ID = "xinghe-replica-policy"
DOC_TEXT = """# 星河科技差旅报销制度

## 住宿标准
星河科技员工出差住宿费按城市分级报销：一线城市每晚不超过六百元，其他城市每晚不超过四百元。
"""
DOC_QUERY = "星河科技员工出差住宿每晚能报销多少钱？"
SEARCHES = 10


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    """Gateway and two retrievers over their own embedded broker and Redis (``None, None``), 增值税法 ingested."""
    st = start_stack(None, None, tmp_path_factory.mktemp("replicas"), ("retriever", "gateway"),
                     {"CONDUIT_TOOL_TIMEOUT_S": "20"}, laws=[VAT_LAW], scale={"retriever": 2})
    try:
        yield st
    finally:
        st.stop()


@pytest.fixture(scope="module")
def client(stack) -> Iterator[httpx.Client]:
    with admin_client(stack) as c:
        yield c


def served(stack: Stack, what: str = "search") -> dict[str, int]:
    """Searches (or ``recall``s) each replica's log says it served (rule K10's log line)."""
    return {key: len(re.findall(rf"{what} \w+ served by replica", (stack.log_dir / f"{key}.log").read_text()))
            for key in ("retriever", "retriever-2")}


def search_ids(client: httpx.Client, query: str) -> list[str]:
    r = client.post("/v1/search", json={"query": query})
    assert r.status_code == 200, r.text
    return [i["document_id"] for i in r.json()["items"]]


def test_both_replicas_start_from_the_ingested_shards(stack, client):
    assert (stack.data_dir / "replicas" / "2" / "qdrant" / "edge_config.json").is_file()
    assert set(stack.procs) == {"retriever", "retriever-2", "gateway"}
    for _ in range(SEARCHES):
        assert any(d.startswith("law:") for d in search_ids(client, QUESTION))


def test_a_posted_document_is_ingested_by_both_and_every_search_finds_it(stack, client):
    before = served(stack)
    r = client.post("/v1/documents", json={"title": "星河科技差旅报销制度", "text": DOC_TEXT, "document_id": DOC_ID})
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 90
    while (view := client.get(f"/v1/documents/{DOC_ID}").json())["status"] == "queued":
        assert time.monotonic() < deadline, view
        time.sleep(0.2)
    assert view["status"] == "ingested", view
    logs = {k: (stack.log_dir / f"{k}.log").read_text() for k in ("retriever", "retriever-2")}
    assert f"document {view['index_document_id']} ingested by replica 1" in logs["retriever"]
    assert f"document {view['index_document_id']} ingested by replica 2" in logs["retriever-2"]

    for i in range(3 * SEARCHES):  # at least SEARCHES; more until both replicas answered some
        assert view["index_document_id"] in search_ids(client, DOC_QUERY), f"search {i} missed the document"
        now = served(stack)
        if i + 1 >= SEARCHES and all(now[k] > before[k] for k in now):
            break
    assert all(now[k] > before[k] for k in now), (before, now)


def test_a_deleted_document_is_gone_from_every_replica(stack, client):
    index_id = client.get(f"/v1/documents/{DOC_ID}").json()["index_document_id"]
    assert client.delete(f"/v1/documents/{DOC_ID}").status_code == 202
    assert wait_until(lambda: not client.get("/v1/documents").json()["documents"], 60)
    logs = lambda: [(stack.log_dir / f"{k}.log").read_text() for k in ("retriever", "retriever-2")]  # noqa: E731
    assert wait_until(lambda: all(f"document {index_id} deleted" in log for log in logs()), 30)
    for _ in range(SEARCHES):
        assert index_id not in search_ids(client, DOC_QUERY)


def test_exactly_the_last_replica_completes_a_document(stack):
    async def run() -> list[bool]:
        redis = Redis.from_url(stack.settings.store.url())
        try:
            first = await mark_applied(redis, "default", "d1", "req-1", 1, 2)
            again = await mark_applied(redis, "default", "d1", "req-1", 1, 2)  # a redelivery on replica 1
            last = await mark_applied(redis, "default", "d1", "req-1", 2, 2)
            replayed = await mark_applied(redis, "default", "d1", "req-1", 2, 2)
            both = await asyncio.gather(mark_applied(redis, "default", "d2", "req-2", 1, 2),
                                        mark_applied(redis, "default", "d2", "req-2", 2, 2))
            return [first, again, last, replayed, sorted(both) == [False, True]]
        finally:
            await redis.aclose()

    assert asyncio.run(run()) == [False, False, True, True, True]


def test_a_memory_write_is_embedded_once_and_recalled_on_every_replica(stack):
    now = utcnow()
    # an episode, not a fact: rule M10 adds a user's facts to a recall from the records alone, so a fact
    # would be found before any replica had embedded it; an episode is found only through its vector
    item = MemoryItem(id="m-replicas-1", tenant_id="default", user_id="u-replicas", type="episode",
                      text="我住在杭州，在星河科技工作。", task_id="t-replicas", importance=5, created_at=now,
                      last_used_at=now)
    before = served(stack, "recall")

    async def recall(broker, redis: Redis) -> bool:
        rid = uuid.uuid4().hex
        await bus.publish(broker, topics.RETRIEVER_REQUESTS, MemoryRecallRequested(
            task_id=rid, session_id=rid, tenant_id="default", user_id=item.user_id,
            payload=MemoryRecallPayload(request_id=rid, query="我住在哪个城市？", limit=5)))
        raw = await replies.wait(redis, rid, 10)
        assert raw is not None, "no recall reply"
        return any(c.item.id == item.id for c in RecallReply.model_validate_json(raw).candidates)

    async def run() -> None:
        redis = Redis.from_url(stack.settings.store.url())
        broker = bus.make_broker(stack.settings, client_id="test-replicas", redis=redis)
        await broker.start()
        try:
            await records.put_items(redis, [item])  # the record first, as the orchestrator writes it
            await bus.publish(broker, topics.RETRIEVER_WRITES, MemoryIndexRequested(
                task_id=item.task_id, session_id="s-replicas", tenant_id="default", user_id=item.user_id,
                payload=MemoryIndexPayload(items=[item])))
            hits, deadline = 0, time.monotonic() + 60
            while hits < SEARCHES or not all(n > before[k] for k, n in served(stack, "recall").items()):
                hits = hits + 1 if await recall(broker, redis) else 0  # consecutive hits after the first
                assert time.monotonic() < deadline, (hits, before, served(stack, "recall"))
        finally:
            await broker.stop()
            await redis.aclose()

    asyncio.run(run())
    logs = "".join((stack.log_dir / f"{k}.log").read_text() for k in ("retriever", "retriever-2"))
    assert logs.count(f"memory index for task {item.task_id} embedded by replica") == 1, logs[-3000:]
