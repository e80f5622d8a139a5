"""What the agent core reads besides a task's state (pydantic-ai's "deps"): settings,
the replica's circuit breakers, whether a model is configured, and id and jitter sources.

Kept apart from ``TaskState`` (which is checkpointed): these belong to the replica.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from conduit.runtime.settings import Settings
from contracts.tools import TOOL_SPECS
from conduit.policy.breaker import CircuitBreaker


@dataclass
class Deps:
    """Dependencies of every transition.

    Args:
        settings: the root; the core reads its groups ``limits`` (rounds, tool calls, tokens, deadline in
            seconds), ``tools`` (timeouts, retries, approval policies and TTL), ``agent``, ``llm``, ``memory``,
            and through ``tenants.policy`` a tenant's overrides of them.
        model_configured: a model endpoint is configured (else retrieval-only mode).
        model_breaker / tool_breakers: replica-local breakers (``breaker.CircuitBreaker``);
            ``model_breaker`` is the ``default`` endpoint's, ``model_breakers`` the other
            configured models' (made on first use, ``model_breaker_for``, rule A21).
        rng: jitter source for retry backoff (tests pass ``random.Random(<fixed int>)``).
        new_call_id: id of a tool call the agent makes itself (retrieval-only ``kb_search``).
    """

    settings: Settings
    model_configured: bool = True
    model_breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    tool_breakers: dict[str, CircuitBreaker] = field(default_factory=dict)
    model_breakers: dict[str, CircuitBreaker] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random)
    new_call_id: Callable[[], str] = lambda: f"call_{uuid.uuid4().hex[:12]}"

    def breaker(self, tool: str) -> CircuitBreaker | None:
        """The breaker of ``tool``: a built-in tool's, or an MCP tool's or remote A2A agent's (rule T10; made
        on first use, sized like the others); None for an unknown name."""
        found = self.tool_breakers.get(tool)
        if found is None and tool.startswith(("mcp.", "a2a.")):
            s = self.settings.tools
            found = self.tool_breakers[tool] = CircuitBreaker(s.tool_breaker_failures, s.tool_breaker_cooldown_s)
        return found

    def model_breaker_for(self, endpoint: str) -> CircuitBreaker:
        """The breaker of the configured model ``endpoint`` (``default``: ``model_breaker``), sized like
        ``model_breaker``; made on first use."""
        if endpoint == "default":
            return self.model_breaker
        found = self.model_breakers.get(endpoint)
        if found is None:
            found = self.model_breakers[endpoint] = CircuitBreaker(self.model_breaker.failures,
                                                                   self.model_breaker.cooldown_s)
        return found

    @classmethod
    def from_settings(cls, settings: Settings, model_configured: bool, **fields: object) -> "Deps":
        """Deps with breakers sized by ``settings`` (model and one per tool)."""
        return cls(
            settings=settings, model_configured=model_configured,
            model_breaker=CircuitBreaker(settings.llm.model_breaker_failures, settings.llm.model_breaker_cooldown_s),
            tool_breakers={name: CircuitBreaker(settings.tools.tool_breaker_failures, settings.tools.tool_breaker_cooldown_s)
                           for name in TOOL_SPECS},
            **fields)  # type: ignore[arg-type]
