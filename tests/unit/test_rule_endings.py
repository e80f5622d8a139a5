"""Endings: the wrap-up call, complete, fail and cancel keep why in typed fields; the terminal
event and the task record are derived from them; a checkpoint round-trips (in process)."""

from __future__ import annotations

from agentsim import T0, Reply, Sim, TestModel, code, kb, question
from services.orchestrator.agent import endings, planning
from services.orchestrator.agent.effects import Announce, FaultPoint
from services.orchestrator.agent.state import PendingCall, Phase, Refusal, TaskState
from conduit.runtime.llm.model import ModelResponse, ToolCallRequest


def _state(sim: Sim) -> TaskState:
    return planning.start(sim.deps, question("问"), ["kb_search", "code_exec"], []).state


def test_wrap_up_call_ignores_tool_calls_and_its_text_is_the_answer():
    sim = Sim(TestModel(), max_rounds=1)
    state = _state(sim)
    plan = planning.plan_step(sim.deps, state, T0)
    assert plan.final and plan.tools is None and state.stop_reason == "max_rounds"
    reply = ModelResponse(content="最后的回答。", tool_calls=[ToolCallRequest("c1", "kb_search", '{"query": "q"}')])
    step = planning.on_reply(sim.deps, state, plan, reply, T0)
    assert step.state.status == "completed" and step.state.answer == "最后的回答。" and step.state.pending == []
    assert isinstance(step.effects[-1], Announce)


def test_cancel_keeps_its_reason_and_passes_the_fault_point_before_announcing():
    sim = Sim(TestModel())
    step = endings.on_cancel(_state(sim), "用户取消", T0)
    state = step.state
    assert state.status == "cancelled" and state.phase == Phase.DONE and state.cancellation.reason == "用户取消"
    assert [type(e) for e in step.effects] == [FaultPoint, Announce] and step.effects[0].name == "cancel"
    assert endings.terminal_event(state, T0).reason == "用户取消"
    again = endings.on_cancel(state, "again", T0)
    assert not again.save and [type(e) for e in again.effects] == [Announce]  # announce the saved end again


async def test_cancel_after_the_model_call_ends_the_task():
    sim = Sim(TestModel())
    state = _state(sim)
    plan = planning.plan_step(sim.deps, state, T0)
    step = planning.on_reply(sim.deps, state, plan, ModelResponse(content="半截"), T0, cancelled=True)
    assert step.state.status == "cancelled" and step.state.answer is None


def test_failure_is_typed_and_shown_in_the_terminal_event_and_the_record():
    state = endings.fail(_state(Sim(TestModel())), "internal_error", "RuntimeError: boom", T0).state
    assert state.failure.code == "internal_error"
    event = endings.terminal_event(state, T0)
    assert (event.type, event.code, event.message) == ("task.failed", "internal_error", "RuntimeError: boom")
    assert endings.record_view(state).error == {"code": "internal_error", "message": "RuntimeError: boom"}


async def test_record_view_lists_pending_approvals_and_steps():
    sim = Sim(TestModel(Reply(tool_calls=[code("print(1)")])))
    await sim.ask()
    view = endings.record_view(sim.state)
    assert view.status == "waiting_approval" and view.pending_approvals[0]["tool"] == "code_exec"
    assert [s.kind for s in view.steps] == ["model"] and view.tenant_id == "default"


async def test_a_checkpoint_with_refusals_and_results_round_trips():
    sim = Sim(TestModel(Reply(tool_calls=[kb("a"), {"name": "web_fetch", "arguments": {}}])),  # not offered: refused
              tools={"kb_search": lambda c: None})
    await sim.ask()
    again = TaskState.model_validate_json(sim.state.model_dump_json())
    assert again == sim.state and again.phase is Phase.TOOLS
    assert again.pending[0].result is None and isinstance(again.pending[1].result, Refusal)
    assert again.pending[1].tool == again.pending[1].name == "web_fetch"


def test_a_call_checkpointed_before_name_and_tool_were_apart_still_loads():
    old = {"call_id": "c", "tool": "kb_search", "arguments": {}, "step": 1, "idempotency_key": "t:1:c",
           "deadline_at": T0.isoformat()}
    call = PendingCall.model_validate(old)
    assert (call.name, call.tool) == ("kb_search", "kb_search")
    assert PendingCall.model_validate({**old, "tool": "made_up"}).tool is None
