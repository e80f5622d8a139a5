"""Latency of the two-stage kb_search (rule K7) on the full corpus, before its e5 law index exists.

    .venv/bin/python bench/retrieval/stage2_latency.py [--json out.json]

The second stage's cost does not depend on the values of the stored e5 passage vectors (a gather and a dot
product over the pool, plus the exact e5 nearest over the whole matrix): it is the e5 QUERY embedding. So this
script times the real pipeline over the full-corpus bench store (``bench/retrieval/.data``, filled by run.py) with
the real e5 query embedder and a stand-in e5 law index of random unit vectors under the real point ids. Its hit
rates mean nothing and are not printed; only times are.

Per question (the 242 law questions + 9 docs questions, first call each, caches cleared), p50 / p95 in ms of:
  e5 embed 1 / 2   the e5 query embedding of the question alone / question + expansion (one call)
  first stage      today's kb_search
  two stages (2)   kb_search with the second stage, e5 of question + expansion (the setting's default)
  two stages (1)   the same with the question alone (``retrieval_stage2_expansion = false``)
with the 1-minute load average before and after each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("CONDUIT_DATA_DIR", str(HERE / ".data"))

from run import LAW_SETS, TENANT, load, loadavg, machine  # noqa: E402


def stand_in_index(model: str, dim: int):
    """A ``LawIndex`` of random int8 unit rows under the real law chunks' ids (latency only)."""
    from services.retriever import lawindex  # noqa: PLC0415
    from services.retriever.lawindex import LawIndex  # noqa: PLC0415
    import uuid  # noqa: PLC0415

    chunks = lawindex.corpus_chunks()
    ids = np.frombuffer(b"".join(uuid.UUID(c.id).bytes for c in chunks), dtype=np.uint8).reshape(-1, 16)
    v = np.random.default_rng(0).standard_normal((len(chunks), dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return LawIndex(Path("stand-in"), {"model": model}, ids, np.zeros((len(chunks), 8), np.uint8),
                    vectors=lawindex.quantise(v, "int8"))


def timed(fn, items) -> dict:
    """p50 / p95 (ms) of ``fn(item)`` over ``items`` with the load average before and after."""
    load0, ms = loadavg(), []
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        ms.append((time.perf_counter() - t0) * 1000)
    return {"p50": round(statistics.median(ms), 1), "p95": round(statistics.quantiles(ms, n=20)[18], 1),
            "n": len(ms), "load_before": round(load0, 1), "load_after": round(loadavg(), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from conduit.runtime.settings import Settings  # noqa: PLC0415
    from services.retriever.embeddings import E5Embedder, make_embedder  # noqa: PLC0415
    from services.retriever.expansion import expand_query  # noqa: PLC0415
    from services.retriever.pipeline import KbSearcher  # noqa: PLC0415
    from services.retriever.rescoring import SecondStage  # noqa: PLC0415
    from services.retriever.store import open_store  # noqa: PLC0415

    questions = [row["question"] for _, name in LAW_SETS for row in load(name)] + [r["question"] for r in load("docs.jsonl")]
    settings = Settings()
    embedder = make_embedder(settings)
    store = open_store(settings, embedder.dim)
    e5 = E5Embedder(threads=settings.retrieval.embedding_threads)
    stage2 = SecondStage(e5, stand_in_index(e5.name, e5.dim))
    out = {"machine": machine(), "threads": settings.retrieval.embedding_threads}
    try:
        first = KbSearcher(settings.retrieval, embedder, store)
        pair = KbSearcher(settings.retrieval, embedder, store, stage2=stage2)
        alone = KbSearcher(settings.changed({"retrieval_stage2_expansion": False}).retrieval, embedder, store, stage2=stage2)
        for s in (first, pair, alone):
            s.search("预热", TENANT)

        def fresh(fn):
            def call(q):
                embedder._cache.clear()
                e5._cache.clear()
                fn(q)
            return call

        out["e5 embed 1"] = timed(fresh(lambda q: e5.embed_queries([q])), questions)
        out["e5 embed 2"] = timed(fresh(lambda q: e5.embed_queries(list(dict.fromkeys([q, expand_query(q)])))), questions)
        out["first stage"] = timed(fresh(lambda q: first.search(q, TENANT)), questions)
        out["two stages (2)"] = timed(fresh(lambda q: pair.search(q, TENANT)), questions)
        out["two stages (1)"] = timed(fresh(lambda q: alone.search(q, TENANT)), questions)
        out["two stages (2), cached"] = timed(lambda q: pair.search(q, TENANT), questions)
    finally:
        stage2.close()
        store.close()
    print(out["machine"])
    for k, v in out.items():
        if isinstance(v, dict):
            print(f"{k:24} p50 {v['p50']:6.1f} ms  p95 {v['p95']:6.1f} ms  (n {v['n']}, load {v['load_before']} -> {v['load_after']})")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
