"""Checkpoint store for ``TaskState`` in Redis, with optimistic concurrency and leases.

- ``conduit:state:{task_id}``: the JSON checkpoint. ``save`` succeeds only if the
  stored version equals the version the caller loaded (compare-and-set in Lua),
  so two replicas never both advance one task; the loser gets ``StaleState``.
  A save may carry stream events (a transactional outbox): they are appended to
  the task's event log in the same script, so a replica killed right after a
  save cannot leave a recorded step whose events the client never sees.
- ``conduit:leases`` (sorted set, score = lease expiry in epoch seconds): tasks
  whose model step is running. The holder renews; when it lapses (process
  killed) any replica's sweeper claims the task and resumes it from its checkpoint.
- ``conduit:tool_deadlines`` (sorted set, score = earliest tool deadline): tasks
  waiting for tool results; at the deadline missing results become timeouts.
- On Redis Cluster the leases, tool deadlines and public outbox are one key per task shard, in the
  slot of the shard's tasks, so the save stays one script (rule O8, ``conduit.records.slots``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

from redis.asyncio import Redis

from conduit.records import keys, slots
from conduit.records.taskstream import APPEND_EVENT_LUA, TaskEventLog
from contracts.api import TaskView
from contracts.stream import StreamEvent
from contracts.events import AgentEvent
from services.orchestrator.agent.effects import Effect, Step
from services.orchestrator.agent.state import TaskState
from services.orchestrator.checkpointing import SAVE_RETRIES, CancelSeen, StaleState, Transition, transition

CLEAN_KEPT = 4096
"""Saves whose cancel-flag answer is kept for the model step that may start from them (rule O10)."""
LEASES = keys.LEASES
TOOL_DEADLINES = keys.TOOL_DEADLINES

_CAS = APPEND_EVENT_LUA + """
-- KEYS: checkpoint, leases, the task's event log, its seq counter, its seal, tool deadlines, public outbox,
--       cancel flag, task record
-- ARGV: expected version, checkpoint JSON, checkpoint TTL, lease expiry ('' = none), task id,
--       log maxlen, log TTL, tool wake-up time ('' = none), number n of client events,
--       '1' to write nothing when the cancel flag is set (rule O10), the task record's JSON ('' = none,
--       kept as long as the checkpoint; rule O11), then (type, data, terminal) per client event, then
--       one public AgentEvent JSON each
-- returns 0: stale (nothing written); 1: saved; 2: the cancel flag is set (nothing written);
--         3: saved, and the cancel flag is set (rule O10: the next step's first read)
if ARGV[4] ~= '' then redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5]) end
local cur = redis.call('GET', KEYS[1])
local expected = tonumber(ARGV[1])
if cur then
  local v = cjson.decode(cur)['version']
  if v ~= expected then return 0 end
elseif expected ~= 0 then
  return 0
end
if ARGV[10] == '1' and redis.call('EXISTS', KEYS[8]) == 1 then return 2 end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
if ARGV[11] ~= '' then redis.call('SET', KEYS[9], ARGV[11], 'EX', ARGV[3]) end
if ARGV[8] ~= '' then redis.call('ZADD', KEYS[6], ARGV[8], ARGV[5]) end
local n = tonumber(ARGV[9])
for i = 12, 11 + 3 * n, 3 do
  append_event(KEYS[3], KEYS[4], KEYS[5], ARGV[i], ARGV[i + 1], ARGV[6], ARGV[7], ARGV[i + 2])
end
for j = 12 + 3 * n, #ARGV do
  redis.call('XADD', KEYS[7], '*', 'task', ARGV[5], 'data', ARGV[j])
end
if redis.call('EXISTS', KEYS[8]) == 1 then return 3 end
return 1
"""

_TERMINAL = APPEND_EVENT_LUA + """
-- KEYS: the task's event log, its seq counter, its seal, public outbox
-- ARGV: type, data, maxlen, TTL, terminal, public AgentEvent JSON ('' = none), task id
local seq = append_event(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
if seq > 0 and ARGV[6] ~= '' then redis.call('XADD', KEYS[4], '*', 'task', ARGV[7], 'data', ARGV[6]) end
return seq
"""

_CLAIM = """
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
if tonumber(s) > tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
"""


class StateStore:
    """Load and save task checkpoints; manage leases and tool deadlines.

    Args:
        redis: asyncio Redis client.
        ttl_s: lifetime of a checkpoint after its last save (seconds).
        events: the task event log that ``save(..., events=...)`` appends to (its maxlen and TTL).
        lease_ttl_s: lease a ``transition`` takes for a step with ``HoldLease`` (seconds).
    """

    def __init__(self, redis: Redis, ttl_s: int = 86400, events: TaskEventLog | None = None,
                 lease_ttl_s: float = 30.0) -> None:
        self.redis = redis
        self.ttl_s = ttl_s
        self.lease_ttl_s = lease_ttl_s
        self.events = events or TaskEventLog(redis, ttl_s)
        self._cas = redis.register_script(_CAS)
        self._claim = redis.register_script(_CLAIM)
        self._terminal = redis.register_script(_TERMINAL)
        self._clean: OrderedDict[str, int] = OrderedDict()
        """Task id -> the version whose save found no cancel flag (rule O10; the last ``CLEAN_KEPT``)."""

    @staticmethod
    def key(task_id: str) -> str:
        """Redis key of a task checkpoint."""
        return keys.state(task_id)

    async def load(self, task_id: str) -> TaskState | None:
        """Return the latest checkpoint or None."""
        raw = await self.redis.get(self.key(task_id))
        return TaskState.model_validate_json(raw) if raw else None

    async def save(self, state: TaskState, lease_ttl_s: float | None = None,
                   events: Sequence[StreamEvent] = (), wake_at: float | None = None,
                   public: Sequence[AgentEvent] = (), unless_cancelled: bool = False,
                   view: TaskView | None = None) -> TaskState:
        """Save ``state`` if nobody saved since it was loaded; bump its version.

        With ``lease_ttl_s`` (seconds), the task's lease is taken in the same script
        (one round trip, atomic), as a new task needs: a crash after the save is
        then resumed by the sweeper.
        ``events`` (the outbox) are appended to the task's event log, in order, in the
        same script and only if the save succeeds; after a terminal event the log is
        sealed and later appends are dropped, as ``TaskEventLog.append`` does.
        ``wake_at`` (epoch seconds) sets the task's tool deadline in the same script, so a
        checkpoint that waits for tools always has a sweeper wake-up. ``public`` events go to
        the public outbox (``services.orchestrator.public``) in the same script.
        Raises StaleState when the stored version differs (the caller reloads); then
        nothing is written and no event appended. With ``unless_cancelled`` the script also reads the
        task's cancel flag (rule O10: the step's cancel read in its save's round trip) and raises
        ``CancelSeen``, writing nothing, when it is set. ``view``: the task's record, written in the same
        script (rule O11) with the checkpoint's TTL (both are ``task_events_ttl_s``).
        """
        expected = state.version
        state.version = expected + 1
        log = self.events
        args: list = [expected, state.model_dump_json(), self.ttl_s,
                      time.time() + lease_ttl_s if lease_ttl_s is not None else "", state.task_id, log.maxlen, log.ttl_s,
                      wake_at if wake_at is not None else "", len(events), "1" if unless_cancelled else "",
                      view.model_dump_json() if view is not None else ""]
        for event in events:
            args += log.encode(event)
        args += [e.model_dump_json() for e in public]
        t = state.task_id  # rule O8: every key of the script in the task's hash slot (conduit.records.slots)
        ok = await self._cas(keys=[self.key(t), keys.leases_of(t), *log.keys(t), keys.tool_deadlines_of(t),
                                   keys.public_outbox_of(t), keys.cancel(t), keys.task(t)], args=args)
        if ok not in (1, 3):
            state.version = expected
            raise CancelSeen(state.task_id) if ok == 2 else StaleState(state.task_id)
        self._clean.pop(t, None)
        if ok == 1:  # rule O10: a model step started from this very state need not read the flag again
            self._clean[t] = state.version
            while len(self._clean) > CLEAN_KEPT:
                self._clean.popitem(last=False)
        return state

    def saw_no_cancel(self, state: TaskState) -> bool:
        """Rule O10: True once, when this process saved ``state`` (this version) and its save's script found
        no cancel flag; a model step starting from it skips its first cancel read."""
        return self._clean.pop(state.task_id, None) == state.version

    async def transition(self, task_id: str, fn: Transition, *, loaded: TaskState | None = None,
                         attempts: int = SAVE_RETRIES,
                         before_save: Callable[[Step], Awaitable[None]] | None = None,
                         unless_cancelled: bool = False) -> Step | None:
        """Apply ``fn`` to the task's checkpoint and save the result with compare-and-set.

        The one place where a checkpoint is loaded, changed and saved. ``fn`` gets a freshly
        loaded state (``loaded`` on the first attempt when the caller has it) and returns a
        ``Step`` or None (nothing to do: nothing is written). The step's ``Emit``, ``Wake``
        and ``HoldLease`` effects are written in the save's own script (the outbox); the
        others are returned for the caller to carry out, in order. ``Public`` effects go to the
        public outbox in the same script (as ``AgentEvent`` envelopes). ``before_save`` runs the
        step's effects that must land before the checkpoint (a new approval's record and the
        task's record that says it waits for it).
        A lost race reloads and applies ``fn`` again, at most ``attempts`` times; then (or at
        once with ``attempts=1``, for a step whose work cannot be redone) raises ``StaleState``.
        Returns None when the task does not exist.
        """
        return await transition(self, self.lease_ttl_s, task_id, fn, loaded=loaded, attempts=attempts,
                                before_save=before_save, unless_cancelled=unless_cancelled)

    async def append_terminal(self, task_id: str, event: StreamEvent, public: AgentEvent | None) -> int:
        """Append the terminal ``event`` to the task's log and, if it sealed the log, ``public`` to the
        public outbox, in one script. Returns the event's seq, or -1 when the log was already sealed."""
        log = self.events
        kind, data, terminal = log.encode(event)
        args = [kind, data, log.maxlen, log.ttl_s, terminal, public.model_dump_json() if public is not None else "", task_id]
        return int(await self._terminal(keys=[*log.keys(task_id), keys.public_outbox_of(task_id)], args=args))

    async def add_public(self, events: Sequence[AgentEvent]) -> None:
        """Put ``events`` in the public outbox outside a save (a step that wrote no checkpoint)."""
        async with slots.atomic(self.redis) as pipe:
            for e in events:
                pipe.xadd(keys.public_outbox_of(e.task_id), {"task": e.task_id, "data": e.model_dump_json()})
            await pipe.execute()

    # ------------------------------------------------------------- leases
    async def take_lease(self, task_id: str, ttl_s: float) -> None:
        """Hold (or renew) the task's lease for ``ttl_s`` seconds."""
        await self.redis.zadd(keys.leases_of(task_id), {task_id: time.time() + ttl_s})

    async def expire_lease(self, task_id: str) -> None:
        """Mark the lease lapsed now, so any replica's sweeper resumes the task at once (graceful hand-over)."""
        await self.redis.zadd(keys.leases_of(task_id), {task_id: 0}, xx=True)

    async def drop_lease(self, task_id: str) -> None:
        """Release the task's lease (the step finished or handed over to tools)."""
        await self.redis.zrem(keys.leases_of(task_id), task_id)

    async def release(self, task_id: str) -> None:
        """Drop a finished task's lease and tool deadline (one round trip)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zrem(keys.leases_of(task_id), task_id)
            pipe.zrem(keys.tool_deadlines_of(task_id), task_id)
            await pipe.execute()

    async def expired_leases(self, limit: int = 50) -> list[str]:
        """Task ids whose lease lapsed (their holder died or stalled)."""
        return await slots.zrange_due(self.redis, keys.all_leases(), limit)

    async def claim(self, zset: str, task_id: str, hold_s: float) -> bool:
        """Atomically claim a due entry of ``zset`` by pushing its score ``hold_s`` into the future.

        Returns True for exactly one of several replicas racing for the same entry.
        """
        now = time.time()
        return bool(await self._claim(keys=[zset], args=[task_id, now, now + hold_s]))

    # ------------------------------------------------------- tool deadlines
    async def set_tool_deadline(self, task_id: str, at_epoch_s: float) -> None:
        """Wake the sweeper for ``task_id`` at ``at_epoch_s`` (epoch seconds)."""
        await self.redis.zadd(keys.tool_deadlines_of(task_id), {task_id: at_epoch_s})

    async def clear_tool_deadline(self, task_id: str) -> None:
        """Forget the task's tool deadline (all results are in)."""
        await self.redis.zrem(keys.tool_deadlines_of(task_id), task_id)

    async def due_tool_deadlines(self, limit: int = 50) -> list[str]:
        """Task ids whose tool deadline passed."""
        return await slots.zrange_due(self.redis, keys.all_tool_deadlines(), limit)

    async def request_cancel(self, task_id: str) -> None:
        """Flag the task as cancelled so a running model stream stops at its next chunk."""
        await self.redis.set(keys.cancel(task_id), "1", ex=self.ttl_s)

    async def cancel_requested(self, task_id: str) -> bool:
        """True once a cancel was requested."""
        return bool(await self.redis.exists(keys.cancel(task_id)))
