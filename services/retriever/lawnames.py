"""Rule K22 (docs/rules.md): the law a question names or clearly implies.

A question that says 「劳动合同法」, 「劳动合同」, 「个税」 or 「消费者」 is about one law, and the look-alike articles of
another law that share its words (劳动法 / 劳动合同法, 个人所得税法 / 企业所得税法, 民法典 / 消费者权益保护法) are the
trap. ``LawNames.find`` reads which laws a question points to, no model, from the corpus's own law table (the
reference graph's ``names``, rule K15: every current law's id and name), in three tiers:

- ``NAMED`` (strength 1.0): the law's full name or its name without 中华人民共和国 (「劳动合同法」, 「民法典」);
- ``IMPLIED`` (``implied`` of the boost, 0.5 by default): the law's subject, read off its name by rule, not by a
  list of questions: a 「…法」 name without its 法 when that leaves at least 4 characters (「劳动合同」, 「个人所得税」,
  「道路交通安全」; shorter stems such as 劳动, 公司, 保险 name no one law) or a tax (「增值税」, 「契税」: a tax's name is
  its law's); the protected party of a 「…权益保护法 / …权益保障法 / …保护法」 (「消费者」, 「老年人」, 「未成年人」);
- ``ALIASES``: the common abbreviations people type (「个税」, 「社保」, 「消法」, 「征管法」, 「家暴」), at the implied tier.

An amending text (刑法修正案（十一）, 「关于修改《…网络安全法》的决定」) belongs to the law it amends (rule K24): naming
the law also points to its amendments, at the implied tier, or at full strength when the law itself is not in the
corpus (刑法: its twelve amendments are its text here); a 修正案's name matches typed with ASCII brackets or none.

Matches are taken longest first and may not overlap (「个人所得税法」 is one match, not also 「所得税」-anything), so
a law's name never also counts as a shorter law's. A law named twice keeps its strongest tier.

Cost: ~1,000 substring searches of the question (~0.12 ms for a 30-character one, measured here); the table is
built once per graph (~2 ms).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from services.retriever.amendments import amended_law

PRC = "中华人民共和国"
NAMED = 1.0
"""Strength of a law the question names."""
IMPLIED = 0.5
"""Strength of a law the question implies (its subject or a common abbreviation), relative to ``NAMED``."""
MIN_STEM = 4
"""Shortest subject read off a 「…法」 name (a tax's name excepted): 劳动, 公司, 保险 name no single law."""

ALIASES: dict[str, str] = {
    "个税": "个人所得税法",
    "社保": "社会保险法",
    "消法": "消费者权益保护法",
    "消保法": "消费者权益保护法",
    "征管法": "税收征收管理法",
    "家暴": "反家庭暴力法",
    "家庭暴力": "反家庭暴力法",
    "个保法": "个人信息保护法",
    "交通法": "道路交通安全法",
}
"""Abbreviations people type for a law -> the law's name without 中华人民共和国 (implied tier)."""

_PROTECTED = re.compile(r"^(.{2,6}?)(?:合法)?(?:权益保护|权益保障|保护|保障)法$")


FAMILY = "family:"
"""Key prefix of an amended law that is not in the corpus itself (「family:刑法」: its amendments)."""


def _unbracketed(short: str) -> list[str]:
    """How people type a name with full-width brackets: 「刑法修正案(十一)」, 「刑法修正案十一」."""
    if "（" not in short:
        return []
    return [short.replace("（", "(").replace("）", ")"), short.replace("（", "").replace("）", "")]


def _short(name: str) -> str:
    return name[len(PRC):] if name.startswith(PRC) and len(name) > len(PRC) else name


def implied_forms(short: str) -> list[str]:
    """The words that imply the law of ``short`` name (without 中华人民共和国), by rule (module docstring); ``[]``
    for a name that is not a plain 「…法」 (a decision, an amendment, a 条例, 民法典)."""
    if not short.endswith("法") or short.endswith("法典") or "《" in short or "（" in short:
        return []
    stem, out = short[:-1], []
    if len(stem) >= MIN_STEM or (stem.endswith("税") and len(stem) >= 2):
        out.append(stem)
    m = _PROTECTED.match(short)
    if m and m.group(1) != stem:
        out.append(m.group(1))
    return out


class LawNames:
    """Which laws a question points to (rule K22).

    Args:
        laws: ``(document id, law name)`` pairs (document id ``law:<law_id>``, as the store's payloads).
        implied: strength of the implied tier (``IMPLIED``).
    """

    def __init__(self, laws: Iterable[tuple[str, str]], implied: float = IMPLIED) -> None:
        laws = list(laws)
        forms: dict[str, tuple[str, float]] = {}
        by_short: dict[str, str] = {}
        family: dict[str, list[str]] = {}
        self._family: dict[str, list[str]] = {}
        self._implied = implied
        for doc, name in laws:
            short = _short(name)
            by_short.setdefault(short, doc)
            for form in (name, short, *_unbracketed(short)):
                if len(form) >= 2:
                    forms[form] = (doc, NAMED)
            base = amended_law(name)
            if base:  # rule K24: an amending text belongs to the law it amends
                family.setdefault(base, []).append(doc)
        for base, docs in family.items():
            key = by_short.get(base)
            if key is None:  # the amended law is not in the corpus (刑法): its name means its amendments
                key = forms.setdefault(base, (FAMILY + base, NAMED))[0]
            self._family[key] = docs
        for doc, name in laws:
            for form in implied_forms(_short(name)):
                forms.setdefault(form, (doc, implied))
        for alias, short in ALIASES.items():
            if short in by_short:
                forms.setdefault(alias, (by_short[short], implied))
        self._forms = sorted(forms.items(), key=lambda kv: -len(kv[0]))

    def find(self, question: str) -> dict[str, float]:
        """``{document id: strength}`` of the laws ``question`` names or implies (``{}``: none); longest match
        first, non-overlapping."""
        taken: list[tuple[int, int]] = []
        out: dict[str, float] = {}
        for form, (doc, strength) in self._forms:
            start = question.find(form)
            while start >= 0:
                end = start + len(form)
                if not any(start < e and s < end for s, e in taken):
                    taken.append((start, end))
                    out[doc] = max(out.get(doc, 0.0), strength)
                start = question.find(form, start + 1)
        return self._with_family(out)

    def _with_family(self, found: dict[str, float]) -> dict[str, float]:
        """``found`` plus the amending texts of each law in it (rule K24): at the law's own strength when the law
        itself is not in the corpus (刑法's amendments are its text here), else at most the implied tier."""
        out = {doc: s for doc, s in found.items() if not doc.startswith(FAMILY)}
        for key, strength in found.items():
            tier = strength if key.startswith(FAMILY) else min(strength, self._implied)
            for doc in self._family.get(key, []):
                out[doc] = max(out.get(doc, 0.0), tier)
        return out


_BY_GRAPH: "weakref.WeakKeyDictionary[Any, LawNames]" = weakref.WeakKeyDictionary()


def for_graph(graph: Any) -> LawNames | None:
    """The ``LawNames`` of a reference graph's law table (``RefGraph.names``: ``{law_id: name}``), built once per
    graph; None for no graph (no table: rule K22 off)."""
    if graph is None:
        return None
    names = _BY_GRAPH.get(graph)
    if names is None:
        names = _BY_GRAPH[graph] = LawNames([(f"law:{law_id}", name) for law_id, name in graph.names.items()], IMPLIED)
    return names


def boosts(found: Mapping[str, float], weight: float) -> dict[str, float]:
    """``found``'s strengths times the boost ``weight`` (``retrieval_named_law_boost``); ``{}`` when off."""
    return {doc: weight * s for doc, s in found.items()} if weight else {}
