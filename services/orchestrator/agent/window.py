"""The history window sent to the model.

The system prompt is always kept; older messages are dropped from the front until
the rest fits ``max_chars``. A cut never separates a tool call from its result:
the window never starts with a ``tool`` message (providers reject a tool result
whose assistant ``tool_calls`` message is missing).
"""

from __future__ import annotations

import json
from typing import Any


def _size(message: dict[str, Any]) -> int:
    size = len(str(message.get("content") or ""))
    if message.get("tool_calls"):
        size += len(json.dumps(message["tool_calls"], ensure_ascii=False))
    return size


def window(messages: list[dict[str, Any]], max_chars: int) -> list[dict[str, Any]]:
    """Return the messages to send: the leading system messages (the prompt, then the recalled memory
    and the session's state, rules M4 and M6) plus the newest that fit ``max_chars``.

    The newest user message and everything after it are always kept, even if larger.
    """
    if not messages:
        return []
    lead = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
    head = messages[:lead]
    body = messages[len(head):]
    last_user = max((i for i, m in enumerate(body) if m.get("role") == "user"), default=0)
    budget = max_chars - sum(_size(m) for m in head)
    start = len(body)
    used = 0
    for i in range(len(body) - 1, -1, -1):
        used += _size(body[i])
        if used > budget and i < last_user:
            break
        start = i
    while start < len(body) and body[start].get("role") == "tool":
        start += 1
    return head + body[start:]
