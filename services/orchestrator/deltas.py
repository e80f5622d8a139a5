"""Streaming answer text into the task's event log with natural batching.

A model streams many small deltas; each ``answer.delta`` is one Redis append, and on
a busy replica the appends, not the model, become the cost (each is a socket write
and a Lua call). ``DeltaWriter`` keeps at most one append in flight per model call:
the first delta goes out at once (time to first token is untouched), and text that
arrives while an append is on the wire is joined into the next one. Under light load
every model chunk is its own event; under heavy load events carry more text and
there are fewer of them. Order and content are preserved exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class DeltaWriter:
    """Append streamed text through ``emit`` with at most one append in flight.

    Args:
        emit: coroutine function appending one ``answer.delta`` with the given text.
        after: an append that must land first (the step's ``step.started``, sent while
            the model request goes out); awaited before the first delta and by ``flush()``.

    ``add(text)`` never waits for Redis (it yields to the event loop once when it
    starts an append, so the append is on the wire before the caller parses the next
    chunks already buffered); ``flush()`` waits until everything added has been
    appended and re-raises the first append error (call it before emitting any other
    event of the step, so the log keeps its order).
    """

    def __init__(self, emit: Callable[[str], Awaitable[None]], after: Awaitable[None] | None = None) -> None:
        self._emit = emit
        self._after = after
        self._buffer: list[str] = []
        self._task: asyncio.Task[None] | None = None

    async def add(self, text: str) -> None:
        """Queue ``text``; start an append now unless one is already in flight."""
        if not text:
            return
        self._buffer.append(text)
        if self._task is None or self._task.done():
            if self._task is not None and self._task.exception() is not None:
                return  # a failed append is reported by flush(); stop writing
            self._task = asyncio.create_task(self._drain())
            await asyncio.sleep(0)  # let the append start now, not after the buffered chunks are parsed

    async def _drain(self) -> None:
        if self._after is not None:
            await self._after
        while self._buffer:
            text = "".join(self._buffer)
            self._buffer.clear()
            await self._emit(text)

    async def flush(self) -> None:
        """Wait until all added text is appended. Raises what a failed append raised."""
        if self._task is not None:
            await self._task
        await self._drain()
