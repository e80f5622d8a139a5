"""Rules K12 and K13 (docs/rules.md): the configured chat model helps ``kb_search``.

- **Rewrite** (rule K12): the question becomes a search query in the statute's terms plus up to two
  sub-queries, one per aspect; the model answers ``{"query": "...", "sub_queries": ["...", ...]}``.
- **Listwise rerank** (rule K13): the model orders the top candidates (numbered ``[1]..[n]``, each its title,
  locator and most relevant paragraphs) by how well they answer the question; it answers
  ``{"order": [3, 1, 2, ...]}``. Candidates it leaves out keep their order after the ones it names.

One non-streamed chat completion each, through the ``openai`` client of the endpoint the orchestrator uses
(``OPENAI_BASE_URL``, ``OPENAI_API_KEY``; model ``retrieval_model_name`` or ``CONDUIT_MODEL``), no retries,
``retrieval_model_max_tokens`` tokens at most, temperature 0. Both system prompts start with ``RETRIEVAL_MARK``
(the scripted test model answers such calls apart from its script). Errors raise ``StageError`` with an
outcome (``rerank.StageError``); the caller (``assist.SearchAssist``) bounds the wait and fails open.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import httpx
import openai

from conduit.runtime.settings import Settings
from services.retriever.rerank import StageError
from services.retriever.rounds import MAX_SUB_QUERIES, Rewrite

RETRIEVAL_MARK = "【检索辅助】"
"""First words of both system prompts (``testkit.scripted_model.RETRIEVAL_MARK`` is the same text)."""
REWRITE_INSTRUCTION = (
    RETRIEVAL_MARK + "改写。把用户的问题改写成检索知识库（法律法规、税务、用户上传的文档）的查询："
    "query 用条文里的说法（法律名称、法律术语），去掉口语、客套和问句词；问题问到几个不同方面时，另给最多两个"
    " sub_queries，每个只问一个方面；只有一个方面时 sub_queries 为空列表。"
    "只回答 JSON：{\"query\": \"...\", \"sub_queries\": [\"...\"]}"
)
RERANK_INSTRUCTION = (
    RETRIEVAL_MARK + "排序。下面是一个问题和编号的候选段落。按能否直接回答这个问题，把候选编号从最相关到最不相关排列；"
    "只回答 JSON：{\"order\": [编号, ...]}"
)
QUERY_MAX_CHARS = 200
"""A rewritten query or sub-query is cut to this many characters."""


def _json(text: str) -> Any:
    """The first JSON object (or, failing that, list) in ``text`` (a model may wrap it in prose or a fence)."""
    for pattern in (r"\{.*\}", r"\[.*\]"):
        match = re.search(pattern, text or "", re.DOTALL)
        if match:
            try:
                return json.loads(match.group(0))
            except ValueError:
                continue
    raise StageError("malformed", f"no JSON in {text[:200]!r}")


def _clean(value: Any) -> str | None:
    """A query string with its white space collapsed and cut to ``QUERY_MAX_CHARS``; None for a blank or a non-string."""
    if not isinstance(value, str):
        return None
    return " ".join(value.split())[:QUERY_MAX_CHARS] or None


def parse_rewrite(text: str) -> Rewrite:
    """A ``Rewrite`` from the model's answer. Raises ``StageError("malformed")`` without a JSON object holding a
    string ``query`` or a list ``sub_queries`` (non-strings and blanks in it are dropped, the rest cut to 2)."""
    data = _json(text)
    if not isinstance(data, dict):
        raise StageError("malformed", f"not an object: {str(data)[:200]}")
    subs = data.get("sub_queries") or []
    if not isinstance(subs, list):
        raise StageError("malformed", f"sub_queries is not a list: {str(subs)[:200]}")
    query = _clean(data.get("query"))
    cleaned = [s for s in (_clean(s) for s in subs) if s][:MAX_SUB_QUERIES]
    if query is None and not cleaned:
        raise StageError("malformed", f"neither query nor sub_queries in {str(data)[:200]}")
    return Rewrite(query, cleaned)


def parse_order(text: str, n: int) -> list[int]:
    """0-based positions of ``n`` candidates in the model's order: the numbers it gives (1-based; ``{"order": [...]}``
    or a bare list; repeats dropped), then the ones it left out in their order. Raises ``StageError("malformed")``
    for no list, an empty one, or a number outside ``1..n``."""
    data = _json(text)
    order = data.get("order") if isinstance(data, dict) else data
    if not isinstance(order, list) or not order:
        raise StageError("malformed", f"no order in {str(data)[:200]}")
    named: list[int] = []
    for item in order:
        number = int(item) if isinstance(item, (int, str)) and str(item).strip().isdigit() else None
        if number is None or not 1 <= number <= n:
            raise StageError("malformed", f"{item!r} is not a candidate number 1..{n}")
        if number - 1 not in named:
            named.append(number - 1)
    return named + [i for i in range(n) if i not in named]


def rerank_prompt(question: str, candidates: Sequence[str]) -> str:
    """The user message of the rerank call: the question, then ``[k] candidate`` lines."""
    lines = [f"[{k}] {' '.join(c.split())}" for k, c in enumerate(candidates, 1)]
    return f"问题：{question}\n\n候选：\n" + "\n".join(lines)


class ModelHelp:
    """The rewrite and rerank calls (thread-safe: one pooled ``openai.OpenAI`` client).

    Args:
        settings: ``openai_base_url``, ``openai_api_key``, ``retrieval_model_name`` / ``model``,
            ``retrieval_model_max_tokens``, ``model_connect_timeout_s``.
    """

    def __init__(self, settings: Settings) -> None:
        self.model = settings.retrieval_model_name or settings.model
        self.max_tokens = settings.retrieval_model_max_tokens
        self.client = openai.OpenAI(base_url=settings.openai_base_url, api_key=settings.openai_api_key or "not-needed",
                                    max_retries=0, timeout=httpx.Timeout(30.0, connect=settings.model_connect_timeout_s))

    def ask(self, system: str, user: str, timeout_s: float) -> str:
        """The content of one non-streamed chat completion. Raises ``StageError`` (``timeout``, ``unavailable``,
        ``server_error``, ``rejected``, ``malformed``: no content)."""
        try:
            reply = self.client.chat.completions.create(
                model=self.model, messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                max_tokens=self.max_tokens, temperature=0, timeout=timeout_s)
        except openai.APITimeoutError as exc:
            raise StageError("timeout", f"{type(exc).__name__}: {exc}"[:300]) from exc
        except openai.APIConnectionError as exc:
            raise StageError("unavailable", f"{type(exc).__name__}: {exc}"[:300]) from exc
        except openai.APIStatusError as exc:
            code = exc.status_code
            raise StageError("server_error" if code >= 500 or code == 429 else "rejected", f"HTTP {code}: {exc}"[:300]) from exc
        except (openai.OpenAIError, httpx.HTTPError, ValueError) as exc:
            raise StageError("malformed", f"{type(exc).__name__}: {exc}"[:300]) from exc
        content = reply.choices[0].message.content if reply.choices else None
        if not content:
            raise StageError("malformed", "empty answer")
        return content

    def rewrite(self, question: str, timeout_s: float) -> Rewrite:
        """Rule K12: the model's rewrite of ``question``. Raises ``StageError``."""
        return parse_rewrite(self.ask(REWRITE_INSTRUCTION, question, timeout_s))

    def rerank(self, question: str, candidates: Sequence[str], timeout_s: float) -> list[int]:
        """Rule K13: 0-based positions of ``candidates`` in the model's order (all of them). Raises ``StageError``."""
        return parse_order(self.ask(RERANK_INSTRUCTION, rerank_prompt(question, candidates), timeout_s), len(candidates))

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()
