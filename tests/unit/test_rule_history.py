"""Rules M11, M12 in process (the production interpreter over fakes): ``history_search`` is offered only to a
user who has earlier questions and answers, its results are evidence the answer cites, and an answer written
from them is never cached for the tenant."""

from __future__ import annotations

from agentsim import Reply, Sim, TestModel, ok, question
from contracts.evidence import EvidenceItem
from services.orchestrator.agent import cache
from services.orchestrator.agent.cache import Recalled


def offered(model: TestModel) -> list[str]:
    """Tool names of the model's first call."""
    return [t["function"]["name"] for t in model.calls[0][1] or []]


def mine(question_asked=None):
    return (question_asked or question("我上次问的住宿标准是多少？")).model_copy(update={"user_id": "u", "tenant_id": "t"})


async def test_rule_m11_history_search_is_offered_only_to_a_user_with_history():
    model = TestModel(Reply(content="好的。"))
    await Sim(model).ask(mine(), recalled=Recalled(memory_on=True, has_history=True))
    assert "history_search" in offered(model) and "kb_search" in offered(model)

    for recalled in (Recalled(memory_on=True, has_history=False), Recalled(memory_on=False, has_history=True), None):
        model = TestModel(Reply(content="好的。"))
        await Sim(model).ask(mine(), recalled=recalled)
        assert "history_search" not in offered(model), recalled

    model = TestModel(Reply(content="好的。"))  # the request's tool list leaves it out
    asked = mine(question("我上次问的住宿标准是多少？").model_copy(
        update={"payload": question("我上次问的住宿标准是多少？").payload.model_copy(update={"allowed_tools": ["kb_search"]})}))
    await Sim(model).ask(asked, recalled=Recalled(memory_on=True, has_history=True))
    assert "history_search" not in offered(model)


def earlier() -> EvidenceItem:
    return EvidenceItem(chunk_id="history:m-1", document_id="history:task0", kind="history", title="以前的对话（2026-11-30）",
                        locator="任务 task0", text="问：公司差旅住宿标准？\n答：每晚 500 元[1]。", score=0.7)


async def test_rule_m12_an_earlier_answer_is_cited_evidence_and_never_cached():
    model = TestModel(Reply(tool_calls=[{"name": "history_search", "arguments": {"query": "住宿标准", "reason": "查以前的回答"}}]),
                      Reply(content="您上次得到的答复是每晚 500 元[1]。"))
    sim = Sim(model, tools={"history_search": lambda c: ok(c, earlier())})
    state = await sim.ask(mine(), recalled=Recalled(memory_on=True, has_history=True, outcome="miss"))
    assert state.status == "completed" and [e.kind for e in state.evidence] == ["history"]
    tool_message = next(m for m in model.calls[1][0] if m["role"] == "tool")
    assert "该用户以前的提问和回答" in tool_message["content"] and "500 元" in tool_message["content"]
    done = sim.of("task.completed")[0]
    assert [c.index for c in done.citations] == [1]
    assert cache.entry_for(state, done.citations, state.created_at) is None, "a personal answer is never cached"
