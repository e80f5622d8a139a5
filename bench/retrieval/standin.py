"""A local stand-in for a cross-encoder reranker (issue 40): it reads the question and each candidate together.

No cross-encoder ships its weights in a package here (docs/retrieval.md, "A rerank endpoint"), so rule K11's
effect is shown with this scorer behind the same HTTP protocol. For one request (a question and the candidates
rule K11 sends, in fused order: title and locator, then at most 1,000 characters) it computes, per candidate,
features that need both texts at once, and scores them with a pointwise logistic regression learned on the
tuning and held-out law sets (never the hard set; ``rerank_standin.py train``):

  pos          1 / (5 + the candidate's place in the request): the fused order, which a real cross-encoder ignores
  e5_doc       e5 cosine of the question to the candidate's text embedded as sent (minus the request's best)
  e5_sent      the best e5 cosine of the question to one of its sentences (split at 。；and new lines; minus best)
  e5_sent2     the second best sentence (minus the request's best)
  use_doc      the same as e5_doc with USE
  use_sent     the same as e5_sent with USE
  coverage     share of the expanded question's jieba words (IDF-weighted, jieba's own IDF table) in the text
  bigram       share of the question's character bigrams in the text (minus the request's best)
  intent       how many of the question's asks the text answers in kind (多少/几天 -> a number with a unit,
               罚 -> 罚款/徒刑, 赔 -> 赔偿, 谁/哪个部门 -> 部门/机关, 能不能/合法吗 -> 不得/可以/有权)
  intent_miss  how many it does not
  log_len      log(1 + the text's characters)

Cost: the candidates' texts and sentences are embedded at request time (e5 and USE, ~100 texts per request:
1-3 s on this machine's 2 cores; cached by text in memory and in ``cache_path``), which is why this is a
benchmark's stand-in and not a pipeline stage: a served cross-encoder on a GPU answers in tens of milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import math
import pickle
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

FEATURES = ("pos", "e5_doc", "e5_sent", "e5_sent2", "use_doc", "use_sent", "coverage", "bigram", "intent",
            "intent_miss", "log_len")
RELATIVE = ("e5_doc", "e5_sent", "e5_sent2", "use_doc", "use_sent", "coverage", "bigram")
"""Features given relative to the request's best candidate (each minus the column's maximum)."""
MIN_SENTENCE = 6
"""Characters below which a split piece is not a sentence of its own."""

_NUMBER = re.compile(r"[一二三四五六七八九十百千两\d]+(日|天|个月|月|年|倍|％|%|元|周岁|小时|工作日)")
INTENTS = (
    (re.compile(r"多少|几|多久|多长|多大|多高|比例|标准"), _NUMBER),
    (re.compile(r"罚|处罚|坐牢|判|责任|违法"), re.compile(r"罚款|处.{0,8}(徒刑|拘役|罚)|吊销|追究|责令")),
    (re.compile(r"赔|补偿"), re.compile(r"赔偿|补偿")),
    (re.compile(r"谁|哪个部门|找谁|归谁|哪里"), re.compile(r"部门|机关|机构|所有|负责|承担")),
    (re.compile(r"能不能|可以吗|合法吗|行吗|能吗|有权"), re.compile(r"不得|可以|有权|禁止|应当")),
)
"""(what the question asks, what a text answering it in kind holds)."""
_STOP = frozenset("的 了 吗 呢 我 你 他 她 是 要 能 可以 会 有 在 和 就 都 还 也 把 被 给 吧 啊 么 什么 怎么 怎么办 多少 一个 "
                  "这 那 不 没 没有 如果 应该".split())
_PUNCT = frozenset("，。？！、；：“”（）《》?,!:;()")


def body(document: str) -> str:
    """A candidate's text without its first line (title and locator), as rule K11 sends it."""
    return document.split("\n", 1)[1] if "\n" in document else document


def sentences(document: str) -> list[str]:
    """The candidate's sentences (split at 。；and new lines, pieces under ``MIN_SENTENCE`` characters dropped)."""
    return [s.strip() for s in re.split(r"[。；\n]", body(document)) if len(s.strip()) >= MIN_SENTENCE]


def bigrams(text: str) -> set[str]:
    """Character bigrams of ``text`` without spaces and punctuation."""
    chars = [c for c in text if not c.isspace() and c not in _PUNCT]
    return {chars[i] + chars[i + 1] for i in range(len(chars) - 1)}


class CrossStandin:
    """Scores a request's candidates (see the module docstring).

    Args:
        weights: ``{"features": [...], "coef": [...], "intercept": float}`` (``rerank_standin.py train``); None
            when only ``features`` is used (training).
        cache_path: a pickle of embedded texts kept between runs (None: memory only).
    """

    def __init__(self, weights: dict | None = None, cache_path: Path | None = None) -> None:
        import jieba  # noqa: PLC0415
        import jieba.analyse  # noqa: PLC0415

        from services.retriever.embeddings import E5Embedder, UseEmbedder  # noqa: PLC0415

        jieba.setLogLevel(60)
        self._cut = jieba.lcut
        tfidf = jieba.analyse.default_tfidf
        self._idf, self._idf_default = tfidf.idf_freq, tfidf.median_idf
        self.e5, self.use = E5Embedder(threads=2), UseEmbedder(threads=2)
        self.weights = weights
        self.cache_path = cache_path
        self._cache: dict[str, np.ndarray] = {}
        if cache_path is not None and cache_path.exists():
            self._cache = pickle.loads(cache_path.read_bytes())
        self._dirty = False

    def _vectors(self, kind: str, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors ``(len(texts), dim)`` of ``kind`` (``e5q`` query, ``e5p`` passage, ``use``), cached."""
        key = {t: kind + hashlib.blake2b(t.encode(), digest_size=12).hexdigest() for t in texts}
        missing = sorted(t for t, k in key.items() if k not in self._cache)
        if missing:
            embed = {"e5q": self.e5.embed_queries, "e5p": self.e5.embed, "use": self.use.embed}[kind]
            for t, v in zip(missing, embed(missing)):
                self._cache[key[t]] = np.asarray(v, np.float32)
            self._dirty = True
        return np.stack([self._cache[key[t]] for t in texts])

    def save(self) -> None:
        """Write the embedding cache to ``cache_path`` when it grew."""
        if self.cache_path is not None and self._dirty:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            self.cache_path.write_bytes(pickle.dumps(self._cache))
            self._dirty = False

    def features(self, query: str, documents: Sequence[str]) -> np.ndarray:
        """``(len(documents), len(FEATURES))`` for one request; ``RELATIVE`` columns minus their maximum."""
        from services.retriever.expansion import expand_query  # noqa: PLC0415

        q_e5, q_use = self._vectors("e5q", [query])[0], self._vectors("use", [query])[0]
        texts = [body(d) for d in documents]
        split = [sentences(d) or [body(d)] for d in documents]
        flat = [s for ss in split for s in ss]
        d_e5, d_use = self._vectors("e5p", texts) @ q_e5, self._vectors("use", texts) @ q_use
        s_e5, s_use = self._vectors("e5p", flat) @ q_e5, self._vectors("use", flat) @ q_use
        words = [w for w in set(self._cut(expand_query(query))) if w not in _STOP and len(w) >= 2]
        weight = {w: self._idf.get(w, self._idf_default) for w in words}
        total = sum(weight.values()) or 1.0
        q_bigrams = bigrams(query)
        rows, at = [], 0
        for i, (text, ss) in enumerate(zip(texts, split)):
            e5s = sorted(s_e5[at:at + len(ss)].tolist(), reverse=True)
            uses = s_use[at:at + len(ss)].tolist()
            at += len(ss)
            asked = [bool(a.search(query)) for a, _ in INTENTS]
            held = [bool(b.search(text)) for _, b in INTENTS]
            rows.append([1 / (5 + i), float(d_e5[i]), e5s[0], e5s[1] if len(e5s) > 1 else e5s[0], float(d_use[i]),
                         max(uses), sum(v for w, v in weight.items() if w in text) / total,
                         len(q_bigrams & bigrams(text)) / (len(q_bigrams) or 1),
                         sum(a and h for a, h in zip(asked, held)), sum(a and not h for a, h in zip(asked, held)),
                         math.log(len(text) + 1)])
        x = np.asarray(rows, np.float64)
        for name in RELATIVE:
            c = FEATURES.index(name)
            x[:, c] -= x[:, c].max()
        return x

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        """One relevance score per document (higher is better). Raises ``ValueError`` without weights."""
        if not self.weights:
            raise ValueError("stand-in: no weights (run bench/retrieval/rerank_standin.py train)")
        if not documents:
            return []
        cols = [FEATURES.index(f) for f in self.weights["features"]]
        x = self.features(query, documents)[:, cols]
        return (x @ np.asarray(self.weights["coef"]) + float(self.weights["intercept"])).tolist()


def load_weights(path: Path) -> dict:
    """The weights file written by ``rerank_standin.py train``."""
    return json.loads(path.read_text(encoding="utf-8"))
