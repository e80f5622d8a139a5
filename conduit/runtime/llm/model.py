"""The ``Model`` protocol the agent streams through, and what one call returns.

One call both decides and writes (rule A1, docs/architecture.md): it streams content deltas while the
model writes and returns the tool calls it asked for. Implementations:
``conduit.runtime.llm.openai_model.ModelClient`` (any OpenAI-compatible endpoint,
over HTTP) and the in-process ``services.orchestrator.testmodel.TestModel`` /
``FunctionModel`` (scripted turns or a function of the messages; no server).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from contracts.stream import Usage


Messages = list[dict[str, Any]]
"""Chat history in OpenAI chat format."""
ToolSchemas = list[dict[str, Any]] | None
"""OpenAI tool schemas offered on a call (None: no tools)."""
OnDelta = Callable[[str], Awaitable[None]]
"""Awaited with each content piece as the model writes."""
ShouldStop = Callable[[], Awaitable[bool]]
"""Polled between pieces: True stops the call (cancel)."""


@dataclass
class ToolCallRequest:
    """A tool call as the model produced it: ``arguments`` is the raw JSON string."""

    id: str
    name: str
    arguments: str


@dataclass
class ModelResponse:
    """The outcome of one model call: text, tool calls, usage (tokens), timings (seconds) and the
    stream's ``finish_reason`` (``stop``, ``tool_calls``, ``length``, ...; None when not given);
    ``response_model``: the model the provider says answered (its chunks' ``model``; None when not given)."""

    content: str = ""
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    first_token_s: float | None = None
    total_s: float = 0.0
    retries: int = 0
    finish_reason: str | None = None
    response_model: str | None = None


MODEL_UNAVAILABLE = "model_unavailable"
"""Connection refused or reset, 5xx, a provider's own error chunk: transient (rule A12)."""
MODEL_RATE_LIMITED = "model_rate_limited"
"""429 (or 503 with ``Retry-After``) still refused after the retries, or asking to wait past the deadline."""
MODEL_TIMEOUT = "model_timeout"
"""The call exceeded its limit (rules E1, E2)."""
MODEL_BAD_REQUEST = "model_bad_request"
"""Another 4xx: the endpoint refused the request as sent (never retried)."""
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
"""400 saying the prompt does not fit the model's context (each family's wording, rule A18)."""
MODEL_CONTENT_FILTERED = "model_content_filtered"
"""The provider stopped the answer with ``finish_reason`` ``content_filter`` / ``sensitive``."""
CONFIGURATION_CODES = frozenset({"model_auth_failed", "model_not_found", "model_quota_exceeded", "model_tools_unsupported"})
"""Rule A18: the endpoint's configuration is wrong (401/403 key, 404 model or base URL, 402/quota,
a model served without tool calling): never retried, shown on the trace and to operators."""
PROTOCOL_CODES = frozenset({"model_protocol_error", "model_stream_truncated", "model_output_truncated", "unknown_tool_name"})
"""Rules A17, A19: the provider and Conduit disagree about the stream (a chunk that is not JSON, a
stream ending before its end, arguments cut by the token limit, a tool name no catalog knows)."""


def failure_kind(code: str) -> str:
    """``configuration``, ``protocol``, ``timeout`` or ``provider`` for a ``ModelError.code``."""
    if code in CONFIGURATION_CODES:
        return "configuration"
    if code in PROTOCOL_CODES:
        return "protocol"
    return "timeout" if code == MODEL_TIMEOUT else "provider"


class ModelError(Exception):
    """The model endpoint failed. ``streamed`` tells whether text had already gone out; ``code`` is the
    machine-readable failure (``MODEL_UNAVAILABLE`` and the other codes above, rules A17-A19);
    ``status`` the HTTP status when there was one."""

    def __init__(self, message: str, streamed: bool, code: str = MODEL_UNAVAILABLE, status: int | None = None) -> None:
        super().__init__(message)
        self.streamed = streamed
        self.code = code
        self.status = status

    @property
    def kind(self) -> str:
        """``failure_kind(self.code)``."""
        return failure_kind(self.code)


class Model(Protocol):
    """A streaming chat model with tool calling."""

    async def stream(self, messages: Messages, tools: ToolSchemas, on_delta: OnDelta,
                     should_stop: ShouldStop | None = None, max_tokens: int | None = None,
                     on_thinking: OnDelta | None = None, model: str | None = None,
                     timeout_s: float | None = None) -> ModelResponse:
        """Run one call over ``messages`` (OpenAI chat format) offering ``tools`` (OpenAI tool
        schemas, None = no tools); await ``on_delta(text)`` per content piece and poll
        ``should_stop()`` between pieces (cancel); ``max_tokens`` caps the completion (None: the
        endpoint's default); ``on_thinking(text)`` is awaited per reasoning piece when given;
        ``model`` names the chat model (the tenant's, ``conduit.runtime.tenants``; None: the default);
        ``timeout_s`` is the call's limit in seconds (rules E1, E2: no ``Retry-After`` is waited for past it).
        Raises ``ModelError`` (with its ``code``) when the model fails."""
        ...


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """Parse a tool call's JSON arguments; None when they are not a JSON object."""
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def reply_object(text: str | None) -> dict[str, Any] | None:
    """The JSON object in a model's free-text ``text`` (from its first ``{`` to its last ``}``, so prose
    or a code fence around it is ignored); None when there is none or it is not a JSON object."""
    found = _OBJECT.search(text or "")
    return parse_arguments(found.group(0)) if found else None
