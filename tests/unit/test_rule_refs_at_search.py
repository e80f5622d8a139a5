"""Rule K20 (issue 40, services/retriever/refsearch.py): the articles of the same law that the top passages cite join
the candidates, take their citer's first-stage score and their own e5 cosine (one already in the pool is lifted to that score); other laws' articles, passages below the
top, articles not in the store and a missing graph change nothing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.retriever.refsearch import MAX_ADDED, add_cited, cited
from services.retriever.store import Hit


@dataclass
class Ref:
    id: str
    label: str


class Graph:
    """The three calls of ``RefGraph`` the rule uses; point id = ``p`` + ref id."""

    def __init__(self, edges: dict[str, list[str]]) -> None:
        self.edges = edges

    def ref_of_point(self, point: str) -> str | None:
        return point[1:] if point.startswith("p") else None

    def point_of(self, ref_id: str) -> str | None:
        return "p" + ref_id

    def references(self, ref_id: str) -> list[Ref]:
        return [Ref(t, t) for t in self.edges.get(ref_id, [])]


class Store:
    def __init__(self, points: set[str]) -> None:
        self.points = points

    def payloads(self, ids, flt):
        return {i: {"law_id": i[1:].split(":")[0], "text": f"article {i}"} for i in ids if i in self.points}


class Stage2:
    def cosines(self, point_ids, queries, parent_ids=None, payloads=None):
        return [0.9 if p == "plaw:87" else 0.1 for p in point_ids]


def _hit(point: str, score: float) -> Hit:
    return Hit(point, score, {"law_id": point[1:].split(":")[0]}, 0.5, 0.4)


GRAPH = Graph({"law:48": ["law:87", "other:3"], "law:87": ["law:47"], "law:10": ["law:11"]})


def test_the_cited_article_of_a_top_passage_joins_with_its_citers_score_and_its_own_e5_cosine() -> None:
    ranked = [_hit("plaw:48", 0.03), _hit("plaw:5", 0.02)]
    merged = {h.id: h for h in ranked}
    n = add_cited(GRAPH, Store({"plaw:87", "pother:3"}), ranked, merged, 3, Stage2(), np.zeros((1, 4), np.float32))
    assert n == 1 and set(merged) == {"plaw:48", "plaw:5", "plaw:87"}  # not the other law's article: same law only
    added = merged["plaw:87"]
    assert (added.score, added.second, added.dense_score, added.payload["cited_by"]) == (0.03, 0.9, None, "plaw:48")


def test_one_hop_only_from_the_top_passages_and_what_is_missing_changes_nothing() -> None:
    ranked = [_hit("plaw:48", 0.03), _hit("plaw:9", 0.02), _hit("plaw:10", 0.01)]
    assert [r for r, _, _ in cited(GRAPH, ranked, 2)] == ["law:87"]  # not 87's own 47 (two hops), not 10's (rank 3)
    merged = {h.id: h for h in ranked}
    assert add_cited(GRAPH, Store(set()), ranked, merged, 2) == 0 and len(merged) == 3  # not in the store
    assert add_cited(None, Store({"plaw:87"}), ranked, merged, 2) == 0
    assert add_cited(GRAPH, Store({"plaw:87"}), ranked, merged, 0) == 0  # the setting at 0: off


def test_a_cited_article_already_in_the_pool_is_lifted_to_its_citers_score() -> None:
    ranked = [_hit("plaw:48", 0.03), _hit("plaw:87", 0.001)]
    merged = {h.id: h for h in ranked}
    assert add_cited(GRAPH, Store({"plaw:87"}), ranked, merged, 1) == 1
    assert (merged["plaw:87"].score, merged["plaw:87"].second) == (0.03, 0.4)  # its own e5 cosine kept


def test_at_most_max_added_articles_per_search() -> None:
    graph = Graph({"law:1": [f"law:{n}" for n in range(100, 120)]})
    assert len(cited(graph, [_hit("plaw:1", 0.03)], 3)) == MAX_ADDED
