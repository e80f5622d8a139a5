"""A Conduit task's event log as A2A objects (``a2a-sdk`` protobuf types; the table is in docs/a2a.md).

``TaskProjection`` reads a task's ``LoggedEvent`` s in order. ``apply(ev)`` returns the A2A events that
one log event adds (``TaskStatusUpdateEvent`` / ``TaskArtifactUpdateEvent``, possibly none) and keeps the
``Task`` they add up to, which ``task()`` returns: its status, the ``answer`` artifact as streamed so far
(the checked answer once the task completed, with one data part per cited source) and the user's question
as its history. Every event carries ``metadata.conduit_event_id`` (the log's seq, the SSE id of
``GET /v1/tasks/{id}/events``), so a client that lost its connection resumes exactly after the last event it
has (``tasks/resubscribe`` with ``Last-Event-ID``).

Pure: no Redis, no HTTP; ``tests/unit/test_a2a_events.py`` checks it event by event.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from google.protobuf.struct_pb2 import Struct, Value
from google.protobuf.json_format import ParseDict

from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from conduit.records.taskstream import LoggedEvent

ANSWER = "answer"
"""``artifact_id`` of the answer artifact."""
SEQ_KEY = "conduit_event_id"
"""Metadata key of every event and of a task snapshot: the seq of the log event it came from."""
PROGRESS = frozenset({"tool.requested", "tool.completed", "evidence", "worker.started", "worker.completed"})
"""Log events sent as a ``working`` status update with the event's JSON as a data part."""
SILENT = frozenset({"trace", "thinking", "task.accepted"})
"""Log events with no A2A counterpart (the timeline and the reasoning stay on the SSE stream)."""
TERMINAL_STATES = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
                             TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED})
"""A2A states after which a task changes no more (``input-required`` is not one: it waits for a reply)."""


def struct(data: dict[str, Any]) -> Struct:
    """A protobuf ``Struct`` of a JSON-able dict."""
    out = Struct()
    out.update(data)
    return out


def data_part(data: Any) -> Part:
    """A ``Part`` holding JSON ``data`` (a data part)."""
    return Part(data=ParseDict(data, Value()))


def agent_message(task_id: str, context_id: str, parts: list[Part]) -> Message:
    """A message from the agent (role ``agent``) in a task's context."""
    return Message(message_id=uuid.uuid4().hex, task_id=task_id, context_id=context_id, role=Role.ROLE_AGENT,
                   parts=parts)


def sources(citations: list[dict[str, Any]]) -> list[Part]:
    """One data part per cited source: ``{index, title, locator, url, chunk_id}`` (absent fields left out)."""
    keep = ("index", "title", "locator", "url", "chunk_id")
    return [data_part({"source": {k: c[k] for k in keep if c.get(k) is not None}}) for c in citations]


class TaskProjection:
    """The A2A view of one Conduit task, built from its log (see module doc).

    Args:
        task_id: the Conduit task id (also the A2A task id).
        context_id: the task's session id (the A2A context id: a conversation).
        question: the question, the history's user message.
    Attributes:
        seq: the seq of the last log event applied (0: none).
        state: the current ``TaskState``.
        awaiting: the ``tool.approval_required`` data of the call waiting for a decision, else None.
        needs_input: True when the task ended asking the user a question.
    """

    def __init__(self, task_id: str, context_id: str, question: str) -> None:
        self.task_id, self.context_id = task_id, context_id
        self.seq = 0
        self.state = TaskState.TASK_STATE_SUBMITTED
        self.awaiting: dict[str, Any] | None = None
        self.needs_input = False
        self._status_message: Message | None = None
        self._answer = ""
        self._answer_parts: list[Part] | None = None
        self._answer_meta: dict[str, Any] = {}
        self._question = Message(message_id=f"{task_id}-question", task_id=task_id, context_id=context_id,
                                 role=Role.ROLE_USER, parts=[Part(text=question)])

    @property
    def final(self) -> bool:
        """True once the task reached a terminal A2A state."""
        return self.state in TERMINAL_STATES

    def task(self, history: bool = True) -> Task:
        """The ``Task`` as of the last applied event (``metadata.conduit_event_id`` = ``seq``)."""
        out = Task(id=self.task_id, context_id=self.context_id, status=self._status(), metadata=struct({SEQ_KEY: self.seq}))
        if self._answer or self._answer_parts:
            out.artifacts.append(self._artifact())
        if history:
            out.history.append(self._question)
        return out

    def _status(self) -> TaskStatus:
        stamp = Timestamp()
        stamp.GetCurrentTime()
        status = TaskStatus(state=self.state, timestamp=stamp)
        if self._status_message is not None:
            status.message.CopyFrom(self._status_message)
        return status

    def _artifact(self, parts: list[Part] | None = None) -> Artifact:
        chosen = parts if parts is not None else (self._answer_parts or [Part(text=self._answer)])
        art = Artifact(artifact_id=ANSWER, name=ANSWER, parts=chosen)
        if self._answer_meta:
            art.metadata.CopyFrom(struct(self._answer_meta))
        return art

    def _meta(self, ev: LoggedEvent) -> Struct:
        return struct({SEQ_KEY: ev.seq, "conduit_event": ev.type})

    def _status_update(self, ev: LoggedEvent, state: int, parts: list[Part] | None) -> TaskStatusUpdateEvent:
        self.state = state
        self._status_message = agent_message(self.task_id, self.context_id, parts) if parts else None
        return TaskStatusUpdateEvent(task_id=self.task_id, context_id=self.context_id, status=self._status(),
                                     metadata=self._meta(ev))

    def _artifact_update(self, ev: LoggedEvent, parts: list[Part], append: bool,
                         last: bool = False) -> TaskArtifactUpdateEvent:
        return TaskArtifactUpdateEvent(task_id=self.task_id, context_id=self.context_id,
                                       artifact=self._artifact(parts), append=append, last_chunk=last,
                                       metadata=self._meta(ev))

    def apply(self, ev: LoggedEvent) -> list[TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
        """The A2A events ``ev`` adds (in order); updates the projection. Events at or before ``seq`` add none."""
        if ev.seq <= self.seq:
            return []
        self.seq = ev.seq
        if ev.type in SILENT:
            return []
        data = json.loads(ev.data) if ev.data else {}
        if ev.type == "answer.delta":
            first = not self._answer
            self._answer += data["text"]
            return [self._artifact_update(ev, [Part(text=data["text"])], append=not first)]
        if ev.type == "answer.reset":  # A2A has no retraction: the artifact is replaced by an empty one
            self._answer = ""
            return [self._artifact_update(ev, [Part(text="")], append=False)]
        if ev.type == "step.started":
            self.awaiting = None
            return [self._status_update(ev, TaskState.TASK_STATE_WORKING, None)]
        if ev.type in PROGRESS:
            if ev.type == "tool.completed" and (self.awaiting or {}).get("call_id") == data.get("call_id"):
                self.awaiting = None  # the decided call ran (or was refused)
            return [self._status_update(ev, TaskState.TASK_STATE_WORKING, [data_part({"event": ev.type, **data})])]
        if ev.type == "tool.approval_required":
            self.awaiting = data
            text = (f"The tool {data['tool']} needs your approval. Reply with a data part "
                    f"{{\"decision\": \"approve\" | \"reject\", \"call_id\": \"{data['call_id']}\"}} or the text "
                    "approve / reject.")
            parts = [Part(text=text), data_part({"event": ev.type, **data})]
            return [self._status_update(ev, TaskState.TASK_STATE_INPUT_REQUIRED, parts)]
        return self._terminal(ev, data)

    def _terminal(self, ev: LoggedEvent, data: dict[str, Any]) -> list[Any]:
        if ev.type == "task.completed":
            self._answer = data["answer"]
            self._answer_parts = [Part(text=data["answer"]), *sources(data.get("citations", []))]
            self._answer_meta = {k: data[k] for k in ("mode", "confidence", "stop_reason", "fallback_reason", "model")
                                 if data.get(k) is not None}
            update = self._artifact_update(ev, self._answer_parts, append=False, last=True)
            return [update, self._status_update(ev, TaskState.TASK_STATE_COMPLETED, None)]
        if ev.type == "task.needs_input":
            self.needs_input = True
            return [self._status_update(ev, TaskState.TASK_STATE_INPUT_REQUIRED, [Part(text=data["question"])])]
        if ev.type == "task.failed":
            parts = [Part(text=f"{data['code']}: {data['message']}"), data_part({"code": data["code"]})]
            return [self._status_update(ev, TaskState.TASK_STATE_FAILED, parts)]
        if ev.type == "task.cancelled":
            return [self._status_update(ev, TaskState.TASK_STATE_CANCELED,
                                        [Part(text=f"cancelled ({data.get('reason', 'cancelled')})")])]
        return []  # an event type newer than this mapping: nothing to say in A2A


def pauses(update: Any, projection: TaskProjection) -> bool:
    """True when a stream ends after ``update``: a terminal state or ``input-required`` (the client replies
    with a new message, whose stream goes on)."""
    return (isinstance(update, TaskStatusUpdateEvent)
            and (projection.final or update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED))
