"""A scripted OpenAI-compatible chat-completions server for tests and benchmarks.

It is the one allowed stand-in: the paid model API. It speaks real HTTP and the
real streaming wire format (``data: {chunk}`` lines, ``data: [DONE]``), so the
``openai`` client path is exercised end to end. Each request plays the next
``Turn`` of the script; a turn may also be a function of the request body.

Turn fields: ``content`` (text streamed in ``chunks`` pieces), ``tool_calls``
(``[{"name", "arguments"}]``), ``delay_s`` before the first chunk,
``chunk_delay_s`` between chunks, ``status`` (answer with that HTTP error instead; ``error``: its
JSON body's ``error`` object, ``retry_after_s``: its ``Retry-After``), ``reasoning`` (streamed first
as ``reasoning_content`` deltas, as DeepSeek, Qwen and vLLM send them), ``shape``: the provider
wire shape to play (``testkit.provider_shapes``; default: the server's, ``openai``).

A session's rolling-summary call (rule M7; its system prompt starts with ``SUMMARY_MARK``) runs
beside the tasks at no fixed point of a script, so it never takes a turn of it: ``summary`` answers
it (default: ``【模型摘要】`` and the first 400 characters of what it was sent), and its bodies are kept
in ``summary_requests``, not ``requests``. The retriever's rewrite and rerank calls (rules K12, K13; system prompt
starting with ``RETRIEVAL_MARK``) are answered by ``retrieval`` the same way (default ``echo_retrieval``: the question
unchanged, the candidates in their order) and kept in ``retrieval_requests``.

A request without ``"stream": true`` gets one ``chat.completion`` JSON body (the retriever's calls are not
streamed); ``delay_s`` and ``status`` apply to it too.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from testkit.threadserver import ThreadedServer
from testkit import provider_shapes as shapes


@dataclass
class Turn:
    """One scripted model response (see module doc)."""

    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    chunks: int = 8
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    status: int | None = None
    retry_after_s: float | None = None
    reasoning: str = ""
    error: dict[str, Any] | None = None
    shape: str = ""
    cut: bool = False
    """End the stream right after the content and tool calls: no ``finish_reason``, no usage, no
    ``[DONE]`` (a connection that closed mid-answer)."""


TurnSource = Turn | Callable[[dict[str, Any]], Turn]
SUMMARY_MARK = "【摘要任务】"
"""First words of the orchestrator's summary-call prompt (``agent.context.SUMMARY_INSTRUCTION``)."""
RETRIEVAL_MARK = "【检索辅助】"
"""First words of the retriever's rewrite and rerank prompts (``services.retriever.modelhelp.RETRIEVAL_MARK``)."""


def echo_summary(body: dict[str, Any]) -> Turn:
    """The default answer to a summary call: ``【模型摘要】`` and the start of what it was sent."""
    sent = " ".join(str(m.get("content") or "") for m in body.get("messages", [])[1:])
    return Turn(content="【模型摘要】" + re.sub(r"\s+", " ", sent)[:400])


def echo_retrieval(body: dict[str, Any]) -> Turn:
    """The default answer to a retriever call: a rewrite keeps the question (no sub-queries), a rerank keeps the
    candidates' order (``[k]`` lines of the user message)."""
    system = str(body.get("messages", [{}])[0].get("content") or "")
    user = str(body.get("messages", [{}, {}])[-1].get("content") or "")
    if system.startswith(RETRIEVAL_MARK + "改写"):
        return Turn(content=json.dumps({"query": user, "sub_queries": []}, ensure_ascii=False))
    return Turn(content=json.dumps({"order": [int(n) for n in re.findall(r"^\[(\d+)\]", user, re.MULTILINE)]}))


def evidence_number(messages: list[dict[str, Any]], title_part: str, locator: str) -> int | None:
    """The evidence number the model saw for a title containing ``title_part`` at ``locator``
    (e.g. ``增值税法``, ``第十一条``) in the request's ``tool`` messages, or None."""
    for m in messages:
        if m.get("role") == "tool":
            hit = re.search(rf"\[(\d+)\] 《[^》]*{title_part}[^》]*》 ?{locator}", m.get("content") or "")
            if hit:
                return int(hit.group(1))
    return None


def vat_kb_call() -> Turn:
    """A ``kb_search`` for the VAT law's simplified-method rate (增值税法 第十一条: 百分之三)."""
    return Turn(tool_calls=[{"name": "kb_search", "arguments": {
        "query": "小规模纳税人 简易计税方法 征收率", "reason": "查找增值税法中简易计税的征收率"}}])


def cite_vat(body: dict[str, Any], **turn: Any) -> Turn:
    """The answer citing the number the request's evidence gave 增值税法 第十一条 (``turn``: more ``Turn``
    fields, e.g. a slow stream), or "没有找到。" when none did."""
    n = evidence_number(body["messages"], "增值税法", "第十一条")
    return Turn(content=f"征收率为百分之三[{n}]。" if n else "没有找到。", **({"chunks": 6} | turn))


class ScriptedModel(ThreadedServer):
    """Serve ``script`` on 127.0.0.1 at ``base_url`` (``http://127.0.0.1:PORT/v1``).

    ``requests`` keeps every request body received, for assertions. When the
    script runs out, ``default`` is played (a short plain answer).
    ``first_token_s`` keeps, per streamed response in order, the model's own
    first-token delay in seconds: from the request reaching the handler to its
    first content or tool-call chunk being handed to the server (benchmarks
    subtract it to measure only Conduit).
    """

    def __init__(self, script: list[TurnSource] | None = None, default: Turn | None = None,
                 summary: TurnSource = echo_summary, retrieval: TurnSource = echo_retrieval,
                 shape: str = "openai") -> None:
        self.shape = shapes.check(shape)
        """The provider wire shape of turns that name none (``provider_shapes.SHAPES``)."""
        self.script: list[TurnSource] = list(script or [])
        self.default = default or Turn(content="OK.")
        self.summary = summary
        self.summary_requests: list[dict[str, Any]] = []
        self.retrieval = retrieval
        self.retrieval_requests: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.received_at: list[float] = []
        """``time.monotonic()`` when each request of ``requests`` arrived (same order)."""
        self.first_token_s: list[float] = []
        super().__init__()
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        """The ``OPENAI_BASE_URL`` to give clients."""
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *turns: TurnSource) -> None:
        """Append turns to the script."""
        with self._lock:
            self.script.extend(turns)

    def _next(self, body: dict[str, Any]) -> Turn:
        messages = body.get("messages") or [{}]
        if str(messages[0].get("content") or "").startswith(SUMMARY_MARK):
            with self._lock:
                self.summary_requests.append(body)
            return self.summary(body) if callable(self.summary) else self.summary
        if str(messages[0].get("content") or "").startswith(RETRIEVAL_MARK):
            with self._lock:
                self.retrieval_requests.append(body)
            return self.retrieval(body) if callable(self.retrieval) else self.retrieval
        with self._lock:
            self.requests.append(body)
            self.received_at.append(time.monotonic())
            source = self.script.pop(0) if self.script else self.default
        return source(body) if callable(source) else source

    async def _completions(self, request: Request) -> Any:
        received = time.perf_counter()
        body = await request.json()
        turn = self._next(body)
        if turn.status:
            headers = {"retry-after": str(turn.retry_after_s)} if turn.retry_after_s is not None else None
            error = turn.error or {"message": "scripted error", "type": "server_error"}
            return JSONResponse({"error": error}, status_code=turn.status, headers=headers)
        model = body.get("model", "scripted")
        cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        if not body.get("stream") and not turn.shape and self.shape == "openai":
            return await _whole(turn, body, cid)  # a non-streamed request (the retriever's rules K12-K13)
        shape = shapes.check(turn.shape or self.shape)
        calls = [(call.get("id") or f"call_{uuid.uuid4().hex[:10]}", call["name"],
                  call["arguments"] if isinstance(call.get("arguments"), str)
                  else json.dumps(call.get("arguments", {}), ensure_ascii=False)) for call in turn.tool_calls]
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in body.get("messages", [])) // 2
        completion = max(1, len(turn.content) // 2)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion}
        if shape == "non_streamed":
            self.first_token_s.append(time.perf_counter() - received)
            return JSONResponse(shapes.completion(model, cid, int(time.time()), turn.content, turn.reasoning, calls, usage))
        return StreamingResponse(self._stream(turn, shape, calls, usage, model, cid, received), media_type="text/event-stream")

    def _stream(self, turn: Turn, shape: str, calls: list[shapes.Call], usage: dict[str, int], model: str, cid: str,
                received: float) -> Any:
        """The SSE body of ``turn`` in ``shape`` (an async generator of ``data:`` lines)."""

        def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None,
                  in_choice: bool = False) -> str:
            obj: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                                   "choices": [] if usage and not in_choice else [{"index": 0, "delta": delta, "finish_reason": finish}]}
            if usage and in_choice:
                obj["choices"][0]["usage"] = usage
            elif usage:
                obj["usage"] = usage
            return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

        def first_token() -> None:
            if first[0]:
                first[0] = False
                with self._lock:
                    self.first_token_s.append(time.perf_counter() - received)

        first = [True]

        async def gen() -> Any:
            if turn.delay_s:
                await asyncio.sleep(turn.delay_s)
            yield chunk({"role": "assistant", "content": ""})
            for delta in shapes.reasoning_deltas(turn.reasoning, shape):
                yield chunk(delta)
            text = turn.content
            if text:
                n = max(1, min(turn.chunks, len(text)))
                size = -(-len(text) // n)
                for i in range(0, len(text), size):
                    first_token()
                    yield chunk({"content": text[i : i + size]})
                    if turn.chunk_delay_s:
                        await asyncio.sleep(turn.chunk_delay_s)
            for delta in shapes.tool_deltas(calls, shape):
                first_token()
                yield chunk(delta)
            if turn.cut:
                return
            finish = shapes.finish_reason(shape, bool(calls))
            if shape == "usage_in_choice":
                yield chunk({}, finish=finish, usage=usage, in_choice=True)
            else:
                yield chunk({}, finish=finish)
                yield chunk({}, usage=usage)
            yield "data: [DONE]\n\n"

        return gen()

    def start(self) -> "ScriptedModel":
        """Start serving in a background thread; returns self once the port is open."""
        self.serve([Route("/v1/chat/completions", self._completions, methods=["POST"])])
        return self


async def _whole(turn: Turn, body: dict[str, Any], cid: str) -> JSONResponse:
    """``turn`` as one non-streamed ``chat.completion`` body (after ``delay_s``)."""
    if turn.delay_s:
        await asyncio.sleep(turn.delay_s)
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.tool_calls:
        message["tool_calls"] = [{"id": c.get("id") or f"call_{uuid.uuid4().hex[:10]}", "type": "function",
                                  "function": {"name": c["name"], "arguments": c.get("arguments") if isinstance(
                                      c.get("arguments"), str) else json.dumps(c.get("arguments", {}), ensure_ascii=False)}}
                                 for c in turn.tool_calls]
    prompt_tokens = sum(len(str(m.get("content") or "")) for m in body.get("messages", [])) // 2
    completion = max(1, len(turn.content) // 2)
    return JSONResponse({"id": cid, "object": "chat.completion", "created": int(time.time()),
                         "model": body.get("model", "scripted"),
                         "choices": [{"index": 0, "message": message,
                                      "finish_reason": "tool_calls" if turn.tool_calls else "stop"}],
                         "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                                   "total_tokens": prompt_tokens + completion}})
