"""The law's own references in the retriever: passages carry what they cite (rule K16) and ``kb_follow``
fetches cited articles as evidence (rule K17). docs/retrieval.md "The law's own references".

- K16: every law passage ``kb_search`` (and ``POST /v1/search``) returns carries ``metadata["ref_id"]``
  (its own article id) and ``refs``: the articles it cites that the graph resolved (``refgraph``), at
  most ``MAX_REFS_SHOWN``, in text order. No graph (file missing or built from another corpus): no refs,
  the search is unchanged (fail-open: references are an extra).
- K17: ``kb_follow(ref_ids)`` returns the cited articles (at most ``FOLLOW_MAX_REFS`` = 5 per call, rule
  A30) from the store as ``original`` evidence with ``metadata["followed"] = True`` and their own refs (the
  next hop); each text is cut to ``chunk_max_chars``. Ids the graph does not know are a
  ``kb_ref_unknown`` business error naming them; known ids whose article is not in the store (the law
  corpus not ingested) are left out, and none left is ``kb_ref_not_indexed``.
"""

from __future__ import annotations

import asyncio
import logging

from contracts.evidence import ArticleRef, EvidenceItem
from contracts.events import ToolRequested
from contracts.tools import KbFollowArgs
from services.retriever.packing import select_passages
from services.retriever.refgraph import RefGraph
from services.retriever.rescoring import E5_PAYLOAD

log = logging.getLogger("conduit.retriever.follow")

MAX_REFS_SHOWN = 8
"""Rule K16: at most this many references per passage (an article citing a long list keeps its first 8)."""
_SKIP = frozenset({"text", "parent_text", "parent_id", "content_hash", "source_path", "title", "locator",
                   "document_id", "tenant_id", E5_PAYLOAD, "parent_position", "child_position"})


def attach_refs(graph: RefGraph | None, evidence: list[EvidenceItem]) -> list[EvidenceItem]:
    """Rule K16: set ``metadata["ref_id"]`` and ``refs`` on each law article of ``evidence`` (in place;
    returned for chaining). Items that are not law articles, or ``graph`` None, are left alone."""
    if graph is None:
        return evidence
    for item in evidence:
        ref_id = graph.ref_of_point(item.chunk_id) if item.metadata.get("law_id") else None
        if ref_id is None:
            continue
        item.metadata["ref_id"] = ref_id
        item.refs = [ArticleRef(id=r.id, label=r.label) for r in graph.references(ref_id)[:MAX_REFS_SHOWN]]
    return evidence


def followed_evidence(graph: RefGraph, ref_id: str, point: str, payload: dict, max_chars: int) -> EvidenceItem:
    """Evidence for the article ``ref_id`` stored as ``point`` with ``payload`` (its text cut to ``max_chars``)."""
    text = str(payload.get("text") or "")
    item = EvidenceItem(
        chunk_id=point, document_id=payload.get("document_id"), kind="original",
        title=payload.get("title") or "《未命名文档》", locator=payload.get("locator"), score=None,
        text=select_passages(text, "", max_chars),
        metadata={**{k: v for k, v in payload.items() if k not in _SKIP and v is not None}, "followed": True},
    )
    return attach_refs(graph, [item])[0]


def make_kb_follow_tool(searcher, graph: RefGraph | None):
    """The ``kb_follow`` tool function for ``ToolService.tool`` (rule K17; ``searcher``: the open
    ``KbSearcher``, for its store and ``chunk_max_chars``). Raises ``ToolFailure`` (see the module docstring;
    ``kb_refs_unavailable`` when no graph is loaded)."""
    from conduit.runtime.toolservice import ToolFailure, ToolOutput  # noqa: PLC0415

    async def kb_follow_tool(args: KbFollowArgs, request: ToolRequested) -> ToolOutput:
        if graph is None:
            raise ToolFailure("kb_refs_unavailable", "this knowledge base has no reference graph",
                              hint="search with kb_search for the cited article instead", kind="business")
        unknown = [r for r in args.ref_ids if graph.point_of(r) is None]
        if unknown:
            raise ToolFailure("kb_ref_unknown", f"unknown article ids: {', '.join(unknown)}",
                              hint="pass ids listed after 引用 in the evidence", kind="business")
        points = {r: graph.point_of(r) or "" for r in args.ref_ids}
        found = await asyncio.to_thread(searcher.store.payloads, list(points.values()), None)
        max_chars = searcher.retrieval.chunk_max_chars
        evidence = [followed_evidence(graph, r, p, found[p], max_chars) for r, p in points.items() if p in found]
        if not evidence:
            raise ToolFailure("kb_ref_not_indexed", "the cited articles are not in this knowledge base's store",
                              hint="search with kb_search instead", kind="business")
        log.info("kb_follow %s: %d of %d articles", request.task_id, len(evidence), len(args.ref_ids))
        return ToolOutput(evidence=evidence)

    return kb_follow_tool
