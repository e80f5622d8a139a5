"""Rule A22, the reviewer pass (in process): a non-trivial answer is checked claim by claim against
its cited evidence by one bounded model call before it completes; unsupported claims are revised
away or marked; the reviewer failing leaves the answer as it was; off unless turned on."""

from __future__ import annotations

import json

from agentsim import Reply, Sim, TestModel, kb
from contracts.stream import AnswerReset, StepStarted, TaskCompleted
from services.orchestrator.agent import review
from conduit.runtime.llm.model import ModelError

ANSWER = "增值税的基本税率为百分之十三[1]。小规模纳税人的征收率为百分之五[1]。"


def verdicts(*v: str, revision: str = "") -> Reply:
    return Reply(content=json.dumps({"verdicts": list(v), "revision": revision}, ensure_ascii=False))


def sim(*turns: Reply, **fields) -> Sim:
    return Sim(TestModel(Reply(tool_calls=[kb("增值税 税率")]), Reply(content=ANSWER), *turns),
               review_enabled=True, **fields)


def done(s: Sim) -> TaskCompleted:
    ends = [e for e in s.events if isinstance(e, TaskCompleted)]
    assert len(ends) == 1
    return ends[0]


async def test_a_supported_answer_stands_and_says_it_was_checked():
    s = sim(verdicts("supported", "supported"))
    state = await s.ask()
    assert state.answer == ANSWER and done(s).review == {"checked": 2, "unsupported": 0, "contradicted": 0,
                                                           "revised": False, "marked": 0}
    assert [e.phase for e in s.events if isinstance(e, StepStarted)][-1] == "review"
    assert not [e for e in s.events if isinstance(e, AnswerReset) and "checked" in e.reason]
    sent = s.model.calls[-1]
    assert sent[1] is None and "小规模纳税人的征收率为百分之五[1]" in sent[0][1]["content"]  # no tools; the claims
    assert any(t.get("phase") == "review" for t in state.trace)


async def test_an_unsupported_claim_is_revised_away():
    revised = "增值税的基本税率为百分之十三[1]。"
    s = sim(verdicts("supported", "unsupported", revision=revised))
    state = await s.ask()
    assert state.answer == revised and done(s).review["revised"] is True and done(s).review["unsupported"] == 1
    assert any(isinstance(e, AnswerReset) for e in s.events)


async def test_a_revision_with_a_new_number_is_refused_and_the_claim_is_marked():
    s = sim(verdicts("supported", "contradicted", revision="增值税的基本税率为百分之十三[1]，另有9%的税率[1]。"))
    state = await s.ask()
    assert state.answer == "增值税的基本税率为百分之十三[1]。小规模纳税人的征收率为百分之五[1][待核实]。"
    assert done(s).review["marked"] == 1 and done(s).review["revised"] is False


async def test_the_reviewer_down_leaves_the_answer_as_it_was():
    class Down(TestModel):
        __test__ = False

        async def stream(self, messages, tools, on_delta, *args, **kwargs):
            if "事实核查员" in str(messages[0].get("content")):
                raise ModelError("reviewer down", streamed=False, code="model_unavailable")
            return await super().stream(messages, tools, on_delta, *args, **kwargs)

    s = Sim(Down(Reply(tool_calls=[kb("增值税 税率")]), Reply(content=ANSWER)), review_enabled=True)
    state = await s.ask()
    assert state.status == "completed" and state.answer == ANSWER and state.mode == "agent"
    assert done(s).review == {"error": "model_unavailable"}


async def test_an_unreadable_review_leaves_the_answer_as_it_was():
    s = sim(Reply(content="看起来都对。"))
    state = await s.ask()
    assert state.answer == ANSWER and done(s).review == {"error": "unreadable_review"}


async def test_off_by_default_and_never_for_chit_chat():
    s = Sim(TestModel(Reply(tool_calls=[kb("增值税 税率")]), Reply(content=ANSWER)))
    await s.ask()
    assert done(s).review is None and len(s.model.calls) == 2
    chat = Sim(TestModel(Reply(content="你好！有什么可以帮你？")), review_enabled=True)
    from agentsim import question  # noqa: PLC0415
    await chat.ask(question("你好"))
    assert done(chat).review is None and len(chat.model.calls) == 1


async def test_a_tenant_may_turn_it_on_alone():
    from contracts.events import QuestionPayload  # noqa: PLC0415
    from agentsim import question  # noqa: PLC0415

    s = Sim(TestModel(Reply(tool_calls=[kb("增值税 税率")]), Reply(content=ANSWER), verdicts("supported", "supported")),
            tenants={"t1": {"review": True}})
    q = question("增值税的税率是多少？")
    await s.ask(q.model_copy(update={"tenant_id": "t1", "payload": QuestionPayload(question=q.payload.question)}))
    assert done(s).review["checked"] == 2


def test_parse_wants_one_known_verdict_per_claim():
    assert review.parse('{"verdicts": ["supported"]}', 1) == (["supported"], "")
    assert review.parse('前言 {"verdicts": ["Supported", "unsupported"], "revision": "x"} 后记', 2) == (
        ["supported", "unsupported"], "x")
    assert review.parse('{"verdicts": ["supported"]}', 2) is None
    assert review.parse('{"verdicts": ["maybe"]}', 1) is None
    assert review.parse("not json", 1) is None
