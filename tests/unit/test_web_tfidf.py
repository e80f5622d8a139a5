"""The web rerank's TF-IDF (services/web/tfidf.py, rule O13) gives scikit-learn's figures without loading it."""

from __future__ import annotations

import pytest

from services.web import extract, tfidf

PAGES = [
    ["增值税法第十一条规定，小规模纳税人适用简易计税方法的征收率为百分之三。", "车船税按年申报缴纳。",
     "契税的税率为百分之三至百分之五。", "Boiling noodles takes 8 minutes;  stir often.\n\nServe hot."],
    ["The VAT law, article 11: small-scale taxpayers pay 3 %.", "a b c d", "I", "x  y\tz", "增值税 VAT 3%"],
    ["同一段文字。", "同一段文字。", "另一段。"],
]
QUERIES = ["小规模纳税人的征收率", "VAT small-scale taxpayers", "boiling noodles", "a", "同一段"]


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("query", QUERIES)
def test_cosines_are_scikit_learns(page: list[str], query: str) -> None:
    sklearn_text = pytest.importorskip("sklearn.feature_extraction.text")
    from sklearn.metrics.pairwise import linear_kernel

    matrix = sklearn_text.TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 3), lowercase=True,
                                          sublinear_tf=True).fit_transform([*page, query])
    want = linear_kernel(matrix[-1], matrix[:-1]).ravel()
    assert tfidf.cosines(query, page) == pytest.approx(list(want), abs=1e-12)


def test_ngrams_are_scikit_learns() -> None:
    sklearn_text = pytest.importorskip("sklearn.feature_extraction.text")
    analyzer = sklearn_text.TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 3)).build_analyzer()
    for text in ["增值税 VAT  Law\n第十一条", "I a", "", "   ", "ab"]:
        assert tfidf.char_wb_ngrams(text) == analyzer(text)


def test_no_text_is_no_vocabulary() -> None:
    assert tfidf.cosines(" ", ["", "  "]) is None
    assert extract.rerank("x", ["", " "], top=2) == [(0, 0.0), (1, 0.0)]


def test_rerank_keeps_page_order_on_ties_and_the_best_first() -> None:
    chunks = ["契税", "增值税起征点是多少", "增值税起征点是多少", "boiling noodles"]
    assert [i for i, _ in extract.rerank("增值税起征点", chunks, top=3)][:2] == [1, 2]
    assert extract.rerank("boiling noodles", chunks, top=1)[0][0] == 3
