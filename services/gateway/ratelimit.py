"""Request rate limits kept in Redis, so every gateway replica spends the same budget.

Two sliding-window counters (the ``limits`` library, ``SlidingWindowCounterRateLimiter`` on
Redis through redis-py): per credential (``rate_limit_key_per_minute``) and per tenant
(``rate_limit_tenant_per_minute``); 0 turns one off. Over a budget the request is answered
429 ``rate_limited`` with ``Retry-After`` (whole seconds until the window lets one more in)
and ``details`` ``{"scope": "key"|"tenant", "limit_per_minute"}``.
Keys: ``conduit:ratelimit/...`` (the library's layout, expiring by themselves).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from limits import RateLimitItemPerMinute
from limits.aio.storage import RedisStorage
from limits.aio.strategies import SlidingWindowCounterRateLimiter

from services.gateway.errors import ApiError

if TYPE_CHECKING:
    from services.gateway.state import GatewayState


def _limiter(state: GatewayState) -> SlidingWindowCounterRateLimiter:
    if state.limiter is None:
        uri = "async+" + state.settings.redis()
        storage = RedisStorage(uri, implementation="redispy", key_prefix="conduit:ratelimit")
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
    await _hit(state, "key", s.rate_limit_key_per_minute, f"{tenant_id}/{credential_id}")
    await _hit(state, "tenant", s.rate_limit_tenant_per_minute, tenant_id)
