"""Reading the gateway's ``text/event-stream``: lines in, ``SseEvent`` out.

Shared by the HTTP client of the entry points (``ops.client``) and the gateway's MCP tools
(``services/gateway/mcp/out.py``), so it lives below both (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass
class SseEvent:
    """One SSE message: ``id`` (per-task seq), ``event`` (type) and parsed JSON ``data``."""

    id: int | None
    event: str
    data: dict[str, Any]


def iter_sse(lines: Iterator[str]) -> Iterator[SseEvent]:
    """Parse SSE lines into events (comments such as heartbeats are skipped).

    Raises ``json.JSONDecodeError`` when a ``data`` field is not JSON and ``ValueError`` when an ``id`` is
    not an integer.
    """
    eid: int | None = None
    etype = "message"
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield SseEvent(eid, etype, json.loads("\n".join(data)))
            eid, etype, data = None, "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "id":
            eid = int(value)
        elif name == "event":
            etype = value
        elif name == "data":
            data.append(value)
    if data:
        yield SseEvent(eid, etype, json.loads("\n".join(data)))
