"""Rules K12 and K13 (docs/rules.md): the configured chat model helps ``kb_search``.

- **Rewrite** (rule K12): the question becomes a search query in the statute's terms plus up to two
  sub-queries, one per aspect; the model answers ``{"query": "...", "sub_queries": ["...", ...]}``.
- **Listwise rerank** (rule K13): the model orders the top candidates (numbered ``[1]..[n]``, each its title,
  locator and most relevant paragraphs) by how well they answer the question; it answers
  ``{"order": [3, 1, 2, ...]}``. Candidates it leaves out keep their order after the ones it names.

One non-streamed chat completion each to the endpoint the orchestrator uses (``OPENAI_BASE_URL``,
``OPENAI_API_KEY``; model ``retrieval_model_name`` or ``CONDUIT_MODEL``), no retries,
``retrieval_model_max_tokens`` tokens at most, temperature 0. Both system prompts start with ``RETRIEVAL_MARK``
(the scripted test model answers such calls apart from its script). Errors raise ``StageError`` with an
outcome (``rerank.StageError``); the caller (``assist.SearchAssist``) bounds the wait and fails open.

Rule K18 (docs/retrieval.md "What the model's help costs"): the calls go through the orchestrator's lean client
(``conduit.runtime.llm.openai_model.ModelClient``: an orjson body through the SDK's ``post``, the reply read raw),
as coroutines on one event loop of their own (a daemon thread, ``kb-model``), not through the SDK's typed
synchronous ``create`` in a pool worker: the search thread hands a call over and waits on its future.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from typing import Any

import openai
import orjson

from conduit.runtime.llm.model import MODEL_CONTENT_FILTERED, MODEL_TIMEOUT, PROTOCOL_CODES, ModelError
from conduit.runtime.llm.openai_model import ModelClient
from conduit.runtime.settings import LlmSettings, RetrievalSettings
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
                return orjson.loads(match.group(0))
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


def outcome_of(exc: ModelError) -> str:
    """The ``StageError`` outcome of a failed call: by HTTP status as before (5xx and 429 ``server_error``, another
    4xx ``rejected``), else ``timeout`` (the SDK's), ``malformed`` (an answer the reader could not use) or
    ``unavailable`` (no connection)."""
    if exc.status is not None:
        return "server_error" if exc.status >= 500 or exc.status == 429 else "rejected"
    if exc.code == MODEL_TIMEOUT or isinstance(exc.__cause__, openai.APITimeoutError):
        return "timeout"
    return "malformed" if exc.code in PROTOCOL_CODES or exc.code == MODEL_CONTENT_FILTERED else "unavailable"


async def _ignore(_: str) -> None:
    """The answer arrives whole (no stream): nothing to do per piece."""


class ModelHelp:
    """The rewrite and rerank calls (rule K18: coroutines of one ``ModelClient`` on this object's own event loop;
    thread-safe: ``rewrite`` and ``rerank`` only hand a call to that loop and return its future).

    Args:
        retrieval: ``retrieval_model_name``, ``retrieval_model_max_tokens`` (``settings.retrieval``).
        llm: ``openai_base_url``, ``openai_api_key``, ``model``, ``model_connect_timeout_s``,
            ``model_read_timeout_s`` (``settings.llm``).
    """

    def __init__(self, retrieval: RetrievalSettings, llm: LlmSettings) -> None:
        self.model = retrieval.retrieval_model_name or llm.model
        self.max_tokens = retrieval.retrieval_model_max_tokens
        self.client = ModelClient(llm, streaming=False, temperature=0.0, max_retries=0)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kb-model", daemon=True)
        self._thread.start()

    async def ask(self, system: str, user: str, timeout_s: float) -> str:
        """The content of one non-streamed chat completion, within ``timeout_s`` seconds. Raises ``StageError``
        (``timeout``, ``unavailable``, ``server_error``, ``rejected``, ``malformed``: no usable content)."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        try:
            async with asyncio.timeout(timeout_s):
                reply = await self.client.stream(messages, None, _ignore, max_tokens=self.max_tokens, model=self.model,
                                                 timeout_s=timeout_s)
        except TimeoutError as exc:
            raise StageError("timeout", f"no answer within {timeout_s:g} s") from exc
        except ModelError as exc:
            raise StageError(outcome_of(exc), f"{exc.code}: {exc}"[:300]) from exc
        if not reply.content:
            raise StageError("malformed", "empty answer")
        return reply.content

    def _submit(self, call: Coroutine) -> Future:
        return asyncio.run_coroutine_threadsafe(call, self._loop)

    async def _rewrite(self, question: str, timeout_s: float) -> Rewrite:
        return parse_rewrite(await self.ask(REWRITE_INSTRUCTION, question, timeout_s))

    async def _rerank(self, question: str, candidates: Sequence[str], timeout_s: float) -> list[int]:
        return parse_order(await self.ask(RERANK_INSTRUCTION, rerank_prompt(question, candidates), timeout_s),
                           len(candidates))

    def rewrite(self, question: str, timeout_s: float) -> Future:
        """Rule K12: send the rewrite of ``question``; the future gives a ``Rewrite`` or raises ``StageError``."""
        return self._submit(self._rewrite(question, timeout_s))

    def rerank(self, question: str, candidates: Sequence[str], timeout_s: float) -> Future:
        """Rule K13: send the rerank; the future gives the 0-based positions of ``candidates`` in the model's order
        (all of them) or raises ``StageError``."""
        return self._submit(self._rerank(question, candidates, timeout_s))

    def close(self) -> None:
        """Close the connection pool and stop the loop (waits at most 2 s for the pool)."""
        if self._loop.is_closed():
            return
        try:
            self._submit(self.client.client.close()).result(timeout=2.0)
        except Exception:  # noqa: BLE001 - closing must not fail a shutdown
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=2.0)
        if not self._thread.is_alive():
            self._loop.close()
