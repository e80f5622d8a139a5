"""Human approval and trace routes (rules G2 and A7: one decision per held call; rule G3: the trace;
docs/rules.md).

- ``POST /v1/tasks/{id}/approvals/{call_id}`` body ``ApprovalDecisionBody`` -> 202;
  validated against the pending record (404 ``approval_not_found``, 409
  ``approval_not_pending`` (decided already, also by a decision the orchestrator has not
  recorded yet: ``conduit.records.approvals.claim``) / ``approval_expired`` / ``digest_mismatch``, 422
  ``invalid_arguments`` for an edit that does not fit the tool's schema), then
  published as ``ApprovalDecided`` on ``conduit.control``.
- ``GET /v1/tasks/{id}/trace`` -> the task's timeline (model calls and tool calls).
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
import jsonschema
from pydantic import ValidationError

from conduit.records import approvals, controls
from contracts import topics
from contracts.api import ApprovalDecisionBody, ErrorBody
from contracts.events import ApprovalDecided, ApprovalDecisionPayload
from conduit.records import mcp as mcp_records
from contracts.tools import TOOL_SPECS, arguments_digest
from services.gateway.api import inputs, tasks
from services.gateway.identity.auth import Principal, authenticate
from services.gateway.openapi import body_doc
from services.gateway.errors import ApiError, validation_details
from services.gateway.state import GatewayState, get_state

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)])


_ERRORS = {c: {"model": ErrorBody} for c in (403, 404, 409, 422)}


async def _check_edit(state: GatewayState, tenant_id: str, tool: str, arguments: dict) -> None:
    """422 ``invalid_arguments`` unless ``arguments`` fit ``tool``: a built-in tool's model, or an
    MCP tool's JSON Schema (plus ``reason``) from the tenant's catalog (rule X1)."""
    if tool in TOOL_SPECS:
        try:
            TOOL_SPECS[tool].args_model.model_validate(arguments)
        except ValidationError as exc:
            raise ApiError(422, "invalid_arguments", f"arguments do not fit {tool}",
                           validation_details(exc.errors(include_url=False, include_input=False))) from None
        return
    catalog = await mcp_records.load_catalog(state.redis, tenant_id)
    spec = next((t for t in (catalog.tools if catalog else []) if t.name == tool), None)
    if spec is None:
        raise ApiError(422, "invalid_arguments", f"{tool} is no longer offered; reject the call instead")
    try:
        jsonschema.validate(arguments, spec.openai_schema()["function"]["parameters"])
    except jsonschema.ValidationError as exc:
        raise ApiError(422, "invalid_arguments", f"arguments do not fit {tool}: {exc.message}"[:500]) from None


@router.post("/tasks/{task_id}/approvals/{call_id}", status_code=202, openapi_extra=body_doc(ApprovalDecisionBody),
             responses=_ERRORS)
async def decide(task_id: str, call_id: str, request: Request, state: GatewayState = Depends(get_state),
                 who: Principal = Depends(authenticate)) -> JSONResponse:
    """Approve, reject or edit a pending tool call (only the task's owner or a tenant admin; once
    escalated, rule A26, only a tenant admin: 403 ``approval_escalated``)."""
    await tasks.get_task(state, who, task_id)
    try:
        body = ApprovalDecisionBody.model_validate_json(await request.body())
    except ValidationError as exc:
        raise ApiError(422, "invalid_request", "body must be {decision, arguments?, arguments_digest?, comment?}",
                       validation_details(exc.errors(include_url=False, include_input=False))) from None
    decided = await decide_call(state, who, task_id, call_id, body, inputs.traceparent(request))
    return JSONResponse(decided, status_code=202)


async def decide_call(state: GatewayState, who: Principal, task_id: str, call_id: str, body: ApprovalDecisionBody,
                      traceparent: str | None) -> dict[str, str]:
    """Record ``who``'s decision on a pending call and publish ``ApprovalDecided`` (rules G2 and A7); the route's
    and A2A's path (``services.gateway.agents.a2a_handler``). Returns ``{task_id, call_id, decision,
    arguments_digest}``.

    Raises:
        ApiError: 404 ``task_not_found`` / ``approval_not_found``; 403 ``approval_escalated`` (rule A26); 409
            ``approval_not_pending`` / ``approval_expired`` / ``digest_mismatch``; 422 ``invalid_arguments``; 503 from
            the publish.
    """
    view = await tasks.get_task(state, who, task_id)
    record = await approvals.load(state.redis, task_id, call_id)
    if record is None:
        raise ApiError(404, "approval_not_found", f"no pending approval {call_id!r} for task {task_id!r}")
    if record.status != "pending":
        raise ApiError(409, "approval_not_pending", f"approval {call_id!r} is already {record.status}", {"status": record.status})
    if record.expires_at <= datetime.now(UTC):
        raise ApiError(409, "approval_expired", f"approval {call_id!r} expired at {record.expires_at.isoformat()}")
    if record.escalated and not who.is_admin:  # rule A26: escalated past its owner
        raise ApiError(403, "approval_escalated", f"approval {call_id!r} was not decided in time and now waits for "
                       "a tenant admin", {"expires_at": record.expires_at.isoformat()})
    arguments, new_digest = None, None
    if body.decision == "approve" and body.arguments_digest and body.arguments_digest != record.arguments_digest:
        raise ApiError(409, "digest_mismatch", "the arguments changed since you saw them; review them again",
                       {"arguments": record.arguments, "arguments_digest": record.arguments_digest})
    if body.decision == "edit":
        if body.arguments is None:
            raise ApiError(422, "invalid_arguments", "an edit needs the new arguments")
        await _check_edit(state, view.tenant_id, record.tool, body.arguments)
        arguments, new_digest = body.arguments, arguments_digest(body.arguments)
    event = ApprovalDecided(
        task_id=task_id, session_id=view.session_id, tenant_id=view.tenant_id, user_id=view.user_id,
        traceparent=traceparent,
        payload=ApprovalDecisionPayload(call_id=call_id, decision=body.decision, arguments=arguments,
                                        arguments_digest=new_digest or record.arguments_digest, comment=body.comment),
    )
    earlier = await approvals.claim(state.redis, record, body.decision)  # one decision per call
    if earlier is not None:
        raise ApiError(409, "approval_not_pending", f"approval {call_id!r} is already {earlier}", {"status": earlier})
    await controls.record(state.redis, event, state.settings.gateway.task_events_ttl_s)  # its re-send (rule G5)
    try:
        await tasks.publish(state, topics.CONTROL, event)
    except BaseException:
        await approvals.release(state.redis, task_id, call_id)
        await controls.forget(state.redis, event.event_id)
        raise
    return {"task_id": task_id, "call_id": call_id, "decision": body.decision,
            "arguments_digest": event.payload.arguments_digest}


@router.get("/tasks/{task_id}/trace", responses={404: {"model": ErrorBody}})
async def trace(task_id: str, state: GatewayState = Depends(get_state),
                who: Principal = Depends(authenticate)) -> JSONResponse:
    """The task's timeline: per model call time to first token, total time, retries, tokens;
    per tool call queue time, run time and outcome; and ``trace_id``, the W3C trace id (32 hex) to
    look the task up in a tracing UI (rule O6; null for a task recorded before it was kept)."""
    view = await tasks.get_task(state, who, task_id)
    return JSONResponse({"task_id": task_id, "status": view.status, "stop_reason": view.stop_reason,
                         "trace_id": view.trace_id, "trace": view.trace})
