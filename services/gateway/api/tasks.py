"""Creating and cancelling tasks: the gateway's writes to Redis and Kafka.

Creation order (so no client-visible event is ever lost):
1. save the ``TaskView`` (status ``accepted``) with ``TaskStore``;
2. append ``TaskAccepted`` to the task's ``TaskEventLog`` (seq 1);
3. publish ``QuestionAsked`` to ``topics.QUESTIONS`` keyed by ``task_id``.
The orchestrator may start appending the moment step 3 lands, and any SSE
client (on any replica) replays the log from seq 1, so nothing can be missed.
If step 3 fails or times out the task is marked ``failed`` and the log is
sealed with ``TaskFailed(code="broker_unavailable")``; the caller answers 503.
A publish that timed out may still reach Kafka later: the orchestrator then
finds the log sealed (``append`` returns -1) and must drop the task.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid

from conduit.records import controls, keys, questions, sessions, slots
from conduit.records.memory import recall_marks
from conduit.runtime import models, recalls, tracing
from conduit.runtime.tenants import narrow_tools, policy
from contracts import topics
from contracts.api import TERMINAL_STATUSES, TaskCreate, TaskCreated, TaskView
from contracts.envelope import utcnow
from contracts.scope import Scope
from contracts.events import (
    CancelPayload,
    QuestionAsked,
    QuestionPayload,
    TaskCancelled,
)
from contracts.stream import TaskAccepted, TaskFailed
from services.gateway.documents import scope
from services.gateway.identity.auth import Principal, can_see
from services.gateway.errors import ApiError
from services.gateway.identity.ratelimit import admit_task, check_token_budget
from services.gateway.state import GatewayState, publish

log = logging.getLogger("conduit.gateway.tasks")

_SENDING: set[asyncio.Task[None]] = set()
"""Recalls being published ahead of their questions (rule M13), kept referenced until sent."""
PENDING_CLAIM_TTL_S = 15
"""Seconds an ``Idempotency-Key`` claim lives before its task is created (then: the task's TTL). A
gateway that dies in between leaves a claim that lapses this soon, so the client's retry can create
the task; until then a retry gets 409 ``idempotency_key_in_progress``."""


def events_url(task_id: str) -> str:
    """Relative URL of a task's SSE stream."""
    return f"/v1/tasks/{task_id}/events"


async def create_task(state: GatewayState, who: Principal, body: TaskCreate, traceparent: str | None,
                      idempotency_key: str | None = None, use_cache: bool = True) -> tuple[TaskCreated, bool]:
    """Create a task of ``who`` (record, ``TaskAccepted``, ``QuestionAsked``); return ``(ids, replayed)``.

    ``task_id`` is a uuid4 hex; ``session_id`` is the body's or a new uuid4 hex. Tenant and
    user come from the credential; a body ``user_id`` must name the caller. A new session is
    claimed for the caller before the question is published (``conduit.records.sessions``).
    The task's tools are narrowed to its tenant's ``allowed_tools`` (``conduit.runtime.tenants``).
    With ``idempotency_key`` (the client's ``Idempotency-Key`` header), the first request
    with that key (per tenant and user, for ``task_events_ttl_s`` seconds) creates the task and
    later ones with the same body get the same ids back (``replayed`` True) and create
    nothing; a failed publish frees the key so a retry can create the task. ``use_cache`` False
    (``Cache-Control: no-cache``) keeps the semantic cache from answering it.

    The body's ``document_ids`` / ``collections`` are resolved into the task's ``Scope`` first (rule Q1,
    ``services.gateway.documents.scope``), before anything is written.

    Raises:
        ApiError: 403 ``user_mismatch`` (body ``user_id`` is someone else); 404 ``document_not_found`` /
            ``collection_not_found`` (rule Q1); 404
            ``session_not_found`` (the ``session_id`` belongs to another user or tenant);
            409 ``idempotency_key_reused`` when the key was used with another body;
            409 ``idempotency_key_in_progress`` (``Retry-After: 1``) while the first request with
            the key has not created its task yet (or died before it did: its claim lapses after
            ``PENDING_CLAIM_TTL_S`` seconds, then a retry creates the task); 404 ``unknown_model``
            (the body names a model its tenant does not have, rule A20);
            429 ``too_many_running_tasks`` (running-task limits, ``services.gateway.identity.ratelimit``);
            429 ``token_budget_exceeded`` (the tenant's tokens of the UTC day are spent, rule G6);
            503 ``broker_unavailable`` when Kafka did not ack the publish
            (the task is then recorded ``failed`` and its log sealed).
        redis.RedisError: Redis failed (answered 503 ``store_unavailable``).
    """
    _model(state, who.tenant_id, body.model)  # rule A20: before anything is written
    if body.user_id is not None and body.user_id != who.user_id:
        raise ApiError(403, "user_mismatch", "user_id must be the caller's own (or left out)")
    limited = await scope.resolve(state.redis, who.tenant_id, body.document_ids, body.collections)
    task_id = uuid.uuid4().hex
    session_id = body.session_id or uuid.uuid4().hex
    claim = None
    if idempotency_key is not None:
        owner = f"{who.user_id}\x00{idempotency_key}"  # per tenant and user: another user's key never replays
        claim = keys.idempotency(who.tenant_id, hashlib.sha256(owner.encode()).hexdigest())
        earlier = await _claim(state, claim, body, task_id, session_id)
        if earlier is not None:
            return earlier, True
    ttl = state.settings.gateway.task_events_ttl_s
    marks = await _claim_session(state, who, body.question, session_id, claim)
    # one trace per task: continue the client's traceparent or start one (tracing off: a random id); the
    # recall sent ahead (rule M13) is published inside it
    with tracing.span("task create", traceparent, kind=tracing.SpanKind.SERVER, task_id=task_id) as tp:
        asked = _question(state, who, body, task_id, session_id, use_cache, limited, marks, tp)
        try:
            await check_token_budget(state, who.tenant_id)  # rule G6: the tenant's tokens of the UTC day
            await admit_task(state, who.tenant_id, who.credential_id, task_id)
        except ApiError:
            if claim is not None:
                await state.redis.delete(claim)
            raise
        try:
            created = await _create_task(state, who, body, asked, limited)
            await sessions.add_task(state.redis, session_id, who.tenant_id, who.user_id, task_id, ttl)
            if claim is not None:  # created: the key now replays for the task's whole life
                await state.redis.expire(claim, ttl)
            return created, False
        except ApiError:
            if claim is not None:
                await state.redis.delete(claim)  # not queued: a retry with this key may create it
            raise


async def _claim(state: GatewayState, claim: str, body: TaskCreate, task_id: str,
                 session_id: str) -> TaskCreated | None:
    """Claim an idempotency key for a new task: None when claimed, else the earlier task's ids.

    Raises ApiError 409 ``idempotency_key_reused`` when the key was used with another body.
    """
    digest = hashlib.sha256(body.model_dump_json().encode()).hexdigest()
    record = json.dumps({"task_id": task_id, "session_id": session_id, "body": digest})
    while not await state.redis.set(claim, record, nx=True, ex=PENDING_CLAIM_TTL_S):
        raw = await state.redis.get(claim)
        if raw is None:
            continue  # expired between the two calls: claim it again
        earlier = json.loads(raw)
        if earlier["body"] != digest:
            raise ApiError(409, "idempotency_key_reused",
                           "this Idempotency-Key was already used for a different request body",
                           {"task_id": earlier["task_id"]})
        if not await state.store.exists(earlier["task_id"]):
            # the first request is still creating it, or its gateway died before it did (the claim
            # then lapses within PENDING_CLAIM_TTL_S and a retry creates the task)
            raise ApiError(409, "idempotency_key_in_progress",
                           "a request with this Idempotency-Key is still being processed; retry shortly",
                           {"task_id": earlier["task_id"]}, headers={"Retry-After": "1"})
        return TaskCreated(task_id=earlier["task_id"], session_id=earlier["session_id"],
                           events_url=events_url(earlier["task_id"]))
    return None


def _model(state: GatewayState, tenant: str, name: str | None) -> str | None:
    """Rule A20: the configured model a request names, if its tenant has it; raises ApiError 404 ``unknown_model`` (like an unknown session: the body is well formed, what it names is not there)."""
    try:
        return models.pick(state.settings, tenant, name)
    except models.UnknownModel as exc:
        raise ApiError(404, exc.code, str(exc), {"models": exc.known}) from None


async def _save_with_wake_up(state: GatewayState, view: TaskView, asked: QuestionAsked) -> None:
    """Write the task's record and its question's wake-up in one transaction."""
    ttl = state.settings.gateway.task_events_ttl_s
    async with slots.atomic(state.redis) as pipe:
        state.store.stage_save(pipe, view)
        questions.stage(pipe, asked, ttl)
        await pipe.execute()


async def _claim_session(state: GatewayState, who: Principal, question: str, session_id: str,
                         claim: str | None) -> tuple[bool, bool]:
    """Claim ``session_id`` for ``who`` (``sessions.claim``) and read rule M8's marks in the same round trip's
    time (rule M13). Raises ApiError 404 ``session_not_found`` (the idempotency ``claim`` is freed)."""
    claimed, marks = await asyncio.gather(
        sessions.claim(state.redis, session_id, who.tenant_id, who.user_id, question, state.settings.gateway.task_events_ttl_s),
        recall_marks(state.redis, who.tenant_id, who.user_id))
    if not claimed:
        if claim is not None:
            await state.redis.delete(claim)
        raise ApiError(404, "session_not_found", f"no session {session_id!r} (unknown, expired or not yours)")
    return marks


def _question(state: GatewayState, who: Principal, body: TaskCreate, task_id: str, session_id: str,
              use_cache: bool, limited: Scope | None, marks: tuple[bool, bool], traceparent: str) -> QuestionAsked:
    """The task's ``question.asked`` in the trace ``traceparent``; rule M13: when memory or the cache can answer
    (rule M8's ``marks``), its recall is published at once, before the gateway's other writes, and named in
    the question."""
    tenant = who.tenant_id
    ahead = recalls.ahead(state.settings.memory, tenant, who.user_id, marks, body.session_id is None, use_cache,
                          limited is not None)
    asked = QuestionAsked(task_id=task_id, session_id=session_id, tenant_id=tenant, user_id=who.user_id,
                          traceparent=traceparent, payload=QuestionPayload(question=body.question, mode=body.mode, use_cache=use_cache,
                                                  scope=limited, model=_model(state, tenant, body.model), recall=ahead,
                                                  allowed_tools=narrow_tools(
                              body.allowed_tools, policy(state.settings, tenant).allowed_tools)))
    if ahead is not None:  # never raises; a rejected request (429) leaves a reply nobody reads, which expires
        task = asyncio.ensure_future(recalls.send_ahead(state.broker, state.settings.memory, ahead, asked))
        _SENDING.add(task)
        task.add_done_callback(_SENDING.discard)
    return asked


async def _create_task(state: GatewayState, who: Principal, body: TaskCreate, asked: QuestionAsked,
                       limited: Scope | None = None) -> TaskCreated:
    tenant, task_id, session_id = who.tenant_id, asked.task_id, asked.session_id
    view = TaskView(task_id=task_id, session_id=session_id, tenant_id=tenant, user_id=who.user_id,
                    status="accepted", question=body.question, created_at=utcnow(), scope=limited,
                    trace_id=tracing.trace_id_of(asked.traceparent))
    # the record and the question's wake-up (rule G4) land together or not at all: a gateway killed
    # after them leaves a task the sweeper starts, never an accepted record nothing will start; the
    # first log entry is independent (in flight at once); all are done before the publish
    await asyncio.gather(
        _save_with_wake_up(state, view, asked),
        state.events.append(task_id, TaskAccepted(task_id=task_id, session_id=session_id, question=body.question)))
    try:
        await publish(state, topics.QUESTIONS, asked)
    except Exception as exc:  # noqa: BLE001 - any publish failure means the question was not queued
        log.error("publish of task %s failed: %r", task_id, exc)
        message = "the message broker is unavailable; the question was not queued"
        finished = utcnow()
        failed = view.model_copy(update={
            "status": "failed", "error": {"code": "broker_unavailable", "message": message},
            "finished_at": finished, "latency_ms": (finished - view.created_at).total_seconds() * 1000,
        })
        await state.store.save(failed)
        await state.events.append(task_id, TaskFailed(code="broker_unavailable", message=message))
        raise ApiError(503, "broker_unavailable", message, {"task_id": task_id}) from None
    log.info("task %s accepted (session %s)", task_id, session_id)
    return TaskCreated(task_id=task_id, session_id=session_id, events_url=events_url(task_id))


async def get_task(state: GatewayState, who: Principal, task_id: str) -> TaskView:
    """Return the task record when ``who`` may see it (scope rule 1: owner or tenant admin).

    Raises:
        ApiError: 404 ``task_not_found`` when unknown, expired or not the caller's (the same
            answer, so ids cannot be probed).
    """
    view = await state.store.get(task_id)
    if view is None or not can_see(who, view.tenant_id, view.user_id):
        raise _not_found(task_id)
    return view


async def require_task(state: GatewayState, who: Principal, task_id: str) -> None:
    """``get_task``'s check without building the record (the SSE route's check: cheap per connect).

    Raises:
        ApiError: 404 ``task_not_found`` when unknown, expired or not the caller's.
    """
    owner = await state.store.owner(task_id)
    if owner is None or not can_see(who, owner.tenant_id, owner.user_id):
        raise _not_found(task_id)


def _not_found(task_id: str) -> ApiError:
    return ApiError(404, "task_not_found", f"no task {task_id!r} (unknown or expired)")


async def cancel_task(state: GatewayState, who: Principal, task_id: str, traceparent: str | None) -> TaskView:
    """Ask the orchestrator to stop a task: publish ``TaskCancelled`` to ``topics.CONTROL``.

    The orchestrator appends the terminal ``TaskCancelledEvent``; this only requests it.

    Raises:
        ApiError: 404 ``task_not_found``; 409 ``task_already_finished`` when the
            record is terminal or the log is sealed; 503 ``broker_unavailable``.
    """
    view = await get_task(state, who, task_id)
    if view.status in TERMINAL_STATUSES or await state.events.is_sealed(task_id):
        raise ApiError(409, "task_already_finished", f"task {task_id!r} has already finished",
                       {"status": view.status})
    event = TaskCancelled(task_id=task_id, session_id=view.session_id, tenant_id=view.tenant_id,
                          user_id=view.user_id, traceparent=traceparent, payload=CancelPayload())
    await controls.record(state.redis, event, state.settings.gateway.task_events_ttl_s)  # its re-send (rule G5)
    try:
        await publish(state, topics.CONTROL, event)
    except Exception as exc:  # noqa: BLE001
        log.error("publish of cancel for %s failed: %r", task_id, exc)
        await controls.forget(state.redis, event.event_id)
        raise ApiError(503, "broker_unavailable", "the message broker is unavailable; retry the cancel") from None
    return view
