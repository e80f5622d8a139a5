"""Memory items and semantic-cache entries in Redis: the source of truth (vectors live in the
retriever's memory shard and are only an index of these records).

- ``keys.memory(tenant, h)`` hash: item id -> ``MemoryItem`` JSON (``h`` = SHA-256 of
  ``tenant\\x00user``, so no pair of ids can collide). Expired items are dropped when read.
- ``keys.cache_entry(tenant, id)``: ``CacheEntry`` JSON with a TTL (``cache_ttl_s``, renewed on
  a hit); ``keys.cache_by_document(tenant, document_id)``: the entries citing that document;
  ``keys.cache_live(tenant)``: set for ``cache_ttl_s`` with each entry written or renewed, so it
  outlives every live entry (rule M8, read by ``recall_marks``).

A deleted record is never recalled: recall joins the vector hits with these records.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime

from redis.asyncio import Redis

from conduit.records import keys, slots
from contracts.memory import CacheEntry, MemoryItem


def owner_digest(tenant_id: str, user_id: str) -> str:
    """SHA-256 hex of ``tenant\\x00user`` (the memory hash's and the vector scope's name)."""
    return hashlib.sha256(f"{tenant_id}\x00{user_id}".encode()).hexdigest()


def _key(tenant_id: str, user_id: str) -> str:
    return keys.memory(tenant_id, owner_digest(tenant_id, user_id))


PARSED_MAX = 4096
"""Items kept parsed by ``_parse`` (LRU; ~1 KB of JSON and one model each, so about 8 MB at most)."""

_parsed: OrderedDict[bytes | str, MemoryItem] = OrderedDict()


def _parse(raw: bytes | str) -> MemoryItem:
    """``MemoryItem`` of a stored JSON value, parsed once per distinct value (LRU of ``PARSED_MAX``).

    A recall and a memory write each read ALL of a user's items (up to ``memory_max_episodes`` episodes, rule
    M16, plus facts), and the same values come back on every read: parsing 200 of them cost about 1-3 ms of CPU
    per read (issue 41), a dictionary lookup by the value's bytes about 0.2 µs each. The same value gives the same
    object, so callers treat items as read-only (``model_copy(update=...)`` to change one, as they do).
    Raises pydantic's ``ValidationError`` for a value that is not a ``MemoryItem``."""
    item = _parsed.get(raw)
    if item is None:
        item = _parsed[raw] = MemoryItem.model_validate_json(raw)
        if len(_parsed) > PARSED_MAX:
            _parsed.popitem(last=False)
    else:
        _parsed.move_to_end(raw)
    return item


def _live(item: MemoryItem, now: datetime) -> bool:
    return item.expires_at is None or item.expires_at > now


async def list_items(redis: Redis, tenant_id: str, user_id: str, now: datetime) -> list[MemoryItem]:
    """The user's live items, newest first (shared, read-only objects: ``_parse``); expired ones are deleted on
    the way."""
    raw = await redis.hgetall(_key(tenant_id, user_id))
    items = [_parse(v) for v in raw.values()]
    dead = [i.id for i in items if not _live(i, now)]
    if dead:
        await redis.hdel(_key(tenant_id, user_id), *dead)
    return sorted((i for i in items if _live(i, now)), key=lambda i: (i.created_at, i.id), reverse=True)


async def get_items(redis: Redis, tenant_id: str, user_id: str, ids: list[str], now: datetime) -> dict[str, MemoryItem]:
    """The live items among ``ids`` (missing, deleted or expired ids absent)."""
    if not ids:
        return {}
    raw = await redis.hmget(_key(tenant_id, user_id), ids)
    found = (_parse(v) for v in raw if v is not None)
    return {i.id: i for i in found if _live(i, now)}


async def put_items(redis: Redis, items: Iterable[MemoryItem]) -> None:
    """Write (insert or replace by id) items; each goes to its own user's hash."""
    async with redis.pipeline(transaction=False) as pipe:
        for i in items:
            pipe.hset(_key(i.tenant_id, i.user_id), i.id, i.model_dump_json())
        await pipe.execute()


_TOUCH = """
-- KEYS: one user's memory hash; ARGV: (item id, item JSON) pairs; an item deleted meanwhile stays deleted
for i = 1, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 1
"""


async def touch(redis: Redis, items: Iterable[MemoryItem], now: datetime) -> None:
    """Set ``last_used_at`` of recalled items to ``now`` (only those still present: a deletion wins), one
    script per user (rule O11: one round trip, not two per item)."""
    by_key: dict[str, list[str]] = {}
    for i in items:
        by_key.setdefault(_key(i.tenant_id, i.user_id), []).extend(
            [i.id, i.model_copy(update={"last_used_at": now}).model_dump_json()])
    script = redis.register_script(_TOUCH)  # EVALSHA: the script's text goes once per connection's server
    for key, args in by_key.items():
        await script(keys=[key], args=args)


async def delete_items(redis: Redis, tenant_id: str, user_id: str, ids: list[str] | None) -> list[str]:
    """Delete the user's items ``ids`` (None: every item). Returns the ids that existed."""
    key = _key(tenant_id, user_id)
    if ids is None:
        existing = [k.decode() for k in await redis.hkeys(key)]
        await redis.delete(key)
        return existing
    present = [i for i, v in zip(ids, await redis.hmget(key, ids)) if v is not None] if ids else []
    if present:
        await redis.hdel(key, *present)
    return present


async def put_cache(redis: Redis, entry: CacheEntry, ttl_s: int) -> None:
    """Store ``entry`` for ``ttl_s`` seconds and index it under every document it cites."""
    async with slots.atomic(redis) as pipe:
        pipe.set(keys.cache_entry(entry.tenant_id, entry.id), entry.model_dump_json(), ex=ttl_s)
        pipe.set(keys.cache_live(entry.tenant_id), "1", ex=ttl_s)
        for doc in entry.document_ids:
            pipe.sadd(keys.cache_by_document(entry.tenant_id, doc), entry.id)
            pipe.expire(keys.cache_by_document(entry.tenant_id, doc), ttl_s)
        await pipe.execute()


async def get_cache(redis: Redis, tenant_id: str, entry_id: str) -> CacheEntry | None:
    """The tenant's entry ``entry_id``, or None when expired or invalidated."""
    raw = await redis.get(keys.cache_entry(tenant_id, entry_id))
    return CacheEntry.model_validate_json(raw) if raw else None


async def renew_cache(redis: Redis, entry: CacheEntry, ttl_s: int) -> None:
    """A hit: the entry (and its document indexes) live ``ttl_s`` seconds more."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.expire(keys.cache_entry(entry.tenant_id, entry.id), ttl_s)
        pipe.set(keys.cache_live(entry.tenant_id), "1", ex=ttl_s)
        for doc in entry.document_ids:
            pipe.expire(keys.cache_by_document(entry.tenant_id, doc), ttl_s)
        await pipe.execute()


async def recall_marks(redis: Redis, tenant_id: str, user_id: str | None) -> tuple[bool, bool]:
    """Rule M8's two facts in one round trip: whether the user's memory hash holds an item (False
    without a user) and whether the tenant's cache marker is set."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.exists(_key(tenant_id, user_id) if user_id else keys.cache_live(tenant_id))
        pipe.exists(keys.cache_live(tenant_id))
        has_items, cached = await pipe.execute()
    return bool(has_items) and bool(user_id), bool(cached)


async def invalidate_document(redis: Redis, tenant_id: str, document_id: str) -> list[str]:
    """Remove every cache entry of ``tenant_id`` citing ``document_id`` (re-ingested or deleted).

    Returns the removed entry ids.
    """
    index = keys.cache_by_document(tenant_id, document_id)
    ids = [m.decode() for m in await redis.smembers(index)]
    async with slots.atomic(redis) as pipe:
        for entry_id in ids:
            pipe.delete(keys.cache_entry(tenant_id, entry_id))
        pipe.delete(index)
        await pipe.execute()
    return ids
