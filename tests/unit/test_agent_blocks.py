"""Agent building blocks in process: evidence pool, citation check, fallback answerer, delta writer."""

from __future__ import annotations

import asyncio

import pytest

from contracts.evidence import EvidenceItem
from services.orchestrator.agent import fallback
from services.orchestrator.agent.evidence import EvidencePool


def kb(chunk: str, doc: str = "d1", kind: str = "original", score: float = 0.8) -> EvidenceItem:
    return EvidenceItem(chunk_id=chunk, document_id=doc, kind=kind, title=f"《{doc}》", locator="第一条", score=score,
                        text=f"text of {chunk}")


def test_pool_numbers_in_order_dedupes_and_drops_summary_of_present_original():
    pool = EvidencePool([])
    ctx, new = pool.add([kb("a"), kb("b"), kb("a")])
    assert [i.index for i in ctx] == [1, 2] and len(new) == 2
    web = EvidenceItem(chunk_id="u#1", kind="web", title="page", url="https://x.test/p", text="t")
    ctx, new = pool.add([kb("b"), kb("s", kind="summary"), web, web.model_copy(), web.model_copy(update={"chunk_id": "u#2"})])
    assert [i.index for i in ctx] == [2, 3, 4]  # b keeps its number, summary of d1 dropped, same web chunk once
    assert [i.index for i in new] == [3, 4]


def test_citation_check_removes_unknown_numbers():
    pool = EvidencePool([])
    pool.add([kb("a"), kb("b")])
    answer, citations, removed = pool.check_citations("甲[1]，乙[2][7]。")
    assert answer == "甲[1]，乙[2]。" and removed == [7]
    assert [c.index for c in citations] == [1, 2]


def test_fallback_quotes_best_passages_with_citations():
    pool = EvidencePool([])
    pool.add([kb("a", score=0.4), kb("b", score=0.9)])
    text = fallback.compose("问题", pool.items, model_configured=False)
    assert text.startswith("（未配置语言模型") and "OPENAI_BASE_URL" in text
    assert text.index("[1]") < text.index("[2]")  # the retriever's ranking, not the dense score
    assert fallback.NOTHING_FOUND in fallback.compose("q", [], model_configured=True)


def test_best_excerpt_picks_the_relevant_sentence_of_a_long_text():
    long = "无关的句子。" * 200 + "征收率为百分之三。" + "其他内容。" * 200
    assert "征收率为百分之三" in fallback.best_excerpt(long, "征收率是多少", limit=100)


async def test_delta_writer_keeps_order_and_batches_while_an_append_is_in_flight() -> None:
    """DeltaWriter: the first delta goes out alone at once; text added meanwhile is joined; nothing lost."""
    from services.orchestrator.deltas import DeltaWriter

    appended: list[str] = []
    gate = asyncio.Event()

    async def emit(text: str) -> None:
        appended.append(text)
        if len(appended) == 1:
            await gate.wait()  # the first append is slow: the next deltas pile up

    writer = DeltaWriter(emit)
    await writer.add("a")
    for t in ("b", "c", "d"):
        await writer.add(t)
    gate.set()
    await writer.flush()
    assert appended == ["a", "bcd"]

    async def broken(text: str) -> None:
        raise RuntimeError("redis down")

    failing = DeltaWriter(broken)
    await failing.add("x")
    await failing.add("y")
    with pytest.raises(RuntimeError):
        await failing.flush()
