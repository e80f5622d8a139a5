"""Files produced by tools (code_exec plots, CSV), kept in Redis with a TTL and served to their owner.

Storage (shared, so any gateway replica serves them and a restart loses nothing):
key ``conduit:artifact:{id}`` is a hash ``{meta: ArtifactRecord JSON, data: bytes}`` that
expires after ``settings.sandbox.sandbox_artifact_ttl_s`` seconds (default 86,400). ``id`` is 128
random bits (``secrets.token_urlsafe(16)``), so ids cannot be guessed or enumerated.
Caps: the sandbox keeps at most ``sandbox_artifact_max_files`` files and
``sandbox_artifact_max_bytes`` bytes per run (``services.sandbox.runner``).

Ownership rule (``ArtifactRecord.readable_by``): an artifact is served only when the caller
names the task that produced it (``task_id`` query parameter), is in its tenant, and is the
task's user or the tenant's admin (the credential says which: ``services.gateway.identity.auth``). Anything else
is answered exactly like an unknown id (404), so existence is never revealed.

Media types come from the file extension through an allowlist (``MEDIA_TYPES``); everything
else is ``application/octet-stream``. Names are untrusted (the code chose them).
"""

from __future__ import annotations

import secrets
from datetime import datetime
from pathlib import PurePosixPath

from pydantic import BaseModel, Field
from redis.asyncio import Redis
from conduit.records import keys, slots

from contracts.envelope import utcnow
from contracts.events import ArtifactRef

MEDIA_TYPES = {
    ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
    ".webp": "image/webp", ".pdf": "application/pdf", ".csv": "text/csv", ".tsv": "text/tab-separated-values",
    ".txt": "text/plain", ".json": "application/json", ".md": "text/markdown",
}
"""Extensions served with their own type. Not HTML or SVG: both can run script in a browser."""
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""Types a browser may show inline; all others are served as attachments."""


class ArtifactRecord(BaseModel):
    """What Redis keeps beside the bytes: the public ``ArtifactRef`` fields plus the owner."""

    id: str
    name: str
    media_type: str
    bytes: int
    task_id: str
    tenant_id: str = "default"
    user_id: str | None = None
    tool: str = "code_exec"
    created_at: datetime = Field(default_factory=utcnow)

    def ref(self) -> ArtifactRef:
        """The reference put in the tool result."""
        return ArtifactRef(id=self.id, name=self.name, media_type=self.media_type, bytes=self.bytes,
                           url=f"/v1/artifacts/{self.id}")

    def readable_by(self, task_id: str | None, tenant_id: str, user_id: str, admin: bool = False) -> bool:
        """The ownership rule of the module doc (the caller's ``tenant_id``, ``user_id`` and admin role)."""
        if not task_id or not secrets.compare_digest(task_id.encode(), self.task_id.encode()):
            return False
        if tenant_id != self.tenant_id:
            return False
        return admin or (self.user_id is not None and secrets.compare_digest(user_id.encode(), self.user_id.encode()))


def media_type(name: str) -> str:
    """The served media type of file ``name`` (allowlisted by extension)."""
    return MEDIA_TYPES.get(PurePosixPath(name).suffix.lower(), "application/octet-stream")


def key(artifact_id: str) -> str:
    """Redis key of one artifact."""
    return keys.artifact(artifact_id)


class ArtifactStore:
    """Save and load artifacts in Redis.

    Args:
        redis: asyncio Redis client (bytes responses).
        ttl_s: lifetime of each artifact (seconds).
    """

    def __init__(self, redis: Redis, ttl_s: int) -> None:
        self.redis = redis
        self.ttl_s = ttl_s

    async def save(self, name: str, data: bytes, *, task_id: str, tenant_id: str, user_id: str | None,
                   tool: str = "code_exec") -> ArtifactRecord:
        """Store one file; returns its record (with a new random id)."""
        record = ArtifactRecord(id=secrets.token_urlsafe(16), name=name, media_type=media_type(name), bytes=len(data),
                                task_id=task_id, tenant_id=tenant_id, user_id=user_id, tool=tool)
        async with slots.atomic(self.redis) as pipe:
            pipe.hset(key(record.id), mapping={"meta": record.model_dump_json(), "data": data})
            pipe.expire(key(record.id), self.ttl_s)
            await pipe.execute()
        return record

    async def load(self, artifact_id: str) -> tuple[ArtifactRecord, bytes] | None:
        """``(record, bytes)``, or None when unknown or expired."""
        if not artifact_id or len(artifact_id) > 64:
            return None
        meta, data = await self.redis.hmget(key(artifact_id), ["meta", "data"])
        if meta is None or data is None:
            return None
        return ArtifactRecord.model_validate_json(meta), bytes(data)
