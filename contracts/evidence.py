"""Evidence items returned by tools and numbered by the task's evidence pool.

Rule A10 (docs/architecture.md): knowledge-base and web evidence share one numbering pool per task;
an index is assigned when the item enters the model's context and is deduplicated
by ``chunk_id`` (knowledge base) or ``url`` (web). Sandbox output is computation,
not evidence, and never enters the pool.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

EvidenceKind = Literal["original", "summary", "web", "tool", "history"]


class ArticleRef(BaseModel):
    """An article a law passage cites (rule K16): ``id`` to pass to ``kb_follow`` (``<law_id>:<n>``) and a
    short ``label`` (「《民法典》第1065条」)."""

    id: str
    label: str


class EvidenceItem(BaseModel):
    """One passage a tool found.

    Fields:
        chunk_id: stable id of the chunk (knowledge base) or the URL (web).
        document_id: the document the chunk belongs to (used to drop a summary
            whose original text is already in the pool).
        kind: ``original`` (source text), ``summary`` (generated summary), ``web``, ``tool``
            (what a tenant's MCP server tool returned, ``services.mcp``) or ``history`` (one of the
            user's own earlier questions and answers, ``history_search``, rule M12).
        title: document title, e.g. 《中华人民共和国增值税法》.
        locator: where inside the document, e.g. ``第十一条`` or ``第 3 页``.
        url: source URL for web evidence.
        score: dense cosine similarity in [-1, 1] for knowledge-base hits
            (rule K1's floor applies to it); None when not scored.
        text: the passage text given to the model (at most CHUNK_MAX_CHARS chars).
        metadata: extra fields (law name, chapter, status, version date, page...).
        refs: the articles a law passage cites (rule K16; resolved references only, at most
            8, ``services.retriever.follow.MAX_REFS_SHOWN``), each followable with ``kb_follow``; empty otherwise.
    """

    chunk_id: str
    document_id: str | None = None
    kind: EvidenceKind = "original"
    title: str
    locator: str | None = None
    url: str | None = None
    score: float | None = None
    text: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    refs: list[ArticleRef] = Field(default_factory=list)

    @property
    def dedupe_key(self) -> str:
        """Key used by the evidence pool (rule A10: by chunk id or URL).

        Knowledge-base items: the chunk id. Web items: ``url#n`` chunk ids, so the
        same passage of the same page enters once while several passages of one
        page stay apart; a web item without a chunk number falls back to its URL.
        """
        if self.kind == "web" and self.url and "#" not in self.chunk_id:
            return self.url
        return self.chunk_id


class NumberedEvidence(EvidenceItem):
    """An evidence item with its pool number ``index`` (1-based, per task); cited as ``[index]``."""

    index: int = Field(ge=1)


class Citation(BaseModel):
    """A ``[index]`` reference in the final answer that points at pool evidence."""

    index: int = Field(ge=1)
    chunk_id: str
    title: str
    locator: str | None = None
    url: str | None = None
