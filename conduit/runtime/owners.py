"""Who runs a tool call, and whether that process still lives (rule T8, docs/rules.md).

A tool service process names itself ``service:host:pid:nonce`` (``owner_id``; the nonce tells a
restarted container's pid 1 from its dead predecessor's). That name is:

- the value of every tool claim the process takes (``keys.tool_claim``), and of its entries in
  ``keys.TOOL_RUNS`` (``owner|task_id|idempotency_key``: what it runs now);
- with ``service:host:pid``, the coordinates of its liveness mark (``keys.alive``);
- the name of every Redis connection of its pool (``CLIENT SETNAME``, ``connection_name``): the
  kernel closes them when the process dies, whatever the signal, so Redis knows at once;
- the field of its entry in ``keys.members(service)`` (the partitions it holds, ``announce``).

Rule T8: an owner is **gone** when Redis has been up for ``OWNER_GRACE_S`` seconds and no Redis
connection carries its name, and that is still so ``CONFIRM_S`` seconds later. Why connections and
not the liveness mark (``keys.alive``, TTL 6 s): the mark outlives a SIGKILLed process by up to 6 s
and stops being renewed while a stopping process still finishes its calls (``serve_process`` stops
the heartbeat first), whereas a connection closes with the process and stays open while it drains.
The grace: after a Redis restart every process reconnects on its next command (its heartbeat runs
every 2 s), so nobody is declared gone before. The second look: a live process whose pool briefly
lost every connection (a read timeout) reconnects on its next command (a running call renews its
claim every 0.5 s). A host that died with its connections half-open is not seen here: its claims
lapse (``CLAIM_TTL_S``, the backstop). ``is_gone`` is the pure rule; ``gone`` reads Redis twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import uuid
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from conduit.records import keys, slots

PROCESS_NONCE = uuid.uuid4().hex[:8]
"""This process's incarnation, written as the value of its liveness mark."""
OWNER_GRACE_S = 6.0
"""Seconds after a Redis (re)start before any owner can be declared gone: the liveness TTL
(``conduit.runtime.liveness``: 3 x the 2 s heartbeat), within which every live process has sent a
command (and so reconnected) at least once."""
CONFIRM_S = 0.3
"""Seconds between the two looks of ``gone``: an owner must look gone in both."""
MEMBERS_EVERY_S = 1.0
"""Seconds between two ``announce`` writes of the partitions a process holds."""
MEMBER_FRESH_S = 5.0
"""A ``members`` entry written longer ago than this is not used to pick a partition."""


def owner_id(service: str) -> str:
    """This process's owner name for ``service``: ``service:host:pid:nonce``."""
    return f"{service}:{socket.gethostname()}:{os.getpid()}:{PROCESS_NONCE}"


def parse(owner: str) -> tuple[str, str, int, str] | None:
    """``(service, host, pid, nonce)`` of an owner name; None for an older claim's value
    (``host:pid:hex``, left to its TTL)."""
    parts = owner.split(":")
    if len(parts) != 4 or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2]), parts[3]


def connection_name(owner: str) -> str:
    """The ``CLIENT SETNAME`` of ``owner``'s Redis connections."""
    return f"conduit-{owner}"


@dataclass(frozen=True)
class Sighting:
    """One look at Redis: its ``uptime_s`` (seconds) and the names of its ``connected`` clients."""

    uptime_s: float
    connected: frozenset[str]


def is_gone(owner: str, seen: Sighting) -> bool:
    """Rule T8 on one look: True when ``owner``'s process is gone (see the module doc); False for
    a live one, within ``OWNER_GRACE_S`` of a Redis start, or for an owner name it cannot read."""
    if parse(owner) is None or seen.uptime_s < OWNER_GRACE_S:
        return False
    return connection_name(owner) not in seen.connected


def _names(client_list: str) -> frozenset[str]:
    """The ``name=`` of every client in a ``CLIENT LIST`` reply."""
    out = set()
    for line in client_list.splitlines():
        for field in line.split(" "):
            if field.startswith("name=") and len(field) > 5:
                out.add(field[5:])
    return frozenset(out)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def sight(redis: Redis) -> Sighting:
    """One look at Redis (one round trip: INFO server and CLIENT LIST); on Redis Cluster, at every primary."""
    if slots.clustered():
        return await _sight_cluster(redis)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.info("server")
        pipe.client_list()
        info, clients = await pipe.execute()
    connected = frozenset(_text(c.get("name", "")) for c in clients) if isinstance(clients, list) else _names(
        _text(clients))
    return Sighting(uptime_s=float(info.get("uptime_in_seconds", 0)), connected=connected)


async def _sight_cluster(redis: Any) -> Sighting:
    """Rule O9 (rule T8 on Redis Cluster): a process's connections spread over the primaries, so the names
    connected are the union of every primary's ``CLIENT LIST``, and the uptime the least of theirs. A primary
    that does not answer (dead, not yet replaced) makes the look say uptime 0: nobody is taken for gone then."""
    names: set[str] = set()
    uptime = float("inf")
    for node in redis.get_primaries():
        try:
            info = await redis.info("server", target_nodes=node)
            clients = await redis.client_list(target_nodes=node)
        except (RedisError, OSError):
            return Sighting(uptime_s=0.0, connected=frozenset())
        info = info if "uptime_in_seconds" in info else next(iter(info.values()), {})
        uptime = min(uptime, float(info.get("uptime_in_seconds", 0)))
        names |= {_text(c.get("name", "")) for c in clients} if isinstance(clients, list) else set(_names(_text(clients)))
    return Sighting(uptime_s=0.0 if uptime == float("inf") else uptime, connected=frozenset(names))


async def gone(redis: Redis, owners: Iterable[str]) -> set[str]:
    """The ``owners`` that are gone (rule T8: gone in two looks ``CONFIRM_S`` apart)."""
    owners = set(owners)
    if not owners:
        return set()
    first = await sight(redis)
    suspects = {o for o in owners if is_gone(o, first)}
    if not suspects:
        return set()
    await asyncio.sleep(CONFIRM_S)
    second = await sight(redis)
    return {o for o in suspects if is_gone(o, second)}


def run_member(owner: str, task_id: str, idempotency_key: str) -> str:
    """The ``keys.TOOL_RUNS`` member of one running call."""
    return f"{owner}|{task_id}|{idempotency_key}"


def parse_run(member: str | bytes) -> tuple[str, str, str] | None:
    """``(owner, task_id, idempotency_key)`` of a ``keys.TOOL_RUNS`` member (None: not one)."""
    parts = _text(member).split("|")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None


def settled_since(last: dict[str, list[int]], since: dict[str, float], parts: dict[str, list[int]],
                  now: float) -> dict[str, float]:
    """Pure: topic -> epoch seconds the partition list of each topic in ``parts`` last changed, from the
    previous ``announce`` write's lists (``last``) and times (``since``); a changed or new list dates from ``now``."""
    return {t: since[t] if t in since and last.get(t) == p else now for t, p in parts.items()}


async def announce(redis: Redis, service: str, owner: str, held: Callable[[], dict[str, list[int]]],
                   every_s: float = MEMBERS_EVERY_S) -> None:
    """Forever: write ``held()`` (topic -> partitions this process holds) as ``owner``'s entry of
    ``keys.members(service)``, with ``since`` (topic -> epoch seconds its partition list last changed:
    the end of the last rebalance this process saw, rule A37); the entry is removed when cancelled (a stop)."""
    last: dict[str, list[int]] = {}
    since: dict[str, float] = {}
    try:
        while True:
            now, parts = time.time(), held()
            since, last = settled_since(last, since, parts, now), parts
            entry = json.dumps({"parts": parts, "since": since, "at": now})
            try:
                await redis.hset(keys.members(service), owner, entry)
            except Exception:  # noqa: BLE001 - Redis down: a rescue then goes by key
                pass
            await asyncio.sleep(every_s)
    finally:
        try:
            await asyncio.shield(redis.hdel(keys.members(service), owner))
        except Exception:  # noqa: BLE001 - Redis down or closing: the entry ages out (MEMBER_FRESH_S)
            pass


TOOL_SERVICES = ("retriever", "web", "sandbox", "mcp")
"""The tool services (``ToolService`` names) whose processes ``announce`` the partitions they hold."""


@dataclass(frozen=True)
class TopicsServed:
    """What the tool services' ``keys.members`` entries say now (``topics_served``).

    ``served``: the request topics some live process serves (its partition list may be empty while
    its group rebalances; a stopping process removes its entry first, rule A29). ``settled``: topic ->
    epoch seconds its consumers' assignment last settled (the latest ``since`` of a member holding a
    partition of it; now while the topic's live members hold none of it: a rebalance under way), rule A37.
    """

    served: frozenset[str] = frozenset()
    settled: dict[str, float] = field(default_factory=dict)


def read_topics_served(entries: Iterable[dict], now: float) -> TopicsServed:
    """Pure: ``TopicsServed`` from ``members`` entries as ``announce`` writes them; an entry written
    more than ``MEMBER_FRESH_S`` seconds before ``now`` is left out."""
    fresh = [e for e in entries if now - e.get("at", 0) <= MEMBER_FRESH_S]
    served = frozenset(t for e in fresh for t in e.get("parts", {}))
    settled: dict[str, float] = {}
    for topic in served:
        holding = [e.get("since", {}).get(topic, e["at"]) for e in fresh if e.get("parts", {}).get(topic)]
        settled[topic] = max(holding) if holding else now
    return TopicsServed(served, settled)


async def topics_served(redis: Redis, services: Iterable[str] = TOOL_SERVICES) -> TopicsServed:
    """``read_topics_served`` over the live entries of every tool service's ``keys.members``.

    One ``HGETALL`` per service. Raises ``redis.exceptions.RedisError`` when Redis does not answer.
    """
    found = await asyncio.gather(*(redis.hgetall(keys.members(s)) for s in services))
    return read_topics_served((json.loads(v) for raw in found for v in raw.values()), time.time())


async def served_topics(redis: Redis, services: Iterable[str] = TOOL_SERVICES) -> frozenset[str]:
    """The request topics some live process of a tool service serves now (``TopicsServed.served``)."""
    return (await topics_served(redis, services)).served


def pick_partition(entries: dict[str, dict], topic: str, avoid: set[str], key: str, now: float) -> int | None:
    """Pure: a partition of ``topic`` held by a fresh member not in ``avoid`` (owner -> entry as
    ``announce`` writes it), chosen by ``key``'s CRC-32 among them; None when there is none."""
    held = sorted({p for owner, e in entries.items() if owner not in avoid and now - e.get("at", 0) <= MEMBER_FRESH_S
                   for p in e.get("parts", {}).get(topic, [])})
    return held[zlib.crc32(key.encode()) % len(held)] if held else None


async def live_partition(redis: Redis, service: str, topic: str, avoid: set[str], key: str) -> int | None:
    """A partition of ``topic`` a live process of ``service`` other than ``avoid`` holds now
    (``pick_partition`` over ``keys.members(service)``; a member without a connection is left out)."""
    raw = await redis.hgetall(keys.members(service))
    entries = {_text(k): json.loads(v) for k, v in raw.items()}
    if not entries:
        return None
    seen = await sight(redis)
    dead = {o for o in entries if connection_name(o) not in seen.connected}
    return pick_partition(entries, topic, avoid | dead, key, time.time())
