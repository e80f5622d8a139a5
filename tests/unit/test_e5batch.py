"""Rule K21: concurrent searches' e5 query work runs as one batch (services/retriever/e5batch.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from services.retriever.e5batch import QueryBatcher

MATRIX = np.eye(4, dtype=np.float32)  # four "law chunks", chunk i is the unit vector e_i
IDS = ["a", "b", "c", "d"]


def vector(text: str) -> np.ndarray:
    """A text's stand-in embedding: the unit vector of its first letter's chunk."""
    return MATRIX["abcd".index(text[0])]


class Engine:
    """A stand-in e5 engine: records each call's texts; the first call can be held open."""

    def __init__(self, hold: bool = False, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.entered, self.release = threading.Event(), threading.Event()
        self.hold, self.fail = hold, fail
        if not hold:
            self.release.set()

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        self.entered.set()
        self.release.wait(5)
        if self.fail:
            raise RuntimeError("engine down")
        return np.stack([vector(t) for t in texts])


def batcher(engine: Engine, max_texts: int = 32) -> QueryBatcher:
    def pick(scores: np.ndarray, n: int) -> list[tuple[str, float]]:
        top = np.argsort(-scores)[:n]
        return [(IDS[i], float(scores[i])) for i in top]

    return QueryBatcher(engine, lambda rows: MATRIX @ rows.T, pick, max_texts=max_texts)


def test_requests_waiting_during_a_batch_share_the_next_engine_call() -> None:
    engine = Engine(hold=True)
    b = batcher(engine)
    first = b.submit(["a1"], 1)
    assert engine.entered.wait(5)
    waiting = [b.submit(["b1", "c1"], 1), b.submit(["c2"], 0), b.submit(["b1", "d1"], 2)]
    engine.release.set()
    vectors, nearest = first.result(5)
    assert nearest == [("a", 1.0)] and vectors.shape == (1, 4)
    results = [f.result(5) for f in waiting]
    assert engine.calls == [["a1"], ["b1", "c1", "c2", "d1"]]  # one call for the three, b1 once
    assert [r[1] for r in results] == [[("b", 1.0)], [], [("b", 1.0), ("d", 1.0)]]
    assert np.array_equal(results[0][0], np.stack([vector("b1"), vector("c1")]))
    assert b.batches == 2 and b.largest == 3


def test_a_batch_holds_at_most_max_texts_distinct_texts() -> None:
    engine = Engine(hold=True)
    b = batcher(engine, max_texts=2)
    b.submit(["a1"])
    assert engine.entered.wait(5)
    futures = [b.submit(["b1"]), b.submit(["c1"]), b.submit(["d1"])]
    engine.release.set()
    for f in futures:
        f.result(5)
    assert engine.calls == [["a1"], ["b1", "c1"], ["d1"]]


def test_an_engine_failure_reaches_every_search_of_its_batch_and_the_next_batch_runs() -> None:
    engine = Engine(fail=True)
    b = batcher(engine)
    with pytest.raises(RuntimeError, match="engine down"):
        b.submit(["a1"], 1).result(5)
    engine.fail = False
    assert b.submit(["b1"], 1).result(5)[1] == [("b", 1.0)]


def test_close_serves_what_was_queued_then_stops() -> None:
    engine = Engine(hold=True)
    b = batcher(engine)
    first = b.submit(["a1"])
    assert engine.entered.wait(5)
    queued = b.submit(["b1"])
    b.close()
    engine.release.set()
    assert first.result(5)[0].shape == (1, 4) and queued.result(5)[0].shape == (1, 4)


def test_rule_k27_a_batch_of_queries_runs_on_the_batch_threads_and_a_single_query_on_one() -> None:
    from services.retriever.embeddings import BATCH_THREADS_FROM, E5Embedder  # noqa: PLC0415 - loads the engine

    embedder = E5Embedder(threads=1, batch_threads=2)
    assert embedder._openmp, "threadpoolctl finds the engine's OpenMP runtime"
    seen: list[int] = []

    def worker() -> None:  # the count is per thread: read it on the thread that called the engine
        for n in (BATCH_THREADS_FROM, 1, BATCH_THREADS_FROM - 1):
            vectors = embedder.embed_queries([f"第{n}-{i}号问题：小规模纳税人的征收率" for i in range(n)])
            assert vectors.shape == (n, embedder.dim)
            seen.append(embedder._openmp[0].num_threads)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [2, 1, 1]
