"""Recording tool results: retries, the tool breaker, and the evidence pool.

Rules:
- A result is attached to its pending call by call id and idempotency key; an unknown
  or duplicate delivery changes nothing.
- Every result of a call that ran feeds its tool's breaker (a ``FeedBreaker`` effect, applied once
  after the save): a transient error or a timeout is a failure, anything else a success
  (refusals never ran and do not count). Rule A29: a call that got no answer by its deadline
  counts only when no process of its tool service was serving (a dead service still opens the
  circuit; a rolling restart or a consumer-group rebalance, with a live replica, does not).
- A transient error is retried instead of being shown to the model, at most
  ``tool_max_retries`` times, after a backoff with full jitter (rule A8, docs/architecture.md):
  uniform(0, ``tool_retry_base_s`` × 2^attempt) seconds.
- When all of a step's calls are in, their evidence is numbered into the task's pool
  (``evidence.EvidencePool``, rule A10) in call order, each result becomes a ``tool``
  message, and the next model step starts. A step whose every call failed or was refused
  counts towards ``max_failed_steps`` (rule E3, docs/agent-rules.md); one ok result resets it.
- Rule V4 (docs/agent-rules.md): superseded law text (历史版本, 已废止, 已被修改) enters the pool only for
  a question about a time wholly in the past when it applied then (``versions.admissible``); what is
  kept out is named in the trace (phase ``versions``). Law passages are dated for the model (V2, V3).
- Team mode (rules D2, D4, D5, D7, D8, ``team``): a worker's result is never retried, arrives as
  ``worker.completed``, adds its spend to the task's, and has its evidence renumbered into the pool;
  a worker that timed out, or is no longer waited for, is cancelled.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from conduit.policy.redaction import redact
from contracts.api import StepRecord
from contracts.events import ToolResultPayload
from contracts.stream import OUTPUT_MAX_CHARS, EvidenceEvent, ToolCompletedEvent, TraceEvent, WorkerCompleted
from services.orchestrator.agent import planner, prompt, team, versions
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.effects import (
    CancelChild,
    ClearWake,
    FaultPoint,
    FeedBreaker,
    HoldLease,
    Public,
    RunModelStep,
    Step,
    Wake,
    WriteView,
)
from services.orchestrator.agent.evidence import EvidencePool
from services.orchestrator.agent.state import PendingCall, Phase, Refusal, TaskState

Arrival = tuple[str, ToolResultPayload | Refusal]
"""A result for the pending call with this call id (a tool's result, or a refusal decided later:
a rejected or expired approval)."""


def transient(result: ToolResultPayload | Refusal) -> bool:
    """True for a timeout or an error of kind ``transient``."""
    return result.outcome == "timeout" or (result.error is not None and result.error.kind == "transient")


def backoff_s(deps: Deps, attempt: int) -> float:
    """Seconds before retry number ``attempt`` (1-based): full jitter over base × 2^attempt."""
    return deps.rng.uniform(0, deps.settings.tools.tool_retry_base_s * 2 ** attempt)


def _feed(deps: Deps, call: PendingCall, result: ToolResultPayload | Refusal, now: datetime,
          unanswered: bool = False) -> FeedBreaker | None:
    """Rule A9: what a call that ran tells its tool's breaker (None: a refusal, a tool without one, or
    rule A29: a call that got no answer, ``unanswered``, while its tool service had a live process)."""
    if deps.breaker(call.name) is None or isinstance(result, Refusal) or unanswered:
        return None
    return FeedBreaker(call.name, transient(result), now.timestamp())


def _match(state: TaskState, result: ToolResultPayload) -> PendingCall | None:
    return next((c for c in state.pending if c.call_id == result.call_id
                 and c.idempotency_key == result.idempotency_key), None)


def _attach(deps: Deps, state: TaskState, call: PendingCall, r: ToolResultPayload | Refusal,
            now: datetime) -> dict[str, Any] | None:
    """Schedule a retry (returns None) or attach ``r`` (returns its trace)."""
    s = deps.settings.tools
    retry = call.tool != "delegate"  # a worker's task is never started twice (rule D5)
    if retry and r.outcome == "error" and transient(r) and not isinstance(r, Refusal) and call.attempts < s.tool_max_retries:
        call.attempts += 1
        call.retry_at = now + timedelta(seconds=backoff_s(deps, call.attempts))
        call.deadline_at = call.retry_at + timedelta(seconds=s.tool_timeout_s)
        return None
    call.result, call.received_at = r, now
    waited_ms = (now - call.requested_at).total_seconds() * 1000
    state.steps.append(StepRecord(step=call.step, kind="tool", tool=call.name, call_id=call.call_id,
                                  arguments=call.arguments, outcome=r.outcome, duration_ms=r.duration_ms))
    trace = {"tool": call.name, "call_id": call.call_id, "outcome": r.outcome, "attempts": call.attempts + 1,
             "run_ms": r.duration_ms, "queue_ms": round(max(0.0, waited_ms - r.duration_ms), 2)}
    limited = state.scope_of(call.name)
    if limited is not None:  # rule Q2: the trace shows the search ran scoped
        trace["scope"] = limited.model_dump()
    return trace


def record_results(deps: Deps, state: TaskState, results: list[ToolResultPayload | Arrival],
                   now: datetime, served: frozenset[str] = frozenset()) -> Step | None:
    """Attach ``results`` to the pending calls; go on to the next model step when all are in.

    ``served``: tool names whose service had a live process when the timers gave their calls a
    ``timeout`` (an ``Arrival``, no answer from the tool): those timeouts do not feed the breaker
    (rule A29: a rolling restart's or a rebalance's wait is the bus's, not the tool's failing).
    Returns None when nothing changed (all unknown or duplicate). Effects: the client's
    ``tool.completed``, ``trace`` and ``evidence`` events in the save, then the fault point
    ``tool_result``, the public ``tool.completed`` events, and the next step or wake-up.
    """
    if state.terminal or state.phase != Phase.TOOLS:
        return None
    fresh: list[tuple[PendingCall, ToolResultPayload | Refusal]] = []
    retried = False
    traces: list[dict[str, Any]] = []
    feeds: list[FeedBreaker] = []
    for item in results:
        call, r = (state.call(item[0]), item[1]) if isinstance(item, tuple) else (_match(state, item), item)
        if call is None or call.result is not None:
            continue  # unknown or duplicate delivery
        unanswered = isinstance(item, tuple) and r.outcome == "timeout" and call.name in served
        feeds += [f for f in [_feed(deps, call, r, now, unanswered)] if f is not None]
        trace = _attach(deps, state, call, r, now)
        if trace is None:
            retried = True
        else:
            fresh.append((call, r))
            traces.append(trace)
    if not fresh and not retried and results:
        return None
    stopped = team.stop_waiting(deps, state, now)  # rule D2: enough workers answered
    fresh += [(c, c.result) for c in stopped]  # type: ignore[misc]
    state.trace.extend({"phase": "tool", **t} for t in traces)
    step = Step(state).emit(*(_completed(c, r, now) for c, r in fresh))
    step.emit(*(TraceEvent(phase="tool", data=t) for t in traces))
    step.effects += feeds  # applied once, after the save
    step.effects += [CancelChild(team.child_task_id(c.idempotency_key), "the supervisor stopped waiting")  # rule D8
                     for c, r in fresh if c.child is not None and (r.outcome == "timeout" or c in stopped)]
    done = state.all_results_in()
    after = [Public("tool.completed", {"tool": c.name, "outcome": r.outcome, "duration_ms": r.duration_ms})
             for c, r in fresh]
    if not done:
        wake_at = state.next_wakeup()
        assert wake_at is not None  # a call without a result always waits for something
        step.effects += [Wake(wake_at), FaultPoint("tool_result"), *after]
        return step
    advanced = advance(state, now)
    # the evidence event and the lease join this save; the step's publics come before the next step
    step.effects += [e for e in advanced.effects if not isinstance(e, (WriteView, RunModelStep, ClearWake))]
    step.effects += [FaultPoint("tool_result"), *after, ClearWake(), WriteView(), RunModelStep()]
    return step


def _completed(call: PendingCall, r: ToolResultPayload | Refusal, now: datetime) -> ToolCompletedEvent | WorkerCompleted:
    """The client's event for a result: ``worker.completed`` for a started worker (rule D2), else ``tool.completed``."""
    if call.child is None:
        code = r.error.error_code if r.error else None
        approval = "expired" if code == "approval_expired" else call.approval if call.approval != "pending" else None
        return ToolCompletedEvent(call_id=call.call_id, tool=call.name, outcome=r.outcome, duration_ms=r.duration_ms,
                                  error_code=code, approval=approval,
                                  arguments=call.arguments if call.approval == "edited" else None, **_shown_output(r))
    return WorkerCompleted(call_id=call.call_id, worker=call.child.worker, task_id=team.child_task_id(call.idempotency_key),
                           outcome=r.outcome, summary=team.summary_shown(getattr(r, "output", None)),
                           duration_ms=round((now - call.requested_at).total_seconds() * 1000, 2),
                           error_code=r.error.error_code if r.error else None)


def advance(state: TaskState, now: datetime) -> Step:
    """All of the step's calls are in: number their evidence into the pool, add one ``tool``
    message per call (in call order), and start the next model step (lease taken in the save)."""
    pool = EvidencePool(state.evidence)
    new_evidence = []
    failed = bool(state.pending) and all(c.result is not None and c.result.outcome != "ok" for c in state.pending)
    state.failed_steps = state.failed_steps + 1 if failed else 0  # rule E3
    for call in state.pending:
        assert call.result is not None
        if call.child is not None:  # rules D4, D7: the worker's spend, evidence and summary
            _, new, content = team.absorb(state, pool, call)
            new_evidence.extend(new)
            state.messages.append({"role": "tool", "tool_call_id": call.call_id, "content": content})
            continue
        ok = isinstance(call.result, ToolResultPayload) and call.result.outcome == "ok"
        in_context, new = pool.add(_admitted(state, call.result.evidence)) if ok else ([], [])  # type: ignore[union-attr]
        new_evidence.extend(new)
        state.messages.append({"role": "tool", "tool_call_id": call.call_id,
                               "content": prompt.render_tool_result(call.result, in_context, state.asked())})
    ended = list(state.pending)
    state.pending = []
    state.phase, state.status = Phase.MODEL, "running"
    step = planner.after_round(state, ended)  # rule A25: the round ends the plan's current step
    if new_evidence:  # what clients see of tool output has its secrets redacted (rule O3)
        step.emit(EvidenceEvent(items=[e.model_copy(update={"text": redact(e.text)}) for e in new_evidence]))
    step.effects += [HoldLease(), ClearWake(), WriteView(), RunModelStep()]
    return step


def _admitted(state: TaskState, found: list) -> list:
    """Rule V4: the evidence of ``found`` that may enter the pool (superseded law text only for a question
    about a time wholly in the past, when it applied then); the chunk ids kept out go to the trace."""
    asked = state.asked()
    kept = [e for e in found if versions.admissible(e.metadata, asked)]
    if len(kept) < len(found):
        state.trace.append({"phase": "versions", "kept_out": [e.chunk_id for e in found if e not in kept]})
    return kept


def _shown_output(r: ToolResultPayload | Refusal) -> dict:
    """``output`` (cut to ``OUTPUT_MAX_CHARS``) and ``artifacts`` of a result for the client's
    ``tool.completed`` (the page's record shows them); a refusal has neither."""
    if isinstance(r, Refusal):
        return {}
    return {"output": r.output[:OUTPUT_MAX_CHARS] if r.output else None, "artifacts": r.artifacts}
