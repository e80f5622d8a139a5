"""Session routes: a caller's conversations (storage and ownership: ``conduit.records.sessions``).

- ``GET    /v1/sessions``      -> 200 ``{"sessions": [{session_id, title, turns, created_at, updated_at,
  user_id}]}`` newest first: the caller's own; a tenant admin's list is the whole tenant's.
- ``GET    /v1/sessions/{id}`` -> 200 ``{session_id, title, user_id, ..., "turns": [{task_id,
  question, status, answer, citations, created_at}], "context": SessionContext}`` oldest first;
  ``context`` is the session's rolling summary and exact values (``contracts.api.SessionContext``).
- ``PATCH  /v1/sessions/{id}`` ``SessionRename`` ``{"title"}`` -> 200 the session's summary with
  the new title (422 ``invalid_request`` for a bad body).
- ``DELETE /v1/sessions/{id}`` -> 200 ``{"session_id", "deleted_tasks": n}``: its history, its
  tasks' records and event logs are gone; a later task naming the id starts an empty session.
Another user's or tenant's session answers 404 ``session_not_found`` like a missing one
(a tenant admin may read, rename and delete the tenant's sessions).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from conduit.records import sessions
from contracts.api import ErrorBody, SessionRename
from services.gateway.identity.auth import Principal, authenticate, can_see
from services.gateway.errors import ApiError, validation_details
from services.gateway.openapi import body_doc
from services.gateway.state import GatewayState, get_state

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)])

_ERRORS: dict[int | str, dict[str, Any]] = {c: {"model": ErrorBody} for c in (401, 404, 413, 422, 429, 503)}
RENAME_BODY_BYTES = 4096
"""Largest ``PATCH /v1/sessions/{id}`` body (bytes)."""
_ID = Path(max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$", description="session id")


def _summary(meta: sessions.SessionMeta) -> dict[str, Any]:
    return meta.model_dump(exclude={"tenant_id"})


async def _own(state: GatewayState, who: Principal, session_id: str) -> sessions.SessionMeta:
    meta = await sessions.get(state.redis, session_id)
    if meta is None or not can_see(who, meta.tenant_id, meta.user_id):
        raise ApiError(404, "session_not_found", f"no session {session_id!r} (unknown, expired or not yours)")
    return meta


@router.get("/sessions", responses=_ERRORS)
async def list_sessions(state: GatewayState = Depends(get_state),
                        who: Principal = Depends(authenticate)) -> JSONResponse:
    """The caller's sessions (an admin: the tenant's), newest first."""
    found = await sessions.list_sessions(state.redis, who.tenant_id, None if who.is_admin else who.user_id)
    return JSONResponse({"sessions": [_summary(m) for m in found]})


@router.get("/sessions/{session_id}", responses=_ERRORS)
async def get_session(session_id: str = _ID, state: GatewayState = Depends(get_state),
                      who: Principal = Depends(authenticate)) -> JSONResponse:
    """One session with its turns (task id, question, status, answer, citations)."""
    meta = await _own(state, who, session_id)
    turns = []
    for task_id in await sessions.task_ids(state.redis, session_id):
        view = await state.store.get(task_id)
        if view is not None:
            turns.append({"task_id": task_id, "question": view.question, "status": view.status,
                          "answer": view.answer, "citations": [c.model_dump(mode="json") for c in view.citations],
                          "created_at": view.created_at.isoformat()})
    context = await sessions.load_context(state.redis, session_id)  # rolling summary, exact values (rules M6, M7)
    return JSONResponse({**_summary(meta), "turns": turns, "context": context.model_dump(mode="json")})


@router.patch("/sessions/{session_id}", responses=_ERRORS, openapi_extra=body_doc(SessionRename))
async def rename_session(request: Request, session_id: str = _ID, state: GatewayState = Depends(get_state),
                         who: Principal = Depends(authenticate)) -> JSONResponse:
    """Rename the session (body ``SessionRename``); answers its summary with the new title."""
    meta = await _own(state, who, session_id)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > RENAME_BODY_BYTES:
        raise ApiError(413, "body_too_large", f"the request body is larger than {RENAME_BODY_BYTES} bytes",
                       {"max_bytes": RENAME_BODY_BYTES})
    try:
        body = SessionRename.model_validate_json(await request.body())
    except ValidationError as exc:
        raise ApiError(422, "invalid_request", "body must be {title}",
                       validation_details(exc.errors(include_url=False, include_input=False))) from None
    await sessions.rename(state.redis, session_id, body.title)
    return JSONResponse(_summary(meta.model_copy(update={"title": body.title})))


@router.delete("/sessions/{session_id}", responses=_ERRORS)
async def delete_session(session_id: str = _ID, state: GatewayState = Depends(get_state),
                         who: Principal = Depends(authenticate)) -> JSONResponse:
    """Delete the session, its history and its tasks' records and logs."""
    meta = await _own(state, who, session_id)
    deleted = await sessions.delete(state.redis, meta)
    return JSONResponse({"session_id": session_id, "deleted_tasks": len(deleted)})
