"""Provider wire shapes the scripted model server can play (``Turn.shape`` / ``ScriptedModel(shape=...)``).

Each shape is how one family of servers streams the same answer (rule A17, docs/architecture.md
"The model stream reader"; the byte-level matrix: tests/unit/wireshapes.py):

- ``openai``: a call's id and name once, then its arguments in pieces by ``index``; reasoning as
  ``reasoning_content``; ``finish_reason`` ``tool_calls``; a usage-only last chunk (the default).
- ``repeated_names``: the call's id, type and name repeated in every chunk (MiniMax through NVIDIA
  NIM, Fireworks-hosted Kimi, some OpenAI models).
- ``no_index``: tool-call pieces without ``index``, found by their id (Gemini's calls through a gateway).
- ``whole_calls``: each call whole in one chunk, ``finish_reason: stop`` after them (GLM, older Ollama).
- ``think_tags``: reasoning inline at the start of the content as ``<think>…</think>`` (models
  served without a reasoning parser, MiniMax-M2).
- ``usage_in_choice``: usage inside the finishing choice, no usage-only chunk (Kimi's own API).
- ``non_streamed``: one ``chat.completion`` JSON body although a stream was asked for.
"""

from __future__ import annotations

from typing import Any

SHAPES = ("openai", "repeated_names", "no_index", "whole_calls", "think_tags", "usage_in_choice", "non_streamed")
Call = tuple[str, str, str]
"""A scripted call as ``(id, name, arguments as JSON text)``."""


def check(shape: str) -> str:
    """``shape`` when it is one of ``SHAPES``; raises ``ValueError`` otherwise."""
    if shape not in SHAPES:
        raise ValueError(f"unknown provider shape {shape!r}; one of {', '.join(SHAPES)}")
    return shape


def reasoning_deltas(reasoning: str, shape: str) -> list[dict[str, Any]]:
    """The deltas carrying ``reasoning`` before the answer (in two pieces)."""
    if not reasoning:
        return []
    half = len(reasoning) // 2 or 1
    parts = [p for p in (reasoning[:half], reasoning[half:]) if p]
    if shape == "think_tags":
        return [{"content": "<think>"}, *({"content": p} for p in parts), {"content": "</think>\n\n"}]
    return [{"reasoning_content": p} for p in parts]


def tool_deltas(calls: list[Call], shape: str) -> list[dict[str, Any]]:
    """The deltas carrying ``calls``: each call's arguments in two pieces, as ``shape`` sends them."""
    out: list[dict[str, Any]] = []
    for i, (call_id, name, raw) in enumerate(calls):
        if shape == "whole_calls":
            out.append({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                        "function": {"name": name, "arguments": raw}}]})
            continue
        half = len(raw) // 2
        pieces = ["", raw[:half], raw[half:]]
        for n, piece in enumerate(pieces):
            entry: dict[str, Any] = {"function": {"arguments": piece}}
            if shape != "no_index":
                entry["index"] = i
            if n == 0 or shape in ("repeated_names", "no_index"):
                entry["id"] = call_id
            if n == 0 or shape == "repeated_names":
                entry["type"] = "function"
                entry["function"]["name"] = name
            out.append({"tool_calls": [entry]})
    return out


def finish_reason(shape: str, has_calls: bool) -> str:
    """The last chunk's ``finish_reason``."""
    return "tool_calls" if has_calls and shape != "whole_calls" else "stop"


def completion(model: str, cid: str, created: int, content: str, reasoning: str, calls: list[Call],
               usage: dict[str, int]) -> dict[str, Any]:
    """The ``non_streamed`` shape's whole ``chat.completion`` body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]
    return {"id": cid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": usage}
