"""What ``conduit doctor`` saw in an endpoint's streams (rule A17's shapes): pure, no I/O.

``shape_rows(report)`` reads both probe exchanges' chunks (``chunks``) and returns the rows
of the doctor's table: ``(feature, what this endpoint does, whether Conduit handles it)``. The third
column starts with ``yes`` or ``no`` (or is ``-`` for a fact with no verdict).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conduit.runtime.llm.model import ModelError, ModelResponse, parse_arguments
from conduit.runtime.llm.sse import DONE, SseDecoder, parse_body


@dataclass
class Endpoint:
    """Where to probe: ``base_url`` (ending in ``/v1`` for most servers), ``api_key`` (None: none sent),
    ``model`` (the name sent) and ``name`` (the configured name shown, or ``ad hoc``)."""

    base_url: str
    api_key: str | None
    model: str
    name: str = "ad hoc"


@dataclass
class Exchange:
    """One probe request's outcome: HTTP ``status`` (None: no answer), seconds to the first body byte,
    the raw ``body``, what the reader assembled (``resp``) or the failure's ``code`` and ``error``."""

    status: int | None = None
    first_byte_s: float | None = None
    body: bytes = b""
    resp: ModelResponse | None = None
    code: str | None = None
    error: str = ""
    thought: str = ""


@dataclass
class Report:
    """Both exchanges of a probe (``tools``, ``plain``) and the endpoint probed."""

    endpoint: Endpoint
    tools: Exchange
    plain: Exchange
    rows: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        """The agent can use it: the tool request came back as a ``kb_search`` call with JSON arguments."""
        resp = self.tools.resp
        return bool(resp and resp.tool_calls and resp.tool_calls[0].name == "kb_search"
                    and parse_arguments(resp.tool_calls[0].arguments) is not None)


def chunks(body: bytes) -> list[dict[str, Any]]:
    """The parsed chunks of a body (a whole JSON reply is one); those that do not parse are left out."""
    if body.lstrip()[:1] in (b"{", b"["):
        try:
            value = parse_body(body)
        except ModelError:
            return []
        return [value] if isinstance(value, dict) else []
    decoder, out = SseDecoder(), []
    try:
        out = decoder.feed(body) + decoder.close()
    except ModelError:
        pass
    return [c for c in out if c is not DONE and isinstance(c, dict)]


def _choice(chunk: dict[str, Any]) -> dict[str, Any]:
    choices = chunk.get("choices") or []
    return choices[0] if choices and isinstance(choices[0], dict) else {}


def _part(choice: dict[str, Any]) -> dict[str, Any]:
    return choice.get("delta") or choice.get("message") or {}


def tool_entries(chunks: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The tool-call entries of each chunk that has some (a whole reply: its message's calls), in order."""
    return [entries for c in chunks if (entries := _part(_choice(c)).get("tool_calls"))]


def _calls_rows(chunks: list[dict[str, Any]], ok: str) -> list[tuple[str, str, str]]:
    per_chunk = tool_entries(chunks)
    entries = [e for group in per_chunk for e in group]
    if not entries:
        return []
    names = [e.get("function", {}).get("name") for e in entries if e.get("function", {}).get("name")]
    ids = [e.get("id") for e in entries]
    with_args = [e for e in entries if e.get("function", {}).get("arguments") not in (None, "")]
    calls = max(1, len({e.get("index", e.get("id")) for e in entries if e.get("function", {}).get("name")}))
    split = len(with_args) > calls
    rows = [("tool-call arguments", f"split over {len(with_args)} chunks" if split else "whole in one chunk", ok)]
    repeated = len(names) > calls
    rows.append(("tool name", f"repeated in every chunk ({len(names)} times)" if repeated else "sent once",
                 f"{ok} (rule A17: a repeated name is taken once)" if repeated and ok == "yes" else ok))
    given = [i for i in ids if i]
    if not given:
        seen = "none"
    elif len(given) > calls:
        seen = "repeated in every chunk"
    elif any("id" in e and not e["id"] for e in entries):
        seen = "given once, then empty or null"
    else:
        seen = "given once"
    rows.append(("call id", seen, ok))
    has_index = all("index" in e for e in entries)
    rows.append(("index", "present" if has_index else "absent (pieces found by id or order)", ok))
    return rows


def _reasoning(chunks: list[dict[str, Any]], thought: str) -> str:
    for key in ("reasoning_content", "reasoning", "reasoning_details"):
        if any(_part(_choice(c)).get(key) for c in chunks):
            return f"`{key}` before the answer"
    if thought:
        return "<think>…</think> at the start of the content"
    return "none"


def _usage(chunks: list[dict[str, Any]], streamed: bool) -> str:
    if not streamed:
        return "in the reply body" if any(c.get("usage") for c in chunks) else "none"
    if any(c.get("usage") and not c.get("choices") for c in chunks):
        return "a usage-only last chunk"
    if any(_choice(c).get("usage") for c in chunks):
        return "inside the finishing choice"
    if any(c.get("usage") for c in chunks):
        return "in the finishing chunk"
    return "none"


def _head(name: str, ex: Exchange) -> tuple[str, str, str]:
    if ex.status is None:
        return (name, f"no answer: {ex.code}", "no")
    first = f", first byte {ex.first_byte_s * 1000:.0f} ms" if ex.first_byte_s is not None else ""
    return (name, f"HTTP {ex.status}{first}", "yes" if ex.code is None else f"no: {ex.code}")


def _verdict(ex: Exchange) -> str:
    return "yes" if ex.code is None else f"no: {ex.code}"


def shape_rows(report: Report) -> list[tuple[str, str, str]]:
    """The doctor table's rows for ``report`` (see the module doc)."""
    tools, plain = report.tools, report.plain
    rows = [_head("tool request", tools)]
    if tools.status is None or tools.status >= 400:
        rows.append(("error", f"{tools.code}: {tools.error}", _verdict(tools)))
        return rows + [_head("plain request", plain)]
    got = chunks(tools.body)
    streamed = tools.body.lstrip()[:1] not in (b"{", b"[")
    ok = _verdict(tools)
    rows.append(("stream", f"server-sent events ({len(got)} chunks)" if streamed else "one JSON body (not streamed)",
                 ok if streamed else f"{ok} (read as a whole reply)" if ok == "yes" else ok))
    if tools.code is not None:
        rows.append(("error", f"{tools.code}: {tools.error}", ok))
    resp = tools.resp
    if resp is not None and resp.tool_calls:
        call = resp.tool_calls[0]
        rows.append(("tool call", f"{call.name} {call.arguments}"[:80],
                     "yes" if report.usable else "no: not the offered tool, or arguments that are not JSON"))
    elif resp is not None:
        rows.append(("tool call", "none: it answered in text", "no: the agent needs tool calls"))
    rows += _calls_rows(got, ok)
    both = got + chunks(plain.body)
    rows.append(("reasoning", _reasoning(both, tools.thought or plain.thought),
                 "yes (kept out of the answer)" if ok == "yes" else ok))
    rows.append(("usage", _usage(got, streamed), "yes" if ok == "yes" else ok))
    finishes = sorted({str(_choice(c).get("finish_reason")) for c in both if _choice(c).get("finish_reason")})
    rows.append(("finish_reason", ", ".join(finishes) or "none", "yes" if finishes else "- (the stream's end decides)"))
    rows.append(_head("plain request", plain))
    if plain.code is not None:
        rows.append(("error", f"{plain.code}: {plain.error}", _verdict(plain)))
    elif plain.resp is not None:
        rows.append(("plain answer", repr(plain.resp.content[:60]), "yes"))
    return rows
