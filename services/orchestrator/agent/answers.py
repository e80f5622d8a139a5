"""What the user reads at the end: uncited sentences marked, the answer's confidence, and the
wrap-up of a task that had to stop.

Rules (docs/agent-rules.md):
- O1: every sentence of the answer that makes a claim (at least ``CLAIM_MIN_CHARS`` word
  characters) and cites no evidence (no ``[n]``; sandbox computations count as backed) is
  marked ``[低置信度]`` or ``[low confidence]`` at its end, in the answer's language.
- O2: ``confidence`` = backed claims / claims (0..1; None without claims).
- O3: secrets are redacted (``conduit.policy.redaction``).
- E8: any stop (deadline, budget, loop, failures, empty answer) ends with a wrap-up in the
  question's language: what was found (with its citations), why it stopped, what to try next;
  never an internal tool name.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from contracts.evidence import NumberedEvidence
from services.orchestrator.agent.routing import is_chinese

CLAIM_MIN_CHARS = 6
"""Word characters (letters, digits, CJK) from which a sentence counts as a claim."""
MARK_ZH, MARK_EN = "[低置信度]", "[low confidence]"
WRAP_UP_ITEMS = 5
"""Evidence items listed in a wrap-up."""

_SENTENCE = re.compile(r"[^。！？!?\n]*?(?:[。！？!?]+|(?<!\d)\.(?=\s|$)|$)")
_CITED = re.compile(r"\[\d{1,3}\]|沙箱|sandbox", re.IGNORECASE)
_WORD = re.compile(r"[\w\u4e00-\u9fff]")


def _sentences(line: str) -> list[str]:
    return [s for s in _SENTENCE.findall(line) if s]


def _is_claim(sentence: str) -> bool:
    return len(_WORD.findall(sentence)) >= CLAIM_MIN_CHARS and not sentence.lstrip().startswith(("#", "|", ">"))


def _walk(answer: str, change: Callable[[int, str], str]) -> str:
    """``answer`` with each claim sentence replaced by ``change(claim_number, sentence)`` (0-based, in
    reading order); code blocks are left alone."""
    out: list[str] = []
    fenced = False
    n = 0
    for line in answer.split("\n"):
        if line.strip().startswith("```"):
            fenced = not fenced
        if fenced or line.strip().startswith("```"):
            out.append(line)
            continue
        parts = []
        for sentence in _sentences(line):
            if _is_claim(sentence):
                sentence = change(n, sentence)
                n += 1
            parts.append(sentence)
        out.append("".join(parts))
    return "\n".join(out)


def claims(answer: str) -> list[str]:
    """The answer's claim sentences in reading order (what rule O1 counts)."""
    found: list[str] = []
    _walk(answer, lambda _n, sentence: found.append(sentence) or sentence)
    return found


def mark_claims(answer: str, numbers: set[int], mark: str) -> str:
    """``answer`` with ``mark`` at the end of the claims numbered ``numbers`` (``claims`` order)."""
    return _walk(answer, lambda n, sentence: _marked(sentence, mark) if n in numbers and mark not in sentence
                 else sentence)


def mark_uncited(answer: str, question: str) -> tuple[str, float | None]:
    """Rules O1 and O2: ``(answer with uncited claims marked, confidence or None)``.
    Code blocks are left alone."""
    mark = MARK_ZH if is_chinese(question or answer) else MARK_EN
    found = claims(answer)
    uncited = {n for n, sentence in enumerate(found) if not _CITED.search(sentence)}
    backed = len(found) - len(uncited)
    return mark_claims(answer, uncited, mark), (round(backed / len(found), 3) if found else None)


def _marked(sentence: str, mark: str) -> str:
    body = sentence.rstrip()
    stop = re.search(r"[。！？!?.]+$", body)
    cut = stop.start() if stop else len(body)
    gap = " " if mark == MARK_EN else ""
    return f"{body[:cut]}{gap}{mark}{body[cut:]}{sentence[len(body):]}"


_WHY = {
    "deadline": ("回答时间已到", "the time limit for this question was reached"),
    "max_tokens": ("本次回答的预算已用完", "the budget for this answer was used up"),
    "loop_detected": ("查找资料时反复重复、没有新进展", "the research kept repeating itself without progress"),
    "failed_steps": ("查找资料连续失败", "looking up sources failed several times in a row"),
    "empty_answer": ("没能写出完整的回答", "no complete answer could be written"),
    "max_rounds": ("步骤数已达上限", "the step limit was reached"),
    "max_tool_calls": ("查找次数已达上限", "the lookup limit was reached"),
}


def wrap_up(question: str, reason: str, evidence: list[NumberedEvidence]) -> str:
    """Rule E8: the wrap-up text for a task stopped for ``reason``, in the question's language."""
    zh = is_chinese(question)
    why = _WHY.get(reason, ("处理中断", "the work was interrupted"))[0 if zh else 1]
    items = [e for e in evidence if e.kind != "summary"][:WRAP_UP_ITEMS] or evidence[:WRAP_UP_ITEMS]
    found = [f"- [{e.index}] {e.title}{' ' + e.locator if e.locator else ''}：{_snippet(e.text)}" for e in items]
    if zh:
        head = f"由于{why}，我在完成研究之前停了下来。"
        body = "目前找到的资料：\n" + "\n".join(found) if found else "目前还没有找到可以引用的资料。"
        tail = "建议：把问题拆小、换一种说法，或写明具体的法规名称后再问一次。"
    else:
        head = f"I stopped before finishing the research because {why}."
        body = "What I found so far:\n" + "\n".join(found) if found else "I have not found any source to cite yet."
        tail = "Next: try a narrower question, other words, or name the law or document you mean."
    return f"{head}\n\n{body}\n\n{tail}"


def _snippet(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "…"
