"""The agent's task state: everything needed to resume a task on any replica.

Shape (pydantic-ai style: state, model request, model response, history):
``TaskState`` holds the chat history sent to the model (``messages``, OpenAI
chat format), the tool calls in flight (``pending``), the evidence pool, the
budgets used and the step counter. It is checkpointed to Redis after every step
(``services.orchestrator.store``); process memory is only a cache.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from contracts.api import StepRecord, TaskStatus
from contracts.envelope import utcnow
from contracts.events import ToolResultPayload
from contracts.evidence import NumberedEvidence
from contracts.stream import Usage


OUTBOX_RESEND_S = 2.0
"""Seconds after which a tool request saved but not marked sent (its replica died between
the checkpoint and the publish) is sent again by any replica's sweeper."""


class PendingCall(BaseModel):
    """One tool call the model asked for, and its result once back.

    ``idempotency_key`` = ``task_id:step:call_id`` (seed 003); ``deadline_at`` is
    when a missing result becomes a ``timeout`` result.
    """

    call_id: str
    tool: str
    arguments: dict[str, Any]
    reason: str = ""
    step: int
    idempotency_key: str
    requested_at: datetime = Field(default_factory=utcnow)
    deadline_at: datetime
    result: ToolResultPayload | None = None
    received_at: datetime | None = None
    attempts: int = 0
    retry_at: datetime | None = None
    sent: bool = False  # the ToolRequested is on the bus (outbox flag: unsent calls are re-sent by the sweeper)
    approval: Literal["pending", "approved", "rejected", "edited"] | None = None
    arguments_digest: str | None = None
    expires_at: datetime | None = None

    def next_wakeup(self) -> datetime | None:
        """When the sweeper must look at this call: approval expiry, retry time or result deadline."""
        if self.result is not None:
            return None
        if self.approval == "pending":
            return self.expires_at
        if not self.sent:
            return self.requested_at + timedelta(seconds=OUTBOX_RESEND_S)
        return self.retry_at or self.deadline_at


class TaskState(BaseModel):
    """A task's checkpoint. ``version`` increases by one on every save (optimistic concurrency)."""

    version: int = 0
    task_id: str
    session_id: str
    tenant_id: str
    user_id: str | None = None
    traceparent: str | None = None
    question: str
    allowed_tools: list[str]
    status: TaskStatus = "accepted"
    phase: Literal["model", "tools", "done"] = "model"
    step: int = 0
    rounds: int = 0
    tool_calls_used: int = 0
    messages: list[dict[str, Any]] = Field(default_factory=list)
    pending: list[PendingCall] = Field(default_factory=list)
    evidence: list[NumberedEvidence] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    steps: list[StepRecord] = Field(default_factory=list)
    signatures: dict[str, int] = Field(default_factory=dict)  # loop detection: call signature -> count
    rejected: list[str] = Field(default_factory=list)  # signatures a person rejected (never retried)
    trace: list[dict[str, Any]] = Field(default_factory=list)
    mode: Literal["agent", "retrieval_only"] = "agent"
    fallback_reason: str | None = None
    stop_reason: str | None = None  # max_rounds | max_tool_calls | deadline (a limit forced the final call)
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    answer: str | None = None

    @property
    def terminal(self) -> bool:
        """True once completed, failed or cancelled."""
        return self.status in ("completed", "failed", "cancelled")

    def envelope_fields(self) -> dict[str, Any]:
        """Envelope header fields of every event this task sends (task, session, tenant, user, trace)."""
        return dict(task_id=self.task_id, session_id=self.session_id, tenant_id=self.tenant_id,
                    user_id=self.user_id, traceparent=self.traceparent)

    def pending_approvals(self) -> list[PendingCall]:
        """Calls waiting for a human decision."""
        return [c for c in self.pending if c.approval == "pending" and c.result is None]

    def all_results_in(self) -> bool:
        """True when every pending call has a result."""
        return all(c.result is not None for c in self.pending)

    def next_wakeup(self) -> float | None:
        """Epoch seconds at which the sweeper must look at this task's pending calls (earliest
        approval expiry, retry time or result deadline), or None when none waits."""
        times = [t for t in (c.next_wakeup() for c in self.pending) if t is not None]
        return min(times).timestamp() if times else None
