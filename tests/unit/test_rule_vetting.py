"""Vetting rules for the model's tool calls, in order: offered tool (an unknown name keeps
its own name), arguments, rejected before, loop detection, budget, breaker, approval (in process)."""

from __future__ import annotations

from agentsim import T0, Reply, Sim, TestModel, kb, ok, passage, question
from services.orchestrator.agent import planning, policies, recording, vetting
from services.orchestrator.agent.effects import Emit, PublishTool, SaveApproval
from services.orchestrator.agent.state import Phase, Refusal


def _vet_one(sim: Sim, name: str, args: dict | None, allowed=("kb_search", "code_exec")):
    state = planning.start(sim.deps, question(), list(allowed), []).state
    state.step = 1
    step = vetting.request_tools(sim.deps, state, [("c1", name, args)], T0)
    return step, step.state


async def test_loop_detector_warns_on_third_repeat_and_stops_on_fourth():
    model = TestModel(default=Reply(tool_calls=[kb("增值税 征收率")]))
    sim = Sim(model, max_rounds=10)
    state = await sim.ask()
    assert state.status == "completed" and state.stop_reason == "loop_detected"
    assert "反复重复" in state.answer and "kb_search" not in state.answer  # a wrap-up, no internal tool names
    assert any("repeated_call" in m for m in sim.tool_messages())
    assert len(sim.requests) == 2  # the 3rd was answered "you already have that result", the 4th ended the task
    assert sim.types()[-3:] == ["answer.reset", "answer.delta", "task.completed"]
    assert sim.events[-1].stop_reason == "loop_detected"


def test_loop_signature_ignores_reason_case_and_spacing():
    sim = Sim(TestModel())
    state = planning.start(sim.deps, question(), ["kb_search"], []).state
    calls = [("a", "kb_search", {"query": " VAT ", "reason": "one"}), ("b", "kb_search", {"query": "vat", "reason": "two"}),
             ("c", "kb_search", {"query": "Vat", "reason": "three"})]
    step = vetting.request_tools(sim.deps, state, calls, T0)
    results = [c.result for c in step.state.pending]
    assert results[:2] == [None, None] and isinstance(results[2], Refusal)
    assert results[2].error.error_code == "repeated_call"


def test_unknown_tool_name_is_refused_and_keeps_its_own_name():
    sim = Sim(TestModel())
    state = planning.start(sim.deps, question(), ["kb_search"], []).state
    call = vetting.new_call(sim.deps, state, "c1", "delete_everything", {"path": "/"}, T0)
    assert call.name == "delete_everything" and call.tool is None
    refusal = vetting.vet(sim.deps, state, call, call.arguments, T0)
    assert isinstance(refusal, Refusal) and refusal.error.error_code == "tool_not_available"
    step, state = _vet_one(sim, "delete_everything", {"path": "/"})
    events = [(e.event.type, e.event.tool) for e in step.effects if isinstance(e, Emit) and e.event.type.startswith("tool.")]
    assert events == [("tool.requested", "delete_everything"), ("tool.completed", "delete_everything")]
    assert not any(isinstance(e, PublishTool) for e in step.effects)
    assert state.phase == Phase.MODEL  # every call answered: the next model step goes on at once


def test_tool_not_offered_to_this_task_is_refused():
    _, state = _vet_one(Sim(TestModel()), "web_fetch", {"url": "https://example.org", "reason": "r"})
    assert state.pending == [] and state.phase == Phase.MODEL  # advanced: the refusal became a tool message
    assert "tool_not_available" in state.messages[-1]["content"]


def test_bad_arguments_are_refused_not_run():
    sim = Sim(TestModel())
    _, state = _vet_one(sim, "kb_search", None)
    assert "arguments are not a JSON object" in state.messages[-1]["content"]
    _, state = _vet_one(sim, "kb_search", {"query": 42, "unexpected": True})
    assert "bad_arguments" in state.messages[-1]["content"] and state.tool_calls_used == 0


async def test_malformed_json_arguments_from_the_model_are_refused():
    model = TestModel(Reply(tool_calls=[{"name": "kb_search", "arguments": "{not json"}]), Reply(content="好。"))
    sim = Sim(model)
    state = await sim.ask()
    assert state.status == "completed" and sim.requests == []
    assert "bad_arguments" in sim.tool_messages()[0]


def test_call_a_person_rejected_is_refused_without_asking():
    sim = Sim(TestModel())
    state = planning.start(sim.deps, question(), ["code_exec"], []).state
    state.rejected.append(policies.signature("code_exec", {"code": "rm -rf /"}))
    step = vetting.request_tools(sim.deps, state, [("c1", "code_exec", {"code": "rm -rf /", "reason": "again"})], T0)
    assert not any(isinstance(e, SaveApproval) for e in step.effects)
    assert "rejected_by_user" in step.state.messages[-1]["content"]


def test_open_tool_breaker_refuses_the_call():
    sim = Sim(TestModel(), tool_breaker_failures=1)
    sim.deps.tool_breakers["kb_search"].failure(T0.timestamp())
    _, state = _vet_one(sim, "kb_search", {"query": "q", "reason": "r"})
    assert "circuit_open" in state.messages[-1]["content"] and state.tool_calls_used == 0


def test_approval_policy_makes_the_call_wait():
    step, state = _vet_one(Sim(TestModel()), "code_exec", {"code": "print(1)", "reason": "r"})
    call = state.pending[0]
    assert call.approval == "pending" and call.arguments_digest and call.expires_at > T0
    assert state.status == "waiting_approval" and state.tool_calls_used == 1
    kinds = [type(e).__name__ for e in step.effects]
    assert kinds.index("SaveApproval") < kinds.index("Wake") and "PublishTool" not in kinds
    emitted = [e.event.type for e in step.effects if isinstance(e, Emit)]
    assert emitted == ["tool.requested", "tool.approval_required"]


def test_policy_rule_on_an_argument():
    sim = Sim(TestModel(), approval_policies={"kb_search": "if:query~(?i)secret"})
    _, state = _vet_one(sim, "kb_search", {"query": "top SECRET plans", "reason": "r"})
    assert state.pending[0].approval == "pending"
    _, state = _vet_one(sim, "kb_search", {"query": "public plans", "reason": "r"})
    assert state.pending[0].approval is None


async def test_parallel_calls_are_requested_together_and_answered_in_call_order():
    held: list = []
    model = TestModel(Reply(tool_calls=[kb("增值税 税率"), kb("简易计税 征收率")]), Reply(content="合并回答。"))
    sim = Sim(model, tools={"kb_search": lambda c: held.append(c) or None})
    await sim.ask()
    assert [c.arguments["query"] for c in held] == ["增值税 税率", "简易计税 征收率"]
    assert sim.state.phase == Phase.TOOLS and len(model.calls) == 1  # both out at once, nothing back yet
    second = recording.record_results(sim.deps, sim.state, [ok(held[1], passage("b"))], sim.now)
    await sim.run(second)
    assert len(model.calls) == 1, "the next step waits for every call of the step"
    await sim.run(recording.record_results(sim.deps, sim.state, [ok(held[0], passage("a"))], sim.now))
    assert len(model.calls) == 2 and sim.state.status == "completed"
    # evidence is numbered in call order, not arrival order
    assert [e.chunk_id for e in sim.state.evidence] == ["a", "b"]
    msgs = sim.tool_messages()
    assert "[1]" in msgs[0] and "[2]" in msgs[1]
