"""The model endpoint's last configuration error (rule A18, docs/architecture.md), for operators.

An orchestrator whose model call failed with a configuration error (401/403 key, 404 model or base
URL, no quota, no tool calling: ``conduit.runtime.llm.model.CONFIGURATION_CODES``) writes
``{code, message, status, at}`` under ``keys.MODEL_HEALTH`` for ``TTL_S``; the next successful call
on that replica deletes it. ``/readyz`` and ``conduit status`` can show it with one GET (``read``);
the gateway stays ready, since the retrieval-only mode still answers (rule A13).
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from conduit.records import keys

log = structlog.get_logger("conduit.records.modelhealth")

TTL_S = 600
"""Seconds a configuration error is shown without a newer one (10 minutes)."""


async def read(redis: Redis) -> dict[str, Any] | None:
    """The last configuration error ``{code, message, status, at}`` (``at``: epoch seconds) or None."""
    raw = await redis.get(keys.MODEL_HEALTH)
    return orjson.loads(raw) if raw else None


class ModelHealth:
    """One replica's writer of the record: ``failed(exc)`` after a failed call, ``succeeded()`` after a
    good one (a Redis round trip only when this replica wrote the record). Never raises ``RedisError``."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.written = False

    async def failed(self, exc: Any) -> None:
        """Record ``exc`` (a ``ModelError``) when its ``kind`` is ``configuration``."""
        if getattr(exc, "kind", None) != "configuration":
            return
        record = {"code": exc.code, "message": str(exc)[:300], "status": exc.status, "at": round(time.time(), 3)}
        try:
            await self.redis.set(keys.MODEL_HEALTH, orjson.dumps(record), ex=TTL_S)
            self.written = True
        except RedisError as error:
            log.warning("model health record not written", error=repr(error))

    async def succeeded(self) -> None:
        """Delete the record this replica wrote (a call went through: the configuration is fixed)."""
        if not self.written:
            return
        try:
            await self.redis.delete(keys.MODEL_HEALTH)
            self.written = False
        except RedisError as error:
            log.warning("model health record not deleted", error=repr(error))
