"""The pre-router (rule R1) and the chit-chat agent, in process: rules first, the router model's
scores through the thresholds, fail-open on any router error, per-tenant domain, ``route`` trace."""

from __future__ import annotations

import httpx
import pytest

from agentsim import Reply, Sim, TestModel, question, settings
from services.orchestrator import router
from services.orchestrator.agent import routing
from services.orchestrator.agent.routing import RouteDecision, by_rules, from_scores


@pytest.mark.parametrize("text,route,rule", [
    ("你好", "chitchat", "greeting"), ("您好！", "chitchat", "greeting"), ("Hello", "chitchat", "greeting"),
    ("谢谢", "chitchat", "thanks"), ("thank you!", "chitchat", "thanks"), ("你是谁？", "chitchat", "identity"),
    ("what can you do?", "chitchat", "identity"), ("123*456", "agent", "arithmetic"),
    ("计算 (3+4)*5 等于多少", "agent", "arithmetic"), ("what is 12 * 7?", "agent", "arithmetic"),
])
def test_rules_decide_whole_message_matches(text, route, rule):
    got = by_rules(text)
    assert got is not None and (got.route, got.rule, got.source) == (route, rule, "rules")
    assert got.calc_hint == (rule == "arithmetic")


@pytest.mark.parametrize("text", ["你好，请问增值税起征点是多少？", "增值税税率是多少？", "第12条", "3%", "谢谢你的回答，那社保怎么交？"])
def test_rules_leave_real_questions_to_the_agent(text):
    assert by_rules(text) is None


def test_thresholds():
    assert from_scores({"domain": 0.05, "chitchat": 0.1, "calculation": 0}).route == "out_of_scope"
    assert from_scores({"domain": 0.10, "chitchat": 0.1}).route == "agent"  # 0.10 is not below 0.10
    assert from_scores({"domain": 0.15, "chitchat": 0.8}).route == "chitchat"
    assert from_scores({"domain": 0.2, "chitchat": 0.9}).route == "agent"  # domain not below 0.2
    assert from_scores({"domain": 0.05, "chitchat": 0.9}).route == "chitchat"
    calc = from_scores({"domain": 0.7, "chitchat": 0.0, "calculation": 0.6})
    assert calc.route == "agent" and calc.calc_hint  # a hint, never a forced route


async def test_hello_goes_to_the_chitchat_agent_without_any_tool():
    model = TestModel(Reply(content="你好！有什么财税问题可以问我。"))
    sim = Sim(model)
    turns = [{"question": f"问{i}", "answer": f"答{i}"} for i in range(4)]
    state = await sim.ask(question("你好"), turns=turns)
    assert state.status == "completed" and state.mode == "chitchat" and sim.requests == []
    (messages, tools), = model.calls
    assert tools is None and model.max_tokens_seen == [routing.CHITCHAT_MAX_TOKENS]
    prompt_sent, date_line = messages[0]["content"].split("\n\n")  # rule V1: the chit-chat agent knows the date too
    assert prompt_sent == routing.chitchat_prompt(routing.Domain()) and 150 <= len(prompt_sent) <= 260
    assert date_line.startswith("今天是 2026-01-01（星期四，Asia/Shanghai）") and len(date_line) < 130
    assert len(messages) == 1 + routing.CHITCHAT_HISTORY + 1 and messages[-1]["content"] == "你好"
    route = [e for e in sim.of("trace") if e.phase == "route"]
    assert route and route[0].data["route"] == "chitchat" and route[0].data["rule"] == "greeting"
    assert state.trace[0]["phase"] == "route"
    done = sim.of("task.completed")[0]
    assert done.mode == "chitchat" and "[低置信度]" not in done.answer and done.confidence is None


async def test_hello_without_a_model_gets_the_fixed_reply_and_no_kb_call():
    sim = Sim(None)
    state = await sim.ask(question("你好"))
    assert state.status == "completed" and state.mode == "chitchat" and sim.requests == []
    assert state.answer == routing.fixed_reply("你好", routing.Domain())


async def test_out_of_scope_gets_a_polite_answer_without_a_model_call():
    model = TestModel(Reply(content="不该被调用"))
    sim = Sim(model, tenant_domains={"default": {"name": "医疗器械法规", "name_en": "medical device rules",
                                                 "description": "医疗器械注册与监管。"}})
    decision = RouteDecision(route="out_of_scope", source="model", scores={"domain": 0.02, "chitchat": 0.1})
    state = await sim.ask(question("明天北京天气怎么样？"), route=decision)
    assert model.calls == [] and state.mode == "out_of_scope" and "医疗器械法规" in state.answer


async def test_calculation_hint_is_added_and_tools_stay_offered():
    model = TestModel(Reply(content="结果是 56088（沙箱计算）。"))
    sim = Sim(model)
    await sim.ask(question("123*456"))
    messages, tools = model.calls[0]
    assert any(m["role"] == "system" and m["content"] == routing.CALC_HINT for m in messages)
    assert tools and messages[-1]["content"] == "123*456"


def _client(handler) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_router_model_scores_decide():
    s = settings(router_model="tiny", openai_base_url="http://router.test/v1")
    reply = {"choices": [{"message": {"content": '{"domain": 0.03, "chitchat": 0.2, "calculation": 0}'}}]}
    got = await router.classify(s.router, s.llm, "明天天气？", routing.Domain(), _client(lambda r: httpx.Response(200, json=reply)))
    assert got.route == "out_of_scope" and got.source == "model" and got.scores["domain"] == 0.03


@pytest.mark.parametrize("handler", [
    lambda r: httpx.Response(429, json={"error": "quota"}),
    lambda r: httpx.Response(200, json={"choices": [{"message": {"content": "not json"}}]}),
    lambda r: (_ for _ in ()).throw(httpx.ReadTimeout("slow", request=r)),
    lambda r: (_ for _ in ()).throw(httpx.ConnectError("down", request=r)),
])
async def test_router_fails_open(handler):
    s = settings(router_model="tiny", openai_base_url="http://router.test/v1")
    got = await router.classify(s.router, s.llm, "增值税？", routing.Domain(), _client(handler))
    assert got.route == "agent" and got.source == "none" and got.error


async def test_router_is_not_called_without_a_router_model():
    assert await router.decide(settings().router, settings().llm, "增值税税率是多少？", routing.Domain()) is None
    assert (await router.decide(settings().router, settings().llm, "你好", routing.Domain())).rule == "greeting"


async def test_an_empty_chitchat_answer_falls_back_to_the_fixed_reply():
    sim = Sim(TestModel(Reply(content="")))
    state = await sim.ask(question("谢谢"))
    assert state.answer == routing.fixed_reply("谢谢", routing.Domain()) and sim.requests == []
