"""Second-stage experiments without e5 (issue 18): learned fusion and law-then-article over the first stage's pool.

    .venv/bin/python bench/retrieval/rerank_lab.py                 # tuning set only: 5-fold CV inside it
    .venv/bin/python bench/retrieval/rerank_lab.py --heldout KEPT  # then, once, the kept setting on held-out

Reads the full-corpus bench store (``bench/retrieval/.data``, filled by run.py) and the shipped law index files
(USE dense, jieba BM25 sparse). For each question it takes kb_search's first-stage pool (the merged rounds,
``retrieval_pool`` = 100 per round, article level), optionally adds every article of the law the pool's top 10
agree on ("law-then-article"), and scores each candidate with features computed on the article's OWN text
(not the RRF of the whole corpus):

  rr       1 / (5 + first-stage rank)  (0 for a law-added article outside the pool)
  use_q    best USE cosine of the question to the article's vectors (article + item chunks), minus the pool's best
  use_x    the same for the expanded question
  bm25     BM25 of the expanded question on the article (its best chunk; IDF of the corpus), over the pool's best
  bigram   share of the question's character bigrams found in the article's text
  share    the article's law's share of the first stage's top-10 fused scores
  top_law  1 when the article is in that top law

Models (pointwise logistic regression, sklearn) are chosen by 5-fold cross-validation over the TUNING questions
(folds by question, seed 0); nothing here reads the held-out set unless ``--heldout`` names a setting to report.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from concurrent.futures import Future
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("CONDUIT_DATA_DIR", str(HERE / ".data"))

from run import TENANT, load, metrics  # noqa: E402

FEATURES = ("rr", "use_q", "use_x", "bm25", "bigram", "share", "top_law")


class _NoE5:
    """Stands in for the second stage so that each round returns the pool (no e5 cosines)."""

    def start(self, forms):
        f: Future = Future()
        f.set_result(None)
        return f


def first_stage_pools(questions: list[dict]) -> list[list[dict]]:
    """kb_search's merged first-stage pool per question: ``[{id, score, dense}]`` in fused order."""
    from conduit.runtime.settings import Settings  # noqa: PLC0415
    from services.retriever.embeddings import make_embedder  # noqa: PLC0415
    from services.retriever.pipeline import KbSearcher  # noqa: PLC0415
    from services.retriever.store import open_store  # noqa: PLC0415

    class Recorder(KbSearcher):
        def _ranked(self, merged, second=False):
            first = sorted(merged.values(), key=lambda h: (-h.score, -(h.dense_score or 0.0), h.id))
            self.pool = [{"id": h.id, "score": h.score, "dense": h.dense_score} for h in first]
            return first[: self.retrieval.retrieval_top_k]

    settings = Settings().changed({"retrieval_stage2_candidates": 0})
    embedder = make_embedder(settings)
    store = open_store(settings, embedder.dim)
    try:
        searcher = Recorder(settings.retrieval, embedder, store, stage2=_NoE5())
        pools = []
        for q in questions:
            searcher.search(q["question"], TENANT)
            pools.append(searcher.pool)
        return pools
    finally:
        store.close()


def bigrams(text: str) -> set[str]:
    t = "".join(ch for ch in text if not ch.isspace())
    return {t[i : i + 2] for i in range(len(t) - 1)}


class Corpus:
    """The law chunks with their shipped USE and BM25 vectors, grouped by article."""

    def __init__(self) -> None:
        import scipy.sparse as sp  # noqa: PLC0415

        from services.retriever import lawindex  # noqa: PLC0415
        from services.retriever.embeddings import make_embedder  # noqa: PLC0415
        from conduit.runtime.settings import Settings  # noqa: PLC0415

        chunks = lawindex.corpus_chunks()
        use = lawindex.find("use-multilingual-v3")
        sparse = lawindex.find(lawindex.SPARSE_MODEL)
        rows = use.rows([c.id for c in chunks])
        self.matrix = lawindex.dequantise(use.vectors)
        self.rows_of: dict[str, list[int]] = {}
        self.article: dict[str, dict] = {}
        self.by_law: dict[str, list[str]] = {}
        for c, r in zip(chunks, rows):
            aid = c.payload.get("parent_id") or c.id
            self.rows_of.setdefault(aid, []).append(r)
            if not c.is_child:
                self.article[aid] = {"law_name": c.payload.get("law_name"), "article_no": c.payload.get("article_no"),
                                     "document_id": c.document_id, "text": c.index_text}
                self.by_law.setdefault(c.document_id, []).append(aid)
        indptr, indices, values = (sparse.sparse[k] for k in ("indptr", "indices", "values"))
        srows = sparse.rows([c.id for c in chunks])
        order = np.asarray(srows)
        terms, cols = np.unique(indices, return_inverse=True)
        self.term_col = {int(t): i for i, t in enumerate(terms)}
        m = sp.csr_matrix((values, cols, indptr), shape=(len(indptr) - 1, len(terms)))
        self.sparse = m[order]  # rows in the same order as ``chunks`` / the USE rows below
        self.sparse_row = {r: i for i, r in enumerate(rows)}
        df = np.bincount(cols, minlength=len(terms))
        n = m.shape[0]
        self.idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
        self.embedder = make_embedder(Settings())

    def bm25(self, query: str, rows: list[int]) -> np.ndarray:
        from services.retriever.sparse import SparseEncoder  # noqa: PLC0415

        q = SparseEncoder().encode_query(query)
        cols = [self.term_col[i] for i in q.indices if i in self.term_col]
        if not cols:
            return np.zeros(len(rows))
        sub = self.sparse[[self.sparse_row[r] for r in rows]][:, cols]
        return np.asarray(sub @ self.idf[cols]).ravel()


def candidate_features(corpus: Corpus, question: str, pool: list[dict], add_law: int) -> tuple[list[str], np.ndarray]:
    """Candidate article ids and their ``FEATURES`` matrix (see the module docstring)."""
    from services.retriever.expansion import expand_query  # noqa: PLC0415

    ids = [p["id"] for p in pool if p["id"] in corpus.article]
    top = ids[:10]
    scores = {p["id"]: p["score"] for p in pool}
    total = sum(scores[i] for i in top) or 1.0
    share: dict[str, float] = {}
    for i in top:
        d = corpus.article[i]["document_id"]
        share[d] = share.get(d, 0.0) + scores[i] / total
    laws = sorted(share, key=lambda d: -share[d])[:add_law]
    rank = {i: n for n, i in enumerate(ids, 1)}
    cand = list(ids) + [a for d in laws for a in corpus.by_law[d] if a not in rank]
    if not cand:  # nothing passed the K1 floor
        return [], np.zeros((0, len(FEATURES)))
    xq = expand_query(question)
    qv = corpus.embedder.embed_queries([question, xq])
    flat = [r for a in cand for r in corpus.rows_of[a]]
    owner = np.repeat(np.arange(len(cand)), [len(corpus.rows_of[a]) for a in cand])
    cos = corpus.matrix[flat] @ qv.T
    bm = corpus.bm25(xq, flat)
    best = np.full((len(cand), 3), -1e9)
    np.maximum.at(best, owner, np.column_stack([cos, bm]))
    qb = bigrams(question)
    top_law = laws[0] if laws else (sorted(share, key=lambda d: -share[d])[0] if share else None)
    feats = []
    pool_n = len(ids) or 1
    ref = best[:pool_n].max(axis=0) if ids else best.max(axis=0)
    for n, a in enumerate(cand):
        art = corpus.article[a]
        feats.append([
            1.0 / (5 + rank[a]) if a in rank else 0.0,
            best[n, 0] - ref[0], best[n, 1] - ref[1], best[n, 2] / (ref[2] or 1.0),
            len(qb & bigrams(art["text"])) / (len(qb) or 1),
            share.get(art["document_id"], 0.0), 1.0 if art["document_id"] == top_law else 0.0,
        ])
    return cand, np.asarray(feats, dtype=np.float64)


def ranks_by(scores_per_q, cands, labels) -> list[int | None]:
    out = []
    for s, c, y in zip(scores_per_q, cands, labels):
        order = np.argsort(-np.asarray(s), kind="stable")
        pos = [k for k, i in enumerate(order, 1) if y[i]]
        out.append(pos[0] if pos else None)
    return out


def _score(model, x: np.ndarray) -> np.ndarray:
    return model.decision_function(x) if len(x) else np.zeros(0)


def evaluate(kind: str, cols: list[int], c_reg: float, X, Y, train_idx, test_idx):
    """Ranks of the ``test_idx`` questions under a model trained on ``train_idx`` (kind: 'first' = pool order)."""
    if kind == "first":
        return ranks_by([X[i][:, 0] for i in test_idx], [None] * len(test_idx), [Y[i] for i in test_idx])
    from sklearn.linear_model import LogisticRegression  # noqa: PLC0415

    xs = np.vstack([X[i][:, cols] for i in train_idx])
    ys = np.concatenate([Y[i] for i in train_idx])
    model = LogisticRegression(C=c_reg, class_weight="balanced", max_iter=2000).fit(xs, ys)
    return ranks_by([_score(model, X[i][:, cols]) for i in test_idx], [None] * len(test_idx),
                    [Y[i] for i in test_idx]), model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heldout", help="report this setting (name printed by the tuning run) on the held-out set")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from services.retriever.pipeline import KbSearcher  # noqa: PLC0415,F401

    tune = load("laws.jsonl")
    corpus = Corpus()
    cache = HERE / ".data" / "pools-tune.json"
    pools = json.loads(cache.read_text()) if cache.is_file() else first_stage_pools(tune)
    cache.write_text(json.dumps(pools))

    def dataset(questions, pools, add_law):
        X, Y = [], []
        for q, pool in zip(questions, pools):
            cand, f = candidate_features(corpus, q["question"], pool, add_law)
            X.append(f)
            Y.append(np.array([corpus.article[a]["law_name"] == q["law_name"] and corpus.article[a]["article_no"] == q["article_no"]
                               for a in cand]))
        return X, Y

    settings = {}
    for add_law in (0, 1):
        settings[f"law{add_law}"] = dataset(tune, pools, add_law)
    recall = {k: sum(bool(y.any()) for y in Y) / len(Y) for k, (_, Y) in settings.items()}
    print("candidate recall (tuning):", recall, flush=True)
    grid = [("first", [0], 1.0)]
    for cols in ([0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3, 4], list(range(7)), [0, 3, 4, 5, 6], [0, 1, 3, 4]):
        for c in (0.01, 0.03, 0.1, 1.0, 10.0):
            grid.append(("lr", cols, c))
    folds = np.array_split(np.random.default_rng(0).permutation(len(tune)), 5)
    rows = []
    for name, (X, Y) in settings.items():
        for kind, cols, c in grid:
            ranks = [None] * len(tune)
            for f in folds:
                train = [i for i in range(len(tune)) if i not in set(f)]
                got = evaluate(kind, cols, c, X, Y, train, list(f))
                got = got[0] if isinstance(got, tuple) and kind != "first" else got
                for i, r in zip(f, got):
                    ranks[i] = r
            label = f"{name} {kind} {'+'.join(FEATURES[k] for k in cols)} C={c}"
            rows.append({"setting": label, **metrics([r if r is not None and r <= 10 else None for r in ranks])})
            print(rows[-1], flush=True)
    rows.sort(key=lambda r: (r["mrr@10"], r["hit@1"], r["hit@5"]))
    print("\nbest on the tuning set (5-fold CV):", rows[-1])
    if args.json:
        args.json.write_text(json.dumps(rows, ensure_ascii=False, indent=2))
    if args.heldout:
        name, kind, feats, creg = args.heldout.split()
        cols = [FEATURES.index(f) for f in feats.split("+")]
        X, Y = settings[name]
        held = load("laws_heldout.jsonl")
        hpools = first_stage_pools(held)
        HX, HY = dataset(held, hpools, int(name[3:]))
        _, model = evaluate(kind, cols, float(creg.split("=")[1]), X, Y, list(range(len(tune))), [0])
        ranks = ranks_by([_score(model, x[:, cols]) for x in HX], [None] * len(HX), HY)
        base = ranks_by([x[:, 0] for x in HX], [None] * len(HX), HY)
        print("held-out first stage:", metrics([r if r and r <= 10 else None for r in base]))
        print(f"held-out {args.heldout}:", metrics([r if r and r <= 10 else None for r in ranks]),
              "coef", dict(zip([FEATURES[k] for k in cols], np.round(model.coef_[0], 3).tolist())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
