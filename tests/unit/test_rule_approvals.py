"""Approval rules: approve runs exactly what was shown, edit runs validated new arguments,
reject is final (a repeat is refused without asking), expiry runs nothing; calls of one step
are decided independently; a repeat decision changes nothing (in process)."""

from __future__ import annotations

from agentsim import Reply, Sim, TestModel, code, ok
from contracts.events import ApprovalDecisionPayload
from services.orchestrator.agent import approvals
from services.orchestrator.agent.effects import PublishTool, UpdateApproval


def _sim(*turns: Reply, **fields) -> Sim:
    return Sim(TestModel(*turns, Reply(content="好的。")),
               tools={"code_exec": lambda c: ok(c, output=f"ran {c.arguments['code']}")}, **fields)


async def _decide(sim: Sim, call_id: str, decision: str, **fields):
    step = approvals.decide(sim.deps, sim.state, ApprovalDecisionPayload(call_id=call_id, decision=decision, **fields), sim.now)
    await sim.run(step)
    return step


async def test_approve_runs_exactly_what_was_approved():
    sim = _sim(Reply(tool_calls=[code("print(6*7)")]))
    await sim.ask()
    call = sim.state.pending_approvals()[0]
    assert sim.state.status == "waiting_approval" and sim.requests == []
    assert sim.approvals[call.call_id]["status"] == "pending"
    assert await _decide(sim, call.call_id, "approve", arguments_digest="0" * 64) is None  # other arguments: nothing runs
    assert sim.requests == []
    step = await _decide(sim, call.call_id, "approve", arguments_digest=call.arguments_digest)
    assert step is not None and [r.arguments["code"] for r in sim.requests] == ["print(6*7)"]
    assert sim.approvals[call.call_id]["status"] == "approved"
    assert sim.state.status == "completed" and "ran print(6*7)" in sim.tool_messages()[0]
    done = next(e for e in sim.events if e.type == "tool.completed")
    assert done.approval == "approved" and done.arguments is None
    kinds = [p.kind for p in sim.publics]
    assert kinds.index("approval.requested") < kinds.index("approval.decided") < kinds.index("tool.completed")
    assert {"phase": "approval", "call_id": call.call_id, "decision": "approve"} in sim.state.trace


async def test_a_repeat_decision_changes_nothing():
    sim = _sim(Reply(tool_calls=[code("print(1)")]))
    await sim.ask()
    call_id = sim.state.pending_approvals()[0].call_id
    sim.tools = {}  # the tool stays silent: the task keeps waiting for its result
    assert await _decide(sim, call_id, "approve") is not None
    assert await _decide(sim, call_id, "approve") is None
    assert await _decide(sim, call_id, "reject") is None
    assert await _decide(sim, "no-such-call", "approve") is None


async def test_edit_validates_and_runs_the_edited_arguments():
    sim = _sim(Reply(tool_calls=[code("print('ORIGINAL')")]))
    await sim.ask()
    call = sim.state.pending_approvals()[0]
    old_digest = call.arguments_digest
    assert await _decide(sim, call.call_id, "edit", arguments={"code": ""}) is None  # invalid: nothing runs
    step = await _decide(sim, call.call_id, "edit", arguments={"code": "print('EDITED')", "reason": "改过的代码"})
    update = next(e for e in step.effects if isinstance(e, UpdateApproval))
    assert update.status == "edited" and update.arguments_digest != old_digest
    assert [r.arguments["code"] for r in sim.requests] == ["print('EDITED')"]
    assert "EDITED" in sim.tool_messages()[0] and "ORIGINAL" not in sim.tool_messages()[0]
    # the client's record says so when its events are read again later: decision and arguments run
    done = next(e for e in sim.events if e.type == "tool.completed")
    assert done.approval == "edited" and done.arguments == {"code": "print('EDITED')", "reason": "改过的代码"}


async def test_reject_is_final_and_a_repeat_is_refused_without_asking():
    same = code("import os; print(os.listdir('/'))")
    sim = _sim(Reply(tool_calls=[same]), Reply(tool_calls=[same]))
    await sim.ask()
    call_id = sim.state.pending_approvals()[0].call_id
    step = await _decide(sim, call_id, "reject", comment="不允许")
    assert not any(isinstance(e, PublishTool) for e in step.effects)
    assert sim.approvals[call_id]["status"] == "rejected"
    assert sim.state.status == "completed" and sim.requests == []
    msgs = sim.tool_messages()
    assert len(msgs) == 2 and all("rejected_by_user" in m for m in msgs) and "不允许" in msgs[0]
    assert sim.types().count("tool.approval_required") == 1, "the repeat was refused without a new approval"


async def test_pending_approvals_in_one_step_are_decided_independently():
    sim = _sim(Reply(tool_calls=[code("print('A')"), code("print('B')")]))
    await sim.ask()
    a, b = sim.state.pending_approvals()
    await _decide(sim, b.call_id, "reject")
    assert sim.state.status == "waiting_approval" and [c.call_id for c in sim.state.pending_approvals()] == [a.call_id]
    await _decide(sim, a.call_id, "approve")
    msgs = sim.tool_messages()
    assert len(msgs) == 2 and "ran print('A')" in msgs[0] and "rejected_by_user" in msgs[1]


async def test_approval_expiry_runs_nothing():
    sim = _sim(Reply(tool_calls=[code("print(1)")]), approval_ttl_s=60)
    await sim.ask()
    call_id = sim.state.pending_approvals()[0].call_id
    await sim.wake(59)
    assert sim.state.status == "waiting_approval"
    await sim.wake(2)
    assert sim.state.status == "completed" and sim.requests == []
    assert "approval_expired" in sim.tool_messages()[0]
    assert sim.approvals[call_id]["status"] == "expired"
    assert ("approval.decided", "expired") in [(p.kind, p.fields.get("outcome")) for p in sim.publics]
    assert await _decide(sim, call_id, "approve") is None  # too late


async def test_a_tenants_own_approval_policy_replaces_the_default():
    """``CONDUIT_TENANTS`` ``approval_policies`` (conduit.runtime.tenants) decide for that tenant only."""
    relaxed = _sim(Reply(tool_calls=[code("print(2)")]), tenants={"default": {"approval_policies": {"code_exec": "never"}}})
    await relaxed.ask()
    assert relaxed.state.pending_approvals() == [] and [r.arguments["code"] for r in relaxed.requests] == ["print(2)"]
    other = _sim(Reply(tool_calls=[code("print(3)")]), tenants={"acme": {"approval_policies": {"code_exec": "never"}}})
    await other.ask()
    assert len(other.state.pending_approvals()) == 1 and other.requests == []  # the default policy: always ask


async def test_a_tenants_own_model_is_asked_for_and_others_get_the_default():
    """``CONDUIT_TENANTS`` ``model``: the step plan names it, so every model call asks for it."""
    own = Sim(TestModel(Reply(content="好的。")), tenants={"default": {"model": "m-own"}})
    await own.ask()
    other = Sim(TestModel(Reply(content="好的。")), tenants={"acme": {"model": "m-acme"}})
    await other.ask()
    assert own.model.models_seen == ["m-own"] and other.model.models_seen == [other.deps.settings.llm.model]


async def test_an_approval_nobody_decided_is_escalated_once_to_an_admin_then_expires():
    """Rule A26: a tenant that escalates gives the call one more approval_ttl_s for a tenant admin."""
    sim = _sim(Reply(tool_calls=[code("print(1)")]), approval_ttl_s=60, approval_timeout="escalate")
    await sim.ask()
    call = sim.state.pending_approvals()[0]
    await sim.wake(61)
    up = sim.of("approval.escalated")
    assert len(up) == 1 and up[0].call_id == call.call_id and up[0].to_role == "admin"
    assert sim.state.pending_approvals() and sim.state.pending_approvals()[0].escalated
    assert sim.approvals[call.call_id]["escalated"] is True and sim.approvals[call.call_id]["status"] == "pending"
    assert sim.requests == []
    await sim.wake(61)
    assert sim.approvals[call.call_id]["status"] == "expired" and sim.requests == []
    assert len(sim.of("approval.escalated")) == 1 and sim.state.status == "completed"


async def test_by_default_an_undecided_approval_expires_at_once():
    sim = _sim(Reply(tool_calls=[code("print(1)")]), approval_ttl_s=60)
    await sim.ask()
    call = sim.state.pending_approvals()[0]
    await sim.wake(61)
    assert not sim.of("approval.escalated") and sim.approvals[call.call_id]["status"] == "expired"
