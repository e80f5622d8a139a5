"""CloudEvents 1.0 attributes of the public agent events, in Kafka binary mode.

Each record on ``conduit.agent.events`` is a CloudEvent in the Kafka protocol binding's binary
content mode: the attributes travel as ``ce_*`` headers, the record value is the event data (the
``AgentEvent`` envelope as JSON, ``content-type: application/json``), the key the task id.

| header | value |
| --- | --- |
| ``ce_specversion`` | ``1.0`` |
| ``ce_id`` | the envelope's ``event_id`` (deduplicate on it) |
| ``ce_source`` | ``SOURCE`` (``/conduit/orchestrator``) |
| ``ce_type`` | ``TYPE_PREFIX`` + the payload's ``kind``, e.g. ``conduit.agent.task.started`` |
| ``ce_time`` | the envelope's ``occurred_at``, RFC 3339 UTC |
| ``ce_subject`` | the task id |
| ``ce_dataschema`` | ``dataschema(kind, version)``: the ``$id`` of the kind's JSON Schema in ``docs/schemas/`` |
| ``ce_tenantid`` | extension attribute: the envelope's ``tenant_id`` (filter without parsing) |
| ``ce_schemaversion`` | extension attribute: the envelope's ``schema_version`` |
"""

from __future__ import annotations

from contracts.events import AgentEvent

SPECVERSION = "1.0"
SOURCE = "/conduit/orchestrator"
TYPE_PREFIX = "conduit.agent."


def dataschema(kind: str, version: int) -> str:
    """``ce_dataschema`` of a kind: ``urn:conduit:schema:conduit.agent.<kind>:v<version>``, the ``$id``
    of ``docs/schemas/conduit.agent.<kind>.v<version>.json``."""
    return f"urn:conduit:schema:{ce_type(kind)}:v{version}"


def ce_type(kind: str) -> str:
    """The CloudEvents ``type`` of an agent event ``kind`` (``task.started`` -> ``conduit.agent.task.started``)."""
    return TYPE_PREFIX + kind


def headers(event: AgentEvent) -> dict[str, str]:
    """The ``ce_*`` headers of ``event`` (see the module table); values are strings (UTF-8 on the wire)."""
    kind = event.payload.kind
    return {
        "ce_specversion": SPECVERSION,
        "ce_id": str(event.event_id),
        "ce_source": SOURCE,
        "ce_type": ce_type(kind),
        "ce_time": event.occurred_at.isoformat().replace("+00:00", "Z"),
        "ce_subject": event.task_id,
        "ce_dataschema": dataschema(kind, event.schema_version),
        "ce_tenantid": event.tenant_id,
        "ce_schemaversion": str(event.schema_version),
    }
