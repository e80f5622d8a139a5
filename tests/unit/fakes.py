"""In-memory fakes of the orchestrator's ports (``services.orchestrator.ports``), for the unit tests
of the agent core and its interpreter only: ``agentsim.Sim`` wires them to the production
``Interpreter`` and ``ModelSteps``. Every integration and stack test keeps the real broker and Redis.

One ``World`` holds one simulated replica's view: checkpoints (compare-and-set on ``version``, the
outbox written with the save), the client event logs (sealed by the first terminal event, as
``conduit.records.taskstream`` does), leases, wake-ups, cancel flags, approval records, the tool
requests sent (answered at once by ``tools[name](call)`` when that gives a result), and what was
asked of memory, metrics and the background.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from contracts.api import ApprovalRecord, SessionContext, TaskView
from contracts.events import AgentEvent, ToolResultPayload
from contracts.memory import CacheEntry, MemoryItem
from contracts.stream import TERMINAL_TYPES, StreamEvent
from services.orchestrator.agent.effects import (
    Announcement,
    CancelChild,
    Metric,
    Notify,
    Public,
    Remember,
    Summarise,
    UpdateApproval,
)
from services.orchestrator.agent.state import PendingCall, TaskState
from services.orchestrator.checkpointing import CancelSeen, StaleState
from services.orchestrator.envelopes import agent_event

ToolFn = Callable[[PendingCall], ToolResultPayload | None]


def _public(event: AgentEvent) -> Public:
    """The ``Public`` effect an outbox entry was made of (kind and the fields set)."""
    fields = event.payload.model_dump(exclude={"kind", "parent_task_id"}, exclude_none=True)
    return Public(event.payload.kind, fields)


@dataclass
class World:
    """The state of the fakes (read by the tests through ``agentsim.Sim``).

    ``task_id``: the task whose client log is ``events``; events for other tasks are ``notices``.
    ``clock``: the time the fakes stamp (the simulation's ``now``).
    """

    clock: Callable[[], datetime]
    tools: dict[str, ToolFn] = field(default_factory=dict)
    task_id: str | None = None
    states: dict[str, TaskState] = field(default_factory=dict)
    events: list[StreamEvent] = field(default_factory=list)
    sealed: bool = False
    notices: list[Notify] = field(default_factory=list)
    publics: list[Public] = field(default_factory=list)
    leases: dict[str, float] = field(default_factory=dict)
    wakes: dict[str, float] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)
    approvals: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[PendingCall] = field(default_factory=list)
    results: list[ToolResultPayload] = field(default_factory=list)
    cancels: list[CancelChild] = field(default_factory=list)
    remembered: list[Remember] = field(default_factory=list)
    contexts: list[SessionContext] = field(default_factory=list)
    summaries: list[Summarise] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)
    due: list[tuple[str, TaskState | None]] = field(default_factory=list)
    views: int = 0

    def log(self, task_id: str, event: StreamEvent) -> None:
        """Append ``event`` to ``task_id``'s client log (dropped once the log is sealed)."""
        if task_id != self.task_id:
            self.notices.append(Notify(task_id, event))
            return
        if self.sealed:
            return
        self.events.append(event)
        self.sealed = event.type in TERMINAL_TYPES


class FakeCheckpoints:
    """``ports.Checkpoints`` in memory: the stored state object itself is kept (no copy)."""

    def __init__(self, world: World) -> None:
        self.w = world

    async def load(self, task_id: str) -> TaskState | None:
        return self.w.states.get(task_id)

    async def save(self, state: TaskState, lease_ttl_s: float | None = None, events: Sequence[StreamEvent] = (),
                   wake_at: float | None = None, public: Sequence[AgentEvent] = (),
                   unless_cancelled: bool = False, view: TaskView | None = None) -> TaskState:
        stored = self.w.states.get(state.task_id)
        if (stored.version if stored is not None else 0) != state.version:
            raise StaleState(state.task_id)
        if unless_cancelled and state.task_id in self.w.cancelled:
            raise CancelSeen(state.task_id)
        state.version += 1
        self.w.states[state.task_id] = state
        for e in events:
            self.w.log(state.task_id, e)
        if wake_at is not None:
            self.w.wakes[state.task_id] = wake_at
        if lease_ttl_s is not None:
            self.w.leases[state.task_id] = self.w.clock().timestamp() + lease_ttl_s
        self.w.publics += [_public(e) for e in public]
        self.w.views += view is not None
        return state

    def saw_no_cancel(self, state: TaskState) -> bool:
        return False  # the fake always reads the flag

    async def take_lease(self, task_id: str, ttl_s: float) -> None:
        self.w.leases[task_id] = self.w.clock().timestamp() + ttl_s

    async def drop_lease(self, task_id: str) -> None:
        self.w.leases.pop(task_id, None)

    async def expire_lease(self, task_id: str) -> None:
        if task_id in self.w.leases:
            self.w.leases[task_id] = 0.0

    async def set_tool_deadline(self, task_id: str, at_epoch_s: float) -> None:
        self.w.wakes[task_id] = at_epoch_s

    async def clear_tool_deadline(self, task_id: str) -> None:
        self.w.wakes.pop(task_id, None)

    async def request_cancel(self, task_id: str) -> None:
        self.w.cancelled.add(task_id)

    async def cancel_requested(self, task_id: str) -> bool:
        return task_id in self.w.cancelled


class FakeOutbound:
    """``ports.Outbound`` in memory; a tool request is answered at once by the world's ``tools``."""

    def __init__(self, world: World) -> None:
        self.w = world

    async def emit(self, task_id: str, event: StreamEvent) -> None:
        self.w.log(task_id, event)

    async def save_approval(self, record: ApprovalRecord) -> None:
        self.w.approvals[record.call_id] = record.model_dump()

    async def update_approval(self, task_id: str, u: UpdateApproval) -> None:
        record = self.w.approvals.get(u.call_id)
        if record and not (u.only_if_pending and record["status"] != "pending"):
            record["status"] = u.status
            if u.escalated_until is not None:
                record["escalated"], record["expires_at"] = True, u.escalated_until

    async def publish_request(self, state: TaskState, call: PendingCall, rescue: str | None = None) -> None:
        self.w.requests.append(call.model_copy(deep=True))
        answer = self.w.tools.get(call.name, lambda c: None)(call)
        if answer is not None:
            self.w.results.append(answer)

    async def public(self, state: TaskState, kind: str, **fields: object) -> None:
        self.w.publics.append(_public(agent_event(state, kind, dict(fields))))

    async def write_view(self, view: TaskView) -> None:
        self.w.views += 1

    async def announce(self, state: TaskState, decided: Announcement) -> None:
        was_sealed = self.w.sealed
        self.w.log(state.task_id, decided.event)
        if not was_sealed:
            self.w.publics.append(Public(decided.public_kind, decided.public_fields))
        self.w.leases.pop(state.task_id, None)
        self.w.wakes.pop(state.task_id, None)

    async def report_to_parent(self, state: TaskState, result: ToolResultPayload) -> None:
        """Nothing: ``teamsim.Team`` plays the bus between tasks."""

    async def cancel_child(self, state: TaskState, child_task_id: str, reason: str) -> None:
        self.w.cancels.append(CancelChild(child_task_id, reason))


class FakeReplica:
    """``ports.Background``, ``ports.Remembering`` and ``ports.Signals`` in memory."""

    def __init__(self, world: World) -> None:
        self.w = world

    def spawn_step(self, task_id: str, state: TaskState | None) -> None:
        self.w.due.append((task_id, state))

    def summarise(self, effect: Summarise) -> None:
        self.w.summaries.append(effect)

    async def save_context(self, session_id: str, context: SessionContext) -> None:
        self.w.contexts.append(context)

    async def remember(self, state: TaskState, items: Sequence[MemoryItem], entry: CacheEntry | None) -> None:
        self.w.remembered.append(Remember([], list(items), entry))

    def count(self, name: str, args: tuple[str, ...]) -> None:
        self.w.metrics.append(Metric(name, args))

    async def reached(self, name: str, task_id: str) -> None:
        """No fault points in memory."""

    def now(self) -> datetime:
        return self.w.clock()


class NoHealth:
    """``steps.Health`` that keeps nothing."""

    async def failed(self, exc: Exception) -> None:
        """Nothing."""

    async def succeeded(self) -> None:
        """Nothing."""
