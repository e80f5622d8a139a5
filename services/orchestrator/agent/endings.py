"""Endings: complete (with the citation check), the wrap-up, fail, cancel, and the
two views of an ended task: its terminal stream event and its record.

Rules:
- Citation check (rule A10, docs/architecture.md): every ``[n]`` in the answer must name an item of the
  task's evidence pool; others are removed (and listed in the trace).
- Loop detected (rule A6, ``vetting`` check 4; A<->B oscillation, rule E7): the task completes
  with a wrap-up (rule E8, ``answers.wrap_up``), replacing any streamed text.
- Output (rules O1-O3, ``answers``): uncited claims are marked, ``confidence`` is the share of
  backed claims, secrets are redacted from the answer.
- A failed or cancelled task keeps why (``state.failure`` / ``state.cancellation``).
- Cancel cascade (rule D8, docs/agent-rules.md): a task ending with workers still open cancels them.
"""

from __future__ import annotations

from datetime import datetime

from contracts.api import TaskView
from contracts.evidence import Citation
from contracts.stream import (
    AnswerDelta,
    AnswerReset,
    StreamEvent,
    TaskCancelledEvent,
    TaskCompleted,
    TaskFailed,
    TaskNeedsInput,
)
from conduit.runtime import tracing
from conduit.policy.redaction import redact
from services.orchestrator.agent import answers, team
from services.orchestrator.agent.effects import Announce, FaultPoint, Remember, Step
from services.orchestrator.agent.evidence import EvidencePool
from services.orchestrator.agent.state import Cancellation, Failure, Phase, TaskState

def _end(state: TaskState, status: str, now: datetime) -> None:
    state.status, state.phase, state.finished_at = status, Phase.DONE, now  # type: ignore[assignment]


def _announce(state: TaskState, citations: list[Citation] | None = None) -> list:
    """The ending's effects: cancel the workers still open (rule D8), then ``Announce``."""
    return [*team.cancel_open(state, f"the supervisor task ended ({state.status})"), Announce(citations)]


def complete(state: TaskState, content: str, now: datetime, mark: bool = True) -> Step:
    """Complete with ``content`` as the answer: secrets redacted (rule O3), the citation check
    (rule A10), then, for a model's answer with ``mark``, uncited claims marked and the
    confidence computed (rules O1, O2). A retrieval-only answer is left unmarked: it quotes
    each passage verbatim under its own ``[n]``, and its notice lines are not claims."""
    answer, citations, removed = EvidencePool(state.evidence).check_citations(redact(content))
    if removed:
        state.trace.append({"phase": "citations", "removed": removed})
    if mark and state.mode == "agent":
        answer, state.confidence = answers.mark_uncited(answer, state.question)
    _end(state, "completed", now)
    state.answer = answer
    effects = _announce(state, citations)
    if state.user_id and state.child is None and (state.memory_on or state.cache in ("miss", "bypass")):
        effects.append(Remember(citations))  # rules M1, M2, C2 (never a worker's task): after the client has its answer
    return Step(state, effects)


def wrap_up(state: TaskState, reason: str, now: datetime) -> Step:
    """Rule E8: end a task stopped for ``reason`` with a wrap-up for the user (what was found,
    with its citations; why it stopped; what to try next), replacing any streamed text."""
    state.stop_reason = reason
    text = answers.wrap_up(state.question, reason, state.evidence)
    step = Step(state).emit(AnswerReset(reason=f"stopped: {reason}"), AnswerDelta(text=text))
    return step.then(complete(state, text, now, mark=False))


def finish_loop(state: TaskState, now: datetime) -> Step:
    """End a task whose model keeps repeating a call (rule A6) or oscillates (rule E7), with a wrap-up."""
    return wrap_up(state, "loop_detected", now)


def needs_input(state: TaskState, question: str, now: datetime) -> Step:
    """Rule E10: the model asks the user ``question`` instead of answering; the task ends with
    ``task.needs_input`` and the session's next turn continues with this task's evidence."""
    _end(state, "needs_input", now)
    state.answer, state.stop_reason = question, "needs_input"
    return Step(state).emit(AnswerReset(reason="the agent asks a question")).then(Step(state, _announce(state)))


def fail(state: TaskState, code: str, message: str, now: datetime) -> Step:
    """Fail with machine-readable ``code`` and human ``message``."""
    _end(state, "failed", now)
    state.failure = Failure(code=code, message=message)
    state.trace.append({"phase": "failed", "code": code, "message": message})
    return Step(state, _announce(state))


def cancel(state: TaskState, reason: str, now: datetime) -> Step:
    """Cancel; the fault point ``cancel`` lies between the save and the announcement."""
    _end(state, "cancelled", now)
    state.cancellation = Cancellation(reason=reason)
    state.trace.append({"phase": "cancelled", "reason": reason})
    return Step(state, [FaultPoint("cancel"), *_announce(state)])


def latency_ms(state: TaskState, now: datetime) -> float:
    """Milliseconds from the question to the end (or to ``now`` while running)."""
    return round(((state.finished_at or now) - state.created_at).total_seconds() * 1000, 2)


def citations_of(state: TaskState) -> list[Citation]:
    """The answer's checked citations (none without an answer)."""
    return EvidencePool(state.evidence).check_citations(state.answer)[1] if state.answer else []


def terminal_event(state: TaskState, now: datetime, citations: list[Citation] | None = None) -> StreamEvent:
    """The ended task's terminal stream event (``citations`` as checked, else derived again)."""
    if state.status == "completed":
        return TaskCompleted(answer=state.answer or "", citations=citations if citations is not None else citations_of(state),
                             usage=state.usage, latency_ms=latency_ms(state, now), mode=state.mode,
                             fallback_reason=state.fallback_reason, stop_reason=state.stop_reason or "answered",
                             confidence=state.confidence, cache=state.cache, memory=state.memory,
                             model=state.answered_by if state.mode in ("agent", "chitchat") else None,
                             review=state.review)
    if state.status == "needs_input":
        return TaskNeedsInput(question=state.answer or "", evidence=len(state.evidence))
    if state.status == "cancelled":
        return TaskCancelledEvent(reason=state.cancellation.reason if state.cancellation else "cancelled")
    failure = state.failure or Failure(code="failed", message="the task failed")
    return TaskFailed(code=failure.code, message=failure.message)


def record_view(state: TaskState, latency: float | None = None, citations: list[Citation] | None = None) -> TaskView:
    """The task's record as ``GET /v1/tasks/{id}`` shows it."""
    error = None
    if state.status == "failed":
        failure = state.failure or Failure(code="failed", message="")
        error = {"code": failure.code, "message": failure.message}
    return TaskView(
        task_id=state.task_id, session_id=state.session_id, tenant_id=state.tenant_id, user_id=state.user_id,
        status=state.status, question=state.question, answer=state.answer,
        citations=citations if citations is not None else citations_of(state), steps=state.steps,
        usage=state.usage, mode=state.mode, error=error, created_at=state.created_at, finished_at=state.finished_at,
        latency_ms=latency, stop_reason=state.stop_reason, trace=state.trace, confidence=state.confidence,
        cache=state.cache, memory=[m.model_dump() for m in state.memory], scope=state.scope,
        trace_id=tracing.trace_id_of(state.traceparent),
        pending_approvals=[{"call_id": c.call_id, "tool": c.name, "arguments": c.arguments, "reason": c.reason,
                            "arguments_digest": c.arguments_digest,
                            "expires_at": c.expires_at.isoformat() if c.expires_at else None}
                           for c in state.pending_approvals()],
    )


def on_cancel(state: TaskState, reason: str, now: datetime) -> Step:
    """A cancel arrived: cancel a running task; for an ended one announce its end again (a
    replica that died between saving the end and announcing it told nobody; the log seals once)."""
    if state.terminal:
        return Step(state, [Announce()], save=False)
    return cancel(state, reason, now)
