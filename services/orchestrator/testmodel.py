"""In-process ``Model`` implementations for tests: no HTTP server, no network port.

Like pydantic-ai's ``FunctionModel`` and ``TestModel``:

- ``FunctionModel(fn)``: each call's reply is ``fn(messages, tools)``.
- ``TestModel(*turns, default=...)``: scripted turns, one per call, then ``default``.

A ``Reply`` is text, tool calls (name plus arguments as a dict), or an error (the
call raises ``ModelError``). End-to-end tests of the real ``openai`` path keep the
scripted OpenAI-compatible HTTP server (``testkit.scripted_model``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contracts.stream import Usage
from conduit.runtime.llm.model import Messages, ModelError, ModelResponse, OnDelta, ShouldStop, ToolCallRequest, ToolSchemas


@dataclass
class Reply:
    """One scripted model turn.

    ``tool_calls``: ``{"name": ..., "arguments": {...}}`` dicts (arguments may also be a raw
    JSON string, to test malformed ones). ``chunks``: content pieces streamed. ``error``:
    raise ``ModelError`` with this message (after streaming ``content`` when ``streamed``).
    ``tokens``: total tokens reported as usage. ``thinking``: reasoning streamed before the content.
    ``error_code``: the ``ModelError.code`` of ``error`` (rules A17-A19).
    """

    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    chunks: int = 1
    error: str | None = None
    streamed: bool = False
    tokens: int = 10
    thinking: str = ""
    error_code: str = "model_unavailable"


ReplyFn = Callable[[Messages, ToolSchemas], Reply]


class FunctionModel:
    """A model whose reply to each call is ``fn(messages, tools)``; ``calls`` records
    ``(messages, tools)`` of every call in order."""

    def __init__(self, fn: ReplyFn) -> None:
        self.fn = fn
        self.calls: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = []
        self.max_tokens_seen: list[int | None] = []
        self.models_seen: list[str | None] = []
        self.timeouts_seen: list[float | None] = []

    async def stream(self, messages: Messages, tools: ToolSchemas, on_delta: OnDelta,
                     should_stop: ShouldStop | None = None, max_tokens: int | None = None,
                     on_thinking: OnDelta | None = None, model: str | None = None,
                     timeout_s: float | None = None) -> ModelResponse:
        """Stream the reply ``fn`` gives (see ``conduit.runtime.llm.model.Model``); ``max_tokens``
        is recorded in ``max_tokens_seen``, ``model`` in ``models_seen``, ``timeout_s`` in ``timeouts_seen``."""
        self.calls.append(([dict(m) for m in messages], tools))
        self.max_tokens_seen.append(max_tokens)
        self.models_seen.append(model)
        self.timeouts_seen.append(timeout_s)
        reply = self.fn(messages, tools)
        resp = ModelResponse(usage=Usage(prompt_tokens=reply.tokens // 2, completion_tokens=reply.tokens - reply.tokens // 2,
                                         total_tokens=reply.tokens), first_token_s=0.0)
        if reply.error and not reply.streamed:
            raise ModelError(reply.error, streamed=False, code=reply.error_code)
        if reply.thinking and on_thinking is not None:
            await on_thinking(reply.thinking)
        for piece in _pieces(reply.content, reply.chunks):
            resp.content += piece
            await on_delta(piece)
            if should_stop is not None and await should_stop():
                return resp
        if reply.error:
            raise ModelError(reply.error, streamed=bool(resp.content), code=reply.error_code)
        resp.tool_calls = [
            ToolCallRequest(id=f"call_{len(self.calls)}_{i}", name=c["name"],
                            arguments=c["arguments"] if isinstance(c.get("arguments"), str)
                            else json.dumps(c.get("arguments", {}), ensure_ascii=False))
            for i, c in enumerate(reply.tool_calls)]
        return resp


class TestModel(FunctionModel):
    """Scripted turns: the n-th call gets ``turns[n]``, later calls get ``default``."""

    __test__ = False  # not a pytest test class

    def __init__(self, *turns: Reply, default: Reply | ReplyFn | None = None) -> None:
        self.turns = list(turns)
        self.default = default if default is not None else Reply(content="OK.")
        super().__init__(self._next)

    def _next(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Reply:
        if self.turns:
            return self.turns.pop(0)
        return self.default(messages, tools) if callable(self.default) else self.default


def _pieces(text: str, chunks: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, chunks)))
    return [text[i:i + size] for i in range(0, len(text), size)]
