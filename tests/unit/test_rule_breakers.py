"""Circuit breakers: open after consecutive failures, fail fast while open, then let exactly
ONE trial call through (half-open) whose outcome closes or reopens the circuit; the model's
breaker sends the agent to retrieval-only answers (in process)."""

from __future__ import annotations

from agentsim import T0, Reply, Sim, TestModel, kb, ok, passage, question
from contracts.events import ToolError, ToolResultPayload
from conduit.policy.breaker import CircuitBreaker


def test_breaker_opens_at_the_threshold_and_a_success_resets_the_count():
    b = CircuitBreaker(failures=3, cooldown_s=30)
    b.failure(0)
    b.failure(1)
    b.success()
    b.failure(2)
    b.failure(3)
    assert b.allow(3) and b.state(3) == "closed"
    b.failure(4)
    assert b.state(4) == "open" and not b.allow(5) and not b.allow(33.9)


def test_half_open_lets_exactly_one_trial_call_through():
    b = CircuitBreaker(failures=2, cooldown_s=30)
    b.failure(0)
    b.failure(0)
    assert b.state(30) == "half_open"
    assert b.allow(30) is True  # the trial
    assert [b.allow(30.1 + i) for i in range(5)] == [False] * 5  # everyone else still fails fast
    b.success()
    assert b.state(40) == "closed" and all(b.allow(40) for _ in range(3))


def test_a_failed_trial_reopens_for_another_cooldown():
    b = CircuitBreaker(failures=2, cooldown_s=30)
    b.failure(0)
    b.failure(0)
    assert b.allow(31)
    b.failure(32)
    assert b.state(33) == "open" and not b.allow(61)
    assert b.allow(62)  # the next trial, one cool-down after the failed one


def test_a_trial_that_never_reports_is_given_up_after_a_cooldown():
    b = CircuitBreaker(failures=1, cooldown_s=10)
    b.failure(0)
    assert b.allow(10) and not b.allow(15)
    assert b.allow(20.5)


async def test_open_model_breaker_answers_in_retrieval_only_mode():
    model = TestModel(default=Reply(content="模型回答。"))
    sim = Sim(model, model_breaker_failures=1, model_breaker_cooldown_s=30)
    sim.deps.model_breaker.failure(T0.timestamp())
    state = await sim.ask()
    assert model.calls == []  # failed fast
    assert state.mode == "retrieval_only" and state.fallback_reason == "model_circuit_open"
    assert state.status == "completed" and "[1]" in state.answer and len(sim.requests) == 1


async def test_half_open_model_breaker_sends_one_trial_and_closes_on_success():
    model = TestModel(default=Reply(content="模型回答。"))
    sim = Sim(model, model_breaker_failures=1, model_breaker_cooldown_s=30)
    sim.deps.model_breaker.failure(T0.timestamp() - 31)
    state = await sim.ask()
    assert len(model.calls) == 1 and state.mode == "agent" and state.answer == "模型回答。"
    assert sim.deps.model_breaker.state(T0.timestamp()) == "closed"


async def test_while_the_model_trial_is_out_other_tasks_fail_fast():
    sim = Sim(TestModel(), model_breaker_failures=1, model_breaker_cooldown_s=30)
    b = sim.deps.model_breaker
    b.failure(T0.timestamp() - 31)
    assert b.allow(T0.timestamp())  # another task's step took the trial
    other = Sim(TestModel(default=Reply(content="x")))
    other.deps.model_breaker = b
    state = await other.ask()
    assert other.model.calls == [] and state.fallback_reason == "model_circuit_open"


async def test_model_failure_falls_back_to_cited_passages_and_withdraws_streamed_text():
    model = TestModel(Reply(content="写了一半", error="APIConnectionError: down", streamed=True))
    sim = Sim(model, tools={"kb_search": lambda c: ok(c, passage("p1", "征收率为百分之三。"))})
    state = await sim.ask()
    assert state.mode == "retrieval_only" and state.fallback_reason.startswith("model_unavailable")
    t = sim.types()
    assert t.index("answer.delta") < t.index("answer.reset") < t.index("tool.requested")
    assert state.status == "completed" and "征收率为百分之三" in state.answer
    assert sim.deps.model_breaker.count == 1


async def test_without_a_model_one_kb_search_then_quoted_passages():
    sim = Sim(None, tools={"kb_search": lambda c: ok(c, passage("p1"), passage("p2"))})
    state = await sim.ask()
    assert state.mode == "retrieval_only" and state.fallback_reason == "no_model_configured"
    assert [r.name for r in sim.requests] == ["kb_search"] and sim.requests[0].call_id == "call_own_1"
    assert state.answer.startswith("（未配置语言模型") and "[1]" in state.answer and "[2]" in state.answer
    assert sim.events[-1].mode == "retrieval_only"


async def test_tool_breaker_half_open_lets_one_call_through():
    sim = Sim(TestModel(Reply(tool_calls=[kb("a"), kb("b")]), Reply(content="好。")),
              tool_breaker_failures=1, tool_breaker_cooldown_s=30)
    sim.deps.tool_breakers["kb_search"].failure(T0.timestamp() - 31)
    await sim.ask()
    codes = [e.error_code for e in sim.of("tool.completed")]
    assert len(sim.requests) == 1 and codes.count("circuit_open") == 1
    assert sim.deps.tool_breakers["kb_search"].state(T0.timestamp()) == "closed"  # the trial succeeded


async def test_without_a_model_a_question_longer_than_a_query_searches_its_start_once():
    """A 4,000-character question (the gateway takes up to 4,000) is searched by its first 500
    characters, once; a search that fails is answered, not asked again (it looped before)."""
    sim = Sim(None, tools={"kb_search": lambda c: ok(c, passage("p1"))})
    state = await sim.ask(question("税" * 4000))
    assert [len(r.arguments["query"]) for r in sim.requests] == [500]
    assert state.status == "completed" and "[1]" in state.answer
    def down(c):
        return ToolResultPayload(call_id=c.call_id, tool="kb_search", idempotency_key=c.idempotency_key, outcome="error",
                                 error=ToolError(error_code="tool_not_available", kind="business", message="down"))
    failing = Sim(None, tools={"kb_search": down})
    state = await failing.ask()
    assert [r.name for r in failing.requests] == ["kb_search"] and state.status == "completed"
