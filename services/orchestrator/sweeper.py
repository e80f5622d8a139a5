"""The sweeper: every replica, every half second, looks for work nobody holds.

- A task whose lease lapsed (its replica died or stalled mid-step) is claimed by
  exactly one replica and its model step re-run from the checkpoint (``answer.reset``
  first). A lease of a step still running here is renewed instead.
- A question the gateway recorded that has no checkpoint ``QUESTION_RESEND_S`` after it was
  published (the broker lost it, rule G4) is claimed and started here; one with a checkpoint
  (or a sealed log) is forgotten.
- A tool call whose run's process is gone (rule T8: no Redis connection carries its owner's
  name; ``keys.TOOL_RUNS`` lists the runs and their owners) is sent again at once, to a live
  replica (rule A23): the orchestrator's view of a call running elsewhere is "running" while its
  owner lives and "owner gone" after, instead of waiting for its claim to lapse (10 s) and the next
  re-send (every 10 s). Exactly one replica removes the run's entry and re-sends it.
- A model step whose orchestrator is gone (rule A24: each replica lists its running steps under its
  owner name in ``keys.STEPS`` every pass) has its lease lapsed at once, so it resumes on the next
  pass instead of after ``lease_ttl_s`` (15 s).
- When an orchestrator is gone, every task waiting for tools wakes at once, and a wake-up first
  records the results the tool services stored for its waiting calls (rule A27): a result the gone
  replica consumed and never recorded, or one waiting in its partitions, is not waited for.
- The runs of live processes, with the time each began, are kept for the wake-ups: a call whose
  run is under way when its deadline comes waits for the run's own deadline (rule A36).
- A task whose tool wake-up is due (approval expiry, retry time, result deadline,
  unsent request) is claimed and its timers fired (``agent.timers.wake``). For
  ``TIMER_GRACE_S`` after start, timers wait: results that arrived while no replica
  was up are consumed first instead of being declared timeouts.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

import structlog

from conduit.records import controls, keys, questions
from conduit.runtime import owners

if TYPE_CHECKING:
    from services.orchestrator.host import OrchestratorView as Orchestrator

log = structlog.get_logger("conduit.orchestrator")

TIMER_GRACE_S = 3.0
"""Seconds after start before tool deadlines fire."""
CLAIM_HOLD_S = 5.0
"""Seconds a claimed wake-up is pushed ahead (a replica dying mid-wake is retried then)."""
STEPS_KEPT_S = 60.0
"""Seconds after which a ``keys.STEPS`` field not rewritten (every pass, 0.5 s, by a live replica) is dropped."""
RUNS_KEPT_S = 3600.0
"""Seconds a ``keys.TOOL_RUNS`` entry is kept at most (one whose release was lost is dropped then)."""


async def sweep(orch: "Orchestrator") -> None:
    """One pass: resume tasks with lapsed leases; fire due tool timers."""
    s, store = orch.settings.agent, orch.store
    for task_id in await store.expired_leases():
        if task_id in orch.running and not orch.running[task_id].done():
            await store.take_lease(task_id, s.lease_ttl_s)
            continue
        if await store.claim(keys.leases_of(task_id), task_id, s.lease_ttl_s):
            log.warning("resuming task after lease lapsed", task_id=task_id)
            orch.steps.spawn(task_id, resumed=True)
    await _start_lost_questions(orch)
    await _handle_lost_controls(orch)
    try:
        await rescue_orphans(orch)
    except Exception:  # noqa: BLE001 - e.g. CLIENT LIST refused: the claims' TTL and A14 re-sends remain
        log.warning("looking for orphaned tool calls failed", exc_info=True)
    if time.monotonic() < orch.timers_from:
        return  # just started: consume results waiting in the topic before declaring anything late
    for task_id in await store.due_tool_deadlines():
        if await store.claim(keys.tool_deadlines_of(task_id), task_id, CLAIM_HOLD_S):
            await orch.wake(task_id)


def steps_of_others(fields: dict, me: str | None, now: float) -> tuple[dict[str, list[str]], list[str]]:
    """Pure: from ``keys.STEPS`` (owner -> ``{"tasks", "at"}`` JSON), the other replicas' running
    steps ``{owner: task ids}`` (every other replica: one running none may still have consumed
    tool results, rule A27) and the owners whose field is stale (not rewritten for
    ``STEPS_KEPT_S`` seconds: drop it)."""
    listed = {o.decode() if isinstance(o, bytes) else o: json.loads(v) for o, v in fields.items()}
    stale = [o for o, v in listed.items() if now - v.get("at", 0) > STEPS_KEPT_S]
    return {o: v.get("tasks", []) for o, v in listed.items() if o != me and o not in stale}, stale


async def rescue_orphans(orch: "Orchestrator") -> list[str]:
    """Rules A23 and A24: re-send each running tool call whose owner is gone (rule T8), and lapse
    the leases of the model steps a gone orchestrator ran (the lease loop resumes them next pass);
    list this replica's own steps. Return the idempotency keys this replica re-sent. A replica
    takes a run by removing its entry, a gone orchestrator's steps by removing its field."""
    redis = orch.store.redis
    async with redis.pipeline(transaction=False) as pipe:
        if orch.owner is not None:
            pipe.hset(keys.STEPS, orch.owner, json.dumps({"tasks": sorted(orch.running), "at": time.time()}))
        runs_keys = keys.all_tool_runs()  # one per shard on Redis Cluster (rule O8)
        for runs_key in runs_keys:
            pipe.zremrangebyscore(runs_key, "-inf", time.time() - RUNS_KEPT_S)
            pipe.zrange(runs_key, 0, -1, withscores=True)
        pipe.hgetall(keys.STEPS)
        *found, steps = await pipe.execute()
    found = found[1:] if orch.owner is not None else found  # the HSET's reply first
    started = {m: score for rows in found[1::2] for m, score in rows}
    runs = {m: run for m in started if (run := owners.parse_run(m)) is not None}
    stepping, stale = steps_of_others(steps, orch.owner, time.time())
    if stale:  # not rewritten for a minute: its replica is long gone (its leases lapsed by their TTL)
        await redis.hdel(keys.STEPS, *stale)
    if not runs and not stepping:
        orch.runs_started = {}
        return []
    dead = await owners.gone(redis, {owner for owner, _, _ in runs.values()} | set(stepping))
    orch.runs_started = {key: started[m] for m, (owner, _, key) in runs.items() if owner not in dead}  # rule A36
    for owner in dead & set(stepping):
        if await redis.hdel(keys.STEPS, owner):
            for task_id in stepping[owner]:
                log.warning("resuming a model step whose replica is gone (rule A24)", task_id=task_id, owner=owner)
                await orch.store.expire_lease(task_id)
            await _wake_waiting(redis)
    rescued = []
    for member, (owner, task_id, idempotency_key) in runs.items():
        if owner in dead and await redis.zrem(keys.tool_runs_of(idempotency_key), member):
            log.warning("re-sending a tool call whose owner is gone (rule A23)", task_id=task_id,
                        idempotency_key=idempotency_key, owner=owner)
            await orch.rescue(task_id, idempotency_key, owner)
            rescued.append(idempotency_key)
    return rescued


async def _wake_waiting(redis: Any) -> None:
    """Rule A27: an orchestrator is gone, and with it the tool results it had consumed but not
    recorded, and those waiting in its partitions until a rebalance: every task waiting for tools
    wakes now (``TOOL_DEADLINES`` scores lowered to now), and its wake-up reads the stored results."""
    for deadlines in keys.all_tool_deadlines():
        waiting = await redis.zrange(deadlines, 0, -1)
        if waiting:
            await redis.zadd(deadlines, {t: time.time() for t in waiting}, lt=True)


async def _start_lost_questions(orch: "Orchestrator") -> None:
    """Start each due recorded question without a checkpoint; forget those that have one (rule G4)."""
    redis = orch.store.redis
    for task_id in await questions.due(redis):
        if await orch.store.load(task_id) is not None or await orch.events.is_sealed(task_id):
            await questions.forget(redis, task_id)
            continue
        event = await _claim_recorded(orch, keys.QUESTIONS_PENDING, task_id, questions.load, questions.forget)
        if event is not None:
            log.warning("starting a question the bus did not deliver", task_id=task_id)
            await orch.on_question(event)


async def _handle_lost_controls(orch: "Orchestrator") -> None:
    """Handle each due recorded control event the bus did not deliver (rule G5)."""
    for event_id in await controls.due(orch.store.redis):
        event = await _claim_recorded(orch, keys.CONTROLS_PENDING, event_id, controls.load, controls.forget)
        if event is not None:
            log.warning("handling a control event the bus did not deliver", task_id=event.task_id,
                        kind=type(event).__name__)
            await orch.on_control(event)


async def _claim_recorded(orch: "Orchestrator", pending: str, member: str, load: Any, forget: Any) -> Any:
    """The recorded event ``member`` of the due set ``pending`` once this replica claimed it (None:
    another replica has it, or its record is gone, which is then forgotten)."""
    if not await orch.store.claim(pending, member, CLAIM_HOLD_S):
        return None
    event = await load(orch.store.redis, member)
    if event is None:
        await forget(orch.store.redis, member)
    return event


async def run(orch: "Orchestrator", every_s: float = 0.5) -> None:
    """Forever: ``sweep`` every ``every_s`` seconds (a failed pass is logged, the loop lives on)."""
    orch.timers_from = time.monotonic() + TIMER_GRACE_S
    while True:
        try:
            await sweep(orch)
        except Exception:  # noqa: BLE001 - the sweeper must survive Redis hiccups
            log.exception("sweep failed")
        await asyncio.sleep(every_s)
