"""Identity routes: who am I, and the one-time login link of ``conduit up``.

- ``GET  /v1/me``    -> 200 ``{"tenant_id", "user_id", "role", "auth"}`` of the credential (401 otherwise).
- ``POST /v1/login`` body ``{"token"}`` (the ``#login=<token>`` of the banner's link) -> 200
  ``{"api_key", "tenant_id", "user_id", "role", "expires_at"}``: a fresh API key of the token's
  user, valid ``login_key_ttl_s`` seconds, for the browser page. The token is single-use
  (``conduit.records.apikeys.redeem_login``); a used, expired or unknown one is 401
  ``login_token_invalid``. The only unauthenticated ``/v1`` route.
"""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from conduit.records import apikeys
from contracts.api import ErrorBody
from services.gateway.identity.auth import Principal, authenticate
from services.gateway.errors import ApiError, validation_details
from services.gateway.openapi import body_doc
from services.gateway.state import GatewayState, get_state

router = APIRouter(prefix="/v1")

LOGIN_BODY_BYTES = 4096
"""Largest ``POST /v1/login`` body (bytes)."""


class LoginBody(BaseModel):
    """``POST /v1/login`` body."""

    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=256, description="the token of the login link (#login=...)")


class LoginAnswer(BaseModel):
    """``POST /v1/login`` answer: an API key for the page (send it as ``Authorization: Bearer``)."""

    api_key: str
    tenant_id: str
    user_id: str
    role: str
    expires_at: str


class Me(BaseModel):
    """``GET /v1/me`` answer."""

    tenant_id: str
    user_id: str
    role: str
    auth: str


@router.get("/me", response_model=Me, responses={c: {"model": ErrorBody} for c in (401, 429)})
async def me(who: Principal = Depends(authenticate)) -> Me:
    """The caller's tenant, user, role and kind of credential."""
    return Me(**who.me())


@router.post("/login", response_model=LoginAnswer, openapi_extra=body_doc(LoginBody),
             responses={c: {"model": ErrorBody} for c in (401, 413, 422)})
async def login(request: Request, state: GatewayState = Depends(get_state)) -> LoginAnswer:
    """Trade the one-time login token for an API key (see module doc)."""
    raw = await request.body()
    if len(raw) > LOGIN_BODY_BYTES:
        raise ApiError(413, "body_too_large", f"the request body is larger than {LOGIN_BODY_BYTES} bytes")
    try:
        body = LoginBody.model_validate_json(raw)
    except ValidationError as exc:
        raise ApiError(422, "invalid_request", "body must be {\"token\": \"...\"}",
                       validation_details(exc.errors(include_url=False, include_input=False))) from None
    who = await apikeys.redeem_login(state.redis, body.token)
    if who is None:
        raise ApiError(401, "login_token_invalid", "this login link was already used or has expired; "
                       "run `conduit login` for a new link, or use the key in the stack's data directory (admin.key)")
    key, record = await apikeys.create(state.redis, who["tenant_id"], who["user_id"], who["role"],
                                       timedelta(seconds=state.settings.identity.login_key_ttl_s), label="login")
    return LoginAnswer(api_key=key, tenant_id=record.tenant_id, user_id=record.user_id, role=record.role,
                       expires_at=record.expires_at.isoformat() if record.expires_at else "")
