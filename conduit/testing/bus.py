"""Test helpers that read the real bus (shared topics: foreign or malformed records are skipped)."""

from __future__ import annotations

import time

from aiokafka import AIOKafkaConsumer
from pydantic import ValidationError

from contracts import topics
from contracts.events import AgentEvent, ToolResult


async def await_tool_result(bootstrap: str, call_id: str, timeout_s: float = 90.0) -> ToolResult:
    """Read ``conduit.tools.results`` from the start until the result of ``call_id`` arrives.

    Records that are not a ``ToolResult`` (other tests publish malformed ones on
    purpose) are skipped. Raises AssertionError after ``timeout_s`` seconds.
    """
    consumer = AIOKafkaConsumer(topics.TOOL_RESULTS, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", fetch_max_wait_ms=10)
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    try:
                        event = ToolResult.model_validate_json(record.value)
                    except ValidationError:
                        continue
                    if event.payload.call_id == call_id:
                        return event
        raise AssertionError(f"no ToolResult for {call_id} within {timeout_s} s")
    finally:
        await consumer.stop()


async def agent_events_of(bootstrap: str, task_id: str, until_kind: str, timeout_s: float = 60.0) -> list[AgentEvent]:
    """Read ``conduit.agent.events`` from the start: the task's public events up to ``until_kind``.

    Returns the task's ``AgentEvent`` list in topic order once one of kind
    ``until_kind`` arrived. Raises AssertionError after ``timeout_s`` seconds.
    """
    consumer = AIOKafkaConsumer(topics.AGENT_EVENTS, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", fetch_max_wait_ms=10)
    await consumer.start()
    found: list[AgentEvent] = []
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    try:
                        event = AgentEvent.model_validate_json(record.value)
                    except ValidationError:
                        continue
                    if event.task_id == task_id:
                        found.append(event)
                        if event.payload.kind == until_kind:
                            return found
        raise AssertionError(f"no {until_kind} for {task_id} within {timeout_s} s; got {[e.payload.kind for e in found]}")
    finally:
        await consumer.stop()
