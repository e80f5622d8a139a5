"""Output rules (O1-O4), in process: uncited claims are marked in the answer's language, the
confidence is the share of backed claims, secrets never reach clients, and a retrieval-only answer
to a request to run code or search the web says that this needs a model."""

from __future__ import annotations

from agentsim import Reply, Sim, TestModel, kb, ok, passage, question
from conduit.policy.redaction import MARK, redact
from services.orchestrator.agent import fallback
from services.orchestrator.agent.answers import MARK_EN, MARK_ZH, mark_uncited
from services.orchestrator.agent.routing import is_chinese


def test_uncited_sentences_are_marked_in_the_answer_language():
    zh, conf = mark_uncited("小规模纳税人适用3%征收率[1]。起征点由国务院规定。", "增值税税率？")
    assert zh == f"小规模纳税人适用3%征收率[1]。起征点由国务院规定{MARK_ZH}。" and conf == 0.5
    en, conf = mark_uncited("The levy rate is 3% [1]. The threshold is set by the State Council.", "What rate?")
    assert en == f"The levy rate is 3% [1]. The threshold is set by the State Council {MARK_EN}." and conf == 0.5


def test_sandbox_computations_count_as_backed_and_code_is_left_alone():
    text = "税额为 300 元（沙箱计算）。\n```python\nprint(100 * 3)\n```\n依据第一条[1]。"
    marked, conf = mark_uncited(text, "算一下")
    assert marked == text and conf == 1.0


def test_no_claims_no_confidence():
    assert mark_uncited("好的。", "嗯")[1] is None


async def test_completed_answer_is_marked_and_carries_confidence():
    model = TestModel(Reply(tool_calls=[kb("增值税")]), Reply(content="征收率为3%[1]。此外还有别的规定。"))
    sim = Sim(model)
    await sim.ask(question("增值税征收率是多少？"))
    done = sim.of("task.completed")[0]
    assert done.answer.endswith(f"此外还有别的规定{MARK_ZH}。") and done.confidence == 0.5
    assert sim.state.confidence == 0.5


def test_redaction_of_keys_tokens_and_passwords():
    text = ("key sk-abcdefghijklmnopqrstuvwx123 and AKIAABCDEFGHIJKLMNOP, password=hunter22, 密码：Abc12345, "
            "Authorization: Bearer abcdefghijklmnopqrstu, jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.c2lnbmF0dXJlMTIz")
    out = redact(text)
    for secret in ("sk-abc", "AKIAABC", "hunter22", "Abc12345", "abcdefghijklmnopqrstu", "eyJhbGci"):
        assert secret not in out
    assert "password=" + MARK in out and "密码：" + MARK in out
    assert redact(out) == out and redact("增值税税率为3%。") == "增值税税率为3%。"


async def test_secrets_are_redacted_from_answers_and_from_tool_output_shown_to_clients():
    leaked = passage("cfg", "配置：api_key=sk-live-0123456789abcdefghijkl")
    model = TestModel(Reply(tool_calls=[kb("配置")]), Reply(content="密钥是 sk-live-0123456789abcdefghijkl [1]。"))
    sim = Sim(model, tools={"kb_search": lambda c: ok(c, leaked)})
    await sim.ask(question("配置是什么？"))
    shown = sim.of("evidence")[0].items[0].text
    assert "sk-live" not in shown and MARK in shown
    assert "sk-live" not in sim.of("task.completed")[0].answer


async def test_thinking_streams_only_for_tenants_that_ask_and_never_joins_the_answer():
    on = Sim(TestModel(Reply(thinking="先想一想……", content="好的[1]。")), thinking_tenants=["default"])
    await on.ask()
    assert [e.text for e in on.of("thinking")] == ["先想一想……"] and "想一想" not in on.state.answer
    assert on.types().index("thinking") < on.types().index("answer.delta")
    off = Sim(TestModel(Reply(thinking="先想一想……", content="好的。")))
    await off.ask()
    assert off.of("thinking") == []


async def test_a_retrieval_only_answer_quotes_passages_unmarked():
    sim = Sim(None, tools={"kb_search": lambda c: ok(c, passage("p1", "第一句的内容很长。第二句也很长的内容。"))})
    await sim.ask(question("小规模纳税人的征收率是多少？"))
    assert sim.state.mode == "retrieval_only" and sim.state.status == "completed"
    assert "[1]" in sim.state.answer and MARK_ZH not in sim.state.answer and sim.state.confidence is None


# ------------------------------------------------------------------ rule O4
CODE_REQUESTS = ["用代码计算 1234*5678", "compute 2**100 with code", "写个程序算一下 2^10", "please compute 3*7 in python",
                 "计算 1234*5678", "用python统计一下", "使用代码计算小规模纳税人的增值税"]
KB_QUESTIONS = ["小规模纳税人适用简易计税方法的征收率是多少？", "统一社会信用代码是什么", "统一社会信用代码计算规则",
                "What does the civil code say about contracts?", "增值税怎么计算", "自2024-01-01起如何计算滞纳金",
                "执行程序怎么走", "网上办税怎么操作", "How do I file taxes online?"]


def test_code_and_web_requests_are_told_apart_from_knowledge_base_questions():
    assert [q for q in CODE_REQUESTS if fallback.model_needs(q) != ("code",)] == []
    assert [q for q in KB_QUESTIONS if fallback.model_needs(q)] == []
    assert fallback.model_needs("联网搜索一下最新的个税政策") == ("web",)
    assert fallback.model_needs("search the web for the VAT rate and compute 3*7 in python") == ("code", "web")


def test_a_code_request_without_a_model_gets_one_line_in_its_language_naming_the_settings():
    zh = fallback.compose("用代码计算 1234*5678", [], model_configured=False)
    assert zh == "仅检索模式不能运行代码：请设置 OPENAI_BASE_URL 和 CONDUIT_MODEL 配置语言模型。"
    en = fallback.compose("compute 2**100 with code", [], model_configured=False)
    assert "\n" not in en and "run code" in en and "OPENAI_BASE_URL" in en and "CONDUIT_MODEL" in en
    assert not is_chinese(en)
    down = fallback.compose("用代码计算 1234*5678", [], model_configured=True)
    assert "暂时不可用" in down and "运行代码" in down and "\n" not in down


def test_a_question_with_more_than_the_request_keeps_its_passages_under_the_line():
    text = fallback.compose("用代码计算小规模纳税人销售额 100 万的增值税", [], model_configured=False)
    head, line, rest = text.split("\n\n")
    assert head.startswith("（未配置语言模型") and line.startswith("仅检索模式不能运行代码") and rest == fallback.NOTHING_FOUND
    web = fallback.compose("search the web for the latest VAT rate", [], model_configured=False)
    assert "cannot search the web" in web.split("\n\n")[1]
    assert "仅检索模式" not in fallback.compose("增值税怎么计算", [], model_configured=False)  # no request, no line


async def test_without_a_model_a_code_request_with_law_passages_says_so_and_keeps_them():
    sim = Sim(None, tools={"kb_search": lambda c: ok(c, passage("p1"))})
    state = await sim.ask(question("用代码计算小规模纳税人 100 万销售额的增值税"))
    assert state.mode == "retrieval_only" and "仅检索模式不能运行代码" in state.answer and "[1]" in state.answer
    sim = Sim(None, tools={"kb_search": lambda c: ok(c, passage("p1"))})
    state = await sim.ask(question("compute 2**100 with code"))
    assert state.status == "completed" and "[1]" not in state.answer and "run code" in state.answer
    assert "tool.requested" not in sim.types() and "evidence" not in sim.types()  # only a request: no search either
