"""A consecutive-failure circuit breaker for the model endpoint and each tool (rule A9,
docs/architecture.md).

After ``failures`` consecutive failed calls the circuit opens for ``cooldown_s``
seconds: calls fail fast (the model step answers in retrieval-only mode, a tool
call is refused with ``circuit_open``). After the cool-down the circuit is
half-open: exactly ONE trial call is let through; its success closes the circuit,
its failure opens it for another cool-down. While the trial is out every other
call still fails fast; a trial that never reports is given up after another
cool-down and a new one is let through.

Times are passed in (seconds on any monotonic clock), so the rules are tested
without waiting. A breaker is replica-local memory (a dependency of the agent
core, not part of a task's checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class CircuitBreaker:
    """Consecutive-failure circuit breaker.

    Args:
        failures: consecutive failures that open the circuit (>= 1).
        cooldown_s: seconds the circuit stays open before one trial call.
    """

    failures: int = 3
    cooldown_s: float = 30.0
    count: int = 0
    opened_at: float | None = None
    trial_at: float | None = None

    def state(self, now_s: float) -> Literal["closed", "open", "half_open"]:
        """``closed``, ``open`` (fail fast) or ``half_open`` (cool-down over) at ``now_s``."""
        if self.opened_at is None:
            return "closed"
        return "half_open" if now_s - self.opened_at >= self.cooldown_s else "open"

    def allow(self, now_s: float) -> bool:
        """True when a call may go out at ``now_s``; in half-open state only the first asker
        (the trial) gets True until that trial reports ``success`` or ``failure``."""
        state = self.state(now_s)
        if state == "closed":
            return True
        if state == "open":
            return False
        if self.trial_at is not None and now_s - self.trial_at < self.cooldown_s:
            return False  # the one trial call is still out
        self.trial_at = now_s
        return True

    def success(self) -> None:
        """Record a successful call: close the circuit."""
        self.count, self.opened_at, self.trial_at = 0, None, None

    def failure(self, now_s: float) -> None:
        """Record a failed call at ``now_s``; open the circuit at the threshold (a failed trial reopens it)."""
        self.count += 1
        if self.count >= self.failures or self.trial_at is not None:
            self.opened_at, self.trial_at = now_s, None
