"""The one interpreter of the agent core's effects: a transition is applied and saved
(``checkpointing.transition``: compare-and-set with its outbox), then its other effects are carried out
in order, each by the handler its type names in ``HANDLERS``.

It touches the world only through ``ports`` (``services.orchestrator.ports``): production wires
Redis and Kafka adapters (``runtime.Orchestrator``), the unit tests in-memory fakes
(``tests/unit/fakes.py``), so the code the unit tests run is the code production runs.
``tests/unit/test_interpreter.py`` checks that every effect of the ``Effect`` union has a handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, get_args

import structlog

from services.orchestrator.agent import announcing, timers
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.effects import (
    Announce,
    CancelChild,
    ClearWake,
    DropLease,
    Effect,
    Emit,
    FaultPoint,
    FeedBreaker,
    HoldLease,
    Metric,
    Notify,
    Public,
    PublishTool,
    Remember,
    RunModelStep,
    SaveApproval,
    SaveContext,
    Step,
    Summarise,
    UpdateApproval,
    Wake,
    WriteView,
)
from services.orchestrator.agent.state import TaskState
from services.orchestrator.ports import Background, Checkpoints, Outbound, Remembering, Signals
from services.orchestrator.checkpointing import SAVE_RETRIES, StaleState, Transition, transition

log = structlog.get_logger("conduit.orchestrator")

TOGETHER = (DropLease, ClearWake, WriteView)
"""After-save effects that write distinct keys (the lease, the wake-up, the task record): consecutive ones
run at once, each done before the next other effect (a step's tool requests leave one round trip sooner)."""


@dataclass
class Ports:
    """Everything the interpreter touches (see ``services.orchestrator.ports``)."""

    store: Checkpoints
    out: Outbound
    background: Background
    memory: Remembering
    signals: Signals


@dataclass(frozen=True)
class Context:
    """What a handler knows besides its effect: the saved state, whether the step saved a checkpoint
    (``saved``) and whether a model step may start from ``state`` without loading it (``fresh``)."""

    state: TaskState
    saved: bool
    fresh: bool


Handler = Callable[["Interpreter", Context, Any], Awaitable[None]]


class Interpreter:
    """Applies transitions and carries out their effects over ``ports``.

    Args:
        ports: the adapters (production: Redis and Kafka; unit tests: in-memory fakes).
        deps: the agent core's dependencies (a worker's result is computed with them, rule D5).
        lease_ttl_s: the lease a step with ``HoldLease`` takes (seconds).
    """

    def __init__(self, ports: Ports, deps: Deps, lease_ttl_s: float) -> None:
        self.ports, self.deps, self.lease_ttl_s = ports, deps, lease_ttl_s

    async def apply(self, task_id: str, fn: Transition, *, loaded: TaskState | None = None,
                    attempts: int = SAVE_RETRIES, new_task: bool = False, unless_cancelled: bool = False) -> Step | None:
        """Apply transition ``fn`` to ``task_id`` (``checkpointing.transition``) and carry out its effects.

        Returns the step (None: no task, or nothing to do). With ``attempts=1`` a lost race
        raises ``StaleState`` (the caller's work cannot be redone); otherwise after
        ``attempts`` lost races the event is dropped with a warning. ``unless_cancelled``: nothing is
        saved and ``CancelSeen`` is raised when the task's cancel flag is set (rule O10).
        """
        deps = self.deps
        try:  # the core decides what every effect writes inside the transition (``announcing.settle``)
            step = await transition(self.ports.store, self.lease_ttl_s, task_id, lambda st: announcing.settle(deps, fn(st)), loaded=loaded,
                                    attempts=attempts, before_save=self._before_save, unless_cancelled=unless_cancelled)
        except StaleState:
            if attempts == 1:
                raise
            log.warning("transition kept losing races; dropped", task_id=task_id)
            return None
        if step is not None:
            await self.carry_out(step, new_task=new_task)
        return step

    async def _before_save(self, step: Step) -> None:
        # the approval record goes first: if the save loses, it expires unused; the task record (waiting) and
        # tool.approval_required land together in the save's script (rule O11)
        for e in step.effects:
            if isinstance(e, SaveApproval):
                await self.ports.out.save_approval(e.record)

    async def carry_out(self, step: Step, new_task: bool = False) -> None:
        """Carry out ``step``'s effects in order (consecutive ``TOGETHER`` ones at once); then mark the
        requests it sent as sent (one more transition, ``timers.mark_sent``)."""
        # the step's model step may start from this state when no later save (mark_sent) follows
        fresh = new_task or (step.save and not any(isinstance(e, PublishTool) for e in step.effects))
        ctx = Context(step.state, step.save, fresh)
        sent: list[str] = []
        together: list[Effect] = []  # consecutive effects on distinct keys: carried out at once
        for e in step.effects:
            if isinstance(e, TOGETHER):
                together.append(e)
                continue
            if together:
                await asyncio.gather(*(self.one(ctx, t) for t in together))
                together = []
            if isinstance(e, PublishTool):
                if await self._publish(ctx, e):
                    sent.append(e.call.call_id)
            else:
                await self.one(ctx, e)
        if together:
            await asyncio.gather(*(self.one(ctx, t) for t in together))
        if sent:  # a saved step's state is the stored one (its version too): no reload unless another save came first
            state = step.state
            await self.apply(state.task_id, lambda st: timers.mark_sent(st, sent), loaded=state if step.save else None)

    async def _publish(self, ctx: Context, e: PublishTool) -> bool:
        try:
            await self.ports.out.publish_request(ctx.state, e.call, e.rescue)
        except Exception as exc:  # noqa: BLE001 - the checkpoint holds it unsent; the wake-up sends it again
            log.warning("tool request not sent; its wake-up sends it again (rule A14)",
                        task_id=ctx.state.task_id, call_id=e.call.call_id, error=repr(exc)[:200])
            return False
        return True

    async def one(self, ctx: Context, e: Effect) -> None:
        """Carry out one effect by its handler (``HANDLERS``)."""
        await HANDLERS[type(e)](self, ctx, e)


# ---------------------------------------------------------------------------------- handlers
async def _wake(i: Interpreter, c: Context, e: Wake) -> None:  # only when no checkpoint was saved (else in the save)
    await i.ports.store.set_tool_deadline(c.state.task_id, e.at)


async def _clear_wake(i: Interpreter, c: Context, e: ClearWake) -> None:
    await i.ports.store.clear_tool_deadline(c.state.task_id)


async def _drop_lease(i: Interpreter, c: Context, e: DropLease) -> None:
    await i.ports.store.drop_lease(c.state.task_id)


async def _hold_lease(i: Interpreter, c: Context, e: HoldLease) -> None:
    await i.ports.store.take_lease(c.state.task_id, i.lease_ttl_s)


async def _emit(i: Interpreter, c: Context, e: Emit) -> None:
    await i.ports.out.emit(c.state.task_id, e.event)


async def _save_approval(i: Interpreter, c: Context, e: SaveApproval) -> None:
    if not c.saved:  # a saved step wrote it before its save
        await i.ports.out.save_approval(e.record)


async def _notify(i: Interpreter, c: Context, e: Notify) -> None:
    await i.ports.out.emit(e.task_id, e.event)


async def _update_approval(i: Interpreter, c: Context, e: UpdateApproval) -> None:
    await i.ports.out.update_approval(c.state.task_id, e)


async def _public(i: Interpreter, c: Context, e: Public) -> None:  # only when no checkpoint was saved
    await i.ports.out.public(c.state, e.kind, **e.fields)


async def _write_view(i: Interpreter, c: Context, e: WriteView) -> None:
    assert e.view is not None, "an unsettled WriteView (announcing.settle fills it in)"
    await i.ports.out.write_view(e.view)


async def _publish_tool(i: Interpreter, c: Context, e: PublishTool) -> None:
    await i._publish(c, e)


async def _run_model_step(i: Interpreter, c: Context, e: RunModelStep) -> None:
    # the step starts when this handler next awaits, so the record's write is on the wire first; it
    # need not load the checkpoint just saved (``fresh``: a new task's, or a saved step's that sends
    # no tool request, whose mark_sent would save a newer one)
    i.ports.background.spawn_step(c.state.task_id, c.state if c.fresh else None)


async def _announce(i: Interpreter, c: Context, e: Announce) -> None:
    decided = e.decided
    assert decided is not None, "an unsettled Announce (announcing.settle fills it in)"
    await i.ports.out.announce(c.state, decided)
    if decided.child_result is not None:  # rule D5: the worker's result goes to its supervisor
        await i.ports.out.report_to_parent(c.state, decided.child_result)


async def _cancel_child(i: Interpreter, c: Context, e: CancelChild) -> None:
    await i.ports.store.request_cancel(e.task_id)
    await i.ports.out.cancel_child(c.state, e.task_id, e.reason)


async def _save_context(i: Interpreter, c: Context, e: SaveContext) -> None:
    await i.ports.memory.save_context(e.session_id, e.context)


async def _summarise(i: Interpreter, c: Context, e: Summarise) -> None:
    i.ports.background.summarise(e)


async def _remember(i: Interpreter, c: Context, e: Remember) -> None:
    try:
        await i.ports.memory.remember(c.state, e.items, e.cache)
    except Exception:  # noqa: BLE001 - the answer is out; a lost memory write must not fail the task
        log.warning("memory write failed", task_id=c.state.task_id, exc_info=True)


async def _metric(i: Interpreter, c: Context, e: Metric) -> None:
    i.ports.signals.count(e.name, e.args)


async def _feed_breaker(i: Interpreter, c: Context, e: FeedBreaker) -> None:
    breaker = i.deps.breaker(e.tool)
    if breaker is not None:
        breaker.failure(e.at) if e.failed else breaker.success()


async def _fault_point(i: Interpreter, c: Context, e: FaultPoint) -> None:
    await i.ports.signals.reached(e.name, c.state.task_id)


HANDLERS: dict[type, Handler] = {
    Wake: _wake, ClearWake: _clear_wake, DropLease: _drop_lease, HoldLease: _hold_lease, Emit: _emit,
    SaveApproval: _save_approval, Notify: _notify, UpdateApproval: _update_approval, Public: _public,
    WriteView: _write_view, PublishTool: _publish_tool, RunModelStep: _run_model_step, Announce: _announce,
    CancelChild: _cancel_child, SaveContext: _save_context, Summarise: _summarise, Remember: _remember,
    Metric: _metric, FeedBreaker: _feed_breaker, FaultPoint: _fault_point,
}
"""Effect type -> its handler: the whole interpreter."""


def unhandled() -> set[type]:
    """Effect types of the ``Effect`` union without a handler (a test keeps it empty)."""
    return set(get_args(Effect)) - set(HANDLERS)
