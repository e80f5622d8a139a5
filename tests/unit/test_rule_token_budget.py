"""Rule G6: a tenant's daily token budget (``conduit.records.tokenbudget``, ``conduit.runtime.tenants``).

The day is the UTC day; the budget is spent when set and reached; a tenant's own budget replaces the
process-wide one; the counter adds a task's tokens to the day it ends and expires after two days.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import pytest

from conduit.records import keys, tokenbudget
from conduit.runtime.settings import Settings
from conduit.runtime.tenants import TenantPolicy, policy


def test_the_budget_is_spent_when_set_and_reached() -> None:
    assert not tokenbudget.spent(10_000, 0), "0 = no budget"
    assert not tokenbudget.spent(999, 1000)
    assert tokenbudget.spent(1000, 1000)
    assert tokenbudget.spent(1500, 1000)


def test_the_day_is_the_utc_day() -> None:
    late_in_shanghai = datetime(2026, 12, 2, 1, 30, tzinfo=timezone(timedelta(hours=8)))
    assert tokenbudget.day_of(late_in_shanghai) == "2026-12-01"
    assert tokenbudget.seconds_to_next_day(datetime(2026, 12, 1, 23, 59, 30, tzinfo=UTC)) == 30
    assert tokenbudget.seconds_to_next_day(datetime(2026, 12, 1, 23, 59, 59, 999_000, tzinfo=UTC)) == 1
    assert keys.tokens_used("acme", "2026-12-01") == "conduit:tokens:tenant:acme:2026-12-01"


def test_a_tenant_budget_replaces_the_setting() -> None:
    settings = Settings(tenant_daily_token_budget=50_000, tenants={"acme": {"daily_token_budget": 1_000},
                                                                    "open": {"daily_token_budget": 0}})
    assert policy(settings, "acme").daily_token_budget == 1_000
    assert policy(settings, "open").daily_token_budget == 0
    assert policy(settings, "other").daily_token_budget == 50_000
    assert policy(Settings(), "other").daily_token_budget == 0
    with pytest.raises(ValueError):
        TenantPolicy(daily_token_budget=-1)


class _Counters:
    """The four Redis commands ``tokenbudget`` sends, over a dict (``pipeline`` runs them in order)."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}
        self.ttl: dict[str, int] = {}
        self.queued: list = []

    async def get(self, key: str) -> bytes | None:
        return str(self.values[key]).encode() if key in self.values else None

    def pipeline(self, transaction: bool = True) -> "_Counters":
        assert transaction, "the add and its expiry go together"
        return self

    async def __aenter__(self) -> "_Counters":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.queued = []

    def incrby(self, key: str, n: int) -> None:
        self.queued.append(lambda: self.values.__setitem__(key, self.values.get(key, 0) + n) or self.values[key])

    def expire(self, key: str, seconds: int) -> None:
        self.queued.append(lambda: self.ttl.__setitem__(key, seconds) or True)

    async def execute(self) -> list:
        return [op() for op in self.queued]


def test_tasks_add_to_the_day_they_end() -> None:
    redis = _Counters()
    evening = datetime(2026, 12, 1, 23, 0, tzinfo=UTC)

    async def run() -> tuple[int, int, int, int]:
        await tokenbudget.add_used(redis, "acme", 600, evening)
        second = await tokenbudget.add_used(redis, "acme", 500, evening)
        nothing = await tokenbudget.add_used(redis, "acme", 0, evening)
        tomorrow = await tokenbudget.used_today(redis, "acme", evening + timedelta(hours=2))
        return second, nothing, await tokenbudget.used_today(redis, "acme", evening), tomorrow

    second, nothing, today, tomorrow = asyncio.run(run())
    assert (second, nothing, today, tomorrow) == (1100, 1100, 1100, 0)
    assert tokenbudget.spent(today, 1000) and not tokenbudget.spent(tomorrow, 1000)
    assert redis.ttl == {keys.tokens_used("acme", "2026-12-01"): tokenbudget.DAY_TTL_S}
