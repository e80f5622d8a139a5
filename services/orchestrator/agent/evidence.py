"""The per-task evidence pool: one numbering for knowledge-base and web evidence.

Rule A10 (docs/architecture.md): an index is assigned when evidence enters the model's context, in
the order the model reads it; items are deduplicated by chunk id (knowledge
base) or URL (web); a document's summary does not enter when its original text
already has. Sandbox output is computation, not evidence, and never enters.
"""

from __future__ import annotations

import re

from contracts.evidence import Citation, EvidenceItem, NumberedEvidence

_CITE = re.compile(r"\[(\d{1,3})\]")


class EvidencePool:
    """Numbered evidence of one task (wraps the list kept in ``TaskState.evidence``)."""

    def __init__(self, items: list[NumberedEvidence]) -> None:
        self.items = items
        self._by_key = {i.dedupe_key: i for i in items}

    def add(self, found: list[EvidenceItem]) -> tuple[list[NumberedEvidence], list[NumberedEvidence]]:
        """Number ``found`` items into the pool.

        Returns ``(in_context, new)``: the items as the model will see them (with
        pool numbers, duplicates resolved to their existing number, summaries of
        already-present originals dropped) and the subset that is new to the pool.
        """
        in_context: list[NumberedEvidence] = []
        new: list[NumberedEvidence] = []
        originals = {i.document_id for i in self.items if i.kind == "original" and i.document_id}
        originals |= {f.document_id for f in found if f.kind == "original" and f.document_id}
        for item in found:
            if item.kind == "summary" and item.document_id in originals:
                continue
            existing = self._by_key.get(item.dedupe_key)
            if existing is None:
                existing = NumberedEvidence(**item.model_dump(), index=len(self.items) + 1)
                self.items.append(existing)
                self._by_key[existing.dedupe_key] = existing
                new.append(existing)
            if existing not in in_context:
                in_context.append(existing)
        return in_context, new

    def get(self, index: int) -> NumberedEvidence | None:
        """The item numbered ``index`` or None."""
        return self.items[index - 1] if 1 <= index <= len(self.items) else None

    def check_citations(self, answer: str) -> tuple[str, list[Citation], list[int]]:
        """Validate every ``[n]`` in ``answer`` against the pool.

        Returns ``(answer_without_unknown_refs, citations_in_order, removed_numbers)``.
        A ``[n]`` with no pool item is removed (never shown as a link to nothing).
        """
        removed: list[int] = []
        cited: dict[int, Citation] = {}

        def repl(m: re.Match[str]) -> str:
            n = int(m.group(1))
            item = self.get(n)
            if item is None:
                removed.append(n)
                return ""
            cited.setdefault(n, Citation(index=n, chunk_id=item.chunk_id, title=item.title, locator=item.locator, url=item.url))
            return m.group(0)

        cleaned = _CITE.sub(repl, answer)
        return cleaned, list(cited.values()), removed
