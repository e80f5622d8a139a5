"""The versioned event envelope carried by every message on the bus.

Every Kafka message Conduit sends is one ``Envelope`` subclass serialised as JSON.
The envelope fields identify the task and its lineage; ``payload`` holds the
event-specific body. ``schema_version`` is bumped on breaking payload changes;
consumers reject versions newer than they know (they go to the dead-letter topic).
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID, uuid4

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


def utcnow() -> datetime:
    """Return the current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


class Envelope(BaseModel):
    """Common header of every bus message.

    Fields:
        event_id: unique id of this event (UUID4); handlers dedupe on it.
        type: dotted event type, fixed per subclass (e.g. ``question.asked``).
        schema_version: payload schema version (int).
        occurred_at: UTC time the event was created.
        task_id / session_id: the task and conversation it belongs to;
            ``task_id`` is the partition key (see ``contracts.topics``).
        tenant_id / user_id: who asked; every read is scoped by tenant.
        causation_id: ``event_id`` of the event that caused this one.
        traceparent: W3C trace context, so one question is one trace.
    """

    model_config = ConfigDict(extra="forbid")

    event_id: UUID = Field(default_factory=uuid4)
    type: str
    schema_version: int = SCHEMA_VERSION
    occurred_at: datetime = Field(default_factory=utcnow)
    task_id: str
    session_id: str
    tenant_id: str = "default"
    user_id: str | None = None
    causation_id: UUID | None = None
    traceparent: str | None = None

    def child(self, cls: type["Envelope"], **fields: object) -> "Envelope":
        """Build an event of ``cls`` caused by this one.

        Copies task, session, tenant, user and trace context and sets
        ``causation_id`` to this event's id.
        """
        base = dict(
            task_id=self.task_id,
            session_id=self.session_id,
            tenant_id=self.tenant_id,
            user_id=self.user_id,
            causation_id=self.event_id,
            traceparent=self.traceparent,
        )
        base.update(fields)
        return cls(**base)
