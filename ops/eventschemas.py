"""JSON Schema files of the public agent events, one per ``kind``, in ``docs/schemas/``.

    python -m ops.eventschemas            # rewrite docs/schemas/ from contracts/
    python -m ops.eventschemas --check    # exit 1 when a committed file is stale

Each file ``conduit.agent.<kind>.v<schema_version>.json`` is the JSON Schema (draft 2020-12) of
the record value (the CloudEvent's data: an ``AgentEvent`` envelope) whose payload ``kind`` is
that one; its ``$id`` is the record's ``ce_dataschema`` header (``contracts.cloudevents``).
``tests/unit/test_event_schemas.py`` fails when the committed files differ from ``render()``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import typing
from pathlib import Path
from typing import Any

from contracts import cloudevents
from contracts.envelope import SCHEMA_VERSION
from contracts.events import AgentEvent, AgentEventPayload

OUT = Path(__file__).resolve().parents[1] / "docs" / "schemas"
"""Where the files live (next to ``docs/asyncapi.yaml``)."""


def kinds() -> tuple[str, ...]:
    """Every ``kind`` an ``AgentEventPayload`` may have, in declaration order."""
    return typing.get_args(AgentEventPayload.model_fields["kind"].annotation)


def schema_of(kind: str) -> dict[str, Any]:
    """The JSON Schema of an agent event of ``kind`` (``AgentEvent`` with ``payload.kind`` fixed)."""
    base = AgentEvent.model_json_schema()
    defs = copy.deepcopy(base.pop("$defs"))
    defs["AgentEventPayload"]["properties"]["kind"] = {"const": kind, "type": "string", "title": "Kind"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": cloudevents.dataschema(kind, SCHEMA_VERSION),
        **base,
        "title": cloudevents.ce_type(kind),
        "description": (f"The data of a CloudEvent of type {cloudevents.ce_type(kind)} on conduit.agent.events "
                        f"(schema_version {SCHEMA_VERSION}; docs/events.md). Consumers must ignore unknown fields: "
                        "additionalProperties false describes what Conduit sends today."),
        "$defs": defs,
    }


def render() -> dict[str, str]:
    """File name -> text (2-space JSON, sorted keys, newline at the end) of every schema."""
    return {f"{cloudevents.ce_type(k)}.v{SCHEMA_VERSION}.json":
            json.dumps(schema_of(k), indent=2, sort_keys=True, ensure_ascii=False) + "\n" for k in kinds()}


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) ``docs/schemas/``; returns the exit code."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_known_args(argv)[1]
    files = render()
    if "--check" in args:
        stale = [n for n, text in files.items() if not (OUT / n).exists() or (OUT / n).read_text("utf-8") != text]
        extra = sorted(p.name for p in OUT.glob("*.json") if p.name not in files)
        for name in stale + extra:
            print(f"stale: docs/schemas/{name}", file=sys.stderr)
        return 1 if stale or extra else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for p in OUT.glob("*.json"):
        if p.name not in files:
            p.unlink()
    for name, text in files.items():
        (OUT / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
