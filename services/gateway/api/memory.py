"""Memory routes: what Conduit remembers about the caller, and forgetting it on request.

- ``GET    /v1/memory``      -> 200 ``MemoryList`` (the caller's own items, newest first; an admin
  sees their own too: memory is personal, never the tenant's)
- ``DELETE /v1/memory/{id}`` -> 200 ``MemoryDeleted`` ``{"deleted": 1}``; 404 ``memory_not_found``
  for an id the caller does not have (another user's id answers the same)
- ``DELETE /v1/memory``      -> 200 ``MemoryDeleted`` with the number of items removed
- ``GET    /v1/me/export`` -> 200 everything kept about the caller (JSON): memory items, and their
  sessions with turns and rolling summaries
A deletion removes the records at once (recall joins vector hits with them, so nothing deleted
can be recalled), then asks the retriever to remove the vectors (``MemoryForgetRequested``).
Deleting a fact also removes what was derived from it (rule M9, ``conduit.records.forgetting``):
the episodes that repeat it, the cache entries built on it, its lines in the session summaries.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends, Path
from fastapi.responses import JSONResponse

from conduit.records import forgetting, sessions
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
    off = state.settings.memory.memory_off_tenants
    enabled = who.tenant_id not in off and "*" not in off
    return JSONResponse(MemoryList(items=items, enabled=enabled).model_dump(mode="json"))


@router.get("/me/export", responses=_ERRORS)
async def export_memory(state: GatewayState = Depends(get_state),
                        who: Principal = Depends(authenticate)) -> JSONResponse:
    """Everything Conduit keeps about the caller (rule M9): ``{"items": [MemoryItem], "sessions":
    [{session, context, turns}]}`` (their own sessions only)."""
    items = await records.list_items(state.redis, who.tenant_id, who.user_id, utcnow())
    out = []
    for meta in await sessions.list_sessions(state.redis, who.tenant_id, who.user_id):
        context = await sessions.load_context(state.redis, meta.session_id)
        out.append({"session": meta.model_dump(mode="json"), "context": context.model_dump(mode="json"),
                    "turns": await state.store.turns(meta.session_id, 1000)})
    return JSONResponse({"tenant_id": who.tenant_id, "user_id": who.user_id,
                         "items": [i.model_dump(mode="json") for i in items], "sessions": out})


@router.delete("/memory/{item_id}", response_model=MemoryDeleted, responses=_ERRORS)
async def delete_item(item_id: str = _ID, state: GatewayState = Depends(get_state),
                      who: Principal = Depends(authenticate)) -> JSONResponse:
    """Forget one item (its record now, its vector right after) and, for a fact, what was derived
    from it (rule M9)."""
    found = (await records.get_items(state.redis, who.tenant_id, who.user_id, [item_id], utcnow())).get(item_id)
    gone = await records.delete_items(state.redis, who.tenant_id, who.user_id, [item_id])
    if not gone:
        raise ApiError(404, "memory_not_found", f"no memory item {item_id!r} (unknown, expired or not yours)")
    facts = [found] if found is not None and found.type == "fact" else []
    derived = await forgetting.forget_derived(state.redis, who.tenant_id, who.user_id, facts, state.settings.gateway.task_events_ttl_s)
    await _forget(state, who, gone + derived.episode_ids)
    return JSONResponse(MemoryDeleted(deleted=len(gone) + len(derived.episode_ids)).model_dump())


@router.delete("/memory", response_model=MemoryDeleted, responses=_ERRORS)
async def delete_all(state: GatewayState = Depends(get_state),
                     who: Principal = Depends(authenticate)) -> JSONResponse:
    """Forget everything remembered about the caller, with what was derived from their facts (rule M9)."""
    items = await records.list_items(state.redis, who.tenant_id, who.user_id, utcnow())
    await forgetting.forget_derived(state.redis, who.tenant_id, who.user_id, [i for i in items if i.type == "fact"],
                                    state.settings.gateway.task_events_ttl_s)
    gone = await records.delete_items(state.redis, who.tenant_id, who.user_id, None)
    await _forget(state, who, None)
    return JSONResponse(MemoryDeleted(deleted=len(gone)).model_dump())
