"""Rule K20: the law's references resolved at search time (issue 40; docs/retrieval.md "References at search time").

An article often says where its answer is instead of saying it: 「应当依照本法第四十七条规定的经济补偿标准的二倍向劳动者
支付赔偿金」. The search finds the citing article (its words match the question) and the cited one is what the
question needs. So after the ranking (both stages), before the top k is cut:

- the references of the top ``retrieval_follow_refs`` ranked passages (0 = off, the default; 3 when on; the
  reference graph, rule K15; one hop, no model, so retrieval-only answers get them too) to another article **of the same law** join the candidates;
- each cited article is scored with the question like any candidate: it takes its citing passage's first-stage score
  (so its first-stage rank sits next to its citer's: the citation is the evidence that it belongs there) and, with
  the second stage on, its own e5 cosine to the question; the second-stage fusion then orders the whole pool again,
  so a cited article rises only as far as its own e5 score carries it;
- a cited article already in the pool (the usual case: the pool of 130 holds it, ranked low) takes its citer's
  first-stage score when that is higher: only adding the missing ones changed nothing on the follow set;
- at most ``MAX_ADDED`` articles per search; no graph, or a cited article not in the store: nothing changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from services.retriever.store import Hit

if TYPE_CHECKING:
    from services.retriever.refgraph import RefGraph
    from services.retriever.rescoring import SecondStage
    from services.retriever.store import VectorStore

MAX_ADDED = 8
"""Cited articles brought into one search's candidates at most (3 passages cite 2.6 articles on average over the
follow set, docs/retrieval.md "Is the cited article in the evidence?"; a list like 第三十六条至第四十一条 is cut)."""


def cited(graph: RefGraph, ranked: list[Hit], top: int) -> list[tuple[str, str, Hit]]:
    """``(ref id, point id, citing hit)`` of the articles of the same law that the first ``top`` law passages of
    ``ranked`` cite, in rank then text order, without repeats or the passages themselves; at most ``MAX_ADDED``."""
    out: list[tuple[str, str, Hit]] = []
    seen = {h.id for h in ranked[:top]}
    for hit in ranked[:top]:
        source = graph.ref_of_point(hit.id) if hit.payload.get("law_id") else None
        if source is None:
            continue
        law = source.split(":", 1)[0]
        for ref in graph.references(source):
            point = graph.point_of(ref.id)
            if ref.id.split(":", 1)[0] == law and point and point not in seen and len(out) < MAX_ADDED:
                seen.add(point)
                out.append((ref.id, point, hit))
    return out


def add_cited(graph: RefGraph | None, store: VectorStore, ranked: list[Hit], merged: dict[str, Hit], top: int,
              stage2: SecondStage | None = None, e5_queries: np.ndarray | None = None) -> int:
    """Bring the articles the top ``top`` passages of ``ranked`` cite into ``merged`` (``{point id: Hit}``, the
    search's pool, changed in place) scored as the module docstring says; ``e5_queries`` (rows of the question's e5
    vectors) give their e5 cosines when ``stage2`` is on. Returns how many were added (0 without a graph).
    Raises ``StoreError`` as the store does."""
    if graph is None or top <= 0:
        return 0
    wanted = cited(graph, ranked, top)
    if not wanted:
        return 0
    payloads = store.payloads([point for _, point, _ in wanted], None)
    new = [(ref, point, hit) for ref, point, hit in wanted if point in payloads and point not in merged]
    seconds: list[float | None] = [None] * len(new)
    if stage2 is not None and e5_queries is not None and new:
        seconds = stage2.cosines([p for _, p, _ in new], e5_queries, None, [payloads[p] for _, p, _ in new])
    changed = 0
    for (ref, point, hit), second in zip(new, seconds):
        merged[point] = Hit(point, hit.score, {**payloads[point], "cited_by": hit.id}, None, second)
        changed += 1
    for _, point, hit in wanted:
        old = merged.get(point)
        if old is not None and old.score < hit.score and "cited_by" not in old.payload:
            old.score = hit.score
            changed += 1
    return changed
