"""Rules K11-K13 (docs/rules.md) around ``KbSearcher.search``: the helpers that call out of the retriever.

- rule K11, ``rerank``: a cross-encoder ``/rerank`` endpoint (``rerank.RerankEndpoint``, ``rerank_url``) reorders
  the top ``rerank_top_n`` (24) fused candidates before the top k are cut;
- rule K12, ``model_rewrite``: the model's rewrite of the question (``modelhelp.ModelHelp.rewrite``), sent
  beside the first round (rule K18: a coroutine on the model help's own loop); its query and sub-queries become
  more rounds (``pipeline``);
- rule K13, ``model_rerank``: without a rerank endpoint, the model orders the top
  ``retrieval_model_rerank_top_n`` (10) candidates.

Every call is bounded (its timeout is the longest the search waits for it: the wait on its future) and fails
OPEN: on any error the question is searched as asked and the fused order stands. Each call leaves a trace:
an ``Attempt`` of kind ``<stage>:<outcome>`` (``query`` = its wait in ms and, on failure, why), a log line on
failure, the counter ``conduit_retrieval_stage_total{stage, outcome}`` and, on the evidence items,
``metadata["stages"]`` (the stage attempts of the search), ``rerank_score`` (rule K11) or ``model_rank`` (K13).
Outcomes: ``ok``, ``timeout``, ``unavailable``, ``server_error``, ``rejected``, ``malformed``, ``error``
(anything else) and ``open`` (skipped: the stage's breaker is open after ``model_breaker_failures``
failures in a row (timeout, unavailable, server_error, rejected), for ``model_breaker_cooldown_s``, then one trial call).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from conduit.policy.breaker import CircuitBreaker
from conduit.runtime import metrics
from conduit.runtime.settings import LlmSettings, RetrievalSettings, Settings
from services.retriever.modelhelp import ModelHelp
from services.retriever.rounds import Attempt, Rewrite
from services.retriever.packing import select_passages
from services.retriever.rerank import RerankEndpoint, StageError, order_by_scores
from services.retriever.store import Hit

log = logging.getLogger("conduit.retriever.assist")

STAGES = ("rerank", "model_rewrite", "model_rerank")
BREAKER_FAILURES = frozenset({"timeout", "unavailable", "server_error", "rejected"})
"""Outcomes that count towards a breaker: the service is down or slow, or refuses the call (a wrong key, URL or model
name stays wrong); a sloppy answer says nothing about the next one."""
MODEL_CANDIDATE_CHARS = 300
"""Characters of each candidate's text shown to the model (rule K13): 10 candidates stay a short prompt."""


class Breaker:
    """Rule K11-K13's breaker: ``conduit.policy.breaker.CircuitBreaker`` (open after ``failures`` in a row, one trial
    call per ``cooldown_s``) behind a lock, fed call outcomes (those in ``BREAKER_FAILURES`` count as failures)."""

    def __init__(self, failures: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._circuit, self.clock = CircuitBreaker(failures, cooldown_s), clock
        self._lock = threading.Lock()

    def allow(self) -> bool:
        """True when a call may go out (closed, or the one trial after the cool-down)."""
        with self._lock:
            return self._circuit.allow(self.clock())

    def record(self, outcome: str) -> None:
        """Count a call's ``outcome``: a failure in ``BREAKER_FAILURES``, anything else closes the breaker."""
        with self._lock:
            if outcome in BREAKER_FAILURES:
                self._circuit.failure(self.clock())
            else:
                self._circuit.success()


@dataclass
class Pending:
    """A helper call in flight: its ``future`` (None: not sent, ``outcome`` says why), start and time limit."""

    stage: str
    future: Future | None
    started: float
    timeout_s: float
    outcome: str = "ok"


def candidate_text(hit: Hit, question: str, limit: int) -> str:
    """What a reranker reads of a candidate: its title and locator, then its text cut to ``limit`` characters
    (the paragraphs with the most question bigrams, ``packing.select_passages``)."""
    p = hit.payload
    head = " ".join(str(x) for x in (p.get("title"), p.get("locator")) if x)
    text = select_passages(str(p.get("parent_text") or p.get("text") or ""), question, limit)
    return f"{head}\n{text}" if head else text


class SearchAssist:
    """The helpers of one retriever (thread-safe; shared by its searches).

    Args:
        retrieval: ``rerank_*``, ``retrieval_model_*`` (``settings.retrieval``).
        llm: ``model_breaker_*``, whether a model is configured (``settings.llm``).
        endpoint: the rerank endpoint (rule K11), or None.
        model: the model's help (rules K12, K13), or None; its rerank runs only without ``endpoint``.
    """

    def __init__(self, retrieval: RetrievalSettings, llm: LlmSettings, endpoint: RerankEndpoint | None = None,
                 model: ModelHelp | None = None) -> None:
        self.retrieval, self.endpoint, self.model = retrieval, endpoint, model
        self.rewrite_on = model is not None and retrieval.model_rewrite_on(llm.configured)
        self.model_rerank_on = model is not None and endpoint is None and retrieval.model_rerank_on(llm.configured)
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kb-assist")  # rule K11 (blocking httpx)
        self._breakers = {key: Breaker(llm.model_breaker_failures, llm.model_breaker_cooldown_s)
                          for key in ("endpoint", "model")}

    @classmethod
    def from_settings(cls, settings: Settings) -> SearchAssist | None:
        """The helpers the settings turn on (``rerank_url``; a model with ``retrieval_model_rewrite`` /
        ``retrieval_model_rerank``), or None when none is."""
        endpoint = None
        if settings.retrieval.rerank_url:
            endpoint = RerankEndpoint(settings.retrieval.rerank_url, model=settings.retrieval.rerank_model, api_key=settings.retrieval.rerank_api_key,
                                      protocol=settings.retrieval.rerank_protocol, timeout_s=settings.retrieval.rerank_timeout_s)
        on = settings.llm.configured
        wants_model = settings.retrieval.model_rewrite_on(on) or settings.retrieval.model_rerank_on(on)
        if endpoint is None and not wants_model:
            return None
        return cls(settings.retrieval, settings.llm, endpoint,
                   ModelHelp(settings.retrieval, settings.llm) if wants_model else None)

    @property
    def depth(self) -> int:
        """Fused candidates the reorder reads (0: none)."""
        if self.endpoint is not None:
            return self.retrieval.rerank_top_n
        return self.retrieval.retrieval_model_rerank_top_n if self.model_rerank_on else 0

    def _breaker(self, stage: str) -> Breaker:
        return self._breakers["endpoint" if stage == "rerank" else "model"]

    def _start(self, stage: str, send: Callable[[], Future], timeout_s: float) -> Pending:
        """Send a call (``send()`` returns its future) unless the stage's breaker is open."""
        if not self._breaker(stage).allow():
            return Pending(stage, None, time.perf_counter(), timeout_s, outcome="open")
        return Pending(stage, send(), time.perf_counter(), timeout_s)

    def _finish(self, pending: Pending) -> tuple[Any, str, str, float]:
        """Wait for ``pending`` within its time limit: (value or None, outcome, why it failed ("" when ok), milliseconds
        waited); counted, logged on failure, never raises."""
        value, outcome, why = None, pending.outcome, "circuit open"
        if pending.future is not None:
            try:
                value = pending.future.result(timeout=max(0.0, pending.timeout_s - (time.perf_counter() - pending.started)))
            except FutureTimeout:
                pending.future.cancel()
                outcome, why = "timeout", f"no answer within {pending.timeout_s:g} s"
            except StageError as exc:
                outcome, why = exc.outcome, str(exc)
            except Exception as exc:  # noqa: BLE001 - a helper may never cost the search (fail-open)
                outcome, why = "error", f"{type(exc).__name__}: {exc}"[:300]
            self._breaker(pending.stage).record(outcome)
        waited = time.perf_counter() - pending.started
        metrics.RETRIEVAL_STAGE.labels(stage=pending.stage, outcome=outcome).inc()
        metrics.RETRIEVAL_STAGE_LATENCY.labels(stage=pending.stage).observe(waited)
        detail = ""
        if outcome != "ok":
            log.warning("kb_search %s failed open (%s): %s", pending.stage, outcome, why)
            detail = why[:160]
        return value, outcome, detail, round(waited * 1000, 1)

    # ------------------------------------------------------------------ rule K12
    def start_rewrite(self, question: str) -> Pending | None:
        """Rule K12: send the rewrite call (None when it is off); ``rewritten`` collects it."""
        if not self.rewrite_on or self.model is None:
            return None
        timeout_s = self.retrieval.retrieval_model_rewrite_timeout_s
        model = self.model
        return self._start("model_rewrite", lambda: model.rewrite(question, timeout_s), timeout_s)

    def rewritten(self, pending: Pending, attempts: list[Attempt]) -> Rewrite | None:
        """The rewrite (None: failed open), its ``Attempt`` appended (``returned`` = ``kept`` = queries it gave)."""
        rewrite, outcome, detail, ms = self._finish(pending)
        given = 0 if rewrite is None else int(rewrite.query is not None) + len(rewrite.sub_queries)
        attempts.append(Attempt(f"model_rewrite:{outcome}", detail, given, given, None, ms))
        return rewrite

    # ------------------------------------------------------------------ rules K11, K13
    def finish(self, question: str, ranked: list[Hit], attempts: list[Attempt], model_rerank: bool = True) -> list[Hit]:
        """``ranked`` (fused order, at least ``depth`` long when there are that many) reordered by the rerank
        endpoint (rule K11) or else the model (rule K13; not with ``model_rerank`` False, rule K26), failing open
        to the fused order; every hit is marked with the search's stage attempts (``metadata["stages"]``)."""
        if self.endpoint is not None:
            ranked = self._by_endpoint(question, ranked, attempts)
        elif self.model_rerank_on and model_rerank:
            ranked = self._by_model(question, ranked, attempts)
        stages = ",".join(a.kind for a in attempts if a.kind.split(":")[0] in STAGES)
        if stages:
            for h in ranked:
                h.payload = {**h.payload, "stages": stages}
        return ranked

    def _by_endpoint(self, question: str, ranked: list[Hit], attempts: list[Attempt]) -> list[Hit]:
        s, endpoint = self.retrieval, self.endpoint
        n = min(len(ranked), s.rerank_top_n)
        if n < 2 or endpoint is None:
            return ranked
        docs = [candidate_text(h, question, s.rerank_max_chars) for h in ranked[:n]]
        scores, outcome, detail, ms = self._finish(self._start(
            "rerank", lambda: self._pool.submit(endpoint.scores, question, docs), s.rerank_timeout_s))
        given = [x for x in scores or [] if x is not None]
        attempts.append(Attempt(f"rerank:{outcome}", detail, n, len(given),
                                round(max(given), 4) if given else None, ms))
        if scores is None:
            return ranked
        for h, score in zip(ranked, scores):
            if score is not None:
                h.payload = {**h.payload, "rerank_score": round(score, 4)}
        return [ranked[i] for i in order_by_scores(scores)] + ranked[n:]

    def _by_model(self, question: str, ranked: list[Hit], attempts: list[Attempt]) -> list[Hit]:
        s, model = self.retrieval, self.model
        n = min(len(ranked), s.retrieval_model_rerank_top_n)
        if n < 2 or model is None:
            return ranked
        docs = [candidate_text(h, question, MODEL_CANDIDATE_CHARS) for h in ranked[:n]]
        timeout_s = s.retrieval_model_rerank_timeout_s
        order, outcome, detail, ms = self._finish(self._start("model_rerank",
                                                              lambda: model.rerank(question, docs, timeout_s), timeout_s))
        moved = 0 if order is None else sum(i != k for k, i in enumerate(order))
        attempts.append(Attempt(f"model_rerank:{outcome}", detail, n, moved, None, ms))
        if order is None:
            return ranked
        head = [ranked[i] for i in order]
        for rank, h in enumerate(head, 1):
            h.payload = {**h.payload, "model_rank": rank}
        return head + ranked[n:]

    def close(self) -> None:
        """Stop the worker threads and close the HTTP clients."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        for client in (self.endpoint, self.model):
            if client is not None:
                client.close()
