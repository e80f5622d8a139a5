"""An in-memory driver of the agent core for unit tests: no broker, Redis, server or port.

``Sim`` runs one task through the production ``Interpreter`` and ``ModelSteps`` wired to the
in-memory ports of ``fakes``: transitions are saved with compare-and-set and their outbox, effects
are carried out by the production handlers, model steps call an in-process ``TestModel``, and tool
requests are answered with ``tools[name](call)`` (a result, or None: the tool never answers). The
fakes' records are read as ``events`` (the client log), ``publics``, ``requests``, ``approvals``...
Time is ``now`` and moves only when a test moves it.
"""

from __future__ import annotations

import itertools
import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from conduit.runtime.settings import Settings
from contracts.events import QuestionAsked, QuestionPayload, ToolResultPayload
from contracts.evidence import EvidenceItem
from contracts.mcp import McpTool
from contracts.stream import StreamEvent
from services.orchestrator.agent import planning, recording, timers
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.effects import Step
from services.orchestrator.interpreter import Interpreter, Ports
from services.orchestrator.steps import ModelSteps
from contracts.api import SessionContext
from services.orchestrator.agent.cache import Recalled
from services.orchestrator.agent.routing import RouteDecision
from services.orchestrator.agent.state import PendingCall, TaskState
from conduit.runtime.llm.model import ModelError
from services.orchestrator.testmodel import Reply, TestModel
from fakes import FakeCheckpoints, FakeOutbound, FakeReplica, NoHealth, ToolFn, World

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


_MADE: dict[str, Settings] = {}
"""Settings already built, by their ``fields`` (building reads the environment: ~6 ms, ~300 calls a run)."""


def settings(**fields: Any) -> Settings:
    """Settings for a unit test (defaults of the README, overridden by ``fields``): a deep copy of the
    ones built once per distinct ``fields`` (tests may change theirs). Raises pydantic's
    ``ValidationError`` for bad ``fields``, every time."""
    key = repr(sorted(fields.items()))
    made = _MADE.get(key)
    if made is None:
        made = _MADE[key] = Settings(**fields)
    return made.model_copy(deep=True)


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


class _Timed:
    """The test model as the model steps see it: a call takes ``seconds.pop(0)`` simulated seconds when
    a test set them (``Sim.model_seconds``), past the step's limit a ``model_timeout``."""

    def __init__(self, sim: "Sim") -> None:
        self.sim = sim

    async def stream(self, messages, tools, on_delta, should_stop=None, max_tokens=None, on_thinking=None,
                     model=None, timeout_s=None):
        sim = self.sim
        assert sim.model is not None
        reply = await sim.model.stream(messages, tools, on_delta, should_stop, max_tokens=max_tokens,
                                       on_thinking=on_thinking, model=model, timeout_s=timeout_s)
        if sim.model_seconds:  # a slow model: the call takes this long (the step's limit applies)
            took = sim.model_seconds.pop(0)
            if timeout_s is not None and took > timeout_s:
                sim.now += timedelta(seconds=timeout_s)
                raise ModelError(f"model call exceeded its {timeout_s:.1f} s limit", streamed=bool(reply.content),
                                 code="model_timeout")
            sim.now += timedelta(seconds=took)
        return reply


class Sim:
    """One task driven through the production interpreter and model steps over in-memory ports
    (``fakes``; see the module docstring)."""

    def __init__(self, model: TestModel | None = None, tools: dict[str, ToolFn] | None = None,
                 allowed: list[str] | None = None, mcp_tools: list[McpTool] | None = None, **fields: Any) -> None:
        ids = itertools.count(1)
        s = settings(**fields)
        self.deps = Deps.from_settings(s, model_configured=model is not None, rng=random.Random(7),
                                       new_call_id=lambda: f"call_own_{next(ids)}")
        self.model = model
        self.allowed = allowed if allowed is not None else ["kb_search", "code_exec"]
        self.mcp_tools = mcp_tools or []  # the tenant's MCP tools offered besides (contracts.mcp)
        self.now = T0
        self.world = World(clock=lambda: self.now,
                           tools=tools if tools is not None else {"kb_search": lambda c: ok(c, passage("p1"))})
        replica = FakeReplica(self.world)
        self.interp = Interpreter(Ports(FakeCheckpoints(self.world), FakeOutbound(self.world), replica, replica,
                                        replica), self.deps, s.agent.lease_ttl_s)
        self.steps = ModelSteps(self.interp, _Timed(self) if model is not None else None, s, NoHealth())
        self.model_seconds: list[float] = []  # simulated duration of the next model calls (seconds)

    # what the fakes recorded, by the names the tests read
    @property
    def tools(self) -> dict[str, ToolFn]:
        """How each tool answers a request (a result, or None: it never answers); settable."""
        return self.world.tools

    @tools.setter
    def tools(self, tools: dict[str, ToolFn]) -> None:
        self.world.tools = tools

    events = property(lambda self: self.world.events)
    publics = property(lambda self: self.world.publics)
    requests = property(lambda self: self.world.requests)
    approvals = property(lambda self: self.world.approvals)
    cancels = property(lambda self: self.world.cancels)
    notices = property(lambda self: self.world.notices)  # events for other tasks' logs
    remembered = property(lambda self: self.world.remembered)
    contexts = property(lambda self: self.world.contexts)
    summaries = property(lambda self: self.world.summaries)  # rule M7: the model summary calls asked for
    metrics = property(lambda self: self.world.metrics)  # counts asked of the replica's metrics

    @property
    def state(self) -> TaskState | None:
        """The task's stored checkpoint (None before it starts)."""
        return self.world.states.get(self.world.task_id or "")

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
        """Apply ``step`` (computed on ``state``) through the interpreter, then deliver the tool results
        and run the model steps it leads to, until nothing moves."""
        if step is None:
            return
        new = self.world.task_id is None
        self.world.task_id = self.world.task_id or step.state.task_id
        await self.interp.apply(step.state.task_id, lambda _state: step, loaded=step.state, attempts=1, new_task=new)
        await self.settle()

    async def settle(self) -> None:
        """Deliver the answered tool requests and run the due model steps, until nothing moves."""
        w = self.world
        while w.results or w.due:
            if w.results:
                r = w.results.pop(0)
                await self.interp.apply(self._task(), lambda st: recording.record_results(
                    self.deps, st, [r], self.now))
                continue
            task_id, fresh = w.due.pop(0)
            await self.steps.run(task_id, fresh=fresh)

    def _task(self) -> str:
        assert self.world.task_id is not None
        return self.world.task_id

    async def wake(self, after_s: float, bus_up: bool = True, served: frozenset[str] = frozenset(),
                   runs_started: dict[str, float] | None = None, settled: dict[str, float] | None = None) -> None:
        """Move time on by ``after_s`` seconds and fire the task's timers (``bus_up`` False: the
        broker does not answer; ``served``: tool request topics a live tool service process serves;
        ``runs_started``: idempotency key -> epoch seconds its run began at a live tool process;
        ``settled``: request topic -> epoch seconds its consumers' assignment settled)."""
        self.now += timedelta(seconds=after_s)
        await self.interp.apply(self._task(), lambda st: timers.wake(self.deps, st, self.now, bus_up, served,
                                                                      runs_started, settled))
        await self.settle()

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
