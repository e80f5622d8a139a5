"""Rule K24 (services/retriever/amendments.py, lawnames' families, pipeline): amending texts linked to the law they
amend, and an amended-away one never above the text that amended it; in process (laws.db is read, no store)."""

from __future__ import annotations

from contracts.evidence import EvidenceItem
from services.retriever.amendments import (AMENDED, Amendments, Successor, amended_law, attach_versions, corpus,
                                           current_first, rewrite_target)
from services.retriever.lawnames import IMPLIED, NAMED, LawNames
from services.retriever.store import Hit


def test_the_rewritten_article_is_read_off_the_amending_text() -> None:
    assert rewrite_target("将刑法第一百二十条修改为：“组织、领导恐怖活动组织的……”") == ("一百二十", "")
    assert rewrite_target("将刑法第一百二十条第一款修改为：“……”") == ("一百二十", "第一款")
    assert rewrite_target("将刑法第一百二十条之一修改为:“资助恐怖活动组织……”") == ("一百二十-一", "")
    assert rewrite_target("宪法第十条第四款“任何组织或者个人不得侵占……”修改为：“……”") == ("十", "第四款")
    assert rewrite_target("在刑法第六十九条中增加一款作为第二款，将该条修改为：“……”") == ("六十九", "")
    assert rewrite_target("删去刑法第一百九十九条。") == ("一百九十九", "")
    assert rewrite_target("在刑法第一百二十条之一后增加五条，作为第一百二十条之二……") is None  # adds, rewrites nothing
    assert rewrite_target("本修正案自公布之日起施行。") is None


def test_amending_documents_name_the_law_they_amend() -> None:
    assert amended_law("中华人民共和国刑法修正案（十一）") == "刑法"
    assert amended_law("中华人民共和国宪法修正案（2018年）") == "宪法"
    assert amended_law("全国人民代表大会常务委员会关于修改《中华人民共和国网络安全法》的决定") == "网络安全法"
    assert amended_law("中华人民共和国劳动合同法") is None


def test_the_corpus_links_a_later_whole_rewrite_to_the_text_it_replaced() -> None:
    links = corpus()
    assert links is not None and links is corpus()  # built once
    by_label = {v: k for k, v in links.amends.items()}
    assert len(links.amends) > 300 and 10 <= len(links.superseded) <= 40
    olds = [(links.amends[p], s.label) for p, s in links.superseded.items()]
    # 刑法修正案（三） rewrote 第一百二十条第一款 (2001); 刑法修正案（九） rewrote the whole article (2015)
    assert ("《刑法》第一百二十条", "《刑法修正案（九）》条目五") in olds
    assert "《网络安全法》" in by_label  # a decision's articles name the law, not an (old-numbered) article
    assert all(s.effective for s in links.superseded.values())


def _hit(pid: str, score: float, second: float | None = None) -> Hit:
    return Hit(pid, score, {"law_name": pid}, None, second)


class _Store:
    def __init__(self, have: dict[str, dict]) -> None:
        self.have, self.asked = have, []

    def payloads(self, ids, fields):
        self.asked.append(list(ids))
        return {i: self.have[i] for i in ids if i in self.have}


def test_an_amended_away_text_goes_right_behind_its_successor() -> None:
    links = Amendments(superseded={"old": Successor("new", "《刑法修正案（九）》条目五", "2015-11-01")})
    ranked = [_hit("old", 0.5), _hit("a", 0.4), _hit("new", 0.3), _hit("b", 0.2)]
    merged = {h.id: h for h in ranked}
    store = _Store({})
    assert [h.id for h in current_first(links, store, ranked, merged, 6)] == ["a", "new", "old", "b"]
    assert store.asked == []  # the successor was in the pool: no store read
    # the successor missing from the pool joins it in the old one's place, with its score
    ranked = [_hit("a", 0.5), _hit("old", 0.4), _hit("b", 0.2)]
    merged = {h.id: h for h in ranked}
    store = _Store({"new": {"law_name": "刑法修正案（九）"}})
    order = current_first(links, store, ranked, merged, 6)
    assert [h.id for h in order] == ["a", "new", "old", "b"] and merged["new"].score == 0.4
    # nothing superseded, no links, or a successor not in the store: the order stands
    assert current_first(links, store, [_hit("a", 1.0)], {}, 6)[0].id == "a"
    assert [h.id for h in current_first(None, store, ranked, merged, 6)] == ["a", "old", "b"]
    gone = [_hit("old", 0.4)]
    assert [h.id for h in current_first(links, _Store({}), gone, {"old": gone[0]}, 6)] == ["old"]


def test_the_evidence_says_what_an_amending_text_amends_and_when_it_stopped_applying() -> None:
    links = Amendments(amends={"old": "《刑法》第一百二十条", "new": "《刑法》第一百二十条"},
                       superseded={"old": Successor("new", "《刑法修正案（九）》条目五", "2015-11-01")})
    items = [EvidenceItem(chunk_id=c, kind="original", title="《刑法修正案》", text="…", metadata={"status": "现行有效"})
             for c in ("old", "new", "x")]
    old, new, other = attach_versions(links, items)
    assert old.metadata == {"status": AMENDED, "document_status": "现行有效", "amends": "《刑法》第一百二十条",
                            "amended_by": "《刑法修正案（九）》条目五", "effective_until": "2015-11-01"}
    assert new.metadata == {"status": "现行有效", "amends": "《刑法》第一百二十条"}
    assert other.metadata == {"status": "现行有效"}


def test_naming_a_law_points_to_its_amendments_too() -> None:
    names = LawNames([("law:w", "中华人民共和国网络安全法"),
                      ("law:wd", "全国人民代表大会常务委员会关于修改《中华人民共和国网络安全法》的决定"),
                      ("law:x9", "中华人民共和国刑法修正案（九）"), ("law:x11", "中华人民共和国刑法修正案（十一）")])
    assert names.find("网络安全法修改了什么") == {"law:w": NAMED, "law:wd": IMPLIED}
    # 刑法 itself is not in the corpus: its name means its amendments, at full strength
    assert names.find("刑法对醉驾怎么规定") == {"law:x9": NAMED, "law:x11": NAMED}
    assert names.find("刑法修正案十一降低了刑事责任年龄吗") == {"law:x11": NAMED}  # typed without brackets
    assert names.find("刑法修正案(九)") == {"law:x9": NAMED}
