"""Timers: what the sweeper's wake-up does to a task waiting for tools or people
(rules A7 and A8, docs/architecture.md).

For each call still without a result at ``now``:
- a pending approval past ``expires_at`` is refused with ``approval_expired``, or, for a tenant that
  escalates (``approval_timeout``, rule A26), waits once more for a tenant admin (``approval.escalated``);
- a request never confirmed on the bus (its replica died between the checkpoint and
  the publish: ``state.OUTBOX_RESEND_S``) or whose retry is due is sent again
  (idempotent: tool services key results by idempotency key);
- a sent request without a result is sent again every ``state.TOOL_RESEND_S`` until its
  deadline (rule A14: the broker may have lost it in a restart);
- a call past ``deadline_at`` whose run is under way at a live tool process (it waited in its topic
  through a rolling restart, then began) waits for the run's own deadline plus ``RUN_GRACE_S``
  (rule A36: the tool service ends the run there and reports it), never past the task's deadline;
- a call past ``deadline_at`` that has not begun, whose tool's consumers rebalanced after it was requested
  (the assignment of its request topic settled later, or is still settling), gets ``tool_timeout_s`` from
  the moment it settled (rule A37: no process could read the request meanwhile), never past the task's deadline;
- any other call past ``deadline_at`` gets a ``timeout`` result (``tool_timeout``, transient:
  it counts against the tool's breaker unless a process of its tool service was serving, rule
  A29: a rolling restart's wait is not the tool failing), except while the bus is unreachable (rule A15: no
  tool could have answered; the deadline moves to ``tool_timeout_s`` from now, never past the
  task's deadline, so the call gets its full time once a broker is back).
Otherwise the wake-up is moved to the task's next due time.

``take_stored`` (rule A27): before its timers fire, a wake-up records the results the tool services
stored (``keys.tool_result``) for calls still waiting: a result message lost with an orchestrator
(consumed, then SIGKILLed) or waiting in a dead orchestrator's partition is not waited for.

``rescue`` (rule A23): a call whose run's process is gone (rule T8, found by the sweeper) is sent
again at once, to a live replica, instead of waiting for its claim to lapse and the next re-send.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from conduit.runtime import tenants
from contracts.events import ToolError, ToolResultPayload
from contracts.stream import ApprovalEscalated
from contracts.tools import request_topic
from services.orchestrator.agent import approvals, recording, team
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.effects import ClearWake, Public, PublishTool, Step, UpdateApproval, Wake
from services.orchestrator.agent.state import PendingCall, Phase, TaskState


def timeout_result(deps: Deps, call: PendingCall, now: datetime) -> ToolResultPayload:
    """The ``timeout`` result of ``call`` (a known tool that was sent and never answered)."""
    assert call.tool is not None
    return ToolResultPayload(
        call_id=call.call_id, tool=call.tool, idempotency_key=call.idempotency_key, outcome="timeout",
        error=ToolError(error_code="tool_timeout", kind="transient",
                        message=f"{call.name} gave no result within {deps.settings.tools.tool_timeout_s:.0f} s",
                        hint="the tool service may be down; answer with what you have or try another tool"),
        duration_ms=round((now - call.requested_at).total_seconds() * 1000, 2))


def _postpone(deps: Deps, state: TaskState, call: PendingCall, now: datetime) -> bool:
    """Rule A15: move ``call``'s deadline to ``tool_timeout_s`` from ``now`` (never past the task's
    deadline, rule E2). False when the task's deadline leaves no time: the call times out."""
    task_deadline = team.budget(deps, state).deadline_at  # a worker's: its share of the tree's time (rule D4)
    moved = min(now + timedelta(seconds=deps.settings.tools.tool_timeout_s), task_deadline)
    if moved <= now:
        return False
    call.deadline_at = moved
    return True


RUN_GRACE_S = 5.0
"""Seconds past a running call's own deadline (its start + ``tool_timeout_s``) the orchestrator waits for
its result (rule A36: the tool service stops the run there and publishes a ``timeout`` itself)."""


def _await_run(deps: Deps, state: TaskState, call: PendingCall, began_s: float, now: datetime) -> bool:
    """Rule A36: ``call`` runs at a live tool process since ``began_s`` (epoch seconds): its deadline moves to
    the run's own deadline plus ``RUN_GRACE_S``, never past the task's (rule E2). False when that is not
    later than ``now`` (the call times out)."""
    run_deadline = datetime.fromtimestamp(began_s, tz=now.tzinfo) + timedelta(
        seconds=deps.settings.tools.tool_timeout_s + RUN_GRACE_S)
    moved = min(run_deadline, team.budget(deps, state).deadline_at)
    if moved <= now:
        return False
    call.deadline_at = moved
    return True


REBALANCE_WAIT_MAX = 2
"""Rule A37's bound, in tool deadlines from the request: a group that has not settled within a whole
deadline is stuck, not restarting (tansu once kept a web group unassigned for minutes), and the call times out."""


def _await_settled(deps: Deps, state: TaskState, call: PendingCall, settled_s: float | None,
                   now: datetime) -> bool:
    """Rule A37: ``call`` has not begun and its request topic's consumers settled at ``settled_s`` (epoch
    seconds; None: unknown). When that is after the call was requested, its deadline moves to
    ``tool_timeout_s`` after it, never past ``REBALANCE_WAIT_MAX`` deadlines from the request nor past the
    task's deadline (rule E2). False otherwise, or when that is not later than ``now`` (the call times out)."""
    if settled_s is None or settled_s <= call.requested_at.timestamp():
        return False
    timeout = timedelta(seconds=deps.settings.tools.tool_timeout_s)
    moved = min(datetime.fromtimestamp(settled_s, tz=now.tzinfo) + timeout,
                call.requested_at + REBALANCE_WAIT_MAX * timeout, team.budget(deps, state).deadline_at)
    if moved <= now:
        return False
    call.deadline_at = moved
    return True


def due(deps: Deps, state: TaskState, now: datetime, bus_up: bool = True,
        runs_started: dict[str, float] | None = None, settled: dict[str, float] | None = None,
        ) -> tuple[list[PendingCall], list[recording.Arrival], bool, list[PendingCall]]:
    """The calls to send again at ``now``, the results the timers give (expired approvals,
    timeouts), in call order, whether a deadline was postponed (``bus_up`` False, rule A15; a run
    under way, rule A36: ``runs_started``, idempotency key -> epoch seconds; a rebalance after the
    request, rule A37: ``settled``, request topic -> epoch seconds its assignment settled) and the
    approvals to escalate (rule A26: a tenant that escalates, an approval not escalated before)."""
    resend: list[PendingCall] = []
    late: list[recording.Arrival] = []
    escalate: list[PendingCall] = []
    postponed = False
    expired = dict(approvals.expire(state, now))
    escalates = (tenants.policy(deps.settings, state.tenant_id).approval_timeout
                 or deps.settings.tools.approval_timeout) == "escalate"
    for c in state.pending:
        if c.result is not None:
            continue
        if c.approval == "pending":
            if c.call_id in expired and escalates and not c.escalated:
                escalate.append(c)
            elif c.call_id in expired:
                late.append((c.call_id, expired[c.call_id]))
        elif not c.sent or (c.retry_at and c.retry_at <= now):
            if (w := c.next_wakeup()) is not None and w <= now:
                resend.append(c)
        elif c.deadline_at <= now:
            if not bus_up and _postpone(deps, state, c, now):
                postponed = True
            elif (began := (runs_started or {}).get(c.idempotency_key)) is not None:
                if _await_run(deps, state, c, began, now):
                    postponed = True
                else:
                    late.append((c.call_id, timeout_result(deps, c, now)))
            elif _await_settled(deps, state, c, (settled or {}).get(_topic(c.name) or ""), now):
                postponed = True
            else:
                late.append((c.call_id, timeout_result(deps, c, now)))
        elif c.resend_at() <= now:  # rule A14
            resend.append(c)
    return resend, late, postponed, escalate


def escalated(deps: Deps, state: TaskState, calls: list[PendingCall], now: datetime) -> Step:
    """Rule A26: ``calls`` wait ``approval_ttl_s`` more (never past the task's deadline) for a tenant
    admin: ``approval.escalated`` for the client, the stored approvals marked escalated."""
    step = Step(state)
    deadline = team.budget(deps, state).deadline_at
    for c in calls:
        c.escalated = True
        c.expires_at = max(now, min(now + timedelta(seconds=deps.settings.tools.approval_ttl_s), deadline))
        step.emit(ApprovalEscalated(call_id=c.call_id, tool=c.name, expires_at=c.expires_at))
        step.effects.append(UpdateApproval(c.call_id, "pending", only_if_pending=True, escalated_until=c.expires_at))
    return step


def wake(deps: Deps, state: TaskState, now: datetime, bus_up: bool = True,
         served_topics: frozenset[str] = frozenset(), runs_started: dict[str, float] | None = None,
         settled: dict[str, float] | None = None) -> Step:
    """Handle the task's due timers at ``now`` (see the module's rules); ``bus_up`` False: the
    broker does not answer, so deadlines are postponed instead of fired (rule A15).
    ``served_topics``: the tool request topics a live tool service process serves
    (``conduit.runtime.owners.served_topics``): a timeout of a call on one of them does not feed
    its tool's breaker (rule A29). ``runs_started``: idempotency key -> epoch seconds its run began at a
    live tool process (rule A36: such a call waits for its run's own deadline). ``settled``: request
    topic -> epoch seconds its consumers' assignment settled (``owners.TopicsServed.settled``; rule A37)."""
    if state.terminal or state.phase != Phase.TOOLS:
        return Step(state, [ClearWake()], save=False)
    resend, late, postponed, escalate = due(deps, state, now, bus_up, runs_started or {}, settled or {})
    if escalate and not resend and not late:  # rule A26: the approvals wait longer, for an admin
        wake_at = state.next_wakeup()
        return escalated(deps, state, escalate, now).then(Step(state, [Wake(wake_at)] if wake_at else []))
    if not resend and not late:
        wake_at = state.next_wakeup()
        return Step(state, [Wake(wake_at) if wake_at is not None else ClearWake()], save=postponed)
    for c in resend:
        c.retry_at, c.sent, c.sent_at = None, False, now
    step = escalated(deps, state, escalate, now)
    step.effects += [PublishTool(c) for c in resend]
    for call_id, r in late:
        call = state.call(call_id)
        if call is not None and r.error is not None and r.error.error_code == "approval_expired":
            step.effects += [UpdateApproval(call_id, "expired", only_if_pending=True),
                             Public("approval.decided", {"tool": call.name, "outcome": "expired"})]
    served = frozenset(c.name for c in state.pending if _topic(c.name) in served_topics)
    recorded = recording.record_results(deps, state, late, now, served) if late else None
    if recorded is not None:
        step.then(recorded)
    if resend:
        # the wake-up is set by ``mark_sent`` once the requests are out; until then the sweeper's
        # claim (pushed a few seconds ahead) stands, so a replica dying before that re-sends them
        step.effects = [e for e in step.effects if not isinstance(e, Wake)]
    return step


def _topic(tool: str) -> str | None:
    """The request topic of ``tool`` (None: not a tool sent on the bus)."""
    try:
        return request_topic(tool)
    except KeyError:
        return None


def awaiting(state: TaskState) -> list[PendingCall]:
    """The calls whose result may be in the tool services' store: sent tool requests (not a
    delegate's worker, not waiting for approval) still without a result."""
    if state.terminal or state.phase != Phase.TOOLS:
        return []
    return [c for c in state.pending if c.result is None and c.sent and c.tool not in (None, "delegate")
            and c.approval != "pending"]


def take_stored(deps: Deps, state: TaskState, stored: list[ToolResultPayload], now: datetime) -> Step | None:
    """Rule A27: record ``stored`` (results read from the store for ``awaiting`` calls) as if they
    had arrived on the bus; None when none matches a call still waiting."""
    waiting = {c.idempotency_key for c in awaiting(state)}
    found = [r for r in stored if r.idempotency_key in waiting]
    return recording.record_results(deps, state, found, now) if found else None


def rescue(state: TaskState, idempotency_key: str, owner: str, now: datetime) -> Step | None:
    """Rule A23: the run of call ``idempotency_key`` died with its process ``owner``: send the
    request again now (``PublishTool`` with ``rescue``; ``mark_sent`` sets the next wake-up, and
    the A14 re-send counts from now). None when the call is not waiting for a sent request's
    result any more (answered, unsent, awaiting approval, or the task moved on)."""
    if state.terminal or state.phase != Phase.TOOLS:
        return None
    call = next((c for c in state.pending if c.idempotency_key == idempotency_key), None)
    if call is None or call.result is not None or not call.sent or call.approval == "pending":
        return None
    call.retry_at, call.sent, call.sent_at = None, False, now
    return Step(state, [PublishTool(call, rescue=owner)])


def mark_sent(state: TaskState, call_ids: list[str]) -> Step | None:
    """The requests of ``call_ids`` are on the bus: flag them sent (the outbox), with the
    task's next wake-up in the same write. None when nothing changed."""
    if state.terminal or state.phase != Phase.TOOLS:
        return None
    changed = False
    for c in state.pending:
        if c.call_id in call_ids and not c.sent:
            c.sent, changed = True, True
    if not changed:
        return None
    wake_at = state.next_wakeup()
    return Step(state, [Wake(wake_at)] if wake_at is not None else [])
