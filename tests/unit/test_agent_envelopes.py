"""Every envelope the orchestrator sends is a child of the event that last moved the task:
``causation_id`` always set, tenant, user and trace context carried (in process)."""

from __future__ import annotations

import uuid

from agentsim import Sim, TestModel, ok, question
from contracts.events import AgentEvent, AgentEventPayload, ToolResult
from services.orchestrator.agent import planning, recording, vetting
from services.orchestrator.outputs import parent_of
from services.orchestrator.runtime import caused_by


def test_envelopes_are_children_of_the_event_that_moved_the_task():
    sim = Sim(TestModel())
    q = question().model_copy(update={"tenant_id": "acme", "user_id": "u1", "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"})
    state = planning.start(sim.deps, q, ["kb_search"], []).state
    event = parent_of(state).child(AgentEvent, payload=AgentEventPayload(kind="task.started"))
    assert event.causation_id == q.event_id
    assert (event.tenant_id, event.user_id, event.traceparent, event.task_id) == ("acme", "u1", q.traceparent, q.task_id)

    state.step = 1
    vetting.request_tools(sim.deps, state, [("c1", "kb_search", {"query": "q", "reason": "r"})], sim.now)
    result = ToolResult(task_id=q.task_id, session_id=q.session_id, event_id=uuid.uuid4(),
                        payload=ok(state.pending[0]))
    step = caused_by(result.event_id, lambda st: recording.record_results(sim.deps, st, [result.payload], sim.now))(state)
    assert step is not None and parent_of(step.state).child(AgentEvent, payload=AgentEventPayload(
        kind="tool.completed")).causation_id == result.event_id
