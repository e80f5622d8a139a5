"""Memory routes: what Conduit remembers about the caller, and forgetting it on request.

- ``GET    /v1/memory``      -> 200 ``MemoryList`` (the caller's own items, newest first; an admin
  sees their own too: memory is personal, never the tenant's)
- ``DELETE /v1/memory/{id}`` -> 200 ``MemoryDeleted`` ``{"deleted": 1}``; 404 ``memory_not_found``
  for an id the caller does not have (another user's id answers the same)
- ``DELETE /v1/memory``      -> 200 ``MemoryDeleted`` with the number of items removed
A deletion removes the records at once (recall joins vector hits with them, so nothing deleted
can be recalled), then asks the retriever to remove the vectors (``MemoryForgetRequested``).
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends, Path
from fastapi.responses import JSONResponse

from conduit.records import memory as records
from contracts import topics
from contracts.api import ErrorBody
from contracts.envelope import utcnow
from contracts.memory import MemoryDeleted, MemoryForgetPayload, MemoryForgetRequested, MemoryList
from services.gateway.identity.auth import Principal, authenticate
from services.gateway.errors import ApiError
from services.gateway.state import GatewayState, get_state
from services.gateway.state import publish

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)])

_ERRORS: dict[int | str, dict[str, Any]] = {c: {"model": ErrorBody} for c in (401, 404, 422, 429, 503)}
_ID = Path(max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$", description="memory item id")


async def _forget(state: GatewayState, who: Principal, ids: list[str] | None) -> None:
    """Ask the retriever to drop the vectors (best effort: the records are already gone)."""
    request_id = uuid.uuid4().hex
    event = MemoryForgetRequested(task_id=request_id, session_id=request_id, tenant_id=who.tenant_id,
                                  user_id=who.user_id, payload=MemoryForgetPayload(ids=ids))
    try:
        await publish(state, topics.RETRIEVER_WRITES, event)  # rule K10
    except Exception:  # noqa: BLE001 - unreachable vectors cannot be recalled without their records
        pass


@router.get("/memory", response_model=MemoryList, responses=_ERRORS)
async def list_memory(state: GatewayState = Depends(get_state),
                      who: Principal = Depends(authenticate)) -> JSONResponse:
    """The caller's remembered items (facts and episodes) with their sources."""
    items = await records.list_items(state.redis, who.tenant_id, who.user_id, utcnow())
    off = state.settings.memory_off_tenants
    enabled = who.tenant_id not in off and "*" not in off
    return JSONResponse(MemoryList(items=items, enabled=enabled).model_dump(mode="json"))


@router.delete("/memory/{item_id}", response_model=MemoryDeleted, responses=_ERRORS)
async def delete_item(item_id: str = _ID, state: GatewayState = Depends(get_state),
                      who: Principal = Depends(authenticate)) -> JSONResponse:
    """Forget one item (its record now, its vector right after)."""
    gone = await records.delete_items(state.redis, who.tenant_id, who.user_id, [item_id])
    if not gone:
        raise ApiError(404, "memory_not_found", f"no memory item {item_id!r} (unknown, expired or not yours)")
    await _forget(state, who, gone)
    return JSONResponse(MemoryDeleted(deleted=len(gone)).model_dump())


@router.delete("/memory", response_model=MemoryDeleted, responses=_ERRORS)
async def delete_all(state: GatewayState = Depends(get_state),
                     who: Principal = Depends(authenticate)) -> JSONResponse:
    """Forget everything remembered about the caller."""
    gone = await records.delete_items(state.redis, who.tenant_id, who.user_id, None)
    await _forget(state, who, None)
    return JSONResponse(MemoryDeleted(deleted=len(gone)).model_dump())
