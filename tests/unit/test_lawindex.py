"""The shipped law index (services/retriever/lawindex.py): file format, checks, and the shipped files
themselves against this install's corpus (issue 18).

The last tests are the CI guard: a corpus package version or chunking change without a rebuilt
file fails here with the build command in the message, and a random sample of the shipped
vectors is recomputed with the real embedder.
"""

from __future__ import annotations

import copy
import functools
import random
from pathlib import Path

import numpy as np
import pytest

from conduit.runtime.settings import Settings
from services.retriever import lawdb, lawindex
from services.retriever.documents import law_chunks
from services.retriever.ingest import law_index_for
from services.retriever.lawindex import BUILD_COMMAND, LawIndex, LawIndexError

VAT = "中华人民共和国增值税法"


@functools.cache
def _vat_chunks_once() -> tuple:
    (law,) = lawdb.list_laws(law_names=[VAT])  # a pass over the corpus's 23k articles: once per run
    return tuple(law_chunks(law, lawdb.articles_by_law([law])[law.law_id]))


def _vat_chunks() -> list:
    """The VAT law's chunks, each a copy (a test may change its own)."""
    return [copy.copy(c) for c in _vat_chunks_once()]


def _fake_embed(texts: list[str]) -> np.ndarray:
    """Deterministic unit rows from each text's hash (no model)."""
    rows = [np.random.default_rng(int.from_bytes(lawindex.text_digest(t), "big")).standard_normal(32) for t in texts]
    m = np.asarray(rows, dtype=np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_int8_and_float16_keep_directions() -> None:
    v = _fake_embed([f"t{i}" for i in range(200)])
    for dtype, floor in (("int8", 0.999), ("float16", 0.99999)):
        back = lawindex.dequantise(lawindex.quantise(v, dtype))
        assert back.dtype == np.float32 and np.allclose(np.linalg.norm(back, axis=1), 1.0, atol=1e-5)
        assert (back * v).sum(axis=1).min() >= floor, dtype
    assert lawindex.quantise(v, "int8").dtype == np.int8 and np.abs(lawindex.quantise(v, "int8")).max() == 127


def test_build_load_check_and_resume(tmp_path: Path) -> None:
    chunks = _vat_chunks()
    calls: list[int] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        return _fake_embed(texts)

    meta = lawindex.build(embed, "fake-model", out=tmp_path / "fake.npz", cache_dir=tmp_path / "cache", chunks=chunks, batch=16)
    assert meta["chunks"] == len(chunks) and meta["dim"] == 32 and meta["dtype"] == "int8"
    assert meta["corpus"] == lawindex.corpus_fingerprint() and sum(calls) == len({c.index_text for c in chunks})
    index = LawIndex.load(tmp_path / "fake.npz")
    index.check(chunks, "fake-model")
    got = index.vectors_for(chunks[:5])
    assert got.shape == (5, 32) and (got * _fake_embed([c.index_text for c in chunks[:5]])).sum(axis=1).min() > 0.999
    # a second build reads the float32 cache: nothing embedded again
    calls.clear()
    again = lawindex.build(embed, "fake-model", out=tmp_path / "fake.npz", cache_dir=tmp_path / "cache", chunks=chunks)
    assert calls == [] and again["embedded_now"] == 0 and again["sha256"] == meta["sha256"]


def test_stale_or_corrupt_files_fail_loudly_naming_the_build_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = _vat_chunks()
    lawindex.build(_fake_embed, "fake-model", out=tmp_path / "fake.npz", chunks=chunks)
    index = LawIndex.load(tmp_path / "fake.npz")
    changed = [*chunks[:3], type(chunks[3])(**{**chunks[3].__dict__, "index_text": chunks[3].index_text + "（修订）"})]
    with pytest.raises(LawIndexError, match="1 have other text") as err:
        index.check(changed)
    assert BUILD_COMMAND in str(err.value)
    with pytest.raises(LawIndexError, match="holds fake-model vectors"):
        index.check(chunks, "use-multilingual-v3")
    monkeypatch.setattr(lawindex, "corpus_fingerprint", lambda: {**index.meta["corpus"], "version": "0.2.0"})
    with pytest.raises(LawIndexError, match=r"version '0\.1\.1' -> '0\.2\.0'") as err:
        index.check(chunks)
    assert BUILD_COMMAND in str(err.value)
    raw = bytearray((tmp_path / "fake.npz").read_bytes())
    data = dict(np.load(tmp_path / "fake.npz"))
    data["vectors"] = data["vectors"].copy()
    data["vectors"][0, 0] ^= 1
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(LawIndexError, match="corrupt"):
        LawIndex.load(tmp_path / "bad.npz")
    (tmp_path / "pointer.npz").write_bytes(b"version https://git-lfs.github.com/spec/v1\n" + bytes(raw[:10]))
    with pytest.raises(LawIndexError, match="cannot read"):
        LawIndex.load(tmp_path / "pointer.npz")


def test_sparse_file_round_trips_and_names_its_encoder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from services.retriever.sparse import SparseEncoder  # noqa: PLC0415

    chunks = _vat_chunks()
    meta = lawindex.build_sparse(chunks, out=tmp_path / "sparse.npz")
    assert meta["model"] == lawindex.SPARSE_MODEL and meta["encoder"]["tokenizer"].startswith("jieba ")
    index = LawIndex.load(tmp_path / "sparse.npz")
    index.check(chunks, lawindex.SPARSE_MODEL)
    encoder = SparseEncoder()
    for got, chunk in zip(index.sparse_for(chunks[:8]), chunks[:8]):
        want = encoder.encode_document(chunk.index_text)
        assert got.indices == want.indices and np.allclose(got.values, want.values)
    monkeypatch.setattr(lawindex, "encoder_fingerprint", lambda: {**meta["encoder"], "k1": 2.0})
    with pytest.raises(LawIndexError, match="k1 1.2 -> 2.0") as err:
        index.check(chunks)
    assert BUILD_COMMAND in str(err.value)


def test_law_index_for_follows_the_setting_and_refuses_a_stale_file(tmp_path: Path) -> None:
    chunks = _vat_chunks()
    assert law_index_for(Settings(data_dir=tmp_path, law_index=False), "use-multilingual-v3", chunks) is None
    assert law_index_for(Settings(data_dir=tmp_path), "no-such-model", chunks) is None  # no file: embed
    lawindex.build(_fake_embed, "fake-model", out=lawindex.index_path("fake-model", tmp_path), chunks=chunks[1:])
    settings = Settings(data_dir=tmp_path, law_index_dir=str(tmp_path))
    assert law_index_for(settings, "fake-model", chunks[1:]) is not None
    with pytest.raises(LawIndexError, match="1 of .* chunks are not in it") as err:  # ingest stops before writing
        law_index_for(settings, "fake-model", chunks)
    assert BUILD_COMMAND in str(err.value) and "CONDUIT_LAW_INDEX=false" in str(err.value)


def test_index_build_leaves_a_current_file_alone(tmp_path: Path) -> None:
    from ops.indexcli import _current  # noqa: PLC0415

    chunks = _vat_chunks()
    assert not _current(lawindex, lawindex.SPARSE_MODEL, chunks, tmp_path)  # no file yet: build it
    lawindex.build_sparse(chunks, out=lawindex.index_path(lawindex.SPARSE_MODEL, tmp_path))
    assert _current(lawindex, lawindex.SPARSE_MODEL, chunks, tmp_path)
    changed = type(chunks[0])(**{**chunks[0].__dict__, "index_text": chunks[0].index_text + "（修订）"})
    assert not _current(lawindex, lawindex.SPARSE_MODEL, [changed, *chunks[1:]], tmp_path)  # stale: rebuild
