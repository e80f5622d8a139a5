"""The labelled law questions of bench/retrieval (issue 18): every label names a current article of
laws.db, ids are unique, and the tuning and held-out sets do not share a question."""

from __future__ import annotations

import json
from pathlib import Path

from services.retriever import lawdb

BENCH = Path(__file__).resolve().parents[2] / "bench" / "retrieval"


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (BENCH / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def test_every_label_is_a_current_article_and_the_sets_are_disjoint() -> None:
    tune, held = _rows("laws.jsonl"), _rows("laws_heldout.jsonl")
    assert len(tune) + len(held) >= 200 and len(held) >= 100
    laws = lawdb.list_laws()
    articles = lawdb.articles_by_law(laws)
    by_name = {law.law_name: {a.article_no for a in articles[law.law_id]} for law in laws}
    missing = [r["id"] for r in tune + held if r["article_no"] not in by_name.get(r["law_name"], set())]
    assert missing == []
    ids = [r["id"] for r in tune + held]
    assert len(ids) == len(set(ids))
    assert not {r["question"] for r in tune} & {r["question"] for r in held}
    assert len({r["law_name"] for r in held}) >= 7
