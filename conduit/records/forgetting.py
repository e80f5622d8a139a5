"""Forget means forget (rule M9, docs/agent-rules.md): deleting a remembered fact also removes what
was derived from it, and a user can export everything kept about them.

- **Derived episodes**: an episode (a past question and answer) of the task a deleted fact came
  from (or an earlier version of it came from), or whose text repeats the fact's words, is deleted
  with it (``derived_episodes``, pure).
- **Session summaries**: the rolling summary and the exact values of the fact's sessions lose every
  line and value that repeats the fact's words (``redact_context``, pure; the line becomes ``〔已删除〕``).
- **Semantic cache**: the tenant's cache entries whose question or answer repeats the fact's words
  are deleted (recall joins vector hits with these records, so nothing deleted can be recalled).
- Words: the fact's text and its earlier texts, at least ``MIN_CHARS`` characters each.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from redis.asyncio import Redis

from conduit.records import keys
from conduit.records import memory as records
from conduit.records import sessions
from contracts.api import SessionContext
from contracts.envelope import utcnow
from contracts.memory import CacheEntry, MemoryItem

MIN_CHARS = 2
"""Shortest fact text whose repetition counts as derived (characters)."""
REDACTED = "〔已删除〕"


def words(facts: Iterable[MemoryItem]) -> list[str]:
    """The texts of ``facts`` and of their earlier versions (each at least ``MIN_CHARS`` long)."""
    found = [t for f in facts for t in (f.text, *(c.text for c in f.history))]
    return sorted({t.strip() for t in found if len(t.strip()) >= MIN_CHARS}, key=len, reverse=True)


def derived_episodes(items: Iterable[MemoryItem], facts: list[MemoryItem]) -> list[str]:
    """Ids of the episodes among ``items`` derived from ``facts`` (see the module doc)."""
    tasks = {f.task_id for f in facts} | {c.reason.rsplit("task ", 1)[-1].rstrip(")") for f in facts
                                           for c in f.history if "task " in c.reason}
    said = words(facts)
    return [i.id for i in items if i.type == "episode" and (i.task_id in tasks or any(w in i.text for w in said))]


def redact_context(context: SessionContext, said: list[str]) -> SessionContext | None:
    """``context`` without the lines and values that repeat ``said`` (None: nothing to change)."""
    lines = context.summary.split("\n")
    kept = [REDACTED if any(w in line for w in said) else line for line in lines]
    values = [v for v in context.values if not any(w in v.value or v.value in w for w in said)]
    if kept == lines and len(values) == len(context.values):
        return None
    return context.model_copy(update={"summary": "\n".join(kept), "values": values})


@dataclass(frozen=True)
class Forgotten:
    """What a fact's deletion removed besides the fact: episode ids (their vectors go next), cache
    entries deleted, session contexts redacted."""

    episode_ids: list[str] = field(default_factory=list)
    cache_entries: int = 0
    sessions: int = 0


async def forget_derived(redis: Redis, tenant_id: str, user_id: str, facts: list[MemoryItem], ttl_s: int) -> Forgotten:
    """Delete the episodes and cache entries derived from the deleted ``facts`` and redact their
    sessions' summaries (see the module doc); ``ttl_s``: a redacted context's lifetime (seconds)."""
    if not facts:
        return Forgotten()
    said = words(facts)
    items = await records.list_items(redis, tenant_id, user_id, utcnow())
    episodes = await records.delete_items(redis, tenant_id, user_id, derived_episodes(items, facts))
    cached = await _forget_cache(redis, tenant_id, said)
    changed = 0
    for session_id in sorted({f.session_id for f in facts if f.session_id}):
        changed += await sessions.update_context(redis, session_id, lambda c: redact_context(c, said), ttl_s)
    return Forgotten(episodes, cached, changed)


async def _forget_cache(redis: Redis, tenant_id: str, said: list[str]) -> int:
    """Delete the tenant's cache entries whose question or answer repeats ``said``; their count."""
    gone = 0
    async for raw_key in redis.scan_iter(match=keys.cache_entry(tenant_id, "*"), count=200):
        key = raw_key.decode() if isinstance(raw_key, bytes) else raw_key
        if ":bydoc:" in key:  # the index sets of rule C2, not entries
            continue
        raw = await redis.get(key)
        try:
            entry = CacheEntry.model_validate_json(raw) if raw else None
        except ValueError:
            continue
        if entry is not None and any(w in entry.question or w in entry.answer for w in said):
            gone += await redis.delete(key)
    return gone
