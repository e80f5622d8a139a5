"""A small HTTP/SSE client of the gateway, used by ``conduit ask`` and the tests.

``stream_task`` follows one task's ``text/event-stream`` and reconnects with
``Last-Event-ID`` when the connection drops, so no event is lost or repeated.
Every call sends ``Authorization: Bearer <key>``: the ``api_key`` given, else
``CONDUIT_API_KEY``, else the embedded stack's ``<data_dir>/admin.key`` (``default_key``).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

from ops.bootstrap import read_admin_key
from conduit.runtime.settings import get_settings
from conduit.runtime.sseread import SseEvent, iter_sse  # noqa: F401  (SseEvent: the tests' type of an event)
from contracts.stream import TERMINAL_TYPES


def default_key() -> str | None:
    """The key to use when none is given: ``CONDUIT_API_KEY``, else ``<data_dir>/admin.key``, else None."""
    return os.environ.get("CONDUIT_API_KEY") or read_admin_key(get_settings().stack.data_dir)


def bearer(api_key: str | None = None) -> dict[str, str]:
    """``{"Authorization": "Bearer <key>"}`` for ``api_key`` (or ``default_key()``); {} when there is none."""
    key = api_key or default_key()
    return {"Authorization": f"Bearer {key}"} if key else {}


def create_task(base_url: str, question: str, session_id: str | None = None, timeout_s: float = 10.0,
                attempts: int = 3, api_key: str | None = None, idempotency_key: str | None = None,
                **extra: Any) -> dict[str, Any]:
    """``POST /v1/tasks``; returns the 202 body ``{task_id, session_id, events_url}``.

    Sends one ``Idempotency-Key`` (``idempotency_key``, else a random one) and retries a failed
    connection up to ``attempts`` times with it, so a retry never creates a second task; a caller
    that retries on its own passes the same ``idempotency_key`` to every call.
    Raises ``httpx.HTTPStatusError`` on an error status (body has ``error.code``) and
    ``httpx.TransportError`` when every attempt failed to connect or read.
    """
    body: dict[str, Any] = {"question": question, **extra}
    if session_id:
        body["session_id"] = session_id
    headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex, **bearer(api_key)}
    for attempt in range(1, attempts + 1):
        try:
            resp = httpx.post(f"{base_url}/v1/tasks", json=body, headers=headers, timeout=timeout_s)
            break
        except httpx.TransportError:
            if attempt == attempts:
                raise
            time.sleep(0.2 * attempt)
    resp.raise_for_status()
    return resp.json()


class StreamCutShort(httpx.TransportError):
    """A task's stream needed more than ``reconnects`` reconnections before its terminal event."""


def stream_task(base_url: str, task_id: str, last_event_id: int | None = None, reconnects: int = 5,
                read_timeout_s: float = 60.0, api_key: str | None = None) -> Iterator[SseEvent]:
    """Yield a task's events until its terminal event, reconnecting with ``Last-Event-ID``.

    Every stream ends with a terminal event, so a response that ends without one (a
    gateway shutting down, or a bug) is reconnected like a dropped connection. At most
    ``reconnects`` reconnections are made in all (0: none); one more raises ``StreamCutShort``.

    Raises ``httpx.HTTPStatusError`` (e.g. 404 unknown task), ``StreamCutShort`` (a
    ``httpx.TransportError``) past ``reconnects``, and the last ``httpx.TransportError``.
    """
    last = last_event_id
    made = 0
    while True:
        headers = {"Accept": "text/event-stream", **bearer(api_key)}
        if last is not None:
            headers["Last-Event-ID"] = str(last)
        try:
            with httpx.stream("GET", f"{base_url}/v1/tasks/{task_id}/events", headers=headers,
                              timeout=httpx.Timeout(read_timeout_s, connect=5.0)) as resp:
                resp.raise_for_status()
                if resp.status_code == 204:  # the task ended at or before ``last``: nothing more to read
                    return
                for ev in iter_sse(resp.iter_lines()):
                    if ev.id is not None:
                        last = ev.id
                    yield ev
                    if ev.event in TERMINAL_TYPES:
                        return
            cause: str = "the stream ended without a terminal event"
        except httpx.TransportError as exc:
            if made >= reconnects:
                raise
            cause = repr(exc)
        made += 1
        if made > reconnects:
            raise StreamCutShort(f"task {task_id}: {cause} after {reconnects} reconnection(s) (last id {last})")
