"""Agent building blocks: evidence pool, citation check, fallback answerer, model client
(against the scripted OpenAI-compatible server over real HTTP), task event log (real Redis)."""

from __future__ import annotations

import asyncio

import pytest

from conduit.runtime.settings import Settings
from conduit.records.taskstream import TaskEventLog
from conduit.testing.scripted_model import ScriptedModel, Turn
from contracts.evidence import EvidenceItem
from contracts.stream import AnswerDelta, TaskCompleted, TaskFailed
from services.orchestrator.agent import fallback
from services.orchestrator.agent.evidence import EvidencePool
from services.orchestrator.openai_model import ModelClient, ModelError


def kb(chunk: str, doc: str = "d1", kind: str = "original", score: float = 0.8) -> EvidenceItem:
    return EvidenceItem(chunk_id=chunk, document_id=doc, kind=kind, title=f"《{doc}》", locator="第一条", score=score,
                        text=f"text of {chunk}")


def test_pool_numbers_in_order_dedupes_and_drops_summary_of_present_original():
    pool = EvidencePool([])
    ctx, new = pool.add([kb("a"), kb("b"), kb("a")])
    assert [i.index for i in ctx] == [1, 2] and len(new) == 2
    web = EvidenceItem(chunk_id="u#1", kind="web", title="page", url="https://x.test/p", text="t")
    ctx, new = pool.add([kb("b"), kb("s", kind="summary"), web, web.model_copy(), web.model_copy(update={"chunk_id": "u#2"})])
    assert [i.index for i in ctx] == [2, 3, 4]  # b keeps its number, summary of d1 dropped, same web chunk once
    assert [i.index for i in new] == [3, 4]


def test_citation_check_removes_unknown_numbers():
    pool = EvidencePool([])
    pool.add([kb("a"), kb("b")])
    answer, citations, removed = pool.check_citations("甲[1]，乙[2][7]。")
    assert answer == "甲[1]，乙[2]。" and removed == [7]
    assert [c.index for c in citations] == [1, 2]


def test_fallback_quotes_best_passages_with_citations():
    pool = EvidencePool([])
    pool.add([kb("a", score=0.4), kb("b", score=0.9)])
    text = fallback.compose("问题", pool.items, model_configured=False)
    assert text.startswith("（未配置语言模型") and "OPENAI_BASE_URL" in text
    assert text.index("[1]") < text.index("[2]")  # the retriever's ranking, not the dense score
    assert fallback.NOTHING_FOUND in fallback.compose("q", [], model_configured=True)


def test_best_excerpt_picks_the_relevant_sentence_of_a_long_text():
    long = "无关的句子。" * 200 + "征收率为百分之三。" + "其他内容。" * 200
    assert "征收率为百分之三" in fallback.best_excerpt(long, "征收率是多少", limit=100)


@pytest.fixture
def model_server():
    m = ScriptedModel().start()
    yield m
    m.stop()


async def test_model_client_streams_deltas_and_assembles_tool_calls(model_server):
    model_server.push(Turn(content="你好，世界", chunks=3),
                      Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": "增值税", "reason": "r"}}]))
    client = ModelClient(Settings(openai_base_url=model_server.base_url, openai_api_key="k"))
    seen: list[str] = []

    async def on_delta(t: str) -> None:
        seen.append(t)

    r1 = await client.stream([{"role": "user", "content": "hi"}], None, on_delta)
    assert "".join(seen) == "你好，世界" and len(seen) == 3 and r1.usage.total_tokens > 0
    r2 = await client.stream([{"role": "user", "content": "hi"}], [{"type": "function", "function": {"name": "kb_search"}}], on_delta)
    assert r2.tool_calls[0].name == "kb_search" and '"增值税"' in r2.tool_calls[0].arguments


async def test_model_client_retries_before_first_token_then_gives_up(model_server):
    model_server.push(Turn(status=503, retry_after_s=0.1), Turn(content="ok"))
    client = ModelClient(Settings(openai_base_url=model_server.base_url, openai_api_key="k"))

    async def noop(_: str) -> None:
        return None

    r = await client.stream([{"role": "user", "content": "q"}], None, noop)
    assert r.content == "ok" and r.retries == 1
    model_server.push(Turn(status=500), Turn(status=500), Turn(status=500))
    with pytest.raises(ModelError) as err:
        await client.stream([{"role": "user", "content": "q"}], None, noop)
    assert not err.value.streamed


async def test_model_endpoint_down_fails_fast():
    from conduit.ops.infra import free_port

    client = ModelClient(Settings(openai_base_url=f"http://127.0.0.1:{free_port()}/v1", openai_api_key="k"))

    async def noop(_: str) -> None:
        return None

    with pytest.raises(ModelError):
        await asyncio.wait_for(client.stream([{"role": "user", "content": "q"}], None, noop), timeout=20)


async def test_event_log_seq_replay_and_single_terminal(redis):
    log = TaskEventLog(redis, ttl_s=60)
    tid = "test-log-task"
    await redis.delete(*TaskEventLog.keys(tid))
    seqs = [await log.append(tid, AnswerDelta(text=str(i))) for i in range(5)]
    assert seqs == [1, 2, 3, 4, 5]
    assert await log.append(tid, TaskCompleted(answer="a", latency_ms=1.0)) == 6
    assert await log.append(tid, TaskFailed(code="x", message="late")) == -1  # sealed
    after = await log.read(tid, after=3)
    assert [e.seq for e in after] == [4, 5, 6] and after[-1].terminal
    blocked = await log.read(tid, after=6, block_ms=50)
    assert blocked == []
    assert await redis.ttl(f"conduit:events:{tid}") > 0


async def test_checkpoint_save_appends_its_outbox_events_atomically(redis):
    """A save's events and tool wake-up land with it, in order; a stale save writes none (``StateStore``'s outbox)."""
    from services.orchestrator.agent.state import TaskState
    from services.orchestrator.store import LEASES, TOOL_DEADLINES, StaleState, StateStore

    log = TaskEventLog(redis, ttl_s=60)
    store = StateStore(redis, ttl_s=60, events=log)
    tid = "test-outbox-task"
    await redis.delete(StateStore.key(tid), *TaskEventLog.keys(tid))
    state = TaskState(task_id=tid, session_id="s", tenant_id="t", question="q", allowed_tools=[])
    await store.save(state, lease_ttl_s=30, events=[AnswerDelta(text="a"), AnswerDelta(text="b")])
    assert [e.seq for e in await log.read(tid)] == [1, 2] and await redis.zscore(LEASES, tid)
    stale = state.model_copy(update={"version": 0})
    with pytest.raises(StaleState):
        await store.save(stale, events=[AnswerDelta(text="lost")])
    assert len(await log.read(tid)) == 2 and (await store.load(tid)).version == 1
    await store.save(state, wake_at=1234.5, events=[TaskCompleted(answer="a", latency_ms=1.0), AnswerDelta(text="after the end")])
    assert await redis.zscore(TOOL_DEADLINES, tid) == 1234.5
    assert [e.type for e in await log.read(tid)] == ["answer.delta", "answer.delta", "task.completed"]
    assert await log.is_sealed(tid) and (await store.load(tid)).version == 2
    await redis.zrem(LEASES, tid)
    await redis.zrem(TOOL_DEADLINES, tid)


async def test_tool_request_of_a_cancelled_task_does_not_run(settings, redis):
    import uuid

    from conduit.records.taskstore import cancel_key
    from conduit.testing.bus import await_tool_result
    from conduit.runtime.toolservice import ToolOutput, ToolService
    from contracts import topics
    from contracts.events import ToolRequested, ToolRequestPayload

    ran: list[str] = []

    async def tool(args, request) -> ToolOutput:
        ran.append(args.query)
        return ToolOutput()

    svc = ToolService("cancel-test", topics.TOOL_REQUESTS_KB, "cancel-test", settings)
    svc.tool("kb_search", tool)
    await svc.broker.start()
    try:
        task_id, call_id = uuid.uuid4().hex, f"call_{uuid.uuid4().hex[:8]}"
        await redis.set(cancel_key(task_id), "1", ex=60)
        await svc.handle(ToolRequested(task_id=task_id, session_id="s", payload=ToolRequestPayload(
            call_id=call_id, tool="kb_search", arguments={"query": "q", "reason": "r"}, step=1,
            idempotency_key=f"{task_id}:1:{call_id}")))
        result = await await_tool_result(settings.bootstrap_servers(), call_id, timeout_s=30)
        assert result.payload.error and result.payload.error.error_code == "task_cancelled" and ran == []
    finally:
        await svc.broker.stop()
        await svc.redis.aclose()


async def test_delta_writer_keeps_order_and_batches_while_an_append_is_in_flight() -> None:
    """DeltaWriter: the first delta goes out alone at once; text added meanwhile is joined; nothing lost."""
    from services.orchestrator.deltas import DeltaWriter

    appended: list[str] = []
    gate = asyncio.Event()

    async def emit(text: str) -> None:
        appended.append(text)
        if len(appended) == 1:
            await gate.wait()  # the first append is slow: the next deltas pile up

    writer = DeltaWriter(emit)
    await writer.add("a")
    for t in ("b", "c", "d"):
        await writer.add(t)
    gate.set()
    await writer.flush()
    assert appended == ["a", "bcd"]

    async def broken(text: str) -> None:
        raise RuntimeError("redis down")

    failing = DeltaWriter(broken)
    await failing.add("x")
    await failing.add("y")
    with pytest.raises(RuntimeError):
        await failing.flush()
