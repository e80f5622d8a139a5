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
from services.orchestrator.store import StaleState, StateStore
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


def _question(**fields) -> QuestionAsked:
    return QuestionAsked(task_id=uuid.uuid4().hex, session_id=uuid.uuid4().hex,
                         payload=QuestionPayload(question="限额测试"), **fields)


async def test_a_made_up_tool_name_is_refused_and_keeps_its_own_name_in_the_log(settings, redis):
    broker = bus.make_broker(settings, "limits-test")
    await broker.start()
    try:
        model = TestModel(Reply(tool_calls=[{"name": "delete_everything", "arguments": {"path": "/"}}]),
                          Reply(content="没有这个工具。"))
        orch = Orchestrator(settings, redis, broker, model=model)
        q = _question()
        state = await _run(orch, q)
        assert state.status == "completed" and state.answer == "没有这个工具[低置信度]。"
        assert "tool_not_available" in [m for m in state.messages if m["role"] == "tool"][0]["content"]
        logged = await orch.events.read(q.task_id)
        tool_events = [json.loads(e.data) for e in logged if e.type.startswith("tool.")]
        assert [(e["type"], e["tool"]) for e in tool_events] == [("tool.requested", "delete_everything"),
                                                                 ("tool.completed", "delete_everything")]
        assert tool_events[1]["error_code"] == "tool_not_available"
        assert [e.type for e in logged][-1] == "task.completed"
        view = await orch.tasks.get(q.task_id)
        assert view is not None and view.status == "completed" and view.answer == "没有这个工具[低置信度]。"
        assert len(model.calls) == 2 and model.calls[1][1] is not None  # tools were offered again
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
    assert seen == [0, 0, 1] and [type(e) for e in step.effects] == [WriteView]  # the outbox went in the save
    assert [json.loads(e.data)["text"] for e in await log.read(tid)] == ["v1"]
    assert (await store.load(tid)).version == 2
    await redis.delete(StateStore.key(tid), *TaskEventLog.keys(tid))
