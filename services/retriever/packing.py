"""Packing ``kb_search``'s hits into evidence (rule K4): each item cut to its most query-relevant paragraphs within
the per-item and total character budgets, as ``EvidenceItem``s (a child chunk's hit packs its parent's text)."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping

from contracts.evidence import EvidenceItem
from services.retriever.rescoring import E5_PAYLOAD
from services.retriever.store import Hit

MIN_PACK_CHARS = 200
"""An item is dropped rather than cut below this many characters when the context budget runs out."""
GAP = "……"
"""Marks paragraphs left out of a long text."""


def query_bigrams(text: str) -> set[str]:
    """Character bigrams of ``text`` without whitespace and punctuation (for paragraph scoring)."""
    chars = [ch for ch in text.lower() if not (ch.isspace() or unicodedata.category(ch)[0] in "PS")]
    return {chars[i] + chars[i + 1] for i in range(len(chars) - 1)}


def select_passages(text: str, query: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` chars, keeping its most query-relevant paragraphs.

    Paragraphs (lines) are ranked by how many of the query's character bigrams
    they contain (ties: earlier first); a short first line (an enumeration's
    lead-in, <= 200 chars) is kept for context. Kept paragraphs stay in document
    order; ``GAP`` marks what was left out. A single paragraph longer than the
    budget is cut at ``limit``.
    """
    if len(text) <= limit:
        return text
    paragraphs = [p for p in text.split("\n") if p.strip()]
    if len(paragraphs) <= 1:
        return text[: max(0, limit - len(GAP))] + GAP
    grams = query_bigrams(query)
    scores = [len(grams & query_bigrams(p)) for p in paragraphs]
    order = sorted(range(len(paragraphs)), key=lambda i: (-scores[i], i))
    if len(paragraphs[0]) <= 200 and 0 in order:
        order.remove(0)
        order.insert(0, 0)
    chosen: set[int] = set()
    cost = 0
    for i in order:
        extra = len(paragraphs[i]) + 1 + len(GAP) + 1  # paragraph, newline, possible gap marker line
        if cost + extra <= limit:
            chosen.add(i)
            cost += extra
    if not chosen:  # the best paragraph alone is longer than the budget
        best = order[0]
        return paragraphs[best][: max(0, limit - len(GAP))] + GAP
    return with_gaps(paragraphs, chosen)[:limit]


def with_gaps(lines: list[str], keep: set[int]) -> str:
    """The ``keep`` lines of ``lines`` (indices) in document order, one per line, ``GAP`` standing for each run of
    lines left out (before, between and after them)."""
    out, prev = [], -1
    for i in sorted(keep):
        if i != prev + 1:
            out.append(GAP)
        out.append(lines[i])
        prev = i
    if prev != len(lines) - 1:
        out.append(GAP)
    return "\n".join(out)


_META_SKIP = frozenset({"text", "parent_text", "parent_id", "content_hash", "source_path", "title", "locator",
                        "document_id", "tenant_id", E5_PAYLOAD})


def to_evidence(hit: Hit, text: str) -> EvidenceItem:
    """An ``EvidenceItem`` (kind ``original``) for ``hit`` with the packed ``text``.

    ``chunk_id`` is ``hit.id``: the parent chunk id for a file's child hit (set when
    merging, so citations point at the parent), the point id for a law article.

    ``score`` is the dense cosine; ``metadata`` holds the payload's display fields
    (law_name, chapter, article_no, status, version_date, ...) and ``fused_score``.
    """
    p = hit.payload
    metadata = {k: v for k, v in p.items() if k not in _META_SKIP and v is not None}
    metadata["fused_score"] = round(hit.score, 6)
    if hit.second is not None:
        metadata["e5_score"] = round(hit.second, 4)
    return EvidenceItem(
        chunk_id=hit.id,
        document_id=p.get("document_id"),
        kind="original",
        title=p.get("title") or "《未命名文档》",
        locator=p.get("locator"),
        score=None if hit.dense_score is None else round(hit.dense_score, 4),
        text=text,
        metadata=metadata,
    )


def hit_text(hit: Hit) -> str:
    """The evidence text of a hit: its parent's text for a child chunk, else its own text."""
    return str(hit.payload.get("parent_text") or hit.payload.get("text") or "")


def pack(hits: list[Hit], query: str, chunk_max_chars: int, context_max_chars: int,
         quotes: Mapping[str, tuple[str, list[str]]] | None = None) -> list[EvidenceItem]:
    """Evidence for ``hits`` in order within the per-item and total character budgets
    (a child chunk's hit packs its parent's text, ``parent_text``). ``quotes`` (rule K23, ``items.item_quotes``):
    ``{hit id: (text, item markers)}`` of the articles found through one of their list items, packed as that text
    (the lead-in and the item) with ``metadata.items`` = the markers (``["（三）"]``)."""
    out, used = [], 0
    for hit in hits:
        quoted = (quotes or {}).get(hit.id)
        text = quoted[0] if quoted else hit_text(hit)
        budget = min(chunk_max_chars, context_max_chars - used)
        if budget < min(MIN_PACK_CHARS, len(text)) or budget <= 0:
            break
        packed = select_passages(text, query, budget)
        used += len(packed)
        out.append(to_evidence(hit, packed))
        if quoted:
            out[-1].metadata["items"] = list(quoted[1])
    return out
