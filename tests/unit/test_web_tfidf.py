"""The web rerank's TF-IDF (services/web/tfidf.py, rule O13) gives scikit-learn's figures without loading it.

scikit-learn's own figures for ``PAGES`` × ``QUERIES`` are kept in ``tests/data/tfidf_sklearn.json`` (loading
scikit-learn and SciPy costs the unit run ~0.7 s); ``python tests/unit/test_web_tfidf.py`` writes them again
from the installed scikit-learn (a dev dependency).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.web import extract, tfidf

SKLEARN = Path(__file__).parent.parent / "data" / "tfidf_sklearn.json"
NGRAM_TEXTS = ["增值税 VAT  Law\n第十一条", "I a", "", "   ", "ab"]

PAGES = [
    ["增值税法第十一条规定，小规模纳税人适用简易计税方法的征收率为百分之三。", "车船税按年申报缴纳。",
     "契税的税率为百分之三至百分之五。", "Boiling noodles takes 8 minutes;  stir often.\n\nServe hot."],
    ["The VAT law, article 11: small-scale taxpayers pay 3 %.", "a b c d", "I", "x  y\tz", "增值税 VAT 3%"],
    ["同一段文字。", "同一段文字。", "另一段。"],
]
QUERIES = ["小规模纳税人的征收率", "VAT small-scale taxpayers", "boiling noodles", "a", "同一段"]


def sklearn_figures() -> dict:
    """scikit-learn's cosines (query → page index → list) and char_wb n-grams (text → list) for the cases here."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import linear_kernel

    cosines = {}
    for query in QUERIES:
        cosines[query] = []
        for page in PAGES:
            matrix = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 3), lowercase=True,
                                     sublinear_tf=True).fit_transform([*page, query])
            cosines[query].append([float(x) for x in linear_kernel(matrix[-1], matrix[:-1]).ravel()])
    analyzer = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 3)).build_analyzer()
    return {"cosines": cosines, "ngrams": {text: analyzer(text) for text in NGRAM_TEXTS}}


@pytest.fixture(scope="module")
def sklearn() -> dict:
    return json.loads(SKLEARN.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", range(len(PAGES)))
@pytest.mark.parametrize("query", QUERIES)
def test_cosines_are_scikit_learns(page: int, query: str, sklearn: dict) -> None:
    assert tfidf.cosines(query, PAGES[page]) == pytest.approx(sklearn["cosines"][query][page], abs=1e-12)


def test_ngrams_are_scikit_learns(sklearn: dict) -> None:
    for text in NGRAM_TEXTS:
        assert tfidf.char_wb_ngrams(text) == sklearn["ngrams"][text]


def test_no_text_is_no_vocabulary() -> None:
    assert tfidf.cosines(" ", ["", "  "]) is None
    assert extract.rerank("x", ["", " "], top=2) == [(0, 0.0), (1, 0.0)]


def test_rerank_keeps_page_order_on_ties_and_the_best_first() -> None:
    chunks = ["契税", "增值税起征点是多少", "增值税起征点是多少", "boiling noodles"]
    assert [i for i, _ in extract.rerank("增值税起征点", chunks, top=3)][:2] == [1, 2]
    assert extract.rerank("boiling noodles", chunks, top=1)[0][0] == 3


if __name__ == "__main__":
    SKLEARN.write_text(json.dumps(sklearn_figures(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {SKLEARN}")
