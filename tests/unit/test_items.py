"""Rule K23 (services/retriever/items.py, packing.pack, pipeline.KbSearcher): an article found through one of its
list items is quoted as its lead-in line and that item, in process."""

from __future__ import annotations

from concurrent.futures import Future

from conduit.runtime.settings import Settings
from services.retriever.documents import article_items
from services.retriever.items import ItemMatches, item_quotes, quote
from services.retriever.packing import GAP, pack
from services.retriever.pipeline import KbSearcher
from services.retriever.store import Hit

ARTICLE = ("下列项目免征增值税：\n（一）农业生产者销售的自产农产品；\n（二）医疗机构提供的医疗服务；\n"
           "（三）古旧图书，自然人销售的自己使用过的物品；\n（四）直接用于科学研究的进口仪器、设备。\n"
           "前款规定的免税项目具体标准由国务院规定。")
ARTICLE_ID = "art-24"


def _payload(k: int | None) -> dict:
    base = {"source": "law_db", "document_id": "law:zzs", "law_name": "中华人民共和国增值税法", "article_no": "第二十四条",
            "title": "《中华人民共和国增值税法》", "locator": "第二十四条", "text": ARTICLE}
    if k is None:
        return base
    return {**base, "text": article_items(ARTICLE, 0)[k], "parent_text": ARTICLE, "parent_id": ARTICLE_ID,
            "parent_position": 23, "child_position": k}


def test_quote_keeps_the_lead_in_and_the_item_and_marks_what_is_left_out() -> None:
    text, markers = quote(ARTICLE, [3])
    assert markers == ["（三）"]
    assert text.split("\n") == ["下列项目免征增值税：", GAP, "（三）古旧图书，自然人销售的自己使用过的物品；", GAP]
    first, _ = quote(ARTICLE, [1])
    assert first.split("\n") == ["下列项目免征增值税：", "（一）农业生产者销售的自产农产品；", GAP]
    two, markers = quote(ARTICLE, [2, 4, 5])  # 5 is a plain paragraph: left out
    assert markers == ["（二）", "（四）"]
    assert two.split("\n") == ["下列项目免征增值税：", GAP, "（二）医疗机构提供的医疗服务；", GAP,
                               "（四）直接用于科学研究的进口仪器、设备。", GAP]
    assert quote(ARTICLE, [0]) is None and quote(ARTICLE, [5]) is None  # a plain paragraph is not an item
    assert quote(ARTICLE, [9]) is None and quote(ARTICLE, []) is None
    nested = "增值税税率：\n（一）销售货物，税率为百分之十三。\n（二）销售下列货物，税率为百分之九：\n1.农产品；\n2.饲料。\n（三）出口货物，税率为零。"
    assert quote(nested, [5])[0].split("\n") == ["增值税税率：", GAP, "（三）出口货物，税率为零。"]  # 2. is no lead-in


def test_the_item_is_quoted_only_when_it_beat_its_article() -> None:
    hit = Hit(ARTICLE_ID, 0.05, _payload(3), 0.6, 0.85)
    matches = ItemMatches()
    matches.note(ARTICLE_ID, _payload(None), 0.80)
    matches.note(ARTICLE_ID, _payload(3), 0.85)
    matches.note(ARTICLE_ID, _payload(2), 0.83)  # more than ITEM_MARGIN behind: not quoted
    assert item_quotes([hit], matches)[ARTICLE_ID][1] == ["（三）"]
    matches.note(ARTICLE_ID, _payload(1), 0.845)  # e5 can hardly tell (一) from (三): both
    assert matches.best_items(ARTICLE_ID) == [1, 3]
    assert item_quotes([hit], matches)[ARTICLE_ID][1] == ["（一）", "（三）"]
    assert matches.unscored([ARTICLE_ID]) == []
    beaten = ItemMatches()
    beaten.note(ARTICLE_ID, _payload(3), 0.80)
    assert beaten.unscored([ARTICLE_ID]) == [ARTICLE_ID]  # the article chunk itself was never scored
    beaten.note(ARTICLE_ID, {}, 0.82)
    assert item_quotes([hit], beaten) == {}
    # a file's child chunk has a parent too, but is not a law article's item
    files = ItemMatches()
    files.note("p1", {"source": "file", "parent_id": "p1", "child_position": 2}, 0.9)
    assert files.best_items("p1") == []


def test_a_question_asking_for_the_list_gets_the_whole_article() -> None:
    hit = Hit(ARTICLE_ID, 0.05, _payload(3), 0.6, 0.85)
    matches = ItemMatches()
    matches.note(ARTICLE_ID, _payload(3), 0.85)
    assert item_quotes([hit], matches, "卖旧手机要交增值税吗")
    assert item_quotes([hit], matches, "增值税免税项目有哪些") == {}


def test_pack_quotes_the_item_with_its_marker_in_the_metadata() -> None:
    hit = Hit(ARTICLE_ID, 0.05, _payload(3), 0.6, 0.85)
    matches = ItemMatches()
    matches.note(ARTICLE_ID, _payload(3), 0.85)
    [item] = pack([hit], "卖旧手机要交增值税吗", 2000, 12000, item_quotes([hit], matches))
    assert item.text.startswith("下列项目免征增值税：") and "（三）古旧图书" in item.text
    assert "医疗服务" not in item.text and item.metadata["items"] == ["（三）"] and item.chunk_id == ARTICLE_ID
    [whole] = pack([hit], "卖旧手机要交增值税吗", 2000, 12000)
    assert whole.text == ARTICLE and "items" not in whole.metadata


class _Store:
    """The store calls one pipeline round makes: a hybrid query returning the item chunk and the article."""

    def hybrid_query(self, *args, **kwargs) -> list[Hit]:
        return [Hit("item-3", 0.05, _payload(3), 0.62), Hit(ARTICLE_ID, 0.04, _payload(None), 0.55)]


class _Stage2:
    """The second stage's calls (rule K7): the question's e5 rows and each chunk's cosine (the item beats its article)."""

    cosine = {"item-3": 0.85, ARTICLE_ID: 0.80}

    def start(self, forms, nearest=0):
        import numpy as np

        from services.retriever.rescoring import E5Query

        done: Future = Future()
        done.set_result(E5Query(np.ones((len(forms), 4), np.float32) / 2, []))
        return done

    def cosines(self, ids, queries, parent_ids=None, payloads=None):
        return [self.cosine[i] for i in ids]


class _Embedder:
    name, dim = "fake", 4

    def embed_queries(self, texts):
        import numpy as np

        return np.ones((len(texts), 4), np.float32) / 2


def test_kb_search_quotes_the_item_that_found_the_article_and_can_be_turned_off() -> None:
    settings = Settings().retrieval.model_copy(update={"retrieval_query_expansion": False})
    question = "卖旧手机要交增值税吗"
    [item] = KbSearcher(settings, _Embedder(), _Store(), stage2=_Stage2()).search(question, "t").evidence  # type: ignore[arg-type]
    assert item.chunk_id == ARTICLE_ID and item.metadata["items"] == ["（三）"] and "医疗服务" not in item.text
    off = settings.model_copy(update={"retrieval_quote_items": False})
    [whole] = KbSearcher(off, _Embedder(), _Store(), stage2=_Stage2()).search(question, "t").evidence  # type: ignore[arg-type]
    assert whole.text == ARTICLE
    [first_stage] = KbSearcher(settings, _Embedder(), _Store()).search(question, "t").evidence  # type: ignore[arg-type]
    assert first_stage.text == ARTICLE  # no e5 cosines, no judge of the item: whole, as before
