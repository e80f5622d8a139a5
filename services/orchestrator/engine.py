"""The ReAct agent as an event-driven state machine.

Nothing waits in memory for a tool: each bus event moves a task one transition
and checkpoints it (``StateStore``), so one replica serves many tasks at once and
any replica can resume any task.

Transitions:
- ``on_question``: create the checkpoint, take the lease, start a model step.
- model step (background asyncio task holding the lease): one streaming model
  call that both decides and writes (seed 000 §4). Content becomes
  ``answer.delta``; tool calls become ``ToolRequested`` events and the task
  waits (``waiting_tool``); no tool calls means the answer is final.
- ``on_tool_result``: record the result; when the step's calls are all back,
  their evidence is numbered into the pool and the next model step starts.
- ``on_cancel``: stop the task with ``task.cancelled``.
- ``sweep``: resume tasks whose lease lapsed (replica died: ``answer.reset``
  first, then the model call is re-run) and turn overdue tool calls into
  ``timeout`` results.
Without a model (or with the model failing) the same loop runs in
retrieval-only mode: a real ``kb_search`` tool call, then an answer composed
from the evidence (``fallback``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import uuid
from datetime import timedelta
from typing import Any

import structlog
from faststream.kafka import KafkaBroker
from pydantic import ValidationError
from redis.asyncio import Redis

from conduit.records import approvals
from conduit.runtime import bus, metrics
from conduit.runtime.settings import Settings
from conduit.records.taskstore import TaskStore
from conduit.records.taskstream import TaskEventLog
from conduit.runtime.toolcatalog import available_tools
from contracts import topics
from contracts.api import ApprovalRecord, StepRecord, TaskView
from contracts.envelope import utcnow
from contracts.events import (
    AgentEvent,
    AgentEventPayload,
    ApprovalDecided,
    QuestionAsked,
    TaskCancelled,
    ToolError,
    ToolRequested,
    ToolRequestPayload,
    ToolResult,
    ToolResultPayload,
)
from contracts.evidence import Citation
from contracts.stream import (
    OUTPUT_MAX_CHARS,
    AnswerDelta,
    AnswerReset,
    ApprovalRequiredEvent,
    EvidenceEvent,
    StepStarted,
    StreamEvent,
    TaskCancelledEvent,
    TaskCompleted,
    TaskFailed,
    ToolCompletedEvent,
    ToolRequestedEvent,
    TraceEvent,
)
from contracts.tools import TOOL_SPECS, arguments_digest, openai_tool_schema
from services.orchestrator import fallback, policies, prompt
from services.orchestrator.breaker import CircuitBreaker
from services.orchestrator.deltas import DeltaWriter
from services.orchestrator.evidence import EvidencePool
from services.orchestrator.model import ModelClient, ModelError, parse_arguments
from services.orchestrator.state import PendingCall, TaskState
from services.orchestrator.store import LEASES, TOOL_DEADLINES, StaleState, StateStore
from services.orchestrator.window import window

log = structlog.get_logger("conduit.orchestrator")

SAVE_RETRIES = 8
"""Attempts of a load-modify-save transition before giving up (optimistic concurrency)."""
TIMER_GRACE_S = 3.0
"""Seconds after start before tool deadlines fire, so results that arrived while no
replica was up are consumed first instead of being declared timeouts."""
CANCEL_POLL_S = 0.25
"""Seconds between two checks of the cancel flag while a model streams."""
UNKNOWN_TOOL_PLACEHOLDER = "kb_search"
"""``ToolResultPayload.tool`` of the refusal of a tool name the model made up (the contract's
``ToolName`` is closed); the call, its ``tool.*`` events and the record keep the name asked for."""


class Orchestrator:
    """Runs the agent for every task this replica touches.

    Args:
        settings: Conduit settings (limits, timeouts in seconds).
        redis: asyncio Redis client (checkpoints, event logs, leases).
        broker: started or to-be-started KafkaBroker used for publishing.
    """

    def __init__(self, settings: Settings, redis: Redis, broker: KafkaBroker) -> None:
        self.settings = settings
        self.redis = redis
        self.broker = broker
        self.events = TaskEventLog(redis, settings.task_events_ttl_s, settings.task_events_maxlen)
        self.tasks = TaskStore(redis, settings.task_events_ttl_s)
        self.store = StateStore(redis, settings.task_events_ttl_s, self.events)
        self.model = ModelClient(settings) if settings.model_configured else None
        self.breaker = CircuitBreaker(settings.model_breaker_failures, settings.model_breaker_cooldown_s)
        self.tool_breakers = {name: CircuitBreaker(settings.tool_breaker_failures, settings.tool_breaker_cooldown_s)
                              for name in TOOL_SPECS}
        self.running: dict[str, asyncio.Task[None]] = {}
        self.rerun: set[str] = set()
        self.background_tasks: set[asyncio.Task[None]] = set()
        self.timers_from = time.monotonic() + TIMER_GRACE_S

    # ================================================================ bus handlers
    async def on_question(self, event: QuestionAsked) -> None:
        """Start a task. A redelivered question (checkpoint exists) changes nothing."""
        s = self.settings
        # three independent reads in one round trip's time (each costs a loopback send here)
        existing, sealed, turns = await asyncio.gather(
            self.store.load(event.task_id), self.events.is_sealed(event.task_id),
            self.tasks.turns(event.session_id, s.history_turns))
        if existing is not None:
            return  # redelivered: the task already exists
        if sealed:
            return  # the gateway gave up on this task (publish timed out) and told the client
        await self._crash_if_injected("question", event.task_id)  # mid-handler, before the offset is committed
        state = TaskState(
            task_id=event.task_id,
            session_id=event.session_id,
            tenant_id=event.tenant_id,
            user_id=event.user_id,
            traceparent=event.traceparent,
            question=event.payload.question,
            allowed_tools=available_tools(s, event.payload.allowed_tools),
            status="running",
            created_at=event.occurred_at,
            mode="agent" if self.model else "retrieval_only",
            fallback_reason=None if self.model else "no_model_configured",
            messages=[
                {"role": "system", "content": prompt.SYSTEM_PROMPT},
                *prompt.history_messages(turns),
                {"role": "user", "content": event.payload.question},
            ],
        )
        # the lease is taken in the same script as the save: a crash after it is resumed by the sweeper
        try:
            await self.store.save(state, lease_ttl_s=s.lease_ttl_s)
        except StaleState:
            return  # another replica created it
        # the step starts only when this handler next awaits, so the record's write below is on the
        # wire first (the step needs several round trips before it writes the record again)
        self._spawn(state.task_id, state=state)
        await self._write_view(state)
        await self._public(state, "task.started")

    async def on_tool_result(self, event: ToolResult) -> None:
        """Record a tool result; start the next model step when the step's calls are all back."""
        await self._record_results(event.task_id, [event.payload])

    async def on_control(self, event: Any) -> None:
        """Handle control events: cancel and approval decisions (both idempotent)."""
        if isinstance(event, ApprovalDecided):
            await self._decide(event)
            return
        if isinstance(event, TaskCancelled):
            await self.store.request_cancel(event.task_id)
            for _ in range(SAVE_RETRIES):
                state = await self.store.load(event.task_id)
                if state is None:
                    return
                if state.terminal:
                    # a replica that died between saving the end and announcing it told nobody: this
                    # redelivery does (idempotent: the log seals once)
                    await self._announce_terminal(state)
                    return
                try:
                    await self._finish_cancelled(state, event.payload.reason)
                    return
                except StaleState:
                    continue

    async def _crash_if_injected(self, point: str, task_id: str) -> None:
        """Fault injection (tests, evals): exit the process at ``point`` once per task when
        ``fault_crash_once`` names it. Exit code 70; nothing after this point runs."""
        if self.settings.fault_crash_once == point and await self.redis.set(f"conduit:fault:{task_id}", "1", nx=True, ex=600):
            log.error("fault injection: exiting", point=point)
            os._exit(70)

    # ================================================================ model steps
    def _spawn(self, task_id: str, resumed: bool = False, state: TaskState | None = None) -> None:
        """Start a model step for ``task_id`` in the background.

        ``state`` is the checkpoint the caller has just saved (a new task), so the
        step need not load and parse it again; otherwise the step loads it.

        If a step of this task is still finishing here (e.g. its tool calls were all
        answered at once, or a fast tool replied before the step returned), the new
        step starts right after it ends instead of being lost.
        """
        current = self.running.get(task_id)
        if current and not current.done():
            self.rerun.add(task_id)
            return
        t = asyncio.create_task(self._run_step(task_id, resumed, state))
        self.running[task_id] = t
        t.add_done_callback(lambda _t: self.running.pop(task_id, None) if self.running.get(task_id) is _t else None)

    async def _renew_lease(self, task_id: str) -> None:
        every = max(0.5, self.settings.lease_ttl_s / 3)
        while True:
            await asyncio.sleep(every)
            await self.store.take_lease(task_id, self.settings.lease_ttl_s)

    async def _run_step(self, task_id: str, resumed: bool, fresh: TaskState | None = None) -> None:
        structlog.contextvars.bind_contextvars(task_id=task_id)
        renew = asyncio.create_task(self._renew_lease(task_id))
        try:
            state = fresh if fresh is not None else await self.store.load(task_id)
            if state is None:
                await self.store.drop_lease(task_id)
                return
            if state.terminal:
                await self._announce_terminal(state)
                return
            if state.phase != "model":
                await self.store.drop_lease(task_id)
                return
            if resumed:
                await self._emit(task_id, AnswerReset(reason="resumed from checkpoint after a replica failure"))
            await self._model_step(state)
        except StaleState:
            log.info("step superseded by a newer checkpoint")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the task fails visibly, the replica lives on
            log.exception("model step crashed")
            state = await self.store.load(task_id)
            if state and not state.terminal:
                try:
                    await self._finish_failed(state, "internal_error", f"{type(exc).__name__}: {exc}"[:300])
                except StaleState:
                    pass
        finally:
            renew.cancel()
            if task_id in self.rerun:
                self.rerun.discard(task_id)
                self.running.pop(task_id, None)
                self._spawn(task_id)

    async def _model_step(self, state: TaskState) -> None:
        s = self.settings
        if await self.store.cancel_requested(state.task_id):
            await self._finish_cancelled(state, "cancelled by user")
            return
        elapsed = (utcnow() - state.created_at).total_seconds()
        limits = {"max_rounds": state.rounds + 1 >= s.max_rounds, "max_tool_calls": state.tool_calls_used >= s.max_tool_calls,
                  "max_tokens": state.usage.total_tokens >= s.max_tokens, "deadline": elapsed >= s.task_deadline_s}
        soft = not any(limits.values()) and (state.rounds + 2 >= s.max_rounds or state.tool_calls_used + 2 >= s.max_tool_calls)
        hit = next((name for name, reached in limits.items() if reached), None)
        final = hit is not None
        if final:
            state.stop_reason = hit
        state.step += 1
        state.rounds += 1
        step_started = StepStarted(step=state.step, phase="final" if final else "model")

        if self.model is None or state.mode == "retrieval_only" or self.breaker.open:
            await self._emit(state.task_id, step_started)
            if self.model is not None and state.mode != "retrieval_only":
                state.mode, state.fallback_reason = "retrieval_only", "model_circuit_open"
            await self._retrieval_only_step(state)
            return
        # the step.started append travels while the model request goes out; every later
        # event of this step waits for it, so the log keeps its order
        started = asyncio.ensure_future(self._emit(state.task_id, step_started))

        messages = window(state.messages, s.context_window_chars)
        if final:
            messages.append({"role": "system", "content": prompt.LIMIT_NOTE})
        elif soft:
            messages.append({"role": "system", "content": prompt.SOFT_LIMIT_NOTE})
        tools = None if final or not state.allowed_tools else [openai_tool_schema(t) for t in state.allowed_tools]

        async def emit_delta(text: str) -> None:
            await self._emit(state.task_id, AnswerDelta(text=text))

        # one append in flight, after step.started; text arriving meanwhile joins the next
        deltas = DeltaWriter(emit_delta, after=started)

        last_check = [0.0]

        async def should_stop() -> bool:
            now = time.monotonic()
            if now - last_check[0] < CANCEL_POLL_S:
                return False
            last_check[0] = now
            return await self.store.cancel_requested(state.task_id)

        t0 = time.perf_counter()
        try:
            resp = await self.model.stream(messages, tools, deltas.add, should_stop)
            await deltas.flush()
            self.breaker.success()
            metrics.observe_model_call(resp.first_token_s, resp.total_s, resp.usage.prompt_tokens,
                                       resp.usage.completion_tokens, "ok")
        except ModelError as exc:
            await deltas.flush()
            self.breaker.failure()
            metrics.observe_model_call(None, time.perf_counter() - t0, 0, 0, "error")
            log.warning("model call failed", error=str(exc), streamed=exc.streamed)
            if exc.streamed:
                await self._emit(state.task_id, AnswerReset(reason="the model call failed; answering from the knowledge base"))
            state.mode, state.fallback_reason = "retrieval_only", f"model_unavailable: {exc}"[:300]
            state.trace.append({"phase": "llm", "error": str(exc)[:300]})
            await self._retrieval_only_step(state)
            return

        state.usage = state.usage.add(resp.usage)
        llm = {"step": state.step, "first_token_s": resp.first_token_s, "total_s": round(resp.total_s, 4),
               "retries": resp.retries, "prompt_tokens": resp.usage.prompt_tokens, "completion_tokens": resp.usage.completion_tokens}
        state.trace.append({"phase": "llm", **llm})
        await self._emit(state.task_id, TraceEvent(phase="llm", data=llm))
        state.steps.append(StepRecord(step=state.step, kind="model", duration_ms=round(resp.total_s * 1000, 2)))
        if await self.store.cancel_requested(state.task_id):
            await self._finish_cancelled(state, "cancelled by user")
            return
        if resp.tool_calls and not final:
            if resp.content:
                await self._emit(state.task_id, AnswerReset(reason="the model decided to call tools"))
            state.messages.append({
                "role": "assistant",
                "content": resp.content or None,
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in resp.tool_calls
                ],
            })
            calls = [(c.id, c.name, parse_arguments(c.arguments)) for c in resp.tool_calls]
            await self._request_tools(state, calls)
            return
        await self._complete(state, resp.content)

    async def _retrieval_only_step(self, state: TaskState) -> None:
        """No model: one real kb_search for the question, then an answer from the evidence."""
        searched = any(r.kind == "tool" and r.tool == "kb_search" for r in state.steps)
        if not searched and not state.evidence:
            call_id = f"call_{uuid.uuid4().hex[:12]}"
            state.messages.append({
                "role": "assistant", "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "kb_search", "arguments": "{}"}}],
            })
            await self._request_tools(state, [(call_id, "kb_search", {"query": state.question, "reason": "检索知识库中与问题最相关的原文"})])
            return
        answer = fallback.compose(state.question, state.evidence, model_configured=self.model is not None)
        for para in answer.split("\n\n"):
            await self._emit(state.task_id, AnswerDelta(text=para + "\n\n"))
        await self._complete(state, answer.rstrip())

    async def _request_tools(self, state: TaskState, calls: list[tuple[str, str, dict[str, Any] | None]]) -> None:
        """Turn the model's tool calls into pending calls, checkpoint, then publish the requests.

        Each call is checked in order: tool offered, arguments valid, not rejected
        before by a person, loop detection (seed 003: third identical call is
        answered "you already have that result", a fourth ends the task), budget,
        the tool's circuit breaker, and the approval policy.
        """
        s = self.settings
        now = utcnow()
        deadline = now + timedelta(seconds=s.tool_timeout_s)
        pending: list[PendingCall] = []
        loop_stop = False
        for call_id, name, args in calls:
            call = PendingCall(
                call_id=call_id, tool=name, arguments=args or {},
                reason=str((args or {}).get("reason", ""))[:500], step=state.step,
                idempotency_key=f"{state.task_id}:{state.step}:{call_id}", deadline_at=deadline,
            )
            error = None
            if name not in state.allowed_tools:
                error = ToolError(error_code="tool_not_available", message=f"tool {name!r} is not available",
                                  hint=f"available tools: {', '.join(state.allowed_tools) or 'none'}", kind="forbidden")
            elif args is None:
                error = ToolError(error_code="bad_arguments", message="arguments are not a JSON object",
                                  hint="send the arguments as a JSON object matching the schema", kind="bad_arguments")
            else:
                try:
                    TOOL_SPECS[name].args_model.model_validate(args)
                except ValidationError as exc:
                    error = ToolError(error_code="bad_arguments", message=str(exc.errors(include_url=False))[:500],
                                      hint="fix the arguments to match the tool's JSON Schema", kind="bad_arguments")
            if error is None:
                sig = policies.signature(name, args or {})
                count = state.signatures[sig] = state.signatures.get(sig, 0) + 1
                if sig in state.rejected:
                    error = ToolError(error_code="rejected_by_user", kind="forbidden",
                                      message="a person rejected this exact call earlier in this task",
                                      hint="do not ask for it again; answer with what you have or do something else")
                elif count >= policies.LOOP_STOP_AT:
                    loop_stop = True
                elif count == policies.LOOP_WARN_AT:
                    error = ToolError(error_code="repeated_call", kind="business",
                                      message=f"you already called {name} with these arguments {count - 1} times and have that result",
                                      hint="use the result you have, change the arguments, or answer now")
                elif state.tool_calls_used >= s.max_tool_calls:
                    error = ToolError(error_code="tool_budget_exhausted", message="the tool-call budget is used up",
                                      hint="answer with the evidence you have", kind="forbidden")
                elif self.tool_breakers[name].open:
                    error = ToolError(error_code="circuit_open", kind="transient",
                                      message=f"{name} failed repeatedly and is paused for {s.tool_breaker_cooldown_s:.0f} s",
                                      hint="use another tool or answer with what you have")
                else:
                    state.tool_calls_used += 1
                    if policies.needs_approval(s.approval_policies, name, args or {}):
                        call.approval = "pending"
                        call.arguments_digest = arguments_digest(call.arguments)
                        call.expires_at = now + timedelta(seconds=s.approval_ttl_s)
            if error is not None:
                # a name the model made up keeps its own name on the call and its events; the result
                # payload's ``tool`` is the contract's closed ToolName, so it carries a placeholder
                call.result = ToolResultPayload(call_id=call_id, tool=name if name in TOOL_SPECS else UNKNOWN_TOOL_PLACEHOLDER,
                                                idempotency_key=call.idempotency_key, outcome="error", error=error)
                call.received_at = now
            pending.append(call)
        if loop_stop:
            await self._finish_loop(state)
            return
        state.pending = pending
        state.phase = "tools"
        state.status = "waiting_approval" if state.pending_approvals() else "waiting_tool"
        outbox: list[StreamEvent] = []
        for call in pending:
            outbox.append(ToolRequestedEvent(call_id=call.call_id, tool=call.tool, arguments=call.arguments, reason=call.reason))
            if call.result is not None:  # refused before running (not offered, bad arguments, loop, budget, breaker)
                outbox.append(ToolCompletedEvent(
                    call_id=call.call_id, tool=call.tool, outcome=call.result.outcome, duration_ms=0.0,
                    error_code=call.result.error.error_code if call.result.error else None))
            elif call.approval == "pending":
                # the record goes first: if this replica dies before the save, it just expires unused
                outbox.append(await self._approval_record(state, call))
        # the checkpoint, the client's events and the sweeper's wake-up in one write: a kill right after it
        # loses none of them, and the wake-up re-sends whatever requests did not reach the bus
        await self.store.save(state, events=outbox, wake_at=state.next_wakeup())
        await self.store.drop_lease(state.task_id)
        await self._write_view(state)
        to_send = []
        for call in pending:
            if call.result is not None:
                continue
            if call.approval == "pending":
                metrics.approval_requested()
                await self._public(state, "approval.requested", tool=call.tool)
            else:
                await self._publish_request(state, call)
                to_send.append(call.call_id)
        if to_send:
            await self._mark_sent(state.task_id, to_send)
        if state.all_results_in():
            await self._record_results(state.task_id, [])

    async def _mark_sent(self, task_id: str, call_ids: list[str]) -> None:
        """Outbox: record that these calls' requests are on the bus, with the task's next wake-up in the same write."""
        for _ in range(SAVE_RETRIES):
            state = await self.store.load(task_id)
            if state is None or state.terminal or state.phase != "tools":
                return
            changed = False
            for c in state.pending:
                if c.call_id in call_ids and not c.sent:
                    c.sent, changed = True, True
            if not changed:
                return
            try:
                await self.store.save(state, wake_at=state.next_wakeup())
            except StaleState:
                continue
            return

    async def _publish_request(self, state: TaskState, call: PendingCall) -> None:
        """Send one ``ToolRequested`` to its tool's topic (idempotency key ``task:step:call``)."""
        request = ToolRequested(
            **state.envelope_fields(),
            payload=ToolRequestPayload(call_id=call.call_id, tool=call.tool, arguments=call.arguments, reason=call.reason,  # type: ignore[arg-type]
                                       step=call.step, idempotency_key=call.idempotency_key, deadline_at=call.deadline_at),
        )
        await bus.publish(self.broker, TOOL_SPECS[call.tool].request_topic, request)
        await self._public(state, "tool.requested", tool=call.tool)

    async def _approval_record(self, state: TaskState, call: PendingCall) -> ApprovalRequiredEvent:
        """Write the pending approval's record for the gateway; return the client's ``tool.approval_required``."""
        assert call.arguments_digest and call.expires_at
        await approvals.save(self.redis, ApprovalRecord(
            task_id=state.task_id, call_id=call.call_id, tool=call.tool, arguments=call.arguments, reason=call.reason,
            arguments_digest=call.arguments_digest, expires_at=call.expires_at))
        return ApprovalRequiredEvent(
            call_id=call.call_id, tool=call.tool, arguments=call.arguments, reason=call.reason,
            arguments_digest=call.arguments_digest, expires_at=call.expires_at.isoformat())

    async def _schedule(self, state: TaskState) -> None:
        """Wake the sweeper at the earliest approval expiry, retry time or tool deadline."""
        wake_at = state.next_wakeup()
        if wake_at is not None:
            await self.store.set_tool_deadline(state.task_id, wake_at)
        else:
            await self.store.clear_tool_deadline(state.task_id)

    async def _decide(self, event: ApprovalDecided) -> None:
        """Apply a human decision to a pending call (idempotent; a rejection is final)."""
        d = event.payload
        for _ in range(SAVE_RETRIES):
            state = await self.store.load(event.task_id)
            if state is None or state.terminal or state.phase != "tools":
                return
            call = next((c for c in state.pending if c.call_id == d.call_id), None)
            if call is None or call.approval != "pending" or call.result is not None:
                return  # unknown, already decided or expired: a repeat changes nothing
            now = utcnow()
            run = False
            rejection: ToolResultPayload | None = None
            if d.decision == "approve":
                if d.arguments_digest and d.arguments_digest != call.arguments_digest:
                    log.warning("approval digest mismatch: nothing runs", call_id=d.call_id)
                    return
                call.approval, run = "approved", True
            elif d.decision == "edit":
                try:
                    TOOL_SPECS[call.tool].args_model.model_validate(d.arguments or {})
                except ValidationError:
                    log.warning("edited arguments invalid: nothing runs", call_id=d.call_id)
                    return
                call.arguments = dict(d.arguments or {})
                call.arguments_digest = arguments_digest(call.arguments)
                call.approval, run = "edited", True
            else:
                call.approval = "rejected"
                state.rejected.append(policies.signature(call.tool, call.arguments))
                rejection = ToolResultPayload(
                    call_id=call.call_id, tool=call.tool, idempotency_key=call.idempotency_key, outcome="error",  # type: ignore[arg-type]
                    error=ToolError(error_code="rejected_by_user", kind="forbidden",
                                    message="a person rejected this call" + (f": {d.comment}" if d.comment else ""),
                                    hint="do not ask for it again; answer with what you have"))
            metrics.approval_decided()
            if run:
                call.requested_at, call.sent = now, False
                call.deadline_at = now + timedelta(seconds=self.settings.tool_timeout_s)
            state.status = "waiting_approval" if state.pending_approvals() else "waiting_tool"
            state.trace.append({"phase": "approval", "call_id": call.call_id, "decision": d.decision})
            try:
                await self.store.save(state, wake_at=state.next_wakeup())
            except StaleState:
                continue
            record = await approvals.load(self.redis, state.task_id, call.call_id)
            if record:
                record.status = call.approval  # type: ignore[assignment]
                record.arguments, record.arguments_digest = call.arguments, call.arguments_digest or record.arguments_digest
                await approvals.save(self.redis, record)
            await self._write_view(state)
            await self._public(state, "approval.decided", tool=call.tool, outcome=call.approval)
            if run:
                await self._publish_request(state, call)
                await self._mark_sent(state.task_id, [call.call_id])
            if rejection is not None:
                await self._record_results(state.task_id, [rejection])
            return

    async def _record_results(self, task_id: str, results: list[ToolResultPayload]) -> None:
        """Attach results to pending calls (idempotent); advance when all are in.

        A transient error is retried (at most ``tool_max_retries`` times, backoff with
        full jitter: seed 003) instead of being shown to the model; every result
        feeds its tool's circuit breaker.
        """
        s = self.settings
        for _ in range(SAVE_RETRIES):
            state = await self.store.load(task_id)
            if state is None or state.terminal or state.phase != "tools":
                return
            now = utcnow()
            fresh: list[ToolResultPayload] = []
            retries: list[PendingCall] = []
            traces: list[dict[str, Any]] = []
            for r in results:
                call = next((c for c in state.pending if c.call_id == r.call_id and c.idempotency_key == r.idempotency_key), None)
                if call is None or call.result is not None:
                    continue  # unknown or duplicate delivery
                transient = r.outcome == "timeout" or (r.error is not None and r.error.kind == "transient")
                if r.error is None or r.error.error_code not in ("circuit_open", "rejected_by_user", "approval_expired"):
                    breaker = self.tool_breakers.get(call.tool)
                    if breaker and transient:
                        breaker.failure()
                    elif breaker:
                        breaker.success()
                if r.outcome == "error" and transient and call.attempts < s.tool_max_retries:
                    call.attempts += 1
                    backoff = random.uniform(0, s.tool_retry_base_s * 2 ** call.attempts)  # full jitter
                    call.retry_at = now + timedelta(seconds=backoff)
                    call.deadline_at = call.retry_at + timedelta(seconds=s.tool_timeout_s)
                    retries.append(call)
                    continue
                call.result, call.received_at = r, now
                fresh.append(r)
                waited_ms = (now - call.requested_at).total_seconds() * 1000
                traces.append({"tool": call.tool, "call_id": call.call_id, "outcome": r.outcome, "attempts": call.attempts + 1,
                               "run_ms": r.duration_ms, "queue_ms": round(max(0.0, waited_ms - r.duration_ms), 2)})
                state.steps.append(StepRecord(step=call.step, kind="tool", tool=call.tool, call_id=call.call_id,
                                              arguments=call.arguments, outcome=r.outcome, duration_ms=r.duration_ms))
            if not fresh and not retries and results:
                return
            state.trace.extend({"phase": "tool", **t} for t in traces)
            new_evidence = []
            done = state.all_results_in()
            if done:
                pool = EvidencePool(state.evidence)
                for call in state.pending:
                    assert call.result is not None
                    in_context, new = pool.add(call.result.evidence) if call.result.outcome == "ok" else ([], [])
                    new_evidence.extend(new)
                    state.messages.append({"role": "tool", "tool_call_id": call.call_id,
                                           "content": prompt.render_tool_result(call.result, in_context)})
                state.pending = []
                state.phase, state.status = "model", "running"
                await self.store.take_lease(task_id, s.lease_ttl_s)
            # the client's events (and, while calls are still out, the next wake-up) go in the checkpoint's
            # own write (outbox): a kill right after it loses none
            outbox: list[StreamEvent] = [
                ToolCompletedEvent(call_id=r.call_id, tool=r.tool, outcome=r.outcome, duration_ms=r.duration_ms,
                                   error_code=r.error.error_code if r.error else None,
                                   output=r.output[:OUTPUT_MAX_CHARS] if r.output else None,
                                   artifacts=r.artifacts) for r in fresh]
            outbox += [TraceEvent(phase="tool", data=t) for t in traces]
            if new_evidence:
                outbox.append(EvidenceEvent(items=new_evidence))
            try:
                await self.store.save(state, events=outbox, wake_at=None if done else state.next_wakeup())
            except StaleState:
                continue
            await self._crash_if_injected("tool_result", task_id)
            for r in fresh:
                await self._public(state, "tool.completed", tool=r.tool, outcome=r.outcome, duration_ms=r.duration_ms)
            if done:
                await self.store.clear_tool_deadline(task_id)
                await self._write_view(state)
                self._spawn(task_id)
            return

    # ================================================================ endings
    async def _complete(self, state: TaskState, content: str) -> None:
        pool = EvidencePool(state.evidence)
        answer, citations, removed = pool.check_citations(content)
        if removed:
            state.trace.append({"phase": "citations", "removed": removed})
        state.status, state.phase, state.answer, state.finished_at = "completed", "done", answer, utcnow()
        await self.store.save(state)
        await self._announce_terminal(state, citations)

    async def _finish_loop(self, state: TaskState) -> None:
        """End a task whose model keeps repeating a call, with a report of what was tried (seed 003)."""
        tried = sorted(state.signatures.items(), key=lambda kv: -kv[1])
        lines = [f"- {sig} ×{n}" for sig, n in tried[:10]]
        report = ("The agent stopped because it kept repeating the same tool call. What was tried:\n" + "\n".join(lines))
        await self._emit(state.task_id, AnswerReset(reason="loop detected"))
        await self._emit(state.task_id, AnswerDelta(text=report))
        state.stop_reason = "loop_detected"
        await self._complete(state, report)

    async def _finish_failed(self, state: TaskState, code: str, message: str) -> None:
        state.status, state.phase, state.finished_at = "failed", "done", utcnow()
        state.trace.append({"phase": "failed", "code": code, "message": message})
        await self.store.save(state)
        await self._announce_terminal(state)

    async def _finish_cancelled(self, state: TaskState, reason: str) -> None:
        state.status, state.phase, state.finished_at = "cancelled", "done", utcnow()
        state.trace.append({"phase": "cancelled", "reason": reason})
        await self.store.save(state)
        await self._crash_if_injected("cancel", state.task_id)
        await self._announce_terminal(state)

    async def _announce_terminal(self, state: TaskState, citations: list[Citation] | None = None) -> None:
        """Emit the terminal event, record, session turn and public event (idempotent: the log seals once).

        ``citations``: the checked answer's citations when the caller has them (``_complete``);
        otherwise (a resumed task) they are derived again from the answer and the evidence pool.
        """
        latency_ms = round(((state.finished_at or utcnow()) - state.created_at).total_seconds() * 1000, 2)
        if state.status == "completed":
            if citations is None:
                citations = EvidencePool(state.evidence).check_citations(state.answer or "")[1]
            event: StreamEvent = TaskCompleted(answer=state.answer or "", citations=citations, usage=state.usage,
                                               latency_ms=latency_ms, mode=state.mode, fallback_reason=state.fallback_reason,
                                               stop_reason=state.stop_reason or "answered")
        elif state.status == "cancelled":
            event = TaskCancelledEvent(reason=next((t.get("reason", "") for t in reversed(state.trace) if t.get("phase") == "cancelled"), "cancelled"))
        else:
            failure = next((t for t in reversed(state.trace) if t.get("phase") == "failed"), {})
            event = TaskFailed(code=failure.get("code", "failed"), message=failure.get("message", "the task failed"))
        first = await self.events.append(state.task_id, event) > 0
        # the client has its terminal event; the bookkeeping writes are independent of each other
        writes = [self._write_view(state, latency_ms, citations), self.store.release(state.task_id)]
        if first:
            metrics.task_finished(state.status, state.mode)
            if state.status == "completed":
                writes.append(self.tasks.add_turn(state.session_id, state.question, state.answer or ""))
            kind = {"completed": "task.completed", "failed": "task.failed", "cancelled": "task.cancelled"}[state.status]
            await self._public(state, kind, latency_ms=latency_ms,
                               code=getattr(event, "code", None))
        await asyncio.gather(*writes)

    # ================================================================ sweeper
    async def sweep(self) -> None:
        """One pass: resume tasks with lapsed leases; time out overdue tool calls."""
        s = self.settings
        for task_id in await self.store.expired_leases():
            if task_id in self.running and not self.running[task_id].done():
                await self.store.take_lease(task_id, s.lease_ttl_s)
                continue
            if await self.store.claim(LEASES, task_id, s.lease_ttl_s):
                log.warning("resuming task after lease lapsed", task_id=task_id)
                self._spawn(task_id, resumed=True)
        if time.monotonic() < self.timers_from:
            return  # just started: consume results waiting in the topic before declaring anything late
        for task_id in await self.store.due_tool_deadlines():
            if not await self.store.claim(TOOL_DEADLINES, task_id, 5.0):
                continue
            await self._wake(task_id)

    async def _wake(self, task_id: str) -> None:
        """Handle a task's due timers: expire approvals, re-send retried calls, time out late results."""
        s = self.settings
        state = await self.store.load(task_id)
        if state is None or state.terminal or state.phase != "tools":
            await self.store.clear_tool_deadline(task_id)
            return
        now = utcnow()
        late: list[ToolResultPayload] = []
        resend: list[PendingCall] = []
        for c in state.pending:
            if c.result is not None:
                continue
            if c.approval == "pending":
                if c.expires_at and c.expires_at <= now:
                    late.append(ToolResultPayload(
                        call_id=c.call_id, tool=c.tool, idempotency_key=c.idempotency_key, outcome="error",  # type: ignore[arg-type]
                        error=ToolError(error_code="approval_expired", kind="forbidden",
                                        message="nobody approved this call in time; it did not run",
                                        hint="answer without it, or say what you would need")))
            elif not c.sent or (c.retry_at and c.retry_at <= now):
                resend.append(c)  # never confirmed on the bus (replica died), or a transient error's retry is due
            elif c.deadline_at <= now:
                late.append(ToolResultPayload(
                    call_id=c.call_id, tool=c.tool, idempotency_key=c.idempotency_key, outcome="timeout",  # type: ignore[arg-type]
                    error=ToolError(error_code="tool_timeout", kind="transient",
                                    message=f"{c.tool} gave no result within {s.tool_timeout_s:.0f} s",
                                    hint="the tool service may be down; answer with what you have or try another tool"),
                    duration_ms=round((now - c.requested_at).total_seconds() * 1000, 2)))
        resend = [c for c in resend if c.next_wakeup() is not None and c.next_wakeup() <= now]
        if resend:
            for c in resend:
                c.retry_at, c.sent = None, False
            try:
                await self.store.save(state)
            except StaleState:
                return  # someone else moved it; its timers are rescheduled there
            for c in resend:
                await self._publish_request(state, c)  # idempotent: the tool service keys results by idempotency key
            await self._mark_sent(task_id, [c.call_id for c in resend])
        expired = [r.call_id for r in late if r.error and r.error.error_code == "approval_expired"]
        for call_id in expired:
            record = await approvals.load(self.redis, task_id, call_id)
            if record and record.status == "pending":
                record.status = "expired"
                await approvals.save(self.redis, record)
                await self._public(state, "approval.decided", tool=record.tool, outcome="expired")
        if late:
            await self._record_results(task_id, late)
        elif not resend:
            await self._schedule(state)

    async def run_sweeper(self, every_s: float = 0.5) -> None:
        """Forever: ``sweep`` every ``every_s`` seconds."""
        self.timers_from = time.monotonic() + TIMER_GRACE_S
        while True:
            try:
                await self.sweep()
            except Exception:  # noqa: BLE001 - the sweeper must survive Redis hiccups
                log.exception("sweep failed")
            await asyncio.sleep(every_s)

    # ================================================================ outputs
    async def _emit(self, task_id: str, event: StreamEvent) -> None:
        await self.events.append(task_id, event)

    async def _write_view(self, state: TaskState, latency_ms: float | None = None,
                          citations: list[Citation] | None = None) -> None:
        error = None
        if state.status == "failed":
            failure = next((t for t in reversed(state.trace) if t.get("phase") == "failed"), {})
            error = {"code": str(failure.get("code", "failed")), "message": str(failure.get("message", ""))}
        if citations is None:
            citations = EvidencePool(state.evidence).check_citations(state.answer)[1] if state.answer else []
        await self.tasks.save(TaskView(
            task_id=state.task_id, session_id=state.session_id, tenant_id=state.tenant_id, user_id=state.user_id,
            status=state.status, question=state.question, answer=state.answer, citations=citations, steps=state.steps,
            usage=state.usage, mode=state.mode, error=error, created_at=state.created_at, finished_at=state.finished_at,
            latency_ms=latency_ms, stop_reason=state.stop_reason, trace=state.trace,
            pending_approvals=[{"call_id": c.call_id, "tool": c.tool, "arguments": c.arguments, "reason": c.reason,
                                "arguments_digest": c.arguments_digest,
                                "expires_at": c.expires_at.isoformat() if c.expires_at else None}
                               for c in state.pending_approvals()],
        ))

    async def _public(self, state: TaskState, kind: str, **fields: Any) -> None:
        """Publish a coarse public ``AgentEvent`` without holding up the caller.

        The publish (and its broker ack) runs in the background so consumer handlers
        and model steps never wait on the public feed; a failure is logged, never raised.
        """
        event = AgentEvent(**state.envelope_fields(), payload=AgentEventPayload(kind=kind, **fields))  # type: ignore[arg-type]

        async def send() -> None:
            try:
                await bus.publish(self.broker, topics.AGENT_EVENTS, event)
            except Exception:  # noqa: BLE001 - the public feed must not break a task
                logging.getLogger("conduit.orchestrator").warning("could not publish public agent event %s", kind)

        task = asyncio.create_task(send())
        self.background_tasks.add(task)
        task.add_done_callback(self.background_tasks.discard)
