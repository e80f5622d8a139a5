"""``POST /v1/agui``: one AG-UI run per request, a Conduit task's events as ``ag-ui-protocol`` events (docs/agui.md).

Body: AG-UI's ``RunAgentInput`` (``threadId``, ``runId``, ``messages``, ``resume``, ...). Answer:
``text/event-stream``, one ``data: <AG-UI event JSON>`` per event (``agui_events.RunTranslator``), the last event
of each log event with ``id: <seq>`` (the task log's seq, as on ``GET /v1/tasks/{id}/events``). Three cases:

- a new ``runId``: the last ``user`` message is asked as a new task (``services.gateway.api.tasks.create_task``,
  the ``POST /v1/tasks`` path) in the session ``threadId``; the run id names that task from now on;
- a ``runId`` seen before (the caller's tenant): the same run again, resumed after ``Last-Event-ID`` (header or
  ``?last_event_id=``; none: from the start), opened with ``RUN_STARTED`` and the state as of that event;
- ``resume`` entries answering approval interrupts (ids ``<task_id>:<call_id>``): each is decided like
  ``POST /v1/tasks/{id}/approvals/{call_id}`` (``approvals.decide_call``; ``resolved`` with ``payload.decision``,
  default ``approve``; ``cancelled``: ``reject``), and the run goes on with the task after the interrupt.

Every stream ends with ``RUN_FINISHED`` (success, cancelled, or interrupt while an approval waits) or
``RUN_ERROR`` (the task failed; or the stream was cut: ``code`` ``stream_interrupted``, resume with the run id).
Authenticated and scoped like every ``/v1`` route; errors before the stream are ``ErrorBody`` s: 422
``invalid_request`` (not a ``RunAgentInput``, no user message, a bad interrupt id), 404 ``task_not_found`` /
``session_not_found``, 409 from an approval decision, 413 ``question_too_large``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ag_ui.core import BaseEvent, RunAgentInput, RunErrorEvent, RunFinishedEvent
from ag_ui.encoder import EventEncoder
from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from conduit.records import keys
from contracts.api import ApprovalDecisionBody, ErrorBody, TaskCreate
from services.gateway.agents.agui_events import RunTranslator
from services.gateway.api import approvals, inputs, tasks
from services.gateway.errors import ApiError, validation_details
from services.gateway.identity.auth import Principal, authenticate
from services.gateway.state import GatewayState, get_state
from services.gateway.streaming.sse import HEADERS, follow, logged

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)])

_ENCODER = EventEncoder()
_ERRORS: dict[int | str, dict[str, Any]] = {c: {"model": ErrorBody} for c in (401, 404, 409, 413, 422, 429, 503)}
_DOC = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["threadId", "runId", "messages"], "description": "AG-UI RunAgentInput",
    "properties": {"threadId": {"type": "string"}, "runId": {"type": "string"}, "state": {},
                   "messages": {"type": "array", "items": {"type": "object"}}, "tools": {"type": "array"},
                   "context": {"type": "array"}, "forwardedProps": {}, "resume": {"type": "array"}}}}}}}
_OK = {200: {"content": {"text/event-stream": {}}, "description": "AG-UI events, RUN_STARTED .. RUN_FINISHED | RUN_ERROR"}}


def encode(events: list[BaseEvent], seq: int | None) -> bytes:
    """SSE bytes of ``events``; the last one carries ``id: seq`` (the resume point once it arrived)."""
    parts = [_ENCODER.encode(e) for e in events]
    if parts and seq is not None:
        parts[-1] = f"id: {seq}\n" + parts[-1]
    return "".join(parts).encode("utf-8")


async def _read(request: Request, state: GatewayState) -> RunAgentInput:
    raw = await inputs.read_conversation(request, state.settings.gateway)
    try:
        return RunAgentInput.model_validate_json(raw)
    except ValidationError as exc:
        raise ApiError(422, "invalid_request", "the body is not an AG-UI RunAgentInput",
                       validation_details(exc.errors(include_url=False, include_input=False))) from None


def _question(run: RunAgentInput) -> str:
    """The last user message's text; raises ApiError 422 ``invalid_request`` without one."""
    for message in reversed(run.messages):
        if message.role == "user":
            content = message.content
            if isinstance(content, str):
                return content
            return "\n".join(getattr(p, "text", "") for p in content if getattr(p, "type", "") == "text")
    raise ApiError(422, "invalid_request", "messages must contain a user message (the question)")


async def _resume(state: GatewayState, who: Principal, run: RunAgentInput, traceparent: str | None) -> tuple[str, str]:
    """Decide the approvals ``run.resume`` answers; ``(task_id, first call_id)``. Raises ApiError (see module doc)."""
    found: set[str] = set()
    first = ""
    for entry in run.resume or []:
        task_id, _, call_id = entry.interrupt_id.partition(":")
        if not task_id or not call_id:
            raise ApiError(422, "invalid_request", f"interrupt id {entry.interrupt_id!r} is not <task_id>:<call_id>")
        payload = entry.payload if isinstance(entry.payload, dict) else {}
        decision = payload.get("decision", "approve") if entry.status == "resolved" else "reject"
        try:
            body = ApprovalDecisionBody.model_validate({**payload, "decision": decision})
        except ValidationError as exc:
            raise ApiError(422, "invalid_request", "a resume payload must be {decision, arguments?, ...}",
                           validation_details(exc.errors(include_url=False, include_input=False))) from None
        await approvals.decide_call(state, who, task_id, call_id, body, traceparent)
        found.add(task_id)
        first = first or call_id
    if len(found) != 1:
        raise ApiError(422, "invalid_request", "resume entries must answer the interrupts of one task")
    return found.pop(), first


async def _replay(state: GatewayState, tr: RunTranslator, upto: int | None, call: str | None) -> None:
    """Apply the log silently up to seq ``upto``, or through the approval of ``call`` (None, None: nothing)."""
    if upto is None and call is None:
        return
    async for ev in logged(state, tr.task_id, tr.seq, upto):
        tr.apply(ev)
        if call is not None and call in tr.interrupts:
            return


async def _stream(state: GatewayState, tr: RunTranslator) -> AsyncIterator[bytes]:
    """The run's SSE body from the translator's ``seq`` on (module doc)."""
    yield encode(tr.opening(tr.seq), None)
    if tr.ended:  # the client already had the end: say it again, nothing more
        end: BaseEvent = (RunErrorEvent(code="task_failed", message="the task failed") if tr.state["status"] == "failed"
                          else RunFinishedEvent(thread_id=tr.thread_id, run_id=tr.run_id, result=tr.state))
        yield encode([end], None)
        return
    idle, loop_s, heartbeat_s = 0.0, state.settings.gateway.gateway_sse_poll_ms / 1000, state.settings.gateway.sse_heartbeat_s
    async for batch in follow(state, tr.task_id, tr.seq):
        if not batch:
            idle += loop_s
            if batch is not None and heartbeat_s > 0 and idle >= heartbeat_s:
                idle = 0.0
                yield b": ping\n\n"
            if batch is None:
                break
            continue
        idle, out = 0.0, []
        for ev in batch:
            events = tr.apply(ev)
            out.append(encode(events, ev.seq if events else None))
            if any(isinstance(e, (RunFinishedEvent, RunErrorEvent)) for e in events):
                yield b"".join(out)
                return
        yield b"".join(out)
    yield encode([RunErrorEvent(code="stream_interrupted", message="the stream was cut before the run ended; "
                                "post the same runId with Last-Event-ID to go on")], None)


async def _ask(state: GatewayState, who: Principal, run: RunAgentInput, request: Request,
               traceparent: str | None) -> str:
    """Create the task of a new run (its last user message, in the session ``threadId``); its id. Raises ApiError."""
    question = _question(run)
    inputs.check_question(question, state.settings.gateway)
    try:
        body = TaskCreate(question=question, session_id=run.thread_id)
    except ValidationError as exc:
        raise ApiError(422, "invalid_request", "threadId must be a session id (1-128 of A-Z a-z 0-9 _ . : -)",
                       validation_details(exc.errors(include_url=False, include_input=False))) from None
    # the run id is the idempotency key: two posts of one new run (a retry, a race) get one task
    created, _ = await tasks.create_task(state, who, body, traceparent,
                                         inputs.idempotency_key(request) or f"agui:{run.run_id}")
    return created.task_id


@router.post("/agui", responses={**_ERRORS, **_OK}, openapi_extra=_DOC)
async def agui(request: Request, state: GatewayState = Depends(get_state),
               who: Principal = Depends(authenticate)) -> StreamingResponse:
    """Run Conduit as an AG-UI agent: a new run asks the last user message, a known run id resumes (module doc)."""
    run = await _read(request, state)
    after = inputs.last_event_id(request)
    traceparent = inputs.traceparent(request)
    run_key = keys.agui_run(who.tenant_id, run.run_id)
    known = await state.redis.get(run_key)  # "<task_id> <seq the run starts after>"
    call, start = None, 0
    if known is not None:
        task_id, _, begins = (known.decode() if isinstance(known, bytes) else known).partition(" ")
        start = int(begins or 0)
        await tasks.require_task(state, who, task_id)
    elif run.resume:
        task_id, call = await _resume(state, who, run, traceparent)
    else:
        task_id = await _ask(state, who, run, request, traceparent)
    tr = RunTranslator(run.thread_id, run.run_id, task_id)
    await _replay(state, tr, max(after, start) or None, call)
    if known is None:  # a resuming run starts after its interrupt, when it is posted again too
        await state.redis.set(run_key, f"{task_id} {tr.seq if call else 0}", ex=state.settings.gateway.task_events_ttl_s, nx=True)
    headers = {**HEADERS, "X-Task-Id": task_id}
    return StreamingResponse(_stream(state, tr), media_type="text/event-stream", headers=headers)
