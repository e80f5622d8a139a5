"""The one save loop of a transition, over any ``ports.Checkpoints``: load the task's checkpoint, apply
the agent core's transition, compare-and-set the result with its outbox, and after a lost race load and
apply again (optimistic concurrency). Redis backs it in production (``store.StateStore``); the unit tests
run this same loop over an in-memory fake (``tests/unit/fakes.py``). Nothing here imports a client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from services.orchestrator.agent.effects import IN_SAVE, Emit, HoldLease, Public, Step, Wake, WriteView
from services.orchestrator.agent.state import TaskState
from services.orchestrator.envelopes import agent_event

if TYPE_CHECKING:
    from services.orchestrator.ports import Checkpoints

SAVE_RETRIES = 8
"""Attempts of a load → transition → save before giving up (optimistic concurrency)."""


class StaleState(Exception):
    """A save lost the race: another writer saved a newer version first."""


class CancelSeen(Exception):
    """A save asked to write nothing once the task's cancel flag is set found it set (rule O10)."""


Transition = Callable[[TaskState], "Step | None"]
"""A transition of the agent core bound to its event and time: state → ``Step`` (None: nothing to do)."""


async def transition(checkpoints: "Checkpoints", lease_ttl_s: float, task_id: str, fn: Transition, *,
                     loaded: TaskState | None = None, attempts: int = SAVE_RETRIES,
                     before_save: Callable[[Step], Awaitable[None]] | None = None,
                     unless_cancelled: bool = False) -> Step | None:
    """``StateStore.transition`` over any ``ports.Checkpoints`` (the unit tests' in-memory fake runs
    this same loop): load, apply ``fn``, save with the step's outbox (``Emit``, ``Wake``,
    ``HoldLease`` for ``lease_ttl_s`` seconds, ``Public``) and its task record (the last ``WriteView``,
    rule O11), return the step without those effects;
    reload and apply again after a lost race, at most ``attempts`` times, then raise ``StaleState``.
    ``unless_cancelled``: the save writes nothing and ``CancelSeen`` is raised when the task's cancel flag
    is set (rule O10: the caller's cancel read rides in the save)."""
    for attempt in range(attempts):
        state = loaded if attempt == 0 and loaded is not None else await checkpoints.load(task_id)
        if state is None:
            return None
        # rule A34: ``fn`` changes a fork (``TaskState.fork``), never ``state``: ``loaded`` stays as the caller
        # holds it, and an attempt after a lost race starts from the state as loaded again
        step = fn(state.fork())
        if step is None or not step.save:
            return step
        if before_save is not None:
            await before_save(step)
        events = [e.event for e in step.effects if isinstance(e, Emit)]
        wakes = [e.at for e in step.effects if isinstance(e, Wake)]
        lease = any(isinstance(e, HoldLease) for e in step.effects)
        public = [agent_event(step.state, e.kind, e.fields) for e in step.effects if isinstance(e, Public)]
        views = [e.view for e in step.effects if isinstance(e, WriteView) and e.view is not None]
        try:
            await checkpoints.save(step.state, lease_ttl_s=lease_ttl_s if lease else None, events=events,
                                   wake_at=wakes[-1] if wakes else None, public=public,
                                   unless_cancelled=unless_cancelled, view=views[-1] if views else None)
        except StaleState:
            continue
        # rule O11: the record (``WriteView``) rides in the save too, like the outbox
        step.effects = [e for e in step.effects if not isinstance(e, (*IN_SAVE, WriteView))]
        return step
    raise StaleState(task_id)
