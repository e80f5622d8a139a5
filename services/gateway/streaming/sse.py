"""Streaming a task's event log to an HTTP client as Server-Sent Events (sse-starlette).

Wire format of one event (``\\n`` line separator)::

    id: <seq>
    event: <type>
    data: <JSON of the contracts.stream model, as stored in the log>

plus a ``: ping`` comment line when a stream has sent nothing for
``settings.gateway.sse_heartbeat_s`` seconds (checked after each idle wait, so at most
``gateway_sse_poll_ms`` late), which keeps an idle stream alive through proxies.
The generator sends it itself; sse-starlette's ping task is off (``ping=0``),
one task and one timer fewer per open stream. The stream ends right after the
terminal event.
Events that are ready together are sent as one body chunk (one write). An event that finds its
stream waiting with nothing in hand is written by the hub itself, through the stream's direct
writer (``direct_writer``, set as ``Subscription.sink`` once the headers are sent), without waking
the stream's coroutine; a stream with events in hand, a full socket and the terminal event go
through the coroutine (issue 33; docs/benchmarks.md, "Issue 33: SSE fan-out").

Lifecycle: the generator subscribes to the gateway's shared ``StreamHub``
(``services/gateway/streaming/hub.py``: one multi-key ``XREAD`` for all streams of the
process) and waits on its ``Subscription`` up to ``settings.gateway.gateway_sse_poll_ms``
at a time; after an idle wait it checks whether the log is sealed or the task's
record expired. When the client disconnects, sse-starlette cancels the response's
task group, which cancels the wait and runs the generator's ``finally``
(unsubscribe): no registration or loop is left behind. On SIGTERM under uvicorn,
sse-starlette sets the stream's ``shutdown_event``; the generator stops waiting,
sends ``retry: 1000`` with a ``: shutdown`` comment and ends the response cleanly,
so clients reconnect with ``Last-Event-ID`` (to any replica) and lose nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

import anyio
from redis.exceptions import RedisError
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.event import ensure_bytes
from starlette.types import Message, Receive, Scope, Send

from conduit.records.taskstore import TaskStore
from conduit.records.taskstream import LoggedEvent, TaskEventLog
from conduit.runtime.settings import Settings
from services.gateway.streaming.hub import StreamHub
from services.gateway.streaming.subscription import Subscription

log = logging.getLogger("conduit.gateway.sse")


class StreamState(Protocol):
    """What streaming a task reads of the gateway's state (``state.GatewayState`` has it; a protocol, so this
    package does not import the app's wiring): ``settings``, the task logs (``events``), the process's shared
    reader (``hub``, None before the lifespan starts it) and the gauge of ``open_streams``."""

    settings: Settings
    events: TaskEventLog
    hub: StreamHub | None
    open_streams: int


SEP = "\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
RECONNECT_MS = 1000
"""``retry:`` sent to clients when the server shuts down (ms before they reconnect)."""
SHUTDOWN_GRACE_S = 2.0
"""Seconds a stream gets to end itself after shutdown is signalled, before it is cancelled."""


def encode_events(batch: list[LoggedEvent]) -> bytes:
    """The SSE wire bytes of ``batch`` (``id``/``event``/``data`` lines, blank line after each), UTF-8."""
    parts = []
    for ev in batch:
        if "\n" in ev.data or "\r" in ev.data or "\n" in ev.type or "\r" in ev.type:
            parts.append(ServerSentEvent(data=ev.data, event=ev.type, id=str(ev.seq), sep=SEP).encode().decode())
        else:
            parts.append(f"id: {ev.seq}\nevent: {ev.type}\ndata: {ev.data}\n\n")
    return "".join(parts).encode("utf-8")


class ShutdownSignal:
    """The ``shutdown_event`` handed to sse-starlette: its ``set()`` interrupts the stream's subscription.

    sse-starlette only calls ``set()`` on it when the server exits; doing the
    interrupt right there spares every stream a watcher task waiting on an
    ``anyio.Event`` (a task, an event and a future per open stream).
    """

    __slots__ = ("_sub", "_set", "sink")

    def __init__(self) -> None:
        self._sub: Subscription | None = None
        self._set = False
        self.sink: Callable[[list[LoggedEvent]], bool] | None = None
        """The response's direct writer (``Subscription.sink``), set once its headers are sent; None: none."""

    def is_set(self) -> bool:
        """True once the server has signalled shutdown."""
        return self._set

    def set(self) -> None:
        """Signal shutdown: the stream's pending and later waits return ``None``."""
        self._set = True
        if self._sub is not None:
            self._sub.interrupt()

    def attach(self, sub: Subscription) -> None:
        """Interrupt ``sub`` on shutdown (at once if it was already signalled); give it the direct writer."""
        self._sub = sub
        sub.sink = self.sink
        if self._set:
            sub.interrupt()

    def detach(self) -> None:
        """Forget the subscription (the stream ended)."""
        if self._sub is not None:
            self._sub.sink = None
        self._sub = None

    def written_at(self) -> float:
        """Loop time of the last event the hub wrote through ``sink`` (0.0: none)."""
        return self._sub.written_at if self._sub is not None else 0.0


async def follow(state: StreamState, task_id: str, after: int,
                 shutdown: ShutdownSignal | None = None) -> AsyncIterator[list[LoggedEvent] | None]:
    """Yield batches of the task's events with seq > ``after``, in order, ending after the terminal one.

    Yields a non-empty ``list[LoggedEvent]`` per batch of ready events, ``[]`` after each idle
    wait of ``gateway_sse_poll_ms`` (the caller may send a heartbeat) and, once ``shutdown`` is
    set, ``None`` as its last item. Also ends (without a terminal event) when the log is sealed
    and nothing newer than ``after`` exists (client already saw the end), when the task's record
    expired while waiting, or on a Redis error (logged; the client resumes with ``Last-Event-ID``).
    Shared by the task event stream and ``POST /v1/chat/completions``.
    """
    events = state.events
    hub = state.hub
    if hub is None:
        raise RuntimeError("the gateway's StreamHub is not started")
    shutdown = shutdown or ShutdownSignal()
    poll_s = state.settings.gateway.gateway_sse_poll_ms / 1000
    state.open_streams += 1
    sub = hub.subscribe(task_id, after)
    shutdown.attach(sub)
    try:
        while True:
            batch = await sub.next_batch(poll_s)
            if batch is None:
                yield None
                return
            if not batch:
                sealed, recorded = await events.sealed_and_exists(task_id, TaskStore.key(task_id))
                if sealed:
                    # the terminal event may have landed between the wait and the check
                    batch = await sub.catch_up()
                    if not batch:
                        return
                elif not recorded:
                    log.info("task %s expired while streaming", task_id)
                    return
                else:
                    yield []
                    continue
            for i, ev in enumerate(batch):
                if ev.terminal:
                    yield batch[: i + 1]
                    return
            yield batch
    except RedisError as exc:
        log.warning("redis error while streaming task %s: %r", task_id, exc)
    finally:
        shutdown.detach()
        hub.unsubscribe(sub)
        state.open_streams -= 1


async def logged(state: StreamState, task_id: str, after: int, upto: int | None = None,
                 page: int = 500) -> AsyncIterator[LoggedEvent]:
    """The task's logged events with ``after`` < seq <= ``upto`` (None: all there are now), in order, read in pages
    of ``page`` (no waiting for new ones; ``follow`` waits). Raises ``RedisError``."""
    last = after
    while upto is None or last < upto:
        batch = [ev for ev in await state.events.read(task_id, after=last, count=page)
                 if ev.seq > last and (upto is None or ev.seq <= upto)]
        if not batch:
            return
        for ev in batch:
            yield ev
        last = batch[-1].seq


async def task_event_stream(state: StreamState, task_id: str, after: int,
                            shutdown: ShutdownSignal | None = None) -> AsyncIterator[ServerSentEvent | bytes]:
    """Yield the task's events with seq > ``after`` in order, ending after the terminal one (``follow``).

    Yields SSE wire bytes (one chunk per batch of ready events, see ``encode_events``), a
    ``: ping`` comment after ``sse_heartbeat_s`` idle seconds and, on shutdown, a
    ``ServerSentEvent`` comment with a ``retry:`` hint.
    """
    heartbeat_s = state.settings.gateway.sse_heartbeat_s
    loop = asyncio.get_running_loop()
    last_sent = loop.time()
    async for batch in follow(state, task_id, after, shutdown):
        if batch is None:
            yield ServerSentEvent(comment="shutdown", retry=RECONNECT_MS, sep=SEP)
            return
        if not batch:
            last_sent = max(last_sent, shutdown.written_at()) if shutdown is not None else last_sent
            if heartbeat_s > 0 and loop.time() - last_sent >= heartbeat_s:
                last_sent = loop.time()
                yield _ping()
            continue
        last_sent = loop.time()
        yield encode_events(batch)


RAW_SEND = "conduit.raw_send"
"""ASGI scope key of the server's own ``send`` callable, set by the gateway app (``services.gateway.app``) before
its middlewares wrap it; a stream writes its body chunks with it (``_EventSourceResponse``)."""


class _EventSourceResponse(EventSourceResponse):
    """sse-starlette's response (disconnect watch, shutdown signal, HEAD) with a lean send path for the body.

    - The body chunks go to the server's own ``send`` (``scope[RAW_SEND]``) when the app put it there: the
      middlewares (error handling, HTTP metrics) only look at ``http.response.start``, which still goes through
      them, and passing every SSE chunk through their four ``send`` wrappers and sse-starlette's encoder was
      ~6 % of the gateway's samples per event (py-spy under bench/sse_fanout.py). Without it (an app that does
      not set it) the wrapped ``send`` is used.
    - No anyio cancel scope around every send when no send timeout is set (``_send_with_timeout`` of
      sse-starlette 3.7 enters ``anyio.move_on_after(None)`` per event, ~15 % of the CPU per event with
      thousands of streams). With ``send_timeout`` set, the library's own method runs.
    """

    _body_send: Callable[[Message], Awaitable[None]] | None = None
    link: ShutdownSignal | None = None
    """The stream's shutdown signal, which also hands the direct writer (``direct_writer``) to its subscription."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") == "http" and self.send_timeout is None:
            self._body_send = scope.get(RAW_SEND)
        await super().__call__(scope, receive, send)

    async def _send_with_timeout(self, send, message) -> None:  # type: ignore[no-untyped-def]
        if self.send_timeout is None:
            await send(message)
        else:
            await super()._send_with_timeout(send, message)

    async def _stream_response(self, send: Send) -> None:
        """As sse-starlette's: start, one body chunk per item of the iterator (closed on a failed send), end."""
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        if self._body_send is not None and self.link is not None:
            self.link.sink = direct_writer(self._body_send)
        body_send = self._body_send or (lambda message: self._send_with_timeout(send, message))
        async for data in self.body_iterator:
            try:
                chunk = data if type(data) is bytes else ensure_bytes(data, self.sep)
                await body_send({"type": "http.response.body", "body": chunk, "more_body": True})
            except BaseException:
                # the iterator is suspended at its yield: close it so its cleanup (unsubscribe) runs first
                with anyio.move_on_after(self._cleanup_timeout, shield=True):
                    try:
                        await self.body_iterator.aclose()  # type: ignore[attr-defined]
                    except Exception:  # noqa: BLE001 - the send's own error is the one raised
                        log.exception("closing the event stream after a failed send")
                raise
        async with self._send_lock:
            self.active = False
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def direct_writer(send: Callable[[Message], Awaitable[None]]) -> Callable[[list[LoggedEvent]], bool]:
    """A synchronous writer of events to a response's body over the server's own ``send`` (``Subscription.sink``).

    ``write(events)`` runs ``send`` of one body chunk (``encode_events``) up to its first suspension: uvicorn's
    ``send`` writes to the transport without suspending unless the socket's buffer is full, when it waits
    for it to drain before writing anything. Then the call is abandoned (nothing written) and ``write`` returns
    False, so the stream's own coroutine sends the events and waits. Also False on an error (the stream's
    own send raises it again). With it, an event that finds its stream waiting costs no wake-up of the
    stream's coroutine.
    """

    def write(events: list[LoggedEvent]) -> bool:
        step = send({"type": "http.response.body", "body": encode_events(events), "more_body": True})
        try:
            step.send(None)  # type: ignore[attr-defined]
        except StopIteration:
            return True
        except Exception:  # noqa: BLE001 - the stream's own send of the same events raises it
            return False
        step.close()  # type: ignore[attr-defined]
        return False

    return write


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping", sep=SEP)


def sse_response(state: StreamState, task_id: str, after: int, status_code: int = 200,
                 headers: dict[str, str] | None = None) -> EventSourceResponse:
    """An ``EventSourceResponse`` streaming ``task_event_stream`` with heartbeats and no-cache headers."""
    shutdown = ShutdownSignal()
    response = _EventSourceResponse(
        task_event_stream(state, task_id, after, shutdown),
        status_code=status_code,
        headers={**HEADERS, **(headers or {})},
        ping=0,  # heartbeats come from task_event_stream when idle
        sep=SEP,
        shutdown_event=shutdown,  # type: ignore[arg-type]  # duck-typed: sse-starlette only calls set()
        shutdown_grace_period=SHUTDOWN_GRACE_S,
    )
    response.link = shutdown
    return response
