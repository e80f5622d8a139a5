"""TF-IDF cosines of a query to a page's chunks, in plain Python (rule W2's rerank; rule O13).

The same figures as scikit-learn's ``TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 3),
lowercase=True, sublinear_tf=True)`` (smooth idf, l2 rows) fitted on the chunks and the query
together, then ``linear_kernel(query row, chunk rows)``; tests/unit/test_web_tfidf.py compares the two
on Chinese, English and mixed pages. Rule O13 (docs/operations.md, "Memory"): a service does not load
a scientific stack for work plain Python does in milliseconds: importing scikit-learn (with SciPy) held
~110 MiB in every web process for the rerank of one page's 600-character chunks (60 chunks: ~25 ms
either way).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

NGRAMS = (2, 3)
"""Character n-gram sizes (inclusive), inside word boundaries, words padded with one space each side."""
_SPACES = re.compile(r"\s\s+")


def char_wb_ngrams(text: str, sizes: tuple[int, int] = NGRAMS) -> list[str]:
    """The character n-grams of ``text`` (lower-cased) inside word boundaries, as scikit-learn's
    ``char_wb`` analyzer makes them: each whitespace-separated word is padded with one space each side
    and cut into every n-gram of each size; a padded word shorter than n gives itself, once."""
    low, high = sizes
    grams: list[str] = []
    for word in _SPACES.sub(" ", text.lower()).split():
        w = f" {word} "
        for n in range(low, high + 1):
            if len(w) <= n:
                grams.append(w)
                break
            grams.extend(w[i:i + n] for i in range(len(w) - n + 1))
    return grams


def cosines(query: str, docs: Sequence[str]) -> list[float] | None:
    """Cosine of ``query``'s TF-IDF row to each of ``docs``' rows (floats in [0, 1], one per doc), with
    sublinear term frequencies (1 + ln tf), smooth idf (ln((1 + n) / (1 + df)) + 1, over the docs and the
    query) and unit rows. None when no text gives a single n-gram (scikit-learn's empty vocabulary)."""
    counts = [Counter(char_wb_ngrams(t)) for t in (*docs, query)]
    df: Counter[str] = Counter()
    for c in counts:
        df.update(c.keys())
    if not df:
        return None
    n = len(counts)
    idf = {g: math.log((1 + n) / (1 + k)) + 1.0 for g, k in df.items()}
    rows = []
    for c in counts:
        row = {g: (1.0 + math.log(tf)) * idf[g] for g, tf in c.items()}
        norm = math.sqrt(sum(v * v for v in row.values())) or 1.0
        rows.append({g: v / norm for g, v in row.items()})
    q = rows[-1]
    return [sum(v * q[g] for g, v in row.items() if g in q) for row in rows[:-1]]
