"""Rules K14, K15 (docs/retrieval.md "The law's own references"): the reference parser and resolver,
on real-looking snippets of Chinese statutes, and the shipped graph file."""

from __future__ import annotations

import pytest

from services.retriever import lawrefs, refgraph
from services.retriever.lawrefs import chinese_number, parse


@pytest.mark.parametrize("text, value", [
    ("一", 1), ("十", 10), ("十二", 12), ("二十", 20), ("二十三", 23), ("一百", 100), ("一百零四", 104),
    ("一百一十", 110), ("三百八十二", 382), ("一千", 1000), ("一千零六十五", 1065), ("一千二百六十", 1260),
    ("两", 2), ("〇", 0), ("1065", 1065), ("二千零一", 2001),
])
def test_chinese_numerals(text, value):
    assert chinese_number(text) == value


@pytest.mark.parametrize("bad", ["", "十十", "百十千", "一二", "第一", "abc"])
def test_not_numerals(bad):
    with pytest.raises(lawrefs.NumeralError):
        chinese_number(bad)


def arts(text, names=frozenset()):
    return [(r.law, r.number, r.sub) for r in parse(text, names) if r.kind == "article"]


@pytest.mark.parametrize("text, want", [
    ("纳税人有下列情形之一的，依照本法第二十三条的规定处理。", [("self", 23, 0)]),
    ("本条例第五条规定的", [("self", 5, 0)]),
    ("依照本规定第十一条", [("self", 11, 0)]),
    ("有第十七条规定情形的", [("self", 17, 0)]),
    ("适用《中华人民共和国民法典》第一千零六十五条的规定", [("中华人民共和国民法典", 1065, 0)]),
    ("依照《民法典》第一千零六十五条第二款", [("民法典", 1065, 0)]),
    ("本法第十条、第十二条至第十四条另有规定的除外", [("self", 10, 0), ("self", 12, 0), ("self", 13, 0), ("self", 14, 0)]),
    ("违反本法第五十八条、第六十一条第一款规定的", [("self", 58, 0), ("self", 61, 0)]),
    ("《中华人民共和国民法通则》第一百四十六条、第一百四十七条，《中华人民共和国继承法》第三十六条",
     [("中华人民共和国民法通则", 146, 0), ("中华人民共和国民法通则", 147, 0), ("中华人民共和国继承法", 36, 0)]),
    ("本条例第五条和《民法典》第三条", [("self", 5, 0), ("民法典", 3, 0)]),
    ("有刑法第一百二十条之一规定的行为", [("self", 120, 1)]),
    ("依照第二十三条之二", [("self", 23, 2)]),
    ("依照第30条第1款", [("self", 30, 0)]),
    ("第三十条第一款第（二）项规定的", [("self", 30, 0)]),
    ("依照本法第二十条规定；第三十条另有规定的", [("self", 20, 0), ("self", 30, 0)]),
])
def test_article_references(text, want):
    assert arts(text) == want


def test_a_law_name_without_brackets_counts_when_the_corpus_knows_it():
    names = frozenset({"刑法", "中华人民共和国刑法", "刑事诉讼法"})
    assert arts("构成犯罪的，适用刑法第三百八十二条和第三百八十三条", names) == [("刑法", 382, 0), ("刑法", 383, 0)]
    assert arts("不适用刑事诉讼法第一百七十六条", names) == [("刑事诉讼法", 176, 0)]
    assert arts("依照中华人民共和国刑法第一条", names) == [("中华人民共和国刑法", 1, 0)]
    assert arts("依照商法第一条", names) == [("self", 1, 0)], "an unknown bare name is no title"


@pytest.mark.parametrize("text, kinds", [
    ("前款规定的纳税人", ["intra"]),
    ("前两款规定以外的", ["intra"]),
    ("违反本条第二款规定", ["intra"]),
    ("本款所称", ["intra"]),
    ("有第二款第（三）项情形的", ["intra"]),
    ("依照前条规定", ["previous"]),
    ("依照《中华人民共和国税收征收管理法》的规定执行", ["law"]),
    ("本法第二章规定", ["chapter"]),
    ("本法所称纳税人", []),
    ("第一条 为了规范……", ["article"]),
])
def test_other_kinds(text, kinds):
    assert [r.kind for r in parse(text)] == kinds


def test_a_range_is_bounded():
    got = arts("第一条至第一百条")
    assert got[0] == ("self", 1, 0) and got[-1] == ("self", 100, 0) and len(got) == lawrefs.MAX_RANGE + 1


LAWS = {
    "A": ("中华人民共和国甲法", "法律", ["1", "2", "3", "23", "23-1"]),
    "B": ("中华人民共和国民法典", "法律", [str(n) for n in range(1, 1261)]),
    "C": ("全国人民代表大会常务委员会关于修改《中华人民共和国甲法》的决定", "修改决定", ["1", "2"]),
}


@pytest.mark.parametrize("law, pos, text, want, stat", [
    ("A", 0, "依照本法第二十三条", "A:23", "resolved"),
    ("A", 0, "依照本法第二十三条之一", "A:23-1", "resolved"),
    ("A", 0, "适用《中华人民共和国民法典》第一千零六十五条", "B:1065", "resolved"),
    ("A", 0, "适用《民法典》第一千零六十五条", "B:1065", "resolved"),
    ("B", 0, "依照《甲法》第二条", "A:2", "resolved"),
    ("A", 2, "依照前条规定", "A:2", "resolved"),
    ("A", 0, "依照本法第九十九条", None, "unresolved:article_not_in_law"),
    ("A", 0, "依照《中华人民共和国乙法》第三条", None, "unresolved:law_not_in_corpus"),
    ("C", 0, "将第二十三条修改为", None, "unresolved:amending_text"),
    ("A", 0, "前款规定", None, "intra"),
    ("A", 0, "本法第一条", None, "intra"),
    ("A", 0, "依照《民法典》的规定", None, "law:resolved"),
    ("A", 0, "依照《营业执照管理办法》的规定", None, "law:not_in_corpus"),
])
def test_resolution(law, pos, text, want, stat):
    r = refgraph.Resolver(LAWS)
    got = [r.resolve(law, pos, ref) for ref in parse(text)]
    assert got == [want] and r.stats[stat] == 1


def test_number_keys_and_labels():
    assert refgraph.number_key("第一千零六十五条", 1065, 1064) == "1065"
    assert refgraph.number_key("第一百二十条之一", 120, 130) == "120-1"
    assert refgraph.number_key("全文", None, 0) == "p0"
    assert refgraph.label("中华人民共和国民法典", "1065") == "《民法典》第1065条"
    assert refgraph.label("中华人民共和国刑法", "120-1") == "《刑法》第120条之1"


def test_the_shipped_graph_resolves_real_references():
    from services.retriever.lawindex import INDEX_DIR

    graph = refgraph.RefGraph.load(INDEX_DIR / refgraph.FILE_NAME, check_corpus=False)
    st = graph.meta["stats"]
    assert st["resolved"] > 1500 and st["found"] == st["resolved"] + sum(
        v for k, v in st.items() if k.startswith("unresolved:"))
    some = next(iter(graph.edges))
    assert graph.references(some) and graph.point_of(some) and graph.ref_of_point(graph.point_of(some)) == some
