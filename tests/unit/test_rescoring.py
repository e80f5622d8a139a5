"""Rule K7, the second stage of kb_search (services/retriever/rescoring.py), without a model: the fusion of
first-stage and e5 ranks, chunks without an e5 vector, the law boost, and the in-memory cosines."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from services.retriever.embeddings import Embedder
from services.retriever.lawindex import LawIndex, quantise
from services.retriever.rescoring import Fusion, SecondStage, fuse


def test_fusion_lifts_what_e5_prefers_and_leaves_unscored_chunks_at_their_rank() -> None:
    # first stage: a, b, c, d; e5 likes c best, has no vector for d
    scores = fuse([1, 2, 3, 4], [0.5, 0.6, 0.9, None], ["L", "L", "L", None], Fusion(w_e5=2.0, k=10, law_boost=0.0))
    order = sorted(range(4), key=lambda i: -scores[i])
    assert order[0] == 2 and order[-1] == 3
    # d (no vector) counts its first-stage rank twice: it beats nothing it did not beat before
    assert scores[3] == pytest.approx(1 / 14 + 2 / 14)
    # equal weights, e5 agreeing with the first stage: the order stays
    same = fuse([1, 2, 3], [0.9, 0.8, 0.7], [None] * 3, Fusion())
    assert same == sorted(same, reverse=True)


def test_law_boost_favours_the_law_the_best_candidates_agree_on() -> None:
    ranks, e5 = [1, 2, 3, 4], [0.80, 0.79, 0.78, 0.77]
    laws = ["劳动法", "劳动合同法", "劳动合同法", "劳动合同法"]
    plain = fuse(ranks, e5, laws, Fusion(law_boost=0.0))
    boosted = fuse(ranks, e5, laws, Fusion(law_boost=2.0, law_top=4))
    assert max(range(4), key=lambda i: plain[i]) == 0
    assert max(range(4), key=lambda i: boosted[i]) == 1


class _Fixed(Embedder):
    name = "fake-e5"

    def __init__(self, rows: dict[str, np.ndarray]) -> None:
        super().__init__()
        self.rows = rows

    @property
    def dim(self) -> int:
        return 4

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.rows[t] for t in texts])


def test_second_stage_cosines_from_the_index_with_the_article_standing_in_for_a_missing_item() -> None:
    ids = [str(uuid.uuid4()) for _ in range(3)]
    vectors = np.eye(4, dtype=np.float32)[:3]
    index = LawIndex(path=None, meta={"model": "fake-e5"},  # type: ignore[arg-type]
                     ids=np.frombuffer(b"".join(uuid.UUID(i).bytes for i in ids), np.uint8).reshape(-1, 16),
                     digests=np.zeros((3, 8), np.uint8), vectors=quantise(vectors, "int8"))
    stage = SecondStage(_Fixed({"q": np.array([0.0, 1.0, 0.0, 0.0])}), index)
    try:
        result = stage.start(["q", "q"], nearest=2).result()
        queries = result.vectors
        assert queries.shape == (1, 4)  # the same form twice is embedded once
        assert len(result.nearest) == 2 and result.nearest[0][0] == ids[1]  # found in the worker thread too
        assert stage.start(["q"]).result().nearest == []
        item = str(uuid.uuid4())
        got = stage.cosines([ids[0], ids[1], item, "00000000-0000-0000-0000-000000000000"], queries,
                            [None, None, ids[1], None])
        assert got[0] == pytest.approx(0.0) and got[1] == pytest.approx(1.0)
        assert got[2] == pytest.approx(1.0) and got[3] is None  # an item without a vector: its article's
        assert [pid for pid, _ in stage.nearest(queries, 2)][0] == ids[1]
    finally:
        stage.close()
    with pytest.raises(ValueError, match="index of"):
        SecondStage(_Fixed({}), LawIndex(None, {"model": "other"}, index.ids, index.digests, index.vectors))  # type: ignore[arg-type]


def test_a_tenant_chunk_is_scored_by_the_e5_vector_in_its_payload() -> None:
    from services.retriever.rescoring import E5_PAYLOAD, decode_vector, encode_vector  # noqa: PLC0415

    v = np.array([0.6, 0.8, 0.0, 0.0], dtype=np.float32)
    assert np.allclose(decode_vector(encode_vector(v)), v, atol=1e-3)
    index = LawIndex(None, {"model": "fake-e5"}, np.zeros((0, 16), np.uint8), np.zeros((0, 8), np.uint8),  # type: ignore[arg-type]
                     np.zeros((0, 4), np.int8))
    stage = SecondStage(_Fixed({}), index)
    try:
        got = stage.cosines([str(uuid.uuid4()), str(uuid.uuid4())], np.array([[0.0, 1.0, 0.0, 0.0]]), None,
                            [{E5_PAYLOAD: encode_vector(v)}, {}])
        assert got[0] == pytest.approx(0.8, abs=1e-3) and got[1] is None
    finally:
        stage.close()
