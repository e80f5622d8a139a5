"""The label checker of bench/retrieval (issue 40, ops/retrieval_labels.py): a label whose law or article is not in
the corpus, an unknown kind, a repeated id and a question copying its article are reported; the hard set's labels
are all good, and it is held out from the other sets."""

from __future__ import annotations

from collections import Counter

from ops import retrieval_labels as rl
from ops.retrieval_gate import labelled

CORPUS = {"中华人民共和国劳动合同法": {"第八十七条": "用人单位违反本法规定解除或者终止劳动合同的，应当依照本法第四十七条规定",
                                   "第四十七条": "经济补偿按劳动者在本单位工作的年限"}}


def _row(**kw) -> dict:
    return {"id": "a", "kind": "referenced", "question": "违法开除赔多少", "law_name": "中华人民共和国劳动合同法",
            "article_no": "第八十七条", **kw}


def test_a_good_label_passes() -> None:
    assert rl.label_problems([_row(also=[{"law_name": "中华人民共和国劳动合同法", "article_no": "第四十七条"}])],
                             CORPUS, kinds=True) == []


def test_a_label_whose_article_or_law_is_not_in_the_corpus_fails() -> None:
    problems = rl.label_problems([_row(article_no="第九百条"), _row(id="b", question="q2", law_name="劳动合同法"),
                                  _row(id="c", question="q3", also=[{"law_name": "中华人民共和国劳动合同法",
                                                                     "article_no": "第一条"}])], CORPUS)
    assert problems == ["a: 中华人民共和国劳动合同法 has no current article 第九百条",
                        "b: 劳动合同法 is not a current law of the corpus",
                        "c: 中华人民共和国劳动合同法 has no current article 第一条"]


def test_kinds_ids_and_copied_questions_are_checked() -> None:
    copied = "用人单位违反本法规定解除或者终止劳动合同怎么办"
    problems = rl.label_problems([_row(kind="misc"), _row(question=copied)], CORPUS, kinds=True)
    assert problems[0].startswith("a: kind 'misc' is not one of referenced")
    assert "a: repeated id" in problems
    assert any("copies its article ('用人单位违反本法规定解除')" in p for p in problems)


def test_the_hard_set_is_labelled_against_the_corpus_and_held_out() -> None:
    hard = labelled("laws_hard.jsonl")
    assert len(hard) >= 150 and set(Counter(r["kind"] for r in hard)) == set(rl.KINDS)
    names = sorted({lab["law_name"] for r in hard for lab in [r, *r.get("also", [])]})
    assert rl.label_problems(hard, rl.corpus_articles(names), kinds=True) == []
    others = {r["question"] for f in ("laws.jsonl", "laws_heldout.jsonl") for r in labelled(f)}
    assert not others & {r["question"] for r in hard}
