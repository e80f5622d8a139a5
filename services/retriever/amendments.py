"""Rule K24 (docs/rules.md): amending texts linked to the law they amend; an amended-away one never outranks the
text that amended it.

The corpus keeps amendments as documents of their own (laws.db, ``lawdb.CURRENT`` only): the twelve
刑法修正案 (刑法 itself is 已被修改 and not indexed, so they are the knowledge base's criminal law), the five
宪法修正案 and four 「关于修改《…》的决定」. An amending article rewrites an article of the amended law
(「将刑法第一百二十条修改为：…」, 「宪法第十条第四款…修改为：…」) or deletes it (「删去刑法第一百九十九条」), and a later
amendment can rewrite the same article again: 刑法修正案（三） rewrote 第一百二十条第一款 in 2001, 刑法修正案（九） the whole
article in 2015, so the 2001 text is no longer the law. ``Amendments.build`` reads that from the texts, no model:

- ``amends[point]``: what each amending article changes, 「《刑法》第一百二十条」 (a decision's article: the law,
  「《网络安全法》」: its numbers are the old numbering, rule K15's ``amending_text``, so no article is named);
- ``superseded[point]``: for an article whose rewrite of an article (or of one 款/项 of it) was later rewritten
  whole, deleted, or rewritten in the same 款/项 by a later amendment (by the amending document's version date),
  the later article's point id, label and effective date.

At search time (``current_first``) a superseded article in the top k brings its successor into the pool (its
first-stage score and its own e5 cosine, as rule K20 does) and is placed right after it; its evidence says
``status`` 已被修改, ``effective_until`` (the successor's effective date) and ``amended_by`` (rules V2-V4 then date
it and keep it out of a current question's evidence), every amending article's evidence says ``amends``.

Cost: built once per process from laws.db (~0.3 s: one pass over the current articles); per search a dict lookup
per top-k hit, and one store read when a successor is missing.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from services.retriever import lawdb
from services.retriever.documents import law_document_id, point_id
from services.retriever.store import Hit

if TYPE_CHECKING:
    import numpy as np

    from contracts.evidence import EvidenceItem
    from services.retriever.rescoring import SecondStage
    from services.retriever.store import VectorStore

log = logging.getLogger("conduit.retriever.amendments")

PRC = "中华人民共和国"
AMENDED = "已被修改"
_NUM = "[一二三四五六七八九十百零〇两]+"
_TARGET = re.compile(rf"(刑法|宪法)第({_NUM})条(?:之({_NUM}))?((?:第{_NUM}[款项][、和]?)*)")
_DECISION = re.compile(r"关于修改《(?:中华人民共和国)?(.+?)》的决定")
_AMENDMENT = re.compile(r"^(?:中华人民共和国)?(.+?)修正案")


@dataclass(frozen=True)
class Successor:
    """The article that amended a superseded one: its point id, label (「《刑法修正案（九）》条目五」) and
    effective date (``YYYY-MM-DD`` or None)."""

    point: str
    label: str
    effective: str | None


@dataclass
class Amendments:
    """The links of the module docstring, keyed by point id (``documents.point_id`` of the article chunk)."""

    amends: dict[str, str] = field(default_factory=dict)
    superseded: dict[str, Successor] = field(default_factory=dict)

    @classmethod
    def build(cls, path=None) -> "Amendments":
        """Read laws.db (``path``: default the package's). Raises ``LawDbError``."""
        laws = [law for law in lawdb.list_laws(path) if amended_law(law.law_name)]
        articles = lawdb.articles_by_law(laws, path)
        out = cls()
        rewrites: dict[tuple[str, str], list[tuple[str, str, str, Successor]]] = {}
        for law in laws:
            base, short = amended_law(law.law_name), law.law_name.removeprefix(PRC)
            doc = law_document_id(law)
            for pos, art in enumerate(articles[law.law_id]):
                point = point_id(doc, pos)
                target = rewrite_target(art.text) if _AMENDMENT.match(law.law_name) else None
                if target is None:
                    out.amends[point] = f"《{base}》"
                    continue
                article, part = target
                out.amends[point] = f"《{base}》第{article.replace('-', '条之')}条" if "-" in article \
                    else f"《{base}》第{article}条"
                me = Successor(point, f"《{short}》{art.article_no}", law.effective_date)
                rewrites.setdefault((base, article), []).append((law.version_date or "", part, point, me))
        for chain in rewrites.values():
            _link(chain, out.superseded)
        return out

    def successor(self, point: str) -> Successor | None:
        """The article that amended ``point`` away (None: it is current or not an amending article)."""
        return self.superseded.get(point)


def amended_law(name: str) -> str | None:
    """The amended law's short name for an amending document's name (「刑法」 for 刑法修正案（十一）, 「网络安全法」 for
    关于修改《中华人民共和国网络安全法》的决定); None for any other law."""
    m = _DECISION.search(name) or _AMENDMENT.match(name)
    return m.group(1) if m else None


def rewrite_target(text: str) -> tuple[str, str] | None:
    """``(article key, part)`` of the amended law's article an amending article rewrites or deletes: the key
    「一百二十」 (「一百二十-一」 for 第一百二十条之一), the part 「」 for the whole article or 「第一款」; None when the text
    adds rather than rewrites (「增加一条」, 「后增加」) or names no article."""
    head = text[: text.find("修改为")] if "修改为" in text else text[:40] if text.startswith("删去") else None
    if head is None:
        return None
    m = _TARGET.search(head)
    if m is None:
        return None
    key = m.group(2) + (f"-{m.group(3)}" if m.group(3) else "")
    part = "" if "将该条修改为" in text[:200] else m.group(4).rstrip("、和")
    return key, part


def _link(chain: list[tuple[str, str, str, Successor]], out: dict[str, Successor]) -> None:
    """Mark, in one amended article's rewrites ``[(version date, part, point, successor)]``, each one that a later
    rewrite of the whole article, or of the same part, replaced."""
    chain.sort(key=lambda r: r[0])
    for i, (day, part, point, _) in enumerate(chain):
        later = next((r for r in chain[i + 1:] if r[0] > day and (r[1] == "" or r[1] == part)), None)
        if later is not None:
            out[point] = later[3]


@functools.cache
def corpus() -> Amendments | None:
    """The package corpus's ``Amendments``, built once per process; None when laws.db cannot be read (logged:
    rule K24 is an extra, the search runs without it)."""
    try:
        return Amendments.build()
    except lawdb.LawDbError as exc:
        log.warning("amendments not linked: %s", exc)
        return None


def current_first(links: Amendments | None, store: VectorStore, ranked: list[Hit], merged: dict[str, Hit], top: int,
                  stage2: SecondStage | None = None, e5_queries: np.ndarray | None = None) -> list[Hit]:
    """``ranked`` with each superseded amending article among its first ``top`` placed right after its successor:
    a successor ranked lower moves the old one down behind it; a missing one joins ``merged`` (changed in place;
    the old one's first-stage score and its own e5 cosine) and takes the old one's place. ``ranked`` itself when
    none is there; a successor not in the store changes nothing. Raises ``StoreError`` as the store does."""
    old = [h for h in ranked[:top] if links is not None and links.successor(h.id)]
    if not old:
        return ranked
    missing = list(dict.fromkeys(links.successor(h.id).point for h in old if links.successor(h.id).point not in merged))
    payloads = store.payloads(missing, None) if missing else {}
    found = [p for p in missing if p in payloads]
    seconds = stage2.cosines(found, e5_queries) if stage2 is not None and e5_queries is not None and found \
        else [None] * len(found)
    score = {links.successor(h.id).point: h.score for h in reversed(old)}
    for pid, second in zip(found, seconds):
        merged[pid] = Hit(pid, score[pid], payloads[pid], None, second)
    order = list(ranked)
    for hit in old:
        succ = merged.get(links.successor(hit.id).point)
        ids = [h.id for h in order]
        if succ is None:
            continue
        i = ids.index(hit.id)
        if succ.id in ids:
            j = ids.index(succ.id)
            if j > i:  # after the pop the successor sits at j - 1: the old one goes right behind it
                order.insert(j, order.pop(i))
        else:
            order.insert(i, succ)
    return order


def attach_versions(links: Amendments | None, evidence: list[EvidenceItem]) -> list[EvidenceItem]:
    """Rule K24's evidence metadata, in place: ``amends`` on every amending article; on a superseded one also
    ``status`` 已被修改 (its document stays 现行有效: ``document_status``), ``effective_until`` and ``amended_by``."""
    if links is None:
        return evidence
    for item in evidence:
        what = links.amends.get(item.chunk_id)
        if what:
            item.metadata["amends"] = what
        succ = links.successor(item.chunk_id)
        if succ is not None:
            item.metadata["document_status"] = item.metadata.get("status")
            item.metadata |= {"status": AMENDED, "amended_by": succ.label}
            if succ.effective:
                item.metadata["effective_until"] = succ.effective
    return evidence
