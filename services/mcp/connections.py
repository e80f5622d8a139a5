"""Connections to MCP servers with the official SDK's ``mcp.Client``: one per server configuration.

A ``Connection`` owns one client session in its own asyncio task (the SDK's transports are
anyio context managers that must be entered and left in one task); calls from other tasks use
the session while it is open. A stdio server is started once and kept (starting a Python MCP
server costs seconds on a busy machine); a streamable HTTP server keeps its session too.
A connection that fails (the process died, the URL stopped answering) is closed and opened
again on the next use. Connections are keyed by the configuration's digest (rule X2): the same
configuration shared by several tenants is one connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from contracts.mcp import McpServerConfig

if TYPE_CHECKING:  # rule O13: the MCP SDK loads with the first connection (docs/operations.md, "Memory")
    from mcp import Client, StdioServerParameters
    from mcp.types import CallToolResult, Tool

log = logging.getLogger("conduit.mcp.connections")


class ServerUnavailable(Exception):
    """The server could not be started, reached or listed (a transient failure)."""


def _stdio(config: McpServerConfig) -> StdioServerParameters:
    """A command's parameters: its own ``env`` over a small part of ours (never our secrets)."""
    from mcp import StdioServerParameters  # noqa: PLC0415 - rule O13

    assert config.command
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV")}
    return StdioServerParameters(command=config.command[0], args=config.command[1:], env={**env, **config.env})


class Connection:
    """One open session to the server of ``config``; ``tools`` as last listed, ``listed_at`` (epoch s)."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.client: Client | None = None
        self.tools: list[Tool] = []
        self.listed_at = 0.0
        self.error: str | None = None
        self.failures = 0
        """Listings that failed in a row (the next try backs off: ``retry_after_s``)."""
        self.tried_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()

    @property
    def open(self) -> bool:
        """True while the session is up."""
        return self.client is not None and self._task is not None and not self._task.done()

    async def _run(self, opened: asyncio.Future[None]) -> None:
        import httpx2  # noqa: PLC0415 - rule O13: the SDK and its HTTP client load with the first connection
        from mcp import Client  # noqa: PLC0415
        from mcp.client.stdio import stdio_client  # noqa: PLC0415
        from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415

        http: httpx2.AsyncClient | None = None
        try:
            with open(os.devnull, "w") as quiet:  # noqa: PTH123 - the server's stderr is not ours to show
                if self.config.command:
                    target: Any = stdio_client(_stdio(self.config), errlog=quiet)
                else:
                    http = httpx2.AsyncClient(headers=self.config.headers,
                                              timeout=httpx2.Timeout(self.config.timeout_s, read=300.0))
                    target = streamable_http_client(self.config.url or "", http_client=http)
                async with Client(target, read_timeout_seconds=self.config.timeout_s, cache=None) as client:
                    self.client = client
                    opened.set_result(None)
                    await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - any failure of the server closes the connection
            if not opened.done():
                opened.set_exception(ServerUnavailable(f"{type(exc).__name__}: {exc}"[:300]))
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("mcp server %s closed: %r", self.config.name, exc)
        finally:
            self.client = None
            if http is not None:
                await http.aclose()

    async def ensure_open(self) -> Client:
        """The open client, connecting first when needed; raises ``ServerUnavailable`` within ``timeout_s``."""
        async with self._lock:
            if self.open and self.client is not None:
                return self.client
            await self.close()
            self._stop = asyncio.Event()
            opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._task = asyncio.create_task(self._run(opened), name=f"mcp-{self.config.name}")
            try:
                await asyncio.wait_for(asyncio.shield(opened), self.config.timeout_s)
            except TimeoutError:
                await self.close()
                raise ServerUnavailable(f"no answer within {self.config.timeout_s:.0f} s") from None
            assert self.client is not None
            return self.client

    def retry_after_s(self, base_s: float, cap_s: float) -> float:
        """Seconds after a failed listing before the next: ``base_s`` doubled per failure in a row, at most ``cap_s``."""
        return min(cap_s, base_s * 2 ** max(0, self.failures - 1))

    async def list_tools(self) -> list[Tool]:
        """List the server's tools (every page) and keep them in ``tools``; raises ``ServerUnavailable``."""
        self.tried_at = time.time()
        try:
            client = await self.ensure_open()
            tools: list[Tool] = []
            cursor: str | None = None
            for _ in range(50):  # a server whose pages never end cannot hang the listing
                page = await asyncio.wait_for(client.list_tools(cursor=cursor), self.config.timeout_s)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
        except ServerUnavailable as exc:
            self.error, self.failures = str(exc), self.failures + 1
            raise
        except Exception as exc:  # noqa: BLE001 - a broken server is reported, not a crash
            self.error, self.failures = f"{type(exc).__name__}: {exc}"[:300], self.failures + 1
            await self.close()
            raise ServerUnavailable(self.error) from exc
        self.tools, self.listed_at, self.error, self.failures = tools, time.time(), None, 0
        return tools

    async def call(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> CallToolResult:
        """Call ``tool``; raises ``ServerUnavailable`` when the server cannot be reached (the
        connection is closed, to be opened again next time), ``TimeoutError`` past ``timeout_s``,
        and ``mcp.MCPError`` for an error the server answered."""
        import httpx2  # noqa: PLC0415 - loaded with the connection (rule O13)

        client = await self.ensure_open()
        try:
            return await asyncio.wait_for(client.call_tool(tool, arguments, read_timeout_seconds=timeout_s), timeout_s)
        except (OSError, EOFError, ConnectionError, httpx2.TransportError) as exc:
            await self.close()
            raise ServerUnavailable(f"{type(exc).__name__}: {exc}"[:300]) from exc

    async def close(self) -> None:
        """Close the session (and stop a stdio server's process)."""
        self._stop.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), 5)
            except (TimeoutError, Exception):  # noqa: BLE001
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self.client = None


class Pool:
    """Connections by configuration digest (rule X2)."""

    def __init__(self) -> None:
        self.by_digest: dict[str, Connection] = {}

    def get(self, config: McpServerConfig) -> Connection:
        """The connection of ``config`` (created, not yet opened, on first use)."""
        digest = config.digest()
        conn = self.by_digest.get(digest)
        if conn is None:
            conn = self.by_digest[digest] = Connection(config)
        return conn

    async def keep_only(self, digests: set[str]) -> None:
        """Close the connections of configurations no longer used."""
        for digest in [d for d in self.by_digest if d not in digests]:
            await self.by_digest.pop(digest).close()

    async def close(self) -> None:
        """Close every connection."""
        await self.keep_only(set())
