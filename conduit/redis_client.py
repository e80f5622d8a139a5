"""One way to open Redis for every service."""

from __future__ import annotations

from redis.asyncio import Redis

from conduit.settings import Settings


def make_redis(settings: Settings) -> Redis:
    """Return an asyncio Redis client for ``settings.redis()`` (bytes responses)."""
    return Redis.from_url(settings.redis(), decode_responses=False, health_check_interval=30)
