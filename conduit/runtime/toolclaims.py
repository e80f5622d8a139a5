"""The claim of a tool call: one run per idempotency key at a time (rules T6 and T8, docs/rules.md).

A delivery runs a tool only while it holds the call's claim (``keys.tool_claim``, value: the
process's owner name, ``conduit.runtime.owners``), and the run is listed in ``keys.TOOL_RUNS``
while it holds it, so the orchestrator's sweeper can find the calls of a process that died.

- ``take``: the claim is free -> this delivery runs the call; a result is stored -> it is sent
  again; another live run holds it -> this delivery leaves the call to that run (rule T6); the
  holder is gone (rule T8: no Redis connection carries its name) -> this delivery takes the claim
  over and runs the call (the at-least-once floor: a side effect the dead run caused may repeat).
- ``renew``: a running call's claim lives ``CLAIM_TTL_S`` more (queued in the cancel check's round trip).
- ``release``: drop the claim and the run's entry, if this process still holds it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from redis.asyncio import Redis

from conduit.records import keys
from conduit.runtime import owners

log = logging.getLogger("conduit.runtime.toolclaims")

CLAIM_TTL_S = 10
"""Seconds a call's claim lives unless its run renews it (every ``CANCEL_POLL_S`` = 0.5 s): the
backstop when its owner's death is not seen (a host gone with half-open connections, rule T8)."""
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
redis.call('zrem', KEYS[2], ARGV[2])
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
_TAKE_OVER = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('set', KEYS[1], ARGV[2], 'EX', ARGV[3])
redis.call('zrem', KEYS[2], ARGV[4])
redis.call('zadd', KEYS[2], ARGV[6], ARGV[5])
return 1
"""


class Claims:
    """The claims one process takes, as ``owner`` (``owners.owner_id``), on ``redis``."""

    def __init__(self, redis: Redis, owner: str) -> None:
        self.redis, self.owner = redis, owner
        self._release = redis.register_script(_RELEASE)
        self._take_over = redis.register_script(_TAKE_OVER)

    async def take(self, idempotency_key: str, task_id: str) -> tuple[bool, bytes | None]:
        """``(True, None)`` to run the call, ``(False, stored)`` when its result is stored,
        ``(False, None)`` when another live run holds it (see the module doc).

        Raises ``redis.exceptions.RedisError`` when Redis does not answer (the handler fails and
        the message is delivered again).
        """
        claim, result = keys.tool_claim(idempotency_key), keys.tool_result(idempotency_key)
        member = owners.run_member(self.owner, task_id, idempotency_key)
        if await self.redis.set(claim, self.owner, nx=True, ex=CLAIM_TTL_S):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.get(result)
                pipe.zadd(keys.tool_runs_of(idempotency_key), {member: time.time()})
                stored, _ = await pipe.execute()
            if stored is not None:  # stored just before the claim
                await self._release(keys=[claim, keys.tool_runs_of(idempotency_key)], args=[self.owner, member])
                return False, stored
            return True, None
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(claim)
            pipe.get(result)
            holder, stored = await pipe.execute()
        if stored is not None or holder is None:
            return False, stored  # holder None: released just now without a result (transient): a re-send runs it
        holder = holder.decode()
        if holder == self.owner or not await self._gone(holder, task_id, idempotency_key):
            return False, None
        taken = await self._take_over(keys=[claim, keys.tool_runs_of(idempotency_key)], args=[  # one slot (rule O8)
            holder, self.owner, CLAIM_TTL_S, owners.run_member(holder, task_id, idempotency_key), member, time.time()])
        if taken:
            log.warning("call %s: its owner %s is gone; taken over (rule T8)", idempotency_key, holder)
        return bool(taken), None

    async def _gone(self, holder: str, task_id: str, idempotency_key: str) -> bool:
        """Rule T8 for ``holder`` (False when Redis cannot tell: the claim's TTL decides). One look
        suffices when the run's ``TOOL_RUNS`` entry is gone too: an orchestrator saw the owner gone
        twice and took it (rule A23, the usual way here); otherwise ``owners.gone`` looks twice."""
        try:
            if await self.redis.zscore(keys.tool_runs_of(idempotency_key), owners.run_member(holder, task_id, idempotency_key)) is None:
                return owners.is_gone(holder, await owners.sight(self.redis))
            return holder in await owners.gone(self.redis, {holder})
        except Exception as exc:  # noqa: BLE001 - e.g. CLIENT LIST not allowed: the TTL backstop
            log.warning("cannot tell whether %s lives: %r", holder, exc)
            return False

    def renew(self, pipe: Any, idempotency_key: str) -> None:
        """Queue the renewal of this run's claim on ``pipe`` (a Redis pipeline)."""
        pipe.eval(_RENEW, 1, keys.tool_claim(idempotency_key), self.owner, CLAIM_TTL_S)

    async def release(self, idempotency_key: str, task_id: str) -> None:
        """Drop the call's claim if this process still holds it, and the run's ``TOOL_RUNS`` entry."""
        await self._release(keys=[keys.tool_claim(idempotency_key), keys.tool_runs_of(idempotency_key)],
                            args=[self.owner, owners.run_member(self.owner, task_id, idempotency_key)])
