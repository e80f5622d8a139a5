"""API keys and one-time login tokens in Redis (read by the gateway, written by the CLI and bootstrap).

A key looks like ``cdk_<key_id>_<secret>``: ``key_id`` (12 hex) is public and names the
record, ``secret`` is 32 random bytes (url-safe base64). Only the SHA-256 of the whole
key is stored (a random 256-bit secret needs no slow hash), so a Redis dump reveals no key.

- ``conduit:apikey:{key_id}`` hash: ``hash``, ``tenant_id``, ``user_id``, ``role``
  (``admin`` | ``member``), ``created_at``, ``expires_at`` (ISO 8601 or empty), ``label``;
  with an expiry the hash also carries a Redis TTL so it disappears by itself.
- ``conduit:apikeys`` set of every ``key_id`` (for ``conduit keys list``).
- ``conduit:login:{sha256(token)}`` JSON ``{tenant_id, user_id, role}`` with a TTL: the
  single-use login token of ``conduit up``'s banner; ``redeem_login`` takes it with GETDEL.

Revoking deletes the hash, so the very next request with that key fails (nothing caches it),
and leaves ``conduit:apikey:{key_id}:revoked`` so the key is never registered again.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel
from redis.asyncio import Redis

from conduit.records import keys, slots

Role = Literal["admin", "member"]
ROLES: tuple[str, ...] = ("admin", "member")
PREFIX = "cdk_"
INDEX = keys.APIKEYS


class KeyRecord(BaseModel):
    """What Redis keeps about a key (never the key itself)."""

    key_id: str
    tenant_id: str
    user_id: str
    role: Role
    created_at: datetime
    expires_at: datetime | None = None
    label: str = ""

    def expired(self, now: datetime | None = None) -> bool:
        """True once ``expires_at`` has passed."""
        return self.expires_at is not None and self.expires_at <= (now or datetime.now(UTC))


record_key = keys.apikey
revoked_key = keys.apikey_revoked


def digest(secret: str) -> str:
    """SHA-256 hex of a key or token."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_key() -> tuple[str, str]:
    """A fresh ``(key_id, key)``."""
    key_id = secrets.token_hex(6)
    return key_id, f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"


def key_id_of(key: str) -> str | None:
    """The ``key_id`` inside a well-formed key, else None."""
    if not key.startswith(PREFIX):
        return None
    key_id, sep, secret = key[len(PREFIX):].partition("_")
    if not sep or len(key_id) != 12 or not secret or any(c not in "0123456789abcdef" for c in key_id):
        return None
    return key_id


async def store(redis: Redis, key: str, tenant_id: str, user_id: str, role: Role = "member",
                expires_in: timedelta | None = None, label: str = "") -> KeyRecord:
    """Register ``key`` (from ``new_key``, or an existing one being restored) and return its record.

    Raises:
        ValueError: malformed key, empty tenant/user, unknown role or a non-positive expiry.
    """
    key_id = key_id_of(key)
    if key_id is None or not tenant_id or not user_id or role not in ROLES:
        raise ValueError("need a cdk_ key, a tenant, a user and a role of admin|member")
    if expires_in is not None and expires_in.total_seconds() <= 0:
        raise ValueError("the expiry must be in the future")
    now = datetime.now(UTC)
    record = KeyRecord(key_id=key_id, tenant_id=tenant_id, user_id=user_id, role=role, created_at=now,
                       expires_at=now + expires_in if expires_in else None, label=label)
    fields = {"hash": digest(key), **{k: ("" if v is None else str(v)) for k, v in
                                      record.model_dump(mode="json", exclude={"key_id"}).items()}}
    async with slots.atomic(redis) as pipe:
        pipe.delete(record_key(key_id))
        pipe.hset(record_key(key_id), mapping=fields)
        if expires_in is not None:
            pipe.expire(record_key(key_id), int(expires_in.total_seconds()) + 1)
        pipe.sadd(INDEX, key_id)
        await pipe.execute()
    return record


async def create(redis: Redis, tenant_id: str, user_id: str, role: Role = "member",
                 expires_in: timedelta | None = None, label: str = "") -> tuple[str, KeyRecord]:
    """Create a random key; returns ``(key, record)`` (the key is shown once, then only its hash exists)."""
    _, key = new_key()
    return key, await store(redis, key, tenant_id, user_id, role, expires_in, label)


def _parse(key_id: str, raw: dict[bytes, bytes]) -> KeyRecord:
    fields = {k.decode(): v.decode() for k, v in raw.items()}
    return KeyRecord(key_id=key_id, tenant_id=fields["tenant_id"], user_id=fields["user_id"], role=fields["role"],
                     created_at=fields["created_at"], expires_at=fields.get("expires_at") or None,
                     label=fields.get("label", ""))


async def verify(redis: Redis, key: str) -> KeyRecord | None:
    """The record of a valid key; None when malformed, unknown, revoked, wrong or expired."""
    key_id = key_id_of(key)
    if key_id is None:
        return None
    raw = await redis.hgetall(record_key(key_id))
    if not raw or not secrets.compare_digest(raw.get(b"hash", b"").decode(), digest(key)):
        return None
    record = _parse(key_id, raw)
    return None if record.expired() else record


async def list_keys(redis: Redis, tenant_id: str | None = None) -> list[KeyRecord]:
    """Every live key's record (optionally one tenant's), oldest first; forgets ids whose record is gone."""
    out = []
    for member in sorted(await redis.smembers(INDEX)):
        key_id = member.decode()
        raw = await redis.hgetall(record_key(key_id))
        if not raw:
            await redis.srem(INDEX, key_id)
            continue
        record = _parse(key_id, raw)
        if tenant_id is None or record.tenant_id == tenant_id:
            out.append(record)
    return sorted(out, key=lambda r: (r.created_at, r.key_id))


async def revoke(redis: Redis, key_id: str) -> bool:
    """Delete a key's record; True when it existed. The next request with the key gets 401."""
    async with slots.atomic(redis) as pipe:
        pipe.delete(record_key(key_id))
        pipe.srem(INDEX, key_id)
        pipe.set(revoked_key(key_id), 1)
        deleted, _, _ = await pipe.execute()
    return bool(deleted)


async def is_revoked(redis: Redis, key: str) -> bool:
    """True when the key's id was revoked."""
    key_id = key_id_of(key)
    return key_id is not None and bool(await redis.exists(revoked_key(key_id)))


def login_key(token: str) -> str:
    """Redis key of a one-time login token (by its hash)."""
    return keys.login(digest(token))


async def create_login(redis: Redis, tenant_id: str, user_id: str, role: Role, ttl_s: int) -> str:
    """A single-use login token for ``(tenant, user, role)`` valid ``ttl_s`` seconds (stored hashed)."""
    token = secrets.token_urlsafe(24)
    await redis.set(login_key(token), json.dumps({"tenant_id": tenant_id, "user_id": user_id, "role": role}),
                    ex=ttl_s)
    return token


async def redeem_login(redis: Redis, token: str) -> dict[str, str] | None:
    """Take a login token (GETDEL: a second use finds nothing); its identity or None."""
    if not token or len(token) > 256:
        return None
    raw = await redis.getdel(login_key(token))
    return json.loads(raw) if raw else None
