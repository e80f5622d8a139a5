"""``ops.client.stream_task`` against a real HTTP server that cuts streams short.

A stream that ends without a terminal event is reconnected with ``Last-Event-ID``, at most
``reconnects`` times in all; one more raises ``StreamCutShort``, so a caller (the e2e tests,
``conduit ask``) sees a stream cut short instead of reconnecting forever.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ops.client import StreamCutShort, stream_task
from testkit.site import reply


class CutShort(BaseHTTPRequestHandler):
    """Answers each GET with one ``step.started`` event (id = Last-Event-ID + 1) and ends the
    response; no terminal event comes until the id reaches ``terminal_after``."""

    requests: list[str | None] = []
    terminal_after = 10**9

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        last = self.headers.get("Last-Event-ID")
        type(self).requests.append(last)
        seq = int(last or 0) + 1
        event = "task.completed" if seq >= type(self).terminal_after else "step.started"
        body = f'id: {seq}\nevent: {event}\ndata: {{"type": "{event}"}}\n\n'.encode()
        reply(self, body, "text/event-stream")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    CutShort.requests = []
    CutShort.terminal_after = 10**9
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), CutShort)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_stream_without_terminal_event_fails_past_the_bound(server: str) -> None:
    seen = []
    with pytest.raises(StreamCutShort, match="without a terminal event"):
        for ev in stream_task(server, "t1", reconnects=3, read_timeout_s=10):
            seen.append(ev.id)
    assert seen == [1, 2, 3, 4]  # the first connection and 3 reconnections, each resuming after the last id
    assert CutShort.requests == [None, "1", "2", "3"]


def test_reconnections_within_the_bound_resume_to_the_terminal_event(server: str) -> None:
    CutShort.terminal_after = 3
    events = list(stream_task(server, "t1", reconnects=2, read_timeout_s=10))
    assert [(e.id, e.event) for e in events] == [(1, "step.started"), (2, "step.started"), (3, "task.completed")]
    with pytest.raises(StreamCutShort):
        list(stream_task(server, "t2", reconnects=0, read_timeout_s=10))
