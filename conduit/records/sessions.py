"""Conversations (sessions) and who owns them, in Redis; written by the gateway.

- ``conduit:session:{id}`` hash: ``owner`` (``tenant\\x00user``, set once with HSETNX: the
  first task of a session claims it), ``tenant_id``, ``user_id``, ``title`` (the first
  question), ``turns`` (tasks asked in it), ``created_at``, ``updated_at`` (epoch seconds);
- ``conduit:session:{id}:tasks`` list of its task ids, oldest first;
- ``conduit:session:{id}:turns`` the finished (question, answer) turns the orchestrator
  gives the model (``conduit.records.taskstore.TaskStore.turns``);
- ``conduit:sessions:tenant:{tenant}`` and ``conduit:sessions:user:{h}`` (``h`` = SHA-256 of
  ``tenant\\x00user``, so no id can collide) sorted sets of session ids by ``updated_at``.
Every key lives ``ttl_s`` after the session's last task.

The owner is claimed before the session's first question is published, so every turn the
orchestrator ever writes belongs to a claimed session, and the gateway refuses (404) a
``session_id`` another user owns: its history is never read for them.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from pydantic import BaseModel
from redis.asyncio import Redis
from redis.exceptions import WatchError

from conduit.records import keys, slots
from conduit.records.taskstream import TaskEventLog
from contracts.api import SessionContext


class SessionMeta(BaseModel):
    """A session's summary (``GET /v1/sessions`` items)."""

    session_id: str
    tenant_id: str
    user_id: str
    title: str
    turns: int
    created_at: float
    updated_at: float


meta_key = keys.session
tasks_key = keys.session_tasks
tenant_index = keys.sessions_of_tenant


def user_index(tenant_id: str, user_id: str) -> str:
    """Sorted set of one user's sessions."""
    return keys.sessions_of_user(hashlib.sha256(f"{tenant_id}\x00{user_id}".encode()).hexdigest())


async def claim(redis: Redis, session_id: str, tenant_id: str, user_id: str, title: str, ttl_s: int) -> bool:
    """Make ``(tenant, user)`` the owner of a new session, or confirm it owns an existing one.

    Returns False when another tenant or user owns ``session_id`` (the caller answers 404).
    """
    owner = f"{tenant_id}\x00{user_id}"
    key = meta_key(session_id)
    if await redis.hsetnx(key, "owner", owner):
        now = time.time()
        async with slots.atomic(redis) as pipe:
            pipe.hset(key, mapping={"tenant_id": tenant_id, "user_id": user_id, "title": title[:200],
                                    "turns": 0, "created_at": now, "updated_at": now})
            pipe.expire(key, ttl_s)
            pipe.delete(keys.session_turns(session_id), tasks_key(session_id))  # a deleted session's late leftovers
            await pipe.execute()
        return True
    return (await redis.hget(key, "owner") or b"").decode() == owner


async def add_task(redis: Redis, session_id: str, tenant_id: str, user_id: str, task_id: str, ttl_s: int) -> None:
    """Record one more task of a claimed session (list, turn count, indexes, TTLs)."""
    now = time.time()
    async with redis.pipeline(transaction=False) as pipe:
        pipe.rpush(tasks_key(session_id), task_id)
        pipe.hincrby(meta_key(session_id), "turns", 1)
        pipe.hset(meta_key(session_id), "updated_at", now)
        for key in (meta_key(session_id), tasks_key(session_id)):
            pipe.expire(key, ttl_s)
        for index in (tenant_index(tenant_id), user_index(tenant_id, user_id)):
            pipe.zadd(index, {session_id: now})
            pipe.expire(index, ttl_s)
        await pipe.execute()


async def get(redis: Redis, session_id: str) -> SessionMeta | None:
    """The session's summary, or None when unknown, expired or deleted."""
    raw = await redis.hgetall(meta_key(session_id))
    if b"tenant_id" not in raw:
        return None
    f = {k.decode(): v.decode() for k, v in raw.items()}
    return SessionMeta(session_id=session_id, tenant_id=f["tenant_id"], user_id=f["user_id"], title=f.get("title", ""),
                       turns=int(f.get("turns", 0)), created_at=float(f["created_at"]),
                       updated_at=float(f["updated_at"]))


async def rename(redis: Redis, session_id: str, title: str) -> None:
    """Set the session's ``title`` (at most 200 chars are kept); its TTL and indexes stay as they are."""
    await redis.hset(meta_key(session_id), "title", title[:200])


async def list_sessions(redis: Redis, tenant_id: str, user_id: str | None, limit: int = 100) -> list[SessionMeta]:
    """Newest first: one user's sessions, or (``user_id`` None) the whole tenant's; drops dead ids."""
    index = tenant_index(tenant_id) if user_id is None else user_index(tenant_id, user_id)
    out = []
    for member in await redis.zrevrange(index, 0, limit - 1):
        meta = await get(redis, member.decode())
        if meta is None:
            await redis.zrem(index, member)
        else:
            out.append(meta)
    return out


async def task_ids(redis: Redis, session_id: str) -> list[str]:
    """The session's task ids, oldest first."""
    return [t.decode() for t in await redis.lrange(tasks_key(session_id), 0, -1)]


async def delete(redis: Redis, meta: SessionMeta) -> list[str]:
    """Remove the session: its history, its tasks' records and event logs, its index entries.

    Returns the deleted task ids (the session's own; its team-mode workers' records and logs go too).
    A later task with the same id starts an empty session.
    """
    ids = await task_ids(redis, meta.session_id)
    workers = [t.decode() for t in await redis.lrange(keys.session_workers(meta.session_id), 0, -1)]
    doomed = [meta_key(meta.session_id), tasks_key(meta.session_id), keys.session_turns(meta.session_id),
              keys.session_context(meta.session_id), keys.session_workers(meta.session_id)]
    for task_id in ids + workers:
        doomed += [keys.task(task_id), *TaskEventLog.keys(task_id)]
    async with slots.atomic(redis) as pipe:
        for names in [[k] for k in doomed] if slots.clustered() else [doomed]:  # one slot per DEL (rule O9)
            pipe.delete(*names)
        pipe.zrem(tenant_index(meta.tenant_id), meta.session_id)
        pipe.zrem(user_index(meta.tenant_id, meta.user_id), meta.session_id)
        await pipe.execute()
    return ids


async def load_context(redis: Redis, session_id: str) -> SessionContext:
    """The session's structured state and rolling summary (empty for a new session)."""
    raw = await redis.get(keys.session_context(session_id))
    return SessionContext.model_validate_json(raw) if raw else SessionContext()


async def save_context(redis: Redis, session_id: str, context: SessionContext, ttl_s: int) -> None:
    """Write the session's structured state and rolling summary (lives ``ttl_s`` like its turns)."""
    await redis.set(keys.session_context(session_id), context.model_dump_json(), ex=ttl_s)


async def update_context(redis: Redis, session_id: str,
                         change: Callable[[SessionContext], SessionContext | None], ttl_s: int) -> bool:
    """Apply ``change`` to the stored context atomically (``WATCH``/``MULTI``; retried while another
    writer wins). ``change`` returns the new context or None to leave it. True when it was written."""
    key = keys.session_context(session_id)
    async with redis.pipeline(transaction=True) as pipe:
        while True:
            try:
                await pipe.watch(key)
                raw = await pipe.get(key)
                new = change(SessionContext.model_validate_json(raw) if raw else SessionContext())
                if new is None:
                    await pipe.unwatch()
                    return False
                pipe.multi()
                pipe.set(key, new.model_dump_json(), ex=ttl_s)
                await pipe.execute()
                return True
            except WatchError:
                continue
