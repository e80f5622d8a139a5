"""Agent building blocks with real parts: the model client (against the scripted
OpenAI-compatible server over real HTTP), the task event log and checkpoints (real Redis),
a tool request of a cancelled task (real broker). Pure parts: tests/unit/test_agent_blocks.py."""

from __future__ import annotations

import asyncio

import pytest

from conduit.runtime.settings import Settings
from conduit.records.taskstream import TaskEventLog
from testkit.scripted_model import ScriptedModel, Turn
from contracts.stream import AnswerDelta, TaskCompleted, TaskFailed
from conduit.runtime.llm.openai_model import ModelClient, ModelError


@pytest.fixture
def model_server():
    m = ScriptedModel().start()
    yield m
    m.stop()


async def test_model_client_streams_deltas_and_assembles_tool_calls(model_server):
    model_server.push(Turn(content="你好，世界", chunks=3),
                      Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": "增值税", "reason": "r"}}]))
    client = ModelClient(Settings(openai_base_url=model_server.base_url, openai_api_key="k").llm)
    seen: list[str] = []

    async def on_delta(t: str) -> None:
        seen.append(t)

    r1 = await client.stream([{"role": "user", "content": "hi"}], None, on_delta)
    assert "".join(seen) == "你好，世界" and len(seen) == 3 and r1.usage.total_tokens > 0
    r2 = await client.stream([{"role": "user", "content": "hi"}], [{"type": "function", "function": {"name": "kb_search"}}], on_delta)
    assert r2.tool_calls[0].name == "kb_search" and '"增值税"' in r2.tool_calls[0].arguments


async def _noop(_: str) -> None:
    return None


async def test_model_client_retries_before_first_token_then_gives_up(model_server):
    model_server.push(Turn(status=503, retry_after_s=0.1), Turn(content="ok"))
    client = ModelClient(Settings(openai_base_url=model_server.base_url, openai_api_key="k").llm)
    r = await client.stream([{"role": "user", "content": "q"}], None, _noop)
    assert r.content == "ok" and r.retries == 1
    model_server.push(Turn(status=500), Turn(status=500), Turn(status=500))
    with pytest.raises(ModelError) as err:
        await client.stream([{"role": "user", "content": "q"}], None, _noop)
    assert not err.value.streamed


async def test_model_client_waits_the_retry_after_it_is_given(model_server):
    """A 429 with ``Retry-After: 2`` is retried no sooner than 2 s later: full jitter alone waits at
    most 0.5 s before the first retry, so the gap (arrival times at the server) shows the header won."""
    model_server.push(Turn(status=429, retry_after_s=2.0), Turn(content="ok"))
    client = ModelClient(Settings(openai_base_url=model_server.base_url, openai_api_key="k").llm)
    r = await client.stream([{"role": "user", "content": "q"}], None, _noop)
    assert r.content == "ok" and r.retries == 1
    refused, retried = model_server.received_at[-2:]
    assert retried - refused >= 2.0


async def test_model_endpoint_down_fails_fast():
    from ops.infra import free_port

    client = ModelClient(Settings(openai_base_url=f"http://127.0.0.1:{free_port()}/v1", openai_api_key="k").llm)
    with pytest.raises(ModelError):
        await asyncio.wait_for(client.stream([{"role": "user", "content": "q"}], None, _noop), timeout=20)


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
    from services.orchestrator.checkpointing import StaleState
    from services.orchestrator.store import LEASES, TOOL_DEADLINES, StateStore

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

    from conduit.records import keys
    from testkit.bus import await_tool_result
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
        await redis.set(keys.cancel(task_id), "1", ex=60)
        await svc.handle(ToolRequested(task_id=task_id, session_id="s", payload=ToolRequestPayload(
            call_id=call_id, tool="kb_search", arguments={"query": "q", "reason": "r"}, step=1,
            idempotency_key=f"{task_id}:1:{call_id}")))
        result = await await_tool_result(settings.bus.bootstrap_servers(), call_id, timeout_s=30)
        assert result.payload.error and result.payload.error.error_code == "task_cancelled" and ran == []
    finally:
        await svc.broker.stop()
        await svc.redis.aclose()
async def test_two_deliveries_of_one_call_at_once_run_the_tool_once(settings, redis):
    """Rule T6: a redelivery (rebalance) or re-send arriving while the call runs leaves it to that run."""
    import uuid

    from conduit.runtime.toolservice import ToolOutput, ToolService
    from contracts import topics
    from contracts.events import ToolRequested, ToolRequestPayload

    ran: list[str] = []
    running = asyncio.Event()
    release = asyncio.Event()

    async def tool(args, request) -> ToolOutput:
        ran.append(args.query)
        running.set()
        if len(ran) == 2:
            release.set()  # both ran: no need to wait for the run to end
        await release.wait()
        return ToolOutput(output="done")

    svc = ToolService("claim-test", topics.TOOL_REQUESTS_KB, "claim-test", settings)
    svc.tool("kb_search", tool)
    await svc.broker.start()
    try:
        task_id, call_id = uuid.uuid4().hex, f"call_{uuid.uuid4().hex[:8]}"
        request = ToolRequested(task_id=task_id, session_id="s", payload=ToolRequestPayload(
            call_id=call_id, tool="kb_search", arguments={"query": "q", "reason": "r"}, step=1,
            idempotency_key=f"{task_id}:1:{call_id}"))
        first = asyncio.create_task(svc.handle(request))
        await running.wait()
        second = asyncio.create_task(svc.handle(request))  # the same call, delivered again mid-run
        asyncio.get_running_loop().call_later(1.0, release.set)  # the first run ends after the second arrived
        await asyncio.wait_for(asyncio.gather(first, second), 30)
        assert ran == ["q"]
    finally:
        await svc.broker.stop()
        await svc.redis.aclose()




async def test_a_claim_lapses_when_its_run_dies_and_is_renewed_while_it_runs(settings, redis, monkeypatch):
    """Rule T6: a run renews its claim (here past a 1 s lifetime), and the claim of a run whose
    process died lapses, so the next re-send runs the call instead of leaving it to a dead run."""
    import uuid

    from conduit.records import keys
    from conduit.runtime import toolclaims
    from conduit.runtime.toolservice import ToolOutput, ToolService
    from contracts import topics
    from contracts.events import ToolRequested, ToolRequestPayload

    monkeypatch.setattr(toolclaims, "CLAIM_TTL_S", 1)
    ran: list[str] = []

    async def tool(args, request) -> ToolOutput:
        ran.append(args.query)
        await asyncio.sleep(2.5)  # longer than the claim's lifetime: only renewals keep it
        return ToolOutput(output="done")

    def request_for(query: str) -> ToolRequested:
        task_id, call_id = uuid.uuid4().hex, f"call_{uuid.uuid4().hex[:8]}"
        return ToolRequested(task_id=task_id, session_id="s", payload=ToolRequestPayload(
            call_id=call_id, tool="kb_search", arguments={"query": query, "reason": "r"}, step=1,
            idempotency_key=f"{task_id}:1:{call_id}"))

    svc = ToolService("claim-ttl-test", topics.TOOL_REQUESTS_KB, "claim-ttl-test", settings)
    svc.tool("kb_search", tool)
    await svc.broker.start()
    try:
        running = request_for("renewed")
        first = asyncio.create_task(svc.handle(running))
        await asyncio.sleep(1.8)  # past the 1 s lifetime: the run renewed its claim
        await asyncio.wait_for(asyncio.gather(first, svc.handle(running)), 30)
        assert ran == ["renewed"]
        orphan = request_for("orphan")  # a run that died holding the claim: nobody renews it
        await redis.set(keys.tool_claim(orphan.payload.idempotency_key), "dead-host:1:gone", ex=1)
        await asyncio.wait_for(svc.handle(orphan), 10)
        assert ran == ["renewed"]  # the claim still stands: this delivery leaves the call to its run
        await asyncio.sleep(1.5)
        await asyncio.wait_for(svc.handle(orphan), 10)  # the orchestrator's re-send (rule A14)
        assert ran == ["renewed", "orphan"]
    finally:
        await svc.broker.stop()
        await svc.redis.aclose()
