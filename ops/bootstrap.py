"""First-start identity of the embedded stack: the admin key file and the one-time login link.

- ``ensure_admin_key(settings)``: on first start, creates an admin key of
  ``settings.identity.default_tenant`` (user ``admin``) and writes it to ``<data_dir>/admin.key``
  (mode 0600); on later starts it reuses the file and registers the key again when Redis
  lost it (the embedded Redis can be wiped), so the file stays the one thing to keep; a
  revoked key is replaced by a new one (the file is rewritten).
- ``login_link(settings, base_url)``: ``{base_url}/#login=<token>``, a single-use token for
  that admin valid ``login_token_ttl_s`` seconds, traded for a key by ``POST /v1/login``.
- ``read_admin_key(data_dir)``: the key in the file, or None; what ``ops.client``
  and every CLI command use when no key is given.
Needs Redis up (called by the start path once the stack's Redis runs).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from conduit.runtime.redis_client import make_redis

from conduit.records import apikeys
from conduit.runtime.settings import Settings

ADMIN_USER = "admin"
KEY_FILE = "admin.key"


def admin_key_path(data_dir: Path | str) -> Path:
    """``<data_dir>/admin.key``."""
    return Path(data_dir).resolve() / KEY_FILE


def read_admin_key(data_dir: Path | str) -> str | None:
    """The admin key stored in ``data_dir``, or None when there is no readable file."""
    try:
        key = admin_key_path(data_dir).read_text().strip()
    except OSError:
        return None
    return key or None


def _write_secret(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


async def _ensure(settings: Settings) -> str:
    path = admin_key_path(settings.stack.data_dir)
    redis = make_redis(settings.store)
    try:
        key = read_admin_key(settings.stack.data_dir)
        if key is not None and apikeys.key_id_of(key) is not None and not await apikeys.is_revoked(redis, key):
            if await apikeys.verify(redis, key) is None:  # Redis lost it: register it again
                await apikeys.store(redis, key, settings.identity.default_tenant, ADMIN_USER, "admin", label="bootstrap")
            return key
        key, _ = await apikeys.create(redis, settings.identity.default_tenant, ADMIN_USER, "admin", label="bootstrap")
        _write_secret(path, key)
        return key
    finally:
        await redis.aclose()


def ensure_admin_key(settings: Settings) -> str:
    """Return the stack's admin key, creating it (and ``admin.key``, 0600) on first start.

    Raises ``redis.RedisError`` when Redis is unreachable and ``OSError`` when the file cannot be written.
    """
    return asyncio.run(_ensure(settings))


async def _login_token(settings: Settings) -> str:
    redis = make_redis(settings.store)
    try:
        return await apikeys.create_login(redis, settings.identity.default_tenant, ADMIN_USER, "admin",
                                          settings.identity.login_token_ttl_s)
    finally:
        await redis.aclose()


def login_link(settings: Settings, base_url: str) -> str:
    """A fresh one-time login link ``{base_url}/#login=<token>`` for the stack's admin."""
    return f"{base_url.rstrip('/')}/#login={asyncio.run(_login_token(settings))}"
