"""``GET /v1/artifacts/{id}``: files produced by code_exec, served only to the task's owner.

Query ``task_id`` (required) names the task that produced the artifact; the caller must be
able to see that task (its owner or a tenant admin, ``services.gateway.identity.auth.can_see``) and the
artifact must be the task's. Storage: ``conduit.records.artifacts``.
Answers:

- 200 with the bytes, ``Content-Type`` from the allowlist (``conduit.records.artifacts.MEDIA_TYPES``),
  ``Content-Disposition`` inline for images, attachment otherwise, ``X-Content-Type-Options:
  nosniff``, a ``Content-Security-Policy`` that runs nothing, ``Cache-Control: private``;
- 404 ``artifact_not_found`` for an unknown or expired id AND for a caller who is not the owner
  (the same answer, so ids cannot be probed); 503 ``store_unavailable`` when Redis fails.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from conduit.records.artifacts import INLINE_TYPES, ArtifactStore
from contracts.api import ErrorBody
from services.gateway.identity.auth import Principal, authenticate
from services.gateway.errors import ApiError
from services.gateway.state import GatewayState, get_state

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)])


@router.get("/artifacts/{artifact_id}", responses={c: {"model": ErrorBody} for c in (401, 404, 429, 503)},
            response_class=Response)
async def get_artifact(artifact_id: str, task_id: str | None = Query(default=None, max_length=128),
                       state: GatewayState = Depends(get_state),
                       who: Principal = Depends(authenticate)) -> Response:
    """The artifact's bytes, for the owner of the task that produced it (see module doc)."""
    found = await ArtifactStore(state.redis, state.settings.sandbox.sandbox_artifact_ttl_s).load(artifact_id)
    if found is None or not found[0].readable_by(task_id, who.tenant_id, who.user_id, who.is_admin):
        raise ApiError(404, "artifact_not_found", "no such artifact for this task and user (unknown, expired or not yours)")
    record, data = found
    disposition = "inline" if record.media_type in INLINE_TYPES else "attachment"
    filename = quote(record.name.rsplit("/", 1)[-1], safe="")
    return Response(content=data, media_type=record.media_type, headers={
        "Content-Disposition": f"{disposition}; filename*=UTF-8''{filename}",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox",
        "Cache-Control": "private, max-age=300",
    })
