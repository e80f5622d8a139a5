"""Rule K11 (a rerank endpoint) per kind of question, with a local stand-in for a cross-encoder (issue 40).

    .venv/bin/python bench/retrieval/rerank_standin.py train      # learn the stand-in on the tuning + held-out sets
    .venv/bin/python bench/retrieval/rerank_standin.py measure    # the gate's sets: fused, + K11 (24), + a window of 10
    .venv/bin/python bench/retrieval/rerank_standin.py serve --port 8089   # CONDUIT_RERANK_URL=http://127.0.0.1:8089/rerank

Every run goes through the real path: the retrieval gate's store and pipeline (``ops.retrieval_gate.measure``,
the labelled corpus, the shipped defaults, no model) with ``CONDUIT_RERANK_URL`` pointing at an HTTP server on
127.0.0.1 that speaks rule K11's protocol (TEI's answer shape). ``train`` serves a recorder (every score 0, so the
fused order stands) to capture what K11 sends for the ``tune`` and ``heldout`` questions, and fits the stand-in
(``standin.py``: pointwise logistic regression, C = 1, balanced classes, chosen by 5-fold cross-validation over
those 242 questions, which it prints) to ``standin_weights.json``; the hard set is never read by it. ``measure``
serves the stand-in and reports hit@1 / hit@5 / MRR@10 per set and kind for: the fused order (the gate's figures),
the stand-in over rule K11's window (``rerank_top_n`` 24), the same scorer over a window of 10 (what rule K13's
listwise model rerank sees: ``retrieval_model_rerank_top_n`` 10; its 300-character cut is not modelled), and the
ceilings of a perfect reranker over each window (the labelled article anywhere in the window counts as first),
whether a retrieval-only answer names the labelled article (it quotes the top 3 passages), and the stand-in's own
time per request without its embedding cache (20 requests). Results: ``results-standin.json``; docs/retrieval.md
"A rerank endpoint, per kind of question".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from standin import FEATURES, CrossStandin, load_weights  # noqa: E402

WEIGHTS = HERE / "standin_weights.json"
CACHE = HERE / ".data" / "standin-embeddings.pkl"
RESULTS = HERE / "results-standin.json"
TRAIN_SETS = ("tune", "heldout")
ANSWER_PASSAGES = 3
"""Passages a retrieval-only answer quotes (``services.orchestrator.agent.fallback.MAX_PASSAGES``)."""
COLD_SAMPLE = 20
"""Requests scored again without the embedding cache, for the stand-in's own cost."""


def rerank_server(score: Callable[[str, list[str]], list[float]], port: int = 0):  # noqa: ANN201 - ScriptedReranker
    """Rule K11's endpoint on 127.0.0.1 (``testkit.scripted_rerank.ScriptedReranker``, TEI's answer shape) scoring
    each request with ``score(query, documents)``; its ``seconds`` lists the time each request took to score."""
    from testkit.scripted_rerank import ScriptedReranker  # noqa: PLC0415

    seconds: list[float] = []

    def timed(query: str, docs: list[str]) -> list[float]:
        t0 = time.perf_counter()
        try:
            return score(query, docs)
        finally:
            seconds.append(time.perf_counter() - t0)

    server = ScriptedReranker(score_many=timed)
    server.seconds = seconds
    if port:
        server.port = port
    return server.start()


def sent(server) -> dict[str, list[str]]:  # noqa: ANN001 - ScriptedReranker
    """query -> the documents of its last request to ``server``."""
    return {str(b.get("query") or ""): [str(d) for d in b.get("texts") or b.get("documents") or []]
            for b in server.requests}


def run_gate(server, names: Sequence[str], top_n: int = 24) -> dict:  # noqa: ANN001 - ScriptedReranker or None
    """``ops.retrieval_gate.measure`` over the gated sets ``names`` in a fresh store, rule K11 on ``server``
    (None: off)."""
    from conduit.runtime.settings import Settings  # noqa: PLC0415
    from ops.retrieval_gate import gate_sets, measure  # noqa: PLC0415

    env = {"CONDUIT_RERANK_URL": server.url, "CONDUIT_RERANK_TIMEOUT_S": "120", "CONDUIT_RERANK_TOP_N": str(top_n),
           "CONDUIT_RETRIEVAL_MODEL_REWRITE": "false", "CONDUIT_RETRIEVAL_MODEL_RERANK": "false"} if server else {}
    # no model's help (rules K12, K13) even where the shell configures a model: K11 alone is measured
    with mock.patch.dict(os.environ, env):
        settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="conduit-standin-")))
        return measure(settings, [s for s in gate_sets() if s.name in names], assist=server is not None)


def gold_index(row: dict, docs: Sequence[str]) -> int | None:
    """0-based place of ``row``'s labelled article among what K11 sent (its first line is ``《law》 第N条``)."""
    head = f"《{row['law_name']}》 {row['article_no']}"
    return next((i for i, d in enumerate(docs) if d.split("\n", 1)[0].strip() == head), None)


def train() -> None:
    """Capture K11's requests for the training sets, fit, cross-validate, write ``WEIGHTS``."""
    import numpy as np  # noqa: PLC0415
    from sklearn.linear_model import LogisticRegression  # noqa: PLC0415

    from ops.retrieval_gate import gate_sets  # noqa: PLC0415

    recorder = rerank_server(lambda q, docs: [0.0] * len(docs))
    try:
        run_gate(recorder, TRAIN_SETS)
    finally:
        recorder.stop()
    seen = sent(recorder)
    standin = CrossStandin(cache_path=CACHE)
    lists = []
    for s in gate_sets():
        for row in s.rows if s.name in TRAIN_SETS else []:
            docs = seen.get(row["question"], [])
            if len(docs) >= 2:
                g = gold_index(row, docs)
                lists.append((standin.features(row["question"], docs), np.array([i == g for i in range(len(docs))])))
    standin.save()

    def fit(items: list) -> LogisticRegression:
        x, y = np.vstack([a for a, _ in items]), np.concatenate([b for _, b in items])
        return LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced").fit(x, y)

    def first(items: list, model: LogisticRegression | None) -> list[int | None]:
        out = []
        for x, y in items:
            order = np.argsort(-model.decision_function(x), kind="stable") if model else np.arange(len(y))
            out.append(next((k for k, i in enumerate(order, 1) if y[i]), None))
        return out

    order = np.random.default_rng(0).permutation(len(lists))
    cv: list[int | None] = []
    for fold in np.array_split(order, 5):
        held = set(fold.tolist())
        cv += first([lists[i] for i in fold], fit([lists[i] for i in order if i not in held]))
    print(f"{len(lists)} questions; 5-fold CV hit@1 fused {_hit1(first(lists, None)):.3f} -> stand-in {_hit1(cv):.3f}")
    model = fit(lists)
    WEIGHTS.write_text(json.dumps({"features": list(FEATURES), "coef": model.coef_[0].round(6).tolist(),
                                   "intercept": round(float(model.intercept_[0]), 6), "C": 1.0,
                                   "trained_on": list(TRAIN_SETS), "questions": len(lists)}, indent=1) + "\n")
    print(f"wrote {WEIGHTS.relative_to(ROOT)}")


def _hit1(ranks: Sequence[int | None]) -> float:
    return sum(1 for r in ranks if r == 1) / (len(ranks) or 1)


def ceiling(rows: Sequence[dict], seen: dict, window: int) -> float:
    """hit@1 (= hit@5) of a perfect reranker over the first ``window`` candidates K11 was sent."""
    hits = [(g := gold_index(r, seen.get(r["question"], []))) is not None and g < window for r in rows]
    return sum(hits) / (len(hits) or 1)


def measure_all() -> None:
    """The table of the module docstring, printed and written to ``RESULTS``."""
    from ops.retrieval_gate import gate_sets  # noqa: PLC0415

    names = [s.name for s in gate_sets()]
    standin = CrossStandin(load_weights(WEIGHTS), cache_path=CACHE)
    server = rerank_server(standin.scores)
    try:
        fused = run_gate(None, names)
        k11 = run_gate(server, names, 24)
        seen = sent(server)
        k13 = run_gate(server, names, 10)
    finally:
        server.stop()
        standin.save()
    cold = CrossStandin(load_weights(WEIGHTS))  # no cache: what a request costs the stand-in the first time
    seconds = []
    for query, docs in list(seen.items())[:COLD_SAMPLE]:
        t0 = time.perf_counter()
        cold.scores(query, docs)
        seconds.append(time.perf_counter() - t0)
    out: dict = {"cold_seconds_per_request_p50": sorted(seconds)[len(seconds) // 2] if seconds else None}
    lines = ["| set / kind | n | fused (defaults) | + stand-in, K11's window 24 | + stand-in, window 10 (K13's) "
             "| perfect reranker, 24 / 10 | retrieval-only answer names it: fused / K11 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for s in gate_sets():
        groups = [(s.name, s.rows)] + [(f"{s.name}:{k}", [r for r in s.rows if r.get("kind") == k])
                                       for k in fused[s.name]["kinds"]]
        for label, rows in groups:
            figs = [_figures(m[s.name], label, rows) for m in (fused, k11, k13)]
            caps = (ceiling(rows, seen, 24), ceiling(rows, seen, 10))
            out[label] = {"n": len(rows), "fused": figs[0], "k11": figs[1], "window10": figs[2],
                          "perfect24": caps[0], "perfect10": caps[1]}
            cells = " | ".join("%.3f / %.3f / %.3f" % (f["hit@1"], f["hit@5"], f["mrr@10"]) for f in figs)
            lines.append(f"| {label} | {len(rows)} | {cells} | {caps[0]:.3f} / {caps[1]:.3f} "
                         f"| {figs[0]['answer']:.3f} / {figs[1]['answer']:.3f} |")
    print("\n".join(lines))
    print(f"stand-in p50 per request, uncached ({len(seconds)} requests): {out['cold_seconds_per_request_p50']:.2f} s")
    RESULTS.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


def _figures(got: dict, label: str, rows: Sequence[dict]) -> dict[str, float]:
    """hit@1 / hit@5 / MRR@10 of a set or a kind, and ``answer``: the share whose labelled article is among the
    passages a retrieval-only answer quotes (the first ``ANSWER_PASSAGES``)."""
    kind = label.split(":", 1)[1] if ":" in label else None
    f = got["kinds"][kind] if kind else got
    ranks = [got["ranks"].get(r["id"]) for r in rows]
    named = sum(1 for r in ranks if r is not None and r <= ANSWER_PASSAGES) / (len(ranks) or 1)
    return {**{k: round(f[k], 3) for k in ("hit@1", "hit@5", "mrr@10")}, "answer": round(named, 3)}


def main() -> None:
    """``train`` | ``measure`` | ``serve --port N``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=("train", "measure", "serve"))
    p.add_argument("--port", type=int, default=8089)
    a = p.parse_args()
    if a.command == "train":
        train()
    elif a.command == "measure":
        measure_all()
    else:
        server = rerank_server(CrossStandin(load_weights(WEIGHTS), cache_path=CACHE).scores, a.port)
        print(f"serving {server.url} (Ctrl-C stops)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            server.stop()


if __name__ == "__main__":
    main()
