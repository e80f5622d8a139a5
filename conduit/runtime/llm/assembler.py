"""The model stream's assembler (rule A17, docs/architecture.md "The model stream reader"): pure, no I/O.

Feed it the parsed chunks of an OpenAI-compatible chat-completions stream (``feed(chunk)``, one dict
per ``data:`` line, ``conduit.runtime.llm.sse``) or a whole non-streamed reply (``feed_reply(body)``).
Each call returns the ``Piece`` the caller streams on: the chunk's answer text, its reasoning text,
and whether a tool-call piece came. ``end()`` returns what was held back at the end (a ``<think>``
tag's tail); ``result()`` the assembled ``Assembled`` or a ``ModelError`` with its code.

Rule A17, as every provider family streams (the wire-shape matrix: tests/unit/test_model_wire_shapes.py):

1. A tool call's id and name are taken once: a name repeated in later chunks (MiniMax through NIM,
   Fireworks-hosted Kimi, some OpenAI models) is not appended; a name growing chunk by chunk
   (``kb_`` then ``kb_search``) is replaced; only a different fragment (``kb_`` then ``search``) is joined.
2. Pieces find their call by ``index``, else by ``id``, else they continue the last call; a call at
   the same place starts a new one only when it names a tool, the call there is whole (a name and
   arguments that parse) and its id differs, or, without ids, its arguments start a new object
   (servers that number parallel calls all 0, or send no ``index``). Arguments are joined in order;
   arguments sent as a JSON object are serialised; a repeat of the whole arguments is dropped.
3. Reasoning never joins the answer: ``reasoning_content`` (DeepSeek, Qwen, Kimi, GLM, llama.cpp),
   else ``reasoning`` (vLLM, Ollama, OpenRouter; servers that send both send the same text), else
   ``reasoning_details[].text`` (MiniMax), content parts of type ``thinking``, and a leading
   ``<think>…</think>`` in the content (models served without a reasoning parser) are reasoning.
4. Usage is read from any chunk, at the top or inside a choice (Kimi), the last one wins; a
   usage-only last chunk (``choices: []``) is the common case.
5. Any non-empty ``finish_reason`` ends the answer; tool calls decide whatever it says (``stop``,
   ``tool_calls``, ``function_call``); ``content_filter`` / ``sensitive`` is a failure
   (``model_content_filtered``), ``network_error`` / ``error`` a provider failure.
6. Failures (never a silent answer): an ``error`` object in the stream (``StreamError``), a stream
   that ended with neither a ``finish_reason`` nor ``[DONE]`` (``model_stream_truncated``), a call's
   arguments cut by the token limit (``finish_reason: length``, ``model_output_truncated``), a call
   without a name (``model_protocol_error``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from contracts.stream import Usage
from conduit.runtime.llm.model import MODEL_CONTENT_FILTERED, ModelError, ToolCallRequest

_FILTERED = frozenset({"content_filter", "sensitive"})
_BROKEN = frozenset({"network_error", "error"})
_OPEN, _CLOSE = "<think>", "</think>"
_MINIMAX_STATUS = {1002: 429, 1004: 401, 1008: 402, 1026: 400, 1027: 400, 2013: 400, 2049: 401}
"""MiniMax's ``base_resp.status_code`` as the HTTP status it means (rate limit, auth, balance, input)."""


class StreamError(Exception):
    """An ``error`` object inside the stream (vLLM, OpenRouter, LiteLLM send failures this way):
    ``status`` (its numeric ``code`` when it has one), ``code`` (its text code) and ``message``."""

    def __init__(self, message: str, status: int | None, code: str | None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(slots=True)
class Piece:
    """What one chunk adds: answer ``text``, reasoning ``thought`` and whether a tool-call piece came."""

    text: str = ""
    thought: str = ""
    tool: bool = False


@dataclass
class Assembled:
    """The call's outcome: ``content`` (the answer text), ``tool_calls`` (ids unique, arguments a raw
    JSON string, ``{}`` when none came), ``usage`` (tokens) and ``finish_reason`` (None when none came)."""

    content: str
    tool_calls: list[ToolCallRequest]
    usage: Usage
    finish_reason: str | None
    model: str | None = None  # the model the provider says answered (the first chunk's ``model``)


@dataclass(slots=True)
class _Call:
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    size: int = 0

    def arguments(self) -> str:
        return "".join(self.parts)

    def whole(self) -> bool:
        """A name and arguments that parse as a JSON object."""
        if not self.name or not self.size:
            return False
        try:
            return isinstance(orjson.loads(self.arguments()), dict)
        except orjson.JSONDecodeError:
            return False

    def set_name(self, name: str) -> None:
        if not self.name or name.startswith(self.name):
            self.name = name  # first, or the name so far sent again and grown (rule A17.1)
        elif not self.name.endswith(name):
            self.name += name  # a fragment

    def add_arguments(self, value: Any) -> None:
        if not isinstance(value, str):  # a JSON object instead of its text
            value = orjson.dumps(value).decode()
            if self.size:
                return
        if not value:
            return
        if self.size == len(value) and self.arguments() == value and self.whole():
            return  # the whole arguments sent again
        self.parts.append(value)
        self.size += len(value)


class _Think:
    """Splits a leading ``<think>…</think>`` off the content, across chunks (rule A17.3)."""

    __slots__ = ("state", "held")

    def __init__(self) -> None:
        self.state = "start"  # start | in | after | out
        self.held = ""

    def split(self, text: str) -> tuple[str, str]:
        if self.state == "out":
            return text, ""
        self.held += text
        if self.state == "start":
            lead = self.held.lstrip()
            if not lead or (len(lead) < len(_OPEN) and _OPEN.startswith(lead)):
                return "", ""  # whitespace or a tag's start: wait for more
            if not lead.startswith(_OPEN):
                self.state, out, self.held = "out", self.held, ""
                return out, ""
            self.state, self.held = "in", lead[len(_OPEN):]
        if self.state == "in":
            end = self.held.find(_CLOSE)
            if end < 0:
                keep = next((k for k in range(min(len(_CLOSE) - 1, len(self.held)), 0, -1)
                             if _CLOSE.startswith(self.held[-k:])), 0)
                thought, self.held = self.held[:len(self.held) - keep], self.held[len(self.held) - keep:]
                return "", thought
            thought, self.held, self.state = self.held[:end], self.held[end + len(_CLOSE):], "after"
            text, _ = self.split("")
            return text, thought
        rest = self.held.lstrip()  # after the tag: the answer starts at its first visible character
        if not rest:
            self.held = ""
            return "", ""
        self.state, self.held = "out", ""
        return rest, ""

    def end(self) -> tuple[str, str]:
        held, self.held = self.held, ""
        if self.state == "in":
            return "", held
        return (held, "") if self.state == "start" else ("", "")


class Assembler:
    """One model call's chunks to its answer, reasoning, tool calls, usage and finish reason (rule A17)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: list[_Call] = []
        self._by_index: dict[Any, _Call] = {}
        self._by_id: dict[str, _Call] = {}
        self._think = _Think()
        self.usage = Usage()
        self.finish_reason: str | None = None
        self.done = False  # ``[DONE]`` came (or a whole reply)
        self.chunks = 0
        self.model: str | None = None

    def feed(self, chunk: Any) -> Piece:
        """One parsed chunk. Raises ``StreamError`` for an ``error`` object, ``ModelError`` for a chunk
        that is not an object or a content-filter / broken finish."""
        if not isinstance(chunk, dict):
            raise ModelError(f"the model stream sent a chunk that is not an object: {str(chunk)[:120]!r}",
                             streamed=False, code="model_protocol_error")
        self.chunks += 1
        if self.model is None and isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        error = chunk.get("error")
        if error:
            raise _stream_error(error)
        base = chunk.get("base_resp")  # MiniMax reports its failures so, with HTTP 200
        if isinstance(base, dict) and base.get("status_code") not in (0, None):
            code = base.get("status_code")
            raise StreamError(str(base.get("status_msg") or base)[:300], _MINIMAX_STATUS.get(code, 500), str(code))
        self._usage(chunk.get("usage"))
        piece = Piece()
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) not in (0, None):
                continue  # n > 1 is never asked for: only the first choice
            self._usage(choice.get("usage"))
            delta = choice.get("delta") or choice.get("message")
            if delta:
                self._delta(delta, piece)
            finish = choice.get("finish_reason")
            if finish and finish != "null":
                self._finish(finish, piece)
        return piece

    def feed_reply(self, body: Any) -> Piece:
        """A whole non-streamed reply (``choices[0].message``); it needs no ``[DONE]``."""
        piece = self.feed(body)
        self.done = True
        return piece

    def end(self) -> Piece:
        """What was held back for a tag that never finished (call once the stream ended)."""
        text, thought = self._think.end()
        if text:
            self.text.append(text)
        return Piece(text=text, thought=thought)

    def _delta(self, delta: dict[str, Any], piece: Piece) -> None:
        thought = delta.get("reasoning_content") or delta.get("reasoning")  # one of them: some servers send both
        if isinstance(thought, str):
            piece.thought += thought
        elif delta.get("reasoning_details"):  # MiniMax (OpenRouter sends it beside ``reasoning``, the same text)
            piece.thought += "".join(d["text"] for d in delta["reasoning_details"]
                                     if isinstance(d, dict) and isinstance(d.get("text"), str))
        content = delta.get("content")
        if isinstance(content, list):  # content parts (text / thinking)
            for part in content:
                if isinstance(part, dict):
                    kind, value = part.get("type"), part.get("text") or part.get("thinking") or ""
                    if kind == "thinking":
                        piece.thought += value if isinstance(value, str) else ""
                    elif isinstance(value, str):
                        self._content(value, piece)
        elif isinstance(content, str) and content:
            self._content(content, piece)
        calls = delta.get("tool_calls")
        if calls:
            for entry in calls:
                if isinstance(entry, dict):
                    self._tool(entry.get("index"), entry.get("id") or "", entry.get("function") or {})
                    piece.tool = True
        legacy = delta.get("function_call")
        if isinstance(legacy, dict):  # the legacy single call (``finish_reason: function_call``)
            self._tool("function_call", "", legacy)
            piece.tool = True

    def _content(self, content: str, piece: Piece) -> None:
        text, thought = self._think.split(content)
        piece.thought += thought
        if text:
            piece.text += text
            self.text.append(text)

    def _tool(self, index: Any, call_id: str, fn: dict[str, Any]) -> None:
        name = fn.get("name") or ""
        arguments = fn.get("arguments")
        call = self._place(index, call_id, name, arguments)
        if call_id and not call.id:
            call.id = call_id
            self._by_id.setdefault(call_id, call)
        if name:
            call.set_name(name.strip() if isinstance(name, str) else str(name))
        if arguments is not None:
            call.add_arguments(arguments)

    def _place(self, index: Any, call_id: str, name: str, arguments: Any) -> _Call:
        """Rule A17.2: the call an entry belongs to (a new one when it starts another)."""
        if index is not None and not isinstance(index, bool):
            call = self._by_index.get(index)
            if call is None or _starts_another(call, call_id, name, arguments):
                call = self._new()
                self._by_index[index] = call
            return call
        if call_id and call_id in self._by_id:
            return self._by_id[call_id]
        last = self.calls[-1] if self.calls else None
        if last is None or _starts_another(last, call_id, name, arguments):
            return self._new()
        return last

    def _new(self) -> _Call:
        call = _Call()
        self.calls.append(call)
        return call

    def _usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        prompt = int(usage.get("prompt_tokens") or usage.get("input_tokens") or 0)
        completion = int(usage.get("completion_tokens") or usage.get("output_tokens") or 0)
        total = int(usage.get("total_tokens") or prompt + completion)
        if total or not self.usage.total_tokens:
            self.usage = Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)

    def _finish(self, finish: str, piece: Piece) -> None:
        self.finish_reason = finish
        if finish in _FILTERED:
            raise ModelError(f"the provider stopped the answer (finish_reason {finish!r})", streamed=False,
                             code=MODEL_CONTENT_FILTERED)
        if finish in _BROKEN:
            raise StreamError(f"the provider ended the stream with finish_reason {finish!r}", None, finish)

    def result(self, stopped: bool = False) -> Assembled:
        """The assembled call (``stopped``: the caller ended the stream early, a cancel, so no end
        mark is expected). Raises ``ModelError``: ``model_stream_truncated`` (neither a
        ``finish_reason`` nor ``[DONE]``), ``model_output_truncated`` (``length`` inside a call's
        arguments) or ``model_protocol_error`` (a call without a name)."""
        if not stopped and self.finish_reason is None and not self.done:
            raise ModelError(f"the model stream ended before its end (no finish_reason, no [DONE]) after "
                             f"{self.chunks} chunks", streamed=False, code="model_stream_truncated")
        calls: list[ToolCallRequest] = []
        seen: set[str] = set()
        for i, call in enumerate(self.calls):
            if not call.name:
                raise ModelError(f"the model sent a tool call without a name (arguments {call.arguments()[:80]!r})",
                                 streamed=False, code="model_protocol_error")
            if self.finish_reason == "length" and not call.whole():
                raise ModelError(f"the completion hit its token limit inside {call.name}'s arguments",
                                 streamed=False, code="model_output_truncated")
            call_id = call.id or f"call_{i}"
            if call_id in seen:
                call_id = f"{call_id}_{i}"
            seen.add(call_id)
            calls.append(ToolCallRequest(id=call_id, name=call.name, arguments=call.arguments() or "{}"))
        return Assembled(content="".join(self.text), tool_calls=calls, usage=self.usage, finish_reason=self.finish_reason,
                         model=self.model)


def _starts_another(call: _Call, call_id: str, name: str, arguments: Any) -> bool:
    """Rule A17.2: an entry at ``call``'s place starts another call."""
    if not name or not call.whole():
        return False
    if call_id and call.id:
        return call_id != call.id
    return isinstance(arguments, dict) or (isinstance(arguments, str) and arguments.lstrip().startswith("{"))


def _stream_error(error: Any) -> StreamError:
    if not isinstance(error, dict):
        return StreamError(str(error)[:300], None, None)
    raw = error.get("code")  # vLLM and OpenRouter: an HTTP status (LiteLLM as text, "429"); others a word
    status = int(raw) if isinstance(raw, int) or (isinstance(raw, str) and raw.isdigit()) else None
    return StreamError(str(error.get("message") or error)[:300], status, raw if isinstance(raw, str) else None)
