"""Which tools the model is offered (rule T2, docs/rules.md: an unconfigured tool disappears)."""

from __future__ import annotations

from conduit.runtime.settings import Settings
from contracts.tools import ALL_TOOLS


def available_tools(settings: Settings, allowed: list[str] | None = None) -> list[str]:
    """Tools offered for a task, in a stable order.

    ``kb_search`` and ``code_exec`` are always served; ``web_search`` and
    ``web_fetch`` only when a search provider is configured (SearXNG URL or
    Tavily key). ``allowed`` (from the request) narrows the set further.
    """
    web = bool(settings.searxng_url or settings.tavily_api_key)
    tools = [t for t in ALL_TOOLS if web or not t.startswith("web_")]
    if allowed is not None:
        tools = [t for t in tools if t in allowed]
    return tools
