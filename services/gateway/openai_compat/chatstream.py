"""A task's event log turned into OpenAI chat-completion chunks (``POST /v1/chat/completions``).

``ChatAnswer`` reads the task's ``LoggedEvent`` s in order and returns, per event, the
``delta`` objects of OpenAI's stream (``{"content": text}``; ``{"reasoning_content": text}``
for ``thinking`` events, as DeepSeek, Qwen and vLLM send reasoning); ``finish(terminal)``
gives the last ones. Citations become Markdown footnotes: every ``[n]`` of the answer is
written ``[^n]`` (rewritten while streaming; a marker split across two deltas is held back
until it closes) and the answer ends with one definition per citation,
``[^n]: 《title》 locator <url>``. The checked citations also travel in the ``conduit``
extension field (``contracts.chat.ConduitExtension``).

The stream only appends (OpenAI's format has no retraction): text the agent discards with
``answer.reset`` (it wrote a preface, then called tools) stays on the client's screen,
followed by a blank line; at the end, the part of the checked answer not streamed yet (when
the streamed text is a prefix of it) is sent before the footnotes.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from conduit.records.taskstream import LoggedEvent
from contracts.chat import ConduitExtension
from contracts.evidence import Citation

_CITE = re.compile(r"\[(\d{1,3})\]")
_PARTIAL = re.compile(r"\[\d{0,3}$")


def footnote_marks(text: str) -> str:
    """``text`` with every ``[n]`` citation written as a Markdown footnote reference ``[^n]``."""
    return _CITE.sub(r"[^\1]", text)


def footnotes(citations: list[Citation]) -> str:
    """The footnote definitions of ``citations`` (``\\n\\n[^n]: title locator <url>`` lines), or ""."""
    lines = []
    for c in sorted(citations, key=lambda c: c.index):
        where = f" {c.locator}" if c.locator else ""
        link = f" <{c.url}>" if c.url else ""
        lines.append(f"[^{c.index}]: {c.title}{where}{link}")
    return "\n\n" + "\n".join(lines) if lines else ""


class ChatAnswer:
    """The assistant message of one task, built from its event log (see module doc).

    Attributes:
        sent: every ``content`` text handed out so far (what the client shows).
        extension: the ``conduit`` field, set by ``finish``.
        usage: OpenAI ``usage`` (prompt/completion/total tokens), set by ``finish``.
        error: ``(status, code, message)`` when the task failed or was cancelled.
    """

    def __init__(self, task_id: str, session_id: str) -> None:
        self.task_id, self.session_id = task_id, session_id
        self.sent = ""
        self._since_reset = ""
        self._held = ""
        self.extension: ConduitExtension | None = None
        self.usage: dict[str, int] | None = None
        self.error: tuple[int, str, str] | None = None
        self.finish_reason = "stop"
        self.final = ""
        """The whole answer as a non-streaming completion gives it (footnotes included)."""

    def _content(self, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        self.sent += text
        self._since_reset += text
        return [{"content": text}]

    def on_event(self, ev: LoggedEvent) -> list[dict[str, Any]]:
        """The deltas one non-terminal event adds (``[]`` for events clients do not see)."""
        if ev.type == "answer.delta":
            text = self._held + json.loads(ev.data)["text"]
            partial = _PARTIAL.search(text)
            self._held = text[partial.start():] if partial else ""
            return self._content(footnote_marks(text[: partial.start()] if partial else text))
        if ev.type == "answer.reset":
            out = self._content(footnote_marks(self._held))
            self._held = ""
            if self._since_reset:
                out += self._content("\n\n")
            self._since_reset = ""
            return out
        if ev.type == "thinking":
            return [{"reasoning_content": json.loads(ev.data)["text"]}]
        return []

    def finish(self, ev: LoggedEvent) -> list[dict[str, Any]]:
        """The last deltas, from the terminal event; sets ``extension``, ``usage`` or ``error``."""
        data = json.loads(ev.data)
        if ev.type == "task.failed":
            self.error = (502, data["code"], data["message"])
            return []
        if ev.type == "task.cancelled":
            self.error = (409, "task_cancelled", f"the task was cancelled ({data.get('reason', 'cancelled')})")
            return []
        held, self._held = footnote_marks(self._held), ""
        if ev.type == "task.needs_input":
            self.extension = ConduitExtension(task_id=self.task_id, session_id=self.session_id,
                                              status="needs_input", answer=data["question"])
            lead = "\n\n" if self._since_reset + held else ""
            self.final = data["question"]
            return self._content(held + lead + data["question"])
        citations = [Citation.model_validate(c) for c in data.get("citations", [])]
        self.extension = ConduitExtension(task_id=self.task_id, session_id=self.session_id, status="completed",
                                          answer=data["answer"], citations=citations, mode=data.get("mode"),
                                          confidence=data.get("confidence"))
        self.usage = data.get("usage")
        final = footnote_marks(data["answer"])
        self.final = final + footnotes(citations)
        streamed = self._since_reset + held
        rest = final[len(streamed):] if final.startswith(streamed) else ""
        return self._content(held + rest + footnotes(citations))


class Chunks:
    """OpenAI's wire objects for one completion: ``id`` ``chatcmpl-<task id>``, ``created`` (epoch s)."""

    def __init__(self, task_id: str, model: str) -> None:
        self.id = f"chatcmpl-{task_id}"
        self.model = model
        self.created = int(time.time())

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        """One ``data: {chat.completion.chunk}`` SSE line (UTF-8, blank line after)."""
        choices = [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
        return self.data({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                          "model": self.model, "choices": choices, **extra})

    @staticmethod
    def data(body: dict[str, Any] | str) -> bytes:
        """``data: <JSON or text>`` as one SSE event."""
        text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
        return f"data: {text}\n\n".encode()

    def completion(self, answer: ChatAnswer) -> dict[str, Any]:
        """The non-streaming ``chat.completion`` object of a finished ``answer``."""
        message = {"role": "assistant", "content": answer.final, "refusal": None}
        body: dict[str, Any] = {
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": answer.finish_reason, "logprobs": None}],
            "usage": answer.usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
        if answer.extension is not None:
            body["conduit"] = answer.extension.model_dump(mode="json")
        return body
