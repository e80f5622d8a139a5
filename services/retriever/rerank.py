"""Rule K11 (docs/rules.md): a cross-encoder rerank endpoint over HTTP, the ``/rerank`` protocol.

text-embeddings-inference (TEI), vLLM, Infinity, Jina and Cohere-compatible servers take a query and a
list of documents and answer one relevance score per document. Their bodies differ in two ways:

- request: TEI reads ``{"query", "texts", "truncate"}``; the others ``{"query", "documents", "top_n",
  "model"}``. ``protocol`` chooses: ``cohere``, ``tei``, or ``auto`` (default), one body with both field
  sets: TEI's JSON reader ignores unknown fields, vLLM accepts them (it logs their names), Infinity
  ignores them; a strict hosted API may refuse them, so ``cohere`` is there for it;
- response: TEI answers a list ``[{"index": i, "score": s}, ...]``, the others
  ``{"results": [{"index": i, "relevance_score": s}, ...]}``. Both are read in every mode.

``RerankEndpoint.scores(query, documents)`` returns one score per document (None: the server left it out,
e.g. it cut to its own ``top_n``) or raises ``StageError`` whose ``outcome`` names what went wrong
(``timeout``, ``unavailable``, ``server_error``, ``rejected``, ``malformed``). The caller
(``assist.SearchAssist``) bounds the call's whole duration and fails open.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import httpx

PROTOCOLS = ("auto", "cohere", "tei")
"""Request bodies of ``RerankEndpoint`` (see the module docstring)."""


class StageError(Exception):
    """A retrieval helper call (rerank endpoint, model rewrite or rerank) that failed; ``outcome`` is one of
    ``timeout``, ``unavailable`` (no connection), ``server_error`` (5xx, 429), ``rejected`` (another 4xx: a
    setting is wrong), ``malformed`` (an answer that cannot be used)."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


def request_body(protocol: str, query: str, documents: Sequence[str], model: str | None) -> dict[str, Any]:
    """The JSON body for ``protocol`` (``auto`` | ``cohere`` | ``tei``); every document is asked for
    (``top_n`` = their number). Raises ``ValueError`` for another protocol."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"rerank protocol {protocol!r}: one of {', '.join(PROTOCOLS)}")
    body: dict[str, Any] = {"query": query}
    if protocol in ("auto", "cohere"):
        body |= {"documents": list(documents), "top_n": len(documents)}
        if model:
            body["model"] = model
    if protocol in ("auto", "tei"):
        body |= {"texts": list(documents), "truncate": True}
    return body


def parse_scores(body: Any, n: int) -> list[float | None]:
    """One score per document from a TEI list or a ``{"results": [...]}`` answer (``relevance_score`` or
    ``score``). A document the answer leaves out gets None. Raises ``StageError("malformed")`` for another
    shape, an index outside ``0..n-1`` or given twice, or a score that is not a finite number."""
    rows = body.get("results") if isinstance(body, dict) else body
    if not isinstance(rows, list) or not rows:
        raise StageError("malformed", f"no list of results in {str(body)[:200]}")
    scores: list[float | None] = [None] * n
    for row in rows:
        if not isinstance(row, dict):
            raise StageError("malformed", f"result is not an object: {str(row)[:100]}")
        index, score = row.get("index"), row.get("relevance_score", row.get("score"))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
            raise StageError("malformed", f"index {index!r} outside 0..{n - 1}")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise StageError("malformed", f"score {score!r} of index {index} is not a number")
        if scores[index] is not None:
            raise StageError("malformed", f"index {index} given twice")
        scores[index] = float(score)
    return scores


def order_by_scores(scores: Sequence[float | None]) -> list[int]:
    """Positions ordered by score, highest first; ties and unscored positions keep their order, unscored last."""
    return sorted(range(len(scores)), key=lambda i: (scores[i] is None, -(scores[i] or 0.0), i))


class RerankEndpoint:
    """A ``/rerank`` endpoint (thread-safe: one pooled ``httpx.Client``).

    Args:
        url: the full URL, e.g. ``http://tei:8080/rerank`` or ``https://api.jina.ai/v1/rerank``.
        model: ``model`` field (Cohere, Jina, vLLM), or None.
        api_key: sent as ``Authorization: Bearer``, or None.
        protocol: ``auto`` | ``cohere`` | ``tei`` (module docstring).
        timeout_s: httpx timeout of each phase (connect, write, read; seconds). The caller bounds the whole call.
        transport: an httpx transport (tests), or None.
    """

    def __init__(self, url: str, *, model: str | None = None, api_key: str | None = None, protocol: str = "auto",
                 timeout_s: float = 2.0, transport: httpx.BaseTransport | None = None) -> None:
        request_body(protocol, "", [], None)  # refuses an unknown protocol at start
        self.url, self.model, self.protocol = url, model, protocol
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(timeout=httpx.Timeout(timeout_s), headers=headers, transport=transport,
                                   limits=httpx.Limits(max_connections=16, max_keepalive_connections=8))

    def scores(self, query: str, documents: Sequence[str]) -> list[float | None]:
        """One relevance score per document (None: not scored), higher = more relevant.

        Raises ``StageError`` (``timeout``, ``unavailable``, ``server_error``, ``rejected``, ``malformed``).
        """
        body = request_body(self.protocol, query, documents, self.model)
        try:
            response = self.client.post(self.url, json=body)
        except httpx.TimeoutException as exc:
            raise StageError("timeout", f"{type(exc).__name__}: {exc}"[:300]) from exc
        except httpx.HTTPError as exc:
            raise StageError("unavailable", f"{type(exc).__name__}: {exc}"[:300]) from exc
        if response.status_code >= 400:
            outcome = "server_error" if response.status_code >= 500 or response.status_code == 429 else "rejected"
            raise StageError(outcome, f"HTTP {response.status_code}: {response.text[:200]}")
        try:
            data = response.json()
        except ValueError as exc:
            raise StageError("malformed", f"not JSON: {response.text[:200]!r}") from exc
        return parse_scores(data, len(documents))

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()
