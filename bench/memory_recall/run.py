"""Benchmark: the memory recall's relevance floor (rule M10, issue 30), measured on labelled pairs.

    python -m bench.memory_recall.run [--backend use|e5] [--floor F]

``bench/memory_recall/pairs.jsonl``: 133 (question, memory item) pairs, 45 related and 88 not, facts
(as rule M1 stores them: the user's clause) and episodes (question and the start of the answer),
Chinese and English. Every question and item is embedded exactly as the memory does it (the
question with ``embed_query``, the item with ``embed``, the retriever's embedder) and the cosine
of each pair computed. Printed: the cosine distribution by kind and label; the floor sweep
(precision and recall of rule M10's ``bears_on`` at each floor); the chosen floor (the middle of the
widest run of floors where both are at least 0.9); the figures at the floor in
``agent.memory.MEASURED_FLOORS`` against the old rule (cosine >= 0.1); and, for the new-topic
questions, how many of every item in the set (facts and episodes of unrelated topics) pass. Then the
same episodes against each question's short keyword form (``keywords``: what a model writes as a
``history_search`` query): its distribution, sweep and floor (rule M12: the lowest floor of the widest run
where precision and recall are at least 0.9, since an explicit search favours recall).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from contracts.memory import MemoryItem
from conduit.policy.recall import MEASURED_QUERY_FLOORS
from services.orchestrator.agent.memory import bears_on, measured_floor
from services.retriever.embeddings import E5Embedder, UseEmbedder

PAIRS = Path(__file__).with_name("pairs.jsonl")
OLD_FLOOR = 0.1
_T = datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Pair:
    """One labelled pair and its cosine."""

    question: str
    keywords: str
    lang: str
    item: MemoryItem
    related: bool
    cosine: float


def _item(row: dict) -> MemoryItem:
    topic = {"f-name": "name", "f-en-name": "name", "f-city": "city", "f-en-city": "city", "f-trip": "temporary",
             "f-default": "default:按季度申报增值税"}.get(row["item_id"], "work" if row["item_type"] == "fact" else None)
    return MemoryItem(id=row["item_id"], tenant_id="t", user_id="u", type=row["item_type"], topic=topic,
                      text=row["item"], task_id="bench", importance=5, created_at=_T, last_used_at=_T)


def load(backend: str) -> list[Pair]:
    """The labelled pairs with their cosines under ``backend`` (``use`` | ``e5``)."""
    rows = [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines() if line.strip()]
    embedder = UseEmbedder() if backend == "use" else E5Embedder()
    q = embedder.embed_queries([r["question"] for r in rows])
    d = embedder.embed([r["item"] for r in rows])
    cos = (q * d).sum(axis=1)
    return [Pair(r["question"], r["keywords"], r["lang"], _item(r), r["related"], float(c)) for r, c in zip(rows, cos)]


def keyword_report(backend: str) -> str:
    """Rule M12's measurement: the episodes against each question's keyword form, cosine only."""
    rows = [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line)["item_type"] == "episode"]
    embedder = UseEmbedder() if backend == "use" else E5Embedder()
    cos = (embedder.embed_queries([r["keywords"] for r in rows]) * embedder.embed([r["item"] for r in rows])).sum(axis=1)
    pairs = [Pair(r["question"], r["keywords"], r["lang"], _item(r), r["related"], float(c)) for r, c in zip(rows, cos)]
    sweep = [(round(f, 2), *scores(pairs, lambda p, f=f: p.cosine >= f)) for f in np.arange(0.0, 1.0, 0.01)]
    ok = [f for f, p, r in sweep if p >= 0.9 and r >= 0.9]
    out = [f"### `history_search` keyword queries, `{backend}`: {len(pairs)} episode pairs", "",
           "| label | cosine min / p10 / median / p90 / max |", "| --- | --- |",
           f"| related | {_dist([p.cosine for p in pairs if p.related])} |",
           f"| unrelated | {_dist([p.cosine for p in pairs if not p.related])} |", "",
           f"Floors with precision and recall >= 0.9: {ok[0] if ok else '-'} to {ok[-1] if ok else '-'}; "
           f"`MEASURED_QUERY_FLOORS[{backend!r}]` = {MEASURED_QUERY_FLOORS.get(backend)}.", "",
           "| floor | precision | recall |", "| --- | --- | --- |"]
    floor = MEASURED_QUERY_FLOORS.get(backend, 0.0)
    out += [f"| {f:.2f} | {p:.2f} | {r:.2f} |" for f, p, r in sweep if abs(f - floor) <= 0.1 + 1e-9 and round(f * 100) % 2 == 0]
    return "\n".join(out)


def scores(pairs: list[Pair], admit) -> tuple[float, float]:
    """(precision, recall) of ``admit(pair) -> bool`` against the labels."""
    said = [admit(p) for p in pairs]
    tp = sum(1 for p, s in zip(pairs, said) if s and p.related)
    return tp / max(1, sum(said)), tp / max(1, sum(p.related for p in pairs))


def rule(floor: float):
    """Rule M10 at ``floor``, as a predicate on a pair."""
    return lambda p: bears_on(p.question, p.item, p.cosine, floor)


def choose(pairs: list[Pair]) -> tuple[float, list[tuple[float, float, float]]]:
    """The floor in the middle of the widest run (step 0.01) where rule M10 has precision and recall >= 0.9."""
    sweep = [(round(f, 2), *scores(pairs, rule(f))) for f in np.arange(0.0, 1.0, 0.01)]
    runs, cur = [], []
    for f, p, r in sweep:
        if p >= 0.9 and r >= 0.9:
            cur.append(f)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    if not runs:
        return float("nan"), sweep
    best = max(runs, key=len)
    return round(best[len(best) // 2], 2), sweep


def _dist(values: list[float]) -> str:
    if not values:
        return "-"
    return " / ".join(f"{v:.2f}" for v in np.percentile(values, [0, 10, 50, 90, 100]))


def report(pairs: list[Pair], backend: str) -> str:
    """The markdown tables for ``pairs`` under ``backend``."""
    out = [f"### Embedder `{backend}`: {len(pairs)} pairs, {sum(p.related for p in pairs)} related", "",
           "| kind | label | pairs | cosine min / p10 / median / p90 / max |", "| --- | --- | --- | --- |"]
    for kind in ("fact", "episode"):
        for label in (True, False):
            vals = [p.cosine for p in pairs if p.item.type == kind and p.related == label]
            out.append(f"| {kind} | {'related' if label else 'unrelated'} | {len(vals)} | {_dist(vals)} |")
    chosen, sweep = choose(pairs)
    floor = measured_floor(backend)
    out += ["", f"Widest run of floors with precision and recall >= 0.9: middle **{chosen}**; "
            f"`MEASURED_FLOORS[{backend!r}]` = {floor}.", "",
            "| rule | subset | precision | recall |", "| --- | --- | --- | --- |"]
    subsets = {"all": pairs, "facts": [p for p in pairs if p.item.type == "fact"],
               "episodes": [p for p in pairs if p.item.type == "episode"],
               "Chinese questions": [p for p in pairs if p.lang == "zh"],
               "English questions": [p for p in pairs if p.lang == "en"]}
    for name, admit in ((f"old: cosine >= {OLD_FLOOR}", lambda p: p.cosine >= OLD_FLOOR),
                        (f"cosine >= {floor} alone", lambda p: p.cosine >= floor), (f"M10 at {floor}", rule(floor))):
        for sub, ps in subsets.items():
            pr, rc = scores(ps, admit)
            out.append(f"| {name} | {sub} | {pr:.2f} | {rc:.2f} |")
    out += ["", "| floor | precision | recall |", "| --- | --- | --- |"]
    out += [f"| {f:.2f} | {p:.2f} | {r:.2f} |" for f, p, r in sweep if abs(f - floor) <= 0.1 + 1e-9 and
            round(f * 100) % 2 == 0]
    items = {p.item.id: p.item for p in pairs}
    return "\n".join(out + ["", new_topics(pairs, items, backend, floor)])


def new_topics(pairs: list[Pair], items: dict[str, MemoryItem], backend: str, floor: float) -> str:
    """How many of every item in the set pass rule M10 for the questions that none bears on."""
    questions = sorted({p.question for p in pairs} - {p.question for p in pairs if p.related})
    embedder = UseEmbedder() if backend == "use" else E5Embedder()
    q = embedder.embed_queries(questions)
    d = embedder.embed([i.text for i in items.values()])
    lines = [f"New-topic questions against all {len(items)} items (facts and episodes):", ""]
    for question, row in zip(questions, q @ d.T):
        old = sum(1 for c in row if c >= OLD_FLOOR)
        new = [i.id for i, c in zip(items.values(), row) if bears_on(question, i, float(c), floor)]
        lines.append(f"- {question}: old rule {old}, M10 {len(new)} {new or ''}")
    return "\n".join(lines)


def main() -> None:
    """Command line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="use", choices=("use", "e5"))
    args = ap.parse_args()
    print(report(load(args.backend), args.backend))
    print()
    print(keyword_report(args.backend))


if __name__ == "__main__":
    main()
