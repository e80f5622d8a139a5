"""Model steps: one streaming model call per step (rule A1, docs/architecture.md), in the
background, holding the task's lease.

A step plans the call (``agent.planning.plan_step``: limits, window, tool schemas),
streams it (content becomes ``answer.delta`` as it arrives), then applies the reply
(``planning.on_reply`` / ``on_model_failed``) as one transition on the checkpoint it
started from: a checkpoint saved meanwhile by someone else supersedes the step.

Ordering: the step's ``step.started`` append travels while the model request goes
out; every later event of the step waits for it (``DeltaWriter(after=...)``), so the
log keeps its order. A resumed step (the replica that held the lease died) first
sends ``answer.reset``, then runs the model call again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog
from redis.exceptions import RedisError

from conduit.runtime import metrics
from conduit.runtime.settings import Settings
from contracts.stream import AnswerDelta, AnswerReset, ThinkingDelta
from services.orchestrator import spans
from services.orchestrator.agent import announcing, endings, planning
from services.orchestrator.agent.stepplan import StepPlan
from services.orchestrator.agent.state import TaskState
from services.orchestrator.deltas import DeltaWriter
from services.orchestrator.interpreter import Interpreter
from conduit.runtime.llm.model import MODEL_TIMEOUT, Model, ModelError, ModelResponse
from services.orchestrator.checkpointing import CancelSeen, StaleState


log = structlog.get_logger("conduit.orchestrator")

CANCEL_POLL_S = 0.25
"""Seconds between two checks of the cancel flag while a model streams."""


class Health(Protocol):
    """Where a model call's configuration errors are kept for operators (``records.modelhealth``)."""

    async def failed(self, exc: ModelError) -> None:
        """A call failed with ``exc``."""

    async def succeeded(self) -> None:
        """A call succeeded."""


class ModelSteps:
    """The model steps running on this replica (``running``: task id → asyncio task).

    Args:
        interp: the interpreter whose ports it reads and writes through and whose ``apply`` it uses.
        model: the model (None: retrieval-only answers).
        settings: lease TTL (seconds) and the tenants that see the model's reasoning.
        health: where configuration errors are kept (production: ``ModelHealth`` in Redis).
    """

    def __init__(self, interp: Interpreter, model: Model | None, settings: Settings, health: Health) -> None:
        self.interp, self.model, self.settings, self.health = interp, model, settings, health
        self.store, self.out, self.clock = interp.ports.store, interp.ports.out, interp.ports.signals.now
        self.running: dict[str, asyncio.Task[None]] = {}
        self.rerun: set[str] = set()

    def spawn(self, task_id: str, resumed: bool = False, state: TaskState | None = None) -> None:
        """Start a model step for ``task_id`` in the background.

        ``state`` is the checkpoint the caller has just saved (a new task, or a step that sends no
        tool request: ``Orchestrator.carry_out``), so the step need
        not load it again. If a step of this task is still finishing here (its tool calls were
        all answered at once, or a fast tool replied before the step returned), the new step
        starts right after it ends instead of being lost.
        """
        current = self.running.get(task_id)
        if current and not current.done():
            self.rerun.add(task_id)
            return
        t = asyncio.create_task(self.run(task_id, resumed, state))
        self.running[task_id] = t
        t.add_done_callback(lambda _t: self.running.pop(task_id, None) if self.running.get(task_id) is _t else None)

    async def _renew_lease(self, task_id: str) -> None:
        every = max(0.5, self.settings.agent.lease_ttl_s / 3)
        while True:
            await asyncio.sleep(every)
            try:
                await self.store.take_lease(task_id, self.settings.agent.lease_ttl_s)
            except RedisError as exc:  # Redis restarting: the next renewal may reach it (else the lease lapses)
                log.warning("lease renewal failed", error=repr(exc))

    async def run(self, task_id: str, resumed: bool = False, fresh: TaskState | None = None) -> None:
        """Run one model step of ``task_id`` now (``spawn`` runs it in the background): from ``fresh``
        or the loaded checkpoint; ``resumed``: the replica that held the lease died (``answer.reset``
        first). A step superseded by a newer checkpoint does nothing; one that crashes fails its task
        with ``internal_error``; one that loses Redis leaves the task to be resumed (rule A16)."""
        structlog.contextvars.bind_contextvars(task_id=task_id)
        store = self.store
        renew = asyncio.create_task(self._renew_lease(task_id))
        try:
            state = fresh if fresh is not None else await store.load(task_id)
            if state is None or not (state.terminal or planning.resumable(state)):
                await store.drop_lease(task_id)
            elif state.terminal:  # ended but maybe never announced; a worker's result may not have reached its supervisor
                await self.interp.apply(task_id, announcing.again, loaded=state)
            else:
                if resumed:
                    await self.out.emit(task_id, AnswerReset(reason="resumed from checkpoint after a replica failure"))
                with spans.step_span(state, resumed):  # rule O6: a child of the task's span
                    await self._step(state, fresh is not None)
        except StaleState:
            log.info("step superseded by a newer checkpoint")
        except asyncio.CancelledError:
            raise
        except RedisError as exc:  # rule A16: the store went away mid-step, as if this step had crashed
            log.warning("model step lost Redis; the task resumes from its checkpoint", error=repr(exc))
            with contextlib.suppress(RedisError):  # back already: any replica's sweeper resumes it now
                await store.expire_lease(task_id)
        except Exception as exc:  # noqa: BLE001 - the task fails visibly, the replica lives on
            log.exception("model step crashed")
            message = f"{type(exc).__name__}: {exc}"[:300]
            await self.interp.apply(task_id, lambda st: None if st.terminal else endings.fail(
                st, "internal_error", message, self.clock()))
        finally:
            renew.cancel()
            if task_id in self.rerun:
                self.rerun.discard(task_id)
                self.running.pop(task_id, None)
                self.spawn(task_id)

    async def _step(self, state: TaskState, fresh: bool = False) -> None:
        deps, task_id, apply, now = self.interp.deps, state.task_id, self.interp.apply, self.clock
        # rule O10: a step from the state this process just saved (``fresh``) has the flag from that save's script
        if not (fresh and self.store.saw_no_cancel(state)) and await self.store.cancel_requested(task_id):
            await apply(task_id, lambda st: endings.cancel(st, "cancelled by user", now()), loaded=state, attempts=1)
            return
        state = state.fork()  # rule A34: the step is counted on a copy; the checkpoint as loaded stays as it was
        plan = planning.plan_step(deps, state, now())
        if plan.stop is not None:  # rules E2-E4: no call may run; the task ends with a wrap-up
            await self.out.emit(task_id, plan.started)
            stop = plan.stop
            await apply(task_id, lambda st: endings.wrap_up(st, stop, now()), loaded=state, attempts=1)
            return
        if not plan.use_model or self.model is None:
            await self.out.emit(task_id, plan.started)
            await apply(task_id, lambda st: planning.retrieval_only_step(deps, st, now()), loaded=state, attempts=1)
            return
        reply = await self._call_model(state, plan)
        if isinstance(reply, ModelError):
            error, streamed, code, endpoint = str(reply), reply.streamed, reply.code, plan.endpoint
            await apply(task_id, lambda st: planning.on_model_failed(deps, st, error, streamed, now(), code, endpoint),
                        loaded=state, attempts=1)
            return
        try:  # rule O10: the cancel read rides in the save; only a set flag costs a second round trip
            await apply(task_id, lambda st: planning.on_reply(deps, st, plan, reply, now(), False),
                        loaded=state, attempts=1, unless_cancelled=True)
        except CancelSeen:  # applied again to the stored checkpoint, as cancelled
            await apply(task_id, lambda st: planning.on_reply(deps, st, plan, reply, now(), True), attempts=1)

    def _thinking_writer(self, state: TaskState, started: "asyncio.Future[None]") -> DeltaWriter | None:
        """A writer of ``thinking`` events when the task's tenant is in ``thinking_tenants`` (else None)."""
        if state.tenant_id not in self.settings.tenancy.thinking_tenants:
            return None
        out, task_id = self.out, state.task_id

        async def emit_thought(text: str) -> None:
            await out.emit(task_id, ThinkingDelta(text=text))
        return DeltaWriter(emit_thought, after=started)

    async def _call_model(self, state: TaskState, plan: StepPlan) -> ModelResponse | ModelError:
        """Stream one model call; feeds the model breaker and metrics. Returns the reply or the error."""
        out, task_id, model = self.out, state.task_id, self.model
        assert model is not None
        # the step.started append travels while the model request goes out; every later
        # event of this step waits for it, so the log keeps its order
        started = asyncio.ensure_future(out.emit(task_id, plan.started))

        async def emit_delta(text: str) -> None:
            await out.emit(task_id, AnswerDelta(text=text))

        deltas = DeltaWriter(emit_delta, after=started)  # one append in flight; text arriving meanwhile joins the next
        last_check = [time.monotonic()]  # rule O10: the step read the flag as it started; polled from here on

        async def should_stop() -> bool:
            now = time.monotonic()
            if now - last_check[0] < CANCEL_POLL_S:
                return False
            last_check[0] = now
            return await self.store.cancel_requested(task_id)

        streamed = [False]
        thinking = self._thinking_writer(state, started)

        async def on_delta(text: str) -> None:
            if not plan.stream:
                return  # a supervisor's draft: the finalizer's text is what the client reads (rule D9)
            if thinking is not None and not streamed[0]:
                await thinking.flush()  # the reasoning so far lands before the first answer text
            streamed[0] = True
            await deltas.add(text)

        async def call() -> ModelResponse:
            assert model is not None
            try:
                return await model.stream(plan.messages, plan.tools, on_delta, should_stop, max_tokens=plan.max_tokens,
                                          on_thinking=thinking.add if thinking is not None else None,
                                          model=plan.model, timeout_s=plan.timeout_s)
            finally:
                if thinking is not None:
                    await thinking.flush()

        requested = plan.model or self.settings.llm.model
        with spans.model_span(state, plan, requested):  # rule O7: the GenAI conventions
            reply = await self._timed(call, plan, state, deltas, streamed)
            spans.model_outcome(reply, requested)
        return reply

    async def _timed(self, call: Callable[[], Awaitable[ModelResponse]], plan: StepPlan, state: TaskState,
                     deltas: DeltaWriter, streamed: list[bool]) -> ModelResponse | ModelError:
        """Run ``call`` within the step's time limit; feed the breaker, health and metrics."""
        t0 = time.perf_counter()
        try:  # rules E1, E2: the whole call is bounded by the hard cap and the time left
            resp = await asyncio.wait_for(call(), plan.timeout_s)
        except TimeoutError:
            await deltas.flush()
            metrics.observe_model_call(None, time.perf_counter() - t0, 0, 0, "error")
            return ModelError(f"model call exceeded its {plan.timeout_s:.1f} s limit", streamed=streamed[0],
                              code=MODEL_TIMEOUT)
        except ModelError as exc:
            await deltas.flush()
            self.interp.deps.model_breaker_for(plan.endpoint or "default").failure(self.clock().timestamp())  # rule A21
            metrics.observe_model_call(None, time.perf_counter() - t0, 0, 0, "error")
            log.warning("model call failed", error=str(exc), code=exc.code, kind=exc.kind, streamed=exc.streamed)
            await self.health.failed(exc)
            return exc
        await deltas.flush()
        self.interp.deps.model_breaker_for(plan.endpoint or "default").success()
        await self.health.succeeded()
        metrics.observe_model_call(resp.first_token_s, resp.total_s, resp.usage.prompt_tokens,
                                   resp.usage.completion_tokens, "ok", model=plan.endpoint or "default",
                                   tenant=metrics.tenant_label(state.tenant_id, self.settings.tenancy.tenants))
        return resp
