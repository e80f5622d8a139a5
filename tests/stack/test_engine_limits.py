"""The orchestrator's I/O layer driven in process against real Redis and the real tansu
broker, with the in-process ``TestModel`` (no model server): what the agent core decides
reaches the task's event log and record; the one compare-and-set helper re-applies a
transition that lost a race and writes its outbox once. The rules themselves (limits, the
window, unknown tools) are tested without any of these in tests/unit."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from conduit.records.taskstream import TaskEventLog
from conduit.runtime import bus
from contracts.events import QuestionAsked, QuestionPayload
from contracts.stream import AnswerDelta
from services.orchestrator.agent.effects import Emit, Step, WriteView
from services.orchestrator.agent.state import TaskState
from services.orchestrator.runtime import Orchestrator
from services.orchestrator.checkpointing import StaleState
from services.orchestrator.store import StateStore
from services.orchestrator.testmodel import Reply, TestModel


async def _run(orch: Orchestrator, event: QuestionAsked, timeout_s: float = 30.0):
    await orch.on_question(event)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = await orch.store.load(event.task_id)
        if state and state.terminal:
            return state
        await asyncio.sleep(0.05)
    raise AssertionError("task did not finish")


async def test_a_made_up_tool_name_is_a_model_protocol_error_in_the_log_and_the_record(settings, redis):
    """Rule A19: a name no catalog knows is not a refusal told to the model: the step fails with
    ``unknown_tool_name`` (trace event, record, terminal event), nothing runs, and the task answers
    without the model (rule A13; ``kb_search`` is not allowed here, so no tool request goes out)."""
    broker = bus.make_broker(settings, "limits-test")
    await broker.start()
    try:
        model = TestModel(Reply(tool_calls=[{"name": "delete_everything", "arguments": {"path": "/"}}]),
                          Reply(content="不该再被调用。"))
        orch = Orchestrator(settings, redis, broker, model=model)
        q = QuestionAsked(task_id=uuid.uuid4().hex, session_id=uuid.uuid4().hex,
                          payload=QuestionPayload(question="限额测试", allowed_tools=["code_exec"]))
        state = await _run(orch, q)
        assert state.status == "completed" and state.mode == "retrieval_only"
        assert state.fallback_reason.startswith("unknown_tool_name: ") and "delete_everything" in state.fallback_reason
        logged = await orch.events.read(q.task_id)
        assert not [e for e in logged if e.type.startswith("tool.") and "delete_everything" in e.data]
        traced = [json.loads(e.data)["data"] for e in logged if e.type == "trace"]
        assert any(t.get("code") == "unknown_tool_name" and t.get("kind") == "protocol" for t in traced)
        done = json.loads(logged[-1].data)
        assert logged[-1].type == "task.completed" and done["fallback_reason"].startswith("unknown_tool_name")
        view = await orch.tasks.get(q.task_id)
        assert view is not None and any(t.get("code") == "unknown_tool_name" for t in view.trace)
        assert len(model.calls) == 1  # the reply was not acted on and the model not asked again
    finally:
        await broker.stop()


async def test_one_transition_helper_reapplies_on_a_lost_race_and_writes_its_outbox_once(redis):
    """``StateStore.transition``: a stale checkpoint loses the compare-and-set, is reloaded and the
    transition applied again; only the winning attempt's events reach the log. With ``attempts=1``
    (a model step) the lost race is raised instead."""
    log = TaskEventLog(redis, ttl_s=60)
    store = StateStore(redis, ttl_s=60, events=log)
    tid = uuid.uuid4().hex
    stale = TaskState(task_id=tid, session_id="s", tenant_id="t", question="q", allowed_tools=[])
    await store.save(stale.model_copy())  # someone else saved version 1 meanwhile
    seen: list[int] = []

    def fn(state: TaskState) -> Step:
        seen.append(state.version)
        state.rounds += 1
        return Step(state, [Emit(AnswerDelta(text=f"v{state.version}")), WriteView()])

    with pytest.raises(StaleState):
        await store.transition(tid, fn, loaded=stale.model_copy(), attempts=1)
    step = await store.transition(tid, fn, loaded=stale.model_copy())
    # the outbox and the task record (rule O11) went in the save: nothing is left to carry out after it
    assert seen == [0, 0, 1] and step.effects == []
    assert [json.loads(e.data)["text"] for e in await log.read(tid)] == ["v1"]
    assert (await store.load(tid)).version == 2
    await redis.delete(StateStore.key(tid), *TaskEventLog.keys(tid))
