"""Test helpers that read the real bus (shared topics: foreign or malformed records are skipped)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TypeVar

from aiokafka import AIOKafkaConsumer
from pydantic import BaseModel, ValidationError

from contracts import topics
from contracts.events import AgentEvent, DeadLetter, ToolResult

M = TypeVar("M", bound=BaseModel)


async def _events(bootstrap: str, topic: str, model: type[M], timeout_s: float) -> AsyncIterator[M]:
    """Yield the records of ``topic`` from the start that parse as ``model``, for ``timeout_s`` seconds.

    Records that do not parse (other tests publish malformed ones on purpose) are
    skipped. The iteration simply ends at the deadline; the caller decides what that means.
    """
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", fetch_max_wait_ms=10)
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    try:
                        yield model.model_validate_json(record.value)
                    except ValidationError:
                        continue
    finally:
        await consumer.stop()


async def await_tool_result(bootstrap: str, call_id: str, timeout_s: float = 90.0) -> ToolResult:
    """Read ``conduit.tools.results`` from the start until the result of ``call_id`` arrives.

    Raises AssertionError after ``timeout_s`` seconds.
    """
    async with aclosing(_events(bootstrap, topics.TOOL_RESULTS, ToolResult, timeout_s)) as events:
        async for event in events:
            if event.payload.call_id == call_id:
                return event
    raise AssertionError(f"no ToolResult for {call_id} within {timeout_s} s")


async def agent_events_of(bootstrap: str, task_id: str, until_kind: str, timeout_s: float = 60.0) -> list[AgentEvent]:
    """Read ``conduit.agent.events`` from the start: the task's public events up to ``until_kind``.

    Returns the task's ``AgentEvent`` list in topic order once one of kind
    ``until_kind`` arrived. Raises AssertionError after ``timeout_s`` seconds.
    """
    found: list[AgentEvent] = []
    async with aclosing(_events(bootstrap, topics.AGENT_EVENTS, AgentEvent, timeout_s)) as events:
        async for event in events:
            if event.task_id == task_id:
                found.append(event)
                if event.payload.kind == until_kind:
                    return found
    raise AssertionError(f"no {until_kind} for {task_id} within {timeout_s} s; got {[e.payload.kind for e in found]}")


async def await_dead_letter(bootstrap: str, consumer: str, task_id: str, timeout_s: float = 60.0) -> DeadLetter:
    """Read ``conduit.dead-letter`` from the start until ``consumer`` dead-lettered an event of ``task_id``.

    Raises AssertionError after ``timeout_s`` seconds.
    """
    async with aclosing(_events(bootstrap, topics.DEAD_LETTER, DeadLetter, timeout_s)) as events:
        async for event in events:
            if event.payload.consumer == consumer and event.task_id == task_id:
                return event
    raise AssertionError(f"no dead letter of {task_id} from {consumer} within {timeout_s} s")
