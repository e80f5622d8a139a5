"""The envelopes a task's own events carry: who caused them (``parent_of``) and the public
``AgentEvent`` of a kind (``agent_event``). Pure: contracts and the task's state, no client."""

from __future__ import annotations

import uuid
from typing import Any

from contracts.envelope import Envelope
from contracts.events import AgentEvent, AgentEventPayload
from services.orchestrator.agent.state import TaskState


def parent_of(state: TaskState) -> Envelope:
    """The envelope header of the event that last moved ``state`` (parent of what the task sends).

    A checkpoint without a cause (written before causes were kept) gets a fixed id per task.
    """
    cause = state.cause_id or uuid.uuid5(uuid.NAMESPACE_URL, f"conduit:task:{state.task_id}")
    return Envelope(type="orchestrator.cause", event_id=cause, **state.envelope_fields())


def agent_event(state: TaskState, kind: str, fields: dict[str, Any]) -> AgentEvent:
    """The public ``AgentEvent`` of ``kind`` (``AgentEventPayload`` fields) for ``state``'s task; a
    worker's task (team mode) names its supervisor's task in ``parent_task_id``."""
    parent = state.child.parent_task_id if state.child else None
    return parent_of(state).child(AgentEvent, payload=AgentEventPayload(  # type: ignore[return-value]
        kind=kind, parent_task_id=parent, **fields))
