"""Human decisions on calls that wait for approval (rule A7, docs/architecture.md).

Rules:
- Only a call still waiting (``approval == "pending"``, no result) can be decided; a
  repeat, an unknown call or an expired one changes nothing (idempotent).
- ``approve`` runs exactly the arguments shown: a decision carrying an
  ``arguments_digest`` that differs from the call's changes nothing (the gateway
  answers 409 ``digest_mismatch`` first).
- ``edit`` runs the edited arguments if they fit the tool's schema (else nothing
  changes; the gateway answers 422 first); the call's digest becomes theirs.
- ``reject`` is final: the model is told ``rejected_by_user``, and the same call
  (by loop signature) is refused without asking again for the rest of the task.
- ``expire``: a call nobody decided by ``expires_at`` (``approval_ttl_s``) is told
  ``approval_expired`` and never runs.
An approved or edited call gets a fresh deadline (``tool_timeout_s``) from the decision.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from contracts.events import ApprovalDecisionPayload, ToolError
from contracts.tools import arguments_digest
from services.orchestrator.agent import policies, recording, vetting
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.effects import IN_SAVE, Metric, Public, PublishTool, Step, UpdateApproval, Wake, WriteView
from services.orchestrator.agent.state import PendingCall, Phase, Refusal, TaskState


def waiting(state: TaskState, call_id: str) -> PendingCall | None:
    """The call ``call_id`` if it still waits for a decision, else None."""
    if state.terminal or state.phase != Phase.TOOLS:
        return None
    call = state.call(call_id)
    if call is None or call.approval != "pending" or call.result is not None:
        return None
    return call


def decide(deps: Deps, state: TaskState, d: ApprovalDecisionPayload, now: datetime) -> Step | None:
    """Apply decision ``d``; None when it changes nothing (see the module's rules).

    Effects: the record's new status, the task record, the public ``approval.decided``;
    then the request (approve, edit) or the rejection recorded as the call's result.
    """
    call = waiting(state, d.call_id)
    if call is None:
        return None
    rejection: Refusal | None = None
    if d.decision == "approve":
        if d.arguments_digest and d.arguments_digest != call.arguments_digest:
            return None  # the person saw other arguments: nothing runs
        call.approval = "approved"
    elif d.decision == "edit":
        if vetting.check_arguments(state, call.name, d.arguments or {}) is not None:
            return None  # rule A7: edited arguments must fit the tool's schema
        call.arguments = dict(d.arguments or {})
        call.arguments_digest = arguments_digest(call.arguments)
        call.approval = "edited"
    else:
        call.approval = "rejected"
        state.rejected.append(policies.signature(call.name, call.arguments))
        rejection = Refusal(error=ToolError(
            error_code="rejected_by_user", kind="forbidden",
            message="a person rejected this call" + (f": {d.comment}" if d.comment else ""),
            hint="do not ask for it again; answer with what you have"))
    run = rejection is None
    if run:
        call.requested_at, call.sent = now, False
        call.deadline_at = now + timedelta(seconds=deps.settings.tools.tool_timeout_s)
    state.status = state.waiting_status()
    state.trace.append({"phase": "approval", "call_id": call.call_id, "decision": d.decision})
    step = Step(state, [Metric("approval_decided")])
    if rejection is not None:
        recorded = recording.record_results(deps, state, [(call.call_id, rejection)], now)
        assert recorded is not None
        # the client events first; the public ones keep their order: approval.decided, then tool.completed
        step.effects += [e for e in recorded.effects if isinstance(e, IN_SAVE) and not isinstance(e, Public)]
        step.effects += _after_decision(call)
        step.effects += [e for e in recorded.effects if not isinstance(e, IN_SAVE) or isinstance(e, Public)]
        return step
    wake_at = state.next_wakeup()
    assert wake_at is not None
    step.effects += [Wake(wake_at), *_after_decision(call), PublishTool(call),
                     Public("tool.requested", {"tool": call.name})]
    return step


def _after_decision(call: PendingCall) -> list:
    return [UpdateApproval(call.call_id, str(call.approval), call.arguments, call.arguments_digest), WriteView(),
            Public("approval.decided", {"tool": call.name, "outcome": call.approval})]


def expire(state: TaskState, now: datetime) -> list[tuple[str, Refusal]]:
    """Calls whose approval expired by ``now``, each with its ``approval_expired`` refusal."""
    return [(c.call_id, Refusal(error=ToolError(error_code="approval_expired", kind="forbidden",
                                                message="nobody approved this call in time; it did not run",
                                                hint="answer without it, or say what you would need")))
            for c in state.pending_approvals() if c.expires_at and c.expires_at <= now]
