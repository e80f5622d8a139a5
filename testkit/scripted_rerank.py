"""A scripted ``/rerank`` server for tests and benchmarks (rule K11): the stand-in for a cross-encoder served by
text-embeddings-inference, vLLM, Jina or a Cohere-compatible API.

It speaks real HTTP (Starlette on uvicorn in a thread) and both answer shapes: ``shape="tei"`` answers a list
``[{"index": i, "score": s}, ...]``, ``shape="cohere"`` ``{"results": [{"index": i, "relevance_score": s}, ...]}``,
best first, cut to the request's ``top_n``. It reads the documents from ``texts`` (TEI) or ``documents``.
The score is a function of (query, document); the default, ``bigram_overlap``, is the share of the query's
character bigrams found in the document: a scorer for the mechanics, not a model of relevance.

Behaviour for the failure paths, set between requests: ``status`` (answer that HTTP error), ``delay_s`` (sleep
before answering), ``raw`` (send this body as is, e.g. not JSON or wrong indices). ``requests`` keeps every
request body received.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from testkit.threadserver import ThreadedServer


def _bigrams(text: str) -> set[str]:
    chars = [c for c in text.lower() if not c.isspace()]
    return {chars[i] + chars[i + 1] for i in range(len(chars) - 1)}


def bigram_overlap(query: str, document: str) -> float:
    """Share (0..1) of ``query``'s character bigrams that occur in ``document``."""
    wanted = _bigrams(query)
    return len(wanted & _bigrams(document)) / len(wanted) if wanted else 0.0


class ScriptedReranker(ThreadedServer):
    """Serve ``/rerank`` on 127.0.0.1 (see the module docstring); ``url`` is the ``CONDUIT_RERANK_URL`` to give.

    Args:
        shape: ``tei`` or ``cohere`` (the answer's shape).
        score: (query, document) -> relevance, higher is better.
        score_many: (query, documents) -> one relevance per document, for a scorer that reads the whole request
            (``bench/retrieval/standin.py``); replaces ``score`` when given.
    """

    def __init__(self, shape: str = "tei", score: Callable[[str, str], float] = bigram_overlap,
                 score_many: Callable[[str, list[str]], list[float]] | None = None) -> None:
        if shape not in ("tei", "cohere"):
            raise ValueError(f"shape {shape!r}: tei or cohere")
        self.shape, self.score = shape, score
        self.score_many = score_many or (lambda query, docs: [self.score(query, d) for d in docs])
        self.status: int | None = None
        self.delay_s = 0.0
        self.raw: str | None = None
        self.requests: list[dict[str, Any]] = []
        super().__init__()

    @property
    def url(self) -> str:
        """The endpoint's full URL."""
        return f"http://127.0.0.1:{self.port}/rerank"

    async def _rerank(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.status:
            return JSONResponse({"error": "scripted error"}, status_code=self.status)
        if self.raw is not None:
            return Response(self.raw, media_type="application/json")
        query, docs = str(body.get("query") or ""), body.get("texts") or body.get("documents") or []
        scores = self.score_many(query, [str(d) for d in docs])
        ranked = sorted(enumerate(scores), key=lambda r: -r[1])
        ranked = ranked[: int(body.get("top_n") or len(ranked))]
        if self.shape == "tei":
            return JSONResponse([{"index": i, "score": s} for i, s in ranked])
        return JSONResponse({"id": "scripted", "results": [{"index": i, "relevance_score": s} for i, s in ranked]})

    def start(self) -> ScriptedReranker:
        """Start serving in a background thread; returns self once the port is open."""
        self.serve([Route("/rerank", self._rerank, methods=["POST"])])
        return self

