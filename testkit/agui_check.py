"""Check an AG-UI event stream event by event: each event parses as the ``ag-ui-protocol`` model its ``type``
names, and the stream keeps AG-UI's order (a run starts first and ends last with ``RUN_FINISHED`` or
``RUN_ERROR``; text message content only inside its start/end; tool call args and end only after its start, a
result only after its end (or for a call of an earlier run); steps finish in the order they started). Used by the unit and stack tests of
``POST /v1/agui`` (docs/agui.md)."""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import Event
from pydantic import TypeAdapter

EVENT = TypeAdapter(Event)
"""The discriminated union of every AG-UI event model (by ``type``)."""


def sse_events(body: str) -> list[tuple[int | None, dict[str, Any]]]:
    """``(id, data JSON)`` of each SSE event of ``body`` (comments skipped; ``id`` None when the event has none)."""
    out = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        lines = [ln for ln in block.split("\n") if ln and not ln.startswith(":")]
        data = "\n".join(ln[5:].lstrip() for ln in lines if ln.startswith("data:"))
        ids = [ln[3:].strip() for ln in lines if ln.startswith("id:")]
        if data:
            out.append((int(ids[0]) if ids else None, json.loads(data)))
    return out


class StreamChecker:
    """Feed events with ``check``; raises AssertionError at the first one out of place or not a valid model."""

    def __init__(self) -> None:
        self.types: list[str] = []
        self._texts: set[str] = set()
        self._calls: set[str] = set()
        self._ended_calls: set[str] = set()
        self._steps: list[str] = []
        self.done = False

    def check(self, data: dict[str, Any]) -> Any:
        """Validate one event (its JSON); returns the parsed model."""
        event = EVENT.validate_python(data)
        kind = data["type"]
        assert not self.done, f"{kind} after the run ended"
        assert self.types or kind == "RUN_STARTED", f"the run must start with RUN_STARTED, not {kind}"
        self.types.append(kind)
        if kind == "TEXT_MESSAGE_START":
            assert data["messageId"] not in self._texts, data
            self._texts.add(data["messageId"])
        elif kind in ("TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"):
            assert data["messageId"] in self._texts, f"{kind} of a message that did not start: {data}"
            if kind == "TEXT_MESSAGE_END":
                self._texts.discard(data["messageId"])
        elif kind == "TOOL_CALL_START":
            self._calls.add(data["toolCallId"])
        elif kind in ("TOOL_CALL_ARGS", "TOOL_CALL_END"):
            assert data["toolCallId"] in self._calls - self._ended_calls, f"{kind} outside its call: {data}"
            if kind == "TOOL_CALL_END":
                self._ended_calls.add(data["toolCallId"])
        elif kind == "TOOL_CALL_RESULT":
            # a call of this stream must have ended; one of an earlier run (resumed after its approval) is known
            assert data["toolCallId"] not in self._calls - self._ended_calls, f"a result before its call ended: {data}"
        elif kind == "STEP_STARTED":
            self._steps.append(data["stepName"])
        elif kind == "STEP_FINISHED":
            assert self._steps and self._steps.pop() == data["stepName"], f"unbalanced step: {data}"
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            assert kind == "RUN_ERROR" or (not self._texts and not self._steps), "the run ended with things open"
            self.done = True
        return event

    def check_all(self, events: list[dict[str, Any]]) -> list[Any]:
        """``check`` each; the stream must have ended. Returns the parsed models."""
        parsed = [self.check(e) for e in events]
        assert self.done, f"the stream did not end with RUN_FINISHED or RUN_ERROR: {self.types[-5:]}"
        return parsed
