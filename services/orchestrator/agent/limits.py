"""The limits checked before a model step (rules A2, A3, E2-E4, docs/agent-rules.md): pure."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.orchestrator.agent import team
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.state import TaskState

SOFT_LIMIT_MARGIN = 2
"""Rounds or tool calls before a hard limit at which the soft-limit note is added."""
COMPLETION_RESERVE_TOKENS = 1000
"""Tokens reserved for the completion when a step's cost is estimated (rule E4)."""


def estimate_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    """A step's estimated cost in tokens: about 2 characters per token (Chinese ~1, English ~4)
    over the messages and tool schemas, plus ``COMPLETION_RESERVE_TOKENS``."""
    chars = sum(len(str(m.get("content") or "")) + len(str(m.get("tool_calls") or "")) for m in messages)
    return chars // 2 + len(str(tools or "")) // 2 + COMPLETION_RESERVE_TOKENS


def time_left_s(deps: Deps, state: TaskState, now: datetime) -> float:
    """Seconds until the task's deadline (``task_deadline_s`` after the question, or a worker's share
    of the tree's time, rule D4; negative once past)."""
    return (team.budget(deps, state).deadline_at - now).total_seconds()


def stop_before(deps: Deps, state: TaskState, messages: list[dict[str, Any]], now: datetime) -> str | None:
    """Why no model call may run now (it ends with a wrap-up): the deadline is past (rule E2), the
    estimated cost does not fit the token budget (rule E4), or ``max_failed_steps`` steps in a row
    failed (rule E3). None: the call may run."""
    s = deps.settings.limits
    if time_left_s(deps, state, now) <= 0:
        return "deadline"
    if state.usage.total_tokens + estimate_tokens(messages, None) > team.budget(deps, state).max_tokens:
        return "max_tokens"
    if state.failed_steps >= s.max_failed_steps:
        return "failed_steps"
    return None


def hard_limit(deps: Deps, state: TaskState, now: datetime) -> str | None:
    """The first hard limit this step reaches (``max_rounds`` | ``max_tool_calls``), or None; the
    deadline and the token budget stop without a call (``stop_before``)."""
    s = deps.settings.limits
    limits = {"max_rounds": state.rounds + 1 >= s.max_rounds,
              "max_tool_calls": state.tool_calls_used >= team.budget(deps, state).max_tool_calls}
    return next((name for name, reached in limits.items() if reached), None)


def soft_limit(deps: Deps, state: TaskState) -> bool:
    """True within ``SOFT_LIMIT_MARGIN`` rounds or tool calls of a hard limit."""
    s = deps.settings.limits
    return (state.rounds + SOFT_LIMIT_MARGIN >= s.max_rounds
            or state.tool_calls_used + SOFT_LIMIT_MARGIN >= team.budget(deps, state).max_tool_calls)
