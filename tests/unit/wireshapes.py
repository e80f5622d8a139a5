"""Byte streams of chat-completions answers as each provider family sends them (rule A17).

Written by hand, field for field, to the shapes these servers send (key order, nulls, ids,
where usage and reasoning go, how tool calls are cut), for the reader's wire-shape matrix
(tests/unit/test_model_wire_shapes.py). Every tool-calling stream asks for the same call,
``kb_search {"query": "增值税 征收率", "reason": "查法条"}`` (``ARGS``), so the tests compare one value.
``sse(...)`` writes chunks as a server does: ``data: <json>`` lines, a blank line after each,
optionally comments and CRLF line ends.
"""

from __future__ import annotations

import json
from typing import Any

ARGS = {"query": "增值税 征收率", "reason": "查法条"}
ARGS_TEXT = json.dumps(ARGS, ensure_ascii=False)
CUTS = (ARGS_TEXT[:9], ARGS_TEXT[9:20], ARGS_TEXT[20:])
"""The arguments as servers stream them: cut anywhere, even inside a string or a character escape."""
WEB_ARGS = {"queries": ["增值税 征收率 2026"], "reason": "核对最新口径"}
WEB_TEXT = json.dumps(WEB_ARGS, ensure_ascii=False)


def sse(*chunks: Any, done: bool = True, space: bool = True, crlf: bool = False, ascii_json: bool = False,
        before: str = "") -> bytes:
    """``chunks`` (dicts, or raw strings sent as they are) as an SSE body; ``done``: end with ``data: [DONE]``;
    ``space``: ``data: `` (else ``data:``); ``crlf``: CRLF line ends; ``before``: raw text first (comments)."""
    nl = "\r\n" if crlf else "\n"
    head = "data: " if space else "data:"
    out = [before]
    for c in chunks:
        body = c if isinstance(c, str) else json.dumps(c, ensure_ascii=ascii_json, separators=(",", ":"))
        out.append(f"{head}{body}{nl}{nl}")
    if done:
        out.append(f"{head}[DONE]{nl}{nl}")
    return "".join(out).encode()


# ----------------------------------------------------------------------------------------- OpenAI
def _oa(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-BQ3fF2", "object": "chat.completion.chunk", "created": 1745000000, "model": "gpt-4.1-2025-04-14",
            "service_tier": "default", "system_fingerprint": "fp_b38e740b47",
            "choices": [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            "usage": usage}


OA_USAGE = {"prompt_tokens": 412, "completion_tokens": 31, "total_tokens": 443,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0}}
OPENAI_TEXT = sse(_oa({"role": "assistant", "content": "", "refusal": None}),
                  *(_oa({"content": t}) for t in ("征收率", "为3%", "[1]。")),
                  _oa({}, "stop"), _oa(None, usage=OA_USAGE), ascii_json=True)
"""OpenAI: role chunk, text, ``stop``, a usage-only last chunk (``stream_options.include_usage``), ASCII-escaped JSON."""
OPENAI_PARALLEL = sse(
    _oa({"role": "assistant", "content": None, "tool_calls": [{"index": 0, "id": "call_Qm1", "type": "function",
                                                               "function": {"name": "kb_search", "arguments": ""}}],
         "refusal": None}),
    *(_oa({"tool_calls": [{"index": 0, "function": {"arguments": cut}}]}) for cut in CUTS),
    _oa({"tool_calls": [{"index": 1, "id": "call_Qm2", "type": "function",
                         "function": {"name": "web_search", "arguments": ""}}]}),
    _oa({"tool_calls": [{"index": 1, "function": {"arguments": WEB_TEXT[:15]}}]}),
    _oa({"tool_calls": [{"index": 1, "function": {"arguments": WEB_TEXT[15:]}}]}),
    _oa({}, "tool_calls"), _oa(None, usage=OA_USAGE))
"""OpenAI: two parallel calls, one after the other, arguments cut anywhere."""
INTERLEAVED = sse(
    _oa({"role": "assistant", "content": None, "tool_calls": [
        {"index": 0, "id": "call_A", "type": "function", "function": {"name": "kb_search", "arguments": ""}},
        {"index": 1, "id": "call_B", "type": "function", "function": {"name": "web_search", "arguments": ""}}]}),
    _oa({"tool_calls": [{"index": 1, "function": {"arguments": WEB_TEXT[:10]}}]}),
    _oa({"tool_calls": [{"index": 0, "function": {"arguments": CUTS[0]}}]}),
    _oa({"tool_calls": [{"index": 1, "function": {"arguments": WEB_TEXT[10:]}},
                        {"index": 0, "function": {"arguments": CUTS[1]}}]}),
    _oa({"tool_calls": [{"index": 0, "function": {"arguments": CUTS[2]}}]}),
    _oa({}, "tool_calls"))
"""Parallel calls interleaved by index (both start in one chunk; the spec allows any order)."""
OPENAI_REPEATING = sse(
    *(_oa({"tool_calls": [{"index": 0, "id": "call_R9", "type": "function",
                           "function": {"name": "kb_search", "arguments": cut}}]}) for cut in ("", *CUTS)),
    _oa({}, "tool_calls"))
"""Newer OpenAI models: the call's id, type and name in every chunk."""
LENGTH_IN_ARGUMENTS = sse(
    _oa({"tool_calls": [{"index": 0, "id": "call_L", "type": "function", "function": {"name": "kb_search", "arguments": ""}}]}),
    _oa({"tool_calls": [{"index": 0, "function": {"arguments": CUTS[0]}}]}), _oa({}, "length"))
"""The token limit hit inside the arguments: ``finish_reason: length``."""
LENGTH_IN_TEXT = sse(_oa({"content": "征收率为"}), _oa({}, "length"))


# --------------------------------------------------------------------------------------- DeepSeek
def _ds(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    chunk = {"id": "8a1e2c3f-5b7d", "object": "chat.completion.chunk", "created": 1745000000, "model": "deepseek-reasoner",
             "system_fingerprint": "fp_5417b77867_prod0425fp8",
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if usage:
        chunk["usage"] = usage
    return chunk


DS_USAGE = {"prompt_tokens": 380, "completion_tokens": 96, "total_tokens": 476, "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 70}, "prompt_cache_hit_tokens": 0, "prompt_cache_miss_tokens": 380}
DEEPSEEK_REASONER = sse(
    _ds({"role": "assistant", "content": None, "reasoning_content": ""}),
    *(_ds({"content": None, "reasoning_content": t}) for t in ("用户问", "小规模纳税人的征收率。")),
    *(_ds({"content": t, "reasoning_content": None}) for t in ("征收率为", "3%[1]。")),
    _ds({"content": "", "reasoning_content": None}, "stop", DS_USAGE),
    before=": keep-alive\n\n")
"""DeepSeek (deepseek-reasoner): keep-alive comments, ``reasoning_content`` before the answer, usage
in the chunk that finishes."""
DEEPSEEK_TOOLS = sse(
    _ds({"role": "assistant", "content": ""}),
    _ds({"tool_calls": [{"index": 0, "id": "call_0_6d1c3f1e", "type": "function",
                         "function": {"name": "kb_search", "arguments": ""}}]}),
    *(_ds({"tool_calls": [{"index": 0, "function": {"arguments": cut}}]}) for cut in CUTS),
    _ds({"content": "", "reasoning_content": None}, "tool_calls", DS_USAGE))


# -------------------------------------------------------------------------- Qwen (DashScope compatible)
def _qw(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"choices": [] if delta is None else [{"delta": delta, "finish_reason": finish, "index": 0, "logprobs": None}],
            "object": "chat.completion.chunk", "usage": usage, "created": 1745000000, "system_fingerprint": None,
            "model": "qwen-plus", "id": "chatcmpl-3f8a0c9e-8d2b-9c41-a6e3"}


QWEN_TOOLS = sse(
    _qw({"content": None, "role": "assistant", "tool_calls": [
        {"index": 0, "id": "call_8f08d2b0fc0c4d8fab7123", "type": "function",
         "function": {"name": "kb_search", "arguments": CUTS[0]}}]}),
    *(_qw({"content": None, "tool_calls": [{"index": 0, "id": "", "type": "function", "function": {"arguments": cut}}]})
      for cut in CUTS[1:]),
    _qw({}, "tool_calls"),
    _qw(None, usage={"prompt_tokens": 290, "completion_tokens": 28, "total_tokens": 318,
                     "prompt_tokens_details": {"cached_tokens": 0}}))
"""DashScope: the first arguments with the name, later pieces with ``id: ""``, a usage-only last chunk."""
QWEN_THINKING = sse(
    _qw({"content": None, "role": "assistant", "reasoning_content": "先查"}),
    _qw({"content": None, "reasoning_content": "法条。"}),
    _qw({"content": "征收率为3%[1]。", "reasoning_content": None}), _qw({}, "stop"),
    _qw(None, usage={"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18}))


# ------------------------------------------------------------------------------- Kimi (Moonshot)
def _km(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    if usage:
        choice["usage"] = usage
    return {"id": "chatcmpl-68b9e3d1", "object": "chat.completion.chunk", "created": 1745000000,
            "model": "kimi-k2-0905-preview", "choices": [choice], "system_fingerprint": "fpv0_ff52a3ef"}


KIMI_TOOLS = sse(
    _km({"role": "assistant", "content": ""}),
    _km({"tool_calls": [{"index": 0, "id": "functions.kb_search:0", "type": "function",
                         "function": {"name": "kb_search", "arguments": ""}}]}),
    *(_km({"tool_calls": [{"index": 0, "function": {"arguments": cut}}]}) for cut in CUTS),
    _km({}, "tool_calls", {"prompt_tokens": 301, "completion_tokens": 25, "total_tokens": 326, "cached_tokens": 0}))
"""Kimi (Moonshot's API): ``functions.<name>:<n>`` ids, usage inside the finishing choice."""
KIMI_FIREWORKS = sse(
    *({"id": "b2f1c0de", "object": "chat.completion.chunk", "created": 1745000000,
       "model": "accounts/fireworks/models/kimi-k2-instruct-0905",
       "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_XyZ8", "type": "function",
                                                           "function": {"name": "kb_search", "arguments": cut}}]},
                    "finish_reason": None}], "usage": None} for cut in CUTS),
    {"id": "b2f1c0de", "object": "chat.completion.chunk", "created": 1745000000,
     "model": "accounts/fireworks/models/kimi-k2-instruct-0905",
     "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
     "usage": {"prompt_tokens": 301, "total_tokens": 326, "completion_tokens": 25}})
"""Kimi hosted by Fireworks: id, type and name repeated in every chunk."""


# ------------------------------------------------------------------------------------ GLM (Zhipu)
def _glm(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta}
    if finish:
        choice["finish_reason"] = finish
    chunk: dict[str, Any] = {"id": "2025090112345678abcdef", "created": 1745000000, "model": "glm-4.6", "choices": [choice]}
    if usage:
        chunk["usage"] = usage
    return chunk


GLM_WHOLE_CALL = sse(
    _glm({"role": "assistant", "reasoning_content": "需要查"}), _glm({"role": "assistant", "reasoning_content": "法条。"}),
    _glm({"role": "assistant", "tool_calls": [{"id": "call_-8235466923720291", "index": 0, "type": "function",
                                               "function": {"name": "kb_search", "arguments": ARGS_TEXT}}]}),
    _glm({"role": "assistant", "content": ""}, "tool_calls",
         {"prompt_tokens": 402, "completion_tokens": 60, "total_tokens": 462, "prompt_tokens_details": {"cached_tokens": 0}}))
"""GLM (bigmodel.cn v4): no ``finish_reason`` key until the end, reasoning, the whole call in one chunk."""


# ---------------------------------------------------------------------------- MiniMax through NIM
def _mm(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {"id": "chatcmpl-6f1d0a2b", "object": "chat.completion.chunk", "created": 1745000000,
                             "model": "minimaxai/minimax-m2",
                             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if usage:
        chunk["usage"] = usage
    return chunk


MINIMAX_NIM = sse(
    _mm({"role": "assistant", "content": "<thi"}), _mm({"content": "nk>用户想知道"}), _mm({"content": "征收率。</th"}),
    _mm({"content": "ink>\n\n"}),
    *(_mm({"tool_calls": [{"index": 0, "id": "call_function_9kq2", "type": "function",
                           "function": {"name": "kb_search", "arguments": cut}}]}) for cut in CUTS),
    _mm({}, "tool_calls", {"prompt_tokens": 512, "completion_tokens": 44, "total_tokens": 556}))
"""MiniMax-M2 through NVIDIA NIM: reasoning inline as ``<think>…</think>`` (tags cut across chunks),
then the call with its id and name repeated in every chunk: the shape that used to give
``kb_searchkb_searchkb_search``."""
MINIMAX_ERROR = sse({"id": "", "choices": None, "created": 0, "model": "", "object": "",
                     "base_resp": {"status_code": 1004, "status_msg": "login fail: Please carry the API secret key"}},
                    done=False)
"""MiniMax's own error shape: HTTP 200 with ``base_resp``."""


# ------------------------------------------------------------------------------------------ vLLM
def _vl(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {"id": "chatcmpl-9f2c41d7", "object": "chat.completion.chunk", "created": 1745000000,
                             "model": "Qwen/Qwen2.5-7B-Instruct"}
    chunk["choices"] = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                                                  **({"stop_reason": None} if finish else {})}]
    if usage:
        chunk["usage"] = usage
    return chunk


VLLM_TOOLS = sse(
    _vl({"role": "assistant", "content": ""}),
    _vl({"tool_calls": [{"id": "chatcmpl-tool-4b1c9e", "type": "function", "index": 0, "function": {"name": "kb_search"}}]}),
    *(_vl({"tool_calls": [{"index": 0, "function": {"arguments": cut}}]}) for cut in CUTS[:2]),
    _vl({"tool_calls": [{"index": 0, "function": {"arguments": CUTS[2]}}]}, "tool_calls"),
    _vl(None, usage={"prompt_tokens": 300, "total_tokens": 330, "completion_tokens": 30}))
"""vLLM (hermes tool parser): the name without arguments first, the last piece in the finishing chunk,
a usage-only last chunk."""
VLLM_REASONING = sse(
    _vl({"role": "assistant", "content": ""}), _vl({"reasoning": "先想"}), _vl({"reasoning": "一下。"}),
    _vl({"content": "征收率为3%[1]。"}), _vl({"content": ""}, "stop"))
"""vLLM with a reasoning parser (newer releases: ``reasoning``)."""
VLLM_ERROR = sse(_vl({"role": "assistant", "content": ""}),
                 {"error": {"object": "error", "message": "This model's maximum context length is 8192 tokens. However, you "
                                                          "requested 9000 tokens", "type": "BadRequestError", "param": None,
                            "code": 400}})
"""vLLM reporting a failure inside the stream."""


# ---------------------------------------------------------------------------------------- Ollama
def _ol(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {"id": "chatcmpl-477", "object": "chat.completion.chunk", "created": 1745000000,
                             "model": "qwen3:8b", "system_fingerprint": "fp_ollama",
                             "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage:
        chunk["usage"] = usage
    return chunk


OLLAMA_TOOLS = sse(
    _ol({"role": "assistant", "content": "", "reasoning": "用户问征收率。"}),
    _ol({"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_v8pkx0yq", "index": 0, "type": "function", "function": {"name": "kb_search", "arguments": ARGS_TEXT}},
        {"id": "call_3mz1c8rd", "index": 1, "type": "function", "function": {"name": "web_search", "arguments": WEB_TEXT}}]}),
    _ol({"role": "assistant", "content": ""}, "tool_calls"),
    _ol(None, usage={"prompt_tokens": 250, "completion_tokens": 40, "total_tokens": 290}))
"""Ollama's /v1 (recent): ``reasoning``, whole parallel calls in one chunk, a usage-only last chunk."""
OLLAMA_OLD = sse(
    _ol({"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_a1", "index": 0, "type": "function", "function": {"name": "kb_search", "arguments": ARGS_TEXT}}]}),
    _ol({"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_b2", "index": 0, "type": "function", "function": {"name": "web_search", "arguments": WEB_TEXT}}]}),
    _ol({"role": "assistant", "content": ""}, "stop"))
"""Older Ollama: every call at index 0 in a chunk of its own, ``finish_reason: stop`` after tool calls."""


# ------------------------------------------------------------------------------- llama.cpp server
def _lc(delta: dict[str, Any], finish: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"choices": [{"finish_reason": finish, "index": 0, "delta": delta}], "created": 1745000000,
            "id": "chatcmpl-Zq4rT", "model": "gpt-3.5-turbo", "system_fingerprint": "b5400-4f1b8a2c",
            "object": "chat.completion.chunk", **(extra or {})}


LLAMACPP_TOOLS = sse(
    _lc({"role": "assistant", "content": None}), _lc({"reasoning_content": "查一下。"}),
    _lc({"tool_calls": [{"index": 0, "id": "9nQ2eR8TxK", "type": "function",
                         "function": {"name": "kb_search", "arguments": CUTS[0]}}]}),
    *(_lc({"tool_calls": [{"index": 0, "function": {"arguments": cut}}]}) for cut in CUTS[1:]),
    _lc({}, "tool_calls", {"usage": {"completion_tokens": 22, "prompt_tokens": 180, "total_tokens": 202},
                           "timings": {"prompt_n": 180, "prompt_ms": 95.1, "predicted_n": 22, "predicted_ms": 410.3}}),
    crlf=True)
"""llama.cpp's server (``--jinja``): ``reasoning_content``, usage and timings in the finishing chunk (CRLF here)."""


# --------------------------------------------------------------------------------------- LiteLLM
def _ll(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    full = {"content": None, "role": None, "function_call": None, "tool_calls": None, "audio": None, **delta}
    chunk: dict[str, Any] = {"id": "chatcmpl-0b3e6f", "created": 1745000000, "model": "claude-sonnet-4-5",
                             "object": "chat.completion.chunk", "system_fingerprint": None,
                             "choices": [{"finish_reason": finish, "index": 0, "delta": full, "logprobs": None}],
                             "provider_specific_fields": None}
    if usage:
        chunk["usage"] = usage
    return chunk


LITELLM_TOOLS = sse(
    _ll({"content": "我先查一下。", "role": "assistant"}),
    _ll({"tool_calls": [{"id": "toolu_01XjW", "function": {"arguments": "", "name": "kb_search"}, "type": "function",
                         "index": 0}]}),
    *(_ll({"tool_calls": [{"id": None, "function": {"arguments": cut, "name": None}, "type": "function", "index": 0}]})
      for cut in CUTS),
    _ll({}, "stop"),
    _ll({}, None, {"completion_tokens": 40, "prompt_tokens": 300, "total_tokens": 340}), space=False)
"""The LiteLLM proxy (here before Anthropic): every delta field present (nulls), text before the call,
``finish_reason: stop`` after it, usage on a last chunk with an empty delta; ``data:`` without a space."""
LITELLM_NO_INDEX = sse(
    _ll({"role": "assistant", "tool_calls": [{"id": "call_5f1", "function": {"arguments": ARGS_TEXT, "name": "kb_search"},
                                              "type": "function"}]}),
    _ll({"tool_calls": [{"id": "call_5f2", "function": {"arguments": WEB_TEXT, "name": "web_search"}, "type": "function"}]}),
    _ll({}, "tool_calls"))
"""Calls without ``index`` (LiteLLM passing Gemini's calls through): whole calls, one per chunk."""
NO_INDEX_NO_ID = sse(
    *({"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"name": "kb_search", "arguments": cut}}]}}]}
      for cut in CUTS),
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"name": "kb_search", "arguments": ARGS_TEXT}}]}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
"""Neither ``index`` nor ``id``, the name in every chunk: one call in pieces, then a second whole one."""


# -------------------------------------------------------------------------------- the odd ones out
LEGACY_FUNCTION_CALL = sse(
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None,
                                        "function_call": {"name": "kb_search", "arguments": ""}}, "finish_reason": None}]},
    *({"choices": [{"index": 0, "delta": {"function_call": {"arguments": cut}}, "finish_reason": None}]} for cut in CUTS),
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "function_call"}]})
"""A legacy server (FastChat, LocalAI) answering with ``function_call``."""
NON_STREAMED = json.dumps({
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1745000000, "model": "qwen3:8b",
    "system_fingerprint": "fp_ollama",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "", "reasoning": "要查。", "tool_calls": [
        {"id": "call_n1", "index": 0, "type": "function", "function": {"name": "kb_search", "arguments": ARGS_TEXT}}]},
        "finish_reason": "tool_calls"}],
    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}, ensure_ascii=False).encode()
"""A server that ignores ``stream: true`` and answers with one ``chat.completion`` body."""
NOT_JSON = sse(_oa({"content": "征收率"}), "<html><body>502 Bad Gateway</body></html>")
"""A proxy's error page inside the stream."""
CUT_MID_ARGUMENTS = sse(_oa({"tool_calls": [{"index": 0, "id": "call_T", "type": "function",
                                             "function": {"name": "kb_search", "arguments": ""}}]}),
                        _oa({"tool_calls": [{"index": 0, "function": {"arguments": CUTS[0]}}]}), done=False)
"""The connection closed cleanly in the middle of a call's arguments: no ``finish_reason``, no ``[DONE]``."""
CUT_MID_ANSWER = sse(_oa({"content": "征收率"}), _oa({"content": "为"}), done=False)
BROKEN_NAME = sse(_oa({"tool_calls": [{"index": 0, "id": "call_X", "type": "function",
                                       "function": {"name": "kb_search", "arguments": ""}}]}),
                  _oa({"tool_calls": [{"index": 0, "function": {"name": "_v2", "arguments": ARGS_TEXT}}]}),
                  _oa({}, "tool_calls"))
"""A name fragment that makes a name no catalog knows (``kb_search_v2``)."""
CONTENT_FILTERED = sse(_qw({"content": "根据"}), _qw({}, "content_filter"))
