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
cancels the pending Redis read (redis-py then drops that connection, so the
server-side ``XREAD BLOCK`` ends too) and runs the generator's ``finally``: no
loop is left behind. On SIGTERM under uvicorn, sse-starlette sets the stream's
``shutdown_event``; the generator stops its read, sends ``retry: 1000`` with a
``: shutdown`` comment and ends the response cleanly, so clients reconnect with
``Last-Event-ID`` (to any replica) and lose nothing.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import anyio

from redis.exceptions import RedisError
from sse_starlette import EventSourceResponse, ServerSentEvent

from conduit.taskstore import TaskStore
from conduit.taskstream import LoggedEvent
from services.gateway.state import GatewayState

log = logging.getLogger("conduit.gateway.sse")

SEP = "\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
RECONNECT_MS = 1000
"""``retry:`` sent to clients when the server shuts down (ms before they reconnect)."""
SHUTDOWN_GRACE_S = 2.0
"""Seconds a stream gets to end itself after shutdown is signalled, before it is cancelled."""


async def _read_or_shutdown(state: GatewayState, task_id: str, after: int,
                            shutdown: anyio.Event) -> list[LoggedEvent] | None:
    """One blocking read of the log; None if ``shutdown`` was set first. Raises ``RedisError``."""
    batch: list[LoggedEvent] | None = None
    error: RedisError | None = None
    async with anyio.create_task_group() as tg:
        async def watch() -> None:
            await shutdown.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        try:
            batch = await state.events.read(task_id, after=after, block_ms=state.settings.gateway_sse_poll_ms)
        except RedisError as exc:  # re-raised below, not wrapped in an ExceptionGroup
            error = exc
        tg.cancel_scope.cancel()
    if error is not None:
        raise error
    return batch


async def task_event_stream(state: GatewayState, task_id: str, after: int,
                            shutdown: anyio.Event | None = None) -> AsyncIterator[ServerSentEvent]:
    """Yield the task's events with seq > ``after`` in order, ending after the terminal one.

    Also ends (without a terminal event) when the log is sealed and nothing
    newer than ``after`` exists (client already saw the end), when the task's
    record expired while waiting, when ``shutdown`` is set (after a ``retry:``
    hint), or on a Redis error (logged; the client resumes with ``Last-Event-ID``).
    """
    events = state.events
    shutdown = shutdown or anyio.Event()
    state.open_streams += 1
    try:
        while True:
            batch = await _read_or_shutdown(state, task_id, after, shutdown)
            if batch is None:
                yield ServerSentEvent(comment="shutdown", retry=RECONNECT_MS, sep=SEP)
                return
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
    shutdown = anyio.Event()
    return EventSourceResponse(
        task_event_stream(state, task_id, after, shutdown),
        status_code=status_code,
        headers={**HEADERS, **(headers or {})},
        ping=state.settings.sse_heartbeat_s,
        ping_message_factory=_ping,
        sep=SEP,
        shutdown_event=shutdown,
        shutdown_grace_period=SHUTDOWN_GRACE_S,
    )
