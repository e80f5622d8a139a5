"""Rules K11-K13 over real HTTP: the rerank endpoint (a scripted ``/rerank`` server speaking both answer shapes)
and the model's rewrite and listwise rerank (the scripted OpenAI-compatible model), first on their own, then in
``KbSearcher.search`` over a real store (USE embeddings, Qdrant Edge, two laws from laws.db). Every failure —
HTTP 500, a sleep past the timeout, a malformed body, wrong indices, connection refused — leaves the fused order
(fail-open) and shows in the attempts, the log and the counter. Pure parts: tests/unit/test_retrieval_assist_rules.py.

These prove the mechanics only: the quality of a reranker or of a model's rewrite needs a real one to measure.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ops.infra import free_port
from conduit.runtime import metrics
from conduit.runtime.settings import Settings
from testkit.scripted_model import ScriptedModel, Turn
from testkit.scripted_rerank import ScriptedReranker
from services.retriever.assist import SearchAssist
from services.retriever.embeddings import UseEmbedder
from services.retriever.ingest import ingest_law_db
from services.retriever.modelhelp import REWRITE_INSTRUCTION, ModelHelp
from services.retriever.pipeline import KbSearcher
from services.retriever.rounds import Attempt
from services.retriever.store import Hit, open_store

VAT = "中华人民共和国增值税法"
PIT = "中华人民共和国个人所得税法"
QUESTION = "小规模纳税人适用简易计税方法的征收率是多少？"
TEXTS = ["纳税人应当依法缴纳税款。", "国家实行统一的税收制度。", "本法自公布之日起施行。",
         "小规模纳税人适用简易计税方法，征收率为百分之三。", "税务机关依法征收管理。"]


def _hits() -> list[Hit]:
    """Five candidates in fused order; the fourth answers ``QUESTION`` (most of its character bigrams)."""
    return [Hit(f"id{i}", 1.0 - i / 10, {"title": "《测试法》", "locator": f"第{i + 1}条", "text": t}, 0.5)
            for i, t in enumerate(TEXTS)]


def _ids(hits: list[Hit]) -> list[str]:
    return [h.id for h in hits]


def _count(stage: str, outcome: str) -> float:
    return metrics.RETRIEVAL_STAGE.labels(stage=stage, outcome=outcome)._value.get()


@pytest.fixture
def reranker() -> Iterator[ScriptedReranker]:
    server = ScriptedReranker().start()
    yield server
    server.stop()


def _endpoint(url: str, **update: Any) -> SearchAssist:
    settings = Settings(openai_base_url=None, rerank_url=url, rerank_timeout_s=0.4, **update)
    assist = SearchAssist.from_settings(settings)
    assert assist is not None and assist.endpoint is not None and assist.model is None
    return assist


# ---------------------------------------------------------------- rule K11: the endpoint on its own
@pytest.mark.parametrize("shape", ["tei", "cohere"])
def test_the_endpoint_reorders_the_candidates_by_its_scores(reranker: ScriptedReranker, shape: str) -> None:
    reranker.shape = shape
    assist, attempts = _endpoint(reranker.url), []
    before = _count("rerank", "ok")
    ranked = assist.finish(QUESTION, _hits(), attempts)
    assert _ids(ranked)[0] == "id3" and sorted(_ids(ranked)) == _ids(_hits())
    assert attempts[-1].kind == "rerank:ok" and (attempts[-1].returned, attempts[-1].kept) == (5, 5)
    assert ranked[0].payload["rerank_score"] == attempts[-1].best and ranked[0].payload["stages"] == "rerank:ok"
    assert _count("rerank", "ok") == before + 1
    sent = reranker.requests[-1]  # protocol auto: both field sets, every candidate asked for
    assert sent["query"] == QUESTION and sent["texts"] == sent["documents"] and sent["top_n"] == 5
    assert sent["documents"][3] == "《测试法》 第4条\n" + TEXTS[3] and sent["truncate"] is True
    assist.close()


def test_only_the_top_n_are_sent_and_the_rest_keep_their_place(reranker: ScriptedReranker) -> None:
    assist = _endpoint(reranker.url, rerank_top_n=2, rerank_protocol="cohere", rerank_model="bge-reranker-v2-m3")
    ranked = assist.finish("国家 税收制度", _hits(), [])
    assert _ids(ranked) == ["id1", "id0", "id2", "id3", "id4"]
    assert reranker.requests[-1] == {"query": "国家 税收制度", "documents": reranker.requests[-1]["documents"],
                                     "top_n": 2, "model": "bge-reranker-v2-m3"}
    assist.close()


@pytest.mark.parametrize(("setup", "outcome"), [
    ({"status": 500}, "server_error"),
    ({"status": 401}, "rejected"),
    ({"raw": "<html>bad gateway</html>"}, "malformed"),
    ({"raw": json.dumps([{"index": 9, "score": 1.0}])}, "malformed"),
    ({"raw": json.dumps({"results": [{"index": 0, "relevance_score": "high"}]})}, "malformed"),
    ({"delay_s": 1.5}, "timeout"),
])
def test_an_endpoint_failure_leaves_the_fused_order(reranker: ScriptedReranker, setup: dict, outcome: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    for name, value in setup.items():
        setattr(reranker, name, value)
    assist, attempts = _endpoint(reranker.url), []
    before, started = _count("rerank", outcome), time.perf_counter()
    ranked = assist.finish(QUESTION, _hits(), attempts)
    assert time.perf_counter() - started < 1.0  # bounded by rerank_timeout_s (0.4 s), not by the server
    assert _ids(ranked) == _ids(_hits()) and "rerank_score" not in ranked[0].payload
    assert attempts[-1].kind == f"rerank:{outcome}" and ranked[0].payload["stages"] == f"rerank:{outcome}"
    assert _count("rerank", outcome) == before + 1
    assert any(f"rerank failed open ({outcome})" in r.getMessage() for r in caplog.records)
    assist.close()


def test_a_refused_connection_fails_open_and_the_breaker_then_skips_the_endpoint() -> None:
    assist = _endpoint(f"http://127.0.0.1:{free_port()}/rerank", model_breaker_failures=2)
    kinds = []
    for _ in range(3):
        attempts: list[Attempt] = []
        assert _ids(assist.finish(QUESTION, _hits(), attempts)) == _ids(_hits())
        kinds.append(attempts[-1].kind)
    assert kinds == ["rerank:unavailable", "rerank:unavailable", "rerank:open"]
    assist.close()


# ---------------------------------------------------------------- rules K12, K13: the model on its own
@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    server = ScriptedModel().start()
    yield server
    server.stop()


def _model(base_url: str, **update: Any) -> SearchAssist:
    settings = Settings(openai_base_url=base_url, openai_api_key="k", model="scripted",
                        retrieval_model_rewrite_timeout_s=0.5, retrieval_model_rerank_timeout_s=0.5, **update)
    assist = SearchAssist.from_settings(settings)
    assert assist is not None and assist.model is not None and assist.endpoint is None
    return assist


def _answers(rewrite: str, order: str, delay_s: float = 0.0):
    def answer(body: dict) -> Turn:
        return Turn(content=rewrite if body["messages"][0]["content"] == REWRITE_INSTRUCTION else order, delay_s=delay_s)
    return answer


def test_the_model_rewrites_and_reorders(model: ScriptedModel) -> None:
    model.retrieval = _answers('{"query": "增值税 简易计税 征收率", "sub_queries": ["小规模纳税人"]}', '{"order": [4, 1]}')
    assist, attempts = _model(model.base_url), []
    rewrite = assist.rewritten(assist.start_rewrite(QUESTION), attempts)
    assert (rewrite.query, rewrite.sub_queries) == ("增值税 简易计税 征收率", ["小规模纳税人"])
    ranked = assist.finish(QUESTION, _hits(), attempts)
    assert _ids(ranked) == ["id3", "id0", "id1", "id2", "id4"] and ranked[0].payload["model_rank"] == 1
    assert [a.kind for a in attempts] == ["model_rewrite:ok", "model_rerank:ok"]
    assert (attempts[1].returned, attempts[1].kept) == (5, 4)  # 5 candidates shown, 4 moved
    sent = model.retrieval_requests[-1]
    assert sent["model"] == "scripted" and sent["max_tokens"] == 256 and not sent.get("stream")
    assert "[4] 《测试法》 第4条 " + TEXTS[3] in sent["messages"][1]["content"]
    assert model.requests == []  # the script of the agent's turns is untouched
    assist.close()


@pytest.mark.parametrize(("answer", "outcome"), [
    (_answers("我觉得这个问题问的是税率", "第一个最好"), "malformed"),
    (_answers('{"query": "q"}', '{"order": [9]}'), "malformed"),
    (lambda body: Turn(status=503), "server_error"),
    (_answers('{"query": "q"}', '{"order": [2]}', delay_s=1.5), "timeout"),
])
def test_a_model_failure_leaves_the_question_and_the_order(model: ScriptedModel, answer, outcome: str) -> None:
    model.retrieval = answer
    assist, attempts = _model(model.base_url), []
    started = time.perf_counter()
    rewrite = assist.rewritten(assist.start_rewrite(QUESTION), attempts)
    ranked = assist.finish(QUESTION, _hits(), attempts)
    assert time.perf_counter() - started < 2.0  # two calls, each bounded by its 0.5 s timeout
    if outcome == "malformed" and attempts[0].kind == "model_rewrite:ok":
        assert rewrite.query == "q"  # this case's rewrite is well-formed; only its order is not
    else:
        assert rewrite is None
    assert _ids(ranked) == _ids(_hits()) and attempts[-1].kind == f"model_rerank:{outcome}"
    assist.close()


def test_a_model_that_is_down_costs_nothing_but_the_attempt() -> None:
    assist, attempts = _model(f"http://127.0.0.1:{free_port()}/v1"), []
    assert assist.rewritten(assist.start_rewrite(QUESTION), attempts) is None
    assert _ids(assist.finish(QUESTION, _hits(), attempts)) == _ids(_hits())
    assert [a.kind for a in attempts] == ["model_rewrite:unavailable", "model_rerank:unavailable"]
    assist.close()


# ---------------------------------------------------------------- in KbSearcher.search over a real store
@pytest.fixture(scope="module")
def searcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbSearcher]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("assist"), openai_base_url=None)
    embedder = UseEmbedder()
    store = open_store(settings, embedder.dim)
    ingest_law_db(settings, law_names=[VAT, PIT], progress=False, embedder=embedder, store=store)
    yield KbSearcher(settings.retrieval, embedder, store)
    store.close()


def _with(searcher: KbSearcher, assist: SearchAssist) -> KbSearcher:
    return KbSearcher(assist.retrieval, searcher.embedder,
                      searcher.store, searcher.encoder, assist=assist)


def _located(outcome) -> list[tuple[str, str | None]]:
    return [(e.title, e.locator) for e in outcome.evidence]


def test_the_endpoint_decides_the_top_k_of_a_search(searcher: KbSearcher, reranker: ScriptedReranker) -> None:
    plain = searcher.search(QUESTION, "default")
    assert plain.evidence[0].locator == "第十一条"
    fifth = plain.evidence[4]  # the scorer likes the fifth item best
    reranker.score = lambda query, doc: 1.0 if doc.split("\n")[0] == f"{fifth.title} {fifth.locator}" else 0.0
    outcome = _with(searcher, _endpoint(reranker.url)).search(QUESTION, "default")
    assert outcome.evidence[0].chunk_id == fifth.chunk_id and outcome.evidence[0].metadata["rerank_score"] == 1.0
    assert outcome.attempts[0].kind == "original" and outcome.attempts[-1].kind == "rerank:ok"
    assert len(reranker.requests[-1]["texts"]) > len(plain.evidence)  # more candidates than the top k (up to 24)
    reranker.status = 500
    failed = _with(searcher, _endpoint(reranker.url)).search(QUESTION, "default")
    assert _located(failed) == _located(plain) and failed.attempts[-1].kind == "rerank:server_error"
    assert failed.evidence[0].metadata["stages"] == "rerank:server_error"


def test_the_models_rewrite_adds_rounds_and_its_rerank_orders_the_top_ten(searcher: KbSearcher,
                                                                       model: ScriptedModel) -> None:
    plain = searcher.search("公司发的年终奖要交税吗", "default", sub_queries=["年终奖 个人所得税"])
    model.retrieval = _answers('{"query": "全年一次性奖金 个人所得税", "sub_queries": ["工资薪金所得 税率", "年终奖 个人所得税"]}',
                               '{"order": [6, 5, 4, 3, 2, 1]}')
    outcome = _with(searcher, _model(model.base_url)).search("公司发的年终奖要交税吗", "default",
                                                             sub_queries=["年终奖 个人所得税"])
    rounds = [(a.kind, a.query) for a in outcome.attempts if a.kind.startswith(("sub", "rewrite"))]
    assert rounds == [("rewrite", "全年一次性奖金 个人所得税"), ("sub:1", "年终奖 个人所得税"), ("rewrite:1", "工资薪金所得 税率")]
    kinds = [a.kind for a in outcome.attempts]
    assert kinds[0] == "original" and "model_rewrite:ok" in kinds and kinds[-1] == "model_rerank:ok"
    assert [e.metadata["model_rank"] for e in outcome.evidence] == list(range(1, len(outcome.evidence) + 1))
    assert outcome.evidence[0].metadata["stages"] == "model_rewrite:ok,model_rerank:ok"
    # the model's candidate 6 is now first: the fused order's sixth of the merged rounds
    shown = model.retrieval_requests[-1]["messages"][1]["content"].split("\n[")
    assert len(shown) == 1 + 10 and outcome.evidence[0].locator in shown[6]
    # the model down: the plain search, with two more attempts
    down = _with(searcher, _model(f"http://127.0.0.1:{free_port()}/v1")).search(
        "公司发的年终奖要交税吗", "default", sub_queries=["年终奖 个人所得税"])
    assert _located(down) == _located(plain)
    assert [a.kind for a in down.attempts if a.kind.startswith("model_")] == ["model_rewrite:unavailable",
                                                                               "model_rerank:unavailable"]


def test_an_agents_own_search_gets_the_rerank_window_unordered_and_the_endpoint_still_orders_it(
        searcher: KbSearcher, model: ScriptedModel, reranker: ScriptedReranker) -> None:
    """Rule K26: ``search(model_rerank=False)`` (an agent's ``kb_search`` call) asks the model nothing and returns
    K13's window, the first ``retrieval_model_rerank_top_n`` (10) of the fused order, instead of the top k (6); a
    rerank endpoint (K11), a scorer and not the agent's model, still orders that call's candidates."""
    plain = searcher.search("公司发的年终奖要交税吗", "default")
    model.retrieval = _answers('{"query": "x", "sub_queries": []}', '{"order": [2, 1]}')
    helped = _with(searcher, _model(model.base_url))
    asked = len(model.retrieval_requests)
    agent = helped.search("公司发的年终奖要交税吗", "default", model_rewrite=False, model_rerank=False)
    assert len(model.retrieval_requests) == asked and not [a for a in agent.attempts if a.kind.startswith("model_")]
    assert len(plain.evidence) == 6 and len(agent.evidence) == 10
    assert _located(agent)[:6] == _located(plain)
    assert not any("model_rank" in e.metadata or "stages" in e.metadata for e in agent.evidence)
    fifth = plain.evidence[4]
    reranker.score = lambda query, doc: 1.0 if doc.split("\n")[0] == f"{fifth.title} {fifth.locator}" else 0.0
    scored = _with(searcher, _endpoint(reranker.url)).search("公司发的年终奖要交税吗", "default", model_rerank=False)
    assert scored.attempts[-1].kind == "rerank:ok" and scored.evidence[0].chunk_id == fifth.chunk_id
    assert len(scored.evidence) == 6  # K11's own top k: the window is K13's, whose call was left out
