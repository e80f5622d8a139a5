"""The orchestrator's outputs: client events, task records, approvals, bus envelopes.

Every envelope it sends is built with ``Envelope.child`` of the event that last moved
the task (``TaskState.cause_id``), so ``causation_id`` is always set and task, session,
tenant, user and trace context flow from the question.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from faststream.kafka import KafkaBroker
from redis.asyncio import Redis

from conduit.records import approvals, tokenbudget
from conduit.records.taskstore import TaskStore
from conduit.records.taskstream import TaskEventLog
from conduit.runtime import bus, metrics, owners
from contracts import topics
from contracts.api import ApprovalRecord, TaskView
from contracts.envelope import utcnow
from contracts.events import (
    CancelPayload,
    QuestionAsked,
    TaskCancelled,
    ToolRequested,
    ToolRequestPayload,
    ToolResult,
)
from contracts.stream import StreamEvent, TaskAccepted
from contracts.tools import request_topic
from services.orchestrator.agent import team
from services.orchestrator.agent.announcing import ended_at
from services.orchestrator.agent.effects import Announcement, UpdateApproval
from services.orchestrator.agent.state import PendingCall, TaskState
from services.orchestrator import spans
from services.orchestrator.envelopes import agent_event, parent_of
from services.orchestrator.store import StateStore

log = logging.getLogger("conduit.orchestrator")


class Outputs:
    """Writes of the orchestrator other than checkpoints.

    Args:
        redis: asyncio Redis client (event logs, records, approvals).
        broker: KafkaBroker for tool requests and public events.
        events / tasks / store: the task event log, task records and checkpoint store.
    """

    def __init__(self, redis: Redis, broker: KafkaBroker, events: TaskEventLog, tasks: TaskStore,
                 store: StateStore) -> None:
        self.redis, self.broker, self.events, self.tasks, self.store = redis, broker, events, tasks, store

    async def emit(self, task_id: str, event: StreamEvent) -> None:
        """Append one client event to the task's log (outside a checkpoint save)."""
        await self.events.append(task_id, event)

    async def write_view(self, view: TaskView) -> None:
        """Write the task's record (``GET /v1/tasks/{id}``)."""
        await self.tasks.save(view)

    async def save_approval(self, record: ApprovalRecord) -> None:
        """Write a new pending approval's record for the gateway."""
        await approvals.save(self.redis, record)

    async def update_approval(self, task_id: str, u: UpdateApproval) -> None:
        """Apply ``u`` to the stored approval record (a missing record is left missing)."""
        record = await approvals.load(self.redis, task_id, u.call_id)
        if record is None or (u.only_if_pending and record.status != "pending"):
            return
        record.status = u.status  # type: ignore[assignment]
        if u.arguments is not None:
            record.arguments = u.arguments
        record.arguments_digest = u.arguments_digest or record.arguments_digest
        if u.escalated_until is not None:  # rule A26
            record.escalated, record.expires_at = True, u.escalated_until
        await approvals.save(self.redis, record)

    async def publish_request(self, state: TaskState, call: PendingCall, rescue: str | None = None) -> None:
        """Send one ``ToolRequested`` to its tool's topic (idempotency key ``task:step:call``); a
        delegate call's is the ``question.asked`` of its worker's task (team mode, rule D2).
        ``rescue``: the gone owner of the call's run; the request goes to a partition a live process
        of that service holds (rule A23), or by key when none is known."""
        assert call.tool is not None  # refused calls (unknown names) are never requested
        if call.tool == "delegate":
            asked = team.child_question(state, call)
            await self.accept_child(asked)
            await bus.publish(self.broker, topics.QUESTIONS, asked)
            return
        request = parent_of(state).child(ToolRequested, payload=ToolRequestPayload(
            call_id=call.call_id, tool=call.tool, arguments=call.arguments, reason=call.reason, step=call.step,
            idempotency_key=call.idempotency_key, deadline_at=call.deadline_at, attempt=call.attempts + 1,
            scope=state.scope_of(call.tool)))  # rule Q2: the task's scope, not the model's arguments
        topic, partition = request_topic(call.tool), None
        parsed = owners.parse(rescue) if rescue else None
        if parsed is not None and rescue is not None:
            try:
                partition = await owners.live_partition(self.redis, parsed[0], topic, {rescue}, state.task_id)
            except Exception:  # noqa: BLE001 - no member list (e.g. CLIENT LIST refused): by key, as any request
                log.warning("no live partition known for a rescue of %s; sent by key", state.task_id)
        await bus.publish(self.broker, topic, request, partition=partition)

    async def accept_child(self, asked: QuestionAsked) -> None:
        """Rule D2: a worker's task exists from its delegate call on, as a task the gateway accepted
        does: an ``accepted`` record and a ``task.accepted`` first event, written once (a re-send
        finds the record and leaves it). So its owner can open its stream before any replica starts
        it, and a worker cancelled before it starts still ends in ``task.cancelled`` there."""
        view = TaskView(task_id=asked.task_id, session_id=asked.session_id, tenant_id=asked.tenant_id,
                        user_id=asked.user_id, status="accepted", question=asked.payload.question, created_at=utcnow())
        if await self.tasks.create_worker(view):
            await self.events.append(asked.task_id, TaskAccepted(
                task_id=asked.task_id, session_id=asked.session_id, question=asked.payload.question))

    async def public(self, state: TaskState, kind: str, **fields: Any) -> None:
        """Put a public ``AgentEvent`` in the outbox for a step that saved no checkpoint (a saved
        step's ``Public`` effects are in its save; ``services.orchestrator.public`` relays both)."""
        await self.store.add_public([agent_event(state, kind, fields)])

    async def announce(self, state: TaskState, decided: Announcement) -> None:
        """Write what the ended task tells, as the core decided it (``announcing.announcement``): the record,
        then the terminal event with its public twin, then the lease's release, the tenant's tokens of the
        day (rule G6) and the session turn. Idempotent: the log seals once, and only the first sealing
        counts the tokens and adds the turn."""
        # the record first: a client that got the terminal event and reads the task sees it ended
        await self.write_view(decided.view)
        public = agent_event(state, decided.public_kind, decided.public_fields)
        # the terminal event and its public twin in one script: sealing the log queues the public event
        first = await self.store.append_terminal(state.task_id, decided.event, public) > 0
        # the client has its terminal event; the bookkeeping writes are independent of each other
        writes = [self.store.release(state.task_id)]
        if first:
            metrics.task_finished(state.status, state.mode)
            spans.record_task(state, ended_at(state))  # rule O6: the task's span ends with its terminal outcome
            if decided.tokens:
                writes.append(tokenbudget.add_used(self.redis, state.tenant_id, decided.tokens, ended_at(state)))
            if (turn := decided.turn) is not None:
                writes.append(self.tasks.add_turn(state.session_id, turn.question, turn.answer,
                                                  evidence=turn.evidence, n=turn.n or None))
        await asyncio.gather(*writes)

    async def report_to_parent(self, state: TaskState, result: ToolResultPayload) -> None:
        """Rule D5: send an ended worker's ``result`` to its supervisor's delegate call (a ``tool.result``
        keyed by the parent's task id; the parent drops a repeat)."""
        assert state.child is not None
        await bus.publish(self.broker, topics.TOOL_RESULTS,
                          parent_of(state).child(ToolResult, task_id=state.child.parent_task_id, payload=result))

    async def cancel_child(self, state: TaskState, child_task_id: str, reason: str) -> None:
        """Rule D8: publish a ``task.cancelled`` for the worker's task ``child_task_id``."""
        event = parent_of(state).child(TaskCancelled, task_id=child_task_id, payload=CancelPayload(reason=reason))
        await bus.publish(self.broker, topics.CONTROL, event)
