"""``/mcp`` on the gateway: Conduit as an MCP server over streamable HTTP (``services.gateway.mcp.out``).

Authenticated like every ``/v1`` route: the request's bearer credential is checked (401
``unauthenticated``, 429 rate limits) before the MCP SDK sees it. The SDK runs stateless (a fresh
transport per request: any gateway replica can answer any request, nothing to share). Each tool
call is run for the caller: its ``search``/``documents``/task requests go to this gateway's own
``/v1`` routes in process (``httpx.ASGITransport``) with the caller's ``Authorization`` header, so
they are scoped and answered exactly as over HTTP; ``ask`` reads the task's event log directly
(in-process ASGI responses are buffered, so the SSE route would deliver its progress only at the end).
DNS-rebinding protection (Host checks) is off: the bearer credential is what protects the route.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import FastAPI, Request
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route

from services.gateway.mcp import servers as mcp_servers
from services.gateway.identity.auth import authenticate
from services.gateway.errors import ApiError, error_response
from services.gateway.mcp.out import Backend, build_server
from services.gateway.state import GatewayState, get_state

PATH = "/mcp"
EVENT_BLOCK_MS = 1000
"""Milliseconds one read of an ``ask`` task's event log blocks for new events."""


class GatewayBackend(Backend):
    """``Backend`` over the gateway app in process, for one caller (``authorization`` header)."""

    def __init__(self, app: FastAPI, authorization: str) -> None:
        transport = httpx.ASGITransport(app=app)
        super().__init__(httpx.AsyncClient(transport=transport, base_url="http://gateway",
                                           headers={"Authorization": authorization}, timeout=120.0))
        self.app = app

    async def events(self, task_id: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """The task's events from its log (the caller created the task, so it may read it)."""
        state: GatewayState = self.app.state.gateway
        after = 0
        while True:
            for ev in await state.events.read(task_id, after=after, block_ms=EVENT_BLOCK_MS):
                after = ev.seq
                yield ev.type, json.loads(ev.data) if ev.data else {}
                if ev.terminal:
                    return


class McpEndpoint:
    """The ASGI app of ``/mcp``: authenticate, then hand the request to the SDK's session manager."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.server = build_server(self._backend_of)
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self.server.streamable_http_app(streamable_http_path=PATH, stateless_http=True, transport_security=security)
        self.manager = self.server.session_manager

    async def _backend_of(self, ctx: Context) -> Backend:
        authorization = (ctx.headers or {}).get("authorization")
        if not authorization:
            raise ToolError("unauthenticated: the request carried no credential")
        return GatewayBackend(self.app, authorization)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        try:
            await authenticate(request, await get_state(request))
        except ApiError as exc:
            await error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)(scope, receive, send)
            return
        await self.manager.handle_request(scope, receive, send)


def install_mcp(app: FastAPI) -> McpEndpoint:
    """Route ``GET|POST|DELETE /mcp`` to a new ``McpEndpoint`` and add ``/v1/mcp-servers``
    (``services.gateway.mcp.servers``); the caller runs ``endpoint.manager.run()`` in the app's
    lifespan (the SDK's task group)."""
    app.include_router(mcp_servers.router)
    endpoint = McpEndpoint(app)
    app.router.routes.append(Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False))
    return endpoint
