"""A tenant's MCP servers (docs/mcp.md): registered by its admins, listed with their status.

- ``POST   /v1/mcp-servers``        body ``McpServerConfig`` -> 201 (admin only; replaces one of the
  same name). A stdio ``command`` is refused (403 ``mcp_commands_disabled``) unless
  ``CONDUIT_MCP_API_COMMANDS`` is on: it would run on the mcp service's host. A name the
  settings already give is refused (409 ``mcp_server_configured``).
- ``GET    /v1/mcp-servers``        -> 200 ``{"servers": [...], "agents": [...]}``: every server of the caller's
  tenant (settings and registered; env and header values hidden) with its status as the mcp service last
  saw it (``ok``, ``error``, ``tools``), or ``status: null`` before it looked; and likewise its remote A2A agents
  (``CONDUIT_A2A_AGENTS``, rule T10; header values hidden).
- ``DELETE /v1/mcp-servers/{name}`` -> 204 (admin only; 404 ``mcp_server_not_found``).
The mcp service picks a change up within ``CONDUIT_MCP_REFRESH_S`` seconds (rule X2).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from conduit.records import mcp as records
from contracts.api import ErrorBody
from contracts import a2a
from contracts.mcp import SERVER_NAME_PATTERN, McpCatalog, McpServerConfig
from services.gateway.identity.auth import Principal, authenticate, require_admin
from services.gateway.documents.routes import _read_body
from services.gateway.errors import ApiError
from services.gateway.openapi import body_doc
from services.gateway.state import GatewayState, get_state

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)])
_ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (401, 403, 404, 409, 413, 422, 429)}
BODY_BYTES = 64 * 1024
"""Largest accepted ``POST /v1/mcp-servers`` body (bytes)."""


@router.post("/mcp-servers", status_code=201, responses=_ERRORS, openapi_extra=body_doc(McpServerConfig))
async def register(request: Request, state: GatewayState = Depends(get_state),
                   who: Principal = Depends(authenticate)) -> JSONResponse:
    """Register (or replace) an MCP server of the caller's tenant (admin only)."""
    require_admin(who)
    config = await _read_body(request, McpServerConfig, BODY_BYTES)
    if config.command and not state.settings.mcp.mcp_api_commands:
        raise ApiError(403, "mcp_commands_disabled", "stdio commands cannot be registered over the API here; "
                       "give a streamable HTTP url, or configure the command in CONDUIT_MCP_SERVERS")
    if any(c.name == config.name for c in records.from_settings(state.settings.mcp, who.tenant_id)):
        raise ApiError(409, "mcp_server_configured", f"{config.name!r} is configured in the settings", {"name": config.name})
    await records.register(state.redis, who.tenant_id, config)
    return JSONResponse({"server": config.public(), "status": None}, status_code=201,
                        headers={"Location": f"/v1/mcp-servers/{config.name}"})


@router.get("/mcp-servers", responses=_ERRORS)
async def list_servers(state: GatewayState = Depends(get_state), who: Principal = Depends(authenticate)) -> JSONResponse:
    """The tenant's MCP servers with their last status."""
    catalog = await records.load_catalog(state.redis, who.tenant_id)
    seen = {s.name: s for s in (catalog.servers if catalog else [])}
    out = []
    for config, source in await records.servers(state.settings.mcp, state.redis, who.tenant_id):
        status = seen.get(config.name)
        current = status is not None and status.digest == config.digest()
        out.append({"server": config.public(), "source": source,
                    "status": status.model_dump(mode="json") if current else None})
    return JSONResponse({"servers": out, "agents": _agents(state, who.tenant_id, catalog)})


def _agents(state: GatewayState, tenant_id: str, catalog: McpCatalog | None) -> list[dict[str, Any]]:
    """The tenant's remote A2A agents (rule T10), header values hidden, each with its last status (or None)."""
    try:
        configs = a2a.from_settings(state.settings.mcp.a2a_agents, tenant_id)
    except ValidationError:
        return []  # the mcp service logs the malformed setting
    seen = {s.name: s for s in (catalog.agents if catalog else [])}
    out = []
    for config in configs:
        status = seen.get(config.name)
        current = status is not None and status.digest == config.digest()
        shown = {**config.model_dump(mode="json"), "headers": {k: "***" for k in config.headers}}
        out.append({"agent": shown, "source": "settings", "status": status.model_dump(mode="json") if current else None})
    return out


@router.delete("/mcp-servers/{name}", status_code=204, responses=_ERRORS)
async def delete_server(name: str = Path(pattern=SERVER_NAME_PATTERN), state: GatewayState = Depends(get_state),
                        who: Principal = Depends(authenticate)) -> Response:
    """Remove a registered MCP server (admin only)."""
    require_admin(who)
    if not await records.unregister(state.redis, who.tenant_id, name):
        raise ApiError(404, "mcp_server_not_found", f"no registered MCP server {name!r}", {"name": name})
    return Response(status_code=204)
