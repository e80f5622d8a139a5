"""Choose the second stage's fusion (rule K7) on the TUNING set only (laws.jsonl); never reads the held-out set.

    .venv/bin/python bench/retrieval/tune_stage2.py [--json out.json]

Runs kb_search with the second stage over the bench store (``bench/retrieval/.data``, filled by run.py)
for a grid of e5 weight x reciprocal-rank k x law boost x pool size and prints tuning hit@1 / hit@5 /
MRR@10 per setting, best (MRR, then hit@1) last. The chosen values go into the settings' defaults
(``retrieval_stage2_*``); run.py then reports them on the held-out set.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("CONDUIT_DATA_DIR", str(HERE / ".data"))

from run import TENANT, load, metrics, open_stage2, rank_of  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--weights", default="0.5,1,1.5,2,3")
    ap.add_argument("--ks", default="5,10,30,60")
    ap.add_argument("--boosts", default="0,0.5,1")
    ap.add_argument("--pools", default="100")
    ap.add_argument("--extra", default="0", help="exact e5 nearest chunks added to the pool, e.g. 0,30")
    ap.add_argument("--forms", default="2", help="e5 query forms: 1 (question) and/or 2 (question + expansion), e.g. 1,2")
    args = ap.parse_args()
    from conduit.runtime.settings import Settings  # noqa: PLC0415
    from services.retriever.embeddings import make_embedder  # noqa: PLC0415
    from services.retriever.pipeline import KbSearcher  # noqa: PLC0415
    from services.retriever.store import open_store  # noqa: PLC0415

    tune = load("laws.jsonl")
    settings = Settings()
    embedder = make_embedder(settings)
    store = open_store(settings, embedder.dim)
    stage2 = open_stage2(settings, "labelled" if "labelled" in str(settings.stack.data_dir) else "full")
    rows = []
    try:
        base = KbSearcher(settings.retrieval, embedder, store)
        rows.append({"setting": "first stage only", **metrics([
            rank_of(q, [e.metadata for e in base.search(q["question"], TENANT).evidence]) for q in tune])})
        print(rows[-1], flush=True)
        grid = itertools.product(*(map(float, v.split(",")) for v in (args.weights, args.ks, args.boosts, args.pools,
                                                                      args.forms, args.extra)))
        for w, k, boost, pool, forms, extra in grid:
            s = settings.changed({"retrieval_stage2_weight": w, "retrieval_stage2_k": k,
                                            "retrieval_stage2_law_boost": boost, "retrieval_pool": int(pool),
                                            "retrieval_stage2_expansion": forms > 1,
                                            "retrieval_stage2_candidates": int(extra)})
            searcher = KbSearcher(s.retrieval, embedder, store, stage2=stage2)
            ranks = [rank_of(q, [e.metadata for e in searcher.search(q["question"], TENANT).evidence]) for q in tune]
            rows.append({"setting": f"w_e5={w} k={k} law_boost={boost} pool={int(pool)} forms={int(forms)} extra={int(extra)}", **metrics(ranks)})
            print(rows[-1], flush=True)
    finally:
        store.close()
    rows[1:] = sorted(rows[1:], key=lambda r: (r["mrr@10"], r["hit@1"], r["hit@5"]))
    print("\nbest on the tuning set:", rows[-1])
    if args.json:
        args.json.write_text(json.dumps(rows, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
