"""Retriever replicas on the embedded store (rule K10, docs/rules.md): each replica owns a copy of
the shards; reads go to any one replica, writes are applied by every replica.

The embedded Qdrant Edge shards (knowledge base ``qdrant/``, memory and cache ``memory/``) open in
one process only, so N > 1 replicas without a Qdrant server each keep their own copy:

- replica K = 1 keeps ``{data_dir}/qdrant`` and ``{data_dir}/memory``; replica K > 1 uses
  ``{data_dir}/replicas/K/qdrant`` and ``{data_dir}/replicas/K/memory`` (``replica_dir``);
- reads (``topics.RETRIEVER_REQUESTS``, kb_search requests) are read in the shared group
  ``conduit-retriever`` as before: any one replica answers;
- writes (``topics.RETRIEVER_WRITES``) are read by replica K in a group of its own,
  ``conduit-retriever-writes-K`` (``writes_group``), so every replica applies every write, in
  order per partition key. Writes are idempotent (same point ids, a content hash skips unchanged
  chunks, deletes by filter), so one read twice after a redelivery or a broker restart is harmless;
- a document's record says ``ingested`` only once every replica indexed its request
  (``mark_applied``: the replica that completes the set writes the status); a failure on any
  replica sets ``failed`` with its reason. Memory and cache index writes are eventually
  consistent: a recall on a replica that has not applied one yet misses it for that while. Their
  embedding (most of their cost) is done once: the owner replica of a ``MemoryIndexRequested``
  (``owner_replica``) embeds it and publishes ``MemoryVectorsIndexed``, which every replica upserts;
- ``copy_shards`` (run by ``ops.stack.Stack`` at every start, after the ingest and
  before the retrievers start) replaces each replica K's copy with replica 1's shards. That is
  sound only with the embedded broker, whose topics (and committed offsets) start empty at every
  start; with an external broker the writes groups' committed offsets would not match a fresh
  copy, so the stack refuses N > 1 there (``ops.stack``).

With a Qdrant server (``QDRANT_URL``: one shared store) or one replica (``replicated`` false) the
writes are read once, in the shared group, by the same consumer as the reads, and one apply
completes a document.

This module is light (no model, no store): the stack imports it.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from redis.asyncio import Redis

from conduit.records import keys, slots
from conduit.runtime.settings import Settings
from contracts import topics

SHARD_DIRS = ("qdrant", "memory")
"""The embedded store's shard folders under a replica's directory (knowledge base, memory and cache)."""
WRITES_FETCH_WAIT_MS = 100
"""Fetch wait of a replica's writes consumer (ms; the reads keep ``kafka_fetch_max_wait_ms``, 2 on tansu).
Tansu answers a waiting fetch only when its wait ends, so with 2 ms a consumer that gets a write every
task (memory, cache) never idles and fetches ~400 times a second; a write may wait ~100 ms more instead
(bench: docs/benchmarks.md, issue 17, "Two retriever replicas")."""
APPLIED_TTL_S = 7 * 86400
"""Seconds a document request's set of applying replicas is kept (``mark_applied``)."""


def replicated(settings: Settings) -> bool:
    """True when each replica holds its own copy of the store: the embedded store and N > 1 replicas."""
    return not settings.retrieval.qdrant_url and settings.retrieval.retriever_replicas > 1


def replica_dir(data_dir: Path | str, replica: int) -> Path:
    """The folder holding replica ``replica``'s shard folders: ``data_dir`` for 1, else
    ``data_dir/replicas/K``. Raises ValueError for ``replica`` < 1."""
    if replica < 1:
        raise ValueError(f"retriever replica index must be >= 1, got {replica}")
    return Path(data_dir) if replica == 1 else Path(data_dir) / "replicas" / str(replica)


def shard_dir(settings: Settings, name: str) -> Path:
    """This process's folder of shard ``name`` (one of ``SHARD_DIRS``): ``replica_dir(...) / name``."""
    return replica_dir(settings.stack.data_dir, settings.retrieval.retriever_replica) / name


def writes_group(settings: Settings) -> str | None:
    """The consumer group of this replica's writes consumer: ``conduit-retriever-writes-K`` when
    ``replicated``, else None (the writes are read in the shared group with the reads)."""
    return topics.retriever_writes_group(settings.retrieval.retriever_replica) if replicated(settings) else None


def applies_needed(settings: Settings) -> int:
    """How many replicas must index a document before its record says ``ingested``: N when
    ``replicated``, else 1."""
    return settings.retrieval.retriever_replicas if replicated(settings) else 1


def owner_replica(key: str, replicas: int) -> int:
    """The replica (1..``replicas``) that does the one-time work of a write keyed ``key`` (an event id):
    a memory index request is embedded by its owner only, which publishes the vectors every replica
    applies (``services.retriever.memory``). Stable across processes (SHA-1, not ``hash``)."""
    return int.from_bytes(hashlib.sha1(key.encode("utf-8")).digest()[:8], "big") % max(replicas, 1) + 1


def copy_shards(data_dir: Path | str, replicas: int) -> list[Path]:
    """Replace each replica K's (2..``replicas``) shard folders with copies of replica 1's.

    Call only while no retriever runs (the shards are closed). A copy is written next to its
    target first (``<name>.copying``) and then renamed into place, so a crash mid-copy leaves the
    older copy or none, never half of one; a shard replica 1 does not have is removed from K's
    (K then starts with an empty one, as replica 1 does). Returns the folders written.
    Raises OSError when a copy fails (disk full, permissions).
    """
    written: list[Path] = []
    for k in range(2, replicas + 1):
        target_root = replica_dir(data_dir, k)
        target_root.mkdir(parents=True, exist_ok=True)
        for name in SHARD_DIRS:
            source, target = Path(data_dir) / name, target_root / name
            temp = target_root / f"{name}.copying"
            shutil.rmtree(temp, ignore_errors=True)
            if source.exists():
                shutil.copytree(source, temp)
            shutil.rmtree(target, ignore_errors=True)
            if source.exists():
                temp.rename(target)
                written.append(target)
    return written


async def mark_applied(redis: Redis, tenant_id: str, document_id: str, request_id: str, replica: int,
                       needed: int) -> bool:
    """Record that ``replica`` indexed ingest request ``request_id``; True when that completes the
    set of ``needed`` replicas (this replica then writes ``ingested``).

    One transaction (SADD, EXPIRE, SCARD), so of two replicas finishing together exactly one sees
    the set complete; a replica applying the request again (a redelivery) sees it complete again,
    and writing ``ingested`` twice is harmless. Raises ``redis.RedisError``.
    """
    if needed <= 1:
        return True
    key = keys.document_applied(tenant_id, document_id, request_id)
    async with slots.atomic(redis) as pipe:
        pipe.sadd(key, str(replica))
        pipe.expire(key, APPLIED_TTL_S)
        pipe.scard(key)
        _added, _ttl, count = await pipe.execute()
    return int(count) >= needed
