"""HTTP API bodies of the gateway (requests, responses, errors)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from contracts.evidence import Citation
from contracts.scope import COLLECTIONS_DOC, DOCUMENT_IDS_DOC, Collections, DocumentIds, Scope
from contracts.stream import Usage
from contracts.tools import AnyToolName

TaskStatus = Literal[
    "accepted", "running", "waiting_tool", "waiting_approval", "completed", "failed", "cancelled", "needs_input"
]
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled", "needs_input"})


class TaskCreate(BaseModel):
    """``POST /v1/tasks`` and ``POST /v1/ask`` body.

    The question's size limit is a setting (``CONDUIT_MAX_QUESTION_CHARS``);
    over it the gateway answers 413 ``question_too_large``. ``document_ids`` / ``collections``: the
    question's scope (``contracts.scope``, rules Q1-Q4); the task record shows it resolved as ``scope``.
    """

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, pattern=r"\S", description="the question, any language (not blank)")
    session_id: str | None = Field(default=None, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    user_id: str | None = Field(default=None, max_length=128,
                                description="deprecated: the caller's user comes from the credential; "
                                            "another value is refused (403 user_mismatch)")
    allowed_tools: list[AnyToolName] | None = Field(default=None, description="subset of tools the agent may use (built-in names, mcp.<server>.<tool>, a2a.<agent>)")
    mode: Literal["agent", "team", "auto"] | None = Field(
        default=None, description="team: a supervisor delegates parts of the question to workers running in "
                                  "parallel (docs/agent-rules.md, rules D1-D9); auto: team when the question names "
                                  "several topics (CONDUIT_TEAM_TOPICS); unset: the tenant's mode")
    document_ids: DocumentIds | None = Field(default=None, description=DOCUMENT_IDS_DOC)
    collections: Collections | None = Field(default=None, description=COLLECTIONS_DOC)
    model: str | None = Field(default=None, max_length=64, description="one of the tenant's configured models "
                              "(GET /v1/models, CONDUIT_MODELS; rule A20); unset: the tenant's chain. Unknown: 404 unknown_model")


class TaskCreated(BaseModel):
    """``202`` answer of ``POST /v1/tasks``."""

    task_id: str
    session_id: str
    events_url: str


class StepRecord(BaseModel):
    """One step of a task as shown by ``GET /v1/tasks/{id}``."""

    step: int
    kind: Literal["model", "tool"]
    tool: str | None = None
    call_id: str | None = None
    arguments: dict[str, Any] | None = None
    outcome: str | None = None
    duration_ms: float | None = None


class TaskView(BaseModel):
    """``GET /v1/tasks/{id}``: the task's record (status, answer, citations, steps, usage).

    Parsed with ``cache_strings="keys"``: pydantic-core's JSON string cache would
    otherwise keep up to 16,384 short values (task ids, statuses) alive in every
    gateway, scattered over the allocator's arenas after a burst of reads.
    """

    model_config = ConfigDict(cache_strings="keys")

    task_id: str
    session_id: str
    tenant_id: str = "default"
    user_id: str | None = None
    status: TaskStatus
    question: str
    answer: str | None = None
    citations: list[Citation] = Field(default_factory=list)
    steps: list[StepRecord] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    mode: str | None = None
    scope: Scope | None = None  # the question's scope (contracts.scope; None: everything the tenant may read)
    error: dict[str, str] | None = None
    created_at: datetime
    finished_at: datetime | None = None
    latency_ms: float | None = None
    stop_reason: str | None = None
    confidence: float | None = None
    cache: Literal["hit", "miss", "bypass", "off"] | None = None  # semantic cache outcome (task.completed)
    memory: list[dict[str, Any]] = Field(default_factory=list)  # long-term memory items given to the model
    pending_approvals: list[dict[str, Any]] = Field(default_factory=list)
    trace: list[dict[str, Any]] = Field(default_factory=list)
    trace_id: str | None = None  # the W3C trace id (32 hex) of the task's OpenTelemetry trace (rule O6)


class ApprovalDecisionBody(BaseModel):
    """``POST /v1/tasks/{id}/approvals/{call_id}`` body (rules A7 and G2: human in the loop).

    ``approve`` runs exactly the arguments shown (``arguments_digest``, when given,
    must match); ``reject`` records a refusal; ``edit`` runs new ``arguments``
    (validated against the tool's schema again).
    """

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "reject", "edit"]
    arguments: dict[str, Any] | None = None
    arguments_digest: str | None = Field(default=None, description="digest shown in tool.approval_required")
    comment: str | None = Field(default=None, max_length=1000)


class ExactValue(BaseModel):
    """A value that must survive exactly (rule M6): an amount, a date, an id, an article number or a
    fact the user stated, with the turn (1-based) and the side (``user`` | ``answer``) it came from."""

    kind: Literal["amount", "date", "id", "article", "fact"]
    value: str
    turn: int
    side: Literal["user", "answer"] = "user"


class SessionContext(BaseModel):
    """A session's structured state (``GET /v1/sessions/{id}`` ``context``): the rolling ``summary`` of
    the turns folded out of the model's window (``folded``: how many, oldest first) and the exact
    ``values`` of every turn seen (``seen``: how many turns were read for them)."""

    summary: str = ""
    folded: int = 0
    seen: int = 0
    values: list[ExactValue] = Field(default_factory=list)
    summarised: int = 0
    """How many of the ``folded`` turns the model's own summary covers (rule M7; 0: none). The
    summary is the model's alone when ``summarised == folded``; turns folded after it are appended
    as extracted lines until the next model summary takes them in."""
    summary_by: Literal["none", "extraction", "model"] = "none"
    """Who wrote ``summary``: ``model`` when the model's summary covers every folded turn."""


class SessionRename(BaseModel):
    """``PATCH /v1/sessions/{id}`` body: the session's new ``title`` (1-200 chars after stripping, not blank)."""

    model_config = ConfigDict(extra="forbid")

    title: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200, pattern=r"\S")]


class ApprovalRecord(BaseModel):
    """A pending approval as stored in Redis (``conduit:approval:{task_id}:{call_id}``)."""

    task_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    reason: str = ""
    arguments_digest: str
    expires_at: datetime
    status: Literal["pending", "approved", "rejected", "edited", "expired"] = "pending"
    escalated: bool = False
    """The owner did not decide in time: only a tenant admin may decide now (rule A26)."""


class ErrorDetail(BaseModel):
    """Machine-readable ``code``, human ``message`` and optional ``details``."""

    code: str
    message: str
    details: Any | None = None


class ErrorBody(BaseModel):
    """Every error response of the gateway: ``{"error": {"code", "message", "details"}}``."""

    error: ErrorDetail
