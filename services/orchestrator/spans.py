"""The orchestrator's spans (rules O6 and O7, docs/operations.md "Tracing").

A task runs over many bus messages and model steps, on any replica. Its own span
(``invoke_agent conduit``) is reserved when the question arrives (``task_context``: a span id in
the question's trace, kept in the checkpoint as ``TaskState.traceparent``; its parent, the
question's consumer span, as ``TaskState.trace_parent``) and recorded once, when its terminal
event is written (``record_task``), from the task's start to its end with its outcome. Every
model step's span (``step_span``) is a child of it, linked to the message that woke the step
(a tool result's consumer span, a sweeper's wake-up has none); inside a step the model call
(``model_span``, the OpenTelemetry GenAI conventions) and the tool requests' PRODUCER spans
are children of the step. With tracing off (rule O5) every function here costs a flag check (the
span functions return a ``nullcontext``: a step's logs keep the context of the message that woke it).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from datetime import datetime

from conduit.runtime import tracing
from contracts.events import QuestionAsked
from services.orchestrator.agent.state import TaskState
from services.orchestrator.agent.stepplan import StepPlan
from conduit.runtime.llm.model import ModelError, ModelResponse

PROVIDER = "openai"
"""``gen_ai.provider.name`` of every model call: Conduit speaks the OpenAI-compatible API."""


def task_context(event: QuestionAsked) -> tuple[QuestionAsked, str | None]:
    """Rule O6: ``event`` with its ``traceparent`` replaced by the task span's reserved context, and
    that span's parent (the active consumer span); ``(event, None)`` unchanged when tracing is off."""
    parent = tracing.current_traceparent(event.traceparent)
    own = tracing.reserve(parent)
    if own is None:
        return event, None
    return event.model_copy(update={"traceparent": own}), parent


def record_task(state: TaskState, now: datetime) -> None:
    """Rule O6: record the task's span (reserved by ``task_context``) from its start to its terminal
    outcome: status, mode, stop reason, failure code (``error.type`` when it failed), steps, tool
    calls and tokens. Nothing for a task started with tracing off."""
    if state.trace_parent is None or state.traceparent is None:
        return
    failure = state.failure.code if state.failure is not None else None
    tracing.record_span(
        "invoke_agent conduit", state.traceparent, state.trace_parent, state.created_at, state.finished_at or now,
        error=failure if state.status == "failed" else None,
        **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "conduit",
           "gen_ai.conversation.id": state.session_id, "conduit.task_id": state.task_id,
           "conduit.tenant_id": state.tenant_id, "conduit.task.status": state.status, "conduit.task.mode": state.mode,
           "conduit.task.stop_reason": state.stop_reason, "conduit.task.error_code": failure,
           "conduit.task.steps": state.step, "conduit.task.tool_calls": state.tool_calls_used,
           "gen_ai.usage.input_tokens": state.usage.prompt_tokens,
           "gen_ai.usage.output_tokens": state.usage.completion_tokens})


def step_span(state: TaskState, resumed: bool = False) -> AbstractContextManager[str]:
    """Rule O6: a model step's span, a child of the task's span, linked to the active span (the
    message that woke the step)."""
    if not tracing.enabled():
        return nullcontext(state.traceparent or "")
    woke = tracing.current_traceparent()
    return tracing.span("task step", state.traceparent, task_id=state.task_id, links=(woke,),
                        **{"conduit.step": state.step, "conduit.step.resumed": resumed or None})


def model_span(state: TaskState, plan: StepPlan, default_model: str) -> AbstractContextManager[str]:
    """Rule O7: a model call's CLIENT span, ``chat <model>``, with the GenAI request attributes."""
    if not tracing.enabled():
        return nullcontext(state.traceparent or "")
    model = plan.model or default_model
    return tracing.span(f"chat {model}", tracing.current_traceparent(state.traceparent), kind=tracing.SpanKind.CLIENT,
                        task_id=state.task_id,
                        **{"gen_ai.operation.name": "chat", "gen_ai.provider.name": PROVIDER,
                           "gen_ai.request.model": model, "gen_ai.request.max_tokens": plan.max_tokens,
                           "gen_ai.conversation.id": state.session_id, "conduit.model.endpoint": plan.endpoint or "default",
                           "conduit.model.tools_offered": len(plan.tools or ()), "conduit.model.final": plan.final})


def model_outcome(reply: ModelResponse | ModelError, model: str) -> None:
    """Rule O7: the active model span's GenAI response attributes (model, tokens, finish reason, time
    to first chunk in seconds), or its failure (``error.type`` = the ``ModelError``'s code)."""
    if not tracing.enabled():
        return
    if isinstance(reply, ModelError):
        tracing.annotate(**{"conduit.model.streamed": reply.streamed, "conduit.model.error_kind": reply.kind})
        tracing.fail(reply.code, str(reply)[:300])
        return
    tracing.annotate(**{
        "gen_ai.response.model": reply.response_model or model,
        "gen_ai.usage.input_tokens": reply.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": reply.usage.completion_tokens,
        "gen_ai.response.finish_reasons": (reply.finish_reason,) if reply.finish_reason else None,
        "gen_ai.response.time_to_first_chunk": reply.first_token_s,
        "conduit.model.retries": reply.retries, "conduit.model.tool_calls": len(reply.tool_calls)})
