"""Check an AG-UI event stream event by event: each event parses as the ``ag-ui-protocol`` model its ``type``
names, and the stream keeps AG-UI's order (a run starts first and ends last with ``RUN_FINISHED`` or
``RUN_ERROR``; text message content only inside its start/end; tool call args and end only after its start, a
result only after its end (or for a call of an earlier run); steps finish in the order they started), and its state
holds together: each ``STATE_DELTA`` (JSON Patch: ``add``, ``replace``, ``remove``) applies to the state the stream
built so far, and a later ``STATE_SNAPSHOT`` agrees with it on what only deltas change (``step``, ``plan``; rule A28). Used by
the unit and stack tests of ``POST /v1/agui`` (docs/agui.md)."""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import Event
from pydantic import TypeAdapter

EVENT = TypeAdapter(Event)
"""The discriminated union of every AG-UI event model (by ``type``)."""


def apply_patch(state: Any, ops: list[dict[str, Any]]) -> Any:
    """``state`` after the JSON Patch ``ops`` (RFC 6902's ``add``, ``replace``, ``remove``; a path's ``-`` appends);
    changed in place and returned. Raises AssertionError for a path that does not exist or another op."""
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = state
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        assert op["op"] in ("add", "replace", "remove"), op
        if isinstance(target, list):
            index = len(target) if last == "-" else int(last)
            if op["op"] == "add":
                target.insert(index, op["value"])
            elif op["op"] == "replace":
                target[index] = op["value"]
            else:
                del target[index]
        else:
            assert op["op"] == "add" or last in target, f"no {op['path']} to {op['op']}"
            if op["op"] == "remove":
                del target[last]
            else:
                target[last] = op["value"]
    return state


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
        self.state: dict[str, Any] | None = None
        """The run's state as its snapshots and deltas built it."""
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
        elif kind == "STATE_SNAPSHOT":
            for key in ("step", "plan"):
                assert self.state is None or self.state.get(key) == data["snapshot"].get(key), (key, self.state, data)
            self.state = json.loads(json.dumps(data["snapshot"]))
        elif kind == "STATE_DELTA":
            assert self.state is not None, "a STATE_DELTA before any STATE_SNAPSHOT"
            apply_patch(self.state, data["delta"])
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            assert kind == "RUN_ERROR" or (not self._texts and not self._steps), "the run ended with things open"
            self.done = True
        return event

    def check_all(self, events: list[dict[str, Any]]) -> list[Any]:
        """``check`` each; the stream must have ended. Returns the parsed models."""
        parsed = [self.check(e) for e in events]
        assert self.done, f"the stream did not end with RUN_FINISHED or RUN_ERROR: {self.types[-5:]}"
        return parsed
