"""Output rules (O1-O3), in process: uncited claims are marked in the answer's language, the
confidence is the share of backed claims, and secrets never reach clients."""

from __future__ import annotations

from agentsim import Reply, Sim, TestModel, kb, ok, passage, question
from conduit.policy.redaction import MARK, redact
from services.orchestrator.agent.answers import MARK_EN, MARK_ZH, mark_uncited


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
