"""Rule K23 (docs/rules.md): an article found through one of its list items quotes that item.

A long law article is indexed with one item chunk per line (``documents.article_items``: an enumerated item
「（三）…」 carries its lead-in line), and a hit on an item stands for its article (rule K5's merge by
``parent_id``). The question 「卖自己用过的旧手机要交增值税吗」 is about one item of 增值税法第二十四条's exemption
list, so its evidence should say that item, not the whole list: ``ItemMatches`` remembers, per article, which of
its chunks matched the question best (the article chunk itself or one of its item chunks, by their e5 cosines
from the second stage, rule K7), and ``quote`` builds the article's evidence text from the best item when that is
an enumerated item line (and the next best, when e5 can hardly tell them apart: ``ITEM_MARGIN``):

    {the article's lead-in line}
    ……                      (items before the matched one left out)
    （三）{the matched item}
    ……                      (items after it left out)

with ``packing.GAP`` marking what was left out (as rule K4's cut does). The whole article stays one ``kb_follow``
away (rule K17: the evidence ``chunk_id`` is still the article's point). A file's child chunk (rule K5) and a
plain paragraph of a long article are not items: their article or section is packed as before; so is every
article of a question that asks for the list itself (「…有哪些」, 「什么情形下…」: ``LIST_QUESTION``).

Only with the second stage: the first stage alone is no judge of which item a question means (measured on
tests/stack/test_retriever_pipeline.py's 「国债利息免征个人所得税吗？」 over 个人所得税法第四条: the best USE cosine is
item （十） 「其他免税所得」, not （二） 「国债…利息」, and by the RRF score the article chunk beats every item), so
without e5 cosines nothing is recorded and every article is packed whole, as before.
"""

from __future__ import annotations

import re
from services.retriever.packing import with_gaps

LIST_QUESTION = re.compile(r"哪些|哪几|有什么|有啥|都有|包括什么|包括哪|几种|几类|几项|什么情形|什么情况下|什么条件|几个条件|列举|清单|全部|所有")
"""A question that asks for the list itself (「增值税免税项目有哪些」): its articles are packed whole."""

_ITEM_LINE = re.compile(r"^\s*([（(][一二三四五六七八九十百零]+[）)])")
"""An enumerated item line, as ``documents.article_items`` splits them (its marker is group 1)."""
_SUB_ITEM = re.compile(r"^\s*\d+[.．、]")
"""A nested sub-item line (「4.饲料、化肥…」 under an item): not a lead-in."""


ITEM_MARGIN = 0.01
"""An item whose e5 cosine is within this of the best item's is quoted too (at most ``MAX_ITEMS``): on the tuning
set the best two items of an article are often 0.001-0.01 apart (「货卖到国外去还要交增值税吗？」: 增值税法第十条
（五） 0.898, （四） 0.897, the answer), a gap e5 does not resolve."""
MAX_ITEMS = 2


class ItemMatches:
    """Per article (the merged hit's id: the article's point id), the best e5 cosine of the article chunk itself
    and of each of its item chunks."""

    def __init__(self) -> None:
        self._article: dict[str, float] = {}
        self._items: dict[str, dict[int, float]] = {}

    def note(self, key: str, payload: dict, score: float | None) -> None:
        """Record a hit on ``key``'s article: ``payload`` is the chunk's own (an item chunk of a law article has
        ``parent_id`` and ``child_position`` and source ``law_db``), ``score`` its cosine (None: not compared)."""
        if score is None:
            return
        if payload.get("source") == "law_db" and payload.get("parent_id") and payload.get("child_position") is not None:
            scores = self._items.setdefault(key, {})
            k = int(payload["child_position"])
            scores[k] = max(scores.get(k, score), score)
        else:
            self._article[key] = max(self._article.get(key, score), score)

    def best_items(self, key: str) -> list[int]:
        """Child positions of the items that matched ``key``'s article better than the article chunk itself: the
        best, and the next within ``ITEM_MARGIN`` of it (at most ``MAX_ITEMS``), in article order; ``[]`` when the
        article chunk matched best (or nothing was recorded)."""
        ranked = sorted(self._items.get(key, {}).items(), key=lambda kv: (-kv[1], kv[0]))
        if not ranked or ranked[0][1] <= self._article.get(key, -2.0):
            return []
        return sorted(k for k, v in ranked[:MAX_ITEMS] if v >= ranked[0][1] - ITEM_MARGIN)

    def unscored(self, keys: list[str]) -> list[str]:
        """Those of ``keys`` whose best match is an item while the article chunk itself was never scored (it was
        not among the hits): the caller scores it (``note(key, {}, its cosine)``) so the item must beat it."""
        return [k for k in keys if self.best_items(k) and k not in self._article]


def _lead(lines: list[str], at: int) -> int | None:
    """Index of the lead-in line of the item at ``at``: the closest earlier line that is neither an item nor a
    nested sub-item; None when there is none."""
    return next((i for i in range(at - 1, -1, -1) if not (_ITEM_LINE.match(lines[i]) or _SUB_ITEM.match(lines[i]))), None)


def quote(article: str, child_positions: list[int]) -> tuple[str, list[str]] | None:
    """``(text, markers)``: the evidence text of ``article`` found through its item chunks ``child_positions``
    (indices of lines in the article's non-empty lines, as ``article_items`` numbers them): each item with its
    lead-in line, in article order, ``GAP`` for the lines left out; and the items' markers (「（三）」). Positions
    that are not enumerated items (a plain paragraph) or out of range are left out; None when none is left."""
    lines = [line.strip() for line in article.split("\n") if line.strip()]
    items = [k for k in child_positions if 0 <= k < len(lines) and _ITEM_LINE.match(lines[k])]
    if not items:
        return None
    keep = set(items) | {i for i in (_lead(lines, k) for k in items) if i is not None}
    return with_gaps(lines, keep), [_ITEM_LINE.match(lines[k]).group(1) for k in items]


def item_quotes(hits: list, matches: ItemMatches, question: str = "") -> dict[str, tuple[str, list[str]]]:
    """``{hit id: (text, markers)}`` for the ``hits`` (merged ``store.Hit``s, ids = article point ids) whose article
    matched best through an enumerated item (``quote``); the others are packed whole (rule K4), and all of them
    when the ``question`` asks for the list itself (``LIST_QUESTION``)."""
    out: dict[str, tuple[str, list[str]]] = {}
    if LIST_QUESTION.search(question):
        return out
    for hit in hits:
        best = matches.best_items(hit.id)
        article = str(hit.payload.get("parent_text") or hit.payload.get("text") or "")
        quoted = quote(article, best) if best else None
        if quoted is not None:
            out[hit.id] = quoted
    return out
