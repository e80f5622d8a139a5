"""The JSON Schema files of the public agent events (``docs/schemas/``, ``ops.eventschemas``)
are current, and real events and the guide's examples validate against them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema

from ops import eventschemas
from contracts import cloudevents
from contracts.events import AgentEvent, AgentEventPayload

ROOT = Path(__file__).resolve().parents[2]


def test_committed_schemas_are_current() -> None:
    files = eventschemas.render()
    committed = {p.name: p.read_text("utf-8") for p in (ROOT / "docs" / "schemas").glob("*.json")}
    assert committed == files, "docs/schemas/ is stale: run `python -m ops.eventschemas`"
    assert len(files) == len(eventschemas.kinds())


def test_every_kind_validates_its_own_events_only() -> None:
    for kind in eventschemas.kinds():
        schema = eventschemas.schema_of(kind)
        jsonschema.Draft202012Validator.check_schema(schema)
        event = AgentEvent(task_id="t1", session_id="s1", payload=AgentEventPayload(kind=kind, tool="kb_search"))
        jsonschema.validate(json.loads(event.model_dump_json()), schema)
        assert schema["$id"] == cloudevents.headers(event)["ce_dataschema"]
        other = "task.started" if kind != "task.started" else "task.completed"
        wrong = json.loads(event.model_dump_json()) | {"payload": {"kind": other}}
        assert not jsonschema.Draft202012Validator(schema).is_valid(wrong), kind


def test_events_guide_examples_match_their_schemas() -> None:
    guide = (ROOT / "docs" / "events.md").read_text(encoding="utf-8")
    for block in re.findall(r"```json\n(.*?)```", guide, flags=re.S):
        value = json.loads(block)
        jsonschema.validate(value, eventschemas.schema_of(value["payload"]["kind"]))


def test_cloudevents_headers_of_an_event() -> None:
    event = AgentEvent(task_id="t9", session_id="s", tenant_id="acme", payload=AgentEventPayload(kind="task.started"))
    h = cloudevents.headers(event)
    assert h["ce_specversion"] == "1.0" and h["ce_id"] == str(event.event_id) and h["ce_subject"] == "t9"
    assert h["ce_type"] == "conduit.agent.task.started" and h["ce_source"] == "/conduit/orchestrator"
    assert h["ce_time"].endswith("Z") and h["ce_tenantid"] == "acme" and h["ce_schemaversion"] == "1"
