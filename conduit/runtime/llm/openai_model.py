"""The ``Model`` over any OpenAI-compatible endpoint: the lean stream reader (rules A12, A17, A18).

One call both decides and writes (rule A1, docs/architecture.md): it yields content deltas
while the model writes and returns the tool calls it asked for.

The ``openai`` package does what it does well: configuration, auth, base URL, the request and the
mapping of HTTP errors to its error classes (``client.post``, the SDK's documented escape hatch,
with the body already serialised by orjson: the typed ``create`` walks every message and tool
schema through its TypedDict transform, ~0.9 ms per call). The response is read raw: its body's
lines are split and each ``data:`` line parsed with orjson (``reader.read``, ``sse.SseDecoder``), and
the pure ``assembler.Assembler`` turns the chunks into text, reasoning, tool calls, usage and the finish
reason, as every provider family streams them (rule A17). No SDK chunk model is built: that was
most of the reader's CPU per chunk (docs/benchmarks.md, "The lean model stream reader"). A reply
that is one JSON body (a server that does not stream) goes through the same assembler.

Retries (rule A12): only while nothing has streamed (no text, reasoning or tool-call piece), at
most ``model_max_retries``, exponential backoff with full jitter (tenacity); a ``Retry-After``
(or ``retry-after-ms``) is waited for exactly, unless it ends past the call's limit (``timeout_s``,
rules E1, E2): then the call fails at once (``model_rate_limited``). Errors mean what they say
(rule A18, ``providererrors``): configuration errors (401, 403, 404, quota, no tool support) are
never retried. The read timeout is the longest wait between two chunks (``model_read_timeout_s``).
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import orjson
from openai import AsyncOpenAI
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_random_exponential

from conduit.runtime.settings import LlmSettings
from conduit.runtime.llm import providererrors
from conduit.runtime.llm.assembler import StreamError
from conduit.runtime.llm.model import (
    MODEL_UNAVAILABLE,
    Messages,
    ModelError,
    ModelResponse,
    OnDelta,
    ShouldStop,
    ToolCallRequest,
    ToolSchemas,
)
from conduit.runtime.llm.reader import Reading, read

__all__ = ["ModelClient", "ModelError", "ModelResponse", "ToolCallRequest"]

try:  # the openai SDK's own HTTP stack (httpx2) raises its own transport errors mid-stream
    import httpx2

    TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (httpx.HTTPError, httpx2.HTTPError)
except ImportError:  # pragma: no cover - an SDK on plain httpx
    TRANSPORT_ERRORS = (httpx.HTTPError,)

RETRY_AFTER_MAX_S = 60.0
"""Longest ``Retry-After`` waited for when the call has no limit of its own (seconds)."""


class _Call(Reading):
    """A ``reader.Reading`` with the call's limit: ``deadline`` (``perf_counter`` seconds, None: none)."""

    def __init__(self, timeout_s: float | None) -> None:
        super().__init__()
        self.deadline = self.started + timeout_s if timeout_s else None

    def left_s(self) -> float:
        """Seconds until the call's limit (``RETRY_AFTER_MAX_S`` without one)."""
        return (self.deadline - time.perf_counter()) if self.deadline is not None else RETRY_AFTER_MAX_S


def _status_error(exc: openai.APIStatusError) -> ModelError:
    body = exc.body if isinstance(exc.body, dict) else {}
    code = providererrors.classify(exc.status_code, str(body.get("code") or body.get("type") or ""),
                                   f"{exc.message} {body.get('message') or ''}")
    message = providererrors.describe(code, exc.status_code, str(body.get("message") or exc.message))
    wait = providererrors.retry_after_s(exc.response.headers)
    if wait is not None and code in providererrors.RETRYABLE:
        message = f"{message} (Retry-After {wait:g} s)"[:300]
    return ModelError(message, streamed=False, code=code, status=exc.status_code)


def as_model_error(exc: BaseException, streamed: bool) -> ModelError:
    """Rule A18: ``exc`` (an SDK status or connection error, a transport error, a stream's error
    object, or a ``ModelError``) as a ``ModelError`` with its code; ``streamed``: text went out."""
    if isinstance(exc, ModelError):
        err = exc
    elif isinstance(exc, openai.APIStatusError):
        err = _status_error(exc)
    elif isinstance(exc, StreamError):
        code = providererrors.classify(exc.status, exc.code, exc.message)
        err = ModelError(providererrors.describe(code, exc.status, f"in the stream: {exc.message}"), False, code, exc.status)
    else:
        err = ModelError(f"{type(exc).__name__}: {exc}"[:300], streamed=False, code=MODEL_UNAVAILABLE)
    err.streamed = err.streamed or streamed
    return err


class ModelClient:
    """The lean streaming client (implements ``conduit.runtime.llm.model.Model``; see the module doc).

    Args:
        llm: endpoint (``openai_base_url``), key, model name, timeouts (seconds), retries.
        http_client: an ``httpx.AsyncClient`` for the SDK to send with (tests and benchmarks; default: its own).
        streaming: ask for a stream (False: the endpoint is configured ``streaming: false``, or a short
            helper call such as the retriever's rules K12, K13; one JSON reply is asked for and read by the
            same reader; its text arrives at once).
        temperature, max_retries: instead of ``model_temperature`` and ``model_max_retries`` (None: those).
    """

    def __init__(self, llm: LlmSettings, http_client: Any = None, streaming: bool = True, *,
                 temperature: float | None = None, max_retries: int | None = None) -> None:
        self.llm = llm
        self.streaming = streaming
        self.temperature = llm.model_temperature if temperature is None else temperature
        self.max_retries = llm.model_max_retries if max_retries is None else max_retries
        self.client = AsyncOpenAI(
            base_url=llm.openai_base_url,
            api_key=llm.openai_api_key or "not-needed",
            max_retries=0,
            timeout=httpx.Timeout(llm.model_read_timeout_s, connect=llm.model_connect_timeout_s),
            http_client=http_client,
        )

    def body(self, messages: Messages, tools: ToolSchemas, max_tokens: int | None, model: str | None) -> bytes:
        """The request body (JSON bytes): streamed with usage asked for (unless ``streaming`` is off),
        tools offered with ``auto`` choice."""
        body: dict[str, Any] = {"model": model or self.llm.model, "messages": messages, "stream": self.streaming,
                                "temperature": self.temperature}
        if self.streaming:
            body["stream_options"] = {"include_usage": True}
        if max_tokens:
            body["max_tokens"] = max_tokens
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        return orjson.dumps(body)

    async def stream(self, messages: Messages, tools: ToolSchemas, on_delta: OnDelta,
                     should_stop: ShouldStop | None = None, max_tokens: int | None = None,
                     on_thinking: OnDelta | None = None, model: str | None = None,
                     timeout_s: float | None = None) -> ModelResponse:
        """Run one streaming call; ``on_delta(text)`` is awaited for each answer piece, ``on_thinking``
        (when given) for each reasoning piece; ``should_stop()`` is polled between reads (cancel).

        Returns the assembled ``ModelResponse``. Raises ``ModelError`` with its code (rules A17, A18)
        when the endpoint fails (after the retries of rule A12 while nothing went out);
        ``asyncio.CancelledError`` is propagated.
        """
        call = _Call(timeout_s)
        body = self.body(messages, tools, max_tokens, model)
        backoff = wait_random_exponential(multiplier=0.5, max=8.0)  # full jitter (rule A12)

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            given = providererrors.retry_after_s(exc.response.headers) if isinstance(exc, openai.APIStatusError) else None
            return given if given is not None else backoff(state)

        try:
            async for attempt in AsyncRetrying(stop=stop_after_attempt(self.max_retries + 1), wait=wait,
                                               retry=retry_if_exception(lambda e: self._may_retry(e, call)), reraise=True):
                with attempt:
                    call.resp.retries = attempt.retry_state.attempt_number - 1
                    call.attempt()
                    await self._once(body, call, on_delta, should_stop, on_thinking)
        except (ModelError, StreamError, openai.OpenAIError, *TRANSPORT_ERRORS) as exc:
            err = as_model_error(exc, call.streamed)
            if err.code in providererrors.RETRYABLE and isinstance(exc, openai.APIStatusError):
                wait_s = providererrors.retry_after_s(exc.response.headers)
                if wait_s is not None and wait_s > call.left_s():  # rule A18: not waited for past the limit
                    err.args = (f"{err}; that is past the call's limit ({max(0.0, call.left_s()):.1f} s left)"[:300],)
            raise err from exc
        call.resp.total_s = time.perf_counter() - call.started
        return call.resp

    def _may_retry(self, exc: BaseException, call: _Call) -> bool:
        """Rule A12: nothing went out, the failure is transient, and a ``Retry-After`` ends within the limit."""
        if call.visible:
            return False
        if isinstance(exc, openai.APIStatusError):
            if as_model_error(exc, False).code not in providererrors.RETRYABLE:
                return False
            wait_s = providererrors.retry_after_s(exc.response.headers)
            return wait_s is None or wait_s <= call.left_s()
        if isinstance(exc, StreamError):
            return as_model_error(exc, False).code in providererrors.RETRYABLE
        return isinstance(exc, (openai.APIConnectionError, *TRANSPORT_ERRORS))

    async def _once(self, body: bytes, call: _Call, on_delta: OnDelta, should_stop: ShouldStop | None,
                    on_thinking: OnDelta | None) -> None:
        response = await self.client.post("/chat/completions", cast_to=httpx.Response, content=body, stream=True)
        try:
            await read(response.aiter_bytes(), call, on_delta, on_thinking, should_stop)
        finally:
            await response.aclose()
