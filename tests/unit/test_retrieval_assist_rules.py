"""Rules K11-K13 without HTTP: the rerank protocol's bodies and answers, the model's answers, the rounds a rewrite
adds (with rule K9's sub-queries), the breaker, and when the settings turn each helper on. Over real HTTP (a
scripted rerank server, the scripted model, a real store): tests/stack/test_retrieval_assist.py."""

from __future__ import annotations

import pytest

from conduit.runtime.settings import Settings
from testkit import scripted_model
from services.retriever import modelhelp
from services.retriever.assist import Breaker
from services.retriever.modelhelp import parse_order, parse_rewrite, rerank_prompt
from services.retriever.rerank import StageError, order_by_scores, parse_scores, request_body
from services.retriever.rounds import Rewrite, plan_rounds


def test_request_bodies_per_protocol() -> None:
    auto = request_body("auto", "q", ["a", "b"], "bge")
    assert auto == {"query": "q", "documents": ["a", "b"], "top_n": 2, "model": "bge", "texts": ["a", "b"],
                    "truncate": True}
    assert request_body("cohere", "q", ["a"], None) == {"query": "q", "documents": ["a"], "top_n": 1}
    assert request_body("tei", "q", ["a"], "bge") == {"query": "q", "texts": ["a"], "truncate": True}
    with pytest.raises(ValueError, match="auto, cohere, tei"):
        request_body("jina", "q", [], None)


def test_both_answer_shapes_give_one_score_per_document() -> None:
    tei = [{"index": 2, "score": 0.9}, {"index": 0, "score": 0.1}, {"index": 1, "score": 0.5}]
    cohere = {"results": [{"index": 2, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1},
                          {"index": 1, "relevance_score": 0.5}]}
    assert parse_scores(tei, 3) == parse_scores(cohere, 3) == [0.1, 0.5, 0.9]
    # a server that cut to its own top_n: the rest are unscored, and keep their order after the scored ones
    assert parse_scores([{"index": 1, "score": 2}], 3) == [None, 2.0, None]
    assert order_by_scores([None, 2.0, None, 3.0]) == [3, 1, 0, 2]
    assert order_by_scores([0.5, 0.5, 0.7]) == [2, 0, 1]  # ties keep the fused order


@pytest.mark.parametrize("body", [
    {"results": []}, {"data": [1]}, "text", [{"index": 3, "score": 1.0}], [{"index": -1, "score": 1.0}],
    [{"index": "0", "score": 1.0}], [{"index": 0, "score": "high"}], [{"index": 0, "score": float("nan")}],
    [{"index": 0, "score": 1.0}, {"index": 0, "score": 0.5}], [{"index": 0}], [7],
])
def test_a_malformed_answer_or_wrong_indices_are_refused(body: object) -> None:
    with pytest.raises(StageError) as err:
        parse_scores(body, 3)
    assert err.value.outcome == "malformed"


def test_the_rewrite_answer_is_read_leniently_but_never_guessed() -> None:
    text = '好的：```json\n{"query": " 个人所得税  专项附加扣除 ", "sub_queries": ["子女教育", "", 3, "赡养老人", "房租"]}\n```'
    assert parse_rewrite(text) == Rewrite("个人所得税 专项附加扣除", ["子女教育", "赡养老人"])
    assert parse_rewrite('{"sub_queries": ["增值税 征收率"]}') == Rewrite(None, ["增值税 征收率"])
    assert parse_rewrite('{"query": "' + "税" * 300 + '"}').query == "税" * modelhelp.QUERY_MAX_CHARS
    for garbage in ("我不知道", '{"query": ""}', '{"query": 1}', '{"query": "q", "sub_queries": "a"}', "[1, 2]"):
        with pytest.raises(StageError) as err:
            parse_rewrite(garbage)
        assert err.value.outcome == "malformed", garbage


def test_the_model_order_names_candidates_and_the_rest_keep_their_place() -> None:
    assert parse_order('{"order": [3, 1]}', 4) == [2, 0, 1, 3]
    assert parse_order('排序结果：[2, "1", 2]', 3) == [1, 0, 2]  # a bare list, a number as text, a repeat
    for garbage in ('{"order": []}', '{"order": [0]}', '{"order": [5]}', '{"order": ["x"]}', "第一个最好", '{"ids": [1]}'):
        with pytest.raises(StageError) as err:
            parse_order(garbage, 4)
        assert err.value.outcome == "malformed", garbage


def test_rerank_prompt_numbers_the_candidates_on_one_line_each() -> None:
    prompt = rerank_prompt("国债利息要交个税吗？", ["《个人所得税法》第四条\n下列各项\n免征", "《增值税法》第十一条"])
    assert prompt.splitlines()[-2:] == ["[1] 《个人所得税法》第四条 下列各项 免征", "[2] 《增值税法》第十一条"]
    # the scripted model's default answer keeps that order (and a rewrite keeps the question)
    body = {"messages": [{"role": "system", "content": modelhelp.RERANK_INSTRUCTION}, {"role": "user", "content": prompt}]}
    assert scripted_model.echo_retrieval(body).content == '{"order": [1, 2]}'
    body = {"messages": [{"role": "system", "content": modelhelp.REWRITE_INSTRUCTION}, {"role": "user", "content": "个税？"}]}
    assert parse_rewrite(scripted_model.echo_retrieval(body).content) == Rewrite("个税？", [])
    assert modelhelp.RETRIEVAL_MARK == scripted_model.RETRIEVAL_MARK


def test_rewrite_rounds_come_after_the_callers_sub_queries_two_in_all() -> None:
    """Rules K9 and K12: the rewrite's query is a round of its own; sub-queries, the caller's first, at most 2."""
    rewrite = Rewrite("个人所得税 免征 国债利息", ["国债利息 个人所得税", "个税和契税"])
    assert plan_rounds("个税和契税", ["契税 税率"], rewrite) == [
        ("rewrite", "个人所得税 免征 国债利息"), ("sub:1", "契税 税率"), ("rewrite:1", "国债利息 个人所得税")]
    assert plan_rounds("个税和契税", ["a", "b"], rewrite) == [("rewrite", "个人所得税 免征 国债利息"), ("sub:1", "a"),
                                                            ("sub:2", "b")]
    # the question itself, repeats and blanks are dropped; without a rewrite rule K9 alone
    assert plan_rounds("q", [" q ", "a", "a "], Rewrite("q", ["a", "c"])) == [("sub:1", "a"), ("rewrite:1", "c")]
    assert plan_rounds("q", ["x", "y", "z"], None) == [("sub:1", "x"), ("sub:2", "y")]
    assert plan_rounds("q", None, None) == []


def test_breaker_opens_after_failures_in_a_row_and_lets_one_trial_through() -> None:
    now = [0.0]
    breaker = Breaker(3, 30.0, clock=lambda: now[0])
    for outcome in ("timeout", "malformed", "unavailable", "rejected"):
        assert breaker.allow()
        breaker.record(outcome)
    assert breaker.allow()  # a malformed answer reset the count: two failures since
    breaker.record("timeout")
    assert not breaker.allow()
    now[0] = 31.0
    assert breaker.allow() and not breaker.allow()  # one trial, the others wait for it
    breaker.record("ok")
    assert breaker.allow() and breaker.allow()


def _on(settings: Settings) -> tuple[bool, bool]:
    """(rule K12 in effect, rule K13 in effect) for ``settings``."""
    on = settings.llm.configured
    return settings.retrieval.model_rewrite_on(on), settings.retrieval.model_rerank_on(on)


def test_settings_turn_the_model_helpers_on_with_a_model_and_off_with_an_endpoint() -> None:
    none = Settings(openai_base_url=None)
    assert _on(none) == (False, False) and none.retrieval.rerank_url is None
    model = Settings(openai_base_url="http://m/v1")
    assert _on(model) == (True, True)
    assert not _on(Settings(openai_base_url=None, retrieval_model_rewrite=True))[0]  # nothing to call
    both = Settings(openai_base_url="http://m/v1", rerank_url="http://tei:8080/rerank")
    assert _on(both) == (True, False)  # rule K13 only without an endpoint (K11)
    off = Settings(openai_base_url="http://m/v1", retrieval_model_rewrite=False, retrieval_model_rerank=False)
    assert _on(off) == (False, False)
    assert (model.retrieval.rerank_top_n, model.retrieval.rerank_timeout_s, model.retrieval.rerank_protocol) == (24, 2.0, "auto")
    # rule K25: the agent's own kb_search calls skip the rewrite unless asked for
    assert model.retrieval.retrieval_model_rewrite_tool_calls is False
    assert Settings(openai_base_url="http://m/v1", retrieval_model_rewrite_tool_calls=True).retrieval.retrieval_model_rewrite_tool_calls
    # rule K26: nor the model's rerank, unless asked for
    assert model.retrieval.retrieval_model_rerank_tool_calls is False
    assert Settings(openai_base_url="http://m/v1", retrieval_model_rerank_tool_calls=True).retrieval.retrieval_model_rerank_tool_calls
