"""The task record read by ``GET /v1/tasks/{id}`` and session history, in Redis.

Key ``conduit:task:{task_id}`` holds a ``contracts.api.TaskView`` as JSON with a
TTL. The gateway creates it on ``POST``; the orchestrator rewrites it as the
task advances. Session turns (question, answer) live in the list
``conduit:session:{session_id}:turns`` so a follow-up question sees earlier turns.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from conduit.records import keys, slots
from contracts.api import TaskView


class TaskOwner(BaseModel):
    """Who owns a task record: the two fields the gateway's scope check reads (the rest is skipped)."""

    model_config = ConfigDict(extra="ignore", cache_strings=False)
    tenant_id: str = "default"
    user_id: str | None = None


class TaskStore:
    """Read and write task records and session turns.

    Args:
        redis: asyncio Redis client.
        ttl_s: lifetime of records and session history (seconds).
    """

    def __init__(self, redis: Redis, ttl_s: int = 86400) -> None:
        self.redis = redis
        self.ttl_s = ttl_s

    @staticmethod
    def key(task_id: str) -> str:
        """Redis key of a task record."""
        return keys.task(task_id)

    async def save(self, view: TaskView) -> None:
        """Write (create or replace) a task record."""
        await self.redis.set(self.key(view.task_id), view.model_dump_json(), ex=self.ttl_s)

    def stage_save(self, pipe: Pipeline, view: TaskView) -> None:
        """``save``, queued on a caller's pipeline or transaction ``pipe``."""
        pipe.set(self.key(view.task_id), view.model_dump_json(), ex=self.ttl_s)

    async def create(self, view: TaskView) -> bool:
        """Write a new task record unless one exists (``SET NX``); True when this call created it."""
        return bool(await self.redis.set(self.key(view.task_id), view.model_dump_json(), ex=self.ttl_s, nx=True))

    async def create_worker(self, view: TaskView) -> bool:
        """``create`` for a team-mode worker's task, noted in its session's worker list so that
        deleting the session deletes it too; True when this call created it."""
        if not await self.create(view):
            return False
        key = keys.session_workers(view.session_id)
        async with slots.atomic(self.redis) as pipe:
            pipe.rpush(key, view.task_id)
            pipe.expire(key, self.ttl_s)
            await pipe.execute()
        return True

    async def get(self, task_id: str) -> TaskView | None:
        """Return the record, or None if unknown or expired."""
        raw = await self.redis.get(self.key(task_id))
        return TaskView.model_validate_json(raw) if raw else None

    async def owner(self, task_id: str) -> TaskOwner | None:
        """The record's tenant and user, or None if unknown or expired (builds no ``TaskView``)."""
        raw = await self.redis.get(self.key(task_id))
        return TaskOwner.model_validate_json(raw) if raw else None

    async def exists(self, task_id: str) -> bool:
        """True while the record exists (one ``EXISTS``; nothing is parsed)."""
        return bool(await self.redis.exists(self.key(task_id)))

    async def add_turn(self, session_id: str, question: str, answer: str, max_turns: int = 50,
                       evidence: list[dict] | None = None, n: int | None = None) -> None:
        """Append one finished (question, answer) turn to a session's history; ``evidence`` (numbered
        evidence as JSON) when the turn ended asking the user a question (the reply continues with it);
        ``n``: its 1-based number in the session (the rolling summary counts turns by it)."""
        key = keys.session_turns(session_id)
        turn: dict = {"question": question, "answer": answer} | ({"n": n} if n else {})
        if evidence:
            turn["evidence"] = evidence
        async with self.redis.pipeline(transaction=False) as pipe:  # one round trip
            pipe.rpush(key, json.dumps(turn, ensure_ascii=False))
            pipe.ltrim(key, -max_turns, -1)
            pipe.expire(key, self.ttl_s)
            await pipe.execute()

    async def turns(self, session_id: str, last: int) -> list[dict]:
        """Return the session's last ``last`` turns, oldest first: ``[{question, answer, evidence?}]``."""
        if last <= 0:
            return []
        raw = await self.redis.lrange(keys.session_turns(session_id), -last, -1)
        return [json.loads(r) for r in raw]
