"""Rule K22 (services/retriever/lawnames.py, rescoring.fuse, pipeline.KbSearcher._ranked), in process: the law a
question names or implies, and its articles ranked above a look-alike law's."""

from __future__ import annotations

import pytest

from conduit.runtime.settings import Settings
from services.retriever.lawnames import IMPLIED, NAMED, LawNames, boosts, for_graph, implied_forms
from services.retriever.pipeline import KbSearcher
from services.retriever.rescoring import Fusion, fuse
from services.retriever.store import Hit

LAWS = {"ldht": "中华人民共和国劳动合同法", "ld": "中华人民共和国劳动法", "grsd": "中华人民共和国个人所得税法",
        "qysd": "中华人民共和国企业所得税法", "xfz": "中华人民共和国消费者权益保护法", "zzs": "中华人民共和国增值税法",
        "gs": "中华人民共和国公司法", "mfd": "中华人民共和国民法典", "zg": "中华人民共和国税收征收管理法",
        "bx": "中华人民共和国社会保险法", "xf": "中华人民共和国刑法修正案（十一）"}


class _Graph:
    """What rule K22 reads of the reference graph: its law table."""

    names = {law_id: name for law_id, name in LAWS.items()}


@pytest.fixture
def names() -> LawNames:
    return LawNames([(f"law:{k}", v) for k, v in LAWS.items()])


def test_a_named_law_is_found_at_full_strength_and_its_subject_at_the_implied_tier(names: LawNames) -> None:
    assert names.find("劳动合同法第四十七条怎么算") == {"law:ldht": NAMED}
    assert names.find("中华人民共和国劳动法规定每天工作几小时") == {"law:ld": NAMED}
    assert names.find("劳动合同到期不续签有补偿吗") == {"law:ldht": IMPLIED}
    assert names.find("消费者买到假货能赔几倍") == {"law:xfz": IMPLIED}  # the protected party of a 权益保护法
    assert names.find("个税专项附加扣除有哪些") == {"law:grsd": IMPLIED}  # an abbreviation
    assert names.find("卖旧手机要交增值税吗") == {"law:zzs": IMPLIED}  # a tax's name is its law's
    assert names.find("按征管法滞纳金怎么算") == {"law:zg": IMPLIED}
    assert names.find("根据民法典离婚冷静期多久") == {"law:mfd": NAMED}


def test_short_stems_and_questions_naming_no_law_find_nothing(names: LawNames) -> None:
    assert names.find("公司违法开除我赔多少") == {}  # 公司 and 劳动 are too short to name one law
    assert names.find("劳动者加班费怎么算") == {}
    assert implied_forms("公司法") == [] and implied_forms("民法典") == []
    assert implied_forms("刑法修正案（十一）") == []
    assert implied_forms("消费者权益保护法") == ["消费者权益保护", "消费者"]


def test_matches_are_longest_first_and_do_not_overlap(names: LawNames) -> None:
    # 劳动合同法 is one match: 劳动合同 (its subject) inside it does not also count, nor does any shorter law's name
    assert names.find("劳动合同法和劳动法有什么不同") == {"law:ldht": NAMED, "law:ld": NAMED}
    assert names.find("企业所得税和个人所得税的区别") == {"law:qysd": IMPLIED, "law:grsd": IMPLIED}
    assert names.find("劳动合同法里说的劳动合同") == {"law:ldht": NAMED}  # a law keeps its strongest tier


def test_boosts_scale_by_the_setting_and_vanish_when_off(names: LawNames) -> None:
    found = names.find("劳动合同法和个税")
    assert boosts(found, 2.0) == {"law:ldht": 2.0, "law:grsd": 2.0 * IMPLIED}
    assert boosts(found, 0.0) == {}
    assert for_graph(None) is None
    graph = _Graph()
    assert for_graph(graph) is for_graph(graph)  # built once per graph


def test_fusion_lifts_the_named_laws_article_over_a_look_alike() -> None:
    # 劳动法's article ranks first in both stages; the question names 劳动合同法
    ranks, e5, laws = [1, 2, 3], [0.80, 0.78, 0.70], ["law:ld", "law:ldht", "law:gs"]
    plain = fuse(ranks, e5, laws, Fusion(law_boost=0.0))
    named = fuse(ranks, e5, laws, Fusion(law_boost=0.0), {"law:ldht": 1.0})
    assert max(range(3), key=lambda i: plain[i]) == 0
    assert max(range(3), key=lambda i: named[i]) == 1
    assert named[1] - plain[1] == pytest.approx(1.0 / (Fusion().k + 1))
    assert named[0] == plain[0] and named[2] == plain[2]


def test_the_pipeline_ranks_the_named_laws_articles_first() -> None:
    settings = Settings()
    searcher = KbSearcher(settings.retrieval, embedder=None, store=None, refs=_Graph())  # type: ignore[arg-type]
    merged = {
        "a": Hit("a", 0.05, {"document_id": "law:ld", "article_no": "第三十六条"}, 0.7, 0.81),
        "b": Hit("b", 0.04, {"document_id": "law:ldht", "article_no": "第四十六条"}, 0.6, 0.80),
    }
    question = "劳动合同法里加班费怎么算"
    assert searcher._ranked(merged, True)[0].id == "a"
    assert searcher._ranked(merged, True, named=searcher.named(question))[0].id == "b"
    off = KbSearcher(settings.retrieval.model_copy(update={"retrieval_named_law_boost": 0.0}), None, None,  # type: ignore[arg-type]
                     refs=_Graph())
    assert off.named(question) == {}
    assert KbSearcher(settings.retrieval, None, None).named(question) == {}  # type: ignore[arg-type]
