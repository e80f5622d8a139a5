"""What the orchestrator's I/O layer touches, as protocols (the ports of ``interpreter``).

Production adapters: ``store.StateStore`` (``Checkpoints``), ``outputs.Outputs`` (``Outbound``),
``runtime.Orchestrator``'s own small adapters (``Background``, ``Remembering``, ``Signals``).
In-memory fakes of the same protocols drive the production interpreter and model steps in the unit
tests (``tests/unit/fakes.py``), like the fake unit of work of "Architecture Patterns with Python";
every integration and stack test keeps the real broker and Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from contracts.api import ApprovalRecord, SessionContext, TaskView
from contracts.events import AgentEvent, ToolResultPayload
from contracts.memory import CacheEntry, MemoryItem
from contracts.stream import StreamEvent
from services.orchestrator.agent.effects import Announcement, Summarise, UpdateApproval
from services.orchestrator.agent.state import PendingCall, TaskState


class Checkpoints(Protocol):
    """Task checkpoints, leases, wake-ups and cancel flags (Redis in production)."""

    async def load(self, task_id: str) -> TaskState | None:
        """The latest checkpoint, or None."""

    async def save(self, state: TaskState, lease_ttl_s: float | None = None, events: Sequence[StreamEvent] = (),
                   wake_at: float | None = None, public: Sequence[AgentEvent] = (),
                   unless_cancelled: bool = False, view: TaskView | None = None) -> TaskState:
        """Compare-and-set ``state`` (bumping its version) with its outbox (events, wake-up at epoch
        seconds, lease for ``lease_ttl_s`` seconds, public events) and the task's record ``view`` (rule
        O11) in one atomic write; raises
        ``checkpointing.StaleState`` when someone saved since it was loaded, and (``unless_cancelled``,
        rule O10) ``checkpointing.CancelSeen`` when the task's cancel flag is set; neither writes anything."""

    def saw_no_cancel(self, state: TaskState) -> bool:
        """Rule O10: True (once) when this process saved ``state`` and that save found no cancel flag."""

    async def take_lease(self, task_id: str, ttl_s: float) -> None:
        """Hold (or renew) the task's lease for ``ttl_s`` seconds."""

    async def drop_lease(self, task_id: str) -> None:
        """Release the task's lease."""

    async def expire_lease(self, task_id: str) -> None:
        """Mark the lease lapsed now (any replica's sweeper resumes the task)."""

    async def set_tool_deadline(self, task_id: str, at_epoch_s: float) -> None:
        """Wake the sweeper for ``task_id`` at ``at_epoch_s`` (epoch seconds)."""

    async def clear_tool_deadline(self, task_id: str) -> None:
        """Forget the task's wake-up."""

    async def request_cancel(self, task_id: str) -> None:
        """Flag the task as cancelled (a running model stream stops at its next chunk)."""

    async def cancel_requested(self, task_id: str) -> bool:
        """True once a cancel was requested."""


class Outbound(Protocol):
    """Writes other than checkpoints: client events, records, approvals, bus messages."""

    async def emit(self, task_id: str, event: StreamEvent) -> None:
        """Append one client event to the task's log (outside a save)."""

    async def save_approval(self, record: ApprovalRecord) -> None:
        """Write a new pending approval's record."""

    async def update_approval(self, task_id: str, u: UpdateApproval) -> None:
        """Apply ``u`` to the stored approval record."""

    async def publish_request(self, state: TaskState, call: PendingCall, rescue: str | None = None) -> None:
        """Send one tool request (a delegate call's worker question); ``rescue``: the gone owner of the
        call's run (the request goes to a partition a live process holds); raises when the bus refuses."""

    async def public(self, state: TaskState, kind: str, **fields: object) -> None:
        """Put a public agent event in the outbox for a step that saved no checkpoint."""

    async def write_view(self, view: TaskView) -> None:
        """Write the task's record (``GET /v1/tasks/{id}``)."""

    async def announce(self, state: TaskState, decided: Announcement) -> None:
        """Write what the ended task tells (``decided``): its record, terminal event, public event, session
        turn and tokens of the day; release its lease and wake-up (idempotent: the log seals once)."""

    async def report_to_parent(self, state: TaskState, result: ToolResultPayload) -> None:
        """Rule D5: an ended worker's ``result`` to its supervisor's delegate call."""

    async def cancel_child(self, state: TaskState, child_task_id: str, reason: str) -> None:
        """Rule D8: cancel a worker's task."""


class Background(Protocol):
    """Work started off the transition's path."""

    def spawn_step(self, task_id: str, state: TaskState | None) -> None:
        """Start the task's next model step (``state``: the checkpoint just saved, or None to load it)."""

    def summarise(self, effect: Summarise) -> None:
        """Ask the model for a session's rolling summary (rule M7); failures change nothing."""


class Remembering(Protocol):
    """Session state and long-term memory writes."""

    async def save_context(self, session_id: str, context: SessionContext) -> None:
        """Write the session's structured state and rolling summary (rules M6, M7)."""

    async def remember(self, state: TaskState, items: Sequence[MemoryItem], entry: CacheEntry | None) -> None:
        """Keep what a finished task taught: merge ``items`` into the user's memory (rules M1, M2) and
        write ``entry`` to the semantic cache (rule C2), then send them to the retriever for vectors."""


class Signals(Protocol):
    """The replica's metrics, fault points and clock."""

    def count(self, name: str, args: tuple[str, ...]) -> None:
        """Count metric ``name`` with label values ``args``."""

    async def reached(self, name: str, task_id: str) -> None:
        """A named fault point (tests may crash the process there)."""

    def now(self) -> datetime:
        """The current time (UTC)."""
