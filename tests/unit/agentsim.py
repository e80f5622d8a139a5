"""An in-memory driver of the agent core for unit tests: no broker, Redis, server or port.

``Sim`` plays the I/O layer's part with lists: it applies transitions to one task's
state, keeps the client event log (``events``), public events (``publics``), tool
requests (``requests``) and approval records, runs model steps against an in-process
``TestModel``, and answers tool requests with ``tools[name](call)`` (a result, or None:
the tool never answers). Time is ``now`` and moves only when a test moves it.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from conduit.runtime.settings import Settings
from contracts.events import QuestionAsked, QuestionPayload, ToolResultPayload
from contracts.evidence import EvidenceItem
from contracts.mcp import McpTool
from contracts.stream import AnswerDelta, StreamEvent, ThinkingDelta
from services.orchestrator.agent import endings, planning, recording, timers
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.effects import (
    Announce,
    CancelChild,
    Emit,
    Metric,
    Notify,
    Public,
    PublishTool,
    RunModelStep,
    Remember,
    SaveContext,
    Summarise,
    SaveApproval,
    Step,
    UpdateApproval,
)
from contracts.api import SessionContext
from services.orchestrator.agent.cache import Recalled
from services.orchestrator.agent.routing import RouteDecision
from services.orchestrator.agent.state import PendingCall, TaskState
from services.orchestrator.model import ModelError
from services.orchestrator.testmodel import Reply, TestModel

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
ToolFn = Callable[[PendingCall], ToolResultPayload | None]


def settings(**fields: Any) -> Settings:
    """Settings for a unit test (defaults of the README, overridden by ``fields``)."""
    return Settings(**fields)


def ok(call: PendingCall, *evidence: EvidenceItem, output: str | None = None) -> ToolResultPayload:
    """An ``ok`` result for ``call``."""
    return ToolResultPayload(call_id=call.call_id, tool=call.tool or "kb_search", idempotency_key=call.idempotency_key,
                             outcome="ok", evidence=list(evidence), output=output, duration_ms=5.0)


def passage(chunk: str, text: str = "条文。") -> EvidenceItem:
    """A knowledge-base passage."""
    return EvidenceItem(chunk_id=chunk, document_id=f"doc-{chunk}", kind="original", title=f"《{chunk}》",
                        locator="第一条", text=text, score=0.9)


def kb(query: str) -> dict[str, Any]:
    """A model's ``kb_search`` call."""
    return {"name": "kb_search", "arguments": {"query": query, "reason": "查法条"}}


def code(src: str) -> dict[str, Any]:
    """A model's ``code_exec`` call (needs approval by default)."""
    return {"name": "code_exec", "arguments": {"code": src, "reason": "算一下"}}


def question(text: str = "问题", occurred_at: datetime = T0) -> QuestionAsked:
    """A ``question.asked`` event."""
    return QuestionAsked(task_id=uuid.uuid4().hex, session_id="s", occurred_at=occurred_at,
                         payload=QuestionPayload(question=text))


class Sim:
    """One task driven through the core in memory (see the module docstring)."""

    def __init__(self, model: TestModel | None = None, tools: dict[str, ToolFn] | None = None,
                 allowed: list[str] | None = None, mcp_tools: list[McpTool] | None = None, **fields: Any) -> None:
        ids = itertools.count(1)
        self.deps = Deps.from_settings(settings(**fields), model_configured=model is not None, rng=random.Random(7),
                                       new_call_id=lambda: f"call_own_{next(ids)}")
        self.model = model
        self.tools: dict[str, ToolFn] = tools if tools is not None else {"kb_search": lambda c: ok(c, passage("p1"))}
        self.allowed = allowed if allowed is not None else ["kb_search", "code_exec"]
        self.mcp_tools = mcp_tools or []  # the tenant's MCP tools offered besides (contracts.mcp)
        self.now = T0
        self.state: TaskState | None = None
        self.events: list[StreamEvent] = []
        self.publics: list[Public] = []
        self.remembered: list[Remember] = []
        self.contexts: list[SessionContext] = []
        self.summaries: list[Summarise] = []  # rule M7: the model summary calls asked for
        self.requests: list[PendingCall] = []
        self.approvals: dict[str, dict[str, Any]] = {}
        self.cancels: list[CancelChild] = []
        self.notices: list[Notify] = []  # events for other tasks' logs
        self.metrics: list[Metric] = []  # counts asked of the replica's metrics
        self.due_steps = 0
        self.model_seconds: list[float] = []  # simulated duration of the next model calls (seconds)

    # ------------------------------------------------------------------ driving
    async def ask(self, q: QuestionAsked | None = None, turns: list[dict[str, str]] | None = None,
                  route: RouteDecision | None = None, recalled: Recalled | None = None,
                  context: SessionContext | None = None) -> TaskState:
        """Start a task (earlier ``turns`` of the session, the pre-router's ``route``, what memory and
        the cache gave, ``recalled``) and run it until it ends or waits for people or silent tools."""
        q = q or question(occurred_at=self.now)
        await self.run(planning.start(self.deps, q, list(self.allowed), turns or [], route=route, recalled=recalled,
                                      now=self.now, context=context, mcp_tools=list(self.mcp_tools)))
        assert self.state is not None
        return self.state

    async def run(self, step: Step | None) -> None:
        """Carry out ``step`` (and the model steps and tool results it leads to)."""
        pending = [step]
        while pending:
            s = pending.pop(0)
            if s is None:
                continue
            self.state = s.state
            results = self._carry_out(s)
            pending += [recording.record_results(self.deps, self.state, [r], self.now) for r in results]
            while self.due_steps:
                self.due_steps -= 1
                pending.append(await self.model_step())

    async def model_step(self) -> Step:
        """One model step, as ``services.orchestrator.steps`` runs it (streamed text joins the log)."""
        state = self.state
        assert state is not None
        plan = planning.plan_step(self.deps, state, self.now)
        self.events.append(plan.started)
        if plan.stop is not None:
            return endings.wrap_up(state, plan.stop, self.now)
        if not plan.use_model or self.model is None:
            return planning.retrieval_only_step(self.deps, state, self.now)

        async def on_delta(text: str) -> None:
            if plan.stream:
                self.events.append(AnswerDelta(text=text))

        async def on_thinking(text: str) -> None:
            self.events.append(ThinkingDelta(text=text))

        try:
            reply = await self.model.stream(plan.messages, plan.tools, on_delta, max_tokens=plan.max_tokens,
                                            on_thinking=on_thinking if state.tenant_id in self.deps.settings.thinking_tenants
                                            else None, model=plan.model, timeout_s=plan.timeout_s)
            if self.model_seconds:  # a slow model: the call takes this long (the step's limit applies)
                took = self.model_seconds.pop(0)
                if plan.timeout_s is not None and took > plan.timeout_s:
                    self.now += timedelta(seconds=plan.timeout_s)
                    raise ModelError(f"model call exceeded its {plan.timeout_s:.1f} s limit", streamed=bool(reply.content),
                                     code="model_timeout")
                self.now += timedelta(seconds=took)
        except ModelError as exc:
            self.deps.model_breaker_for(plan.endpoint or "default").failure(self.now.timestamp())
            return planning.on_model_failed(self.deps, state, str(exc), exc.streamed, self.now, exc.code, plan.endpoint)
        self.deps.model_breaker_for(plan.endpoint or "default").success()
        return planning.on_reply(self.deps, state, plan, reply, self.now)

    async def wake(self, after_s: float, bus_up: bool = True) -> None:
        """Move time on by ``after_s`` seconds and fire the task's timers (``bus_up`` False: the
        broker does not answer)."""
        self.now += timedelta(seconds=after_s)
        assert self.state is not None
        await self.run(timers.wake(self.deps, self.state, self.now, bus_up))

    def _carry_out(self, step: Step) -> list[ToolResultPayload]:
        results: list[ToolResultPayload] = []
        sent: list[str] = []
        for e in step.effects:
            if isinstance(e, Emit):
                self.events.append(e.event)
            elif isinstance(e, Public):
                self.publics.append(e)
            elif isinstance(e, SaveApproval):
                self.approvals[e.record.call_id] = e.record.model_dump()
            elif isinstance(e, UpdateApproval):
                record = self.approvals.get(e.call_id)
                if record and not (e.only_if_pending and record["status"] != "pending"):
                    record["status"] = e.status
            elif isinstance(e, PublishTool):
                self.requests.append(e.call.model_copy(deep=True))
                sent.append(e.call.call_id)
                answer = self.tools.get(e.call.name, lambda c: None)(e.call)
                if answer is not None:
                    results.append(answer)
            elif isinstance(e, RunModelStep):
                self.due_steps += 1
            elif isinstance(e, CancelChild):
                self.cancels.append(e)
            elif isinstance(e, Notify):
                self.notices.append(e)
            elif isinstance(e, Remember):
                self.remembered.append(e)
            elif isinstance(e, SaveContext):
                self.contexts.append(e.context)
            elif isinstance(e, Summarise):
                self.summaries.append(e)
            elif isinstance(e, Metric):
                self.metrics.append(e)
            elif isinstance(e, Announce):
                assert self.state is not None
                self.events.append(endings.terminal_event(self.state, self.now, e.citations))
        if sent and (marked := timers.mark_sent(step.state, sent)) is not None:
            self.events += [e.event for e in marked.effects if isinstance(e, Emit)]
        return results

    # ------------------------------------------------------------------ reading
    def types(self) -> list[str]:
        """The client event types in order."""
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[StreamEvent]:
        """The client events of type ``kind``."""
        return [e for e in self.events if e.type == kind]

    def tool_messages(self) -> list[str]:
        """Contents of the ``tool`` messages the model was sent last."""
        assert self.model is not None and self.model.calls
        return [m["content"] for m in self.model.calls[-1][0] if m["role"] == "tool"]


__all__ = ["T0", "Reply", "Sim", "TestModel", "code", "kb", "ok", "passage", "question", "settings"]
