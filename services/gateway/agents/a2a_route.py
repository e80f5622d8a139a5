"""A2A's HTTP routes on the gateway (docs/a2a.md).

- ``GET  /.well-known/agent-card.json`` -> the agent card (``a2a_card``), public: discovery needs no credential;
  the card names the credential the endpoint takes.
- ``POST /v1/a2a`` -> A2A JSON-RPC 2.0, protocol 1.0 (``SendMessage``, ``SendStreamingMessage``, ``GetTask``,
  ``CancelTask``, ``SubscribeToTask``) and 0.3 (``message/send``, ``message/stream``, ``tasks/get``,
  ``tasks/cancel``, ``tasks/resubscribe``) on the same URL, parsed and answered by the ``a2a-sdk``'s
  ``JsonRpcDispatcher`` over ``a2a_handler.ConduitRequestHandler``. Authenticated like every ``/v1`` route
  (401 ``unauthenticated`` as ``ErrorBody`` before any JSON-RPC parsing, 429 rate limits; a body over
  ``chat_max_body_bytes``: 413 ``question_too_large``); bad JSON-RPC is a
  JSON-RPC error (HTTP 200): -32700 parse error, -32600 invalid request, -32601 unknown method, -32602 invalid
  params (with ``data.code``), -32001 task not found, -32002 task not cancelable. Streaming methods answer
  ``text/event-stream``, one JSON-RPC response per ``data:``.

Rule O13 (docs/operations.md, "Memory"): the ``a2a-sdk`` (protobuf, grpc: ~23 MiB) loads with the first request
to either route (``dispatcher``); the routes and their OpenAPI entries exist from the start.
"""

from __future__ import annotations

import functools
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from conduit.runtime.toolcatalog import available_tools, unavailable_tools
from contracts.api import ErrorBody
from services.gateway.agents.a2a_paths import CARD_PATH, PATH
from services.gateway.api import inputs
from services.gateway.identity.auth import Principal, authenticate
from services.gateway.state import GatewayState, get_state

SHUTDOWN_GRACE_S = 2.0
"""Seconds an A2A stream gets to end itself when the gateway stops (clients resubscribe with Last-Event-ID)."""

_RPC_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["jsonrpc", "method"],
    "properties": {"jsonrpc": {"const": "2.0"}, "id": {"type": ["string", "integer", "null"]},
                   "method": {"type": "string"}, "params": {"type": "object"}}}}}}}
_OK = {200: {"description": "a JSON-RPC response, or for the streaming methods an SSE stream of them",
             "content": {"application/json": {"schema": {"type": "object"}}, "text/event-stream": {}}}}


@functools.cache
def dispatcher() -> Any:
    """The SDK's ``JsonRpcDispatcher`` over ``ConduitRequestHandler``, made on first use (rule O13); its call
    context carries the authenticated ``Caller`` the route put on ``request.state`` (``state["conduit"]``)."""
    from a2a.server.routes.common import DefaultServerCallContextBuilder  # noqa: PLC0415 - rule O13
    from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher  # noqa: PLC0415

    from services.gateway.agents.a2a_handler import ConduitRequestHandler  # noqa: PLC0415

    class Contexts(DefaultServerCallContextBuilder):
        def build(self, request: Request) -> Any:
            context = super().build(request)
            context.state["conduit"] = request.state.conduit_caller
            return context

    return JsonRpcDispatcher(ConduitRequestHandler(), context_builder=Contexts(), enable_v0_3_compat=True,
                             shutdown_grace_period=SHUTDOWN_GRACE_S)

router = APIRouter()


@router.get(CARD_PATH, response_class=JSONResponse)
async def card(request: Request, state: GatewayState = Depends(get_state)) -> JSONResponse:
    """Conduit's A2A agent card (public)."""
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict  # noqa: PLC0415 - rule O13

    from services.gateway.agents.a2a_card import agent_card  # noqa: PLC0415

    # the code skill needs a model to write the code and a sandbox that isolates it
    code = state.settings.llm.configured and "code_exec" in available_tools(
        state.settings.web, unavailable=await unavailable_tools(state.redis))
    base = str(request.base_url).rstrip("/")
    return JSONResponse(agent_card_to_dict(agent_card(state.settings.identity, base, code)))


@router.post(PATH, responses={**_OK, 401: {"model": ErrorBody}, 413: {"model": ErrorBody}, 429: {"model": ErrorBody}}, openapi_extra=_RPC_BODY,
             dependencies=[Depends(authenticate)])
async def a2a(request: Request, state: GatewayState = Depends(get_state),
              who: Principal = Depends(authenticate)) -> Response:
    """A2A JSON-RPC: send and stream messages, get, cancel and resubscribe to tasks (module doc)."""
    from services.gateway.agents.a2a_handler import Caller  # noqa: PLC0415 - rule O13

    # the body at most chat_max_body_bytes (413 question_too_large), kept where the SDK's request.json() reads it
    request._body = await inputs.read_conversation(request, state.settings.gateway)  # noqa: SLF001 - Starlette's body cache
    request.state.conduit_caller = Caller(state, who, inputs.traceparent(request))
    response: Any = await dispatcher().handle_requests(request)
    return response
