"""Rule A21, the fallback chain (in process): when the primary model fails before its first token
or its breaker is open, the next model of the tenant's chain answers, and the trace and
``task.completed`` say which; a model without tools answers only what needs none; a model's
``context_chars`` bounds what a step sends; a worker and a summary keep the request's model."""

from __future__ import annotations

from typing import Any

from agentsim import T0, Reply, Sim, TestModel, kb, question
from contracts.events import ChildSpec, QuestionAsked, QuestionPayload
from contracts.stream import TaskCompleted, TraceEvent
from services.orchestrator.agent import team
from services.orchestrator.agent.state import PendingCall
from conduit.runtime.llm.model import ModelError

MODELS = [{"name": "primary", "base_url": "http://primary.invalid/v1", "model": "p-1"},
          {"name": "backup", "base_url": "http://backup.invalid/v1", "model": "b-1"},
          {"name": "small", "base_url": "http://small.invalid/v1", "model": "s-1", "tools": False,
           "context_chars": 3000}]
CHAIN = {"t1": {"model": "primary", "fallbacks": ["small", "backup"]}}


class Endpoints(TestModel):
    """A scripted model that fails, before any token, for the endpoint names in ``down``."""

    __test__ = False

    def __init__(self, *turns: Reply, down: set[str] | None = None, code: str = "model_unavailable") -> None:
        super().__init__(*turns, default=Reply(content="模型回答[1]。"))
        self.down, self.code = down or set(), code

    async def stream(self, messages, tools, on_delta, should_stop=None, max_tokens=None, on_thinking=None,
                     model=None, timeout_s=None):
        if model in self.down:
            self.models_seen.append(model)
            raise ModelError(f"{model} is down", streamed=False, code=self.code)
        return await super().stream(messages, tools, on_delta, should_stop, max_tokens, on_thinking, model, timeout_s)


def sim(model: Endpoints, **fields: Any) -> Sim:
    return Sim(model, models=MODELS, tenants=CHAIN, **fields)


def tenant_question(text: str = "增值税的税率是多少？", model: str | None = None) -> QuestionAsked:
    q = question(text)
    return q.model_copy(update={"tenant_id": "t1", "payload": QuestionPayload(question=text, model=model)})


def completed(s: Sim) -> TaskCompleted:
    done = [e for e in s.events if isinstance(e, TaskCompleted)]
    assert len(done) == 1
    return done[0]


async def test_a_primary_down_before_its_first_token_hands_the_step_to_the_next_model_with_tools():
    model = Endpoints(Reply(tool_calls=[kb("增值税 税率")]), down={"primary"})
    s = sim(model)
    state = await s.ask(tenant_question())
    assert state.status == "completed" and state.mode == "agent"
    # "small" has no tools and the step offers them: skipped, "backup" answers
    assert model.models_seen[:2] == ["primary", "backup"]
    moved = [t for t in state.trace if t.get("phase") == "model_fallback"]
    assert moved[0] == {"phase": "model_fallback", "step": 1, "from": "primary", "to": "backup",
                        "code": "model_unavailable"}
    assert [m["step"] for m in moved] == [1, 3]  # each step starts from the primary (its breaker is not open yet)
    assert completed(s).model == "backup"
    assert any(isinstance(e, TraceEvent) and e.phase == "model_fallback" for e in s.events)
    failed = [t for t in state.trace if t.get("phase") == "llm" and "code" in t]
    assert failed[0]["model"] == "primary"
    assert [t["model"] for t in state.trace if t.get("phase") == "llm" and "total_s" in t] == ["backup", "backup"]
    assert state.rounds == 2  # each fallback re-ran its round, it did not count as one


async def test_the_next_step_tries_the_primary_again():
    model = Endpoints(Reply(tool_calls=[kb("增值税 税率")]), down={"primary"})
    s = sim(model)
    await s.ask(tenant_question())
    assert model.models_seen[2] == "primary"  # after the backup's reply the chain starts over


async def test_an_open_breaker_skips_the_model_without_calling_it():
    model = Endpoints()
    s = sim(model, model_breaker_failures=1)
    s.deps.model_breaker_for("primary").failure(T0.timestamp())
    state = await s.ask(tenant_question())
    assert model.models_seen == ["backup"] and completed(s).model == "backup"
    assert state.mode == "agent" and state.fallback_reason is None


async def test_every_model_down_answers_from_the_knowledge_base_with_the_last_code():
    model = Endpoints(down={"primary", "backup"}, code="provider_overloaded")
    state = await sim(model).ask(tenant_question())
    assert model.models_seen == ["primary", "backup"]
    assert state.mode == "retrieval_only" and state.fallback_reason.startswith("provider_overloaded")
    assert state.status == "completed"


async def test_with_every_breaker_open_the_reason_is_the_open_circuit():
    model = Endpoints()
    s = sim(model, model_breaker_failures=1)
    for name in ("primary", "backup"):
        s.deps.model_breaker_for(name).failure(T0.timestamp())
    state = await s.ask(tenant_question())
    assert model.models_seen == [] and state.fallback_reason == "model_circuit_open"


async def test_only_a_model_without_tools_left_is_not_given_a_tool_step():
    model = Endpoints()
    s = Sim(model, models=MODELS, tenants={"t1": {"model": "small"}})
    state = await s.ask(tenant_question())
    assert model.models_seen == [] and state.mode == "retrieval_only" and state.fallback_reason == "no_tool_model"


async def test_a_model_without_tools_answers_chit_chat_within_its_context():
    model = Endpoints(Reply(content="你好！"))
    s = Sim(model, models=MODELS, tenants={"t1": {"model": "small"}})
    state = await s.ask(tenant_question("你好"))
    assert state.mode == "chitchat" and model.models_seen == ["small"] and completed(s).model == "small"


async def test_a_model_s_context_chars_bounds_the_history_a_step_sends():
    model = Endpoints(Reply(tool_calls=[kb("q")]))
    s = Sim(model, models=[{**MODELS[1], "context_chars": 1200}], tenants={"t1": {"model": "backup"}})
    turns = [{"question": "很长的早先问题。" * 60, "answer": "很长的早先回答。" * 60} for _ in range(4)]
    await s.ask(tenant_question(), turns=turns)
    sent = sum(len(str(m.get("content") or "")) for m in model.calls[0][0] if m.get("role") != "system")
    assert sent <= 1200


async def test_a_request_that_names_a_model_starts_there_and_falls_back_on_the_tenant_chain():
    model = Endpoints(down={"backup"})
    s = sim(model)
    await s.ask(tenant_question(model="backup"))
    assert model.models_seen == ["backup", "primary"] and completed(s).model == "primary"


async def test_a_worker_keeps_the_model_its_supervisor_s_request_named():
    s = sim(Endpoints())
    state = await s.ask(tenant_question(model="backup"))
    child = ChildSpec(parent_task_id=state.task_id, root_task_id=state.task_id, parent_call_id="c1", parent_key="k",
                      worker="researcher", depth=1, deadline_at=T0, max_tool_calls=2, max_tokens=1000)
    call = PendingCall(call_id="c1", name="delegate", arguments={"task": "查税率"}, idempotency_key="k", step=1,
                       deadline_at=T0, child=child)
    assert team.child_question(state, call).payload.model == "backup"
