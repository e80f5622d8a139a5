"""A documentation-only FastStream app describing every Conduit Kafka topic (AsyncAPI 3.0).

Nothing here runs or connects: the app exists so that

    faststream docs gen ops.asyncapi:app --yaml --out docs/asyncapi.yaml

can write the public event contract from the channel table the services use
(``contracts.channels.CHANNELS``: topic, event types, partition key, consumer groups).
``tests/unit/test_asyncapi.py`` regenerates the document and fails when the committed
``docs/asyncapi.yaml`` is stale.

Shape of the document: one AsyncAPI *channel* per (topic, role):

- ``<topic>:publish`` -- a ``send`` operation, the message schema of what Conduit
  writes to the topic, produced by the service named in the description;
- ``<topic>:<consumer group>`` -- a ``receive`` operation for each Conduit
  consumer group that reads it (the handler's argument type is the schema).

``conduit.agent.events`` (``AgentEvent``) is the one topic meant for other teams;
``docs/events.md`` is its guide. Every other topic is internal to Conduit.
"""

from __future__ import annotations

from typing import Any

from faststream import FastStream
from faststream.kafka import KafkaBroker
from faststream.specification import AsyncAPI

from contracts import topics
from contracts.channels import CHANNELS, Channel

TITLE = "Conduit events"
VERSION = "1.0.0"
"""Version of this event contract document (bump with ``contracts.envelope.SCHEMA_VERSION`` changes)."""

DESCRIPTION = """\
Kafka topics of Conduit, an event-driven agentic question-answering service.

Every message is one JSON-encoded envelope (`event_id`, `type`, `schema_version`,
`occurred_at`, `task_id`, `session_id`, `tenant_id`, `user_id`, `causation_id`,
`traceparent`, `payload`). The Kafka key is the `task_id` (UTF-8), so all events of
one task are in order within one partition. Headers: `type` (the envelope type),
`content-type: application/json`, and `traceparent` when set.

Public: `conduit.agent.events` (AgentEvent), for other teams; see docs/events.md. Its
records are CloudEvents 1.0 in Kafka binary mode (`ce_specversion`, `ce_id`, `ce_source`,
`ce_type` = `conduit.agent.<kind>`, `ce_time`, `ce_subject` = task id, `ce_dataschema`,
`ce_tenantid`, `ce_schemaversion` headers); one JSON Schema per kind in docs/schemas/.
All other topics are internal and may change without notice.
"""


class StableAsyncAPI(AsyncAPI):
    """``AsyncAPI`` whose document lists channels, operations, messages and schemas by name.

    FastStream keeps a broker's subscribers in a ``WeakSet``, so the generated order
    changes from one run to the next; sorting makes ``docs/asyncapi.yaml`` reproducible
    (byte for byte) and its diffs reviewable.
    """

    def to_specification(self) -> Any:
        """Build the AsyncAPI 3.0 schema (faststream's) with every name-keyed map sorted."""
        spec = super().to_specification()
        spec.channels = dict(sorted(spec.channels.items()))
        spec.operations = dict(sorted(spec.operations.items()))
        if spec.components is not None:
            if spec.components.messages:
                spec.components.messages = dict(sorted(spec.components.messages.items()))
            if spec.components.schemas:
                spec.components.schemas = dict(sorted(spec.components.schemas.items()))
        return spec


def _document(broker: KafkaBroker, doc: Channel) -> None:
    """Declare the publisher and the subscribers of one topic on ``broker`` (never started)."""
    broker.publisher(
        doc.topic,
        title=f"{doc.topic}:publish",
        description=f"{doc.summary} Produced by: {doc.producers}. Key: {doc.key} (UTF-8).",
        schema=doc.model,
    )
    for group in doc.consumers:
        consumer = group.removeprefix(f"{topics.PREFIX}-")

        async def handler(event: Any) -> None:  # pragma: no cover - documentation only, never called
            """Documentation only: FastStream reads the message schema from this annotation."""

        # the real type, not the postponed string "Any" (this module uses ``from __future__ import annotations``)
        handler.__annotations__ = {"event": doc.model, "return": None}
        broker.subscriber(
            doc.topic,
            group_id=group,
            title=f"{doc.topic}:{group}",
            description=f"{doc.summary} Consumed by: {consumer} (consumer group {group}).",
        )(handler)


def build_app() -> FastStream:
    """Return the documentation app: a never-started broker with every topic declared."""
    broker = KafkaBroker(
        "kafka:9092",
        description="Conduit's Kafka cluster (compose: kafka:9092; Kubernetes: conduit-kafka-bootstrap:9092).",
    )
    for doc in CHANNELS:
        _document(broker, doc)
    return FastStream(
        broker,
        specification=StableAsyncAPI(title=TITLE, version=VERSION, description=DESCRIPTION),
    )


app = build_app()
