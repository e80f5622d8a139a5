"""Rule K21 (docs/rules.md): the e5 query work of concurrent searches runs as one batch.

Each ``kb_search`` needs the e5 vectors of its query forms (the question and its expansion) and, over the whole
law corpus, the exact e5 nearest law chunks (rule K7). Both are CPU work: one e5 engine call costs about 40 ms
of CPU for one text and about 30 ms per text in a batch of four or more, and the nearest chunks are a product
with the 38,795 x 384 law matrix, which is memory bound (one pass over its 60 MB: 5.8 ms of CPU for one query
row, 14.7 ms for eight, 21.6 ms for thirty-two, one BLAS thread). So ``QueryBatcher`` has ONE worker thread: a search hands it its forms and gets a
future; the thread takes every request waiting at that moment (up to ``max_texts`` distinct texts), embeds their
texts in one engine call (cached by text, ``Embedder.embed_queries``), finds the nearest chunks of all of them in
one matrix product and completes their futures. A request that arrives while a batch runs waits for the next
one, so nothing waits for a timer: alone, a search costs what it did; under load the batches grow with it.

The engine and numpy release the GIL, so the thread runs beside the searches' first stages.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

log = logging.getLogger("conduit.retriever.e5batch")

MAX_TEXTS = 32
"""Distinct texts per engine call (32: the engine's batch; more gains nothing per text, measured here)."""


@dataclass
class _Request:
    forms: list[str]
    nearest: int
    future: Future


class QueryBatcher:
    """One worker thread that serves the e5 query requests of concurrent searches in batches (module doc).

    Args:
        embed: ``Embedder.embed_queries`` of the e5 embedder: texts -> float32 unit rows ``(len, dim)``;
            raises ``EmbeddingError``.
        nearest_many: ``(query rows (m, dim)) -> cosines (law chunks, m)``: the batch's one product with the law
            matrix.
        pick: ``(cosines (law chunks,), n) -> [(point id, cosine)]``, the ``n`` best first: one request's
            nearest chunks from the best of its own columns.
        max_texts: distinct texts per engine call.
    """

    def __init__(self, embed: Callable[[list[str]], np.ndarray],
                 nearest_many: Callable[[np.ndarray], np.ndarray],
                 pick: Callable[[np.ndarray, int], list[tuple[str, float]]],
                 max_texts: int = MAX_TEXTS) -> None:
        self._embed, self._many, self._pick, self.max_texts = embed, nearest_many, pick, max_texts
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()  # None: stop
        self._held: _Request | None = None  # taken from the queue but over the batch's text limit: the next batch's first
        self.batches = 0
        """Engine calls made (a count for tests and logs)."""
        self.largest = 0
        """Most requests one batch served."""
        threading.Thread(target=self._loop, name="e5-query-batch", daemon=True).start()

    def submit(self, forms: Sequence[str], nearest: int = 0) -> Future:
        """Queue one search's query ``forms`` (deduplicated) and the number of nearest law chunks it wants (0: none).

        The future gives ``(vectors (len(unique forms), dim), nearest list)``; ``result()`` raises what the engine
        raised (``EmbeddingError``) for every request of that batch."""
        future: Future = Future()
        self._queue.put(_Request(list(dict.fromkeys(forms)), nearest, future))
        return future

    def close(self) -> None:
        """Stop the worker thread once the requests queued before this call are served."""
        self._queue.put(None)

    def _take(self) -> list[_Request] | None:
        """The next batch: a request (waiting for one), then every waiting request while the texts fit;
        None once ``close`` was called and nothing before it is left."""
        first = self._held or self._queue.get()
        self._held = None
        if first is None:
            return None
        batch, texts = [first], set(first.forms)
        while True:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                return batch
            if request is None:
                self._queue.put(None)  # stop after this batch
                return batch
            if len(texts | set(request.forms)) > self.max_texts:
                self._held = request
                return batch
            batch.append(request)
            texts.update(request.forms)

    def _loop(self) -> None:
        while (batch := self._take()) is not None:
            try:
                self._serve(batch)
            except Exception as exc:  # noqa: BLE001 - every waiting search gets the error (fail-open upstream)
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(exc)

    def _serve(self, batch: list[_Request]) -> None:
        """Embed the batch's distinct texts in one call, find every request's nearest chunks in one product."""
        texts = list(dict.fromkeys(t for r in batch for t in r.forms))
        vectors = self._embed(texts)
        self.batches += 1
        self.largest = max(self.largest, len(batch))
        row = {t: n for n, t in enumerate(texts)}
        needed = sorted({row[t] for r in batch if r.nearest > 0 for t in r.forms})  # rows of requests wanting chunks
        scores = self._many(vectors[needed]) if needed else None
        col = {n: c for c, n in enumerate(needed)}
        for request in batch:
            rows = [row[t] for t in request.forms]
            found: list[tuple[str, float]] = []
            if request.nearest > 0 and scores is not None:
                found = self._pick(scores[:, [col[n] for n in rows]].max(axis=1), request.nearest)
            request.future.set_result((vectors[rows], found))
