"""``conduit doctor``: probe one OpenAI-compatible endpoint the way the agent calls it (issue 29).

``probe(endpoint, timeout_s)`` sends two small streamed requests over real HTTP (httpx): one
offering a single ``kb_search``-like tool and asking for it, one plain question. Each body's raw
bytes are kept and fed through the production stream reader (``conduit.runtime.llm.reader.read``:
``sse.SseDecoder`` and ``assembler.Assembler``, rule A17), and read once more chunk by chunk to name
the wire shape the endpoint uses (``shape_rows``). HTTP errors are classified as the agent classifies
them (``providererrors.classify``, rule A18), a connection failure is ``model_unavailable`` and a
timeout ``model_timeout``.

``Report.usable``: the tool request came back as a ``kb_search`` call whose arguments parse (what
the agent needs); ``render(report)`` is the rich table ``conduit doctor`` prints.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
from rich.table import Table

from ops.doctorshapes import Endpoint, Exchange, Report, shape_rows
from conduit.runtime.llm import providererrors
from conduit.runtime.llm.assembler import StreamError
from conduit.runtime.llm.model import MODEL_TIMEOUT, MODEL_UNAVAILABLE, ModelError
from conduit.runtime.llm.reader import Reading, read

TOOL = {"type": "function", "function": {
    "name": "kb_search", "description": "Search the law knowledge base. Always call it before answering.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "search words"}},
                   "required": ["query"]}}}
"""The probe's one tool (the shape of Conduit's ``kb_search``)."""
TOOL_MESSAGES = [
    {"role": "system", "content": "You answer questions about Chinese tax law. Call the kb_search tool first."},
    {"role": "user", "content": "小规模纳税人的增值税征收率是多少？请先用 kb_search 检索。"}]
PLAIN_MESSAGES = [{"role": "user", "content": "Reply with the single word OK."}]


def request_body(model: str, tools: bool) -> bytes:
    """The JSON body of the tool request (``tools=True``) or of the plain one: streamed, usage asked for."""
    body: dict[str, Any] = {"model": model, "messages": TOOL_MESSAGES if tools else PLAIN_MESSAGES, "stream": True,
                            "stream_options": {"include_usage": True}, "max_tokens": 256, "temperature": 0}
    if tools:
        body |= {"tools": [TOOL], "tool_choice": "auto"}
    return orjson.dumps(body)


async def exchange(client: httpx.AsyncClient, endpoint: Endpoint, tools: bool) -> Exchange:
    """Send one probe request and read its answer through the production reader; never raises for the
    endpoint's failures (they become ``code`` and ``error``)."""
    out = Exchange()
    headers = {"content-type": "application/json"}
    if endpoint.api_key:
        headers["authorization"] = f"Bearer {endpoint.api_key}"
    started = time.perf_counter()
    try:
        async with client.stream("POST", endpoint.base_url.rstrip("/") + "/chat/completions",
                                 content=request_body(endpoint.model, tools), headers=headers) as response:
            out.status = response.status_code
            parts: list[bytes] = []
            async for data in response.aiter_bytes():
                if out.first_byte_s is None:
                    out.first_byte_s = time.perf_counter() - started
                parts.append(data)
            out.body = b"".join(parts)
    except httpx.TimeoutException as exc:
        out.code, out.error = MODEL_TIMEOUT, f"no answer within the timeout ({type(exc).__name__})"
        return out
    except httpx.HTTPError as exc:
        out.code, out.error = MODEL_UNAVAILABLE, f"{type(exc).__name__}: {exc}"[:300]
        return out
    if out.status >= 400:
        _http_error(out)
    else:
        await _read(out)
    return out


def _http_error(out: Exchange) -> None:
    try:
        error = orjson.loads(out.body).get("error") or {}
    except (orjson.JSONDecodeError, AttributeError):
        error = {}
    if not isinstance(error, dict):
        error = {"message": str(error)}
    message = str(error.get("message") or out.body[:200].decode("utf-8", "replace"))
    out.code = providererrors.classify(out.status, str(error.get("code") or error.get("type") or ""), message)
    out.error = providererrors.describe(out.code, out.status, message)


async def _read(out: Exchange) -> None:
    reading = Reading()
    thoughts: list[str] = []

    async def body() -> AsyncIterator[bytes]:
        yield out.body

    async def on_delta(_: str) -> None:
        return None

    async def on_thinking(text: str) -> None:
        thoughts.append(text)

    try:
        await read(body(), reading, on_delta, on_thinking)
        out.resp = reading.resp
    except ModelError as exc:
        out.code, out.error = exc.code, str(exc)
    except StreamError as exc:
        out.code = providererrors.classify(exc.status, exc.code, exc.message)
        out.error = providererrors.describe(out.code, exc.status, f"in the stream: {exc.message}")
    out.thought = "".join(thoughts)


async def probe(endpoint: Endpoint, timeout_s: float = 30.0) -> Report:
    """Probe ``endpoint`` (see the module doc); ``timeout_s``: the longest wait for each request (seconds)."""
    timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0))
    async with httpx.AsyncClient(timeout=timeout) as client:
        tools = await exchange(client, endpoint, tools=True)
        plain = await exchange(client, endpoint, tools=False)
    report = Report(endpoint, tools, plain)
    report.rows = shape_rows(report)
    return report


def render(report: Report) -> Table:
    """The rich table of ``report``: feature, what the endpoint does, whether Conduit handles it."""
    ep = report.endpoint
    table = Table(title=f"conduit doctor: {ep.name} ({ep.model} at {ep.base_url})", title_justify="left")
    table.add_column("feature")
    table.add_column("this endpoint")
    table.add_column("Conduit")
    for feature, seen, handled in report.rows:
        style = "green" if handled.startswith("yes") else "red" if handled.startswith("no") else "dim"
        table.add_row(feature, seen, f"[{style}]{handled}[/{style}]")
    return table
