"""Error responses of the gateway: every error is a ``contracts.api.ErrorBody``.

Shape: ``{"error": {"code": str, "message": str, "details": any | null}}``.

Codes and statuses:
- 422 ``invalid_request``: malformed JSON, missing/invalid fields, bad
  ``Last-Event-ID``; ``details`` is the pydantic error list (``loc``, ``msg``, ``type``).
- 413 ``question_too_large``: question (or whole body) over the limit.
- 401 ``unauthenticated`` (no, bad, revoked or expired credential; with ``WWW-Authenticate``),
  ``login_token_invalid`` (used or expired login link); 403 ``forbidden`` (needs the admin role),
  ``user_mismatch`` (a body ``user_id`` that is not the caller); 429 ``rate_limited`` (with ``Retry-After``),
  ``token_budget_exceeded`` (the tenant's model tokens of the UTC day are spent, rule G6; with ``Retry-After``).
- 404 ``not_found`` (unknown route), ``task_not_found`` (unknown, expired or another owner's
  task: the same answer), ``session_not_found``.
- 405 ``method_not_allowed``; 409 ``task_already_finished``.
- 503 ``broker_unavailable`` (Kafka did not ack), ``store_unavailable`` (Redis
  error), ``not_ready`` (``/readyz``).
- 500 ``internal_error``: anything unexpected; the traceback is logged, never sent.

The OpenAI-compatible routes (``OPENAI_PATHS``) answer the same body plus OpenAI's ``type`` and
``param``: ``{"error": {"code", "message", "type", "param", "details"}}``, which the ``openai``
SDKs read as their ``APIError`` (``type``: ``OPENAI_TYPES`` by status).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException

from contracts.api import ErrorBody, ErrorDetail

log = logging.getLogger("conduit.gateway.errors")

_HTTP_CODES = {
    404: "not_found",
    405: "method_not_allowed",
    413: "question_too_large",
    422: "invalid_request",
}


OPENAI_PATHS = frozenset({"/v1/chat/completions", "/v1/models"})
"""Routes whose errors also carry OpenAI's ``type`` and ``param`` fields."""
OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 409: "conflict_error", 413: "invalid_request_error",
                422: "invalid_request_error", 429: "rate_limit_error"}
"""OpenAI error ``type`` by HTTP status (anything else: ``server_error``)."""


class ApiError(Exception):
    """An error answered as ``ErrorBody`` with ``status`` (HTTP status code)."""

    def __init__(self, status: int, code: str, message: str, details: Any | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers


def error_response(status: int, code: str, message: str, details: Any | None = None,
                   headers: dict[str, str] | None = None, request: Request | None = None) -> JSONResponse:
    """Return a ``JSONResponse`` holding an ``ErrorBody`` (OpenAI's shape too on ``OPENAI_PATHS``)."""
    body = ErrorBody(error=ErrorDetail(code=code, message=message, details=jsonable_encoder(details)))
    data = body.model_dump(mode="json")
    if request is not None and request.url.path in OPENAI_PATHS:
        data["error"] = openai_error(status, code, message, data["error"]["details"])
    return JSONResponse(data, status_code=status, headers=headers)


def openai_error(status: int, code: str, message: str, details: Any | None = None) -> dict[str, Any]:
    """The ``error`` object of OpenAI's shape: ``{code, message, type, param, details}``."""
    return {"code": code, "message": message, "type": OPENAI_TYPES.get(status, "server_error"), "param": None,
            "details": details}


def validation_details(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pydantic errors trimmed for clients: ``loc``, ``msg``, ``type`` (+ ``ctx``), no echoed input."""
    out = []
    for err in errors:
        item = {"loc": list(err.get("loc", ())), "msg": err.get("msg", ""), "type": err.get("type", "")}
        if err.get("ctx"):
            item["ctx"] = {k: str(v) for k, v in err["ctx"].items()}
        out.append(item)
    return out


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that turn every failure into an ``ErrorBody``."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers, request)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, "invalid_request", "the request is malformed or has invalid fields",
                              validation_details(list(exc.errors())), request=request)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # Allow: every method of the path, not only the matched route's
            from services.gateway.openapi import allowed_methods

            methods = allowed_methods(request.app, request.url.path)
            headers = {**(headers or {}), "Allow": ", ".join(methods)} if methods else headers
        return error_response(exc.status_code, code, message, headers=headers, request=request)

    @app.exception_handler(RedisError)
    async def _redis(request: Request, exc: RedisError) -> JSONResponse:
        log.error("redis error on %s %s: %r", request.method, request.url.path, exc)
        return error_response(503, "store_unavailable", "the task store is unavailable, retry later",
                              request=request)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal error", request=request)
