"""What a model provider's error means (rule A18, docs/architecture.md "The model stream reader"): pure.

``classify(status, code, message)`` gives the ``ModelError.code`` of an HTTP error (or of an
``error`` object inside a stream), from the status and each family's wording:

- 401, 403: ``model_auth_failed``; 404, or a 400 naming a missing model: ``model_not_found``;
  402 or a quota / balance message (OpenAI ``insufficient_quota``, DeepSeek "Insufficient Balance",
  DashScope ``Arrearage``, Zhipu 欠费 / 余额不足): ``model_quota_exceeded``; a model served without
  tool calling (Ollama "does not support tools", vLLM without ``--enable-auto-tool-choice``):
  ``model_tools_unsupported``. These are configuration errors: never retried (rule E9).
- a prompt that does not fit (``CONTEXT_PATTERN``): ``context_length_exceeded``; the agent folds the
  history once and calls again (``agent/modelfailures.py``).
- 429: ``model_rate_limited``; 408, 409, 5xx (529 Anthropic-style overload too): ``model_unavailable``.
  Both are retried before the first token (rule A12), waiting ``Retry-After`` when given.
- any other 4xx: ``model_bad_request`` (never retried).
"""

from __future__ import annotations

import re
import time
from email.utils import parsedate_to_datetime
from typing import Any

from conduit.runtime.llm.model import (
    CONTEXT_LENGTH_EXCEEDED,
    MODEL_BAD_REQUEST,
    MODEL_RATE_LIMITED,
    MODEL_UNAVAILABLE,
)

CONTEXT_PATTERN = re.compile(
    r"context_length_exceeded"                      # OpenAI's code (and Azure's)
    r"|maximum context length"                      # OpenAI, DeepSeek, vLLM: "This model's maximum context length is 65536 tokens"
    r"|too long to fit into the model"              # vLLM: "The prompt (total length 9000) is too long to fit into the model"
    r"|is too long and exceeds limit"               # vLLM V1: "Input prompt (9000 tokens) is too long and exceeds limit of 8192"
    r"|range of input length"                       # Qwen (DashScope): "Range of input length should be [1, 30720]"
    r"|exceeded model token limit"                  # Kimi (Moonshot): "Your request exceeded model token limit: 8192"
    r"|prompt exceeds max length|prompt\s*超长|超过模型最大长度"  # GLM (Zhipu, code 1261)
    r"|context window exceeds limit"                # MiniMax (code 2013)
    r"|exceeds? the (?:available )?context (?:size|length|window)"  # llama.cpp "exceeds the available context size", Ollama
    r"|exceed_context_size_error"                   # llama.cpp's error type
    r"|context_?window_?exceeded"                   # LiteLLM ContextWindowExceededError
    r"|prompt is too long"                          # Anthropic through a gateway: "prompt is too long: 210000 tokens > 200000 maximum"
    r"|reduce the length of the messages",
    re.IGNORECASE)
"""Each family's wording of "the prompt does not fit the model's context" (rule A18)."""
_MODEL_MISSING = re.compile(
    r"model_not_found|model not exist|model .{0,80}(?:does not exist|not found)|no such model|unknown model"
    r"|invalid model|not a valid model|模型不存在", re.IGNORECASE)
_QUOTA = re.compile(r"insufficient_quota|exceeded_current_quota|insufficient balance|arrearage|余额不足|欠费",
                    re.IGNORECASE)
_NO_TOOLS = re.compile(
    r"does not support tools|tools? (?:calling |use )?(?:is |are )?not supported|function calling is not (?:enabled|supported)"
    r"|enable-auto-tool-choice", re.IGNORECASE)

RETRYABLE = frozenset({MODEL_UNAVAILABLE, MODEL_RATE_LIMITED})
"""Codes retried before the first token (rule A12)."""
HINTS = {
    "model_auth_failed": "check OPENAI_API_KEY for OPENAI_BASE_URL",
    "model_not_found": "check CONDUIT_MODEL and OPENAI_BASE_URL (most endpoints end in /v1)",
    "model_quota_exceeded": "the account behind OPENAI_API_KEY has no quota or balance left",
    "model_tools_unsupported": "this model is served without tool calling; use one that has it "
                               "(vLLM: --enable-auto-tool-choice --tool-call-parser ...)",
}
"""What an operator does about each configuration error."""


def classify(status: int | None, code: str | None, message: str) -> str:
    """The ``ModelError.code`` of an HTTP ``status`` (None: an error without one), the provider's own
    ``code`` (e.g. ``insufficient_quota``) and its ``message``; see the module doc."""
    text = f"{code or ''} {message}"
    if status in (401, 403):
        return "model_auth_failed"
    if status == 402 or _QUOTA.search(text):
        return "model_quota_exceeded"
    if status == 429:
        return MODEL_RATE_LIMITED
    if status is None or status >= 500 or status in (408, 409):
        if CONTEXT_PATTERN.search(text):  # a stream's error object: vLLM and LiteLLM word it so
            return CONTEXT_LENGTH_EXCEEDED
        return MODEL_UNAVAILABLE
    if CONTEXT_PATTERN.search(text):
        return CONTEXT_LENGTH_EXCEEDED
    if _NO_TOOLS.search(text):
        return "model_tools_unsupported"
    if status == 404 or _MODEL_MISSING.search(text):
        return "model_not_found"
    return MODEL_BAD_REQUEST


def retry_after_s(headers: Any, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (OpenAI) or ``Retry-After`` (seconds or an HTTP date);
    None when neither is given or readable. ``now``: epoch seconds (default: the clock)."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    try:
        if millis:
            return max(0.0, float(millis) / 1000)
    except ValueError:
        pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - (time.time() if now is None else now))
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def describe(code: str, status: int | None, message: str) -> str:
    """The human message of a failure: the status, the provider's words and, for a configuration
    error, what to check (``HINTS``); at most 300 characters."""
    head = f"{status} " if status else ""
    hint = HINTS.get(code)
    text = f"{head}{message.strip()}"[:220]
    return f"{text} ({hint})"[:300] if hint else text[:300]
