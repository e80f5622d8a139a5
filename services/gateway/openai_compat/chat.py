"""OpenAI-compatible routes: Conduit answers as if it were a chat model (docs/openai.md).

- ``GET  /v1/models``            -> 200 ``ModelList``: the agent modes (``contracts.chat.MODES``), then the
  tenant's configured models (``CONDUIT_MODELS``, rule A20; a chat completion naming one runs the full agent with it).
- ``POST /v1/chat/completions``  body ``ChatCompletionRequest`` -> 200 ``chat.completion`` JSON, or
  with ``"stream": true`` a ``text/event-stream`` of ``chat.completion.chunk`` s ending with
  ``data: [DONE]`` (the answer's deltas as the agent writes them; ``services.gateway.openai_compat.chatstream``).
  Response headers ``X-Task-Id`` and ``X-Conduit-Session``.

The question is the last ``user`` message. The session: the ``X-Conduit-Session`` header when
given, else the one the earlier ``user``/``assistant`` messages were answered in (each answer
records ``SHA-256(tenant, user, messages so far) -> session`` for ``task_events_ttl_s``; a
history Conduit did not answer starts a new session), else a new one. The request's ``conduit``
extension field (``contracts.chat.ConduitOptions``: ``document_ids``, ``collections``) limits the
question's searches as on ``POST /v1/tasks`` (rules Q1-Q4). Authenticated and
scoped like every ``/v1`` route (a session of another user is 404 ``session_not_found``).
Errors carry OpenAI's shape (``services.gateway.errors.OPENAI_PATHS``): 404 ``model_not_found``,
422 ``invalid_request`` (bad body, no user message) / ``scope_too_large``, 404 ``document_not_found`` /
``collection_not_found`` (the ``conduit`` scope), 413 ``question_too_large``, and every
code of ``POST /v1/tasks``; a task that fails is 502 with its code (``task_cancelled``: 409);
in a stream, an error arrives as a ``data: {"error": ...}`` event before ``[DONE]``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from conduit.records import keys
from conduit.runtime import models
from contracts.api import ErrorBody, TaskCreate
from contracts.chat import MODES, ChatCompletionRequest, ModelCard, ModelList
from services.gateway.api import inputs, tasks
from services.gateway.documents import scope
from services.gateway.identity.auth import Principal, authenticate
from services.gateway.openai_compat.chatstream import ChatAnswer, Chunks
from services.gateway.errors import ApiError, openai_error, validation_details
from services.gateway.openapi import body_doc
from services.gateway.streaming.sse import HEADERS, follow
from services.gateway.state import GatewayState, get_state

log = logging.getLogger("conduit.gateway.chat")

router = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)])

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (401, 403, 404, 409, 413, 422, 429, 500, 502, 503)
}
_OK = {200: {"description": "a chat.completion (JSON) or, with stream, chat.completion.chunk events",
             "content": {"application/json": {"schema": {"type": "object"}}, "text/event-stream": {}}}}
_SESSION = Header(default=None, alias="X-Conduit-Session", max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$",
                  description="continue this session (instead of the one the earlier messages map to)")


@router.get("/models", response_model=ModelList, responses=_ERRORS)
async def list_models(state: GatewayState = Depends(get_state), who: Principal = Depends(authenticate)) -> JSONResponse:
    """The agent modes, then the caller's tenant's configured models (rule A20), served as models
    (``model`` of a chat completion, of ``POST /v1/tasks`` and ``/v1/ask`` for the configured ones)."""
    cards = [ModelCard(id=name, description=desc) for name, (desc, _) in MODES.items()]
    known = models.registry(state.settings.llm)
    cards += [ModelCard(id=n, description="a configured model: the full agent answers with it", model=known[n].model,
                        tools=known[n].tools) for n in models.allowed(state.settings, who.tenant_id) if n not in MODES]
    return JSONResponse(ModelList(data=cards).model_dump(mode="json", exclude_none=True))


def _mode(state: GatewayState, who: Principal, name: str) -> tuple[list[str] | None, str | None]:
    """Rule A20: a chat completion's ``model``: an agent mode (its tools, no model named) or one of the tenant's
    configured models (every tool, that model). Raises ApiError 404 ``model_not_found`` listing both."""
    if name in MODES:
        return list(MODES[name][1]) if MODES[name][1] is not None else None, None
    names = models.allowed(state.settings, who.tenant_id)
    if name in names:
        return None, name
    raise ApiError(404, "model_not_found", f"no model {name!r}; GET /v1/models lists them",
                   {"models": [*MODES, *names]})


def conversation_key(who: Principal, turns: list[tuple[str, str]]) -> str:
    """Redis key of the session a conversation of ``(role, text)`` turns continues (whitespace-trimmed)."""
    canon = json.dumps([who.tenant_id, who.user_id, [(r, t.strip()) for r, t in turns]], ensure_ascii=False)
    return keys.chat_conversation(hashlib.sha256(canon.encode()).hexdigest())


async def _read(request: Request, state: GatewayState) -> ChatCompletionRequest:
    raw = await inputs.read_conversation(request, state.settings.gateway)
    try:
        return ChatCompletionRequest.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        raise scope.too_large(errors) or ApiError(422, "invalid_request", "the body is not a valid chat completion "
                                                  "request", validation_details(errors)) from None


def _question(body: ChatCompletionRequest) -> tuple[str, list[tuple[str, str]]]:
    """The last user message's text and the user/assistant turns before it.

    Raises ApiError 422 ``invalid_request`` without a user message.
    """
    users = [i for i, m in enumerate(body.messages) if m.role == "user"]
    if not users:
        raise ApiError(422, "invalid_request", "messages must contain a user message (the question)")
    last = users[-1]
    earlier = [(m.role, m.text()) for m in body.messages[:last] if m.role in ("user", "assistant")]
    return body.messages[last].text(), earlier


@router.post("/chat/completions", responses={**_ERRORS, **_OK}, openapi_extra=body_doc(ChatCompletionRequest))
async def chat_completions(request: Request, state: GatewayState = Depends(get_state),
                           who: Principal = Depends(authenticate),
                           session: str | None = _SESSION) -> Any:
    """Ask the last user message in the conversation's session; answer as a chat completion."""
    body = await _read(request, state)
    allowed_tools, model = _mode(state, who, body.model)
    question, earlier = _question(body)
    inputs.check_question(question, state.settings.gateway)
    if session is None and earlier:
        found = await state.redis.get(conversation_key(who, earlier))
        session = found.decode() if isinstance(found, bytes) else found
    limits = body.conduit.model_dump(exclude_none=True) if body.conduit else {}  # the question's scope (rule Q1)
    create = TaskCreate(question=question, session_id=session, allowed_tools=allowed_tools, model=model, **limits)
    created, _ = await tasks.create_task(state, who, create, inputs.traceparent(request),
                                         inputs.idempotency_key(request))
    answer = ChatAnswer(created.task_id, created.session_id)
    chunks = Chunks(created.task_id, body.model)
    headers = {"X-Task-Id": created.task_id, "X-Conduit-Session": created.session_id}
    remember = (who, [*earlier, ("user", question)])
    if body.stream:
        usage = body.stream_options is not None and body.stream_options.include_usage
        return StreamingResponse(_stream(state, answer, chunks, remember, usage), media_type="text/event-stream",
                                 headers={**HEADERS, **headers})
    async for batch in follow(state, created.task_id, 0):
        for ev in batch or []:
            if ev.terminal:
                answer.finish(ev)
    if answer.error is not None:
        raise ApiError(*answer.error, {"task_id": created.task_id})
    if answer.extension is None:
        raise ApiError(503, "task_unfinished", "the task's stream ended before its answer; "
                       f"read it at GET /v1/tasks/{created.task_id}", {"task_id": created.task_id})
    await _remember(state, remember, answer.final, created.session_id)
    return JSONResponse(chunks.completion(answer), headers=headers)


async def _remember(state: GatewayState, remember: tuple[Principal, list[tuple[str, str]]], reply: str,
                    session_id: str) -> None:
    who, turns = remember
    await state.redis.set(conversation_key(who, [*turns, ("assistant", reply)]), session_id,
                          ex=state.settings.gateway.task_events_ttl_s)


async def _stream(state: GatewayState, answer: ChatAnswer, chunks: Chunks,
                  remember: tuple[Principal, list[tuple[str, str]]], usage: bool) -> AsyncIterator[bytes]:
    """The SSE body: a role chunk, content chunks, a finish chunk (with ``conduit``), ``[DONE]``."""
    yield chunks.chunk({"role": "assistant", "content": ""})
    loop_s, heartbeat_s, idle = state.settings.gateway.gateway_sse_poll_ms / 1000, state.settings.gateway.sse_heartbeat_s, 0.0
    finished = False
    async for batch in follow(state, answer.task_id, 0):
        if not batch:
            idle += loop_s
            if batch is not None and heartbeat_s > 0 and idle >= heartbeat_s:
                idle = 0.0
                yield b": ping\n\n"
            continue
        idle, out = 0.0, []
        for ev in batch:
            deltas = answer.finish(ev) if ev.terminal else answer.on_event(ev)
            out += [chunks.chunk(d) for d in deltas]
            finished = finished or ev.terminal
        if out:
            yield b"".join(out)
    if answer.error is not None:
        status, code, message = answer.error
        yield chunks.data({"error": openai_error(status, code, message, {"task_id": answer.task_id})})
    elif answer.extension is None or not finished:
        yield chunks.data({"error": openai_error(503, "task_unfinished", "the task's stream ended before its "
                                                 f"answer; read it at GET /v1/tasks/{answer.task_id}")})
    else:
        extra: dict[str, Any] = {"conduit": answer.extension.model_dump(mode="json")}
        if answer.usage is not None and not usage:
            extra["usage"] = answer.usage
        yield chunks.chunk({}, answer.finish_reason, **extra)
        if usage and answer.usage is not None:
            yield chunks.data({"id": chunks.id, "object": "chat.completion.chunk", "created": chunks.created,
                               "model": chunks.model, "choices": [], "usage": answer.usage})
        await _remember(state, remember, answer.sent, answer.session_id)
    yield chunks.data("[DONE]")
