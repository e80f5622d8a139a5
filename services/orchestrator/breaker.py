"""A circuit breaker for the model endpoint (seed 003).

After ``failures`` consecutive failed calls the circuit opens for ``cooldown_s``
seconds: calls fail fast and the orchestrator answers in retrieval-only mode.
After the cool-down one trial call is let through (half-open).
"""

from __future__ import annotations

import time


class CircuitBreaker:
    """Consecutive-failure circuit breaker; times in seconds (monotonic clock)."""

    def __init__(self, failures: int = 3, cooldown_s: float = 30.0) -> None:
        self.threshold = failures
        self.cooldown_s = cooldown_s
        self.count = 0
        self.opened_at: float | None = None

    @property
    def open(self) -> bool:
        """True while calls should fail fast."""
        if self.opened_at is None:
            return False
        if time.monotonic() - self.opened_at >= self.cooldown_s:
            return False  # half-open: let one trial call through
        return True

    def success(self) -> None:
        """Record a successful call: close the circuit."""
        self.count = 0
        self.opened_at = None

    def failure(self) -> None:
        """Record a failed call; open the circuit at the threshold."""
        self.count += 1
        if self.count >= self.threshold:
            self.opened_at = time.monotonic()
