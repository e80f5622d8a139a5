"""Who is asking: the bearer credential of every ``/v1`` route turned into a ``Principal``.

``authenticate`` (a FastAPI dependency on every ``/v1`` router except login) reads
``Authorization: Bearer <credential>``:

- ``CONDUIT_AUTH=keys``: an API key (``conduit.records.apikeys``) looked up in Redis on
  every request, so a revoked key fails on its next request;
- ``CONDUIT_AUTH=jwt``: a JWT verified with PyJWT against ``auth_jwt_jwks_url`` (keys cached,
  fetched again on an unknown ``kid``) or ``auth_jwt_secret`` (HS256), with ``exp``, ``aud``
  and (when set) ``iss`` required; tenant, user and roles come from the claims named by
  settings. API keys are accepted too (the CLI keeps working);
- ``CONDUIT_AUTH=none``: no credential; everyone is the admin of ``default_tenant``
  (allowed only on a loopback listen address, checked by ``check_auth_mode`` at start).

A missing or bad credential is 401 ``unauthenticated`` with ``WWW-Authenticate: Bearer``;
then the request and tenant rate limits apply (``services.gateway.identity.ratelimit``, 429).
Scope rules (docs/security.md): ``can_see`` (owner or tenant admin) and ``require_admin`` (403).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jwt
from fastapi import Depends, Request

from conduit.records import apikeys
from conduit.runtime.settings import IdentitySettings, Settings
from services.gateway.errors import ApiError
from services.gateway.identity.ratelimit import check_rate
from services.gateway.state import GatewayState, get_state

log = logging.getLogger("conduit.gateway.auth")

CHALLENGE = {"WWW-Authenticate": 'Bearer realm="conduit"'}


@dataclass(frozen=True)
class Principal:
    """The caller: ``tenant_id``, ``user_id``, ``role`` (admin|member), ``auth`` (key|jwt|none) and
    ``credential_id`` (the key id, or ``jwt:<sub>``; the per-credential rate-limit bucket)."""

    tenant_id: str
    user_id: str
    role: str
    auth: str
    credential_id: str

    @property
    def is_admin(self) -> bool:
        """True for a tenant admin."""
        return self.role == "admin"

    def me(self) -> dict[str, str]:
        """The ``GET /v1/me`` body."""
        return {"tenant_id": self.tenant_id, "user_id": self.user_id, "role": self.role, "auth": self.auth}


def unauthenticated(message: str = "a valid bearer credential is required") -> ApiError:
    """401 ``unauthenticated`` with the ``WWW-Authenticate`` challenge."""
    return ApiError(401, "unauthenticated", message, headers=CHALLENGE)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_auth_mode(settings: Settings) -> None:
    """Refuse unsafe modes at start; warn for ``none``.

    Raises:
        RuntimeError: ``none`` on a non-loopback ``gateway_host``; ``jwt`` with neither a secret nor a JWKS URL.
    """
    if settings.identity.auth == "none":
        if not is_loopback(settings.gateway.gateway_host):
            raise RuntimeError(f"CONDUIT_AUTH=none is allowed only on a loopback address, not {settings.gateway.gateway_host!r}")
        log.warning("CONDUIT_AUTH=none: every request is the admin of tenant %r (loopback only)", settings.identity.default_tenant)
    if settings.identity.auth == "jwt" and not (settings.identity.auth_jwt_secret or settings.identity.auth_jwt_jwks_url):
        raise RuntimeError("CONDUIT_AUTH=jwt needs CONDUIT_AUTH_JWT_SECRET or CONDUIT_AUTH_JWT_JWKS_URL")


def bearer(request: Request) -> str | None:
    """The credential of ``Authorization: Bearer <credential>``, or None."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    value = value.strip()
    return value if scheme.lower() == "bearer" and value else None


@lru_cache(maxsize=4)
def _jwks_client(url: str, lifespan_s: int, cooldown_s: float) -> jwt.PyJWKClient:
    # PyJWKClient caches the key set for lifespan_s and fetches it again when a token names an
    # unknown kid (at most once per cooldown_s)
    return jwt.PyJWKClient(url, cache_keys=True, lifespan=lifespan_s, timeout=5, cooldown_duration=cooldown_s)


def _roles(value: Any) -> list[str]:
    if isinstance(value, str):
        return value.split()
    return [str(v) for v in value] if isinstance(value, list) else []


def decode_jwt(identity: IdentitySettings, token: str) -> dict[str, Any]:
    """Verify a JWT's signature, ``exp``, ``aud`` (and ``iss`` when set); return its claims.

    Blocking when a JWKS must be fetched (call it in a thread). Raises ``jwt.PyJWTError``.
    """
    if identity.auth_jwt_jwks_url:
        key: Any = _jwks_client(identity.auth_jwt_jwks_url, identity.auth_jwks_cache_s,
                                identity.auth_jwks_refetch_cooldown_s).get_signing_key_from_jwt(token).key
        algorithms = identity.auth_jwt_algorithms
    else:
        key, algorithms = identity.auth_jwt_secret, ["HS256"]
    required = ["exp"] + (["aud"] if identity.auth_jwt_audience else []) + (["iss"] if identity.auth_jwt_issuer else [])
    return jwt.decode(token, key, algorithms=algorithms, audience=identity.auth_jwt_audience,
                      issuer=identity.auth_jwt_issuer, options={"require": required}, leeway=5)


async def _from_jwt(identity: IdentitySettings, token: str) -> Principal:
    try:
        claims = await asyncio.to_thread(decode_jwt, identity, token)
    except jwt.PyJWTError as exc:
        raise unauthenticated(f"the bearer token was rejected: {exc}") from None
    tenant, user = claims.get(identity.auth_jwt_tenant_claim), claims.get(identity.auth_jwt_user_claim)
    if not isinstance(tenant, str) or not tenant or not isinstance(user, str) or not user:
        raise unauthenticated(f"the token lacks the {identity.auth_jwt_tenant_claim!r} or "
                              f"{identity.auth_jwt_user_claim!r} claim")
    role = "admin" if "admin" in _roles(claims.get(identity.auth_jwt_roles_claim)) else "member"
    return Principal(tenant, user, role, "jwt", f"jwt:{tenant}:{user}")


async def identify(state: GatewayState, credential: str | None) -> Principal:
    """The principal of ``credential`` under ``state.settings.identity.auth``; raises 401 ``ApiError``."""
    identity = state.settings.identity
    if identity.auth == "none":
        return Principal(identity.default_tenant, "local", "admin", "none", "none")
    if credential is None:
        raise unauthenticated()
    if credential.startswith(apikeys.PREFIX):
        record = await apikeys.verify(state.redis, credential)
        if record is None:
            raise unauthenticated("the API key is unknown, revoked or expired")
        return Principal(record.tenant_id, record.user_id, record.role, "key", record.key_id)
    if identity.auth == "jwt":
        return await _from_jwt(identity, credential)
    raise unauthenticated("expected an API key (cdk_...)")


async def authenticate(request: Request, state: GatewayState = Depends(get_state)) -> Principal:
    """FastAPI dependency of every non-public route: the caller, rate-limited (401, 429)."""
    principal = await identify(state, bearer(request))
    await check_rate(state, principal.tenant_id, principal.credential_id)
    return principal


def can_see(principal: Principal, tenant_id: str, user_id: str | None) -> bool:
    """Scope rule 1: a resource is the caller's when it is in the caller's tenant and the caller
    owns it or is the tenant's admin."""
    return tenant_id == principal.tenant_id and (principal.is_admin or user_id == principal.user_id)


def require_admin(principal: Principal) -> None:
    """Scope rule 2: tenant-wide writes need the admin role; raises 403 ``forbidden``."""
    if not principal.is_admin:
        raise ApiError(403, "forbidden", "this needs the tenant admin role", {"role": principal.role})
