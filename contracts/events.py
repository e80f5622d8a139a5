"""Bus events: payload models and their envelopes.

Each envelope class has a fixed ``type`` and a typed ``payload``; which topic
carries which class is ``contracts.channels.CHANNELS``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.envelope import Envelope
from contracts.evidence import EvidenceItem
from contracts.scope import Scope
from contracts.tools import AnyToolName


class Payload(BaseModel):
    """Base of all payloads: unknown keys are rejected (a typo is an error, not silence)."""

    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- payloads
class ChildSpec(Payload):
    """What makes a question a worker's task in team mode (rules D1-D9, docs/agent-rules.md).

    The parent's ``delegate`` call ``parent_call_id`` (idempotency key ``parent_key``) started it;
    ``root_task_id`` is the person's question at the top of the tree (its stream shows the
    workers' approval requests);
    ``worker`` is its kind, ``depth`` its distance from the root supervisor (1 for its children).
    Its share of the tree's one budget: ``max_tool_calls`` and ``max_tokens``, ended by
    ``deadline_at`` (UTC). Its result goes back to the parent as a ``tool.result``.
    """

    parent_task_id: str
    root_task_id: str
    parent_call_id: str
    parent_key: str
    worker: str
    depth: int = Field(ge=1)
    deadline_at: datetime
    max_tool_calls: int = Field(ge=0)
    max_tokens: int = Field(ge=0)


class RecallAhead(Payload):
    """Rule M13: the ``memory.recall_requested`` the gateway published beside a ``question.asked``, so the
    retriever's search runs while the question travels. ``request_id``: its reply's key
    (``keys.reply``); ``with_memory`` / ``with_cache``: what it asked for; ``deadline_at`` (UTC): past
    it the retriever drops the request and the orchestrator asks again itself."""

    request_id: str
    with_memory: bool
    with_cache: bool
    deadline_at: datetime


class QuestionPayload(Payload):
    """A person's question. ``allowed_tools`` None means every configured tool.

    ``mode`` ``team`` runs a supervisor that delegates to workers, ``auto`` does when the question
    names several topics (None: the tenant's mode);
    ``child`` is set on a worker's task, which a supervisor started;
    ``use_cache`` False: the client sent ``Cache-Control: no-cache`` (the semantic cache is not read);
    ``scope``: the documents and collections its knowledge-base searches may read (``contracts.scope``,
    rules Q1-Q4; None: everything the tenant may read), a worker's is its supervisor's;
    ``model``: the configured model the request named (rule A20);
    ``recall``: the recall request the gateway sent beside this question (rule M13; None: none was sent,
    the orchestrator decides by rule M8).
    """

    question: str
    allowed_tools: list[AnyToolName] | None = None
    mode: Literal["agent", "team", "auto"] | None = None
    child: ChildSpec | None = None
    use_cache: bool = True
    scope: Scope | None = None
    model: str | None = None
    """The configured model the request named (rule A20; None: the tenant's chain)."""
    recall: RecallAhead | None = None
    """Rule M13: the memory recall and cache lookup already sent for this question (None: none)."""


class ToolRequestPayload(Payload):
    """A tool call the agent wants run.

    ``idempotency_key`` is ``task_id:step:call_id`` (rule T3, docs/rules.md); a tool service
    that sees the same key twice returns its stored result instead of re-running.
    ``deadline_at`` (UTC) is when the orchestrator stops waiting for the result.
    ``scope``: set on a ``kb_search`` of a scoped task (rule Q2): the retriever searches only those
    documents and collections, whatever the model's ``arguments`` say.
    ``attempt``: 1 for the first run of the call, one more for each retry after a transient error
    (rule A8; the tool service's span carries it, rule O7). A re-send of the same attempt keeps it.
    """

    call_id: str
    tool: AnyToolName
    arguments: dict[str, Any]
    reason: str = ""
    step: int
    idempotency_key: str
    deadline_at: datetime | None = None
    scope: Scope | None = None
    attempt: int = 1


class ToolError(Payload):
    """A structured tool failure given back to the model (rule T4, docs/rules.md).

    ``kind``: ``transient`` (retry may help), ``bad_arguments``, ``forbidden`` or
    ``business`` (a valid answer that is a failure, e.g. nothing found).
    """

    error_code: str
    message: str
    hint: str | None = None
    kind: Literal["transient", "bad_arguments", "forbidden", "business"] = "transient"


class ArtifactRef(Payload):
    """A file a tool produced (code_exec: written to the sandbox's output folder ``/tmp/out``).

    The content lives in shared storage (Redis, with a TTL) and is served by the gateway at
    ``url`` = ``/v1/artifacts/{id}`` to the task's owner only. ``name`` is the file's path
    relative to the output folder (untrusted: chosen by the code); ``media_type`` is guessed
    from its extension; ``bytes`` is its size.
    """

    id: str
    name: str
    media_type: str
    bytes: int
    url: str


class Spent(Payload):
    """What a worker's task used of the tree's budget: ``tokens`` and ``tool_calls``."""

    tokens: int = 0
    tool_calls: int = 0


class ToolResultPayload(Payload):
    """The outcome of one tool call.

    ``evidence`` holds passages (kb_search, web_*); ``output`` holds text output
    (code_exec: computation, not evidence; delegate: the worker's summary, whose ``[k]`` name
    the k-th item of ``evidence``). ``duration_ms`` is the run time.
    ``artifacts`` lists files the tool stored (code_exec plots, CSV), empty otherwise.
    ``spent``: a delegate's use of the tree's budget.
    """

    call_id: str
    tool: AnyToolName
    idempotency_key: str
    outcome: Literal["ok", "error", "timeout"]
    evidence: list[EvidenceItem] = Field(default_factory=list)
    output: str | None = None
    error: ToolError | None = None
    duration_ms: float = 0.0
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    spent: Spent | None = None


class ApprovalDecisionPayload(Payload):
    """A human decision on a pending call; ``edit`` carries new ``arguments``."""

    call_id: str
    decision: Literal["approve", "reject", "edit"]
    arguments: dict[str, Any] | None = None
    arguments_digest: str | None = None
    comment: str | None = None


class CancelPayload(Payload):
    """A request to stop a task."""

    reason: str = "cancelled by user"


class AgentEventPayload(Payload):
    """Coarse public agent event for other teams (topic ``conduit.agent.events``).

    ``kind`` is one of task.started, tool.requested, tool.completed,
    approval.requested, approval.decided, task.completed, task.failed,
    task.cancelled; ``tool``/``outcome``/``duration_ms`` are set for tool events
    (for approval.decided ``outcome`` is approved, edited, rejected or expired),
    ``latency_ms`` and ``code`` for terminal ones. ``parent_task_id`` is set on every event
    of a worker's task (team mode): the supervisor task that started it.
    """

    kind: Literal["task.started", "tool.requested", "tool.completed", "approval.requested", "approval.decided",
                  "task.completed", "task.failed", "task.cancelled", "task.needs_input"]
    tool: str | None = None
    outcome: str | None = None
    duration_ms: float | None = None
    latency_ms: float | None = None
    code: str | None = None
    parent_task_id: str | None = None


class DeadLetterPayload(Payload):
    """A message no consumer could handle, kept for inspection and replay.

    ``raw`` is the original value decoded as UTF-8 (with replacement characters).
    """

    topic: str
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    consumer: str
    error: str
    raw: str


# ---------------------------------------------------------------- envelopes
class QuestionAsked(Envelope):
    """gateway -> orchestrator: a new question (topic ``conduit.questions``)."""

    type: Literal["question.asked"] = "question.asked"
    payload: QuestionPayload


class ToolRequested(Envelope):
    """orchestrator -> tool service: run one tool call."""

    type: Literal["tool.requested"] = "tool.requested"
    payload: ToolRequestPayload


class ToolResult(Envelope):
    """tool service -> orchestrator: the result of one tool call."""

    type: Literal["tool.result"] = "tool.result"
    payload: ToolResultPayload


class ApprovalDecided(Envelope):
    """gateway -> orchestrator: a human decided on a pending call."""

    type: Literal["approval.decided"] = "approval.decided"
    payload: ApprovalDecisionPayload


class TaskCancelled(Envelope):
    """gateway -> orchestrator: stop the task."""

    type: Literal["task.cancelled"] = "task.cancelled"
    payload: CancelPayload


class AgentEvent(Envelope):
    """orchestrator -> public topic: coarse progress of a task."""

    type: Literal["agent.event"] = "agent.event"
    payload: AgentEventPayload


class DeadLetter(Envelope):
    """any consumer -> dead-letter topic: an unhandleable message."""

    type: Literal["dead_letter"] = "dead_letter"
    payload: DeadLetterPayload
