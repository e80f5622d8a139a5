"""Server-Sent Events to parsed chunks, for the model stream reader (rule A17): pure, no I/O.

``SseDecoder.feed(bytes)`` takes the response body as it arrives (any split, ``\\n`` or ``\\r\\n``
line ends) and returns what its complete lines carried: each ``data:`` value parsed with orjson
(a dict, one chat-completions chunk), or ``DONE`` for ``data: [DONE]``. Comments (``: keep-alive``,
``: OPENROUTER PROCESSING``), ``event:``, ``id:`` and ``retry:`` lines are skipped. A ``data:`` line
is parsed on its own as soon as it is complete (every OpenAI-compatible server sends one chunk per
line); one that does not parse waits for the next ``data:`` line of the same event (the SSE way of
splitting a value over lines), and an event that ends still unparsable raises
``ModelError(code="model_protocol_error")`` naming the first bytes.
"""

from __future__ import annotations

from typing import Any

import orjson

from conduit.runtime.llm.model import ModelError

DONE: Any = object()
"""Returned for ``data: [DONE]``: the stream's own end mark."""
_DONE_VALUE = b"[DONE]"


class SseDecoder:
    """Split a byte stream into SSE ``data:`` values and parse them (see the module doc).

    ``streamed`` is what ``ModelError.streamed`` says when a value does not parse (the caller sets
    it once text went out). ``close()`` ends the stream: a last line without its newline is read.
    """

    def __init__(self) -> None:
        self._rest = b""
        self._pending: list[bytes] = []
        self.streamed = False

    def feed(self, data: bytes) -> list[Any]:
        """The parsed values of the lines ``data`` completes (dicts or ``DONE``), in order.

        Raises ``ModelError`` (``model_protocol_error``) for an event whose data is not JSON."""
        if self._rest:
            data = self._rest + data
        lines = data.split(b"\n")
        self._rest = lines.pop()
        out: list[Any] = []
        for line in lines:
            self._line(line, out)
        return out

    def close(self) -> list[Any]:
        """The values left at the end of the body (a last line without newline, a pending value)."""
        out: list[Any] = []
        if self._rest:
            rest, self._rest = self._rest, b""
            self._line(rest, out)
        self._line(b"", out)
        return out

    def _line(self, line: bytes, out: list[Any]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:  # an event ends: a value still pending never parsed
            if self._pending:
                raw = b"\n".join(self._pending)
                self._pending = []
                raise self._error(raw)
            return
        if not line.startswith(b"data:"):
            return  # a comment (``:``), ``event:``, ``id:`` or ``retry:`` line
        value = line[6:] if line[5:6] == b" " else line[5:]
        if self._pending:
            self._pending.append(value)
            value = b"\n".join(self._pending)
        if value == _DONE_VALUE or (value[:1] == b"[" and value.strip() == _DONE_VALUE):
            self._pending = []
            out.append(DONE)
            return
        try:
            out.append(orjson.loads(value))
        except orjson.JSONDecodeError:
            if not self._pending:
                self._pending = [value]
            return
        self._pending = []

    def _error(self, raw: bytes) -> ModelError:
        shown = raw[:120].decode("utf-8", "replace")
        return ModelError(f"the model stream sent a chunk that is not JSON: {shown!r}", streamed=self.streamed,
                          code="model_protocol_error")


def parse_body(body: bytes) -> Any:
    """A whole (non-streamed) JSON reply. Raises ``ModelError`` (``model_protocol_error``) when it is not JSON."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        shown = body[:120].decode("utf-8", "replace")
        raise ModelError(f"the model replied with a body that is not JSON: {shown!r}", streamed=False,
                         code="model_protocol_error") from None
