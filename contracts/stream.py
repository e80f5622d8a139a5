"""Task events streamed to clients over SSE (``GET /v1/tasks/{id}/events``).

Each SSE message has ``event: <type>``, ``id: <seq>`` (strictly increasing
integer per task) and ``data: <JSON of the model below>``. Every stream ends
with exactly one terminal event: task.completed, task.failed or task.cancelled.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from contracts.events import ArtifactRef
from contracts.evidence import Citation, NumberedEvidence
from contracts.scope import Scope

OUTPUT_MAX_CHARS = 4000
"""Longest tool text output a ``tool.completed`` event carries (characters; the rest is cut)."""


class StreamEvent(BaseModel):
    """Base of every client-visible task event."""

    model_config = ConfigDict(extra="forbid")
    type: str


class Usage(BaseModel):
    """Token usage summed over a task's model calls (tokens)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def add(self, other: "Usage") -> "Usage":
        """Return the element-wise sum of two usages."""
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )


class TaskAccepted(StreamEvent):
    """The gateway accepted the question and queued it."""

    type: Literal["task.accepted"] = "task.accepted"
    task_id: str
    session_id: str
    question: str


class StepStarted(StreamEvent):
    """A ReAct step began: ``phase`` is ``model`` (thinking/writing), ``tools``, ``final`` (a last call
    without tools, or the team's finalizer), ``review`` (the reviewer checks the answer, rule A22) or
    ``plan`` (the model writes or revises its plan, rule A25)."""

    type: Literal["step.started"] = "step.started"
    step: int
    phase: Literal["model", "tools", "final", "review", "plan"] = "model"


class AnswerDelta(StreamEvent):
    """A piece of the answer text as the model writes it."""

    type: Literal["answer.delta"] = "answer.delta"
    text: str


class AnswerReset(StreamEvent):
    """Discard the answer text shown so far (a model call is being re-run or superseded)."""

    type: Literal["answer.reset"] = "answer.reset"
    reason: str


class ThinkingDelta(StreamEvent):
    """A piece of the model's reasoning as it streams (``reasoning_content`` / ``reasoning``
    deltas); sent only to tenants listed in ``CONDUIT_THINKING_TENANTS`` (off by default). It is
    never part of the answer."""

    type: Literal["thinking"] = "thinking"
    text: str


class ToolRequestedEvent(StreamEvent):
    """The agent asked for a tool call; ``reason`` is the model's one-line why; ``scope``: the
    question's scope a ``kb_search`` runs within (rule Q2; None: unscoped or another tool)."""

    type: Literal["tool.requested"] = "tool.requested"
    call_id: str
    tool: str
    arguments: dict[str, Any]
    reason: str = ""
    scope: Scope | None = None


class ToolCompletedEvent(StreamEvent):
    """A tool call finished; ``outcome`` is ok, error or timeout; ``duration_ms`` its run time.

    ``output`` is the tool's text output shown in the page's record (code_exec: stdout and
    exit code; at most ``OUTPUT_MAX_CHARS``), ``artifacts`` the files it stored (plots, CSV),
    served by ``GET {url}?task_id=...`` to the task's owner. ``approval``: how a person decided a
    call that needed approval (None when it needed none); ``arguments``: the arguments it ran
    with when the person edited them (``edited``), else None.
    """

    type: Literal["tool.completed"] = "tool.completed"
    call_id: str
    tool: str
    outcome: str
    duration_ms: float
    error_code: str | None = None
    output: str | None = None
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    approval: Literal["approved", "edited", "rejected", "expired"] | None = None
    arguments: dict[str, Any] | None = None


class WorkerStarted(StreamEvent):
    """Team mode: the supervisor started a worker's task ``task_id`` (its own stream, readable by the
    same owner) for its ``delegate`` call ``call_id``; ``worker`` is the kind, ``task`` the sub-question."""

    type: Literal["worker.started"] = "worker.started"
    call_id: str
    worker: str
    task_id: str
    task: str


class WorkerCompleted(StreamEvent):
    """Team mode: a worker's result reached the supervisor. ``outcome`` ok, error or timeout;
    ``summary`` its short answer (citations left out: the supervisor's numbers come with the
    next ``evidence`` event); ``duration_ms`` from start to result."""

    type: Literal["worker.completed"] = "worker.completed"
    call_id: str
    worker: str
    task_id: str
    outcome: str
    summary: str = ""
    duration_ms: float
    error_code: str | None = None


class PlanItem(BaseModel):
    """One step of a task's plan (rule A25): its ``goal``, the ``tool`` it expects (``none``: reasoning
    only) and its ``status`` (``pending``, ``done``, ``failed``: its tools found nothing)."""

    goal: str = Field(max_length=200)
    tool: str = "none"
    status: Literal["pending", "done", "failed"] = "pending"


class PlanCreated(StreamEvent):
    """The model's plan for a multi-step question (rule A25): at most 5 steps, in order."""

    type: Literal["plan.created"] = "plan.created"
    steps: list[PlanItem]


class PlanStepDone(StreamEvent):
    """Step ``index`` (0-based) of the plan ended: ``status`` ``done`` or ``failed`` (its tools found nothing)."""

    type: Literal["plan.step_done"] = "plan.step_done"
    index: int = Field(ge=0)
    status: Literal["done", "failed"]


class PlanRevised(StreamEvent):
    """The plan after a failed step (rule A25, once per task): the steps done so far, then the new ones."""

    type: Literal["plan.revised"] = "plan.revised"
    steps: list[PlanItem]


class ApprovalEscalated(StreamEvent):
    """Nobody decided call ``call_id`` in time and the tenant escalates (rule A26): it now waits for a
    tenant admin (``to_role``) until ``expires_at``; past that it is refused as expired."""

    type: Literal["approval.escalated"] = "approval.escalated"
    call_id: str
    tool: str
    to_role: Literal["admin"] = "admin"
    expires_at: datetime


class EvidenceEvent(StreamEvent):
    """Evidence that just entered the model's context, with its pool numbers."""

    type: Literal["evidence"] = "evidence"
    items: list[NumberedEvidence]


class ApprovalRequiredEvent(StreamEvent):
    """A tool call waits for a human decision at ``POST /v1/tasks/{id}/approvals/{call_id}``
    until ``expires_at`` (UTC; ISO 8601 in JSON). On a supervisor's stream (team mode) it also
    announces a worker's call, with that worker's ``task_id`` as the ``{id}`` to decide it at."""

    type: Literal["tool.approval_required"] = "tool.approval_required"
    call_id: str
    tool: str
    arguments: dict[str, Any]
    reason: str = ""
    arguments_digest: str
    expires_at: datetime
    task_id: str | None = None  # team mode: the worker's task whose call waits (decide it there); None: this task


class TraceEvent(StreamEvent):
    """A timing/accounting fact of the task (rule G3, docs/rules.md: trace phase=llm|tool).

    ``phase`` is ``llm`` (first_token_s, total_s, retries, prompt/completion tokens),
    ``tool`` (tool, call_id, queue_ms, run_ms, outcome) or ``route`` (the pre-router's
    decision: route, calc_hint, source rules|model|none, scores, rule, latency_ms, error);
    ``data`` holds the fields.
    """

    type: Literal["trace"] = "trace"
    phase: str
    data: dict[str, Any]


class MemoryNote(BaseModel):
    """A long-term memory item given to the model for this task (shown as "from memory")."""

    id: str
    type: Literal["fact", "episode"]
    text: str
    task_id: str


class TaskCompleted(StreamEvent):
    """Terminal: the answer, its checked citations, token usage and latency (ms).

    ``mode`` is ``agent`` (a model wrote it), ``retrieval_only`` (no model, or
    the model endpoint failed: ``fallback_reason`` says why), ``chitchat`` (the chit-chat
    agent answered a greeting, thanks or a question about Conduit; no tools) or
    ``out_of_scope`` (the pre-router found the question outside the tenant's domain).
    ``confidence`` (0..1) is the share of the answer's sentences backed by a citation
    (None when the answer makes no factual claims to back: chit-chat, out of scope).
    ``cache``: ``hit`` when the answer was replayed from the semantic cache (``latency_ms`` is
    still the measured time), ``miss``/``bypass`` (``Cache-Control: no-cache``) on a new session's
    first turn, ``off`` otherwise. ``memory``: the long-term memory items the model was given.
    ``model``: the configured model whose reply is the answer (rules A20, A21: a fallback's name when
    the primary failed; None when no model wrote it). ``review``: the reviewer pass (rule A22):
    ``{checked, unsupported, contradicted, revised, marked}`` or ``{error}``; None when none ran.
    """

    type: Literal["task.completed"] = "task.completed"
    answer: str
    citations: list[Citation] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    latency_ms: float
    mode: Literal["agent", "retrieval_only", "chitchat", "out_of_scope"] = "agent"
    fallback_reason: str | None = None
    stop_reason: str | None = None
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    cache: Literal["hit", "miss", "bypass", "off"] | None = None
    memory: list[MemoryNote] = Field(default_factory=list)
    model: str | None = None
    review: dict[str, Any] | None = None


class TaskFailed(StreamEvent):
    """Terminal: the task failed with a machine-readable ``code`` and a human ``message``."""

    type: Literal["task.failed"] = "task.failed"
    code: str
    message: str


class TaskNeedsInput(StreamEvent):
    """Terminal: the agent needs the user's answer to ``question`` before it can answer (the
    question was ambiguous). The user's reply in the same session continues the work with the
    evidence found so far (``evidence`` items, numbered as before)."""

    type: Literal["task.needs_input"] = "task.needs_input"
    question: str
    evidence: int = 0


class TaskCancelledEvent(StreamEvent):
    """Terminal: the task was cancelled."""

    type: Literal["task.cancelled"] = "task.cancelled"
    reason: str = "cancelled"


TERMINAL_TYPES = frozenset({"task.completed", "task.failed", "task.cancelled", "task.needs_input"})

TaskStreamEvent = Annotated[
    Union[
        TaskAccepted,
        StepStarted,
        AnswerDelta,
        AnswerReset,
        ThinkingDelta,
        ToolRequestedEvent,
        ToolCompletedEvent,
        WorkerStarted,
        WorkerCompleted,
        PlanCreated,
        PlanStepDone,
        PlanRevised,
        ApprovalEscalated,
        EvidenceEvent,
        ApprovalRequiredEvent,
        TraceEvent,
        TaskCompleted,
        TaskFailed,
        TaskCancelledEvent,
        TaskNeedsInput,
    ],
    Field(discriminator="type"),
]
