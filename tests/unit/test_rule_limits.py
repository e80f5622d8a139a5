"""Planning rules: hard limits force one final call without tools, the deadline and the token budget stop
without a call (a wrap-up), the soft limit warns,
the window cuts history, tool schemas are offered only on non-final calls (in process)."""

from __future__ import annotations

from datetime import timedelta

from agentsim import T0, Reply, Sim, TestModel, kb, question
from services.orchestrator.agent import planning, prompt
from services.orchestrator.agent.window import window


def _system_notes(model: TestModel, call: int = -1) -> list[str]:
    return [m["content"] for m in model.calls[call][0] if m["role"] == "system"][1:]


async def test_round_limit_forces_a_final_call_without_tools():
    queries = iter(f"查询{i}" for i in range(100))
    model = TestModel(default=lambda msgs, tools: Reply(tool_calls=[kb(next(queries))]) if tools else Reply(content="最终回答。"))
    sim = Sim(model, max_rounds=6, max_tool_calls=50)
    state = await sim.ask()
    assert state.status == "completed" and state.stop_reason == "max_rounds" and state.answer == "最终回答。"
    assert len(model.calls) == 6 and model.calls[-1][1] is None
    assert prompt.LIMIT_NOTE in _system_notes(model)
    assert sim.of("step.started")[-1].phase == "final"


async def test_tool_call_budget_refuses_extra_calls_then_forces_the_final_answer():
    queries = iter(f"预算{i}" for i in range(100))
    model = TestModel(default=lambda msgs, tools: Reply(tool_calls=[kb(next(queries)) for _ in range(3)]) if tools
                      else Reply(content="预算内的回答。"))
    sim = Sim(model, max_rounds=6, max_tool_calls=5)
    state = await sim.ask()
    assert state.status == "completed" and state.stop_reason == "max_tool_calls"
    codes = [e.error_code for e in sim.of("tool.completed")]
    assert codes.count("tool_budget_exhausted") == 1 and len(codes) == 6  # 5 ran, the 6th was refused
    assert len(sim.requests) == 5 and model.calls[-1][1] is None


async def test_past_the_deadline_no_model_call_runs_and_the_task_wraps_up():
    model = TestModel(Reply(content="时间到了，直接回答。"))
    sim = Sim(model, task_deadline_s=300)
    state = await sim.ask(question("增值税税率是多少？", occurred_at=T0 - timedelta(seconds=301)))
    assert state.status == "completed" and state.stop_reason == "deadline"
    assert model.calls == [] and "回答时间已到" in state.answer


async def test_token_budget_is_checked_before_a_step_by_its_estimated_cost():
    # the first call fits (about 1,000 tokens estimated), uses 1,500 and asks for a tool that is not offered;
    # the next step's estimate (1,500 used + ~1,000) no longer fits 2,000: no second call, a wrap-up
    model = TestModel(Reply(tool_calls=[{"name": "web_fetch", "arguments": {"url": "https://example.org", "reason": "r"}}],
                            tokens=1500), Reply(content="不应调用。"))
    sim = Sim(model, max_tokens=2000)
    state = await sim.ask()
    assert state.status == "completed" and state.stop_reason == "max_tokens"
    assert len(model.calls) == 1 and planning.estimate_tokens(model.calls[0][0], None) + 0 < 2000


async def test_soft_limit_note_two_rounds_before_the_hard_limit():
    queries = iter(f"q{i}" for i in range(100))
    model = TestModel(default=lambda msgs, tools: Reply(tool_calls=[kb(next(queries))]) if tools else Reply(content="a"))
    sim = Sim(model, max_rounds=5, max_tool_calls=50)
    await sim.ask()
    notes = [_system_notes(model, i) for i in range(len(model.calls))]
    # rounds used before each call: 0, 1, 2, 3 (3 + 2 >= 5: soft), 4 (4 + 1 >= 5: the final call)
    assert notes == [[], [], [], [prompt.SOFT_LIMIT_NOTE], [prompt.LIMIT_NOTE]]


def test_hard_limit_names_the_first_limit_reached():
    sim = Sim(TestModel())
    s = sim.deps.settings.limits
    state = planning.start(sim.deps, question(), ["kb_search"], []).state
    assert planning.hard_limit(sim.deps, state, T0) is None
    state.rounds = s.max_rounds
    state.tool_calls_used = s.max_tool_calls
    assert planning.hard_limit(sim.deps, state, T0) == "max_rounds"
    state.rounds = 0
    assert planning.hard_limit(sim.deps, state, T0) == "max_tool_calls"
    state.tool_calls_used = 0
    assert planning.stop_before(sim.deps, state, state.messages, T0) is None
    assert planning.stop_before(sim.deps, state, state.messages, T0 + timedelta(seconds=s.task_deadline_s)) == "deadline"
    state.usage.total_tokens = s.max_tokens
    assert planning.stop_before(sim.deps, state, state.messages, T0) == "max_tokens"


def test_tool_schemas_offer_the_allowed_tools_only():
    sim = Sim(TestModel())
    state = planning.start(sim.deps, question(), ["kb_search"], []).state
    plan = planning.plan_step(sim.deps, state, T0)
    assert [t["function"]["name"] for t in plan.tools] == ["kb_search"] and not plan.final
    assert plan.messages[0]["content"].startswith(prompt.SYSTEM_PROMPT) and plan.messages[-1]["role"] == "user"
    assert "今天是 2026-01-01" in plan.messages[0]["content"]  # rule V1: the day asked ends the system prompt


def test_window_keeps_system_and_never_starts_with_a_tool_result():
    big = "x" * 1000
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": big},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "function": {"name": "kb_search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": big},
        {"role": "assistant", "content": big},
        {"role": "user", "content": "latest question"},
    ]
    cut = window(messages, max_chars=1500)
    assert cut[0]["role"] == "system" and cut[-1]["content"] == "latest question"
    assert cut[1]["role"] != "tool"
    ids = {c["id"] for m in cut for c in (m.get("tool_calls") or [])}
    assert all(m["tool_call_id"] in ids for m in cut if m["role"] == "tool")
    assert window(messages, max_chars=10**6) == messages
    assert window(messages, max_chars=10)[-1]["content"] == "latest question"


async def test_window_applies_to_what_the_model_is_sent():
    model = TestModel(Reply(content="a"))
    sim = Sim(model, context_window_chars=200)
    q = question("新问题")
    step = planning.start(sim.deps, q, ["kb_search"], [{"question": "旧" * 300, "answer": "答" * 300}])
    await sim.run(step)
    sent = model.calls[0][0]
    assert sent[0]["role"] == "system" and sent[-1]["content"] == "新问题"
    assert all("旧" * 300 != m["content"] for m in sent)
