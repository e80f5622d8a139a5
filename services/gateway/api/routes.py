"""HTTP routes of the task API (``/v1``).

- ``POST /v1/tasks``               body ``TaskCreate`` -> 202 ``TaskCreated`` (+ ``Location``)
- ``POST /v1/ask``                 body ``TaskCreate`` -> 200 ``text/event-stream`` of the new task
  (both take an optional ``Idempotency-Key`` header: a retry with the same key and body
  gets the same task, marked ``Idempotent-Replayed: true``; another body -> 409; and
  ``Cache-Control: no-cache``: the semantic cache is not read for this question)
- ``GET  /v1/tasks/{id}``          -> 200 ``TaskView``
- ``GET  /v1/tasks/{id}/events``   -> 200 ``text/event-stream``; resume with ``Last-Event-ID``
  header or ``?last_event_id=`` (header wins); 204 when the task ended at or before it
- ``POST /v1/tasks/{id}/cancel``   -> 202 ``{"task_id", "status": "cancel_requested"}``
Every route needs a bearer credential (``services.gateway.identity.auth``); a task another user owns
answers 404 like a missing one. Errors are ``ErrorBody`` (see ``services.gateway.errors``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from contracts.api import ErrorBody, TaskCreate, TaskCreated, TaskView
from services.gateway.api import inputs, tasks
from services.gateway.identity.auth import Principal, authenticate
from services.gateway.openapi import body_doc
from services.gateway.streaming.sse import sse_response
from services.gateway.state import GatewayState, get_state

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)])

_BODY_DOC = body_doc(TaskCreate)
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (401, 403, 404, 409, 413, 422, 429, 500, 503)
}
_SSE_DOC = {200: {"content": {"text/event-stream": {}}, "description": "SSE stream of task events"}}


async def _create(request: Request, state: GatewayState, who: Principal) -> tuple[TaskCreated, bool]:
    """The request's question created as a task (``tasks.create_task``): ``(created, replayed)``."""
    key = inputs.idempotency_key(request)
    body = await inputs.read_task_create(request, state.settings.gateway)
    return await tasks.create_task(state, who, body, inputs.traceparent(request), key, use_cache=inputs.use_cache(request))


@router.post("/tasks", status_code=202, response_model=TaskCreated, openapi_extra=_BODY_DOC, responses=_ERRORS)
async def post_task(request: Request, state: GatewayState = Depends(get_state),
                    who: Principal = Depends(authenticate)) -> JSONResponse:
    """Queue a question; stream its events from ``events_url``."""
    created, replayed = await _create(request, state, who)
    headers = {"Location": f"/v1/tasks/{created.task_id}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return JSONResponse(created.model_dump(mode="json"), status_code=202, headers=headers)


@router.post("/ask", openapi_extra=_BODY_DOC, responses={**_ERRORS, **_SSE_DOC}, response_class=EventSourceResponse)
async def ask(request: Request, state: GatewayState = Depends(get_state),
              who: Principal = Depends(authenticate)) -> EventSourceResponse:
    """Queue a question and stream its events (task.accepted .. terminal) in this response."""
    created, replayed = await _create(request, state, who)
    headers = {"X-Task-Id": created.task_id, "Content-Location": created.events_url}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return sse_response(state, created.task_id, after=0, headers=headers)


@router.get("/tasks/{task_id}", response_model=TaskView, responses=_ERRORS)
async def get_task(task_id: str, state: GatewayState = Depends(get_state),
                   who: Principal = Depends(authenticate)) -> JSONResponse:
    """The task's record: status, answer, citations, steps, usage."""
    view = await tasks.get_task(state, who, task_id)
    return JSONResponse(view.model_dump(mode="json"))


@router.get("/tasks/{task_id}/events", responses={**_ERRORS, **_SSE_DOC}, response_class=EventSourceResponse)
async def task_events(task_id: str, request: Request, state: GatewayState = Depends(get_state),
                      who: Principal = Depends(authenticate)) -> EventSourceResponse:
    """Stream the task's events after ``Last-Event-ID`` (0 = from the start); 204 No Content when the
    task has ended and the client already has its terminal event (an EventSource stops reconnecting)."""
    after = inputs.last_event_id(request)
    await tasks.require_task(state, who, task_id)
    if after and await state.events.seen_to_the_end(task_id, after):
        return Response(status_code=204)  # type: ignore[return-value]
    return sse_response(state, task_id, after)


@router.post("/tasks/{task_id}/cancel", status_code=202, responses=_ERRORS)
async def cancel(task_id: str, request: Request, state: GatewayState = Depends(get_state),
                 who: Principal = Depends(authenticate)) -> JSONResponse:
    """Request cancellation; the stream ends with ``task.cancelled`` once the orchestrator stops it."""
    await tasks.cancel_task(state, who, task_id, inputs.traceparent(request))
    return JSONResponse({"task_id": task_id, "status": "cancel_requested"}, status_code=202)
