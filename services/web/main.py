"""The web tool service: ``web_search`` and ``web_fetch`` over Kafka.

Run as ``python -m conduit serve web``. Consumes ``contracts.topics.TOOL_REQUESTS_WEB``
in group ``GROUP_WEB`` and publishes ``ToolResult`` events (``conduit.runtime.toolservice``).

- ``web_search`` needs a provider (``CONDUIT_SEARXNG_URL`` or ``CONDUIT_TAVILY_API_KEY``);
  without one it answers ``ToolFailure("provider_not_configured", kind="forbidden")``
  (the orchestrator does not offer it then: ``providers.web_tools_available``).
- ``web_fetch`` works without a provider.
- ``CONDUIT_WEB_ALLOW_PRIVATE=true`` (tests only) lets pages on loopback/private addresses be fetched.
"""

from __future__ import annotations

import asyncio
import logging

from conduit.runtime.settings import Settings
from conduit.runtime.toolservice import ToolFailure, ToolOutput, ToolService
from contracts import topics
from contracts.events import ToolRequested
from contracts.tools import WebFetchArgs, WebSearchArgs
from services.web import extract, pipeline
from services.web.journal import FetchJournal
from services.web.providers import configured_provider
from services.web.safefetch import AddressPolicy

log = logging.getLogger("conduit.web")


def build_service(settings: Settings) -> ToolService:
    """A ``ToolService("web", ...)`` with ``web_search`` and ``web_fetch`` registered (not started)."""
    extract.start_warm_up()  # beside the consumer group join, not before it
    provider = configured_provider(settings.web)
    policy = AddressPolicy(allow_private=settings.web.web_allow_private)
    if settings.web.web_allow_private:
        log.warning("web_allow_private is on: pages on loopback and private addresses can be fetched (tests only)")
    if provider is None:
        log.warning("no search provider configured: web_search is refused (web_fetch still works)")

    async def web_search(args: WebSearchArgs, request: ToolRequested) -> ToolOutput:
        if provider is None:
            raise ToolFailure("provider_not_configured", "web search is not configured on this deployment",
                              hint="answer from the knowledge base or fetch a known URL", kind="forbidden")
        return ToolOutput(evidence=await pipeline.web_search(args.query, provider, policy, more_queries=args.more_queries,
                                                             journal=FetchJournal(service.redis, request.payload.idempotency_key)))

    async def web_fetch(args: WebFetchArgs, request: ToolRequested) -> ToolOutput:
        return ToolOutput(evidence=await pipeline.web_fetch(
            args.url, args.reason, policy, journal=FetchJournal(service.redis, request.payload.idempotency_key)))

    service = ToolService("web", topics.TOOL_REQUESTS_WEB, topics.GROUP_WEB, settings)
    service.concurrency = settings.web.web_concurrency  # rule T7
    service.tool("web_search", web_search)  # type: ignore[arg-type]
    service.tool("web_fetch", web_fetch)  # type: ignore[arg-type]
    return service


def main(settings: Settings) -> None:
    """Serve the web tools until SIGTERM/SIGINT (blocking)."""
    asyncio.run(build_service(settings).serve())
