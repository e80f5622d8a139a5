"""Reading client input: the ``TaskCreate`` body, ``Last-Event-ID`` and ``traceparent``.

The body is read and validated here rather than by FastAPI's body parameter so
that (a) any ``Content-Type`` is accepted (``curl -d`` sends form-urlencoded),
(b) the size limit is enforced while reading, before the whole body is buffered.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from conduit.runtime.settings import GatewaySettings
from conduit.policy import guardrails
from contracts.api import TaskCreate
from services.gateway.documents import scope
from services.gateway.errors import ApiError

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
_EVENT_ID = re.compile(r"^[0-9]{1,18}$")
_BODY_OVERHEAD_BYTES = 16 * 1024


def max_body_bytes(gateway: GatewaySettings) -> int:
    """Largest accepted request body (bytes): 6 bytes per question char (``\\uXXXX``) + 16 KiB."""
    return gateway.max_question_chars * 6 + _BODY_OVERHEAD_BYTES


def _too_large(gateway: GatewaySettings) -> ApiError:
    return ApiError(413, "question_too_large",
                    f"the question is longer than {gateway.max_question_chars} characters",
                    {"max_question_chars": gateway.max_question_chars})


async def read_task_create(request: Request, gateway: GatewaySettings) -> TaskCreate:
    """Read and validate a ``TaskCreate`` JSON body.

    Raises:
        RequestValidationError: malformed JSON or invalid fields (-> 422 ``invalid_request``).
        ApiError: 413 ``question_too_large`` when the body exceeds ``max_body_bytes``
            or the question exceeds ``gateway.max_question_chars`` characters; 422
            ``input_rejected`` (details ``{category, rule}``) when the input guardrail (rule G1,
            ``conduit.policy.guardrails``) finds a prompt injection: nothing is queued, no model runs;
            422 ``scope_too_large`` (rule Q1: too many ``document_ids`` or ``collections``).
    """
    raw = await read_limited(request, max_body_bytes(gateway), lambda: _too_large(gateway))
    try:
        body = TaskCreate.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        raise scope.too_large(errors) or RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in errors]) from None
    check_question(body.question, gateway)
    return body


async def read_limited(request: Request, limit: int, too_large: Callable[[], ApiError]) -> bytes:
    """The request body, refused while reading once it passes ``limit`` bytes (raises ``too_large()``)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large()
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large()
        chunks.append(chunk)
    return b"".join(chunks)


async def read_conversation(request: Request, gateway: GatewaySettings) -> bytes:
    """The body of a route that takes a whole conversation (chat completions, AG-UI runs), at most
    ``chat_max_body_bytes``; raises ApiError 413 ``question_too_large`` past it."""
    limit = gateway.chat_max_body_bytes
    return await read_limited(request, limit, lambda: ApiError(
        413, "question_too_large", f"the request body is larger than {limit} bytes", {"max_bytes": limit}))


def check_question(question: str, gateway: GatewaySettings) -> None:
    """The checks every question passes before it is queued (size, not blank, input guardrail).

    Raises:
        ApiError: 413 ``question_too_large``; 422 ``input_rejected`` (rule G1).
        RequestValidationError: a blank question (-> 422 ``invalid_request``).
    """
    if len(question) > gateway.max_question_chars:
        raise _too_large(gateway)
    if not question.strip():
        raise RequestValidationError([{"type": "string_too_short", "loc": ("body", "question"),
                                       "msg": "the question is blank"}])
    rejected = guardrails.check(question)
    if rejected is not None:
        raise ApiError(422, "input_rejected", rejected.message(question),
                       {"category": rejected.category, "rule": rejected.rule})


def last_event_id(request: Request) -> int:
    """The resume point: ``Last-Event-ID`` header, else ``?last_event_id=``, else 0.

    Both are SSE ``id`` values (a task event's ``seq``); events with a larger
    seq are sent. An empty value means "from the start".

    Raises:
        ApiError: 422 ``invalid_request`` when the value is not a non-negative integer.
    """
    raw = request.headers.get("last-event-id")
    source = "Last-Event-ID header"
    if raw is None or not raw.strip():
        raw = request.query_params.get("last_event_id")
        source = "last_event_id query parameter"
    if raw is None or not raw.strip():
        return 0
    raw = raw.strip()
    if not _EVENT_ID.match(raw):
        raise ApiError(422, "invalid_request", f"{source} must be a non-negative integer event id",
                       [{"loc": [source], "msg": "not a non-negative integer", "type": "int_parsing"}])
    return int(raw)


IDEMPOTENCY_KEY_MAX = 255
"""Longest ``Idempotency-Key`` header accepted (characters)."""


def idempotency_key(request: Request) -> str | None:
    """The ``Idempotency-Key`` header (rule G1, docs/rules.md: a retried create must not run twice), or None.

    Raises:
        ApiError: 422 ``invalid_request`` when it is empty, longer than ``IDEMPOTENCY_KEY_MAX``
            characters, or not printable ASCII.
    """
    raw = request.headers.get("idempotency-key")
    if raw is None:
        return None
    key = raw.strip()
    if not key or len(key) > IDEMPOTENCY_KEY_MAX or not all(33 <= ord(c) < 127 for c in key):
        raise ApiError(422, "invalid_request",
                       f"Idempotency-Key must be 1-{IDEMPOTENCY_KEY_MAX} printable ASCII characters without spaces")
    return key


def use_cache(request: Request) -> bool:
    """False when the client sent ``Cache-Control: no-cache`` (or ``no-store``): the semantic cache
    is not read for this question (rule C1)."""
    directives = {d.strip().lower() for d in request.headers.get("cache-control", "").split(",")}
    return not directives & {"no-cache", "no-store"}


def traceparent(request: Request) -> str | None:
    """The W3C ``traceparent`` header if present and well formed, else None (invalid ones are ignored)."""
    value = request.headers.get("traceparent", "").strip().lower()
    return value if _TRACEPARENT.match(value) else None
