"""What a transition asks the I/O layer to do: typed values, carried out in order.

A transition of the agent core returns ``Step(state, effects)``. The I/O layer
(``services.orchestrator.interpreter``, one handler per effect type) saves the state with one
compare-and-set and carries out the effects by their stage:

- before the save: ``SaveApproval`` of a new pending approval (if the replica dies
  before the save, the record just expires unused);
- in the save's own Lua script (the transactional outbox): ``Emit`` (client
  events, in order), ``Public`` (public agent events, relayed to Kafka by
  ``services.orchestrator.public``), ``Wake`` (the sweeper's wake-up), ``HoldLease``;
  a kill right after the save loses none of them;
- after the save, in order: everything else.

What an effect writes is decided by the core, not by its handler: ``Announce``, ``Remember`` and
``WriteView`` are filled in by ``announcing.settle`` as the last part of every transition (the terminal
event, the record, the public event, the session turn, the tokens of the day, a worker's result, the facts
and the cache entry to keep), so a handler only writes what its effect carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from contracts.api import ApprovalRecord, SessionContext, TaskView
from contracts.events import ToolResultPayload
from contracts.evidence import Citation
from contracts.memory import CacheEntry, MemoryItem
from contracts.stream import StreamEvent
from services.orchestrator.agent.state import PendingCall, TaskState


@dataclass(frozen=True)
class Emit:
    """Append ``event`` to the task's client event log (in the save's outbox)."""

    event: StreamEvent


@dataclass(frozen=True)
class Wake:
    """Set the sweeper's wake-up for this task to ``at`` (epoch seconds; in the save's outbox)."""

    at: float


@dataclass(frozen=True)
class HoldLease:
    """Take the task's lease in the save's script: a model step is due (a crash resumes it)."""


@dataclass(frozen=True)
class ClearWake:
    """Forget the task's sweeper wake-up (nothing waits any more)."""


@dataclass(frozen=True)
class DropLease:
    """Release the task's lease (it waits for tools or people, not for a model step)."""


@dataclass(frozen=True)
class SaveApproval:
    """Write a new pending approval record for the gateway (before the save)."""

    record: ApprovalRecord


@dataclass(frozen=True)
class UpdateApproval:
    """Update the stored approval of ``call_id``: set ``status`` (and the decided arguments);
    with ``only_if_pending`` a record already decided is left alone. ``escalated_until``: the
    approval was escalated to a tenant admin and now expires then (rule A26)."""

    call_id: str
    status: str
    arguments: dict[str, Any] | None = None
    arguments_digest: str | None = None
    only_if_pending: bool = False
    escalated_until: datetime | None = None


@dataclass(frozen=True)
class PublishTool:
    """Send one ``ToolRequested`` for ``call`` to its tool's topic (idempotent by key), then
    mark the calls sent (``timers.mark_sent``) once all of a transition's requests are out.

    ``rescue``: the owner (``conduit.runtime.owners``) of the call's run, which is gone: the request
    goes to a partition a live process of its service holds, not the task's (rule A23)."""

    call: PendingCall
    rescue: str | None = None


@dataclass(frozen=True)
class Public:
    """Publish a coarse public ``AgentEvent`` of ``kind`` with ``fields`` (in the save's outbox)."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WriteView:
    """Write the task's record (``GET /v1/tasks/{id}``): ``view``, built from the step's state by
    ``announcing.settle`` (None only before it ran)."""

    view: TaskView | None = None


@dataclass(frozen=True)
class RunModelStep:
    """Start the next model step of this task (in the background, holding the lease)."""


@dataclass(frozen=True)
class Turn:
    """A finished turn of the person's session: ``question``, ``answer``, its 1-based number ``n`` (0:
    unknown) and, when it ended asking the person (rule E10), the numbered evidence (JSON) the reply
    continues with."""

    question: str
    answer: str
    n: int = 0
    evidence: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Announcement:
    """Everything an ended task tells, decided by the core (``announcing.announcement``): the terminal
    ``event`` (it seals the log), the record ``view``, the public event (``public_kind``, ``public_fields``),
    the session ``turn`` (None: a worker's task, or an ending that is no turn), the ``tokens`` to add to
    the tenant's day (rule G6; 0 for a worker's task) and a worker's ``child_result`` for its supervisor
    (rule D5)."""

    event: StreamEvent
    view: TaskView
    public_kind: str
    public_fields: dict[str, Any]
    turn: Turn | None = None
    tokens: int = 0
    child_result: ToolResultPayload | None = None


@dataclass(frozen=True)
class Announce:
    """The task ended: append its terminal event (sealing the log), write the record, the session turn
    and the public event, release lease and wake-up, send a worker's result (idempotent: the log seals
    once). ``citations``: the checked answer's citations when the ending has them; ``decided``: what to
    write, filled in by ``announcing.settle`` (None only before it ran)."""

    citations: list[Citation] | None = None
    decided: Announcement | None = None


@dataclass(frozen=True)
class CancelChild:
    """Cancel the worker's task ``task_id`` (team mode, rule D8): its cancel flag, then a
    ``task.cancelled`` on the control topic (idempotent)."""

    task_id: str
    reason: str


@dataclass(frozen=True)
class Notify:
    """Append ``event`` to another task's client log (team mode: a worker's approval request on the
    stream of the person's question, ``task_id``), after the save."""

    task_id: str
    event: StreamEvent


@dataclass(frozen=True)
class SaveContext:
    """Write the session's structured state and rolling summary (rules M6, M7)."""

    session_id: str
    context: SessionContext


@dataclass(frozen=True)
class Summarise:
    """After the save: ask the model for the session's rolling summary (rule M7), off the task's
    path. ``messages``: the call (``context.summary_request``); ``upto``: the folded turns it
    covers; ``model``: the tenant's chat model (None: the default). A failure changes nothing."""

    session_id: str
    upto: int
    messages: list[dict[str, str]]
    model: str | None = None


@dataclass(frozen=True)
class Remember:
    """After the announcement: keep what the finished task taught (rules M1, M2: the user's facts,
    the episode) and, for a cacheable first answer, a semantic-cache entry (rule C2).
    ``citations``: the answer's checked citations; ``items`` and ``cache``: what to keep, decided by
    ``announcing.settle`` (it drops a ``Remember`` that keeps nothing)."""

    citations: list[Citation] = field(default_factory=list)
    items: list[MemoryItem] = field(default_factory=list)
    cache: CacheEntry | None = None


@dataclass(frozen=True)
class Metric:
    """Count ``name`` (``approval_requested`` | ``approval_decided`` | ``model_failed``) in the replica's
    metrics, with ``args`` (``model_failed``: code and kind, rules A17-A19)."""

    name: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class FeedBreaker:
    """Feed the replica's circuit breaker of ``tool`` with a call's outcome (``failed``: a transient
    error or a timeout, at ``at`` epoch seconds; else a success), rule A9. An effect, not a change made
    by the transition, so a transition applied again after a lost race feeds it once."""

    tool: str
    failed: bool
    at: float


@dataclass(frozen=True)
class FaultPoint:
    """A named point tests may crash the process at (``services.orchestrator.hooks``)."""

    name: str


Effect = (Emit | Wake | HoldLease | ClearWake | DropLease | SaveApproval | UpdateApproval | PublishTool | Public
          | WriteView | RunModelStep | Announce | CancelChild | Notify | Remember | SaveContext | Summarise | Metric
          | FeedBreaker | FaultPoint)
"""Any effect."""

IN_SAVE = (Emit, Wake, HoldLease, Public)
"""Effects written in the save's own script (the outbox)."""


@dataclass
class Step:
    """The result of one transition: the new state and what to do, in order.
    ``save`` False: the state did not change (nothing is written; effects still run)."""

    state: TaskState
    effects: list[Effect] = field(default_factory=list)
    save: bool = True

    def then(self, more: "Step") -> "Step":
        """This step followed by ``more`` (same state object, effects appended)."""
        self.state = more.state
        self.effects.extend(more.effects)
        self.save = self.save or more.save
        return self

    def emit(self, *events: StreamEvent) -> "Step":
        """Append ``Emit`` effects for ``events``; returns self."""
        self.effects.extend(Emit(e) for e in events)
        return self
