"""The ``Model`` protocol the agent streams through, and what one call returns.

One call both decides and writes (rule A1, docs/architecture.md): it streams content deltas while the
model writes and returns the tool calls it asked for. Implementations:
``services.orchestrator.openai_model.ModelClient`` (any OpenAI-compatible endpoint,
over HTTP) and the in-process ``services.orchestrator.testmodel.TestModel`` /
``FunctionModel`` (scripted turns or a function of the messages; no server).
"""

from __future__ import annotations

import json
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
    """The outcome of one model call: text, tool calls, usage (tokens) and timings (seconds)."""

    content: str = ""
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    first_token_s: float | None = None
    total_s: float = 0.0
    retries: int = 0


class ModelError(Exception):
    """The model endpoint failed. ``streamed`` tells whether text had already gone out."""

    def __init__(self, message: str, streamed: bool) -> None:
        super().__init__(message)
        self.streamed = streamed


class Model(Protocol):
    """A streaming chat model with tool calling."""

    async def stream(self, messages: Messages, tools: ToolSchemas, on_delta: OnDelta,
                     should_stop: ShouldStop | None = None, max_tokens: int | None = None,
                     on_thinking: OnDelta | None = None, model: str | None = None) -> ModelResponse:
        """Run one call over ``messages`` (OpenAI chat format) offering ``tools`` (OpenAI tool
        schemas, None = no tools); await ``on_delta(text)`` per content piece and poll
        ``should_stop()`` between pieces (cancel); ``max_tokens`` caps the completion (None: the
        endpoint's default); ``on_thinking(text)`` is awaited per reasoning piece when given;
        ``model`` names the chat model (the tenant's, ``conduit.runtime.tenants``; None: the default).
        Raises ``ModelError`` when the model fails."""
        ...


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """Parse a tool call's JSON arguments; None when they are not a JSON object."""
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
