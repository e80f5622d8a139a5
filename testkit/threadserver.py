"""A Starlette app served by uvicorn in a daemon thread on a free loopback port: the base of the
HTTP stand-ins tests talk to (the scripted model, the scripted reranker)."""

from __future__ import annotations

import threading

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route

from ops.infra import free_port, wait_port


class ThreadedServer:
    """``port`` is picked at construction; ``serve(routes)`` starts the server and returns once the port
    accepts connections; ``stop()`` asks it to exit and joins its thread (at most 5 s)."""

    def __init__(self) -> None:
        self.port = free_port()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def serve(self, routes: list[Route]) -> None:
        """Serve ``routes`` on ``127.0.0.1:port`` in a daemon thread (graceful shutdown bounded to 1 s)."""
        config = uvicorn.Config(Starlette(routes=routes), host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="off", timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        wait_port(self.port)

    def stop(self) -> None:
        """Stop the server thread."""
        if self._server:
            self._server.should_exit = True
        if self._thread:
            self._thread.join(timeout=5)
