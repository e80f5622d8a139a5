"""The referee of team mode (rules A32, A33, docs/agent-rules.md): when two workers' findings give
different values for the same quantity, the final answer names the disagreement and its sources instead
of carrying one of them silently.

- A32 detection, by rule (no model): a *claim* is a number with a unit (%, 元, 万元, 天, 年, 个月, 倍,
  小时...) and the Chinese term written just before it (「征收率为3%」: 征收率; 「小规模纳税人的征收率是1%」:
  the part after the last 的), with the citations of its sentence. Two terms name the same quantity when
  one ends with the other (增值税征收率, 征收率) and their units are of one kind. A quantity is disputed
  when at least two workers state it and no value is common to all of them (5天 and 5天/10天 agree:
  a tiered rule; 3% and 1% do not).
- A33 the finalizer is told the disputed quantities, each value with its citations, and told to name
  the disagreement; its rewrite may cite those numbers and state those values. Whatever answer is
  kept (rewrite or draft), a disputed quantity whose values it does not all state gets a closing note
  (「注意：…说法不一致…」) with each value and its citations, so the person always sees it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CITE = re.compile(r"\[(\d{1,3})\]")
_SENTENCE = re.compile(r"[^。；;！!？?\n]+")
_VALUE = re.compile(r"(\d+(?:\.\d+)?)\s*(%|％|‰|万元|亿元|元|天|日|年|个月|倍|小时)")
_TERM = re.compile(r"([\u4e00-\u9fff]{2,})$")
_CONNECTORS = "为是按达约计共"
_UNIT_KIND = {"%": "ratio", "％": "ratio", "‰": "ratio", "元": "money", "万元": "money", "亿元": "money",
              "天": "time", "日": "time", "年": "time", "个月": "time", "倍": "times", "小时": "time"}


@dataclass(frozen=True)
class Claim:
    """One stated value: the quantity's term, the value as written (number and unit, ％ as %), the
    kind of its unit, the worker that stated it and the citation numbers of its sentence."""

    term: str
    value: str
    unit_kind: str
    source: str
    citations: tuple[int, ...]


@dataclass(frozen=True)
class Disagreement:
    """A disputed quantity: its term (the shortest the claims used) and its claims, by value."""

    quantity: str
    claims: tuple[Claim, ...]

    def values(self) -> list[str]:
        """The distinct values stated, in order of first statement."""
        return list(dict.fromkeys(c.value for c in self.claims))


def claims(text: str, source: str) -> list[Claim]:
    """Rule A32: the values ``text`` states, each with the term before it (none: not a claim)."""
    out = []
    for sentence in _SENTENCE.findall(text):
        cites = tuple(int(n) for n in _CITE.findall(sentence))
        plain = _CITE.sub("", sentence)
        for m in _VALUE.finditer(plain):
            found = _TERM.search(plain[:m.start()].rstrip(" ：:"))
            if found is None:
                continue
            term = found.group(1).rstrip(_CONNECTORS).split("的")[-1][-8:]
            if len(term) < 2:
                continue
            unit = m.group(2).replace("％", "%")
            out.append(Claim(term, f"{m.group(1)}{unit}", _UNIT_KIND[m.group(2)], source, cites))
    return out


def _same(a: Claim, b: Claim) -> bool:
    return a.unit_kind == b.unit_kind and (a.term.endswith(b.term) or b.term.endswith(a.term))


def disagreements(findings: list[dict[str, str]]) -> list[Disagreement]:
    """Rule A32: the quantities the workers' ``findings`` (``{worker, text}``) dispute, in order of
    first statement. Findings of one worker never dispute each other (a tiered rule states several values)."""
    every = [c for i, f in enumerate(findings) for c in claims(f["text"], f"{f['worker']}#{i}")]
    out: list[Disagreement] = []
    used: set[int] = set()
    for i, first in enumerate(every):
        if i in used:
            continue
        group = [j for j, c in enumerate(every) if j not in used and _same(first, c)]
        members = [every[j] for j in group]
        by_source: dict[str, set[str]] = {}
        for c in members:
            by_source.setdefault(c.source, set()).add(c.value)
        if len(by_source) >= 2 and not set.intersection(*by_source.values()):
            used.update(group)
            out.append(Disagreement(min((c.term for c in members), key=len), tuple(members)))
    return out


def _cited(claims_: list[Claim]) -> str:
    nums = sorted({n for c in claims_ for n in c.citations})
    return "".join(f"[{n}]" for n in nums)


def brief(found: list[Disagreement]) -> str:
    """Rule A33: the finalizer's instruction naming each disputed quantity, its values and citations
    (empty without disagreements)."""
    if not found:
        return ""
    lines = ["【来源之间的分歧】以下数值在不同来源中不一致。回答中必须指出这一分歧，写出每个数值及其引用编号，"
             "不要只选其中一个。Sources disagree: name the disagreement with every value and its citations."]
    for d in found:
        parts = [f"{v}{_cited([c for c in d.claims if c.value == v])}" for v in d.values()]
        lines.append(f"- {d.quantity}：" + "；".join(parts))
    return "\n".join(lines)


def allowed_citations(found: list[Disagreement]) -> set[str]:
    """Citation numbers (as text) the finalizer may add to name the disagreements."""
    return {str(n) for d in found for c in d.claims for n in c.citations}


def named(text: str, found: list[Disagreement]) -> str:
    """Rule A33: ``text`` as it is when it states every value of every disputed quantity, else with a
    closing note naming each one it leaves out, with its values and citations."""
    missing = [d for d in found if not all(v in text.replace("％", "%") for v in d.values())]
    if not missing:
        return text
    notes = []
    for d in missing:
        parts = [f"{v}{_cited([c for c in d.claims if c.value == v])}" for v in d.values()]
        notes.append(f"注意：各来源对「{d.quantity}」的说法不一致：" + "；".join(parts) + "，请以适用的原文为准。")
    return text.rstrip() + "\n\n" + "\n".join(notes)
