"""Following the law's own references (rules K16, K17, A30): is the article a question's answer lies in
among the evidence, without and with following the references of the passages ``kb_search`` returned?

One command (from the repository root):

    .venv/bin/python bench/retrieval/follow.py                  # the set's laws, ingested into bench/retrieval/.data/refs-<backend>
    .venv/bin/python bench/retrieval/follow.py --corpus full    # all 352 current laws (bench/retrieval/.data, shared with run.py)

Labelled set ``refs.jsonl`` (18): {id, question, law_name, via, answer}: the question is worded like article
``via`` (what a search finds), and its answer lies in an article ``via`` cites (``answer``: any of them counts;
every label checked against laws.db and the graph). Rows, over ``KbSearcher.search`` with the settings'
defaults (top 6, the second stage when the e5 law index is there):

  search       the answer article is among kb_search's evidence;
  follow-top   also following the top passage's references (one hop, at most 5: what retrieval-only mode could do);
  follow-all   also following the references of every passage (one hop, at most 5 per call, one call per
               passage: what an agent that calls kb_follow for each cited passage reaches);
  via@6        the article the question is worded like is in the evidence (the precondition).
Also the articles added per question by following (evidence cost).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

MAX_PER_CALL = 5  # rule A30


def load() -> list[dict]:
    return [json.loads(line) for line in (HERE / "refs.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]


def followed(graph, evidence, which: str) -> list[str]:
    """Ref ids reached by one hop from ``evidence`` (``top``: the first passage only; ``all``: each passage)."""
    items = evidence[:1] if which == "top" else evidence
    out: list[str] = []
    for item in items:
        out += [r.id for r in item.refs[:MAX_PER_CALL]]
    return list(dict.fromkeys(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", choices=("set", "full"), default="set")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    backend = os.environ.get("CONDUIT_EMBEDDING_BACKEND", "use").strip().lower()
    os.environ.setdefault("CONDUIT_DATA_DIR", str(HERE / ".data" / (f"refs-{backend}" if args.corpus == "set" else "")))

    from bench.retrieval.run import open_stage2  # noqa: PLC0415
    from conduit.runtime.settings import Settings  # noqa: PLC0415
    from services.retriever import lawdb, refgraph  # noqa: PLC0415
    from services.retriever.embeddings import make_embedder  # noqa: PLC0415
    from services.retriever.ingest import ingest_law_db  # noqa: PLC0415
    from services.retriever.pipeline import KbSearcher  # noqa: PLC0415
    from services.retriever.store import open_store  # noqa: PLC0415

    items = load()
    settings = Settings()
    embedder = make_embedder(settings)
    store = open_store(settings, embedder.dim)
    try:
        names = sorted({i["law_name"] for i in items}) if args.corpus == "set" else None
        print(ingest_law_db(settings, law_names=names, embedder=embedder, store=store, progress=False).render(), flush=True)
        graph = refgraph.find()
        searcher = KbSearcher(settings.retrieval, embedder, store, stage2=open_stage2(settings))
        searcher.refs = graph
        laws = {law.law_name: law.law_id for law in lawdb.list_laws()}
        rows = {"search": 0, "follow-top": 0, "follow-all": 0, "via@6": 0}
        added = {"follow-top": 0, "follow-all": 0}
        per = []
        for it in items:
            law_id = laws[it["law_name"]]
            evidence = searcher.search(it["question"], "bench").evidence
            have = {e.metadata.get("ref_id") for e in evidence}
            answer = {f"{law_id}:{refgraph.number_key(a, None, 0)}" for a in it["answer"]}
            via = f"{law_id}:{refgraph.number_key(it['via'], None, 0)}"
            got = {"search": bool(answer & have), "via@6": via in have}
            for which in ("top", "all"):
                extra = [r for r in followed(graph, evidence, which) if r not in have]
                added[f"follow-{which}"] += len(extra)
                got[f"follow-{which}"] = bool(answer & (have | set(extra)))
            for k, v in got.items():
                rows[k] += v
            per.append({"id": it["id"], **got})
            print(it["id"], " ".join(f"{k}={'Y' if v else '-'}" for k, v in got.items()), flush=True)
        n = len(items)
        result = {"questions": n, "embedder": embedder.name, "second_stage": searcher.stage2 is not None,
                  "corpus": args.corpus, "rows": {k: f"{v}/{n}" for k, v in rows.items()},
                  "articles_added_per_question": {k: round(v / n, 1) for k, v in added.items()},
                  "graph": graph.meta["stats"], "per_question": per}
        print(json.dumps({k: v for k, v in result.items() if k != "per_question"}, ensure_ascii=False, indent=1))
        if args.json:
            args.json.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        return 0
    finally:
        store.close()


if __name__ == "__main__":
    raise SystemExit(main())
