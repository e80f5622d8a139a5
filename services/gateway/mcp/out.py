"""MCP out: Conduit itself as an MCP server (official ``mcp`` SDK), tools ``search``, ``ask``, ``documents``.

The same server runs two ways (docs/mcp.md):

- on the gateway at ``/mcp`` (streamable HTTP, ``services.gateway.mcp.route``), authenticated
  like every ``/v1`` route (the caller's bearer credential), each call run for that caller;
- as ``conduit mcp`` over stdio, a client of a gateway (``--url``, ``--api-key``), for desktop
  chat apps and coding assistants that start their MCP servers as commands.

Tools (their results are what the HTTP API answers, so the two never drift):

- ``search(query, top_k?, document_ids?, collections?)``: exactly the ``POST /v1/search`` body
  (``SearchResponse``) as structured content, and its passages as text;
- ``ask(question, session_id?, document_ids?, collections?)``: a full agent run, limited to those
  documents and collections when given (the question's scope, rules Q1-Q4, ``contracts.scope``, as
  ``POST /v1/tasks`` takes it); while it streams, each answer delta and tool
  step is sent as a progress notification (when the client gave a progress token); the result is
  the cited answer (text with a numbered source list; structured: task id, status, answer,
  citations, confidence);
- ``documents()``: the ``GET /v1/documents`` body (``DocumentList``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from conduit.runtime.sseread import iter_sse
from contracts.stream import TERMINAL_TYPES

ASK_READ_TIMEOUT_S = 600.0
"""Longest wait (seconds) between two events of an ``ask`` stream (a held approval waits long)."""


class Backend:
    """What the tools call: a gateway over HTTP (``client``: base URL and credential set).

    Every method raises ``mcp.server.mcpserver.exceptions.ToolError`` with the gateway's
    ``code: message`` for an error answer.
    """

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def _json(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        r = await self.client.request(method, path, **kw)
        if r.status_code >= 400:
            try:
                err = r.json()
                raise ToolError(f"{err.get('code', r.status_code)}: {err.get('message', r.text)}")
            except ValueError:
                raise ToolError(f"HTTP {r.status_code}: {r.text[:300]}") from None
        return r.json()

    async def search(self, query: str, top_k: int | None, document_ids: list[str] | None = None,
                     collections: list[str] | None = None) -> dict[str, Any]:
        """``POST /v1/search`` -> its ``SearchResponse`` body (``filters`` from the scope lists given)."""
        body: dict[str, Any] = {"query": query} | ({"top_k": top_k} if top_k else {})
        filters = _scope(document_ids, collections)
        return await self._json("POST", "/v1/search", json=body | ({"filters": filters} if filters else {}))

    async def documents(self) -> dict[str, Any]:
        """``GET /v1/documents`` -> its ``DocumentList`` body."""
        return await self._json("GET", "/v1/documents")

    async def create_task(self, question: str, session_id: str | None, document_ids: list[str] | None = None,
                          collections: list[str] | None = None) -> str:
        """``POST /v1/tasks`` -> the new task's id (its scope: the lists given, rule Q1)."""
        body = {"question": question} | ({"session_id": session_id} if session_id else {})
        body |= _scope(document_ids, collections)
        return str((await self._json("POST", "/v1/tasks", json=body))["task_id"])

    async def task(self, task_id: str) -> dict[str, Any]:
        """``GET /v1/tasks/{id}`` -> its ``TaskView`` body."""
        return await self._json("GET", f"/v1/tasks/{task_id}")

    async def events(self, task_id: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """The task's events ``(type, data)`` up to and including its terminal event."""
        timeout = httpx.Timeout(30.0, read=ASK_READ_TIMEOUT_S)
        async with self.client.stream("GET", f"/v1/tasks/{task_id}/events", timeout=timeout) as r:
            if r.status_code >= 400:
                raise ToolError(f"HTTP {r.status_code}: cannot stream task {task_id}")
            lines: list[str] = []
            async for line in r.aiter_lines():
                lines.append(line)
                if line:
                    continue
                for ev in iter_sse(iter(lines)):
                    yield ev.event, ev.data if isinstance(ev.data, dict) else {}
                    if ev.event in TERMINAL_TYPES:
                        return
                lines = []


def _scope(document_ids: list[str] | None, collections: list[str] | None) -> dict[str, list[str]]:
    """The scope fields of a body (``contracts.scope``): those lists given and not empty."""
    return {k: v for k, v in (("document_ids", document_ids), ("collections", collections)) if v}


def cited_text(view: dict[str, Any]) -> str:
    """A finished task as text: the answer, then ``Sources:`` with one ``[n] title locator url`` line each."""
    answer = view.get("answer") or (view.get("error") or {}).get("message") or f"(task {view.get('status')})"
    sources = [" ".join(str(p) for p in (f"[{c['index']}]", c.get("title"), c.get("locator"), c.get("url")) if p)
               for c in view.get("citations") or []]
    return answer + ("\n\nSources:\n" + "\n".join(sources) if sources else "")


def _progress_line(kind: str, data: dict[str, Any]) -> str | None:
    """What one stream event tells an ``ask`` caller (None: nothing worth a notification)."""
    if kind == "answer.delta":
        return data.get("text") or None
    if kind in ("tool.requested", "tool.completed"):
        return f"{kind} {data.get('tool')}" + (f": {data['reason']}" if data.get("reason") else "")
    if kind == "tool.approval_required":
        return f"waiting for a person to approve {data.get('tool')} (call {data.get('call_id')})"
    return None


def build_server(backend_of: Any) -> MCPServer:
    """The MCP server; ``backend_of(ctx)`` returns the ``Backend`` of the calling request
    (one backend for stdio; the caller's credential on the gateway)."""
    server = MCPServer("conduit", instructions="Search and ask a Conduit knowledge base; answers cite their sources.")
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(annotations=read_only, structured_output=False)
    async def search(query: str, ctx: Context, top_k: int | None = None, document_ids: list[str] | None = None,
                     collections: list[str] | None = None) -> CallToolResult:
        """Search the knowledge base; returns the passages exactly as POST /v1/search does. Optional
        document_ids (ids from the documents tool, or law:… ids) and collections ("law", "documents" or a
        named collection) limit the search to them."""
        body = await (await backend_of(ctx)).search(query, top_k, document_ids, collections)
        text = "\n\n".join(f"[{i + 1}] {it.get('title', '')} {it.get('locator') or ''}\n{it.get('text', '')}"
                           for i, it in enumerate(body.get("items", []))) or "No passages found."
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=body)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, open_world_hint=True), structured_output=False)
    async def ask(question: str, ctx: Context, session_id: str | None = None, document_ids: list[str] | None = None,
                  collections: list[str] | None = None) -> CallToolResult:
        """Ask Conduit's agent; returns a cited answer (progress notifications while it works). Optional
        document_ids (ids from the documents tool, or law:… ids) and collections ("law" for the law corpus,
        "documents" for all the tenant's documents, or a named collection) limit every search of the answer
        to them."""
        backend = await backend_of(ctx)
        task_id = await backend.create_task(question, session_id, document_ids, collections)
        step = 0
        async for kind, data in backend.events(task_id):
            line = _progress_line(kind, data)
            if line:
                step += 1
                await ctx.report_progress(step, None, line)
        view = await backend.task(task_id)
        structured = {k: view.get(k) for k in ("task_id", "session_id", "status", "answer", "citations", "confidence",
                                                    "scope")}
        return CallToolResult(content=[TextContent(type="text", text=cited_text(view))], structured_content=structured,
                              is_error=view.get("status") != "completed")

    @server.tool(annotations=read_only, structured_output=False)
    async def documents(ctx: Context) -> CallToolResult:
        """List the tenant's documents with their ingestion status (GET /v1/documents)."""
        body = await (await backend_of(ctx)).documents()
        lines = [f"{d['document_id']}: {d.get('title')} ({d.get('status')})" for d in body.get("documents", [])]
        return CallToolResult(content=[TextContent(type="text", text="\n".join(lines) or "No documents.")],
                              structured_content=body)

    return server


def run_stdio(url: str, api_key: str | None) -> None:
    """Serve Conduit over stdio as a client of the gateway at ``url`` (blocking, until stdin closes)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    client = httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=httpx.Timeout(60.0))
    backend = Backend(client)

    async def backend_of(_ctx: Any) -> Backend:
        return backend

    build_server(backend_of).run("stdio")


