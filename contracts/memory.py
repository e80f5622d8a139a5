"""Long-term memory and the semantic cache: items, API bodies, bus events and replies.

HTTP (gateway, ``services/gateway/api/memory.py``): ``GET /v1/memory`` -> ``MemoryList`` (the
caller's items); ``DELETE /v1/memory/{id}`` and ``DELETE /v1/memory`` -> ``MemoryDeleted``.

Records live in Redis (``conduit.records.memory``: the source of truth, read and deleted by id);
vectors live in the retriever's memory shard (collection ``{qdrant_collection}_memory`` on a
Qdrant server), embedded with the knowledge base's embedder. Bus (topic
``contracts.topics.RETRIEVER_REQUESTS``): ``MemoryIndexRequested`` (orchestrator: embed and
store these items / this cache entry), ``MemoryRecallRequested`` (gateway beside the question, rule M13, or
orchestrator: the user's
candidates and a cached answer, reply LPUSHed to ``keys.reply(request_id)``),
``MemoryForgetRequested`` (gateway: remove these vectors); ``MemoryVectorsIndexed`` (a retriever
replica: the vectors it embedded for a ``MemoryIndexRequested``, applied by every replica, rule K10).
The writes travel on ``contracts.topics.RETRIEVER_WRITES``, the recall on ``RETRIEVER_REQUESTS``.
The envelope's ``task_id`` is the partition key (the task's id, or the request id of a deletion).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.envelope import Envelope
from contracts.events import Payload
from contracts.evidence import Citation, NumberedEvidence

MemoryType = Literal["fact", "episode"]
MemorySource = Literal["user_correction", "business_system", "user_stated", "observation", "model_guess"]
"""Where a fact came from, strongest first (a conflict keeps the stronger source's value)."""
CacheOutcome = Literal["hit", "miss", "bypass", "off"]
"""``hit``: the answer was replayed from the cache; ``miss``: looked up, not found; ``bypass``:
``Cache-Control: no-cache``; ``off``: not looked up (not a new session's first turn, or disabled)."""


class MemoryChange(BaseModel):
    """An earlier value of a fact that a stronger or newer statement replaced, and why."""

    text: str
    replaced_at: datetime
    reason: str


class MemoryItem(BaseModel):
    """One remembered item of one user.

    ``topic`` (facts): what the fact is about (``name``, ``workplace``, ``city``, ``default:...``);
    one current fact per topic. ``importance``: 1..10. ``task_id``/``session_id``: the task it came
    from (its source). ``expires_at``: None = kept until deleted (temporary facts: 7 days).
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    tenant_id: str
    user_id: str
    type: MemoryType
    topic: str | None = None
    text: str
    source: MemorySource = "user_stated"
    task_id: str
    session_id: str | None = None
    importance: int = Field(ge=1, le=10)
    confirmed: bool = False
    created_at: datetime
    last_used_at: datetime
    expires_at: datetime | None = None
    citations: list[Citation] = Field(default_factory=list)
    history: list[MemoryChange] = Field(default_factory=list)


class MemoryList(BaseModel):
    """``GET /v1/memory``: the caller's items, newest first, and whether memory is on for the tenant."""

    items: list[MemoryItem]
    enabled: bool


class MemoryDeleted(BaseModel):
    """``DELETE /v1/memory[/{id}]``: how many items were removed (records now, vectors right after)."""

    deleted: int


class CacheEntry(BaseModel):
    """A completed first-turn answer kept for ``cache_ttl_s`` (renewed on a hit).

    ``document_ids``: the documents its evidence came from (re-ingesting or deleting one
    removes the entry).
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    tenant_id: str
    question: str
    answer: str
    citations: list[Citation] = Field(default_factory=list)
    evidence: list[NumberedEvidence] = Field(default_factory=list)
    document_ids: list[str] = Field(default_factory=list)
    task_id: str
    created_at: datetime
    confidence: float | None = None


class RecallCandidate(BaseModel):
    """One memory item found for a question, with its cosine ``relevance`` to it (-1..1)."""

    item: MemoryItem
    relevance: float


class RecallReply(BaseModel):
    """retriever -> orchestrator (Redis ``keys.reply``): the user's candidates by relevance, and the
    cached answer whose question has cosine >= ``cache_min_similarity`` (None: no hit)."""

    request_id: str
    outcome: Literal["ok", "error"] = "ok"
    candidates: list[RecallCandidate] = Field(default_factory=list)
    cached: CacheEntry | None = None
    similarity: float | None = None
    message: str | None = None
    duration_ms: float = 0.0


class MemoryIndexPayload(Payload):
    """orchestrator -> retriever: embed and store ``items`` (replacing points with the same id;
    ``replaced``: ids whose points go) and ``cache`` (a new cache entry)."""

    items: list[MemoryItem] = Field(default_factory=list)
    replaced: list[str] = Field(default_factory=list)
    cache: CacheEntry | None = None


class MemoryRecallPayload(Payload):
    """gateway or orchestrator -> retriever (rule M13): find the user's items for ``query`` (at most ``limit``) and,
    with ``with_cache``, a cached answer of the tenant. Past ``deadline_at`` it is dropped."""

    request_id: str
    query: str
    with_memory: bool = True
    with_cache: bool = False
    limit: int = 20
    min_similarity: float = 0.95
    deadline_at: datetime | None = None


class MemoryForgetPayload(Payload):
    """gateway -> retriever: remove the vectors of the user's items ``ids`` (None: all of them)."""

    ids: list[str] | None = None


class MemoryPoint(BaseModel):
    """One embedded point of the memory shard: ``id`` (UUID5 string), ``vector`` (the embedder's unit
    vector, ``dim`` floats) and its ``payload`` (``tenant_id``, ``document_id`` scope, ``item_id`` or
    ``entry_id``, ``position``)."""

    id: str
    vector: list[float]
    payload: dict[str, Any]


class MemoryVectorsPayload(Payload):
    """retriever replica -> every replica (rule K10): upsert ``points`` and delete the points
    ``delete_ids`` (point ids, not item ids), without embedding anything again."""

    points: list[MemoryPoint] = Field(default_factory=list)
    delete_ids: list[str] = Field(default_factory=list)


class MemoryVectorsIndexed(Envelope):
    """The vectors one retriever replica embedded for a ``MemoryIndexRequested`` (its child: same task id,
    so the same partition), for every replica of the embedded store to apply (rule K10)."""

    type: Literal["memory.vectors_indexed"] = "memory.vectors_indexed"
    payload: MemoryVectorsPayload


class MemoryIndexRequested(Envelope):
    """Store memory items / a cache entry (envelope tenant and user are the owner)."""

    type: Literal["memory.index_requested"] = "memory.index_requested"
    payload: MemoryIndexPayload


class MemoryRecallRequested(Envelope):
    """Recall a user's memory and look up the semantic cache."""

    type: Literal["memory.recall_requested"] = "memory.recall_requested"
    payload: MemoryRecallPayload


class MemoryForgetRequested(Envelope):
    """Forget a user's items (the records are already gone)."""

    type: Literal["memory.forget_requested"] = "memory.forget_requested"
    payload: MemoryForgetPayload
