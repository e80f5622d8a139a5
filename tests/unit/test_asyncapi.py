"""The public event contract: docs/asyncapi.yaml (AsyncAPI 3.0) and docs/events.md.

- ``faststream docs gen ops.asyncapi:app --yaml`` is run into a temporary file and
  must equal the committed ``docs/asyncapi.yaml`` byte for byte (regenerate with that
  command, ``--out docs/asyncapi.yaml``, after changing ``contracts``).
- The document has a channel for every topic of ``contracts.topics.ALL_TOPICS`` and
  describes ``conduit.agent.events`` with the ``AgentEvent`` schema.
- Every JSON example in docs/events.md parses as an ``AgentEvent``.
"""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML (a dev dependency) is needed to read the YAML document")

from ops.asyncapi import TITLE  # noqa: E402
from contracts.channels import CHANNELS  # noqa: E402
from contracts import topics  # noqa: E402
from contracts.events import AgentEvent, AgentEventPayload  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "asyncapi.yaml"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The command's document, run in this process (``python -m faststream``'s own CLI object: the modules it
    reads are imported already, a fresh interpreter cost ~1 s more)."""
    from faststream.__main__ import cli  # noqa: PLC0415 - the CLI of `python -m faststream`
    from typer.testing import CliRunner  # noqa: PLC0415

    out = tmp_path_factory.mktemp("asyncapi") / "asyncapi.yaml"
    done = CliRunner().invoke(cli, ["docs", "gen", "ops.asyncapi:app", "--yaml", "--out", str(out)])
    assert done.exit_code == 0, f"{done.output}\n{done.exception!r}"
    return out.read_text(encoding="utf-8")


def test_committed_document_is_up_to_date(generated: str) -> None:
    assert COMMITTED.read_text(encoding="utf-8") == generated, (
        "docs/asyncapi.yaml is stale: run "
        "`faststream docs gen ops.asyncapi:app --yaml --out docs/asyncapi.yaml`"
    )


def test_every_topic_has_a_channel(generated: str) -> None:
    doc = yaml.safe_load(generated)
    assert doc["asyncapi"] == "3.0.0"
    assert doc["info"]["title"] == TITLE
    addresses = {channel["address"] for channel in doc["channels"].values()}
    assert addresses == set(topics.ALL_TOPICS)
    assert [c.topic for c in CHANNELS] == list(topics.ALL_TOPICS)
    for operation in doc["operations"].values():
        assert operation["action"] in ("send", "receive")


def test_agent_events_channel_carries_agent_event(generated: str) -> None:
    doc = yaml.safe_load(generated)
    (name,) = [n for n, c in doc["channels"].items() if c["address"] == topics.AGENT_EVENTS]
    assert "PUBLIC" in doc["channels"][name]["description"]
    (ref,) = [m["$ref"] for m in doc["channels"][name]["messages"].values()]
    message = doc["components"]["messages"][ref.rsplit("/", 1)[-1]]
    assert message["payload"]["$ref"] == "#/components/schemas/AgentEvent"
    schemas = doc["components"]["schemas"]
    event = schemas["AgentEvent"]
    assert set(AgentEvent.model_fields) == set(event["properties"])
    assert event["properties"]["payload"]["$ref"] == "#/components/schemas/AgentEventPayload"
    kinds = typing.get_args(AgentEventPayload.model_fields["kind"].annotation)
    assert schemas["AgentEventPayload"]["properties"]["kind"]["enum"] == list(kinds)
    (op,) = [o for o in doc["operations"].values() if o["channel"]["$ref"] == f"#/channels/{name}"]
    assert op["action"] == "send"


def test_events_guide_examples_are_valid_agent_events() -> None:
    guide = (ROOT / "docs" / "events.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", guide, flags=re.S)
    assert blocks, "docs/events.md has no JSON example"
    for block in blocks:
        event = AgentEvent.model_validate_json(block)
        assert event.type == "agent.event"
        assert json.loads(block)["payload"]["kind"] == event.payload.kind
    assert topics.AGENT_EVENTS in guide
    for field in AgentEvent.model_fields:
        assert f"`{field}`" in guide, f"docs/events.md does not describe {field}"
