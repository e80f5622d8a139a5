"""A tiny local web site for tests and benchmarks that need real HTTP (``web_fetch``, SSE clients).

``reply`` writes one whole response from a ``BaseHTTPRequestHandler``; ``serve`` runs a
``ThreadingHTTPServer`` on a free 127.0.0.1 port in a daemon thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def reply(handler: BaseHTTPRequestHandler, body: bytes | str, content_type: str = "text/html; charset=utf-8",
          status: int = 200) -> None:
    """Send ``body`` (str is UTF-8 encoded) with ``status``, ``Content-Type`` and ``Content-Length``."""
    data = body.encode("utf-8") if isinstance(body, str) else body
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


@contextmanager
def serve(server: ThreadingHTTPServer) -> Iterator[str]:
    """Serve ``server`` in a daemon thread; yield its base URL (``http://127.0.0.1:PORT``); shut it down after."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
