"""Which tools the model is offered (rule T2, docs/rules.md: an unconfigured tool disappears, and a
tool that cannot run, such as code_exec without isolation, is not shown)."""

from __future__ import annotations

import time

from redis.asyncio import Redis

from conduit.records import keys, sandboxstatus
from conduit.runtime.settings import WebSettings
from contracts.tools import ALL_TOOLS



def available_tools(web: WebSettings, allowed: list[str] | None = None,
                    unavailable: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """Tools offered for a task, in a stable order.

    ``kb_search`` and ``code_exec`` are served; ``web_search`` and ``web_fetch`` only
    when a search provider is configured (SearXNG URL or Tavily key). ``unavailable``
    (from ``unavailable_tools``: e.g. ``code_exec`` while no sandbox can isolate code)
    is left out. ``allowed`` (from the request) narrows the set further; ``kb_follow`` (rule A30) goes
    with ``kb_search``: allowing one search allows following what it finds.
    """
    offered = bool(web.searxng_url or web.tavily_api_key)
    tools = [t for t in ALL_TOOLS if (offered or not t.startswith("web_")) and t not in unavailable]
    if allowed is not None:
        allowed = [*allowed, "kb_follow"] if "kb_search" in allowed else allowed
        tools = [t for t in tools if t in allowed]
    return tools


async def unavailable_tools(redis: Redis) -> frozenset[str]:
    """Tools that cannot run right now: ``{"code_exec"}`` when sandbox replicas reported their
    status and none of them isolates code (or runs in the logged unsafe mode), else empty.

    No report at all (no sandbox started yet) hides nothing: the request then waits in its
    topic for a sandbox. One ``HGETALL`` of ``keys.SANDBOX_STATUSES`` (``conduit.records.sandboxstatus``;
    a status not rewritten for 30 s is a gone replica's); Redis errors propagate.
    """
    statuses = sandboxstatus.fresh(await redis.hgetall(keys.SANDBOX_STATUSES), time.time())
    if statuses and not any(s.get("isolated") or s.get("unsafe") for s in statuses):
        return frozenset({"code_exec"})
    return frozenset()
