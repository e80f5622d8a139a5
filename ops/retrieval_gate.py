"""The retrieval gate (rule E12): hit@1, hit@5 and MRR@10 of ``kb_search`` over the labelled law questions,
against floors kept in ``evals/retrieval_gate.json``; a figure under its floor fails CI.

The labelled sets are the benchmark's (``bench/retrieval/laws.jsonl`` tuning, ``laws_heldout.jsonl`` held-out:
``{id, question, law_name, article_no}``). The gate runs the shipped pipeline (both stages with the settings'
defaults, rule K7) in process over a store holding only the laws those questions name (the ``labelled`` corpus of
``bench/retrieval/run.py``: 31 laws, about 5,600 chunks, their vectors read from the shipped law index, so the
ingest takes seconds, not the full corpus's minutes). A question counts as a hit at rank r when the r-th evidence
item (child chunks counted as their article) is the labelled article. ``evals/retrieval_gate.json`` names the sets
(or a fixed subset of ids), the floors and the figures they were measured at (docs/evals.md, "The retrieval gate").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ops.gates import EVALS_DIR, Gate

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench" / "retrieval"
"""Where the labelled question files live."""
GATE_FILE = EVALS_DIR / "retrieval_gate.json"
"""The gate's sets, floors and measured figures."""
TENANT = "eval-gate"


def labelled(file: str) -> list[dict[str, Any]]:
    """Rows of a labelled JSON Lines file of ``bench/retrieval`` (``{id, question, law_name, article_no}``)."""
    text = (BENCH_DIR / file).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def is_answer(item: dict[str, Any], payload: dict[str, Any]) -> bool:
    """True when ``payload`` (evidence metadata) is ``item``'s labelled article, or for a docs row
    (``{doc, contains}``) a chunk of that file holding that text."""
    if "law_name" in item:
        return payload.get("law_name") == item["law_name"] and payload.get("article_no") == item["article_no"]
    src = str(payload.get("source_path") or payload.get("file_name") or "")
    text = str(payload.get("parent_text") or payload.get("text") or "")
    return src.endswith(item["doc"]) and item["contains"] in text


def rank_of(item: dict[str, Any], payloads: list[dict[str, Any]]) -> int | None:
    """1-based rank of the first payload answering ``item``; None when none does."""
    return next((i + 1 for i, p in enumerate(payloads) if is_answer(item, p)), None)


def metrics(ranks: list[int | None]) -> dict[str, float]:
    """``{n, hit@1, hit@5, mrr@10}`` over ``ranks`` (None = a miss)."""
    n = len(ranks) or 1
    return {"n": len(ranks), "hit@1": sum(1 for r in ranks if r == 1) / n,
            "hit@5": sum(1 for r in ranks if r is not None and r <= 5) / n,
            "mrr@10": sum(1 / r for r in ranks if r is not None and r <= 10) / n}


@dataclass
class GateSet:
    """One gated set: ``name``, its ``rows`` and ``floor`` (``{hit@1, hit@5, mrr@10}`` minima)."""

    name: str
    rows: list[dict[str, Any]]
    floor: dict[str, float]
    kind_floor: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per kind of question (the hard set's ``kind``, ``ops.retrieval_labels.KINDS``): ``{kind: {figure: floor}}``."""


def gate_sets(spec: dict[str, Any] | None = None) -> list[GateSet]:
    """The sets of ``evals/retrieval_gate.json`` (or ``spec``): each ``{file, ids?: [...], floor: {...},
    kind_floor?: {kind: {...}}}``; ``ids`` keeps that fixed subset in file order."""
    spec = spec or json.loads(GATE_FILE.read_text(encoding="utf-8"))
    out = []
    for name, s in spec["sets"].items():
        rows = labelled(s["file"])
        if s.get("ids"):
            keep = set(s["ids"])
            rows = [r for r in rows if r["id"] in keep]
        out.append(GateSet(name, rows, s["floor"], s.get("kind_floor", {})))
    return out


def measure(settings: Any, sets: list[GateSet], assist: bool = False) -> dict[str, dict[str, Any]]:
    """Ingest the laws ``sets`` name into ``settings.stack.data_dir`` and run ``kb_search`` (rule K7's two stages when
    ``settings.retrieval.retrieval_second_stage``) on every question. Returns ``{set name: metrics + "ranks": {id: rank}}``.
    ``assist``: also the helpers ``settings`` turn on (rules K11-K13, ``SearchAssist.from_settings``; the gate runs
    without them; ``bench/retrieval/rerank_standin.py`` measures rule K11 with them).

    Raises ``LawDbError`` / ``LawIndexError`` / ``StoreError`` / ``EmbeddingError`` as the retriever does.
    """
    from services.retriever.assist import SearchAssist
    from services.retriever.embeddings import make_embedder
    from services.retriever.ingest import ingest_law_db
    from services.retriever.main import open_second_stage
    from services.retriever.pipeline import KbSearcher
    from services.retriever.refgraph import find
    from services.retriever.store import open_store

    embedder = make_embedder(settings)
    store = open_store(settings, embedder.dim)
    searcher = None
    try:
        laws = sorted({r["law_name"] for s in sets for r in s.rows})
        ingest_law_db(settings, law_names=laws, embedder=embedder, store=store, progress=False)
        stage2 = open_second_stage(settings) if settings.retrieval.retrieval_second_stage else None
        index_dir = Path(settings.retrieval.law_index_dir) if settings.retrieval.law_index_dir else None  # K16, K20
        searcher = KbSearcher(settings.retrieval, embedder, store, stage2=stage2, refs=find(index_dir))  # as main.py
        searcher.assist = SearchAssist.from_settings(settings) if assist else None
        out = {}
        for s in sets:
            ranks = {}
            for row in s.rows:
                evidence = searcher.search(row["question"], TENANT).evidence
                ranks[row["id"]] = rank_of(row, [{**e.metadata, "text": e.text} for e in evidence])
            out[s.name] = {**metrics(list(ranks.values())), "ranks": ranks, "kinds": by_kind(s.rows, ranks)}
        return out
    finally:
        if searcher is not None and searcher.assist is not None:
            searcher.assist.close()
        store.close()


def by_kind(rows: list[dict[str, Any]], ranks: dict[str, int | None]) -> dict[str, dict[str, float]]:
    """``{kind: metrics}`` over the rows that have a ``kind`` (first-seen order); ``{}`` for a set without kinds."""
    kinds: dict[str, list[int | None]] = {}
    for row in rows:
        if row.get("kind"):
            kinds.setdefault(row["kind"], []).append(ranks.get(row["id"]))
    return {kind: metrics(r) for kind, r in kinds.items()}


def gates(measured: dict[str, dict[str, Any]], sets: list[GateSet]) -> list[Gate]:
    """One gate per set and figure (suite ``retrieval``): passes when the figure is at or above its floor."""
    out = []
    for s in sets:
        got = measured[s.name]
        for figure, floor in s.floor.items():
            out.append(Gate("retrieval", f"{s.name}:{figure}", got[figure] >= floor,
                            f"{got[figure]:.3f} (floor {floor:.2f}, n={got['n']})"))
        for kind, floors in s.kind_floor.items():
            k = got["kinds"].get(kind, {"n": 0, "hit@1": 0.0, "hit@5": 0.0, "mrr@10": 0.0})
            for figure, floor in floors.items():
                out.append(Gate("retrieval", f"{s.name}:{kind}:{figure}", k[figure] >= floor,
                                f"{k[figure]:.3f} (floor {floor:.2f}, n={k['n']})"))
    return out


def run(settings: Any) -> list[Gate]:
    """Measure the gated sets with ``settings`` (a fresh ``data_dir``) and return their gates."""
    sets = gate_sets()
    return gates(measure(settings, sets), sets)


def report(measured: dict[str, dict[str, Any]]) -> str:
    """A plain table of ``measure``'s figures: one line per set, then one per kind of the sets that have kinds."""
    lines = ["set / kind                 n  hit@1  hit@5  mrr@10"]
    for name, got in measured.items():
        lines.append(f"{name:<24} {got['n']:>3}  {got['hit@1']:.3f}  {got['hit@5']:.3f}  {got['mrr@10']:.3f}")
        for kind, k in got.get("kinds", {}).items():
            lines.append(f"  {kind:<22} {k['n']:>3}  {k['hit@1']:.3f}  {k['hit@5']:.3f}  {k['mrr@10']:.3f}")
    return "\n".join(lines)


if __name__ == "__main__":  # .venv/bin/python -m ops.retrieval_gate [set ...]: the figures, without the floors
    import sys
    import tempfile
    import time

    from conduit.runtime.settings import Settings

    chosen = [s for s in gate_sets() if len(sys.argv) < 2 or s.name in sys.argv[1:]]
    t0 = time.perf_counter()
    got = measure(Settings(data_dir=Path(tempfile.mkdtemp(prefix="conduit-gate-"))), chosen)
    print(report(got))
    print(f"{time.perf_counter() - t0:.0f} s")
