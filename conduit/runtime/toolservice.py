"""The shared runtime of a tool service: consume tool requests, run a tool, publish its result.

A tool service (retriever, web, sandbox) registers tool functions with
``ToolService``. For each ``ToolRequested`` on its topic the runtime:

1. returns the stored result when the ``idempotency_key`` was already run
   (rule T3, docs/rules.md: idempotent tools; results kept ``RESULT_TTL_S`` seconds; transient
   failures and timeouts are not stored, so a retry runs the tool again); a delivery runs the
   tool only while it holds the key's claim, and a second delivery of a call that is running
   (a redelivery after a rebalance, a re-send) leaves it to that run (rule T6), unless the run's
   process is gone (rule T8: it takes the call over; ``conduit.runtime.toolclaims``);
2. validates the arguments with the tool's contract model (``bad_arguments`` error);
3. runs the tool under its deadline (``timeout`` outcome);
4. publishes a ``ToolResult`` to ``conduit.tools.results`` keyed by task id.

Tool functions have the shape ``async def tool(args: ArgsModel, request: ToolRequested) -> ToolOutput``
and raise ``ToolFailure`` for a structured error the model can reason about.

Concurrency (rule T7, docs/rules.md): ``concurrency`` = 1 handles one message at a time and
commits its offset after it. With ``concurrency`` = N > 1 the one consumer hands each message to a
job and takes the next while fewer than N jobs run (it waits for a free slot otherwise, so the rest
stay in the topic); jobs of the same partition key (task id) run one after the other, in order.
Such an offset is committed when the job starts: a process that dies loses its running calls,
which the orchestrator sends again at once (rules T8, A23), and the stop waits for the running jobs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from conduit.runtime import bus, metrics, owners, tracing
from conduit.runtime.process import serve_process
from conduit.runtime.redis_client import make_redis
from conduit.runtime.toolclaims import CLAIM_TTL_S, Claims
from conduit.runtime.settings import Settings
from conduit.records import keys
from contracts import channels, topics
from contracts.events import (
    ArtifactRef,
    ToolError,
    ToolRequested,
    ToolResult,
    ToolResultPayload,
)
from contracts.evidence import EvidenceItem
from contracts.tools import TOOL_SPECS, ToolArgs

log = logging.getLogger("conduit.runtime.toolservice")

RESULT_TTL_S = 3600
"""Seconds a tool result is kept under its idempotency key."""
CANCEL_POLL_S = 0.5
"""Seconds between checks of a running call's task cancel flag (a cancel stops the call within this)."""
__all__ = ["CLAIM_TTL_S", "ToolFailure", "ToolOutput", "ToolService", "TaskCancelled"]


class TaskCancelled(Exception):
    """The task of a running tool call was cancelled; the call was stopped."""


@dataclass
class ToolOutput:
    """What a tool returns: evidence passages and/or text ``output`` (computation), and stored ``artifacts``."""

    evidence: list[EvidenceItem] = field(default_factory=list)
    output: str | None = None
    artifacts: list[ArtifactRef] = field(default_factory=list)


class ToolFailure(Exception):
    """A structured tool error: ``error_code``, ``message``, ``hint`` and ``kind``
    (transient, bad_arguments, forbidden, business; rule T4)."""

    def __init__(self, error_code: str, message: str, hint: str | None = None, kind: str = "transient") -> None:
        super().__init__(message)
        self.error = ToolError(error_code=error_code, message=message, hint=hint, kind=kind)  # type: ignore[arg-type]


ToolFn = Callable[[ToolArgs, ToolRequested], Awaitable[ToolOutput]]
RawToolFn = Callable[[dict[str, Any], ToolRequested], Awaitable[ToolOutput]]
"""A tool of a family without a contract model (MCP tools): it gets the arguments as sent and
checks them itself (``ToolFailure`` of kind ``bad_arguments``)."""


class ToolService:
    """Runs tool functions for requests on one topic.

    Args:
        name: service name (``retriever``, ``web``, ``sandbox``), used in logs and readiness.
        topic: request topic from ``contracts.topics``.
        group_id: consumer group from ``contracts.topics``.
        settings: Conduit settings.
        timeout_s: per-call deadline in seconds (default ``settings.tools.tool_timeout_s``).
    """

    def __init__(self, name: str, topic: str, group_id: str, settings: Settings, timeout_s: float | None = None) -> None:
        self.name = name
        self.topic = topic
        self.group_id = group_id
        self.settings = settings
        self.timeout_s = timeout_s or settings.tools.tool_timeout_s
        self.tools: dict[str, ToolFn] = {}
        self.concurrency = 1
        """Messages handled at once by the one consumer (rule T7; see the module doc)."""
        self._slots: asyncio.Semaphore | None = None
        self._lanes: dict[str, asyncio.Task] = {}
        """The last job of each partition key (task id): the next one of that key waits for it."""
        self._jobs: set[asyncio.Task] = set()
        self._owner = owners.owner_id(name)
        """This process's name on the tool claims it takes and on its Redis connections (rules T6, T8)."""
        self.redis: Redis = make_redis(settings.store, client_name=owners.connection_name(self._owner))
        self.claims = Claims(self.redis, self._owner)
        self.broker = bus.make_broker(settings, client_id=name, redis=self.redis)
        self.extra: list[tuple[str, Callable[[Any], Awaitable[None]]]] = []
        """Other (topic, handler) read by the same consumer; see ``consume``."""
        self.apart: list[tuple[str, str, Callable[[Any], Awaitable[None]], int | None]] = []
        """(topic, group, handler, fetch wait) read by consumers of their own; see ``consume_apart``."""
        self.families: list[tuple[Callable[[str], bool], RawToolFn]] = []
        """Tools named at run time (``tool_family``): (name test, implementation)."""

    def consume(self, topic: str, handler: Callable[[Any], Awaitable[None]]) -> None:
        """Also handle the events of ``topic`` (those ``contracts.channels`` lists for it).

        They are read by this service's one consumer (same group, one join: tansu joins
        cost seconds) with the tool requests, one message at a time; ``handler(event)``
        must be idempotent (at-least-once delivery, see ``bus.subscribe``).
        Raises ``contracts.channels.UnknownChannel`` for a topic not in the table.
        """
        channels.events_on(topic)
        self.extra.append((topic, handler))

    def consume_apart(self, topic: str, group_id: str, handler: Callable[[Any], Awaitable[None]],
                      fetch_max_wait_ms: int | None = None) -> None:
        """Also handle the events of ``topic`` with a consumer of their own in group ``group_id``.

        That consumer handles one message at a time and commits its offset after the handler
        returned (``concurrency`` does not apply); it costs one more group join. Used by the
        retriever's replicas to read every write each (rule K10). ``handler`` must be idempotent.
        ``fetch_max_wait_ms``: that consumer's fetch wait (default ``kafka_fetch_max_wait_ms``).
        Raises ``contracts.channels.UnknownChannel`` for a topic not in the table.
        """
        channels.events_on(topic)
        self.apart.append((topic, group_id, handler, fetch_max_wait_ms))

    async def _dispatch(self, event: Any) -> None:
        """Route one message of the combined subscription to its handler."""
        if isinstance(event, ToolRequested):
            await self.handle(event)
            return
        for topic, handler in self.extra:
            if isinstance(event, channels.events_on(topic)):
                await handler(event)
                return
        raise TypeError(f"{self.name} has no handler for {type(event).__name__}")

    def tool(self, name: str, fn: ToolFn) -> None:
        """Register ``fn`` as the implementation of tool ``name`` (a key of ``TOOL_SPECS``)."""
        if name not in TOOL_SPECS:
            raise KeyError(name)
        self.tools[name] = fn

    def tool_family(self, matches: Callable[[str], bool], fn: RawToolFn) -> None:
        """Serve every tool whose name ``matches`` (e.g. ``contracts.mcp.is_mcp``) with ``fn``,
        which receives the arguments unvalidated and validates them itself."""
        self.families.append((matches, fn))

    async def execute(self, request: ToolRequested) -> ToolResultPayload:
        """Run one request and return its result payload (never raises for tool errors)."""
        p = request.payload
        started = time.perf_counter()

        def result(outcome: str, out: ToolOutput | None = None, error: ToolError | None = None) -> ToolResultPayload:
            return ToolResultPayload(
                call_id=p.call_id,
                tool=p.tool,
                idempotency_key=p.idempotency_key,
                outcome=outcome,  # type: ignore[arg-type]
                evidence=out.evidence if out else [],
                output=out.output if out else None,
                artifacts=out.artifacts if out else [],
                error=error,
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
            )

        fn: Any = self.tools.get(p.tool) or next((f for match, f in self.families if match(p.tool)), None)
        if fn is None:
            return result("error", error=ToolError(error_code="unknown_tool", message=f"{p.tool} is not served by {self.name}", kind="bad_arguments"))
        try:
            args = TOOL_SPECS[p.tool].args_model.model_validate(p.arguments) if p.tool in self.tools else p.arguments
        except ValidationError as exc:
            return result("error", error=ToolError(
                error_code="bad_arguments", message=str(exc.errors(include_url=False))[:500],
                hint="fix the arguments to match the tool's JSON Schema", kind="bad_arguments"))
        try:
            out = await asyncio.wait_for(self._unless_cancelled(fn(args, request), request.task_id, p.idempotency_key),
                                         timeout=self.timeout_s)
        except TaskCancelled:
            return result("error", error=ToolError(
                error_code="task_cancelled", message="the task was cancelled while the call ran; it was stopped",
                kind="forbidden"))
        except TimeoutError:
            return result("timeout", error=ToolError(
                error_code="tool_timeout", message=f"{p.tool} did not finish within {self.timeout_s:.0f} s",
                hint="try a narrower request", kind="transient"))
        except ToolFailure as exc:
            return result("error", error=exc.error)
        except Exception as exc:  # noqa: BLE001 - a tool bug is reported to the model, not a crash
            log.exception("tool %s crashed", p.tool)
            return result("error", error=ToolError(error_code="tool_crashed", message=f"{type(exc).__name__}: {exc}"[:500], kind="transient"))
        return result("ok", out)

    async def _unless_cancelled(self, work: Awaitable[ToolOutput], task_id: str, idempotency_key: str) -> ToolOutput:
        """Await ``work`` while checking the task's cancel flag every ``CANCEL_POLL_S`` seconds
        and, in the same round trip, renewing this run's claim on ``idempotency_key`` (rule T6).

        When the task is cancelled the tool's coroutine is cancelled (the sandbox then
        kills its process tree) and ``TaskCancelled`` is raised. A failed check (Redis
        down) is logged and the tool goes on: cancel is best effort, the result is not.
        """
        tool = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait({tool}, timeout=CANCEL_POLL_S)
                if done:
                    return tool.result()
                try:
                    async with self.redis.pipeline(transaction=False) as pipe:
                        pipe.exists(keys.cancel(task_id))
                        self.claims.renew(pipe, idempotency_key)
                        exists, _renewed = await pipe.execute()
                    cancelled = bool(exists)
                except RedisError as exc:
                    log.warning("cancel check failed for %s: %r", task_id, exc)
                    cancelled = False
                if cancelled:
                    raise TaskCancelled(task_id)  # the finally below stops the tool
        finally:
            if not tool.done():
                tool.cancel()
                await asyncio.gather(tool, return_exceptions=True)

    async def handle(self, request: ToolRequested) -> None:
        """Bus handler: idempotent execute-and-publish for one request, in an ``execute_tool <tool>`` span
        (rule O7: tool name, call id, attempt, idempotency key; then outcome and error code)."""
        if not tracing.enabled():  # rule O5
            return await self._handle(request)
        p = request.payload
        with tracing.span(f"execute_tool {p.tool}", tracing.current_traceparent(request.traceparent),
                          task_id=request.task_id,
                          **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": p.tool,
                             "gen_ai.tool.call.id": p.call_id, "conduit.tool.idempotency_key": p.idempotency_key,
                             "conduit.tool.attempt": p.attempt, "conduit.tool.service": self.name}):
            await self._handle(request)

    async def _handle(self, request: ToolRequested) -> None:
        key = keys.tool_result(request.payload.idempotency_key)
        async with self.redis.pipeline(transaction=False) as pipe:  # both reads in one round trip
            pipe.get(key)
            pipe.exists(keys.cancel(request.task_id))
            cached, cancelled = await pipe.execute()
        if not cached and cancelled:
            # the task was cancelled while this request waited in the topic: do not run it
            p = request.payload
            payload = ToolResultPayload(
                call_id=p.call_id, tool=p.tool, idempotency_key=p.idempotency_key, outcome="error",
                error=ToolError(error_code="task_cancelled", message="the task was cancelled; the call did not run",
                                kind="forbidden"))
            _traced(payload, "not_run")
            await bus.publish(self.broker, topics.TOOL_RESULTS, request.child(ToolResult, payload=payload))
            return
        if not cached:
            taken, cached = await self.claims.take(request.payload.idempotency_key, request.task_id)
            if not taken and not cached:
                log.info("call %s runs elsewhere; this delivery leaves it to that run",
                         request.payload.idempotency_key)
                tracing.annotate(**{"conduit.tool.run": "elsewhere"})
                return
        if cached:
            log.info("call %s: its stored result is sent again", request.payload.idempotency_key)
            payload = ToolResultPayload.model_validate_json(cached)
            _traced(payload, "stored")
        else:
            log.info("call %s: runs here (%s)", request.payload.idempotency_key, self._owner)
            handed_back = False
            try:
                payload = await self.execute(request)
                _traced(payload, "ran")
                log.info("call %s: ran (%s), %s in %.0f ms", request.payload.idempotency_key, self._owner,
                         payload.outcome, payload.duration_ms or 0)
                metrics.tool_call(payload.tool, payload.outcome, (payload.duration_ms or 0) / 1000)
                transient = payload.outcome == "timeout" or (payload.error is not None and payload.error.kind == "transient")
                if not transient:  # a retry of a transient failure must run the tool again (rule T3)
                    # stored and published at once: a crash in between only means a redelivery runs it again
                    await asyncio.gather(
                        self.redis.set(key, payload.model_dump_json(), ex=RESULT_TTL_S),
                        bus.publish(self.broker, topics.TOOL_RESULTS, request.child(ToolResult, payload=payload)))
                    return
            except asyncio.CancelledError:  # a stop past its budget: the claim stays for a rescue (rule T8)
                handed_back = True
                raise
            finally:  # after the store: a waiting delivery finds the result, or (transient) runs it again
                if not handed_back:
                    await self.claims.release(request.payload.idempotency_key, request.task_id)
        await bus.publish(self.broker, topics.TOOL_RESULTS, request.child(ToolResult, payload=payload))

    def _concurrent(self, handler: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
        """``handler`` itself for ``concurrency`` 1, else a bus handler that starts it as a job (rule T7)."""
        if self.concurrency <= 1:
            return handler
        self._slots = asyncio.Semaphore(self.concurrency)

        async def admit(event: Any) -> None:
            waited = time.perf_counter()
            assert self._slots is not None
            await self._slots.acquire()
            metrics.tool_request_admitted(self.name, time.perf_counter() - waited, len(self._jobs) + 1)
            key = channels.partition_key(event) or ""
            job = asyncio.create_task(self._job(self._lanes.get(key), handler, event, key))
            self._lanes[key] = job
            self._jobs.add(job)
            job.add_done_callback(self._job_done)

        return admit

    async def _job(self, before: asyncio.Task | None, handler: Callable[[Any], Awaitable[None]], event: Any,
                   key: str) -> None:
        try:
            if before is not None:  # per-task order: after the previous message of the same key
                await asyncio.gather(before, return_exceptions=True)
            await handler(event)
        except Exception:  # noqa: BLE001 - the offset is committed: logged, the orchestrator re-sends (rule A14)
            log.exception("%s: handling %s failed", self.name, type(event).__name__)
        finally:
            assert self._slots is not None
            self._slots.release()
            if self._lanes.get(key) is asyncio.current_task():
                del self._lanes[key]

    def _job_done(self, job: asyncio.Task) -> None:
        self._jobs.discard(job)
        metrics.tool_requests_running(self.name, len(self._jobs))

    async def _drain(self) -> None:
        """Wait (up to the call deadline) for the running jobs after the consumer stopped."""
        if self._jobs:
            await asyncio.wait(set(self._jobs), timeout=self.timeout_s + 5)

    def subscribe(self, group_id: str | None = None) -> None:
        """Register this service's subscriber (``group_id`` defaults to the service's group), and
        one more per ``consume_apart`` topic.

        It reads ``topic`` and every ``consume`` topic; the message model is the union of the
        events ``contracts.channels`` lists for them; ``concurrency`` applies (rule T7).
        """
        names = tuple(dict.fromkeys([self.topic, *(t for t, _ in self.extra)]))
        model = channels.message_model(tuple(e for t in names for e in channels.events_on(t)))
        handler = self._dispatch if self.extra else self.handle
        bus.subscribe(self.broker, self.settings.bus, self.redis, topic=names if self.extra else self.topic,
                      group_id=group_id or self.group_id, model=model, handler=self._concurrent(handler),
                      consumer_name=self.name)
        for topic, group, apart, wait_ms in self.apart:  # consume_apart: one at a time, committed after it
            bus.subscribe(self.broker, self.settings.bus, self.redis, topic=(topic,), group_id=group,
                          model=channels.message_model(channels.events_on(topic)), handler=apart,
                          consumer_name=f"{self.name}:{group}", fetch_max_wait_ms=wait_ms)

    async def serve(self, ready: Callable[[], Awaitable[None]] | None = None,
                    background: Sequence[Callable[[], Coroutine[Any, Any, Any]]] = (),
                    stop: asyncio.Event | None = None) -> None:
        """Consume (``subscribe``) until SIGTERM/SIGINT (or ``stop``), then stop cleanly: running
        jobs finish and offsets are committed. ``ready``, ``background`` and ``stop``: see
        ``conduit.runtime.process.serve_process``.
        """
        self.subscribe()
        log.info("%s serves %s (%d at once)", self.name, ", ".join(self.tools), self.concurrency)
        await serve_process(self.name, self.settings, self.broker, self.redis, background=background,
                            ready=ready, drain=self._drain, stop=stop, announce=self._announce)

    async def _announce(self) -> None:
        """Keep this process's partitions of its request topic in ``keys.members`` (a rescue's target, rule A23)."""
        await owners.announce(self.redis, self.name, self._owner,
                              lambda: {self.topic: bus.assigned(self.broker, self.topic)})


def _traced(payload: ToolResultPayload, run: str) -> None:
    """Rule O7: the active tool span's outcome (``ok``, ``error``, ``timeout``), error code (``error.type``)
    and how the result came (``run``: ran here, stored result sent again, not run)."""
    if not tracing.enabled():
        return
    tracing.annotate(**{"conduit.tool.outcome": payload.outcome, "conduit.tool.run": run,
                        "conduit.tool.duration_ms": payload.duration_ms if run == "ran" else None})
    if payload.outcome != "ok":
        tracing.fail(payload.error.error_code if payload.error is not None else payload.outcome,
                     payload.error.message[:300] if payload.error is not None else None)
