"""The ``Model`` over any OpenAI-compatible endpoint: streaming chat completions with tool calling.

One call both decides and writes (rule A1, docs/architecture.md): it yields content deltas
while the model writes and returns the tool calls it asked for. Retries (rule A12): only while
nothing has streamed yet (at most ``max_retries``), with exponential backoff and full jitter
(tenacity), honouring ``Retry-After``. The read timeout is the longest wait between two chunks
(``model_read_timeout_s``, 180 s).

The request goes out through the SDK's documented ``client.post`` with the same
``AsyncStream[ChatCompletionChunk]`` the typed ``chat.completions.create`` returns
(same auth, headers, error mapping and stream parsing): ``create`` first walks every
message and tool schema through its TypedDict transform, ~0.9 ms per call on the
benchmark machine, and Conduit's bodies are plain JSON already (docs/benchmarks.md).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
from openai import AsyncOpenAI, AsyncStream
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from conduit.runtime.settings import Settings
from contracts.stream import Usage
from services.orchestrator.model import Messages, ModelError, ModelResponse, OnDelta, ShouldStop, ToolCallRequest, ToolSchemas

__all__ = ["ModelClient", "ModelError", "ModelResponse", "ToolCallRequest"]


def _retryable(exc: BaseException) -> bool:
    """Rule A12: 429, 5xx and connection errors are transient; 401 and 403 never are (rule E9)."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError, httpx.TransportError))


def _retry_after_s(exc: BaseException) -> float | None:
    if isinstance(exc, openai.APIStatusError):
        value = exc.response.headers.get("retry-after")
        try:
            return min(float(value), 30.0) if value else None
        except ValueError:
            return None
    return None


class ModelClient:
    """A thin streaming client over ``openai.AsyncOpenAI`` (implements ``services.orchestrator.model.Model``).

    Args:
        settings: endpoint (``openai_base_url``), key, model name, timeouts (seconds), retries.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client = AsyncOpenAI(
            base_url=settings.openai_base_url,
            api_key=settings.openai_api_key or "not-needed",
            max_retries=0,
            timeout=httpx.Timeout(settings.model_read_timeout_s, connect=settings.model_connect_timeout_s),
        )

    async def stream(self, messages: Messages, tools: ToolSchemas, on_delta: OnDelta,
                     should_stop: ShouldStop | None = None, max_tokens: int | None = None,
                     on_thinking: OnDelta | None = None, model: str | None = None) -> ModelResponse:
        """Run one streaming call; ``on_delta(text)`` is awaited for each content piece.

        Returns the assembled ``ModelResponse``. Raises ``ModelError`` when the
        endpoint fails (after retries if nothing streamed) and ``asyncio.CancelledError``
        is propagated. ``should_stop()`` is polled between chunks (cancel).
        """
        started = time.perf_counter()
        resp = ModelResponse()
        wait = wait_random_exponential(multiplier=0.5, max=8.0)  # full jitter (rule A12)

        def _wait(rs: Any) -> float:
            exc = rs.outcome.exception() if rs.outcome else None
            return _retry_after_s(exc) or wait(rs)

        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.settings.model_max_retries + 1),
                wait=_wait,
                retry=retry_if_exception(lambda e: _retryable(e) and not resp.content and not resp.tool_calls),
                reraise=True,
            ):
                with attempt:
                    resp.retries = attempt.retry_state.attempt_number - 1
                    await self._once(messages, tools, on_delta, should_stop, resp, started, max_tokens, on_thinking, model)
        except openai.OpenAIError as exc:
            raise ModelError(f"{type(exc).__name__}: {exc}"[:500], streamed=bool(resp.content)) from exc
        except httpx.HTTPError as exc:
            raise ModelError(f"{type(exc).__name__}: {exc}"[:500], streamed=bool(resp.content)) from exc
        resp.total_s = time.perf_counter() - started
        return resp

    async def _once(self, messages, tools, on_delta, should_stop, resp: ModelResponse, started: float,
                    max_tokens: int | None = None, on_thinking: OnDelta | None = None,
                    model: str | None = None) -> None:
        kwargs: dict[str, Any] = dict(
            model=model or self.settings.model,
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
            temperature=self.settings.model_temperature,
        )
        if max_tokens:
            kwargs["max_tokens"] = max_tokens
        if tools:
            kwargs["tools"] = tools
            kwargs["tool_choice"] = "auto"
        stream = await self.client.post("/chat/completions", body=kwargs, cast_to=ChatCompletion, stream=True,
                                        stream_cls=AsyncStream[ChatCompletionChunk])
        calls: dict[int, dict[str, str]] = {}
        async for chunk in _chunks(stream):
            if chunk.usage:
                resp.usage = Usage(
                    prompt_tokens=chunk.usage.prompt_tokens or 0,
                    completion_tokens=chunk.usage.completion_tokens or 0,
                    total_tokens=chunk.usage.total_tokens or 0,
                )
            for choice in chunk.choices or []:
                delta = choice.delta
                if delta is None:
                    continue
                thought = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
                if thought and on_thinking is not None and isinstance(thought, str):
                    await on_thinking(thought)
                if delta.content:
                    if resp.first_token_s is None:
                        resp.first_token_s = time.perf_counter() - started
                    resp.content += delta.content
                    await on_delta(delta.content)
                for tc in delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    if tc.id:
                        slot["id"] = tc.id
                    if tc.function and tc.function.name:
                        slot["name"] += tc.function.name
                    if tc.function and tc.function.arguments:
                        slot["arguments"] += tc.function.arguments
                    if resp.first_token_s is None:
                        resp.first_token_s = time.perf_counter() - started
            if should_stop is not None and await should_stop():
                await stream.close()
                break
        resp.tool_calls = [
            ToolCallRequest(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"] or "{}")
            for i, c in sorted(calls.items())
        ]


async def _chunks(stream: Any) -> AsyncIterator[Any]:
    async for chunk in stream:
        yield chunk
