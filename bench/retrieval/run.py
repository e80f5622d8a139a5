"""Retrieval benchmark: hit@1, hit@5, MRR@10 and kb_search latency on the full law corpus.

One command (from the repository root):

    .venv/bin/python bench/retrieval/run.py            # ingest once into bench/retrieval/.data, then measure
    .venv/bin/python bench/retrieval/run.py --json out.json

Labelled sets: ``laws.jsonl`` ({id, question, law_name, article_no}; each label checked
against laws.db) and ``docs.jsonl`` ({id, question, doc, contains}: a hit counts when it is
a chunk of ``docs/<doc>`` whose text contains ``contains``). The first run ingests the
full corpus (~5.5 min with USE on 2 cores) into ``CONDUIT_DATA_DIR`` (default
``bench/retrieval/.data``, git-ignored) and the docs as tenant ``bench``; later runs
reuse it (the docs re-ingest is a no-op when unchanged).

Rows (all over the same store, tenant ``bench`` + public corpus, top 10):
  dense      dense cosine only (query as asked)
  sparse     jieba BM25 sparse only
  hybrid     one RRF(k=60) query, equal weights, query as asked (issue 2's search)
  hybrid+x   the same with query expansion (services/retriever/expansion.py)
  kb_search  the full pipeline with the settings' defaults (expansion, weights,
             floor, retry, topic follow-up, top_k=6): ranks over its evidence list
Latency: ``KbSearcher.search`` wall time per question (query embedding + hybrid query
+ packing), first call per question (empty query cache), p50/p95 in ms.
Recall check: dense top-10 from the HNSW index vs exact search (``store.exact``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CONDUIT_DATA_DIR", str(HERE / ".data"))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from conduit.settings import Settings  # noqa: E402
from services.retriever.embeddings import make_embedder  # noqa: E402
from services.retriever.expansion import expand_query  # noqa: E402
from services.retriever.ingest import corpus_ready, ingest_law_db, ingest_paths  # noqa: E402
from services.retriever.pipeline import KbSearcher  # noqa: E402
from services.retriever.sparse import SparseEncoder  # noqa: E402
from services.retriever.store import SearchFilter, open_store  # noqa: E402

TENANT = "bench"


def load(name: str) -> list[dict]:
    """Rows of a JSONL file next to this script."""
    return [json.loads(line) for line in (HERE / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def is_answer(item: dict, payload: dict) -> bool:
    """True when ``payload`` (a hit's payload or evidence metadata) answers ``item``."""
    if "law_name" in item:
        return payload.get("law_name") == item["law_name"] and payload.get("article_no") == item["article_no"]
    src = str(payload.get("source_path") or payload.get("file_name") or "")  # evidence metadata keeps file_name
    return src.endswith(item["doc"]) and item["contains"] in str(payload.get("text") or "")


def rank_of(item: dict, payloads: list[dict]) -> int | None:
    """1-based rank of the first answering payload, None if absent."""
    return next((i + 1 for i, p in enumerate(payloads) if is_answer(item, p)), None)


def metrics(ranks: list[int | None]) -> dict:
    """hit@1, hit@5, MRR@10 over ``ranks`` (None = miss)."""
    n = len(ranks) or 1
    return {
        "n": len(ranks),
        "hit@1": sum(1 for r in ranks if r == 1) / n,
        "hit@5": sum(1 for r in ranks if r is not None and r <= 5) / n,
        "mrr@10": sum(1 / r for r in ranks if r is not None and r <= 10) / n,
    }


def machine() -> str:
    """nproc, RAM and CPU model of this machine."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = next(int(x.split()[1]) for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal"))
        ram = f"{mem_kb / 1024 / 1024:.0f} GiB RAM"
    except Exception:  # noqa: BLE001
        ram = "RAM unknown"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} cores (nproc), {ram}, {cpu}, {platform.python_implementation()} {platform.python_version()}, load avg {load:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    ap.add_argument("--show-misses", action="store_true", help="print questions kb_search misses at 5")
    args = ap.parse_args()

    settings = Settings()
    embedder = make_embedder(settings)
    print(f"data dir {settings.data_dir}; embedder {embedder.name}", flush=True)
    store = open_store(settings, embedder.dim)
    try:
        if not corpus_ready(settings):
            t0 = time.perf_counter()
            print(ingest_law_db(settings, embedder=embedder, store=store).render())
            print(f"corpus ingest {time.perf_counter() - t0:.0f} s")
        ingest_paths(settings, [HERE / "docs"], tenant_id=TENANT, progress=False, embedder=embedder, store=store)
        return run(settings, embedder, store, args)
    finally:
        store.close()


def run(settings: Settings, embedder, store, args) -> int:
    laws, docs = load("laws.jsonl"), load("docs.jsonl")
    items = laws + docs
    encoder = SparseEncoder()
    flt = SearchFilter.for_tenant(TENANT)
    searcher = KbSearcher(settings, embedder, store, encoder)

    # latency first: every question once, nothing cached
    embedder._cache.clear()
    latencies, pipeline_ranks = [], []
    for item in items:
        t0 = time.perf_counter()
        outcome = searcher.search(item["question"], TENANT)
        latencies.append((time.perf_counter() - t0) * 1000)
        pipeline_ranks.append(rank_of(item, [{**e.metadata, "text": e.text} for e in outcome.evidence]))
        if args.show_misses and (pipeline_ranks[-1] is None or pipeline_ranks[-1] > 5):
            print(f"  miss {item['id']} {item['question']} -> {[e.title + (e.locator or '') for e in outcome.evidence[:5]]}")

    weights, exact = store.rrf_weights, store.exact
    rows: dict[str, list[int | None]] = {"dense": [], "sparse": [], "hybrid": [], "hybrid+x": []}
    recall = []
    for item in items:
        q = item["question"]
        dq = embedder.embed_query(q)
        store.rrf_weights = None
        store.exact = False
        dense = store.dense_query(dq, flt, limit=10)
        rows["dense"].append(rank_of(item, [h.payload for h in dense]))
        rows["sparse"].append(rank_of(item, [h.payload for h in store.sparse_query(encoder.encode_query(q), flt, limit=10)]))
        rows["hybrid"].append(rank_of(item, [h.payload for h in store.hybrid_query(
            dq, encoder.encode_query(q), flt, limit=10, prefetch_limit=settings.retrieval_candidates)]))
        xq = expand_query(q)
        rows["hybrid+x"].append(rank_of(item, [h.payload for h in store.hybrid_query(
            embedder.embed_query(xq), encoder.encode_query(xq), flt, limit=10, prefetch_limit=settings.retrieval_candidates)]))
        store.exact = True
        exact_ids = {h.id for h in store.dense_query(dq, flt, limit=10)}
        recall.append(len(exact_ids & {h.id for h in dense}) / max(1, len(exact_ids)))
    store.rrf_weights, store.exact = weights, exact
    rows["kb_search"] = pipeline_ranks

    result = {
        "machine": machine(),
        "embedder": embedder.name,
        "points": store.count(),
        "settings": {"rrf_k": settings.rrf_k, "rrf_weights": weights, "exact": exact,
                     "candidates": settings.retrieval_candidates, "top_k": settings.retrieval_top_k},
        "law": {name: metrics(r[: len(laws)]) for name, r in rows.items()},
        "docs": {name: metrics(r[len(laws):]) for name, r in rows.items()},
        "all": {name: metrics(r) for name, r in rows.items()},
        "kb_search_ms": {"p50": statistics.median(latencies),
                         "p95": statistics.quantiles(latencies, n=20)[18], "n": len(latencies)},
        "hnsw_recall@10_vs_exact": sum(recall) / len(recall),
    }
    print(f"\n{result['machine']}\nembedder {result['embedder']}, {result['points']} points, {result['settings']}")
    print(f"{'set':5} {'mode':10} {'n':>3} {'hit@1':>6} {'hit@5':>6} {'MRR@10':>7}")
    for part in ("law", "docs", "all"):
        for name, m in result[part].items():
            print(f"{part:5} {name:10} {m['n']:>3} {m['hit@1']:6.2f} {m['hit@5']:6.2f} {m['mrr@10']:7.3f}")
    lat = result["kb_search_ms"]
    print(f"kb_search latency over {lat['n']} questions: p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms")
    print(f"dense HNSW recall@10 vs exact: {result['hnsw_recall@10_vs_exact']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
