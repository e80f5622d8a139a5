"""Request and running-task limits kept in Redis, so every gateway replica spends the same budget.

Requests: two sliding-window counters (the ``limits`` library, ``SlidingWindowCounterRateLimiter``
on Redis through redis-py): per credential (``rate_limit_key_per_minute``) and per tenant
(``rate_limit_tenant_per_minute`` or the tenant's ``rate_limit_per_minute``,
``conduit.runtime.tenants``); 0 turns one off. Over a budget: 429 ``rate_limited`` with
``Retry-After`` (whole seconds until the window lets one more in) and ``details``
``{"scope": "key"|"tenant", "limit_per_minute"}``. Keys: ``conduit:ratelimit/...``.

Running tasks (``admit_task``): sorted sets ``conduit:running:key:{tenant}/{credential}`` and
``conduit:running:tenant:{tenant}`` of task ids (score: creation time). A new task is added,
then counted; over ``running_tasks_per_key`` / the tenant's ``running_tasks`` it is removed
again and answered 429 ``too_many_running_tasks`` (``Retry-After: 5``). Finished tasks (sealed
log) and ids whose record is gone a minute after creation are pruned before counting.

Tokens (``check_token_budget``, rule G6): a tenant whose tasks used its ``daily_token_budget`` (or
``tenant_daily_token_budget``) model tokens on the current UTC day gets 429 ``token_budget_exceeded``
for new tasks (``conduit.records.tokenbudget``; the orchestrator counts a task's tokens when it ends).
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from conduit.records import keys, tokenbudget, slots
from conduit.runtime.tenants import policy

from limits import RateLimitItemPerMinute
from limits.aio.storage import RedisClusterStorage, RedisStorage
from limits.aio.strategies import SlidingWindowCounterRateLimiter

from services.gateway.errors import ApiError

if TYPE_CHECKING:
    from services.gateway.state import GatewayState


def _limiter(state: GatewayState) -> SlidingWindowCounterRateLimiter:
    if state.limiter is None:
        if state.settings.store.redis_cluster:  # limits' cluster storage (its keys are one per limit: rule O9)
            uri = "async+redis+cluster://" + state.settings.store.url().split("://", 1)[1].split("/", 1)[0]
            storage = RedisClusterStorage(uri, implementation="redispy", key_prefix=keys.RATELIMIT_PREFIX)
        else:
            uri = "async+" + state.settings.store.url()
            storage = RedisStorage(uri, implementation="redispy", key_prefix=keys.RATELIMIT_PREFIX)
        state.limiter = SlidingWindowCounterRateLimiter(storage)
    return state.limiter


async def _hit(state: GatewayState, scope: str, per_minute: int, ident: str) -> None:
    if per_minute <= 0:
        return
    limiter, item = _limiter(state), RateLimitItemPerMinute(per_minute)
    if await limiter.hit(item, scope, ident):
        return
    stats = await limiter.get_window_stats(item, scope, ident)
    retry_after = max(1, math.ceil(stats.reset_time - time.time()))
    raise ApiError(429, "rate_limited", f"over {per_minute} requests per minute for this {scope}; retry later",
                   {"scope": scope, "limit_per_minute": per_minute}, headers={"Retry-After": str(retry_after)})


async def check_rate(state: GatewayState, tenant_id: str, credential_id: str) -> None:
    """Count one request against the credential's and the tenant's budgets.

    Raises:
        ApiError: 429 ``rate_limited`` (with ``Retry-After``) when either budget is spent.
    """
    s = state.settings
    await _hit(state, "key", s.limits.rate_limit_key_per_minute, f"{tenant_id}/{credential_id}")
    await _hit(state, "tenant", policy(s, tenant_id).rate_limit_per_minute or 0, tenant_id)


_GRACE_S = 60.0
"""A running-set member without a record is pruned only this long after creation (its record
may still be on its way from another replica)."""


async def _prune(state: GatewayState, key: str) -> None:
    members = await state.redis.zrange(key, 0, -1, withscores=True)
    if not members:
        return
    async with state.redis.pipeline(transaction=False) as pipe:
        for member, _ in members:
            task_id = member.decode()
            pipe.exists(keys.events_terminal(task_id))
            pipe.exists(keys.task(task_id))
        found = await pipe.execute()
    now = time.time()
    done = [m for i, (m, score) in enumerate(members)
            if found[2 * i] or (not found[2 * i + 1] and now - score > _GRACE_S)]
    if done:
        await state.redis.zrem(key, *done)


async def _admit(state: GatewayState, key: str, task_id: str, limit: int, scope: str) -> bool:
    if limit <= 0:
        return False
    await _prune(state, key)
    async with slots.atomic(state.redis) as pipe:
        pipe.zadd(key, {task_id: time.time()})
        pipe.zcard(key)
        pipe.expire(key, state.settings.gateway.task_events_ttl_s)
        _, count, _ = await pipe.execute()
    if count > limit:
        await state.redis.zrem(key, task_id)
        raise ApiError(429, "too_many_running_tasks", f"{limit} tasks of this {scope} are already running; retry later",
                       {"scope": scope, "running_limit": limit}, headers={"Retry-After": "5"})
    return True


async def check_token_budget(state: GatewayState, tenant_id: str) -> None:
    """Rule G6: refuse a new task of a tenant whose model tokens of the current UTC day reached its
    ``daily_token_budget`` (``conduit.records.tokenbudget``).

    Raises:
        ApiError: 429 ``token_budget_exceeded`` with ``Retry-After`` (seconds to the next UTC midnight) and
            ``details`` ``{budget_tokens, used_tokens, day}``.
    """
    budget = policy(state.settings, tenant_id).daily_token_budget or 0
    if budget <= 0:
        return
    now = datetime.now(UTC)
    used = await tokenbudget.used_today(state.redis, tenant_id, now)
    if tokenbudget.spent(used, budget):
        raise ApiError(429, "token_budget_exceeded",
                       f"this tenant's {budget} model tokens for {tokenbudget.day_of(now)} (UTC) are spent; "
                       "new tasks are accepted again after UTC midnight",
                       {"budget_tokens": budget, "used_tokens": used, "day": tokenbudget.day_of(now)},
                       headers={"Retry-After": str(tokenbudget.seconds_to_next_day(now))})


async def admit_task(state: GatewayState, tenant_id: str, credential_id: str, task_id: str) -> None:
    """Count a new task against the credential's and the tenant's running-task limits.

    Raises:
        ApiError: 429 ``too_many_running_tasks`` (``Retry-After: 5``) when either is full
            (the task is then counted nowhere).
    """
    key = keys.running_of_key(tenant_id, credential_id)
    added = await _admit(state, key, task_id, state.settings.limits.running_tasks_per_key, "key")
    try:
        await _admit(state, keys.running_of_tenant(tenant_id), task_id,
                     policy(state.settings, tenant_id).running_tasks or 0, "tenant")
    except ApiError:
        if added:
            await state.redis.zrem(key, task_id)
        raise
