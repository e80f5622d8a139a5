"""Per-task event log in Redis Streams: the path from any service to any gateway replica.

Each task has a stream ``conduit:events:{task_id}`` whose entry ids are
``<seq>-0`` with ``seq`` a strictly increasing integer per task (1, 2, 3...).
The SSE ``id:`` is that ``seq``, so ``Last-Event-ID: n`` resumes with ``XREAD``
from ``n-0`` and replays exactly the events after ``n``. The log is bounded
(``MAXLEN``) and expires (``TTL``). Appends are atomic (one Lua script) and the
first terminal event seals the log: later appends are refused, so a stream has
exactly one terminal event even when a step runs twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis
from conduit.records import keys

from contracts.stream import TERMINAL_TYPES, StreamEvent

APPEND_EVENT_LUA = """
local function append_event(log, seq_key, seal, kind, data, maxlen, ttl, terminal)
  if redis.call('EXISTS', seal) == 1 then return -1 end
  local seq = redis.call('INCR', seq_key)
  redis.call('XADD', log, 'MAXLEN', '~', maxlen, seq .. '-0', 'type', kind, 'data', data)
  if terminal == '1' then redis.call('SET', seal, seq, 'EX', ttl) end
  redis.call('EXPIRE', log, ttl)
  redis.call('EXPIRE', seq_key, ttl)
  return seq
end
"""
"""Lua ``append_event(log, seq_key, seal, type, data, maxlen, ttl, terminal)``: the one append rule,
shared by ``TaskEventLog.append`` and the checkpoint store's save-with-events (its outbox)."""

_APPEND = APPEND_EVENT_LUA + "return append_event(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])"


@dataclass(frozen=True)
class LoggedEvent:
    """One event read back from a task's log: ``seq`` (SSE id), ``type`` and JSON ``data``."""

    seq: int
    type: str
    data: str

    @property
    def terminal(self) -> bool:
        """True for task.completed, task.failed and task.cancelled."""
        return self.type in TERMINAL_TYPES


class TaskEventLog:
    """Append and read a task's ordered event log.

    Args:
        redis: an asyncio Redis client (``decode_responses=False``).
        ttl_s: seconds the log lives after its last append.
        maxlen: approximate number of events kept per task.
    """

    def __init__(self, redis: Redis, ttl_s: int = 86400, maxlen: int = 20000) -> None:
        self.redis = redis
        self.ttl_s = ttl_s
        self.maxlen = maxlen
        self._append = redis.register_script(_APPEND)

    @staticmethod
    def keys(task_id: str) -> list[str]:
        """``[stream, seq counter, seal]`` Redis keys of one task's log."""
        return [keys.events(task_id), keys.events_seq(task_id), keys.events_terminal(task_id)]

    @staticmethod
    def encode(event: StreamEvent) -> list[str]:
        """``[type, JSON data, "1" if terminal else "0"]``: an event as ``append_event`` takes it."""
        return [event.type, event.model_dump_json(), "1" if event.type in TERMINAL_TYPES else "0"]

    async def append(self, task_id: str, event: StreamEvent) -> int:
        """Append ``event``; return its seq, or -1 if the log is already sealed by a terminal event."""
        kind, data, terminal = self.encode(event)
        seq = await self._append(keys=self.keys(task_id), args=[kind, data, self.maxlen, self.ttl_s, terminal])
        return int(seq)

    async def is_sealed(self, task_id: str) -> bool:
        """True once a terminal event has been appended."""
        return bool(await self.redis.exists(self.keys(task_id)[2]))

    async def seen_to_the_end(self, task_id: str, after: int) -> bool:
        """True when the log is sealed and its last event's seq is ``<= after``: a client resuming
        from ``after`` already has the terminal event (one round trip)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.exists(self.keys(task_id)[2])
            pipe.get(self.keys(task_id)[1])
            sealed, last = await pipe.execute()
        return bool(sealed) and last is not None and int(last) <= after

    async def sealed_and_exists(self, task_id: str, other_key: str) -> tuple[bool, bool]:
        """``(is the log sealed, does other_key exist)`` in one round trip (one pooled connection).

        The SSE stream's idle check: sealed log, or the task record (``other_key``) expired.
        """
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.exists(self.keys(task_id)[2])
            pipe.exists(other_key)
            sealed, exists = await pipe.execute()
        return bool(sealed), bool(exists)

    async def read(self, task_id: str, after: int = 0, block_ms: int | None = None, count: int = 500) -> list[LoggedEvent]:
        """Return events with seq > ``after`` (oldest first).

        With ``block_ms`` set, waits up to that many milliseconds for new events
        and returns an empty list on timeout.
        """
        key = self.keys(task_id)[0]
        if block_ms is None:
            rows = await self.redis.xrange(key, min=f"({after}-0", max="+", count=count)
            entries = rows
        else:
            res = await self.redis.xread({key: f"{after}-0"}, count=count, block=block_ms)
            entries = res[0][1] if res else []
        out = []
        for entry_id, fields in entries:
            eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            out.append(
                LoggedEvent(
                    seq=int(eid.split("-", 1)[0]),
                    type=_s(fields.get(b"type", fields.get("type"))),
                    data=_s(fields.get(b"data", fields.get("data"))),
                )
            )
        return out


def _s(v: bytes | str | None) -> str:
    if v is None:
        return ""
    return v.decode("utf-8") if isinstance(v, bytes) else v
