"""Questions on their way to an orchestrator: the wake-up of a question the bus lost.

The gateway records each ``QuestionAsked`` before it publishes it (``record``); the
orchestrator's sweeper starts every recorded question that has no checkpoint
``QUESTION_RESEND_S`` seconds later (``due``, ``load``) and forgets those that have one
(``forget``). A question the broker held in memory when it restarted, and no orchestrator
had read, is therefore started anyway (rule G4, docs/rules.md); starting is idempotent
(``Orchestrator.on_question``), so a late bus delivery changes nothing.
"""

from __future__ import annotations

import time

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from conduit.records import keys, slots
from contracts.events import QuestionAsked

QUESTION_RESEND_S = 5.0
"""Seconds after publishing before a question without a checkpoint is started by the sweeper."""


async def record(redis: Redis, event: QuestionAsked, ttl_s: int, resend_s: float = QUESTION_RESEND_S) -> None:
    """Keep ``event`` (its JSON, ``ttl_s`` seconds) and its wake-up ``resend_s`` seconds from now."""
    async with slots.atomic(redis) as pipe:
        stage(pipe, event, ttl_s, resend_s)
        await pipe.execute()


def stage(pipe: Pipeline, event: QuestionAsked, ttl_s: int, resend_s: float = QUESTION_RESEND_S) -> None:
    """``record``'s two writes, queued on a caller's transaction ``pipe`` (so they land with the
    task's record or not at all)."""
    pipe.set(keys.question(event.task_id), event.model_dump_json(), ex=ttl_s)
    pipe.zadd(keys.QUESTIONS_PENDING, {event.task_id: time.time() + resend_s})


async def due(redis: Redis, limit: int = 50) -> list[str]:
    """Task ids whose question wake-up is due."""
    raw = await redis.zrangebyscore(keys.QUESTIONS_PENDING, "-inf", time.time(), start=0, num=limit)
    return [r.decode() if isinstance(r, bytes) else r for r in raw]


async def load(redis: Redis, task_id: str) -> QuestionAsked | None:
    """The recorded question of ``task_id``, or None when it expired or was forgotten."""
    raw = await redis.get(keys.question(task_id))
    return QuestionAsked.model_validate_json(raw) if raw else None


async def forget(redis: Redis, task_id: str) -> None:
    """Drop the question's record and wake-up (its task has a checkpoint, or it is gone)."""
    async with slots.atomic(redis) as pipe:
        pipe.delete(keys.question(task_id))
        pipe.zrem(keys.QUESTIONS_PENDING, task_id)
        await pipe.execute()
