"""Reading one model response body (rule A17, docs/architecture.md "The model stream reader").

``read(body, reading, on_delta, on_thinking, should_stop)`` takes the body as an async iterable of
bytes (the HTTP client's, or recorded bytes in tests) and needs nothing else: an SSE stream is
split and parsed by ``sse.SseDecoder`` (orjson), a body whose first visible byte opens a JSON value
is a whole non-streamed reply; both go through ``assembler.Assembler``. Answer text is awaited
through ``on_delta`` as it comes, reasoning through ``on_thinking`` (only when given: the tenant
has thinking on, ``steps._thinking_writer``). ``Reading`` keeps what went out across the retries
of one call (``visible``: no retry after it, rule A12) and the assembled ``ModelResponse``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable
from typing import Any

from conduit.runtime.llm.assembler import Assembler, Piece
from conduit.runtime.llm.model import ModelError, ModelResponse, OnDelta, ShouldStop
from conduit.runtime.llm.sse import DONE, SseDecoder, parse_body


class Reading:
    """One model call's progress across its attempts.

    ``started``: ``time.perf_counter()`` at the call's start; ``asm``: the current attempt's
    assembler; ``streamed``: answer text went to ``on_delta``; ``visible``: anything went out or a
    tool-call piece came (no retry after that); ``resp``: the response being assembled.
    """

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.asm = Assembler()
        self.streamed = False
        self.visible = False
        self.resp = ModelResponse()

    def attempt(self) -> None:
        """A new attempt starts: a fresh assembler (nothing went out before, or there is no retry)."""
        self.asm = Assembler()


async def read(body: AsyncIterable[bytes], reading: Reading, on_delta: OnDelta,
               on_thinking: OnDelta | None = None, should_stop: ShouldStop | None = None) -> None:
    """Read ``body`` to its end (or until ``should_stop()``, polled after each read, says so) and fill
    ``reading.resp``: content, tool calls, usage, finish reason, first-token time (seconds).

    Raises ``ModelError`` with its code (rule A17: ``model_protocol_error``, ``model_stream_truncated``,
    ``model_output_truncated``, ``model_content_filtered``) and ``assembler.StreamError`` for an
    ``error`` object in the stream (its meaning: ``openai_model.as_model_error``)."""
    decoder = SseDecoder()
    held: list[bytes] = []
    whole: bool | None = None  # a JSON body instead of a stream (decided by its first visible byte)
    stopped = False
    async for data in body:
        if whole is None:
            held.append(data)
            if not data.strip():
                continue
            whole = data.lstrip()[:1] in (b"{", b"[")
            if whole:
                continue
            data, held = b"".join(held), []
        elif whole:
            held.append(data)
            continue
        for chunk in decoder.feed(data):
            await _take(chunk, reading, on_delta, on_thinking)
        decoder.streamed = reading.streamed
        if should_stop is not None and await should_stop():
            stopped = True
            break
    if whole:
        await _deliver(reading.asm.feed_reply(parse_body(b"".join(held))), reading, on_delta, on_thinking)
    elif not stopped:
        for chunk in decoder.close():
            await _take(chunk, reading, on_delta, on_thinking)
    await _deliver(reading.asm.end(), reading, on_delta, on_thinking)
    try:
        done = reading.asm.result(stopped)
    except ModelError as exc:
        exc.streamed = reading.streamed
        raise
    resp = reading.resp
    resp.tool_calls, resp.usage, resp.finish_reason = done.tool_calls, done.usage, done.finish_reason
    resp.response_model = done.model


async def _take(chunk: Any, reading: Reading, on_delta: OnDelta, on_thinking: OnDelta | None) -> None:
    if chunk is DONE:
        reading.asm.done = True
        return
    try:
        piece = reading.asm.feed(chunk)
    except ModelError as exc:
        exc.streamed = reading.streamed
        raise
    await _deliver(piece, reading, on_delta, on_thinking)


async def _deliver(piece: Piece, reading: Reading, on_delta: OnDelta, on_thinking: OnDelta | None) -> None:
    resp = reading.resp
    if piece.thought and on_thinking is not None:
        reading.visible = True
        await on_thinking(piece.thought)
    if piece.tool:
        reading.visible = True
        if resp.first_token_s is None:
            resp.first_token_s = time.perf_counter() - reading.started
    if piece.text:
        if resp.first_token_s is None:
            resp.first_token_s = time.perf_counter() - reading.started
        reading.streamed = reading.visible = True
        resp.content += piece.text
        await on_delta(piece.text)
