"""Vetting the model's tool calls before any runs (rule A5, docs/architecture.md).

Each call is checked in this order (the first that applies answers it, and a
refused call never runs; its ``Refusal`` is shown to the model as an error):

1. the tool is offered to this task (an unknown name is refused too: ``tool_not_available``);
2. its arguments are a JSON object matching the tool's schema (``bad_arguments``); after
   ``max_bad_arguments`` retries the tool is withdrawn for the task (rule E6); a ``kb_follow`` call
   names only articles the evidence cites, at most 2 hops away (rule A30, ``follow.check``);
3. a person rejected this exact call earlier in the task (``rejected_by_user``);
4. loop detection (rule A6, ``policies.LOOP_WARN_AT`` / ``LOOP_STOP_AT``): the 3rd
   identical call is answered "you already have that result" (``repeated_call``),
   the 4th ends the task with a wrap-up; so does A<->B oscillation (rule E7, ``policies.oscillating``);
5. the tool-call budget ``max_tool_calls`` (``tool_budget_exhausted``), then the per-tool quota
   ``tool_quotas`` for one question (``TOOL_CALL_LIMIT_REACHED``, rule E5);
6. the tool's circuit breaker (``circuit_open``; half-open lets one trial call through);
7. the approval policy (``policies.needs_approval``): the call waits for a person (an MCP
   tool not marked read-only by its server asks by default, rule X3).

A ``delegate`` call that passed them (team mode) is then checked by rule D3 (``team.check_delegate``:
worker kind, depth, fan-out) and the step's accepted ones get their children's shares of the
tree's budget (rule D4, ``team.allot``); each starts as ``worker.started`` instead of ``tool.requested``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import jsonschema
from pydantic import ValidationError

from conduit.runtime import tenants
from contracts.api import ApprovalRecord
from contracts.events import ToolError
from contracts.stream import ApprovalRequiredEvent, ToolCompletedEvent, ToolRequestedEvent, WorkerStarted
from contracts.tools import TOOL_SPECS, arguments_digest
from services.orchestrator.agent import endings, follow, policies, recording, team
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.effects import (
    DropLease,
    Metric,
    Notify,
    Public,
    PublishTool,
    SaveApproval,
    Step,
    Wake,
    WriteView,
)
from services.orchestrator.agent.state import PendingCall, Phase, Refusal, TaskState

LOOP_STOP = "loop_stop"
"""What ``vet`` returns for a call that ends the task (loop detection, check 4)."""


def _refuse(code: str, kind: str, message: str, hint: str) -> Refusal:
    return Refusal(error=ToolError(error_code=code, kind=kind, message=message, hint=hint))  # type: ignore[arg-type]


def check_arguments(state: TaskState, name: str, args: dict[str, Any] | None) -> Refusal | None:
    """Checks 1-2: the tool is offered and the arguments fit its schema (an MCP tool's: its JSON
    Schema plus ``reason``, rule X1); a ``Refusal`` if not."""
    mcp = state.mcp_tool(name)
    if name not in state.allowed_tools or (name not in TOOL_SPECS and mcp is None):
        return _refuse("tool_not_available", "forbidden", f"tool {name!r} is not available",
                       f"available tools: {', '.join(state.allowed_tools) or 'none'}")
    if args is None:
        return _refuse("bad_arguments", "bad_arguments", "arguments are not a JSON object",
                       "send the arguments as a JSON object matching the schema")
    try:
        if mcp is not None:
            jsonschema.validate(args, mcp.openai_schema()["function"]["parameters"])
        else:
            TOOL_SPECS[name].args_model.model_validate(args)
    except ValidationError as exc:
        return _refuse("bad_arguments", "bad_arguments", str(exc.errors(include_url=False))[:500],
                       "fix the arguments to match the tool's JSON Schema")
    except jsonschema.ValidationError as exc:
        return _refuse("bad_arguments", "bad_arguments", exc.message[:500],
                       "fix the arguments to match the tool's JSON Schema")
    except jsonschema.SchemaError:
        return None  # the MCP server's own schema is broken: the server judges the arguments
    return None


def _bad_arguments(deps: Deps, state: TaskState, name: str, refusal: Refusal) -> Refusal:
    """Rule E6: a call refused for bad arguments may be retried ``max_bad_arguments`` times; after
    that the tool is withdrawn for the rest of the task (no longer offered) and the model is told."""
    if refusal.error.error_code != "bad_arguments" or name not in state.allowed_tools:
        return refusal
    count = state.bad_arguments[name] = state.bad_arguments.get(name, 0) + 1
    if count > deps.settings.limits.max_bad_arguments:
        state.allowed_tools = [t for t in state.allowed_tools if t != name]
        refusal.error.hint = f"{name} is withdrawn after {count} calls with bad arguments; answer without it"
    return refusal


def vet(deps: Deps, state: TaskState, call: PendingCall, args: dict[str, Any] | None,
        now: datetime) -> Refusal | str | None:
    """Apply checks 1-7 to ``call`` with the model's ``args`` (None: not a JSON object),
    counting its signature and, if it may run, the budget.

    Returns a ``Refusal``, ``LOOP_STOP`` (end the task), or None (the call runs; with
    ``call.approval == "pending"`` once a person approves it).
    """
    s = deps.settings
    refusal = check_arguments(state, call.name, args)
    if refusal is not None:
        return _bad_arguments(deps, state, call.name, refusal)
    if call.name == "kb_follow" and (refusal := follow.check(state.evidence, args or {})) is not None:
        return refusal  # rule A30: only articles the evidence cites, at most 2 hops away
    sig = policies.signature(call.name, call.arguments)
    count = state.signatures[sig] = state.signatures.get(sig, 0) + 1
    state.recent_calls = [*state.recent_calls, sig][-policies.OSCILLATION_WINDOW:]
    if policies.oscillating(state.recent_calls):
        return LOOP_STOP
    if sig in state.rejected:
        return _refuse("rejected_by_user", "forbidden", "a person rejected this exact call earlier in this task",
                       "do not ask for it again; answer with what you have or do something else")
    if count >= policies.LOOP_STOP_AT:
        return LOOP_STOP
    if count == policies.LOOP_WARN_AT:
        return _refuse("repeated_call", "business",
                       f"you already called {call.name} with these arguments {count - 1} times and have that result",
                       "use the result you have, change the arguments, or answer now")
    if state.tool_calls_used >= team.budget(deps, state).max_tool_calls:
        return _refuse("tool_budget_exhausted", "forbidden", "the tool-call budget is used up",
                       "answer with the evidence you have")
    quota = s.limits.tool_quotas.get(call.name)
    if quota is not None and state.tool_counts.get(call.name, 0) >= quota:  # rule E5
        return _refuse("TOOL_CALL_LIMIT_REACHED", "business",
                       f"{call.name} may run at most {quota} times for one question and has run that often",
                       "answer with the results you already have")
    breaker = deps.breaker(call.name)
    if breaker is not None and not breaker.allow(now.timestamp()):
        return _refuse("circuit_open", "transient",
                       f"{call.name} failed repeatedly and is paused for {s.tools.tool_breaker_cooldown_s:.0f} s",
                       "use another tool or answer with what you have")
    state.tool_calls_used += 1
    state.tool_counts[call.name] = state.tool_counts.get(call.name, 0) + 1
    tenant = tenants.policy(s, state.tenant_id)
    default = policies.default_approval(policies.risk_of(call.name, state.mcp_tool(call.name)), tenant.approval_by_risk)
    if policies.needs_approval(tenant.approval_policies or {}, call.name, call.arguments, default=default):  # rule T9
        call.approval = "pending"
        call.arguments_digest = arguments_digest(call.arguments)
        deadline = team.budget(deps, state).deadline_at  # rule E2: never past the task's deadline
        call.expires_at = max(now, min(now + timedelta(seconds=s.tools.approval_ttl_s), deadline))
    return None


def new_call(deps: Deps, state: TaskState, call_id: str, name: str, args: dict[str, Any] | None,
             now: datetime) -> PendingCall:
    """A ``PendingCall`` for the model's call (``tool`` None for a name that is no known tool;
    unparsable arguments are kept as ``{}`` and refused by ``vet``). An offered MCP tool called by
    its function name is named canonically (``mcp.<server>.<tool>``, rule X1). Its result deadline
    is ``tool_timeout_s`` away, and never after the task's deadline (rule E2)."""
    task_deadline = team.budget(deps, state).deadline_at
    mcp = state.mcp_tool(name)
    name = mcp.name if mcp is not None else name
    return PendingCall(
        call_id=call_id, name=name, tool=name if name in TOOL_SPECS or mcp is not None else None, arguments=args or {},
        reason=str((args or {}).get("reason", ""))[:500], step=state.step,
        idempotency_key=f"{state.task_id}:{state.step}:{call_id}", requested_at=now,
        deadline_at=max(now, min(now + timedelta(seconds=deps.settings.tools.tool_timeout_s), task_deadline)))


def request_tools(deps: Deps, state: TaskState, calls: list[tuple[str, str, dict[str, Any] | None]],
                  now: datetime) -> Step:
    """Turn the model's tool calls ``(call_id, name, arguments or None)`` into pending calls.

    The checkpoint carries the client's ``tool.requested`` (and refusals' ``tool.completed``,
    approvals' ``tool.approval_required``) and the sweeper's wake-up in its own write; the
    requests go out after the save. When every call was refused the step goes on at once.
    """
    pending: list[PendingCall] = []
    delegates: list[PendingCall] = []
    for call_id, name, args in calls:
        call = new_call(deps, state, call_id, name, args, now)
        verdict = vet(deps, state, call, args, now)
        if verdict is None and name == "delegate":  # rule D3: worker kind, depth, fan-out
            verdict = team.check_delegate(deps, state, args, len(delegates) + 1)
            if verdict is None:
                delegates.append(call)
            else:
                team.uncount(state)
        if verdict == LOOP_STOP:
            return endings.finish_loop(state, now)
        if isinstance(verdict, Refusal):
            call.result, call.received_at = verdict, now
        pending.append(call)
    team.allot(deps, state, delegates, now)  # rule D4: each child's share of the tree's budget
    state.pending, state.phase = pending, Phase.TOOLS
    state.status = state.waiting_status()
    step = Step(state)
    for call in pending:
        if call.child is not None and call.result is None:  # rule D2: a worker's task starts
            step.emit(WorkerStarted(call_id=call.call_id, worker=call.child.worker, task=str(call.arguments["task"]),
                                    task_id=team.child_task_id(call.idempotency_key)))
            continue
        step.emit(ToolRequestedEvent(call_id=call.call_id, tool=call.name, arguments=call.arguments, reason=call.reason,
                                     scope=state.scope_of(call.name)))
        if isinstance(call.result, Refusal):
            step.emit(ToolCompletedEvent(call_id=call.call_id, tool=call.name, outcome="error", duration_ms=0.0,
                                         error_code=call.result.error.error_code))
        elif call.approval == "pending":
            step.effects.append(SaveApproval(approval_record(state, call)))
            step.emit(approval_event(call))
            if state.child is not None:  # team mode: the person watches the root's stream (decided here)
                step.effects.append(Notify(state.child.root_task_id,
                                           approval_event(call).model_copy(update={"task_id": state.task_id})))
    if state.all_results_in():
        return step.then(recording.advance(state, now))
    wake_at = state.next_wakeup()
    assert wake_at is not None  # a call without a result always waits for something
    step.effects += [Wake(wake_at), DropLease(), WriteView()]
    for call in pending:
        if call.result is not None:
            continue
        if call.approval == "pending":
            step.effects += [Metric("approval_requested"), Public("approval.requested", {"tool": call.name})]
        else:
            step.effects += [PublishTool(call), Public("tool.requested", {"tool": call.name})]
    return step


def approval_record(state: TaskState, call: PendingCall) -> ApprovalRecord:
    """The gateway's record of ``call``'s pending approval."""
    assert call.arguments_digest and call.expires_at
    return ApprovalRecord(task_id=state.task_id, call_id=call.call_id, tool=call.name, arguments=call.arguments,
                          reason=call.reason, arguments_digest=call.arguments_digest, expires_at=call.expires_at)


def approval_event(call: PendingCall) -> ApprovalRequiredEvent:
    """The client's ``tool.approval_required`` for ``call``."""
    assert call.arguments_digest and call.expires_at
    return ApprovalRequiredEvent(call_id=call.call_id, tool=call.name, arguments=call.arguments, reason=call.reason,
                                 arguments_digest=call.arguments_digest, expires_at=call.expires_at.isoformat())
