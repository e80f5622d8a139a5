"""The retrieval-only answerer: cited passages instead of a model-written answer.

Used when no model endpoint is configured (the embedded default) and when the
model endpoint fails or its circuit is open. No model is called: the answer is
the best evidence quoted with its ``[n]`` numbers, under a first line saying
why there is no model answer and how to configure one.

Rule O4 (docs/agent-rules.md): a question that asks to run code or to search the web gets one more
line, in the question's language, saying that this needs a language model (``model_line``); a
question that is only such a request (``only_a_request``) gets that line alone, without passages.

Rules V2, V3: a quoted law passage states its status and effective date on the day asked, and its time
note (the text did not apply throughout the time the question asks about) follows it.
"""

from __future__ import annotations

import re

from contracts.evidence import NumberedEvidence
from services.orchestrator.agent import versions
from services.orchestrator.agent.dates import Asked
from services.orchestrator.agent.routing import is_chinese

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


# Rule O4: what a question asks for that only a model can do (simple keyword rules, see docs/agent-rules.md)
_CODE = re.compile(
    r"python|(?:使用|利用|(?<![信费适作应])用|写|编写|运行|跑|执行|通过|借助)(?:一下|一段|段|个)?(?:python\s*)?(?:代码|脚本)"
    r"|(?:使用|利用|(?<![信费适作应])用|写|编写)(?:一下|一段|段|个)?程序"
    r"|(?<!信用)(?:代码|脚本)(?:来|去)?(?:计算|算|运行|跑|执行|统计|画)"
    r"|\b(?:with|using|in|via|write|run|execute)\s+(?:a\s+|some\s+)?(?:python\s+)?(?:code|script|program)\b"
    r"|\b(?:code|script|program)\s+(?:to|that)\s+(?:compute|calculate|count|plot)", re.IGNORECASE)
"""A code request: a code word inside a phrase about writing or running it (代码 alone is also 统一社会信用代码,
程序 a procedure (执行程序, 法定程序), "code" the civil code)."""
_COMPUTE = re.compile(r"计算|算一下|算算|算出|帮我算|\b(?:compute|calculate|evaluate|work\s+out)\b", re.IGNORECASE)
_EXPRESSION = re.compile(r"\d\s*(?:\*\*|[+*×÷^])\s*\d")
"""Arithmetic between digits; ``-`` and ``/`` are left out (dates: 2024-01-01, 2024/1/1)."""
_WEB = re.compile(
    r"联网|上网|网上(?:搜|查|找)|搜索网页|网页搜索|百度一下|谷歌"
    r"|\b(?:search|browse)\s+(?:the\s+)?(?:web|internet|online)\b|\bweb\s+search\b|\bgoogle\b"
    r"|\blook\s+(?:it\s+|this\s+)?up\s+online\b", re.IGNORECASE)
_FILLER = re.compile(
    r"[\d\s.,+\-*/×÷^%=()（）。，？?！!：:、`'\"]+|请|帮我|帮忙|给我|一下|用|来|的|结果|是多少|等于多少|等于几|多少|等于|吗|呢|吧|告诉我|输出|打印"
    r"|\b(?:please|can|could|you|me|for|the|an?|of|what|is|with|using|and|tell|result|value|print|it|this|in|by|to|do)\b",
    re.IGNORECASE)


def model_needs(question: str) -> tuple[str, ...]:
    """What ``question`` asks for that needs a model (rule O4): ``"code"`` when it asks to run code (a
    code phrase such as 用代码 / with code / python, or a compute word with an expression such as
    1234*5678), ``"web"`` when it asks to search the web (联网, 上网, search the web…); () for neither."""
    code = bool(_CODE.search(question)) or bool(_COMPUTE.search(question) and _EXPRESSION.search(question))
    return tuple(need for need, asked in (("code", code), ("web", bool(_WEB.search(question)))) if asked)


def only_a_request(question: str) -> bool:
    """True when nothing is left of ``question`` once its code and web phrases, compute words,
    numbers, operators and filler words (请, 一下, 是多少, please, what is…) are removed: fewer than 2
    CJK characters and no word of 3+ letters. Such a question is not a knowledge-base question."""
    rest = _FILLER.sub(" ", _COMPUTE.sub(" ", _WEB.sub(" ", _CODE.sub(" ", question))))
    return len(re.findall(r"[\u4e00-\u9fff]", rest)) < 2 and not re.search(r"[A-Za-z]{3,}", rest)


def only_a_model_request(question: str) -> bool:
    """True when ``question`` asks only for what needs a model (rule O4): it is answered by
    ``model_line`` alone, with nothing to search for."""
    return bool(model_needs(question)) and only_a_request(question)


def model_line(question: str, needs: tuple[str, ...], model_configured: bool) -> str:
    """The one line of rule O4, in the question's language: what cannot be done without a model and,
    when none is configured, the settings that configure one (README: OPENAI_BASE_URL, CONDUIT_MODEL)."""
    zh = is_chinese(question)
    what = ("或" if zh else " or ").join(
        ({"code": "运行代码", "web": "联网搜索"} if zh else {"code": "run code", "web": "search the web"})[n] for n in needs)
    if model_configured:  # the endpoint failed or its circuit is open
        return (f"语言模型暂时不可用，现在不能{what}，请稍后再问。" if zh else
                f"The language model is unavailable right now, so I cannot {what}; please ask again later.")
    return (f"仅检索模式不能{what}：请设置 OPENAI_BASE_URL 和 CONDUIT_MODEL 配置语言模型。" if zh else
            f"Retrieval-only mode cannot {what}: set OPENAI_BASE_URL and CONDUIT_MODEL to configure a language model.")


def compose(question: str, evidence: list[NumberedEvidence], model_configured: bool, when: Asked | None = None) -> str:
    """Compose the retrieval-only answer from pool evidence, in pool order (the
    retriever's hybrid ranking: the dense score alone ranks worse, see docs/retrieval.md).

    Returns text whose first line says why no model answered, then (rule O4) a line saying that
    running code or searching the web needs a model when the question asks for either, followed by
    up to ``MAX_PASSAGES`` quoted passages each ending with its ``[n]`` citation. A question that is
    only such a request gets the rule O4 line alone (the passages a search found for 「用代码计算
    1234*5678」 answer nothing). With ``when`` (the task's day and the question's period) a law passage
    is dated (rules V2, V3): 「《…》第十一条（现行有效；2026-01-01 起施行）：… [1]」, its time note on the next line.
    """
    asked = model_needs(question)
    if only_a_model_request(question):
        return model_line(question, asked, model_configured)
    head = MODEL_FAILED_LINE if model_configured else NO_MODEL_LINE
    if asked:
        head = f"{head}\n\n{model_line(question, asked, model_configured)}"
    if not evidence:
        return f"{head}\n\n{NOTHING_FOUND}"
    ranked = sorted(evidence, key=lambda e: e.index)[:MAX_PASSAGES]  # pool order = the retriever's fused ranking
    parts = [head, ""]
    for e in ranked:
        dated = versions.header(e.metadata, when.today if when else None)
        where = f"{e.title}{e.locator or ''}" + (f"（{dated}）" if dated else "")
        parts.append(f"{where}：{best_excerpt(e.text, question)} [{e.index}]")
        note = versions.note(e.metadata, when) if when else None
        parts += [note, ""] if note else [""]
    return "\n".join(parts).rstrip()
