"""Streaming a task's event log to an HTTP client as Server-Sent Events (sse-starlette).

Wire format of one event (``\\n`` line separator)::

    id: <seq>
    event: <type>
    data: <JSON of the contracts.stream model, as stored in the log>

plus ``: ping`` comment lines every ``settings.sse_heartbeat_s`` seconds (sent by
sse-starlette's own ping task, concurrently with the data, so an idle stream
stays alive through proxies). The stream ends right after the terminal event.

Lifecycle: the generator loops on ``TaskEventLog.read(block_ms=...)``. When the
client disconnects, sse-starlette cancels the response's task group, which
cancels the pending Redis read and runs the generator's ``finally`` (no loop is
left behind). On SIGTERM under uvicorn, sse-starlette ends open streams too, so
clients reconnect with ``Last-Event-ID`` (to any replica) and lose nothing.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from redis.exceptions import RedisError
from sse_starlette import EventSourceResponse, ServerSentEvent

from conduit.taskstore import TaskStore
from services.gateway.state import GatewayState

log = logging.getLogger("conduit.gateway.sse")

SEP = "\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def task_event_stream(state: GatewayState, task_id: str, after: int) -> AsyncIterator[ServerSentEvent]:
    """Yield the task's events with seq > ``after`` in order, ending after the terminal one.

    Also ends (without a terminal event) when the log is sealed and nothing
    newer than ``after`` exists (client already saw the end), when the task's
    record expired while waiting, or on a Redis error (logged; the client
    resumes with ``Last-Event-ID``).
    """
    events, poll_ms = state.events, state.settings.gateway_sse_poll_ms
    state.open_streams += 1
    try:
        while True:
            batch = await events.read(task_id, after=after, block_ms=poll_ms)
            if not batch:
                if await events.is_sealed(task_id):
                    # the terminal event may have landed between read and check
                    batch = await events.read(task_id, after=after)
                    if not batch:
                        return
                elif not await state.redis.exists(TaskStore.key(task_id)):
                    log.info("task %s expired while streaming", task_id)
                    return
                else:
                    continue
            for ev in batch:
                yield ServerSentEvent(data=ev.data, event=ev.type, id=str(ev.seq), sep=SEP)
                after = ev.seq
                if ev.terminal:
                    return
    except RedisError as exc:
        log.warning("redis error while streaming task %s: %r", task_id, exc)
    finally:
        state.open_streams -= 1


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping", sep=SEP)


def sse_response(state: GatewayState, task_id: str, after: int, status_code: int = 200,
                 headers: dict[str, str] | None = None) -> EventSourceResponse:
    """An ``EventSourceResponse`` streaming ``task_event_stream`` with heartbeats and no-cache headers."""
    return EventSourceResponse(
        task_event_stream(state, task_id, after),
        status_code=status_code,
        headers={**HEADERS, **(headers or {})},
        ping=state.settings.sse_heartbeat_s,
        ping_message_factory=_ping,
        sep=SEP,
    )
