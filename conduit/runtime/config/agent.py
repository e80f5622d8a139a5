"""Settings of the agent loop: the model endpoint, the router, the loop itself, tool calls, memory.

Each class is one concern of ``conduit.runtime.settings.Settings``; every field is read from
``CONDUIT_<FIELD>`` (a few also from a plain name, see ``alias``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings

from conduit.runtime.config.base import CONFIG, alias


class LlmSettings(BaseSettings):
    """The OpenAI-compatible model endpoint(s): address, timeouts, retries, named models and fallbacks."""

    model_config = CONFIG

    openai_base_url: str | None = Field(default=None, validation_alias=alias("openai_base_url", "OPENAI_BASE_URL"),
                                        description="OpenAI-compatible endpoint; unset = retrieval-only answers")
    openai_api_key: str | None = Field(default=None, validation_alias=alias("openai_api_key", "OPENAI_API_KEY"),
                                       description="API key of the model endpoint")
    model: str = Field(default="gpt-4o-mini", validation_alias=alias("model", "CONDUIT_MODEL"), description="chat model name")
    model_read_timeout_s: float = Field(default=180.0, description="max wait between two streamed chunks (rule A12)")
    model_connect_timeout_s: float = Field(default=10.0, description="model endpoint connect timeout (seconds)")
    model_max_retries: int = Field(default=2, description="retries before the first streamed token (rule A12)")
    model_temperature: float = Field(default=0.2, description="sampling temperature of model calls")
    model_call_cap_s: float = Field(default=300.0, description="hard cap on one model call, whole call (seconds; rule E1)")
    models: list[dict] = Field(default=[], description="named model endpoints, JSON [{name, base_url, api_key | api_key_env, model, tools, streaming, reasoning, context_chars}]; OPENAI_BASE_URL / CONDUIT_MODEL stay the model named `default` (README \"Pointing Conduit at a model\")")
    model_fallbacks: list[str] = Field(default=[], description="rule A21: configured models that answer, in order, when a tenant's primary fails before its first token or its breaker is open (JSON list of CONDUIT_MODELS names; a tenant's own `fallbacks` replace it)")
    model_breaker_failures: int = Field(default=3, description="consecutive failures of one model endpoint that open its circuit (one breaker per configured model, rule A21)")
    model_breaker_cooldown_s: float = Field(default=30.0, description="seconds a model's circuit stays open (its fallbacks answer meanwhile, else retrieval-only answers)")

    @property
    def configured(self) -> bool:
        """True when an OpenAI-compatible endpoint is set (else retrieval-only answers)."""
        return bool(self.openai_base_url)


class RouterSettings(BaseSettings):
    """The pre-router's classifier (rule R1)."""

    model_config = CONFIG

    router_model: str | None = Field(default=None, description="model name of the pre-router's classifier (any OpenAI-compatible endpoint); unset = rules only (rule R1)")
    router_base_url: str | None = Field(default=None, description="OpenAI-compatible endpoint of the router model; unset = OPENAI_BASE_URL")
    router_api_key: str | None = Field(default=None, description="API key of the router endpoint; unset = OPENAI_API_KEY")
    router_timeout_s: float = Field(default=3.0, description="timeout of the router call (seconds); on timeout or any error the normal agent runs (fail-open)")
    router_out_of_scope_below: float = Field(default=0.10, description="domain score below which a question is out of scope")
    router_chitchat_min: float = Field(default=0.8, description="chit-chat score from which (with a low domain score) the chit-chat agent answers")
    router_chitchat_domain_below: float = Field(default=0.2, description="domain score below which a chit-chat question goes to the chit-chat agent")
    router_calc_min: float = Field(default=0.6, description="calculation score from which the agent is told to use code_exec")


class AgentSettings(BaseSettings):
    """The orchestrator's agent loop: context, review, planning, team mode, leases and concurrency."""

    model_config = CONFIG

    history_turns: int = Field(default=6, description="earlier turns of the session given to the model")
    context_window_chars: int = Field(default=48_000, description="history sent to the model (characters; tool call and result never split)")
    review_enabled: bool = Field(default=False, description="rule A22: one model call checks each claim of an answer against its cited evidence before it completes (per tenant: `review` in CONDUIT_TENANTS)")
    review_timeout_s: float = Field(default=20.0, gt=0, description="rule A22: longest wait for the reviewer's call (seconds); past it the answer stands")
    review_max_tokens: int = Field(default=1200, ge=64, description="rule A22: max_tokens of the reviewer's call (its verdicts and a revision)")
    plan_mode: Literal["off", "auto", "always"] = Field(default="off", description="rule A25: plan a question before working on it: always, auto (it names two or more team topics, or needs a calculation) or off; per tenant: `plan` in CONDUIT_TENANTS")
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
    lease_ttl_s: float = Field(default=15.0, description="task lease; another replica resumes a task after it lapses")
    shutdown_grace_s: float = Field(default=10.0, description="on SIGTERM, seconds running model steps may finish before they are handed over")
    orchestrator_concurrency: int = Field(default=256, ge=1, le=1024, description="bus messages one orchestrator handles at once (model steps are network waits; each task's in order; 1: one at a time, each offset committed after its handler; rule B2)")


class ToolSettings(BaseSettings):
    """Tool calls from the agent loop: deadlines, retries, breakers and approvals."""

    model_config = CONFIG

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


class MemorySettings(BaseSettings):
    """Long-term memory and the semantic answer cache."""

    model_config = CONFIG

    memory_off_tenants: list[str] = Field(default=[], description="tenants without long-term memory: nothing is remembered or recalled for their users (JSON list; `[\"*\"]`: every tenant)")
    memory_recall_k: int = Field(default=5, ge=0, description="memory items given to the model before a task (the best by score)")
    memory_recency_weight: float = Field(default=1.0, description="alpha: weight of recency in a memory item's recall score (each term min-max normalised)")
    memory_importance_weight: float = Field(default=1.0, description="beta: weight of importance in the recall score")
    memory_relevance_weight: float = Field(default=1.0, description="gamma: weight of relevance (cosine to the question) in the recall score")
    memory_recency_decay: float = Field(default=0.995, gt=0.0, le=1.0, description="recency = decay ** hours since the item was last used")
    memory_min_relevance: float | None = Field(default=None, description="rule M10: cosine below which a memory item is not recalled (a fact still is when the question shares its words or asks its topic); unset: the floor measured for the embedding backend (use 0.43, e5 0.88; docs/agent-rules.md), 0 for an unmeasured one")
    memory_recall_timeout_s: float = Field(default=3.0, description="longest wait for the recall and cache lookup before a task (seconds; past it the task runs without them)")
    memory_temporary_days: float = Field(default=7.0, description="lifetime of a temporary fact (this week, today, ...) in days")
    memory_episode_days: float = Field(default=30.0, description="lifetime of an episode (a finished task's question, answer summary and citations) in days")
    memory_max_episodes: int = Field(default=200, ge=1, description="rule M16: episodes one user keeps, the newest; writing one more evicts the oldest (each recall and each memory write reads the user's items, so this bounds their cost: a service account asking thousands of questions would otherwise make every run read them all)")
    cache_enabled: bool = Field(default=True, description="semantic cache of first-turn answers (per tenant; `Cache-Control: no-cache` bypasses it)")
    cache_min_similarity: float = Field(default=0.95, description="cosine between two first questions from which the cached answer is replayed")
    cache_ttl_s: int = Field(default=86_400, description="lifetime of a cache entry (seconds), renewed on every hit")
