"""The mcp tool service: tenants' external tools over Kafka: their MCP server tools (``mcp.<server>.<tool>``)
and their remote A2A agents (``a2a.<agent>``, rule T10: ``services.mcp.agents``).

Run as ``python -m conduit serve mcp``. Consumes ``contracts.topics.TOOL_REQUESTS_MCP`` in group
``GROUP_MCP`` through the shared ``ToolService`` runtime (idempotency key, claim, deadline,
cancel; rules T3-T6) and publishes ``ToolResult`` events. Besides, every ``mcp_refresh_s``
seconds it reads every tenant's server configurations (``conduit.records.mcp``), lists the tools
of a server whose configuration digest changed or whose list is older than ``mcp_list_ttl_s``
(rule X2), tries a failing one again (after ``mcp_refresh_s`` doubled per failure in a row, at
most ``mcp_list_ttl_s``), and writes each tenant's ``McpCatalog``: the tools of the servers
that answered, and every server's status (a failing server's tools are withheld); the same pass reads
the cards of the tenant's remote A2A agents (``RemoteAgents.listed``) and adds the agents that answered.

A call's result text becomes one evidence item of kind ``tool`` (numbered and cited like any
passage, shown to the model inside the untrusted-data wrapper, rule A11). Failures (rule T4):
server unreachable -> ``transient`` (retried, breaker); the tool answered ``isError`` ->
``business``; arguments against the tool's JSON Schema -> ``bad_arguments``; a tool the server
no longer lists or a server no longer configured -> ``forbidden``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import jsonschema

from conduit.records import mcp as records
from conduit.runtime.settings import Settings
from conduit.runtime.toolservice import ToolFailure, ToolOutput, ToolService
from contracts import topics
from contracts.events import ToolRequested
from contracts.evidence import EvidenceItem
from contracts.a2a import is_a2a
from contracts.mcp import McpCatalog, McpServerConfig, McpServerStatus, McpTool, canonical_name, function_name, is_mcp
from services.mcp.agents import RemoteAgents
from services.mcp.connections import Pool, ServerUnavailable

if TYPE_CHECKING:  # rule O13: the MCP SDK loads with the first connection (docs/operations.md, "Memory")
    from mcp.types import CallToolResult, Tool

log = logging.getLogger("conduit.mcp")

INVALID_PARAMS = -32602
"""JSON-RPC's code for invalid parameters (an MCP server's answer to bad arguments)."""


def offered(server: str, tool: Tool) -> McpTool:
    """The ``McpTool`` Conduit offers for ``tool`` of ``server`` (names: rule X1; its annotations, MCP's
    defaults when absent: not read-only, destructive, open world, not idempotent; rule T9)."""
    notes = tool.annotations

    def hint(name: str, default: bool) -> bool:
        value = getattr(notes, name, None) if notes is not None else None
        return default if value is None else bool(value)

    return McpTool(name=canonical_name(server, tool.name), function=function_name(server, tool.name), server=server,
                   tool=tool.name, description=(tool.description or tool.title or "")[:1000],
                   input_schema=dict(tool.input_schema or {"type": "object"}), read_only=hint("read_only_hint", False),
                   destructive=hint("destructive_hint", True), open_world=hint("open_world_hint", True),
                   idempotent=hint("idempotent_hint", False))


def result_text(result: CallToolResult, limit: int) -> str:
    """A call result as text: its text blocks, else its structured content as JSON, cut to ``limit``."""
    from mcp.types import TextContent  # noqa: PLC0415 - rule O13 (loaded by the connection already)

    texts = [b.text for b in result.content if isinstance(b, TextContent)]
    others = [b.type for b in result.content if not isinstance(b, TextContent)]
    text = "\n".join(texts)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    if others:
        text += f"\n[{len(others)} non-text block(s) left out: {', '.join(sorted(set(others)))}]"
    return text[:limit] or "(empty result)"


class McpTools:
    """The service's state: the connection pool and the configurations last read."""

    def __init__(self, service: ToolService) -> None:
        self.service = service
        self.settings = service.settings
        self.pool = Pool()
        self.agents = RemoteAgents(service.settings)

    async def refresh(self) -> list[McpCatalog]:
        """One pass: read every tenant's servers, list what needs it, write every catalog."""
        s = self.settings.mcp
        catalogs, used = [], set()
        for tenant in sorted(set(await records.tenants(s, self.service.redis)) | self.agents.tenants()):
            statuses, tools, agents = [], [], []
            for config, source in await records.servers(s, self.service.redis, tenant):
                used.add(config.digest())
                status, listed = await self._listed(config, source)
                statuses.append(status)
                tools += listed
            for agent in self.agents.configs(tenant):  # rule T10
                status, listed = await self.agents.listed(agent)
                agents.append(status)
                tools += listed
            catalog = McpCatalog(tenant_id=tenant, tools=tools, servers=statuses, agents=agents)
            await records.save_catalog(self.service.redis, catalog, int(max(60.0, s.mcp_refresh_s * 6)))
            catalogs.append(catalog)
        await self.pool.keep_only(used)
        return catalogs

    async def _listed(self, config: McpServerConfig, source: str) -> tuple[McpServerStatus, list[McpTool]]:
        s, conn, now = self.settings.mcp, self.pool.get(config), time.time()
        if conn.error is None:
            due = not conn.listed_at or now - conn.listed_at >= s.mcp_list_ttl_s
        else:  # a failing server is tried again, backing off (a broken command is not started every refresh)
            due = now - conn.tried_at >= conn.retry_after_s(s.mcp_refresh_s, s.mcp_list_ttl_s)
        if due:
            try:
                await conn.list_tools()
                log.info("mcp server %s lists %d tools", config.name, len(conn.tools))
            except ServerUnavailable as exc:
                log.warning("mcp server %s failed: %s", config.name, exc)
        tools = [] if conn.error else [offered(config.name, t) for t in conn.tools]
        status = McpServerStatus(name=config.name, source=source, transport=config.transport,  # type: ignore[arg-type]
                                 digest=config.digest(), ok=conn.error is None, error=conn.error,
                                 tools=[t.name for t in tools], checked_at=conn.tried_at or now)
        return status, tools

    async def keep_refreshing(self) -> None:
        """Forever: ``refresh`` every ``mcp_refresh_s`` seconds (an error is logged, the loop goes on)."""
        while True:
            try:
                await self.refresh()
            except Exception:  # noqa: BLE001 - one bad pass must not stop the catalog
                log.exception("mcp refresh failed")
            await asyncio.sleep(self.settings.mcp.mcp_refresh_s)

    async def _find(self, tenant_id: str, name: str) -> tuple[McpServerConfig, Tool]:
        """The configuration and listed tool of ``name`` for ``tenant_id``; ``ToolFailure`` (forbidden) if none."""
        server = name.split(".", 2)[1]
        config = next((c for c, _ in await records.servers(self.settings.mcp, self.service.redis, tenant_id)
                       if c.name == server), None)
        if config is None:
            raise ToolFailure("mcp_server_not_configured", f"no MCP server {server!r} for this tenant",
                              hint="use another tool", kind="forbidden")
        conn = self.pool.get(config)
        if not conn.tools:
            try:
                await conn.list_tools()
            except ServerUnavailable as exc:
                raise ToolFailure("mcp_unavailable", f"MCP server {server} is unavailable: {exc}",
                                  hint="try again later or answer without it") from exc
        tool = next((t for t in conn.tools if canonical_name(server, t.name) == name), None)
        if tool is None:
            raise ToolFailure("mcp_tool_unknown", f"{name} is not offered by MCP server {server}", kind="forbidden")
        return config, tool

    async def call(self, arguments: dict[str, Any], request: ToolRequested) -> ToolOutput:
        """Run one MCP tool call (``ToolService`` family function; failures as the module says)."""
        from mcp import MCPError  # noqa: PLC0415 - rule O13 (loaded by the connection ``_find`` opened)

        name = request.payload.tool
        config, tool = await self._find(request.tenant_id, name)
        spec = offered(config.name, tool)
        args = spec.call_arguments(arguments)
        try:
            jsonschema.validate(args, spec.input_schema)
        except jsonschema.ValidationError as exc:
            raise ToolFailure("bad_arguments", exc.message[:500], hint="fix the arguments to match the tool's JSON Schema",
                              kind="bad_arguments") from exc
        except jsonschema.SchemaError:
            pass  # the server's schema is broken: let the server judge the arguments
        try:
            result = await self.pool.get(config).call(tool.name, args, self.service.timeout_s)
        except ServerUnavailable as exc:
            raise ToolFailure("mcp_unavailable", f"MCP server {config.name} is unavailable: {exc}",
                              hint="try again later or answer without it") from exc
        except MCPError as exc:
            kind = "bad_arguments" if exc.code == INVALID_PARAMS else "business"
            raise ToolFailure("mcp_error", str(exc.error.message)[:500], kind=kind) from exc
        text = result_text(result, self.settings.retrieval.chunk_max_chars)
        if result.is_error:
            raise ToolFailure("mcp_tool_error", text[:500], hint="the tool reported an error", kind="business")
        digest = hashlib.sha256(json.dumps([name, args, text], ensure_ascii=False, sort_keys=True).encode()).hexdigest()
        item = EvidenceItem(chunk_id=f"mcp:{digest[:24]}", kind="tool", title=name, text=text,
                            metadata={"server": config.name, "tool": tool.name, "arguments": args})
        return ToolOutput(evidence=[item])


def build_service(settings: Settings) -> tuple[ToolService, McpTools]:
    """A ``ToolService("mcp", ...)`` serving every ``mcp.*`` tool and every remote agent ``a2a.*`` (rule T10),
    and its ``McpTools`` (not started)."""
    service = ToolService("mcp", topics.TOOL_REQUESTS_MCP, topics.GROUP_MCP, settings)
    tools = McpTools(service)
    service.tool_family(is_mcp, tools.call)
    service.tool_family(is_a2a, lambda args, request: tools.agents.call(args, request, service.timeout_s))
    return service, tools


def main(settings: Settings) -> None:
    """Serve MCP tools and keep the catalogs fresh until SIGTERM/SIGINT (blocking)."""
    service, tools = build_service(settings)

    async def run() -> None:
        try:
            await service.serve(background=[tools.keep_refreshing])
        finally:
            await tools.pool.close()

    asyncio.run(run())
