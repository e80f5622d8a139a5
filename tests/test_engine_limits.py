"""The orchestrator's I/O layer driven in process against real Redis and the real tansu
broker, with the in-process ``TestModel`` (no model server): what the agent core decides
reaches the task's event log, record and public feed. The rules themselves (limits, the
window, unknown tools) are tested without any of these in tests/unit."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from conduit.runtime import bus
from contracts.events import QuestionAsked, QuestionPayload
from services.orchestrator.runtime import Orchestrator
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
        assert state.status == "completed" and state.answer == "没有这个工具。"
        assert "tool_not_available" in [m for m in state.messages if m["role"] == "tool"][0]["content"]
        logged = await orch.events.read(q.task_id)
        tool_events = [json.loads(e.data) for e in logged if e.type.startswith("tool.")]
        assert [(e["type"], e["tool"]) for e in tool_events] == [("tool.requested", "delete_everything"),
                                                                 ("tool.completed", "delete_everything")]
        assert tool_events[1]["error_code"] == "tool_not_available"
        assert [e.type for e in logged][-1] == "task.completed"
        view = await orch.tasks.get(q.task_id)
        assert view is not None and view.status == "completed" and view.answer == "没有这个工具。"
        assert len(model.calls) == 2 and model.calls[1][1] is not None  # tools were offered again
    finally:
        await broker.stop()
