"""MCP server configurations and tool catalogs in Redis (keys ``mcp_servers``, ``mcp_catalog``).

A tenant's servers come from two places: ``CONDUIT_MCP_SERVERS`` (``{tenant: [config, ...]}``,
tenant ``*`` = every tenant) and the ones its admins registered with ``POST /v1/mcp-servers``
(a Redis hash). A name given in the settings wins over a registered one of the same name.
The mcp service writes each tenant's ``McpCatalog`` (tools of the servers that answered, every
server's status); the orchestrator reads it once when a task starts.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import ValidationError
from redis.asyncio import Redis

from conduit.records import keys, slots
from contracts.mcp import McpCatalog, McpServerConfig

Source = Literal["settings", "api"]


class Settings(Protocol):
    """The one setting read here (``conduit.runtime.settings.McpSettings``, ``settings.mcp``, has it):
    ``mcp_servers``, the servers of ``CONDUIT_MCP_SERVERS`` as ``{tenant: [config, ...]}``. A protocol: records
    sit below the runtime."""

    mcp_servers: dict[str, list[dict]]


def from_settings(mcp: Settings, tenant_id: str) -> list[McpServerConfig]:
    """The servers ``CONDUIT_MCP_SERVERS`` gives ``tenant_id`` (its own, then those of ``*``).

    Raises ``pydantic.ValidationError`` for a malformed entry.
    """
    own = [McpServerConfig.model_validate(c) for c in mcp.mcp_servers.get(tenant_id, [])]
    names = {c.name for c in own}
    shared = [McpServerConfig.model_validate(c) for c in mcp.mcp_servers.get("*", []) if tenant_id != "*"]
    return own + [c for c in shared if c.name not in names]


async def registered(redis: Redis, tenant_id: str) -> list[McpServerConfig]:
    """The servers the tenant's admins registered (a malformed stored entry is skipped)."""
    out = []
    for _name, raw in sorted((await redis.hgetall(keys.mcp_servers(tenant_id))).items()):
        try:
            out.append(McpServerConfig.model_validate_json(raw))
        except ValidationError:
            continue
    return out


async def servers(mcp: Settings, redis: Redis, tenant_id: str) -> list[tuple[McpServerConfig, Source]]:
    """Every server of ``tenant_id`` with where it came from; a settings name hides a registered one."""
    configured = from_settings(mcp, tenant_id)
    names = {c.name for c in configured}
    api = [c for c in await registered(redis, tenant_id) if c.name not in names]
    return [(c, "settings") for c in configured] + [(c, "api") for c in api]


async def tenants(mcp: Settings, redis: Redis) -> list[str]:
    """Tenants with at least one server: named in the settings (``*`` stands for itself) or registered."""
    found = {t for t in mcp.mcp_servers if mcp.mcp_servers[t]}
    prefix = keys.mcp_servers("")
    async for key in redis.scan_iter(match=keys.MCP_SERVERS_PATTERN, count=500):
        found.add((key.decode() if isinstance(key, bytes) else key)[len(prefix):])
    return sorted(found)


async def register(redis: Redis, tenant_id: str, config: McpServerConfig) -> None:
    """Store (or replace) a registered server of ``tenant_id``."""
    await redis.hset(keys.mcp_servers(tenant_id), config.name, config.model_dump_json())


async def unregister(redis: Redis, tenant_id: str, name: str) -> bool:
    """Remove a registered server; True when there was one."""
    return bool(await redis.hdel(keys.mcp_servers(tenant_id), name))


async def save_catalog(redis: Redis, catalog: McpCatalog, ttl_s: int) -> None:
    """Write a tenant's catalog; it expires after ``ttl_s`` seconds unless written again."""
    await redis.set(keys.mcp_catalog(catalog.tenant_id), catalog.model_dump_json(), ex=max(1, ttl_s))


async def load_catalog(redis: Redis, tenant_id: str) -> McpCatalog | None:
    """The tenant's catalog, or None when the mcp service has not written one (or it expired).

    A tenant without servers of its own reads the catalog of ``*`` (the servers every tenant
    gets); one with its own servers has the shared ones in its own catalog.
    """
    if tenant_id == "*":
        raw = await redis.get(keys.mcp_catalog("*"))
    else:  # rule O11: both in one round trip
        own, shared = await slots.mget(redis, [keys.mcp_catalog(tenant_id), keys.mcp_catalog("*")])
        raw = own if own is not None else shared
    if raw is None:
        return None
    try:
        return McpCatalog.model_validate_json(raw)
    except ValidationError:
        return None


async def summary(redis: Redis) -> dict[str, int]:
    """Every tenant's MCP servers as the mcp service last saw them: ``{"servers": n, "failing": n}``
    (one SCAN plus one GET per tenant; for readiness, which stays up while a tenant's server fails)."""
    servers = failing = 0
    async for key in redis.scan_iter(match=keys.mcp_catalog("*"), count=500):
        raw = await redis.get(key)
        if raw is None:
            continue
        try:
            catalog = McpCatalog.model_validate_json(raw)
        except ValidationError:
            continue
        servers += len(catalog.servers)
        failing += sum(1 for s in catalog.servers if not s.ok)
    return {"servers": servers, "failing": failing}
