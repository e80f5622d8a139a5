"""``/mcp`` on the gateway: Conduit as an MCP server over streamable HTTP (``services.gateway.mcp.out``).

Authenticated like every ``/v1`` route: the request's bearer credential is checked (401
``unauthenticated``, 429 rate limits) before the MCP SDK sees it. The SDK runs stateless (a fresh
transport per request: any gateway replica can answer any request, nothing to share). Each tool
call is run for the caller: its ``search``/``documents``/task requests go to this gateway's own
``/v1`` routes in process (``httpx.ASGITransport``) with the caller's ``Authorization`` header, so
they are scoped and answered exactly as over HTTP; ``ask`` reads the task's event log directly
(in-process ASGI responses are buffered, so the SSE route would deliver its progress only at the end).
DNS-rebinding protection (Host checks) is off: the bearer credential is what protects the route.
Rule O13 (docs/operations.md, "Memory"): the MCP SDK (~25 MiB) loads with the first request to ``/mcp``,
which starts the SDK's session manager in a task of its own; the app's lifespan stops it (``running``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import FastAPI, Request
from starlette.routing import Route

from services.gateway.mcp import servers as mcp_servers
from services.gateway.identity.auth import authenticate
from services.gateway.errors import ApiError, error_response
from services.gateway.state import GatewayState, get_state

if TYPE_CHECKING:  # rule O13: the SDK loads with the first request to /mcp
    from mcp.server.mcpserver import Context
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from services.gateway.mcp.out import Backend

PATH = "/mcp"
EVENT_BLOCK_MS = 1000
"""Milliseconds one read of an ``ask`` task's event log blocks for new events."""


@functools.cache
def backend_class() -> type[Backend]:
    """``GatewayBackend(app, authorization)``: a ``Backend`` over the gateway app in process, for one caller
    (its ``authorization`` header); a class made on first use, as its base is the SDK's side (rule O13)."""
    from services.gateway.mcp.out import Backend  # noqa: PLC0415 - rule O13

    class GatewayBackend(Backend):
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

    return GatewayBackend


class McpEndpoint:
    """The ASGI app of ``/mcp``: authenticate, then hand the request to the SDK's session manager, made and
    started by the first request (rule O13; ``running`` stops it)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.manager: StreamableHTTPSessionManager | None = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None

    async def _backend_of(self, ctx: Context) -> Backend:
        from mcp.server.mcpserver.exceptions import ToolError  # noqa: PLC0415 - loaded by the manager already

        authorization = (ctx.headers or {}).get("authorization")
        if not authorization:
            raise ToolError("unauthenticated: the request carried no credential")
        return backend_class()(self.app, authorization)

    async def started(self) -> StreamableHTTPSessionManager:
        """The SDK's session manager, running in its own task (made by the first call); raises what its start raised."""
        async with self._lock:
            if self.manager is not None:
                return self.manager
            from mcp.server.transport_security import TransportSecuritySettings  # noqa: PLC0415 - rule O13

            from services.gateway.mcp.out import build_server  # noqa: PLC0415

            server = build_server(self._backend_of)
            security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
            server.streamable_http_app(streamable_http_path=PATH, stateless_http=True, transport_security=security)
            manager, ready = server.session_manager, asyncio.get_running_loop().create_future()

            async def run() -> None:
                async with manager.run():  # the SDK's task group of /mcp
                    ready.set_result(None)
                    await self._stop.wait()

            self._runner = asyncio.create_task(run(), name="mcp-session-manager")
            await asyncio.wait({ready, self._runner}, return_when=asyncio.FIRST_COMPLETED)
            if not ready.done():
                self._runner.result()  # raises what the start raised
            self.manager = manager
            return manager

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """For the app's lifespan: on the way out, stop the session manager if a request started it."""
        try:
            yield
        finally:
            if self._runner is not None:
                self._stop.set()
                with contextlib.suppress(Exception):
                    await self._runner

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        try:
            await authenticate(request, await get_state(request))
        except ApiError as exc:
            await error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)(scope, receive, send)
            return
        await (await self.started()).handle_request(scope, receive, send)


def install_mcp(app: FastAPI) -> McpEndpoint:
    """Route ``GET|POST|DELETE /mcp`` to a new ``McpEndpoint`` and add ``/v1/mcp-servers``
    (``services.gateway.mcp.servers``); the caller enters ``endpoint.running()`` in the app's lifespan."""
    app.include_router(mcp_servers.router)
    endpoint = McpEndpoint(app)
    app.router.routes.append(Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False))
    return endpoint
