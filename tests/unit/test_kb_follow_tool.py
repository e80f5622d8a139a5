"""Rules K16, K17: law passages carry the articles they cite, and kb_follow fetches them from the store by id
(the shipped reference graph; a dict stands in for the store's payload lookup)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from contracts.evidence import EvidenceItem
from contracts.tools import KbFollowArgs
from conduit.runtime.toolservice import ToolFailure
from services.retriever import follow, refgraph
from services.retriever.lawindex import INDEX_DIR


@pytest.fixture(scope="module")
def graph() -> refgraph.RefGraph:
    return refgraph.RefGraph.load(INDEX_DIR / refgraph.FILE_NAME, check_corpus=False)


def _cited(graph):
    """An article of the shipped graph that cites another one: (its id, the first cited id)."""
    source = next(k for k, v in graph.edges.items() if v)
    return source, graph.edges[source][0]


def test_law_passages_carry_their_references(graph):
    source, target = _cited(graph)
    items = [EvidenceItem(chunk_id=graph.point_of(source), title="《x》", text="t", metadata={"law_id": "x"}),
             EvidenceItem(chunk_id="a-file-chunk", title="《doc》", text="t")]
    follow.attach_refs(graph, items)
    assert items[0].metadata["ref_id"] == source and items[0].refs[0].id == target
    assert items[0].refs[0].label == graph.label(target) and items[0].refs[0].label.startswith("《")
    assert items[1].refs == [] and "ref_id" not in items[1].metadata
    assert follow.attach_refs(None, items) is items  # no graph: unchanged


def _request():
    return SimpleNamespace(task_id="t1")


def test_kb_follow_returns_the_cited_articles_and_names_unknown_ids(graph):
    source, target = _cited(graph)
    point = graph.point_of(target)
    store = SimpleNamespace(payloads=lambda ids, keys: {point: {"text": "条文" * 10, "title": "《甲法》", "locator": "第一条",
                                                                "law_id": "x", "document_id": "law:x"}} if point in ids else {})
    searcher = SimpleNamespace(store=store, retrieval=SimpleNamespace(chunk_max_chars=2000))
    tool = follow.make_kb_follow_tool(searcher, graph)
    out = asyncio.run(tool(KbFollowArgs(ref_ids=[target, target], reason="r"), _request()))
    [item] = out.evidence
    assert item.chunk_id == point and item.metadata["followed"] and item.metadata["ref_id"] == target
    with pytest.raises(ToolFailure) as bad:
        asyncio.run(tool(KbFollowArgs(ref_ids=["nope:1"], reason="r"), _request()))
    assert bad.value.error.error_code == "kb_ref_unknown" and "nope:1" in bad.value.error.message
    with pytest.raises(ToolFailure) as missing:
        asyncio.run(tool(KbFollowArgs(ref_ids=[source], reason="r"), _request()))
    assert missing.value.error.error_code == "kb_ref_not_indexed"


def test_kb_follow_takes_at_most_five_ids():
    with pytest.raises(ValueError):
        KbFollowArgs(ref_ids=[f"x:{n}" for n in range(6)], reason="r")
    with pytest.raises(ValueError):
        KbFollowArgs(ref_ids=["  "], reason="r")
