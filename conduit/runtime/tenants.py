"""Per-tenant policy: allowed tools, model name, approval policies and limits.

``CONDUIT_TENANTS`` is a JSON object ``{tenant_id: {...}}`` of ``TenantPolicy`` fields; a
tenant without an entry (or a field left out) gets the process-wide setting. Enforced by the
gateway: ``allowed_tools`` (a task's tools are narrowed to them, ``services.gateway.api.tasks``),
``rate_limit_per_minute`` and ``running_tasks`` (``services.gateway.identity.ratelimit``). ``model``,
``approval_policies``, ``mode`` and ``time_zone`` by the orchestrator (``services.orchestrator.steps`` names the tenant's
model in each call; ``services.orchestrator.agent.vetting`` applies its approval policies;
``services.orchestrator.agent.team`` its mode, rule D1; ``planning.start`` dates its tasks in its
``time_zone``, rule V1).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from conduit.runtime.settings import Settings, TimeZoneName
from contracts.tools import AnyToolName, Risk


class TenantPolicy(BaseModel):
    """One tenant's overrides (None = the process-wide setting)."""

    model_config = ConfigDict(extra="forbid")

    allowed_tools: list[AnyToolName] | None = Field(default=None, description="tools this tenant's tasks may use")
    model: str | None = Field(default=None, description="its primary model: a CONDUIT_MODELS name, else a model name sent to `default`")
    models: list[str] | None = Field(default=None, description="configured models its requests may name (rule A20; None = every one)")
    fallbacks: list[str] | None = Field(default=None, description="configured models that answer after its primary, in order (rule A21; None = CONDUIT_MODEL_FALLBACKS)")
    approval_policies: dict[str, str] | None = Field(default=None, description="per tool: never, always, if:<arg>~<regex>")
    approval_timeout: Literal["deny", "escalate"] | None = Field(
        default=None, description="an approval nobody decided in time: denied, or escalated to an admin once (rule A26)")
    approval_by_risk: dict[Risk, Literal["never", "always"]] | None = Field(
        default=None, description="per risk tier (rule T9): never or always, for tools no policy names")
    rate_limit_per_minute: int | None = Field(default=None, ge=0, description="requests per minute, all its credentials")
    running_tasks: int | None = Field(default=None, ge=0, description="tasks running at once, all its users")
    daily_token_budget: int | None = Field(default=None, ge=0, description="model tokens per UTC day, all its tasks (rule G6; 0 = none)")
    mode: Literal["agent", "team", "auto"] | None = Field(default=None, description="default mode of its questions (team: rule D1)")
    time_zone: TimeZoneName | None = Field(default=None, description="IANA zone of the day its questions are asked (rule V1)")
    review: bool | None = Field(default=None, description="the reviewer pass on its answers (rule A22; None = CONDUIT_REVIEW_ENABLED)")
    plan: Literal["off", "auto", "always"] | None = Field(default=None, description="plan and replan (rule A25; None = CONDUIT_PLAN_MODE)")


def policy(settings: Settings, tenant_id: str) -> TenantPolicy:
    """The tenant's policy with every unset field filled from ``settings``.

    Raises ``pydantic.ValidationError`` when the tenant's ``CONDUIT_TENANTS`` entry is malformed.
    """
    own = TenantPolicy.model_validate(settings.tenancy.tenants.get(tenant_id, {}))
    return TenantPolicy(
        allowed_tools=own.allowed_tools,
        model=own.model or settings.llm.model,
        models=own.models,
        fallbacks=own.fallbacks if own.fallbacks is not None else settings.llm.model_fallbacks,
        approval_policies=own.approval_policies if own.approval_policies is not None else settings.tools.approval_policies,
        approval_by_risk=own.approval_by_risk,
        approval_timeout=own.approval_timeout,
        rate_limit_per_minute=(own.rate_limit_per_minute if own.rate_limit_per_minute is not None
                               else settings.limits.rate_limit_tenant_per_minute),
        running_tasks=own.running_tasks if own.running_tasks is not None else settings.limits.running_tasks_per_tenant,
        daily_token_budget=(own.daily_token_budget if own.daily_token_budget is not None
                            else settings.limits.tenant_daily_token_budget),
        mode=own.mode,
        time_zone=own.time_zone or settings.tenancy.time_zone,
        review=own.review,
        plan=own.plan,
    )


def narrow_tools(asked: list[str] | None, allowed: list[str] | None) -> list[str] | None:
    """The tools a task may use: what it asked for (None = all) within what its tenant allows (None = all)."""
    if allowed is None:
        return asked
    if asked is None:
        return list(allowed)
    return [t for t in asked if t in allowed]
