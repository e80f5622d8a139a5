"""Ending well (rules E1-E9), in process: the call cap and the strict deadline, failed steps,
the empty answer, per-tool quotas, bad arguments, A<->B oscillation, the wrap-up, and 401/403
from a search provider never retried."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from agentsim import T0, Reply, Sim, TestModel, kb, ok, passage, question
from contracts.events import ToolError, ToolResultPayload
from conduit.runtime.toolservice import ToolFailure
from services.orchestrator.agent import planning, prompt


def test_each_call_is_bounded_by_the_cap_and_the_time_left():
    sim = Sim(TestModel(), task_deadline_s=1000, model_call_cap_s=300)
    state = planning.start(sim.deps, question(), ["kb_search"], []).state
    assert planning.plan_step(sim.deps, state, T0).timeout_s == 300
    assert planning.plan_step(sim.deps, state, T0 + timedelta(seconds=800)).timeout_s == 200


async def test_slow_model_with_a_5_s_deadline_ends_by_the_deadline_with_a_wrap_up():
    model = TestModel(Reply(tool_calls=[kb("增值税")]), Reply(content="太慢了"))
    sim = Sim(model, task_deadline_s=5)
    sim.model_seconds = [1.0, 60.0]  # the second call would take a minute
    state = await sim.ask(question("增值税起征点是多少？"))
    assert state.status == "completed" and state.stop_reason == "deadline"
    assert (state.finished_at - state.created_at).total_seconds() <= 5.0
    assert "回答时间已到" in state.answer and "[1]" in state.answer and "kb_search" not in state.answer
    assert [c.index for c in sim.of("task.completed")[0].citations] == [1]


def _failing(call):
    return ToolResultPayload(call_id=call.call_id, tool="kb_search", idempotency_key=call.idempotency_key,
                             outcome="error", error=ToolError(error_code="kb_down", message="down", kind="business"))


async def test_consecutive_failed_steps_stop_the_task():
    queries = iter(f"q{i}" for i in range(50))
    model = TestModel(default=lambda m, t: Reply(tool_calls=[kb(next(queries))]) if t else Reply(content="x"))
    sim = Sim(model, tools={"kb_search": _failing}, max_failed_steps=3, max_rounds=20, max_tool_calls=50)
    state = await sim.ask(question("What is the VAT threshold?"))
    assert state.stop_reason == "failed_steps" and len(model.calls) == 3
    assert state.answer.startswith("I stopped before finishing") and "kb_search" not in state.answer


async def test_empty_answer_gets_one_forced_final_call_without_tools():
    model = TestModel(Reply(content=""), Reply(content="回答[1]。"))
    sim = Sim(model)
    state = await sim.ask()
    assert state.status == "completed" and len(model.calls) == 2
    assert model.calls[1][1] is None and prompt.EMPTY_NOTE in [m["content"] for m in model.calls[1][0]]
    twice = Sim(TestModel(Reply(content=""), Reply(content="")))
    state = await twice.ask(question("增值税？"))
    assert state.stop_reason == "empty_answer" and state.answer.startswith("由于没能写出完整的回答")


async def test_per_tool_quota_refuses_with_tool_call_limit_reached():
    model = TestModel(Reply(tool_calls=[kb("a")]), Reply(tool_calls=[kb("b")]), Reply(content="答[1]。"))
    sim = Sim(model, tool_quotas={"kb_search": 1})
    await sim.ask()
    assert len(sim.requests) == 1
    assert "TOOL_CALL_LIMIT_REACHED" in sim.tool_messages()[-1]


async def test_bad_arguments_are_retried_at_most_twice_then_the_tool_is_withdrawn():
    bad = {"name": "kb_search", "arguments": {"reason": "no query"}}
    model = TestModel(default=lambda m, t: Reply(tool_calls=[bad]) if t else Reply(content="没有工具也回答。"))
    sim = Sim(model, allowed=["kb_search"], max_bad_arguments=2, max_rounds=10, max_failed_steps=10)
    state = await sim.ask()
    assert len(model.calls) == 4 and model.calls[-1][1] is None  # 1 + 2 retries, then no tool offered
    assert state.allowed_tools == [] and sim.requests == []


async def test_a_b_oscillation_ends_with_a_wrap_up():
    turns = [Reply(tool_calls=[kb(q)]) for q in ("甲", "乙", "甲", "乙")]
    model = TestModel(*turns, default=Reply(content="不应到这里"))
    sim = Sim(model, max_rounds=10)
    state = await sim.ask()
    assert state.stop_reason == "loop_detected" and len(sim.requests) == 3  # the 4th call never ran
    assert "反复重复" in state.answer


class _Unauthorized(BaseHTTPRequestHandler):
    hits = 0

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        type(self).hits += 1
        self.send_response(int(self.path.rsplit("/", 1)[-1].split("?")[0]))
        self.end_headers()


@pytest.mark.parametrize("status", [401, 403])
async def test_provider_401_403_are_forbidden_and_never_retried(status):
    from services.web.providers import _call

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Unauthorized)
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()  # shutdown waits one poll
    try:
        _Unauthorized.hits = 0
        request = httpx.Request("GET", f"http://127.0.0.1:{server.server_address[1]}/search/{status}")
        with pytest.raises(ToolFailure) as err:
            await _call(request, "searxng")
        assert err.value.error.kind == "forbidden" and err.value.error.error_code == "search_unauthorized"
        assert _Unauthorized.hits == 1
    finally:
        server.shutdown()
        server.server_close()
    # and the agent core never retries a forbidden error (only transient ones, rule A8)
    result = ToolResultPayload(call_id="c", tool="web_search", idempotency_key="k", outcome="error",
                               error=err.value.error)
    from services.orchestrator.agent.recording import transient
    assert not transient(result)


async def test_a_silent_tool_is_cut_at_the_task_deadline():
    model = TestModel(Reply(tool_calls=[kb("增值税")]), Reply(content="不应调用"))
    sim = Sim(model, tools={"kb_search": lambda c: None}, task_deadline_s=5, tool_timeout_s=30)
    await sim.ask(question("增值税？"))
    (call,) = sim.requests
    assert (call.deadline_at - sim.state.created_at).total_seconds() == 5
    await sim.wake(5)
    assert sim.state.status == "completed" and sim.state.stop_reason == "deadline" and len(model.calls) == 1


def test_log_lines_have_their_secrets_redacted():
    from conduit.runtime.logs import redact_secrets

    line = redact_secrets(None, "info", {"event": "calling with api_key=sk-abcdefghijklmnopqrstuvwxyz", "n": 3})
    assert "sk-abc" not in line["event"] and line["n"] == 3


async def test_a_clarifying_question_ends_with_needs_input_and_the_reply_continues_with_the_evidence():
    model = TestModel(Reply(tool_calls=[kb("个税")]), Reply(content="NEEDS_INPUT: 你问的是工资薪金还是劳务报酬？"))
    sim = Sim(model)
    state = await sim.ask(question("个税怎么算？"))
    end = sim.events[-1]
    assert state.status == "needs_input" and state.terminal
    assert end.type == "task.needs_input" and end.question == "你问的是工资薪金还是劳务报酬？" and end.evidence == 1
    turn = {"question": state.question, "answer": state.answer,
            "evidence": [e.model_dump(mode="json") for e in state.evidence]}
    reply_model = TestModel(Reply(content="工资薪金按累计预扣法计算[1]。"))
    again = Sim(reply_model)
    state = await again.ask(question("工资薪金"), turns=[turn])
    assert state.status == "completed" and [c.index for c in again.of("task.completed")[0].citations] == [1]
    tool_messages = [m["content"] for m in reply_model.calls[0][0] if m["role"] == "tool"]
    assert tool_messages and "《p1》" in tool_messages[0] and "<untrusted_content>" in tool_messages[0]


async def test_an_approval_wait_ends_at_the_task_deadline():
    call = {"name": "code_exec", "arguments": {"code": "print(1)", "reason": "算"}}
    sim = Sim(TestModel(Reply(tool_calls=[call]), Reply(content="不应调用")), task_deadline_s=5, approval_ttl_s=300)
    state = await sim.ask(question("算一下"))
    assert state.status == "waiting_approval" and (state.pending[0].expires_at - state.created_at).total_seconds() == 5
    await sim.wake(5)
    assert sim.state.status == "completed" and sim.state.stop_reason == "deadline"
