"""The gateway's FastAPI application: HTTP in, Kafka out, Redis task logs streamed back as SSE.

``create_app(settings)`` builds the app; its lifespan opens, in order:
1. Redis (``conduit.runtime.redis_client.make_redis``) — task records and event logs;
2. Conduit's Kafka topics (``conduit.runtime.bus.ensure_topics``) and a FastStream
   ``KafkaBroker`` (``conduit.runtime.bus.make_broker``) with no subscribers, used only
   to publish (``acks=all``);
3. the shared SSE reader (``services.gateway.streaming.hub.StreamHub``) on its own Redis
   client: one connection whose multi-key ``XREAD`` serves every open stream;
4. a liveness heartbeat (``conduit.runtime.liveness.alive_key``) for ``/readyz``;
then it freezes the startup objects (``gc.freeze()``) so full GC passes stay short.
Startup fails (the process exits) when Kafka is unreachable at start; later
outages are reported by ``/readyz`` and answered 503 by the write routes.
On shutdown the heartbeat and the hub stop, the broker is stopped and Redis closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from conduit.runtime import allocator, bus, metrics
from conduit.runtime.liveness import heartbeat
from conduit.runtime.redis_client import make_redis
from conduit.runtime.settings import Settings
from conduit.records.taskstore import TaskStore
from conduit.records.taskstream import TaskEventLog
from services.gateway.agents import a2a_route, agui_route
from services.gateway.api import approvals, artifacts, health, routes
from services.gateway.api import memory as memory_routes
from services.gateway.api import sessions as sessions_routes
from services.gateway.documents import routes as documents_routes
from services.gateway.identity import routes as identity
from services.gateway.identity.auth import check_auth_mode
from services.gateway.mcp.route import install_mcp
from services.gateway.openai_compat import chat
from services.gateway.page import install_page
from services.gateway.errors import install_error_handlers
from services.gateway.openapi import install_openapi
from services.gateway.streaming.clusterhub import ClusterHub
from services.gateway.streaming.hub import StreamHub
from services.gateway.streaming.sse import RAW_SEND
from services.gateway.state import GatewayState

log = logging.getLogger("conduit.gateway")

SERVICE = "gateway"


def create_app(settings: Settings) -> FastAPI:
    """Return the gateway app for ``settings``; resources live in ``app.state.gateway`` (``GatewayState``).

    Raises RuntimeError for an unsafe ``CONDUIT_AUTH`` (``services.gateway.identity.auth.check_auth_mode``).
    """
    check_auth_mode(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redis = make_redis(settings.store)
        broker = bus.make_broker(settings, client_id=SERVICE, redis=redis)
        beat: asyncio.Task | None = None
        hub: StreamHub | None = None
        try:
            await redis.ping()
            await bus.ensure_topics(settings.bus)
            await broker.start()
            events = TaskEventLog(redis, ttl_s=settings.gateway.task_events_ttl_s, maxlen=settings.gateway.task_events_maxlen)
            hub = (ClusterHub if settings.store.redis_cluster else StreamHub)(make_redis(settings.store), events,  # rule O9
                                                                     block_ms=settings.gateway.gateway_sse_poll_ms)
            hub.start()
            app.state.gateway = GatewayState(
                settings=settings,
                redis=redis,
                broker=broker,
                store=TaskStore(redis, ttl_s=settings.gateway.task_events_ttl_s),
                events=events,
                hub=hub,
            )
            beat = asyncio.create_task(heartbeat(redis, SERVICE), name="gateway-heartbeat")
            # Move the ~100k objects of startup (modules, schemas, clients) out of the cyclic GC's reach:
            # with 1,000 open streams a full collection that also walked them paused the loop for
            # 200-300 ms every few seconds (bench/sse_fanout.py); now it walks only what came later.
            gc.collect()
            gc.freeze()
            log.info("gateway ready (kafka %s, redis %s, allocator %s)", settings.bus.bootstrap_servers(), settings.store.url(),
                     allocator.in_use())
            async with mcp_endpoint.running():  # stops the MCP SDK's task group of /mcp if a request started it
                yield
        finally:
            if beat is not None:
                beat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await beat
            if hub is not None:
                await hub.stop()
            with contextlib.suppress(Exception):
                # bounded: with Kafka gone, the producer's flush retries a pending batch for long
                await asyncio.wait_for(broker.stop(), settings.gateway.gateway_publish_timeout_s)
            await redis.aclose()

    app = _GatewayApp(
        title="Conduit gateway",
        version="1",
        summary="Ask questions, stream the agent's work as Server-Sent Events.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    # GET /metrics, HTTP request counters and latency, open SSE streams; each scrape reads Redis memory and the
    # sandboxes' statuses
    metrics.instrument_app(app, before_scrape=lambda: metrics.sample_redis(app.state.gateway.redis))
    mcp_endpoint = _install_routes(app)
    install_openapi(app)
    install_page(app)  # GET / (the chat page) and /static (its files), public
    return app


class _GatewayApp(FastAPI):
    """FastAPI that puts the server's own ``send`` into the scope (``streaming.sse.RAW_SEND``) before its
    middlewares wrap it: an SSE stream writes its body chunks with it, past the wrappers (``streaming.sse``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[RAW_SEND] = send
        await super().__call__(scope, receive, send)


def _install_routes(app: FastAPI) -> Any:
    """Add every API router to ``app``; return the ``/mcp`` endpoint (its lifespan runs its task group)."""
    for router in (routes.router, health.router, approvals.router, artifacts.router,
                   documents_routes.router,  # /v1/search, /v1/documents (served by the retriever over the bus)
                   identity.router,  # /v1/me, /v1/login
                   sessions_routes.router):
        app.include_router(router)
    mcp_endpoint = install_mcp(app)  # /mcp (Conduit as an MCP server) and /v1/mcp-servers (tenants' servers)
    app.include_router(memory_routes.router)  # /v1/memory (conduit.records.memory; vectors in the retriever)
    app.include_router(chat.router)  # /v1/chat/completions, /v1/models (OpenAI-compatible)
    app.include_router(a2a_route.router)  # /.well-known/agent-card.json, /v1/a2a (A2A JSON-RPC)
    app.include_router(agui_route.router)  # /v1/agui (AG-UI runs)
    return mcp_endpoint
