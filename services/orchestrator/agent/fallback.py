"""The retrieval-only answerer: cited passages instead of a model-written answer.

Used when no model endpoint is configured (the embedded default) and when the
model endpoint fails or its circuit is open. No model is called: the answer is
the best evidence quoted with its ``[n]`` numbers, under a first line saying
why there is no model answer and how to configure one.
"""

from __future__ import annotations

import re

from contracts.evidence import NumberedEvidence

NO_MODEL_LINE = (
    "（未配置语言模型：以下为知识库中最相关的原文。设置 OPENAI_BASE_URL、OPENAI_API_KEY 和 CONDUIT_MODEL 可启用完整的智能体回答。）\n"
    "No language model is configured, so these are the most relevant passages. "
    "Set OPENAI_BASE_URL, OPENAI_API_KEY and CONDUIT_MODEL to get full agent answers."
)
MODEL_FAILED_LINE = (
    "（语言模型暂时不可用：以下为知识库中最相关的原文。）\n"
    "The language model is unavailable right now, so these are the most relevant passages."
)
NOTHING_FOUND = "知识库中没有找到与问题相关的内容。 The knowledge base has nothing relevant to this question."

MAX_PASSAGES = 3
"""Passages quoted in a retrieval-only answer."""
MAX_QUOTE_CHARS = 600
"""Longest quote per passage (characters)."""


def _bigrams(text: str) -> set[str]:
    t = re.sub(r"\s+", "", text)
    return {t[i : i + 2] for i in range(len(t) - 1)}


def best_excerpt(text: str, question: str, limit: int = MAX_QUOTE_CHARS) -> str:
    """The part of ``text`` (at most ``limit`` chars) that overlaps the question most, by character bigrams."""
    if len(text) <= limit:
        return text.strip()
    q = _bigrams(question)
    sentences = [s for s in re.split(r"(?<=[。！？；.!?;\n])", text) if s.strip()]
    ranked = sorted(range(len(sentences)), key=lambda i: -len(_bigrams(sentences[i]) & q))
    keep: set[int] = set()
    size = 0
    for i in ranked:
        if size + len(sentences[i]) > limit and keep:
            break
        keep.add(i)
        size += len(sentences[i])
    return "".join(sentences[i] for i in sorted(keep)).strip()[:limit]


def compose(question: str, evidence: list[NumberedEvidence], model_configured: bool) -> str:
    """Compose the retrieval-only answer from pool evidence, in pool order (the
    retriever's hybrid ranking: the dense score alone ranks worse, see docs/retrieval.md).

    Returns text whose first line says why no model answered, followed by up to
    ``MAX_PASSAGES`` quoted passages each ending with its ``[n]`` citation.
    """
    head = MODEL_FAILED_LINE if model_configured else NO_MODEL_LINE
    if not evidence:
        return f"{head}\n\n{NOTHING_FOUND}"
    ranked = sorted(evidence, key=lambda e: e.index)[:MAX_PASSAGES]  # pool order = the retriever's fused ranking
    parts = [head, ""]
    for e in ranked:
        where = f"{e.title}{e.locator or ''}"
        parts.append(f"{where}：{best_excerpt(e.text, question)} [{e.index}]")
        parts.append("")
    return "\n".join(parts).rstrip()
