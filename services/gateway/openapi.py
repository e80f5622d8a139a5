"""The gateway's OpenAPI document, exact enough for client generators and schemathesis.

Routes read their JSON bodies themselves (size limits while reading, any content type), so
FastAPI cannot see them: ``body_doc(Model)`` declares a route's body (``required: true``,
``application/json``, ``$ref`` to the model) and ``install_openapi`` then adds:
- every declared body model (and its nested ``$defs``) to ``components.schemas``;
- the ``bearer`` security scheme (an API key ``cdk_...`` or a JWT), required on every
  operation except the public ones (``PUBLIC_PATHS`` and everything outside ``/v1``);
- the errors any authenticated route can answer: 401 ``unauthenticated``, 429
  ``rate_limited`` (with ``Retry-After``) and 503 ``store_unavailable``.
``allowed_methods`` gives a 405's ``Allow`` header every method of the path (Starlette's lists
only the methods of the one route object that matched, not of its siblings on the same path).
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from contracts.api import ErrorBody

PUBLIC_PATHS = frozenset({"/v1/login"})
"""``/v1`` routes that need no credential (outside ``/v1`` every route is public)."""

_BODIES: dict[str, type[BaseModel]] = {}
_REF = "#/components/schemas/{model}"
_ERROR = {"$ref": "#/components/schemas/ErrorBody"}


def body_doc(model: type[BaseModel], raw: dict[str, str] | None = None) -> dict[str, Any]:
    """``openapi_extra`` of a route whose required JSON body is ``model``; ``raw`` adds binary
    bodies the route also reads (``{content type: description}``, e.g. ``application/pdf``)."""
    _BODIES[model.__name__] = model
    content: dict[str, Any] = {"application/json": {"schema": {"$ref": _REF.format(model=model.__name__)}}}
    for media_type, description in (raw or {}).items():
        content[media_type] = {"schema": {"type": "string", "format": "binary", "description": description}}
    return {"requestBody": {"required": True, "content": content}}


def is_public(path: str) -> bool:
    """True for routes answered without a credential."""
    return not path.startswith("/v1") or path in PUBLIC_PATHS


def _error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": _ERROR}}}
    if headers:
        out["headers"] = headers
    return out


def _document(app: FastAPI) -> dict[str, Any]:
    spec = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("ErrorBody", ErrorBody.model_json_schema(ref_template=_REF))
    for name, model in _BODIES.items():
        schema = model.model_json_schema(ref_template=_REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[name] = schema
    for name in list(schemas):  # ErrorBody's own $defs (ErrorDetail)
        schemas.update(schemas[name].pop("$defs", {}))
    spec["components"]["securitySchemes"] = {"bearer": {
        "type": "http", "scheme": "bearer", "description": "an API key (cdk_...) or, with CONDUIT_AUTH=jwt, a JWT"}}
    for path, operations in spec["paths"].items():
        for op in operations.values():
            responses = op.setdefault("responses", {})
            if is_public(path):
                op["security"] = []
                continue
            op["security"] = [{"bearer": []}]
            responses.setdefault("401", _error("no, bad, revoked or expired credential (WWW-Authenticate: Bearer)",
                                               {"WWW-Authenticate": {"schema": {"type": "string"}}}))
            responses.setdefault("429", _error("rate limited", {"Retry-After": {"schema": {"type": "integer"}}}))
            responses.setdefault("503", _error("a backing store or the broker is unavailable"))
    return spec


def install_openapi(app: FastAPI) -> None:
    """Serve ``_document(app)`` (built once, on first request) as the app's OpenAPI document."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Every method the OpenAPI document lists for a concrete ``path`` (empty when none matches)."""
    patterns = getattr(app.state, "allow_patterns", None)
    if patterns is None:
        patterns = [(re.compile("^" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(p)) + "$"),
                     sorted(m.upper() for m in ops)) for p, ops in app.openapi()["paths"].items()]
        app.state.allow_patterns = patterns
    found: set[str] = set()
    for pattern, methods in patterns:
        if pattern.match(path):
            found.update(methods)
    return sorted(found)
