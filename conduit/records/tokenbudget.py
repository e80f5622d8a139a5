"""A tenant's model tokens per UTC day, against its daily token budget (rule G6, docs/operations.md "Token budget").

- The orchestrator adds a top-level task's total tokens (prompt + completion, every model call of the task and,
  in team mode, of its workers) to the tenant's counter for the UTC day the task ends (``add_used``).
- The gateway reads the day's sum before it creates a task (``used_today``) and refuses with 429
  ``token_budget_exceeded`` once ``spent(used, budget)``.

Key: ``keys.tokens_used(tenant, day)``, an integer kept ``DAY_TTL_S`` seconds.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from conduit.records import keys, slots

if TYPE_CHECKING:
    from redis.asyncio import Redis

DAY_TTL_S = 2 * 86_400
"""Seconds a day's counter is kept (past its day: one more day for reading it back)."""


def day_of(now: datetime) -> str:
    """The UTC day of ``now`` (an aware datetime) as ``YYYY-MM-DD``."""
    return now.astimezone(UTC).date().isoformat()


def seconds_to_next_day(now: datetime) -> int:
    """Whole seconds (at least 1) from ``now`` to the next UTC midnight, when a spent budget is new again."""
    utc = now.astimezone(UTC)
    midnight = datetime.combine(utc.date() + timedelta(days=1), datetime.min.time(), UTC)
    return max(1, int((midnight - utc).total_seconds()))


def spent(used: int, budget: int) -> bool:
    """Rule G6: the day's budget is spent when ``budget`` (tokens) is set (> 0) and ``used`` reached it."""
    return budget > 0 and used >= budget


async def add_used(redis: "Redis", tenant_id: str, tokens: int, now: datetime) -> int:
    """Add ``tokens`` to the tenant's counter of ``now``'s UTC day; returns the day's new sum (0 tokens: read only)."""
    key = keys.tokens_used(tenant_id, day_of(now))
    if tokens <= 0:
        return int(await redis.get(key) or 0)
    async with slots.atomic(redis) as pipe:
        pipe.incrby(key, tokens)
        pipe.expire(key, DAY_TTL_S)
        total, _ = await pipe.execute()
    return int(total)


async def used_today(redis: "Redis", tenant_id: str, now: datetime) -> int:
    """Tokens the tenant's finished tasks used on ``now``'s UTC day."""
    return int(await redis.get(keys.tokens_used(tenant_id, day_of(now))) or 0)
