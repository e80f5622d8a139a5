"""Rule M15 (docs/agent-rules.md): the memory index requests (a finished task's facts, its episode and its
cache entry, rule M1) are embedded in batches, after the recalls.

``IndexBatcher.submit(items, replaced, cache)`` waits until its request is embedded and returns its
``(points, delete_ids)`` (``MemoryIndex.embed``'s shape), so its bus job ends only then, as before
(nothing more is lost on a kill than a running job). A batch starts ``INDEX_DELAY_S`` after its first
request, and not while a recall runs (``recalling``), up to ``INDEX_MAX_WAIT_S``: the requests that
came meanwhile are embedded in one backend call for their items and one for their cache questions.
Why: the episode of the answer a person just read was embedded at the moment their next question's
recall ran (both in this process, on the same cores), and each request was one embedding call of its
own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

from contracts.memory import CacheEntry, MemoryItem
from services.retriever.store import ChunkPoint

INDEX_DELAY_S = 0.05
"""Seconds a batch waits after its first request for others (and for a recall that is on its way)."""
INDEX_MAX_WAIT_S = 1.0
"""Longest wait of a batch behind running recalls (seconds): busy recalls never starve the writes."""

Request = tuple[list[MemoryItem], list[str], CacheEntry | None]
Embedded = tuple[list[ChunkPoint], list[str]]


class IndexBatcher:
    """Batches ``MemoryIndex.embed`` calls (see the module docstring).

    Args:
        index: has ``embed_many(requests) -> list[Embedded]`` (blocking; run in a worker thread).
        delay_s, max_wait_s: ``INDEX_DELAY_S``, ``INDEX_MAX_WAIT_S``.
    """

    def __init__(self, index, delay_s: float = INDEX_DELAY_S, max_wait_s: float = INDEX_MAX_WAIT_S) -> None:  # noqa: ANN001
        self.index, self.delay_s, self.max_wait_s = index, delay_s, max_wait_s
        self._pending: list[tuple[Request, asyncio.Future[Embedded]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._recalls = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        self.batches = 0
        """Embedding batches run (for tests and logs)."""

    @contextlib.contextmanager
    def recalling(self) -> Iterator[None]:
        """Mark a recall as running: no batch starts until it ends (or ``max_wait_s`` passed)."""
        self._recalls += 1
        self._quiet.clear()
        try:
            yield
        finally:
            self._recalls -= 1
            if self._recalls == 0:
                self._quiet.set()

    async def submit(self, items: list[MemoryItem], replaced: list[str], cache: CacheEntry | None) -> Embedded:
        """The request's embedded points and the point ids to delete, once its batch ran. Raises what
        ``embed_many`` raised (``EmbeddingError``) for every request of the batch."""
        done: asyncio.Future[Embedded] = asyncio.get_running_loop().create_future()
        self._pending.append(((items, replaced, cache), done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_later())
        return await done

    async def _flush_later(self) -> None:
        started = time.monotonic()
        await asyncio.sleep(self.delay_s)
        left = self.max_wait_s - (time.monotonic() - started)
        if left > 0 and not self._quiet.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), left)
        batch, self._pending = self._pending, []
        self.batches += 1
        try:
            results = await asyncio.to_thread(self.index.embed_many, [r for r, _ in batch])
        except Exception as exc:  # noqa: BLE001 - each waiting request gets the error
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
        else:
            for (_, done), result in zip(batch, results, strict=True):
                if not done.done():
                    done.set_result(result)
        finally:  # requests that came while this batch was embedded get a batch of their own
            if self._pending:
                self._flusher = asyncio.create_task(self._flush_later())
