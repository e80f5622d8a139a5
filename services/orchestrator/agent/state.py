"""The agent's task state: everything needed to resume a task on any replica.

Shape (pydantic-ai style: run state kept apart from dependencies):
``TaskState`` holds the chat history sent to the model (``messages``, OpenAI
chat format), the tool calls in flight (``pending``), the evidence pool, the
budgets used and the step counter. It is checkpointed to Redis after every
transition (``services.orchestrator.store``); process memory is only a cache.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from enum import Enum
from typing import Any, Literal, get_args
from uuid import UUID

from pydantic import BaseModel, Field, model_validator

from contracts.api import StepRecord, TaskStatus
from contracts.envelope import utcnow
from contracts.events import ChildSpec, ToolError, ToolResultPayload
from contracts.evidence import NumberedEvidence
from contracts.mcp import McpTool
from contracts.scope import Scope
from contracts.stream import MemoryNote, PlanItem, Usage
from contracts.tools import AnyToolName, ToolName
from services.orchestrator.agent import dates

TOOL_RESEND_S = 10.0
"""Seconds between two sends of a request still without a result (rule A14): a request the
broker lost in a restart (tansu keeps topics in memory) runs before its deadline; tool services
answer a repeat from their store or leave it to the run in progress (rule T6)."""
OUTBOX_RESEND_S = 2.0
"""Seconds after which a tool request saved but not marked sent (its replica died between
the checkpoint and the publish) is sent again by any replica's sweeper."""


class Phase(str, Enum):
    """What a task waits for: a model step, tool results (or approvals), or nothing (ended)."""

    MODEL = "model"
    TOOLS = "tools"
    DONE = "done"


class Refusal(BaseModel):
    """A call answered by the agent itself without running: not offered, bad arguments, loop,
    budget, open breaker, rejected or expired approval. Reads like an ``error`` tool result."""

    refused: Literal[True] = True
    outcome: Literal["error"] = "error"
    error: ToolError
    duration_ms: float = 0.0


class Failure(BaseModel):
    """Why a task failed: machine-readable ``code`` and human ``message``."""

    code: str
    message: str


class Cancellation(BaseModel):
    """Why a task was cancelled."""

    reason: str


class PendingCall(BaseModel):
    """One tool call the model asked for, and its result once back.

    ``name`` is the tool name as the model asked for it; ``tool`` is that name when it
    is a known tool and None otherwise (such a call is always refused: it never runs).
    ``idempotency_key`` = ``task_id:step:call_id``; ``deadline_at`` is when a missing
    result becomes a ``timeout`` result.
    """

    call_id: str
    name: str
    tool: AnyToolName | None = None
    arguments: dict[str, Any]
    reason: str = ""
    step: int
    idempotency_key: str
    requested_at: datetime = Field(default_factory=utcnow)
    deadline_at: datetime
    result: ToolResultPayload | Refusal | None = None
    received_at: datetime | None = None
    attempts: int = 0
    retry_at: datetime | None = None
    sent: bool = False  # the ToolRequested is on the bus (outbox flag: unsent calls are re-sent by the sweeper)
    sent_at: datetime | None = None  # when it was last sent again (rule A14); None: first sent at requested_at
    approval: Literal["pending", "approved", "rejected", "edited"] | None = None
    escalated: bool = False  # its approval was escalated to a tenant admin (rule A26)
    arguments_digest: str | None = None
    expires_at: datetime | None = None
    child: ChildSpec | None = None  # a delegate call's child task, once started (team mode, rule D4)

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        """A checkpoint written before calls kept ``name`` apart from ``tool`` (rolling upgrade)."""
        if isinstance(data, dict) and "name" not in data and "tool" in data:
            data = {**data, "name": data["tool"], "tool": data["tool"] if data["tool"] in get_args(ToolName) else None}
        return data

    def next_wakeup(self) -> datetime | None:
        """When the sweeper must look at this call: approval expiry, retry time or result deadline."""
        if self.result is not None:
            return None
        if self.approval == "pending":
            return self.expires_at
        if not self.sent:
            return (self.sent_at or self.requested_at) + timedelta(seconds=OUTBOX_RESEND_S)
        return self.retry_at or min(self.deadline_at, self.resend_at())

    def resend_at(self) -> datetime:
        """When a sent request still without a result is sent again (rule A14, ``TOOL_RESEND_S``)."""
        return (self.sent_at or self.requested_at) + timedelta(seconds=TOOL_RESEND_S)


class TaskState(BaseModel):
    """A task's checkpoint. ``version`` increases by one on every save (optimistic concurrency).

    ``cause_id`` is the ``event_id`` of the bus event that last moved the task: every
    envelope the orchestrator sends for it is that event's child (``Envelope.child``).
    """

    version: int = 0
    task_id: str
    session_id: str
    tenant_id: str
    user_id: str | None = None
    traceparent: str | None = None  # with tracing on, the task span's reserved context (rule O6, ``spans.py``)
    trace_parent: str | None = None  # the task span's parent (the question's consumer span); None: tracing was off
    cause_id: UUID | None = None
    question: str
    allowed_tools: list[str]
    mcp_tools: list[McpTool] = Field(default_factory=list)  # the tenant's MCP tools offered, as listed at the start
    status: TaskStatus = "accepted"
    phase: Phase = Phase.MODEL
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
    recent_calls: list[str] = Field(default_factory=list)  # last call signatures in order (A<->B oscillation, rule E7)
    tool_counts: dict[str, int] = Field(default_factory=dict)  # calls that ran, per tool (quotas, rule E5)
    bad_arguments: dict[str, int] = Field(default_factory=dict)  # calls refused for bad arguments, per tool (rule E6)
    failed_steps: int = 0  # consecutive steps whose every tool call failed or was refused (rule E3)
    forced_final: bool = False  # the model gave an empty answer; one final call without tools follows (rule E4)
    context_folds: int = 0  # histories folded after the model said its context was exceeded (rule A18, once)
    window_chars: int | None = None  # the history window after such a fold (rule A18; None: context_window_chars)
    trace: list[dict[str, Any]] = Field(default_factory=list)
    mode: Literal["agent", "retrieval_only", "chitchat", "out_of_scope"] = "agent"
    fallback_reason: str | None = None
    model: str | None = None  # the configured model the request named (rule A20; None: the tenant's chain)
    models_failed: list[str] = Field(default_factory=list)  # endpoints that failed before a token since the last reply (rule A21)
    answered_by: str | None = None  # the configured model whose reply was used last (rule A21)
    step_tools: bool = False  # the current model step offers tools (rule A21: a fallback must call them too)
    stop_reason: str | None = None  # max_rounds | max_tool_calls | max_tokens | deadline | loop_detected | failed_steps | empty_answer
    failure: Failure | None = None
    cancellation: Cancellation | None = None
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    answer: str | None = None
    confidence: float | None = None  # share of the answer's claims backed by a citation (rule O2)
    team: bool = False  # a supervisor: offered ``delegate`` to the worker kinds in ``workers`` (team mode, rule D1)
    workers: list[str] = Field(default_factory=list)
    tree_tools: list[str] = Field(default_factory=list)  # tools the task's workers may use: its own allowed ones (rule D6)
    child: ChildSpec | None = None  # a worker's task: its parent, kind, depth and share of the tree's budget (rule D4)
    draft: str | None = None  # the supervisor's answer while the finalizer rewrites it (rule D9)
    findings: list[dict[str, str]] = Field(default_factory=list)  # workers' summaries, {worker, text} (rule A32)
    reviewing: str | None = None  # the answer while the reviewer checks it (rule A22)
    plan: list[PlanItem] | None = None  # the model's plan and its progress (rule A25)
    plan_due: bool = False  # the next model step writes (or revises) the plan (rule A25)
    replanned: bool = False  # the plan was revised once (rule A25)
    review: dict[str, Any] | None = None  # the reviewer's outcome: checked, unsupported, contradicted, revised, marked | error
    memory_on: bool = False  # long-term memory is on for this task's tenant and user (rules M1-M5)
    memory: list[MemoryNote] = Field(default_factory=list)  # items recalled for the model (rule M4)
    turn_no: int = 0  # this task's 1-based turn number in its session (rule M7)
    first_turn: bool = False  # a new session's first question (the semantic cache applies, rule C1)
    cache: Literal["hit", "miss", "bypass", "off"] = "off"  # the semantic cache's outcome (rule C1)
    scope: Scope | None = None  # the documents and collections every kb_search of the task may read (rule Q2)
    asked_on: date | None = None  # the day asked, in the tenant's zone (rule V1; None: a checkpoint from before it)
    time_zone: str | None = None  # that zone

    def asked(self) -> dates.Asked:
        """Rule V1: the day this task was asked (``asked_on``; an older checkpoint: ``created_at`` in
        ``dates.DEFAULT_ZONE``) and the time its question is about."""
        zone = self.time_zone or dates.DEFAULT_ZONE
        return dates.asked(self.asked_on or dates.local_date(self.created_at, zone), zone, self.question)

    def fork(self) -> TaskState:
        """A copy for a transition to change, leaving this state as it is (rule A34, docs/architecture.md).

        Copy-on-write of what transitions change, not a deep copy (~10 µs against ~50-300 µs, growing with
        the history; docs/benchmarks.md): every field is the copy's own, every list and dict a new
        container (the messages, evidence, steps and trace items they hold are shared: transitions add
        and replace them, never change one), and every pending call a copy (transitions set a call's
        result, approval, deadline...). A nested value a transition changes in place must be copied here
        too; ``tests/unit/test_rule_immutable.py`` drives the interpreter through the rules and checks
        that no transition changes its input."""
        new = self.model_copy()
        fields = new.__dict__
        for name, value in fields.items():
            if isinstance(value, list):
                fields[name] = list(value)
            elif isinstance(value, dict):
                fields[name] = dict(value)
        fields["pending"] = [c.model_copy() for c in self.pending]
        return new

    @property
    def terminal(self) -> bool:
        """True once completed, failed, cancelled or waiting for the user's input (``needs_input``)."""
        return self.status in ("completed", "failed", "cancelled", "needs_input")

    def envelope_fields(self) -> dict[str, Any]:
        """Envelope header fields of every event this task sends (task, session, tenant, user, trace)."""
        return dict(task_id=self.task_id, session_id=self.session_id, tenant_id=self.tenant_id,
                    user_id=self.user_id, traceparent=self.traceparent)

    def scope_of(self, tool: str | None) -> Scope | None:
        """Rule Q2: the scope a call of ``tool`` runs within: the task's for ``kb_search``, else None."""
        return self.scope if tool == "kb_search" else None

    def mcp_tool(self, name: str) -> McpTool | None:
        """The offered MCP tool named ``name`` (canonical ``mcp.<server>.<tool>`` or its function name)."""
        return next((t for t in self.mcp_tools if name in (t.name, t.function)), None)

    def call(self, call_id: str) -> PendingCall | None:
        """The pending call ``call_id`` or None."""
        return next((c for c in self.pending if c.call_id == call_id), None)

    def pending_approvals(self) -> list[PendingCall]:
        """Calls waiting for a human decision."""
        return [c for c in self.pending if c.approval == "pending" and c.result is None]

    def all_results_in(self) -> bool:
        """True when every pending call has a result."""
        return all(c.result is not None for c in self.pending)

    def waiting_status(self) -> TaskStatus:
        """``waiting_approval`` while a call waits for a person, else ``waiting_tool``."""
        return "waiting_approval" if self.pending_approvals() else "waiting_tool"

    def next_wakeup(self) -> float | None:
        """Epoch seconds at which the sweeper must look at this task's pending calls (earliest
        approval expiry, retry time or result deadline), or None when none waits."""
        times = [t for t in (c.next_wakeup() for c in self.pending) if t is not None]
        return min(times).timestamp() if times else None
