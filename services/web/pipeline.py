"""The web tools' pipelines: ``web_search`` (rules W1-W4, docs/rules.md) and ``web_fetch``.

web_search(query):
    provider search (``N_RESULTS`` = 5 hits) -> URL dedupe -> fetch the first
    ``MAX_PAGES`` (6) pages concurrently through ``safefetch`` -> first come, first
    served within ``budget_s`` (rule W1: 6 s total; pages not back in time are
    dropped) -> extract main text -> chunk (600/100) -> TF-IDF rerank against the
    query -> the ``TOP_CHUNKS`` (5) best chunks as evidence. When no page yields
    text, the provider's snippets are returned instead (rule W3: never return
    nothing just because fetching failed).

web_fetch(url, reason):
    one page through ``safefetch``, chunks reranked against ``reason``; when the
    reason matches nothing (or is empty) the start of the page.

Evidence shape: ``EvidenceItem(kind="web", chunk_id="URL#n", url=URL, title=page title,
locator=URL host, text=chunk)``. The text is untrusted page content kept raw;
``metadata["untrusted"] = True`` tells the orchestrator to render it inside its
untrusted-content wrapper. ``score`` stays ``None`` (rule W4: the rule K1 floor is for the
dense cosine, not TF-IDF); the TF-IDF cosine is in ``metadata["rerank_score"]``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from conduit.runtime.toolservice import ToolFailure
from contracts.evidence import EvidenceItem
from services.web import extract, safefetch
from services.web.journal import FetchJournal
from services.web.providers import SearchHit, SearchProvider

log = logging.getLogger("conduit.web.pipeline")

N_RESULTS = 5
"""Search hits asked of the provider (rule W1: 5 per query)."""
MAX_QUERIES = 3
"""Queries searched at once (rule W1)."""
MAX_PAGES = 6
"""Pages fetched per search (rule W1: the first 6 URLs)."""
BUDGET_S = 6.0
"""Total seconds for fetching and extracting the pages of one search (rule W1)."""
FETCH_TIMEOUT_S = 10.0
"""Deadline of a single ``web_fetch`` page (seconds)."""
TOP_CHUNKS = extract.TOP_CHUNKS


@dataclass(frozen=True)
class Page:
    """An extracted page: final ``url``, ``title`` (falls back to the host) and its ``chunks``."""

    url: str
    title: str
    chunks: list[str]

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""


def normalize_url(url: str) -> str:
    """Dedupe key of a URL: lower-case scheme and host, no fragment, no trailing slash."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def dedupe(hits: list[SearchHit]) -> list[SearchHit]:
    """Hits with repeated URLs (by ``normalize_url``) removed, first kept."""
    seen: set[str] = set()
    out: list[SearchHit] = []
    for hit in hits:
        key = normalize_url(hit.url)
        if key not in seen:
            seen.add(key)
            out.append(hit)
    return out


def _extract(page: safefetch.FetchedPage) -> extract.Extracted:
    if page.is_html:
        return extract.extract_html(page.text(), page.url)
    return extract.Extracted(title="", text=extract.clean_text(page.text()))


async def read_page(url: str, policy: safefetch.AddressPolicy, timeout_s: float,
                    journal: FetchJournal | None = None) -> Page:
    """Fetch, extract and chunk one page; a page the call's ``journal`` holds is not fetched again,
    and a fetched one goes into it at once (rule W5). Raises ``ToolFailure`` (fetch errors;
    ``empty_page``, business)."""
    fetched = await journal.get(url) if journal is not None else None
    if fetched is not None:
        log.info("page %s: read from the call's fetch journal (rule W5)", url)
    else:
        fetched = await safefetch.fetch(url, policy, timeout_s=timeout_s)
        if journal is not None:
            await journal.put(url, fetched)
    extracted = await asyncio.to_thread(_extract, fetched)
    chunks = extract.chunk(extracted.text)
    if not chunks:
        raise ToolFailure("empty_page", "the page has no readable text", kind="business")
    host = urlsplit(fetched.url).hostname or ""
    return Page(url=fetched.url, title=extracted.title or host, chunks=chunks)


async def gather_pages(urls: list[str], policy: safefetch.AddressPolicy, budget_s: float = BUDGET_S,
                       journal: FetchJournal | None = None) -> list[Page]:
    """Read ``urls`` concurrently; return the pages done within ``budget_s`` seconds, in arrival order.

    Failed pages are logged and skipped; pages still loading at the deadline are cancelled.
    """
    tasks = [asyncio.create_task(read_page(u, policy, budget_s, journal)) for u in urls]
    pages: list[Page] = []
    try:
        for next_done in asyncio.as_completed(tasks, timeout=budget_s):
            try:
                pages.append(await next_done)
            except TimeoutError:
                log.info("web fetch budget of %.1f s spent; %d of %d pages in", budget_s, len(pages), len(urls))
                break
            except ToolFailure as exc:
                log.info("web page skipped: %s", exc.error.message)
            except Exception:  # noqa: BLE001 - one hostile page must not sink the search
                log.warning("web page failed unexpectedly", exc_info=True)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return pages


def _evidence(page: Page, n: int, score: float, source: str) -> EvidenceItem:
    return EvidenceItem(
        chunk_id=f"{page.url}#{n + 1}", kind="web", url=page.url, title=page.title, locator=page.host,
        text=page.chunks[n],
        metadata={"untrusted": True, "source": source, "rerank_score": round(score, 4), "chunk": n + 1},
    )


def _snippet_evidence(hits: list[SearchHit]) -> list[EvidenceItem]:
    return [
        EvidenceItem(
            chunk_id=f"{hit.url}#snippet", kind="web", url=hit.url, title=hit.title,
            locator=urlsplit(hit.url).hostname or "", text=hit.snippet,
            metadata={"untrusted": True, "source": "search_snippet"},
        )
        for hit in hits if hit.snippet
    ]


async def _search_all(queries: list[str], provider: SearchProvider, n_results: int) -> list:
    """Search every query at once; interleave the result lists (first hits first). Raises the
    first provider error only when every query failed."""
    results = await asyncio.gather(*(provider.search(q, n_results) for q in queries), return_exceptions=True)
    lists = [r for r in results if not isinstance(r, BaseException)]
    if not lists:
        raise results[0]  # type: ignore[misc]
    return [hit for group in itertools.zip_longest(*lists) for hit in group if hit is not None]


async def web_search(query: str, provider: SearchProvider, policy: safefetch.AddressPolicy, *,
                     more_queries: list[str] | tuple[str, ...] = (),
                     n_results: int = N_RESULTS, max_pages: int = MAX_PAGES, budget_s: float = BUDGET_S,
                     top: int = TOP_CHUNKS, journal: FetchJournal | None = None) -> list[EvidenceItem]:
    """Run the search pipeline (rule W1) for ``query`` (plus up to 2 ``more_queries``, searched
    concurrently, ``n_results`` each, URLs deduplicated); return at most ``top`` evidence items.

    Raises ``ToolFailure``: ``no_results`` (business) when the provider finds nothing
    usable, provider errors (``search_failed``, transient).
    """
    queries = [query, *[q for q in more_queries if q.strip()]][:MAX_QUERIES]
    hits = dedupe(await _search_all(queries, provider, n_results))
    query = " ".join(queries)  # rerank against every phrasing
    if not hits:
        raise ToolFailure("no_results", f"the web search found nothing for {query!r}",
                          hint="try other or fewer keywords", kind="business")
    pages = await gather_pages([h.url for h in hits[:max_pages]], policy, budget_s, journal)
    pool = [(page, n) for page in pages for n in range(len(page.chunks))]
    if not pool:
        snippets = _snippet_evidence(hits[:top])
        if not snippets:
            raise ToolFailure("no_readable_results", "no result page could be read and the search gave no snippets",
                              hint="try other keywords or web_fetch a known URL", kind="business")
        return snippets
    ranked = await asyncio.to_thread(extract.rerank, query, [page.chunks[n] for page, n in pool], top)
    return [_evidence(pool[i][0], pool[i][1], score, "web_search") for i, score in ranked]


async def web_fetch(url: str, reason: str, policy: safefetch.AddressPolicy, *,
                    timeout_s: float = FETCH_TIMEOUT_S, top: int = TOP_CHUNKS,
                    journal: FetchJournal | None = None) -> list[EvidenceItem]:
    """Read one page (through the call's ``journal``, rule W5); return its ``top`` chunks most
    related to ``reason`` (else the first ones).

    Raises ``ToolFailure`` from ``safefetch`` (forbidden / business / transient) or ``empty_page``.
    """
    page = await read_page(url, policy, timeout_s, journal)
    ranked = await asyncio.to_thread(extract.rerank, reason, page.chunks, top)
    if not ranked or ranked[0][1] <= 0.0:
        ranked = [(n, 0.0) for n in range(min(top, len(page.chunks)))]
    return [_evidence(page, n, score, "web_fetch") for n, score in ranked]
