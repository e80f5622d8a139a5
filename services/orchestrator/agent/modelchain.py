"""Which configured model answers a step: the fallback chain (rule A21) and a model per request
(rule A20). Pure; docs/architecture.md "Named models" has the reasons.

- **Candidates** of a task, in order: the model its request named (rule A20), then its tenant's
  chain (``conduit.runtime.models.chain``: its primary, then its fallbacks), each endpoint once.
- A step takes the first candidate that (1) has not failed before its first token since the task's
  last model reply (``TaskState.models_failed``), (2) calls tools when the step offers tools (a
  model configured with ``tools: false`` answers only chit-chat, a supervisor's final rewrite and
  summaries) and (3) whose breaker lets a call through (one breaker per endpoint, replica-local,
  ``Deps.model_breaker_for``).
- **None left**: the step answers in retrieval-only mode, ``fallback_reason`` ``model_circuit_open``
  (a breaker refused) or ``no_tool_model`` (none of them calls tools).
- A call that **fails before its first token** (nothing streamed; a context overflow folds the
  history first, rule A18) moves the step to the next candidate at once (``next_after_failure``),
  traced as ``{"phase": "model_fallback", "from", "to", "code"}``. A call that failed after text
  streamed is not moved: its text was withdrawn and the task answers from the knowledge base.
- The trace's ``llm`` entries and ``task.completed`` name the model that answered (``model``).
- A model's ``context_chars`` bounds the history a step on it sends (``window_chars``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from conduit.runtime import models, tenants
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.state import TaskState

MODEL_CIRCUIT_OPEN = "model_circuit_open"
NO_TOOL_MODEL = "no_tool_model"


@dataclass(frozen=True)
class Candidate:
    """One model a step may call.

    ``endpoint``: the configured name (its breaker's key; what the trace and ``task.completed`` show);
    ``sent``: what the model client is given as ``model`` (the endpoint's name, or the tenant's own
    model name sent to ``default`` when it names no configured model, as before rule A21)."""

    endpoint: str
    sent: str | None


def candidates(deps: Deps, state: TaskState) -> list[Candidate]:
    """The task's models in the order they answer (see the module doc); never empty: with no
    configured model at all, the one candidate is ``default`` (whose call fails with
    ``model_not_found``, a configuration error shown on ``/readyz``)."""
    settings = deps.settings
    known = models.registry(settings.llm)
    own = tenants.policy(settings, state.tenant_id).model
    names = models.chain(settings, state.tenant_id)
    if state.model in known:
        names = [state.model, *(n for n in names if n != state.model)]
    if not names:
        return [Candidate(models.DEFAULT, own)]
    named = state.model in known
    raw = own if own and own not in known and not named else None  # a tenant model name no endpoint has
    return [Candidate(n, raw if n == models.DEFAULT and raw and n == names[0] else n) for n in names]


def _fits(known: dict[str, models.ModelSpec], state: TaskState, c: Candidate, tools: bool) -> bool:
    """``c`` has not failed since the last reply and calls tools when the step offers them (``known``:
    the configured models, ``models.registry``)."""
    spec = known.get(c.endpoint)
    return c.endpoint not in state.models_failed and not (tools and spec is not None and not spec.tools)


def choose(deps: Deps, state: TaskState, now: datetime, tools: bool) -> Candidate | str:
    """The candidate that answers this step (asking its breaker, so a half-open one's trial is taken),
    or the fallback reason when none can (``model_circuit_open``, ``no_tool_model``). ``tools``: the
    step offers tools (kept in ``state.step_tools`` for ``next_after_failure``)."""
    state.step_tools = tools
    known = models.registry(deps.settings.llm)
    fitting = [c for c in candidates(deps, state) if _fits(known, state, c, tools)]
    if not fitting:
        return NO_TOOL_MODEL
    return next((c for c in fitting if deps.model_breaker_for(c.endpoint).allow(now.timestamp())), MODEL_CIRCUIT_OPEN)


def next_after_failure(deps: Deps, state: TaskState, failed: str | None, code: str, now: datetime) -> str | None:
    """Rule A21: after ``failed`` (an endpoint name) failed before its first token with ``code``,
    the endpoint the step moves to, or None when no other candidate's breaker is closed or half-open.
    Marks ``failed`` in ``state.models_failed`` and traces the move (changes ``state``)."""
    if failed is None:
        return None
    if failed not in state.models_failed:
        state.models_failed.append(failed)
    known = models.registry(deps.settings.llm)
    for c in candidates(deps, state):
        if _fits(known, state, c, state.step_tools) and deps.model_breaker_for(c.endpoint).state(now.timestamp()) != "open":
            state.trace.append({"phase": "model_fallback", "step": state.step, "from": failed, "to": c.endpoint,
                                "code": code})
            return c.endpoint
    return None


def answered(state: TaskState, endpoint: str | None) -> None:
    """A model replied: it is the one that answered (``state.answered_by``) and every model is tried
    again from the first at the next step (``models_failed`` cleared)."""
    state.answered_by = endpoint
    state.models_failed.clear()


def window_chars(deps: Deps, state: TaskState, endpoint: str | None) -> int:
    """The history (characters) a step on ``endpoint`` sends: the task's folded window (rule A18),
    else the setting, at most the model's ``context_chars``."""
    base = state.window_chars or deps.settings.agent.context_window_chars
    spec = models.registry(deps.settings.llm).get(endpoint or "")
    return min(base, spec.context_chars) if spec is not None and spec.context_chars else base
