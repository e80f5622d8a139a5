"""Rule M15: memory index requests are embedded in batches, and not while a recall runs."""

from __future__ import annotations

import asyncio

from services.retriever.memorybatch import IndexBatcher


class Recording:
    """An index whose ``embed_many`` records each call and answers one result per request."""

    def __init__(self) -> None:
        self.calls: list[list[tuple]] = []

    def embed_many(self, requests: list[tuple]) -> list[tuple[list, list[str]]]:
        self.calls.append(list(requests))
        return [([], list(replaced)) for _, replaced, _ in requests]


def test_requests_that_come_together_are_embedded_in_one_call() -> None:
    async def run() -> None:
        index = Recording()
        b = IndexBatcher(index, delay_s=0.02)
        first, second = await asyncio.gather(b.submit([], ["a"], None), b.submit([], ["b"], None))
        assert (first, second) == (([], ["a"]), ([], ["b"]))
        assert len(index.calls) == 1 and b.batches == 1
        assert await b.submit([], ["c"], None) == ([], ["c"]) and len(index.calls) == 2  # a later one: its own batch

    asyncio.run(run())


def test_a_batch_waits_for_the_running_recall_but_not_forever() -> None:
    async def run() -> None:
        index = Recording()
        b = IndexBatcher(index, delay_s=0.01, max_wait_s=5.0)
        with b.recalling():
            waiting = asyncio.ensure_future(b.submit([], ["a"], None))
            await asyncio.sleep(0.05)
            assert not waiting.done() and index.calls == []  # the recall first
        assert await waiting == ([], ["a"])
        starved = IndexBatcher(index, delay_s=0.01, max_wait_s=0.05)
        with starved.recalling():  # a recall that never ends does not hold the writes back
            assert await asyncio.wait_for(starved.submit([], ["b"], None), 2.0) == ([], ["b"])

    asyncio.run(run())


def test_an_embedding_error_reaches_every_request_of_its_batch() -> None:
    class Failing(Recording):
        def embed_many(self, requests: list[tuple]) -> list[tuple[list, list[str]]]:
            raise RuntimeError("embedder down")

    async def run() -> None:
        b = IndexBatcher(Failing(), delay_s=0.01)
        got = await asyncio.gather(b.submit([], [], None), b.submit([], [], None), return_exceptions=True)
        assert all(isinstance(g, RuntimeError) for g in got)

    asyncio.run(run())


def test_the_recall_the_cache_lookup_and_a_search_of_the_same_text_embed_it_once(tmp_path) -> None:
    """Rule M14: one query embedding per text in the retriever: the recall searches memory and the cache
    with one vector, and the knowledge base's search of the same text (same embedder) reuses it."""
    import numpy as np

    from services.retriever.embeddings import Embedder
    from services.retriever.memory import MemoryIndex
    from services.retriever.store import EdgeVectorStore

    class Counting(Embedder):
        name = "counting"

        def __init__(self) -> None:
            super().__init__()
            self.queries: list[list[str]] = []

        @property
        def dim(self) -> int:
            return 4

        def _embed_batch(self, texts: list[str]) -> np.ndarray:
            return np.array([[len(t), 1.0, 0.0, 1.0] for t in texts], dtype=np.float32)

        def _embed_query_batch(self, texts: list[str]) -> np.ndarray:
            self.queries.append(list(texts))
            return self._embed_batch(texts)

    embedder = Counting()
    index = MemoryIndex(EdgeVectorStore(tmp_path / "mem", embedder.dim, 60), embedder)
    index.store.exact = True
    question = "小规模纳税人的征收率是多少？"
    index.search("t", "u", question, 20, with_memory=True, with_cache=True)
    assert embedder.queries == [[question]]
    embedder.embed_queries([question, question + " 增值税"])  # kb_search: the question and its expansion
    assert embedder.queries == [[question], [question + " 增值税"]]


def test_a_stored_item_is_parsed_once_per_value_and_the_parsed_ones_are_bounded(monkeypatch) -> None:
    """Issue 41: every recall and memory write reads all of a user's items; the same JSON value is parsed once
    (the same object comes back), a changed value is parsed again, and at most ``PARSED_MAX`` are kept."""
    from datetime import UTC, datetime

    from conduit.records import memory as records
    from contracts.memory import MemoryItem

    monkeypatch.setattr(records, "_parsed", type(records._parsed)())
    monkeypatch.setattr(records, "PARSED_MAX", 2)
    now = datetime(2026, 12, 7, tzinfo=UTC)

    def raw(n: int, text: str = "问：x\n答：y") -> bytes:
        return MemoryItem(id=f"i{n}", tenant_id="t", user_id="u", type="episode", text=text, source="observation",
                          task_id="task-1", importance=3, created_at=now,
                          last_used_at=now).model_dump_json().encode()

    first = records._parse(raw(1))
    assert records._parse(raw(1)) is first and first.id == "i1"
    changed = records._parse(raw(1, "问：x\n答：z"))
    assert changed is not first and changed.text.endswith("z")
    records._parse(raw(2))
    assert len(records._parsed) == 2 and records._parse(raw(1)) is not first  # the oldest value was let go
