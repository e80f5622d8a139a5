"""Limits that end a run (seed 000 §4, seed 003), driven in process against real Redis,
the real tansu broker and the scripted model: the wall-clock deadline and the token budget
each force a final model call without tools, and the stop reason is recorded. Also the
history window never separates a tool call from its result."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import timedelta

from conduit.runtime import bus
from conduit.testing.scripted_model import Turn
from contracts.envelope import utcnow
from contracts.events import QuestionAsked, QuestionPayload
from services.orchestrator.runtime import Orchestrator
from services.orchestrator.agent.window import window


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


async def test_deadline_and_token_budget_force_a_final_call_without_tools(settings, redis, model):
    s = settings.model_copy(update=dict(openai_base_url=model.base_url, openai_api_key="k", max_tokens=50))
    broker = bus.make_broker(s, "limits-test")
    await broker.start()
    try:
        orch = Orchestrator(s, redis, broker)
        model.push(Turn(content="时间到了，直接回答。"))
        late = _question(occurred_at=utcnow() - timedelta(seconds=s.task_deadline_s + 1))
        state = await _run(orch, late)
        assert state.status == "completed" and state.stop_reason == "deadline"
        assert "tools" not in model.requests[-1]

        # first call asks for a tool that is not offered (answered at once), the second is over the token budget
        model.push(Turn(tool_calls=[{"name": "web_fetch", "arguments": {"url": "https://example.org", "reason": "r"}}]),
                   Turn(content="预算用完，直接回答。"))
        state = await _run(orch, _question())
        assert state.status == "completed" and state.stop_reason == "max_tokens"
        assert state.usage.total_tokens >= 50 and "tools" not in model.requests[-1]
        assert "tool_not_available" in [m for m in state.messages if m["role"] == "tool"][0]["content"]

        # a tool name the model made up is refused and keeps its own name in the events
        model.push(Turn(tool_calls=[{"name": "delete_everything", "arguments": {"path": "/"}}]),
                   Turn(content="没有这个工具。"))
        q = _question()
        state = await _run(orch, q)
        assert state.status == "completed"
        assert "tool_not_available" in [m for m in state.messages if m["role"] == "tool"][0]["content"]
        logged = await orch.events.read(q.task_id)
        tool_events = [json.loads(e.data) for e in logged if e.type.startswith("tool.")]
        assert [(e["type"], e["tool"]) for e in tool_events] == [("tool.requested", "delete_everything"),
                                                                 ("tool.completed", "delete_everything")]
        assert tool_events[1]["error_code"] == "tool_not_available"
    finally:
        await broker.stop()


def test_window_keeps_system_and_never_starts_with_a_tool_result():
    big = "x" * 1000
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": big},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "function": {"name": "kb_search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": big},
        {"role": "assistant", "content": big},
        {"role": "user", "content": "latest question"},
    ]
    cut = window(messages, max_chars=1500)
    assert cut[0]["role"] == "system" and cut[-1]["content"] == "latest question"
    assert cut[1]["role"] != "tool"
    ids = {c["id"] for m in cut for c in (m.get("tool_calls") or [])}
    assert all(m["tool_call_id"] in ids for m in cut if m["role"] == "tool")
    assert window(messages, max_chars=10**6) == messages
    assert window(messages, max_chars=10)[-1]["content"] == "latest question"
