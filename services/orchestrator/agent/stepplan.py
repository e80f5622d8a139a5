"""One model step as planned (``StepPlan``), and what a step offers the model (``tool_schema``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contracts.stream import StepStarted
from contracts.tools import openai_tool_schema
from services.orchestrator.agent import team
from services.orchestrator.agent.modelchain import Candidate
from services.orchestrator.agent.state import TaskState


@dataclass
class StepPlan:
    """One model step as planned: its ``step.started`` event, whether it is the final call
    (a hard limit hit), whether the model is called at all, what it is sent, its completion
    cap (tokens, None: the endpoint's), its time limit (seconds) and ``stop``: a reason to end
    with a wrap-up instead of calling the model (rule E2-E4)."""

    started: StepStarted
    final: bool
    use_model: bool
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    max_tokens: int | None = None
    timeout_s: float | None = None
    stop: str | None = None
    model: str | None = None
    """The model name the client is given (``modelchain.Candidate.sent``; rules A20, A21)."""
    endpoint: str | None = None
    """The configured model the call goes to (its breaker's key; named in the trace)."""
    stream: bool = True  # False: the reply's text is not sent to the client as it comes (a supervisor's draft, rule D9)


def model_fields(choice: Candidate | str | None) -> dict[str, str | None]:
    """``StepPlan``'s ``model`` and ``endpoint`` for the chosen candidate (none: no model)."""
    return {"model": choice.sent, "endpoint": choice.endpoint} if isinstance(choice, Candidate) else {}


def tool_schema(state: TaskState, name: str) -> dict[str, Any]:
    """The chat-completions ``tools`` entry of ``name``: a built-in tool's, ``delegate`` with the
    task's worker kinds (team mode), or an MCP tool's under its OpenAI function name (rule X1,
    ``contracts.mcp``)."""
    mcp = state.mcp_tool(name)
    if mcp is not None:
        return mcp.openai_schema()
    return team.delegate_schema(state.workers) if name == "delegate" else openai_tool_schema(name)
