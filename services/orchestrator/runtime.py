"""The orchestrator's I/O layer: bus handlers that move tasks through the agent core.

Nothing waits in memory for a tool: each bus event moves a task one transition
(``services.orchestrator.agent``: pure functions ``(state, event, now) -> Step``),
saved with one compare-and-set (``StateStore.transition``) whose own Lua script also
writes the client events and the wake-up (the outbox); the step's other effects are
then carried out in order (``carry_out``). One replica serves many tasks at once and
any replica can resume any task.

- ``on_question``: ask the pre-router (rule R1, ``router``: rules, then the router model when
  configured; fail-open), create the checkpoint with its lease, start a model step (``steps``).
- ``on_tool_result``: record a result; when the step's calls are all back the next
  model step starts.
- ``on_control``: a cancel, or a person's decision on a call waiting for approval.
- ``sweeper``: resumes tasks whose lease lapsed and fires due tool timers.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from types import EllipsisType
from typing import Any
from uuid import UUID

import structlog
from faststream.kafka import KafkaBroker
from redis.asyncio import Redis

from conduit.records import controls, keys, sessions, slots
from conduit.records.modelhealth import ModelHealth
from conduit.records.taskstore import TaskStore
from conduit.records.taskstream import TaskEventLog
from conduit.runtime import metrics, owners
from conduit.runtime.settings import Settings
from conduit.records import mcp as mcp_records
from conduit.runtime.toolcatalog import available_tools, unavailable_tools
from contracts.api import SessionContext
from contracts.envelope import utcnow
from contracts.memory import CacheEntry, MemoryItem
from contracts.events import ApprovalDecided, QuestionAsked, TaskCancelled, ToolResult, ToolResultPayload
from services.orchestrator import router, spans, sweeper
from services.orchestrator.agent import announcing, approvals, endings, planning, recording, routing, timers
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.effects import Step, Summarise
from services.orchestrator.agent.state import TaskState
from services.orchestrator.hooks import Hooks, NoHooks
from services.orchestrator.agent.cache import Recalled
from services.orchestrator.memoryio import MemoryIO
from conduit.runtime.llm.model import Model
from services.orchestrator.outputs import Outputs
from services.orchestrator.steps import ModelSteps
from services.orchestrator.summaries import SessionSummaries
from services.orchestrator.interpreter import Interpreter, Ports
from services.orchestrator.checkpointing import SAVE_RETRIES, StaleState, Transition
from services.orchestrator.store import StateStore

log = structlog.get_logger("conduit.orchestrator")

SESSION_TURNS_READ = 50
"""Earlier turns read at a task's start (all a session keeps): those past the window are folded into
its rolling summary (rule M7) before they could fall out of the stored list."""
TOOL_AVAILABILITY_EVERY_S = 2.0
"""Seconds between two reads of the tool services' availability (sandbox status keys live 30 s)."""
BUS_PING_EVERY_S = 1.0
"""Seconds a broker ping's answer is kept by ``Orchestrator.bus_up``."""
BUS_PING_TIMEOUT_S = 1.0
"""Seconds a broker ping may take before the broker counts as unreachable (rule A15)."""


def model_from_settings(settings: Settings) -> Model | None:
    """The OpenAI-compatible model of ``settings``, or None when no endpoint is configured."""
    if not settings.llm.configured and not settings.llm.models:
        return None
    if settings.llm.models:  # rule A20: named endpoints, each call routed by its model's name
        from services.orchestrator.modelroute import RoutedModel

        return RoutedModel(settings.llm)
    from conduit.runtime.llm.openai_model import ModelClient

    return ModelClient(settings.llm)


def caused_by(event_id: UUID, fn: Transition) -> Transition:
    """``fn``, recording ``event_id`` as the cause of what the task sends next (``Envelope.child``)."""
    def apply(state: TaskState) -> Step | None:
        step = fn(state)
        if step is not None and step.save:
            step.state.cause_id = event_id
        return step
    return apply


class Orchestrator:
    """Runs the agent for every task this replica touches.

    Args:
        settings: Conduit settings (limits, timeouts in seconds).
        redis: asyncio Redis client (checkpoints, event logs, leases).
        broker: started or to-be-started KafkaBroker used for publishing.
        model: the ``Model`` to call; default: the OpenAI-compatible endpoint of ``settings``
            (None: retrieval-only mode). Tests pass an in-process ``testmodel.TestModel``.
        hooks: fault-point hooks (``services.orchestrator.hooks``); default: none.
    """

    def __init__(self, settings: Settings, redis: Redis, broker: KafkaBroker,
                 model: Model | None | EllipsisType = ..., hooks: Hooks | None = None) -> None:
        self.settings = settings
        self.redis = redis
        self.broker = broker
        self.events = TaskEventLog(redis, settings.gateway.task_events_ttl_s, settings.gateway.task_events_maxlen)
        self.tasks = TaskStore(redis, settings.gateway.task_events_ttl_s)
        self.store = StateStore(redis, settings.gateway.task_events_ttl_s, self.events, lease_ttl_s=settings.agent.lease_ttl_s)
        self.model: Model | None = model_from_settings(settings) if model is ... else model
        self.deps = Deps.from_settings(settings, model_configured=self.model is not None)
        metrics.watch_breakers(self.deps)  # conduit_circuit_breaker_open, read at scrape time
        self.out = Outputs(redis, broker, self.events, self.tasks, self.store)
        self.hooks: Hooks = hooks or NoHooks()
        self.memory = MemoryIO(settings, redis, broker)
        self.summaries = SessionSummaries(settings, redis, self.model)
        replica = Replica(self)
        self.interpreter = Interpreter(Ports(self.store, self.out, replica, replica, replica), self.deps,
                                       settings.agent.lease_ttl_s)
        self.steps = ModelSteps(self.interpreter, self.model, settings, ModelHealth(redis))
        self.timers_from = time.monotonic() + sweeper.TIMER_GRACE_S
        self._bus_up, self._bus_checked_at = True, float("-inf")
        self.owner: str | None = None
        """This process's owner name (``conduit.runtime.owners``), set by ``main``: its sweeper lists its
        model steps under it, so another replica resumes them at once when it is gone (rule A24)."""
        self.unavailable: frozenset[str] = frozenset()
        """Tools that cannot run now (e.g. ``code_exec`` without isolation), refreshed by
        ``watch_tool_availability``; left out of every new task's tool list (rule T2)."""
        self.runs_started: dict[str, float] = {}
        """Idempotency key -> epoch seconds its run began, of the tool calls live tool processes run now,
        refreshed by every sweeper pass (``sweeper.rescue_orphans``; rule A36)."""
        self.topics = owners.TopicsServed()
        """The tool request topics live tool service processes serve and when each one's assignment settled
        (``owners.topics_served``), refreshed by ``watch_tool_availability``: a call of a served topic that got
        no answer does not feed its breaker (rule A29); one whose topic rebalanced after it was sent gets its
        full time from then (rule A37)."""

    @property
    def running(self) -> dict[str, asyncio.Task[None]]:
        """Model steps running on this replica, by task id."""
        return self.steps.running

    # ================================================================ bus handlers
    async def on_question(self, event: QuestionAsked) -> None:
        """Start a task. A redelivered question (checkpoint exists) changes nothing."""
        s = self.settings
        child = event.payload.child is not None  # a worker's task (team mode): no session history, no pre-router
        waiting = None if child else self.memory.ahead(event)  # rule M13: its reply is waited for beside the reads
        # six independent reads in one round trip's time (each costs a loopback send here)
        existing, sealed, turns, context, catalog, marks = await asyncio.gather(
            self.store.load(event.task_id), self.events.is_sealed(event.task_id),
            self._no_turns() if child else self.tasks.turns(event.session_id, SESSION_TURNS_READ),
            self._no_context() if child else sessions.load_context(self.redis, event.session_id),
            mcp_records.load_catalog(self.redis, event.tenant_id),
            self._no_marks() if child else self.memory.marks(event))
        if existing is not None and existing.terminal and existing.child is not None:
            await self.apply(existing.task_id, announcing.again, loaded=existing)  # the parent asked again (rule A14): its result may be lost
        if existing is not None or sealed:
            if waiting is not None:
                waiting.cancel()
            return  # redelivered, or the gateway gave up on this task (publish timed out) and told the client
        await self.hooks.reached("question", event.task_id)  # mid-handler, before the offset is committed
        # rules M3, C1 (fail-open; a worker's task has neither memory nor cache); rule M8: asked only
        # when the user has memory items or the tenant cache entries (``marks``); rule M13: sent ahead
        recalled = Recalled() if child else await self.memory.before(event, first_turn=not turns, marks=marks,
                                                                     waiting=waiting)
        route = None if child or recalled.cached is not None else await router.decide(
            s.router, s.llm, event.payload.question, routing.domain_for(s.tenancy.tenant_domains, event.tenant_id))
        asked = event.payload.allowed_tools
        mcp_tools = [t for t in (catalog.tools if catalog else []) if asked is None or t.name in asked]
        traced, trace_parent = spans.task_context(event)  # rule O6: the task span's context, in the checkpoint
        step = planning.start(self.deps, traced, available_tools(s.web, asked, self.unavailable),
                              turns, route=route, recalled=recalled, now=utcnow(), context=context, mcp_tools=mcp_tools)
        step.state.trace_parent = trace_parent
        try:  # the lease is taken in the same script as the save: a crash after it is resumed by the sweeper
            await self.apply(event.task_id, lambda _state: step, loaded=step.state, attempts=1, new_task=True)
        except StaleState:
            return  # another replica created it

    @staticmethod
    async def _no_turns() -> list[dict[str, Any]]:
        return []

    @staticmethod
    async def _no_context() -> None:
        return None

    @staticmethod
    async def _no_marks() -> tuple[bool, bool]:
        return False, False

    async def on_tool_result(self, event: ToolResult) -> None:
        """Record a tool result; the next model step starts when the step's calls are all back."""
        deps = self.deps
        await self.apply(event.task_id, caused_by(
            event.event_id, lambda st: recording.record_results(deps, st, [event.payload], utcnow())))

    async def on_control(self, event: Any) -> None:
        """Handle control events: cancel and approval decisions (both idempotent); then forget the
        gateway's record of the event (rule G5: only one the bus lost is handled again from it)."""
        await self._on_control(event)
        await controls.forget(self.redis, event.event_id)

    async def _on_control(self, event: Any) -> None:
        deps = self.deps
        if isinstance(event, ApprovalDecided):
            step = await self.apply(event.task_id, caused_by(
                event.event_id, lambda st: approvals.decide(deps, st, event.payload, utcnow())))
            if step is None:
                log.info("approval decision changed nothing", call_id=event.payload.call_id)
        elif isinstance(event, TaskCancelled):
            await self.store.request_cancel(event.task_id)
            await self.apply(event.task_id, caused_by(
                event.event_id, lambda st: endings.on_cancel(st, event.payload.reason, utcnow())))

    async def wake(self, task_id: str) -> None:
        """Fire a task's due timers (the sweeper claimed its wake-up); deadlines are postponed
        while the broker does not answer (rule A15), and a timeout of a call whose tool service has a live
        process does not feed the tool's breaker (rule A29), and a call whose run is under way waits for the
        run's own deadline (rule A36). Results the tool services stored for its
        waiting calls are recorded first (rule A27), and then nothing else fires this time."""
        deps, bus_up = self.deps, await self.bus_up()
        state = await self.store.load(task_id)
        waiting = timers.awaiting(state) if state is not None else []
        if waiting:
            raw = await slots.mget(self.redis, [keys.tool_result(c.idempotency_key) for c in waiting])
            stored = [ToolResultPayload.model_validate_json(r) for r in raw if r is not None]
            if stored and await self.apply(task_id, lambda st: timers.take_stored(deps, st, stored, utcnow()),
                                           loaded=state) is not None:
                return
            state = None  # a lost race or nothing taken: the timers run on a fresh load
        view, runs = self.topics, self.runs_started
        await self.apply(task_id, lambda st: timers.wake(deps, st, utcnow(), bus_up, view.served, runs, view.settled),
                         loaded=state)

    async def rescue(self, task_id: str, idempotency_key: str, owner: str) -> None:
        """Rule A23: send call ``idempotency_key`` again now; the process running it (``owner``) is gone."""
        await self.apply(task_id, lambda st: timers.rescue(st, idempotency_key, owner, utcnow()))

    async def bus_up(self) -> bool:
        """Whether the broker answered a cluster description within ``BUS_PING_TIMEOUT_S`` (the
        answer is kept ``BUS_PING_EVERY_S`` seconds, so a sweep with many wake-ups asks once)."""
        now = time.monotonic()
        if now - self._bus_checked_at >= BUS_PING_EVERY_S:
            self._bus_up = await self.broker.ping(timeout=BUS_PING_TIMEOUT_S)
            self._bus_checked_at = time.monotonic()
            if not self._bus_up:
                log.warning("the broker does not answer; tool deadlines wait for it (rule A15)")
        return self._bus_up

    async def sweep(self) -> None:
        """One sweeper pass (``sweeper.sweep``)."""
        await sweeper.sweep(self)

    async def run_sweeper(self, every_s: float = 0.5) -> None:
        """Forever: ``sweep`` every ``every_s`` seconds."""
        await sweeper.run(self, every_s)

    async def watch_tool_availability(self, every_s: float = TOOL_AVAILABILITY_EVERY_S) -> None:
        """Forever: refresh ``self.unavailable``, ``self.topics`` (and whether a retriever serves memory) from the tool services' status keys every
        ``every_s`` seconds (one SCAN off the question path; a Redis error keeps the last value)."""
        while True:
            try:
                self.unavailable = await unavailable_tools(self.redis)
                await self.memory.refresh_retriever()
                self.topics = await owners.topics_served(self.redis)
            except Exception:  # noqa: BLE001 - availability is advisory: the tool error says why
                log.warning("tool availability check failed", exc_info=True)
            await asyncio.sleep(every_s)

    # ================================================================ one transition
    async def apply(self, task_id: str, fn: Transition, *, loaded: TaskState | None = None,
                    attempts: int = SAVE_RETRIES, new_task: bool = False) -> Step | None:
        """``Interpreter.apply``: apply transition ``fn`` to ``task_id`` and carry out its effects
        (None: no task, or nothing to do; ``attempts=1``: a lost race raises ``StaleState``)."""
        return await self.interpreter.apply(task_id, fn, loaded=loaded, attempts=attempts, new_task=new_task)


class Replica:
    """The orchestrator's own ports: background work, session and memory writes, metrics, fault
    points and the clock (``ports.Background``, ``ports.Remembering``, ``ports.Signals``)."""

    def __init__(self, orch: Orchestrator) -> None:
        self.orch = orch

    def spawn_step(self, task_id: str, state: TaskState | None) -> None:
        self.orch.steps.spawn(task_id, state=state)

    def summarise(self, effect: Summarise) -> None:
        self.orch.summaries.spawn(effect)

    async def save_context(self, session_id: str, context: SessionContext) -> None:
        await sessions.save_context(self.orch.redis, session_id, context, self.orch.settings.gateway.task_events_ttl_s)

    async def remember(self, state: TaskState, items: list[MemoryItem], entry: CacheEntry | None) -> None:
        await self.orch.memory.remember(state, items, entry)

    def count(self, name: str, args: tuple[str, ...]) -> None:
        getattr(metrics, name)(*args)

    async def reached(self, name: str, task_id: str) -> None:
        await self.orch.hooks.reached(name, task_id)

    def now(self) -> datetime:
        return utcnow()
