"""``kb_search``: the knowledge-base search pipeline (rules K1-K22, docs/rules.md).

For one query and tenant (numbers are settings; the defaults are given):

1. (rule K1) hybrid search with the query as given: ONE Qdrant query fusing by RRF (k=60) a
   dense branch for the question as asked, a dense branch for its expansion
   (``expansion.py``; both embedded in one backend call; without expansion the
   question's vector twice, ``DENSE_BRANCHES``) and a BM25 sparse branch for the expansion; keep hits
   whose DENSE COSINE (the better of the two query vectors) is >= ``retrieval_min_score``
   (0.30; a hit without a dense score passes).
   Files are stored as small child chunks (<= 800 chars) and long law articles also
   as item chunks (one per paragraph/enumerated item): hits are merged by their
   parent (``payload.parent_id``, the evidence ``chunk_id``: the parent chunk, or the
   article's point) keeping the best child's fused and dense scores, and the parent's
   text (the article; a file's 3,500-4,000-char section) is what gets packed;
2. (rule K2) if nothing is kept or the best dense cosine is < ``retrieval_retry_below`` (0.50),
   search once more with a locally compressed query (question words, fillers and
   punctuation removed, no model call) and merge by chunk id keeping the higher score;
3. (rule K3) if the query names several topics (tax kinds, social insurance, housing fund,
   invoices) and a topic is in no kept hit, search once for that topic (simple
   version; TODO(later issue): smarter sub-queries per topic);
   (rule K9) each of the model's ``sub_queries`` (at most 2) is one more round, merged the same way;
4. (rule K7, when ``retrieval_second_stage`` is on) every round returns a pool of
   ``retrieval_pool`` (100) chunks instead of 18, each scored by its e5 cosine to the question
   and its expansion (``rescoring.py``; passage vectors from the shipped e5 law index), and the
   merged pool is ordered by the fusion of its first-stage (RRF) rank and its e5 rank, the law the question names
   or implies boosted (rule K22, ``lawnames.py``);
   (rules K11-K13, ``assist.py``, when configured) the model's rewrite adds rounds (``rounds.py``), and a rerank
   endpoint reorders the top 24 candidates, or else the model the top 10 (fail-open);
   (rule K20, ``refsearch.py``, off by default) before that, the articles of the same law that the top
   ``retrieval_follow_refs`` passages cite join the pool, scored with the question, and the pool is ordered again;
5. (rule K4) keep the top ``retrieval_top_k`` (6) in that order (RRF order without rule K7), and
   pack their text: at most ``chunk_max_chars`` (2000) per item and
   ``context_max_chars`` (12000) in total; a longer text keeps
   its paragraphs with the most query character bigrams;
6. return ``EvidenceItem``s; the orchestrator's evidence pool numbers them (rule A10).

The tenant sees its own chunks and the public corpus (``tenant_id`` in
``[tenant, "_public"]``).
"""

from __future__ import annotations

import logging
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from conduit.runtime.settings import RetrievalSettings
from contracts.evidence import EvidenceItem
from services.retriever.embeddings import Embedder
from services.retriever.expansion import expand_query
from services.retriever import amendments
from services.retriever.follow import attach_refs
from services.retriever.items import LIST_QUESTION, ItemMatches, item_quotes
from services.retriever.lawnames import boosts, for_graph
from services.retriever.rounds import Attempt, plan_rounds
from services.retriever.packing import hit_text, pack
from services.retriever.rescoring import Fusion, SecondStage, fuse
from services.retriever.sparse import SparseEncoder, jieba_tokenizer
from services.retriever.refgraph import RefGraph
from services.retriever.refsearch import add_cited
from services.retriever.store import Hit, SearchFilter, VectorStore

if TYPE_CHECKING:
    from services.retriever.assist import SearchAssist

log = logging.getLogger("conduit.retriever.pipeline")

QUESTION_FILLERS = frozenset(
    """
    什么 什么样 啥 咋 怎么办 咋办 怎么 怎样 怎么样 多少 多久 几 吗 呢 吧 啊 呀 嘛 么 请问 是否 是不是 如何 哪些 哪个 哪里 哪儿
    为什么 为何 能否 能不能 可不可以 可以 有没有 一下 我 我们 想 想问 想知道 知道 请 帮 帮我 告诉 告诉我
    的 的话 了 是 和 与 及 以及 还有 分别 麻烦 谢谢 你好 您好 具体 到底 究竟
    """.split()
)
"""Tokens dropped by ``compress_query`` (question words and colloquial filler; rule K2)."""

TOPICS: dict[str, tuple[str, ...]] = {
    "增值税": ("增值税",),
    "个人所得税": ("个人所得税", "个税"),
    "企业所得税": ("企业所得税",),
    "消费税": ("消费税",),
    "关税": ("关税",),
    "社会保险": ("社会保险", "社保", "养老保险", "医疗保险", "失业保险", "工伤保险", "生育保险"),
    "住房公积金": ("住房公积金", "公积金"),
    "发票": ("发票",),
}
"""Topics of rule K3 (税种/社保/公积金/发票): canonical name -> words that name it."""

DENSE_BRANCHES = 2
"""Dense prefetches per round (against one sparse): the question as asked and its expansion;
a question without expansion gives its own vector twice, so dense:sparse stays 2:1 (Qdrant's
weighted RRF cannot do that at k = 60, see ``store.VectorStore.branch_weights``). Measured on
bench/retrieval (labelled corpus, both embedders): better hit@1 and MRR than one dense
branch (docs/retrieval.md "Fusion")."""


@dataclass
class SearchOutcome:
    """``evidence`` for the model plus the ``attempts`` made (for logs and tests)."""

    evidence: list[EvidenceItem]
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def retried(self) -> bool:
        """True when the compressed-query retry ran."""
        return any(a.kind == "compressed" for a in self.attempts)


# ====================================================================== query helpers
def _is_punct(token: str) -> bool:
    return all(unicodedata.category(ch)[0] in "PSZ" for ch in token)


def _is_cjk(ch: str) -> bool:
    return "\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff"


def _join(tokens: list[str]) -> str:
    """Join tokens: no space between two CJK tokens, one space otherwise."""
    out = ""
    for tok in tokens:
        if out and not (_is_cjk(out[-1]) and _is_cjk(tok[0])):
            out += " "
        out += tok
    return out


def compress_query(query: str) -> str:
    """Drop question words, filler (``QUESTION_FILLERS``) and punctuation; no model call.

    Works on jieba tokens, so words that merely contain a filler character stay
    whole (申请, 酒吧). Example: 「小规模纳税人适用简易计税方法的征收率是多少？」 ->
    「小规模纳税人适用简易计税方法征收率」. Returns "" when nothing is left.
    """
    tokens = [t.strip() for t in jieba_tokenizer().lcut(query)]
    return _join([t for t in tokens if t and not _is_punct(t) and t.lower() not in QUESTION_FILLERS])


def topics_in(text: str) -> list[str]:
    """Canonical ``TOPICS`` named in ``text``, in ``TOPICS`` order."""
    return [name for name, words in TOPICS.items() if any(w in text for w in words)]


# ====================================================================== the pipeline
class KbSearcher:
    """Runs ``kb_search`` over an open store with an embedder (both thread-safe).

    Args:
        retrieval: ``settings.retrieval`` (``retrieval_*``, ``chunk_max_chars``,
            ``context_max_chars``, ``retrieval_candidates``).
        embedder, store: see ``embeddings.py`` / ``store``.
        encoder: sparse query encoder (default ``SparseEncoder()``).
        stage2: the second stage (rule K7; None: off).
        assist: the rerank endpoint and the model's help (rules K11-K13, ``assist.py``; None: off).
        refs: the law corpus's reference graph (rule K16: law passages carry what they cite; None: no refs).
    """

    def __init__(self, retrieval: RetrievalSettings, embedder: Embedder, store: VectorStore,
                 encoder: SparseEncoder | None = None, stage2: SecondStage | None = None,
                 assist: SearchAssist | None = None, refs: RefGraph | None = None) -> None:
        self.retrieval, self.embedder, self.store = retrieval, embedder, store
        self.encoder = encoder or SparseEncoder()
        self.stage2, self.assist = stage2, assist
        self.refs = refs
        """The law corpus's reference graph (rule K16: law passages carry what they cite; None: no refs)."""

    def fusion(self) -> Fusion:
        """Second-stage fusion parameters from the settings (rule K7)."""
        s = self.retrieval
        return Fusion(w_first=1.0, w_e5=s.retrieval_stage2_weight, k=s.retrieval_stage2_k,
                      law_boost=s.retrieval_stage2_law_boost)

    def _round(self, kind: str, query: str, flt: SearchFilter, merged: dict[str, Hit], attempts: list[Attempt],
               e5=None, matches: ItemMatches | None = None) -> None:
        """One hybrid search for ``query``, merged into ``merged`` (by parent id, keeping the higher scores);
        ``matches`` records which chunk of each article matched best (rule K23).

        Dense branches: the query as given and, when expansion adds terms, the expanded
        query (both embedded in one backend call); sparse branch: the expanded query.
        """
        s = self.retrieval
        expanded = expand_query(query) if s.retrieval_query_expansion else query
        vectors = self.embedder.embed_queries([query] if expanded == query else [query, expanded])
        if len(vectors) < DENSE_BRANCHES:  # no expansion: the question's own list counts twice
            vectors = vectors[[0] * DENSE_BRANCHES]
        limit = max(3 * s.retrieval_top_k, s.retrieval_top_k + 10)
        hits = self.store.hybrid_query(
            vectors, self.encoder.encode_query(expanded), flt,
            limit=max(limit, s.retrieval_pool) if e5 is not None else limit, prefetch_limit=s.retrieval_candidates,
        )
        kept = [h for h in hits if h.dense_score is None or h.dense_score >= s.retrieval_min_score]
        result = _e5_result(e5) if kept else None
        if result is not None:
            queries = result.vectors  # rule K7: each chunk's e5 cosine (item chunks have their own vectors)
            cosines = self.stage2.cosines([h.id for h in kept], queries, [h.payload.get("parent_id") for h in kept],
                                          [h.payload for h in kept])
            for h, cos in zip(kept, cosines):
                h.second = cos
        for h in kept:
            h.id = h.payload.get("parent_id") or h.id  # a child/item hit stands for its parent (rule K5)
            if matches is not None:  # rule K23: the article and its items compared by their e5 cosines (K7)
                matches.note(h.id, h.payload, h.second)
            old = merged.get(h.id)
            if old is None:
                merged[h.id] = h
            else:  # same chunk (or another child of the same parent) again: keep the higher scores
                old.score = max(old.score, h.score)
                if h.dense_score is not None:
                    old.dense_score = h.dense_score if old.dense_score is None else max(old.dense_score, h.dense_score)
                if h.second is not None:
                    old.second = h.second if old.second is None else max(old.second, h.second)
        best = max((h.dense_score for h in kept if h.dense_score is not None), default=None)
        attempts.append(Attempt(kind, query, len(hits), len(kept), None if best is None else round(best, 4)))

    def _e5_candidates(self, found: list[tuple[str, float]], merged: dict[str, Hit], attempts: list[Attempt],
                       matches: ItemMatches | None = None) -> None:
        """Rule K7: add the exact e5 nearest law chunks ``found`` (``retrieval_stage2_candidates`` of them, computed
        in the worker thread beside the first stage) to the pool (the first stage misses answers its USE and BM25
        lists do not reach); they rank last in the first stage."""
        payloads = self.store.payloads([pid for pid, _ in found], None)
        floor = min((h.score for h in merged.values()), default=0.0)
        added = 0
        for pid, cos in found:
            payload = payloads.get(pid)
            if payload is None:
                continue
            key = payload.get("parent_id") or pid
            if matches is not None:  # rule K23
                matches.note(key, payload, cos)
            old = merged.get(key)
            if old is None:
                merged[key] = Hit(key, floor * 0.999, payload, None, cos)
                added += 1
            elif old.second is None or cos > old.second:
                old.second = cos
        attempts.append(Attempt("e5", "", len(found), added, None))

    def named(self, query: str) -> dict[str, float]:
        """Rule K22: ``{document id: boost}`` of the laws ``query`` names or implies (``lawnames``; the law table
        is the reference graph's, so no graph or ``retrieval_named_law_boost`` 0: ``{}``)."""
        names = for_graph(self.refs) if self.retrieval.retrieval_named_law_boost else None
        return boosts(names.find(query), self.retrieval.retrieval_named_law_boost) if names else {}

    def _ranked(self, merged: dict[str, Hit], second: bool = False, depth: int = 0,
                named: dict[str, float] | None = None) -> list[Hit]:
        """The top ``retrieval_top_k`` (or ``depth``, if more) of ``merged`` by fused score (ties: dense cosine,
        id); with ``second`` (rule K7) by the second-stage fusion of that order and the e5 cosines, ``named``'s
        laws boosted (rule K22)."""
        first = sorted(merged.values(), key=lambda h: (-h.score, -(h.dense_score or 0.0), h.id))
        if second and first:
            scores = fuse(range(1, len(first) + 1), [h.second for h in first],
                          [h.payload.get("document_id") for h in first], self.fusion(), named)
            first = [first[i] for i in sorted(range(len(first)), key=lambda i: (-scores[i], i))]
        return first[: max(self.retrieval.retrieval_top_k, depth)]

    def _quotes(self, query: str, top: list[Hit], matches: ItemMatches, e5) -> dict[str, tuple[str, list[str]]]:
        """Rule K23: the list items to quote for the ``top`` hits (``items.item_quotes``); an article found only
        through an item first gets its own e5 cosine (one gather from the law matrix), which the item must beat."""
        if LIST_QUESTION.search(query):
            return {}
        unscored = matches.unscored([h.id for h in top])
        if unscored and e5 is not None and self.stage2 is not None:
            for key, cos in zip(unscored, self.stage2.cosines(unscored, e5.vectors)):
                matches.note(key, {}, cos)
        return item_quotes(top, matches, query)

    def _finish(self, query: str, merged: dict[str, Hit], attempts: list[Attempt], e5, named: dict[str, float],
                matches: ItemMatches | None, model_rerank: bool = True) -> list[EvidenceItem]:
        """The ranking after the rounds: both stages (K7, K22), the cited articles (K20), the amended-away amending
        texts behind their successors (K24), the reranker (K11, K13), then the top k packed (K4, K23) with their
        references (K16) and versions (K24). ``e5``: the ``E5Query`` (None: first stage only). ``model_rerank``
        False (rule K26): no K13 call, and the top k is the window it would have read."""
        s, second = self.retrieval, self.stage2 is not None  # as the rounds: the second-stage fusion even if e5 failed
        depth = self.assist.depth if self.assist is not None else 0
        top_k = s.retrieval_top_k
        if not model_rerank and self.assist is not None and self.assist.model_rerank_on:
            top_k = max(top_k, depth)  # rule K26: the agent's model reads the window and orders it by what it cites
        ranked = self._ranked(merged, second, depth, named)
        vectors = None if e5 is None else e5.vectors
        if s.retrieval_follow_refs:  # rule K20 (off by default): the top passages' cited articles join the pool
            if add_cited(self.refs, self.store, ranked, merged, s.retrieval_follow_refs, self.stage2, vectors):
                ranked = self._ranked(merged, second, depth, named)
        links = amendments.corpus() if s.retrieval_amendments else None
        ranked = amendments.current_first(links, self.store, ranked, merged, s.retrieval_top_k, self.stage2, vectors)
        if self.assist is not None:  # rule K11 (rerank endpoint) or K13 (the model): fail-open reorder
            ranked = self.assist.finish(query, ranked, attempts, model_rerank)
        top = ranked[:top_k]
        quotes = self._quotes(query, top, matches, e5) if matches is not None else None  # rule K23
        evidence = pack(top, query, s.chunk_max_chars, s.context_max_chars, quotes)
        return amendments.attach_versions(links, attach_refs(self.refs, evidence))  # rules K16, K24

    def search(self, query: str, tenant_id: str, document_ids: list[str] | None = None,
               sub_queries: list[str] | None = None, collections: list[str] | None = None,
               model_rewrite: bool = True, model_rerank: bool = True) -> SearchOutcome:
        """Run the pipeline for ``query`` as ``tenant_id``; see the module docstring.

        ``document_ids`` and ``collections`` (optional; a question's scope or ``POST /v1/search`` filters,
        ``contracts.scope``) restrict every round to those store documents and collections, a union
        (rule Q3, ``SearchFilter.scoped``). ``sub_queries`` (rule K9, the model's split of the question,
        at most 2 with the rewrite's, rule K12): one more round each. ``model_rewrite`` False skips rule K12's
        call for this search (rule K25: the agent's own ``kb_search`` query is already the model's);
        ``model_rerank`` False skips rule K13's and returns its window instead of the top k (rule K26: the agent's
        model reads the evidence next). Returns evidence in fused order or the reranker's (K11, K13; empty when
        nothing passes the threshold). Raises ``EmbeddingError`` / ``StoreError``.
        """
        s = self.retrieval
        flt = SearchFilter.scoped(tenant_id, document_ids, collections)
        # rule Q3: e5's nearest law chunks join the pool only when the whole law corpus is in scope
        law_whole = (not document_ids and not collections) or "law" in (collections or [])
        merged: dict[str, Hit] = {}
        attempts: list[Attempt] = []
        named = self.named(query)  # rule K22
        matches = ItemMatches() if s.retrieval_quote_items else None  # rule K23
        e5 = None
        if self.stage2 is not None:  # rule K7: e5 query vectors while the first stage runs
            forms = [query]
            if s.retrieval_stage2_expansion and s.retrieval_query_expansion:
                forms.append(expand_query(query))  # the same text twice is embedded once
            e5 = self.stage2.start(forms, s.retrieval_stage2_candidates if law_whole else 0)
        rewrite = self.assist.start_rewrite(query) if self.assist and model_rewrite else None  # K12 beside round 1
        self._round("original", query, flt, merged, attempts, e5, matches)
        if merged and _e5_result(e5) is not None and _e5_result(e5).nearest:
            # only beside first-stage hits: a question nothing passes the K1 floor for stays kb_no_results
            self._e5_candidates(_e5_result(e5).nearest, merged, attempts, matches)
        done = self.assist.rewritten(rewrite, attempts) if rewrite and self.assist else None
        for kind, more in plan_rounds(query, sub_queries, done):  # rules K9, K12
            self._round(kind, more, flt, merged, attempts, e5, matches)

        compressed: str | None = None  # jieba runs at most once per search for it
        best = max((h.dense_score for h in merged.values() if h.dense_score is not None), default=None)
        if not merged or (best is not None and best < s.retrieval_retry_below):
            compressed = compress_query(query)
            if compressed and compressed != query.strip():
                self._round("compressed", compressed, flt, merged, attempts, e5, matches)

        wanted = topics_in(query)
        if len(wanted) > 1:  # rule K3 (simple version; TODO(later issue): per-topic sub-questions)
            # covered = named in what the model would get (the top k), not in any candidate
            top = self._ranked(merged, e5 is not None, named=named)
            covered = " ".join(f"{h.payload.get('title', '')} {hit_text(h)}" for h in top)
            rest = compress_query(query) if compressed is None else compressed
            for word in sorted((w for t in wanted for w in TOPICS[t]), key=len, reverse=True):
                rest = rest.replace(word, " ")
            rest = " ".join(rest.split())
            for topic in wanted:
                if not any(w in covered for w in TOPICS[topic]):
                    self._round(f"topic:{topic}", f"{topic} {rest}".strip(), flt, merged, attempts, e5, matches)

        evidence = self._finish(query, merged, attempts, _e5_result(e5), named, matches, model_rerank)
        log.info("kb_search tenant=%s query=%r attempts=%s -> %d items", tenant_id, query,
                 [(a.kind, a.kept, a.best) for a in attempts], len(evidence))
        return SearchOutcome(evidence, attempts)


def _e5_result(future):
    """The ``E5Query`` of rule K7 (query vectors, e5 nearest law chunks), or None when the second stage is off
    or its embedding failed (fail-open: the first stage's order stands; logged)."""
    if future is None:
        return None
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001 - the second stage must never cost the search
        log.warning("second stage skipped: %s: %s", type(exc).__name__, exc)
        return None


def kb_search(searcher: KbSearcher, query: str, tenant_id: str) -> list[EvidenceItem]:
    """Evidence for ``query`` as ``tenant_id`` (``KbSearcher.search`` without the trace)."""
    return searcher.search(query, tenant_id).evidence
