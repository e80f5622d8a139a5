"""Web search providers behind one interface: ``SearchProvider.search(query, n) -> list[SearchHit]``.

Two backends:

- ``SearxngProvider``: a SearXNG instance's JSON API, ``GET {base}/search?q=...&format=json``
  (the instance must have ``json`` in ``search.formats`` of its settings.yml).
  Response shape used: ``{"results": [{"url", "title", "content"}, ...]}``.
- ``TavilyProvider``: ``POST https://api.tavily.com/search`` with ``Authorization: Bearer KEY``
  and body ``{"query", "max_results", "search_depth": "basic"}``.
  Response shape used: ``{"results": [{"url", "title", "content", "score"}, ...]}``.

The provider's own address is operator configuration, so it is called with a plain
httpx client (it may well live on a private network); the *result* URLs are
untrusted and only ever fetched through ``safefetch``.

``configured_provider(web)`` picks SearXNG when ``searxng_url`` is set, else
Tavily when ``tavily_api_key`` is set, else ``None`` (web tools are not offered).
Errors: ``ToolFailure("search_failed", kind="transient")`` for network errors,
HTTP errors and malformed answers; ``401`` and ``403`` (a wrong or revoked key, rule E9 in
docs/agent-rules.md) are ``ToolFailure("search_unauthorized", kind="forbidden")``: never retried,
never counted as transient.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from conduit.runtime.settings import WebSettings
from conduit.runtime.toolservice import ToolFailure

log = logging.getLogger("conduit.web.providers")

TAVILY_ENDPOINT = "https://api.tavily.com/search"
SEARCH_TIMEOUT_S = 8.0
"""Seconds one provider call may take (connect + read)."""
MAX_RESULTS = 20
"""Upper bound on ``n`` whatever the caller asks (providers cap around 20 too)."""


@dataclass(frozen=True)
class SearchHit:
    """One search result: ``url`` (http/https, untrusted), ``title`` and ``snippet`` (plain text)."""

    url: str
    title: str
    snippet: str


class SearchProvider(Protocol):
    """A web search backend."""

    name: str

    async def search(self, query: str, n: int = 5) -> list[SearchHit]:
        """Return at most ``n`` hits for ``query`` (best first). Raises ``ToolFailure``."""
        ...


def _hits(results: Any, n: int) -> list[SearchHit]:
    """Turn a provider's ``results`` list into ``SearchHit``s, skipping malformed and non-http(s) entries."""
    if not isinstance(results, list):
        raise ToolFailure("search_failed", "search provider returned no result list", kind="transient")
    hits: list[SearchHit] = []
    for item in results:
        if not isinstance(item, dict):
            continue
        url = str(item.get("url") or "").strip()
        if not url.lower().startswith(("http://", "https://")):
            continue
        title = str(item.get("title") or "").strip()[:300]
        snippet = str(item.get("content") or item.get("snippet") or "").strip()[:2000]
        hits.append(SearchHit(url=url, title=title or url, snippet=snippet))
        if len(hits) >= n:
            break
    return hits


async def _call(request: httpx.Request, provider: str) -> Any:
    """Send ``request`` and return its JSON body; map every failure to ``ToolFailure(search_failed)``."""
    try:
        async with httpx.AsyncClient(timeout=SEARCH_TIMEOUT_S, trust_env=False) as client:
            response = await client.send(request)
            response.raise_for_status()
            return response.json()
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code in (401, 403):  # rule E9: a key problem does not heal by retrying
            raise ToolFailure("search_unauthorized", f"{provider} refused the credentials (HTTP {exc.response.status_code})",
                              hint="web search is not available; answer without it", kind="forbidden") from exc
        raise ToolFailure("search_failed", f"{provider} answered HTTP {exc.response.status_code}",
                          hint="try again later", kind="transient") from exc
    except (httpx.HTTPError, ValueError) as exc:
        raise ToolFailure("search_failed", f"{provider} unreachable or invalid answer: {type(exc).__name__}",
                          hint="try again later", kind="transient") from exc


class SearxngProvider:
    """SearXNG JSON API at ``base_url`` (e.g. ``http://searxng:8080``)."""

    name = "searxng"

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    async def search(self, query: str, n: int = 5) -> list[SearchHit]:
        n = max(1, min(n, MAX_RESULTS))
        request = httpx.Request("GET", f"{self.base_url}/search", params={"q": query, "format": "json"},
                                headers={"Accept": "application/json"})
        body = await _call(request, self.name)
        return _hits(body.get("results") if isinstance(body, dict) else None, n)


class TavilyProvider:
    """Tavily search API with ``api_key`` (``endpoint`` is overridable for tests)."""

    name = "tavily"

    def __init__(self, api_key: str, endpoint: str = TAVILY_ENDPOINT) -> None:
        self.api_key = api_key
        self.endpoint = endpoint

    def __repr__(self) -> str:  # never print the key
        return f"TavilyProvider(endpoint={self.endpoint!r}, api_key=<redacted>)"

    async def search(self, query: str, n: int = 5) -> list[SearchHit]:
        n = max(1, min(n, MAX_RESULTS))
        request = httpx.Request(
            "POST", self.endpoint,
            json={"query": query, "max_results": n, "search_depth": "basic"},
            headers={"Authorization": f"Bearer {self.api_key}", "Accept": "application/json"},
        )
        body = await _call(request, self.name)
        return _hits(body.get("results") if isinstance(body, dict) else None, n)


def configured_provider(web: WebSettings) -> SearchProvider | None:
    """The provider the settings configure: SearXNG first, then Tavily; ``None`` when neither is set."""
    if web.searxng_url:
        return SearxngProvider(web.searxng_url)
    if web.tavily_api_key:
        return TavilyProvider(web.tavily_api_key)
    return None


def web_tools_available(web: WebSettings) -> bool:
    """True when a search provider is configured, i.e. ``web_search``/``web_fetch`` may be offered to the model."""
    return configured_provider(web) is not None
