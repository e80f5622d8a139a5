"""Settings of the gateway: HTTP and SSE, identity, quotas and limits, tenants.

Each class is one concern of ``conduit.runtime.settings.Settings``; every field is read from
``CONDUIT_<FIELD>`` (a few also from a plain name, see ``alias``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings

from conduit.runtime.config.base import CONFIG, TimeZoneName


class GatewaySettings(BaseSettings):
    """The gateway's HTTP server, request sizes, SSE streams and task event logs."""

    model_config = CONFIG

    gateway_host: str = Field(default="127.0.0.1", description="gateway listen address (0.0.0.0 in containers)")
    gateway_port: int = Field(default=8000, description="gateway listen port")
    max_question_chars: int = Field(default=4000, description="longer questions get 413")
    chat_max_body_bytes: int = Field(default=1048576, description="largest body of POST /v1/chat/completions, /v1/agui and /v1/a2a (bytes; the whole conversation); larger gets 413")
    sse_heartbeat_s: float = Field(default=15.0, description="seconds of silence after which an SSE stream sends a heartbeat comment (checked after each idle wait of gateway_sse_poll_ms)")
    task_events_ttl_s: int = Field(default=86400, description="TTL of a task's replay log and record (seconds)")
    task_events_maxlen: int = Field(default=20000, description="events kept per task replay log")
    gateway_publish_timeout_s: float = Field(default=5.0, description="max wait for Kafka's ack of a publish; then 503")
    gateway_ready_timeout_s: float = Field(default=2.0, description="per-check timeout of GET /readyz (Redis ping, Kafka metadata)")
    gateway_sse_poll_ms: int = Field(default=2000, description="block of the gateway's shared XREAD and of each stream's wait (ms); bounds how late an expired task is noticed")
    gateway_shutdown_grace_s: float = Field(default=10.0, description="uvicorn graceful-shutdown timeout on SIGTERM (seconds)")
    gateway_allocator: Literal["auto", "jemalloc", "pymalloc"] = Field(default="auto", description="memory allocator of `conduit serve gateway`: auto = jemalloc under PYTHONMALLOC=malloc when libjemalloc.so.2 is installed (memory returns to baseline after an SSE burst; conduit/runtime/allocator.py), else CPython's pymalloc")


class IdentitySettings(BaseSettings):
    """Who may call the gateway (services/gateway/identity/auth.py, docs/security.md)."""

    model_config = CONFIG

    default_tenant: str = Field(default="default", description="tenant of the bootstrap admin key (`conduit up`) and of CONDUIT_AUTH=none")
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


class LimitsSettings(BaseSettings):
    """Quotas and limits: per credential and tenant (gateway), per task (the agent loop)."""

    model_config = CONFIG

    rate_limit_key_per_minute: int = Field(default=600, description="requests per minute per credential (0 = unlimited); over it 429 with Retry-After")
    rate_limit_tenant_per_minute: int = Field(default=3000, description="requests per minute per tenant, all its credentials together (0 = unlimited)")
    running_tasks_per_key: int = Field(default=20, description="tasks running at once per credential (0 = unlimited); over it 429")
    running_tasks_per_tenant: int = Field(default=200, description="tasks running at once per tenant (0 = unlimited); over it 429")
    tenant_daily_token_budget: int = Field(default=0, ge=0, description="rule G6: model tokens (prompt + completion) a tenant's tasks may use per UTC day; once spent, new tasks get 429 token_budget_exceeded until the next UTC midnight (0 = no budget; a tenant's daily_token_budget replaces it)")
    max_rounds: int = Field(default=8, description="max model rounds per task")
    max_tool_calls: int = Field(default=12, description="max tool calls per task")
    task_deadline_s: float = Field(default=300.0, description="wall-clock limit per task (rule A2)")
    max_tokens: int = Field(default=200_000, description="token budget per task (prompt + completion, summed)")
    max_failed_steps: int = Field(default=3, description="consecutive failed steps (every tool call of a step failed or was refused) that stop the task (rule E3)")
    tool_quotas: dict[str, int] = Field(default={}, description="per tool: calls allowed for one question (JSON object, e.g. {\"kb_search\": 1}); more are refused with TOOL_CALL_LIMIT_REACHED (rule E5)")
    max_bad_arguments: int = Field(default=2, description="retries of a call rejected for bad arguments before the task stops (rule E6)")


class TenancySettings(BaseSettings):
    """Per-tenant overrides and defaults (conduit/runtime/tenants.py)."""

    model_config = CONFIG

    tenants: dict[str, dict] = Field(default={}, description="per-tenant overrides, JSON {tenant: {allowed_tools, model, approval_policies, rate_limit_per_minute, running_tasks, mode, time_zone}} (conduit/runtime/tenants.py)")
    tenant_domains: dict[str, dict[str, str]] = Field(default={}, description="per tenant: {name, name_en, description} of its domain (JSON object); default law and tax")
    thinking_tenants: list[str] = Field(default=[], description="tenants whose streams get the model's reasoning as `thinking` events (JSON list; off by default)")
    time_zone: TimeZoneName = Field(default="Asia/Shanghai", description="IANA time zone of the day a question is asked (the system prompt's date, rule V1); per tenant `time_zone` in CONDUIT_TENANTS")
