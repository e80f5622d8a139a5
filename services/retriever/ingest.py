"""Ingest sources into the vector store: the public law corpus and tenants' files.

Public entry points:
- ``ingest_law_db(settings, *, limit_laws=None, law_names=None, progress=True)``
- ``ingest_paths(settings, paths, tenant_id="default", progress=True)``
- ``corpus_ready(settings)``

Idempotence: point ids are deterministic (``documents.point_id``) and every point
stores a ``content_hash`` (embedder name + index text + payload). A batch first
reads the stored hashes and embeds only new or changed chunks, so re-ingesting an
unchanged source writes nothing and takes seconds; a new version's stale points are
deleted (every point of the document whose id is not in the new version: a moved split
or a changed article changes child/item ids). Embedding runs in batches of ``settings.retrieval.ingest_batch_size``.

Measured here (2 cores, USE, full corpus 23,490 articles): see docs/retrieval.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from conduit.runtime.settings import Settings
from services.retriever import lawdb, lawindex
from services.retriever.documents import (LAW_LAYOUT, SUPPORTED_SUFFIXES, Chunk, DocumentError, file_chunks, law_chunks,
                                          law_document_id)
from services.retriever.embeddings import Embedder, make_embedder
from services.retriever.rescoring import E5_PAYLOAD, encode_vector
from services.retriever.sparse import SparseEncoder
from services.retriever.store import PUBLIC_TENANT, ChunkPoint, VectorStore, edge_path, open_store

log = logging.getLogger("conduit.retriever.ingest")

CORPUS_MARKER = "kb-corpus.json"
"""File in ``settings.stack.data_dir`` written after a complete law-corpus ingest (read by ``corpus_ready``)."""


@dataclass
class FileFailure:
    """A file that was not ingested and why (``reason`` is human-readable)."""

    path: str
    reason: str


@dataclass
class IngestSummary:
    """What an ingest did.

    Fields: ``documents`` and ``chunks`` seen; ``embedded`` (new or changed chunks
    embedded and written), ``loaded`` (new or changed law chunks written with vectors from the
    shipped law index, ``lawindex``), ``unchanged`` (skipped: same content hash), ``removed`` (stale chunks
    deleted); ``failures`` (files not ingested); ``total_points`` in the store
    afterwards; ``seconds`` wall time, of which ``embed_seconds`` dense embedding,
    ``sparse_seconds`` tokenising, ``optimize_seconds`` the store's index build.
    """

    documents: int = 0
    chunks: int = 0
    embedded: int = 0
    loaded: int = 0
    unchanged: int = 0
    removed: int = 0
    failures: list[FileFailure] = field(default_factory=list)
    total_points: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0
    sparse_seconds: float = 0.0
    optimize_seconds: float = 0.0
    embedder: str = ""

    def render(self) -> str:
        """One-paragraph human summary (for the CLI)."""
        lines = [f"{self.documents} documents, {self.chunks} chunks: {self.embedded} embedded, "
                 f"{self.loaded} from the shipped index, "
                 f"{self.unchanged} unchanged, {self.removed} stale removed; "
                 f"{self.total_points} points in the store; {self.seconds:.1f} s "
                 f"(embed {self.embed_seconds:.1f} s, tokenise {self.sparse_seconds:.1f} s, "
                 f"index build {self.optimize_seconds:.1f} s)"]
        lines += [f"  FAILED {f.path}: {f.reason}" for f in self.failures]
        return "\n".join(lines)


def content_hash(embedder_name: str, chunk: Chunk) -> str:
    """SHA-1 of the embedder name, the index text and the payload (sorted JSON) without
    ``ingested_at`` (a re-ingest of unchanged content must change nothing)."""
    stable = {k: v for k, v in chunk.payload.items() if k != "ingested_at"}
    body = json.dumps(stable, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha1(f"{embedder_name}\n{chunk.index_text}\n{body}".encode("utf-8")).hexdigest()


class Indexer:
    """Writes documents' chunks to a store, embedding only what changed.

    Args:
        store, embedder, encoder: the open store and the encoders.
        batch_size: chunks per embedding/upsert batch.
        prebuilt: shipped law index whose vectors are used instead of embedding (every chunk
            given must be in it: ``LawIndex.check``); None embeds.
        prebuilt_sparse: the shipped sparse vectors (``sparse.npz``), used instead of tokenising; None encodes.
        second: the second stage's embedder (rule K7): documents' chunks also get its passage vector, stored
            in the payload (``rescoring.E5_PAYLOAD``), since only the law corpus has a shipped e5 index.
    """

    def __init__(self, store: VectorStore, embedder: Embedder, encoder: SparseEncoder | None = None,
                 batch_size: int = 128, prebuilt: lawindex.LawIndex | None = None,
                 prebuilt_sparse: lawindex.LawIndex | None = None, second: Embedder | None = None) -> None:
        self.store, self.embedder, self.second = store, embedder, second
        self.encoder = encoder or SparseEncoder()
        self.batch_size = batch_size
        self.prebuilt, self.prebuilt_sparse = prebuilt, prebuilt_sparse

    def _write_batch(self, batch: list[Chunk], summary: IngestSummary) -> None:
        name = self.embedder.name if self.second is None else f"{self.embedder.name}+{self.second.name}"
        hashes = [content_hash(name, c) for c in batch]
        stored = self.store.payloads([c.id for c in batch], ["content_hash"])
        todo = [(c, h) for c, h in zip(batch, hashes) if stored.get(c.id, {}).get("content_hash") != h]
        summary.unchanged += len(batch) - len(todo)
        if not todo:
            return
        t0 = time.perf_counter()
        if self.prebuilt is not None:
            dense = self.prebuilt.vectors_for([c for c, _ in todo])
        else:
            dense = self.embedder.embed([c.index_text for c, _ in todo])
        t1 = time.perf_counter()
        if self.prebuilt_sparse is not None:
            sparse = self.prebuilt_sparse.sparse_for([c for c, _ in todo])
        else:
            sparse = [self.encoder.encode_document(c.index_text) for c, _ in todo]
        summary.embed_seconds += t1 - t0
        summary.sparse_seconds += time.perf_counter() - t1
        extra: list[dict] = [{} for _ in todo]
        if self.second is not None and self.prebuilt is None:  # rule K7: the chunk's e5 vector rides in its payload
            extra = [{E5_PAYLOAD: encode_vector(v)} for v in self.second.embed([c.index_text for c, _ in todo])]
        self.store.upsert([
            ChunkPoint(c.id, dense[i], sparse[i], {**c.payload, **extra[i], "content_hash": h})
            for i, (c, h) in enumerate(todo)
        ])
        if self.prebuilt is not None:
            summary.loaded += len(todo)
        else:
            summary.embedded += len(todo)

    def index(self, documents: Iterable[tuple[str, list[Chunk]]], summary: IngestSummary,
              on_progress=None) -> IngestSummary:
        """Index ``(document_id, chunks)`` pairs into ``summary`` (updated in place and returned).

        ``on_progress(n)`` is called with the number of chunks just processed.
        """
        pending: list[Chunk] = []
        for document_id, chunks in documents:
            summary.documents += 1
            summary.chunks += len(chunks)
            if chunks:  # the new version's ids (child and item chunks move with the split): the rest is stale
                summary.removed += self.store.delete_by_document(document_id, keep_ids=[c.id for c in chunks])
            pending.extend(chunks)
            while len(pending) >= self.batch_size:
                batch, pending = pending[: self.batch_size], pending[self.batch_size :]
                self._write_batch(batch, summary)
                if on_progress:
                    on_progress(len(batch))
        if pending:
            self._write_batch(pending, summary)
            if on_progress:
                on_progress(len(pending))
        self.store.flush()
        return summary


def _run(settings: Settings, documents: list[tuple[str, list[Chunk]]], summary: IngestSummary, label: str,
         progress: bool, embedder: Embedder | None, store: VectorStore | None,
         prebuilt: lawindex.LawIndex | None = None, prebuilt_sparse: lawindex.LawIndex | None = None,
         second: Embedder | None = None) -> IngestSummary:
    """Index ``documents`` with a rich progress bar; opens (and closes) the store unless one is given."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn  # noqa: PLC0415

    started = time.perf_counter()
    embedder = embedder or make_embedder(settings)
    summary.embedder = embedder.name
    own_store = store is None
    store = store or open_store(settings, embedder.dim)
    try:
        indexer = Indexer(store, embedder, SparseEncoder(), batch_size=settings.retrieval.ingest_batch_size, prebuilt=prebuilt,
                          prebuilt_sparse=prebuilt_sparse, second=second)
        total = sum(len(chunks) for _, chunks in documents)
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("chunks"), TimeElapsedColumn(), TimeRemainingColumn(), disable=not progress) as bar:
            task = bar.add_task(label, total=total)
            indexer.index(documents, summary, on_progress=lambda n: bar.advance(task, n))
        if summary.embedded or summary.loaded:
            t0 = time.perf_counter()
            store.optimize()
            summary.optimize_seconds = time.perf_counter() - t0
        summary.total_points = store.count()
    finally:
        if own_store:
            store.close()
    summary.seconds = round(time.perf_counter() - started, 2)
    summary.embed_seconds = round(summary.embed_seconds, 2)
    summary.sparse_seconds = round(summary.sparse_seconds, 2)
    summary.optimize_seconds = round(summary.optimize_seconds, 2)
    log.info("ingest %s: %s", label, summary.render())
    return summary


def ingest_law_db(settings: Settings, *, limit_laws: int | None = None, law_names: list[str] | None = None,
                  progress: bool = True, embedder: Embedder | None = None,
                  store: VectorStore | None = None, items: bool = True) -> IngestSummary:
    """Ingest the current laws of ``laws.db`` as public chunks (one per article, plus item
    chunks of long articles, ``documents.law_chunks``).

    Args:
        limit_laws: only the first N current laws by name (None: all 352).
        law_names: only these laws (exact names; unknown names raise ``LawDbError``).
        progress: show a rich progress bar.
        embedder / store: reuse open ones (tests, benchmarks); default: built from settings
            and the store is closed afterwards.
        items: also write item chunks of long articles (default; False: articles only,
            and item chunks already stored are removed; benchmarks).

    Vectors come from the shipped law index of the embedder (``lawindex``, one file per model)
    when it exists and ``settings.retrieval.law_index`` is on; a file that does not match this corpus
    (package version, laws.db, chunking) raises ``LawIndexError`` naming the build command
    before anything is written. Without a file for the embedder (e.g. ``openai``) the chunks are embedded.

    A complete ingest (no limit, no name list) writes ``CORPUS_MARKER`` for ``corpus_ready``.
    Raises ``LawDbError``, ``LawIndexError``, ``StoreError`` or ``EmbeddingError``.
    """
    laws = lawdb.list_laws(law_names=law_names, limit_laws=limit_laws)
    articles = lawdb.articles_by_law(laws)
    documents = [(law_document_id(law), law_chunks(law, articles[law.law_id], items=items)) for law in laws]
    embedder = embedder or make_embedder(settings)
    every = [c for _, chunks in documents for c in chunks]
    prebuilt = law_index_for(settings, embedder.name, every)
    sparse = law_index_for(settings, lawindex.SPARSE_MODEL, every)
    summary = _run(settings, documents, IngestSummary(), "laws.db", progress, embedder, store, prebuilt, sparse)
    if limit_laws is None and law_names is None:
        marker = Path(settings.stack.data_dir) / CORPUS_MARKER
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({
            "laws": summary.documents, "chunks": summary.chunks, "embedder": summary.embedder,
            "layout": LAW_LAYOUT if items else "articles",
            "finished_at": datetime.now(UTC).isoformat(), "summary": asdict(summary),
        }, ensure_ascii=False, indent=2))
    return summary


def law_index_for(settings: Settings, embedder_name: str, chunks: list[Chunk]) -> lawindex.LawIndex | None:
    """The shipped law index for ``embedder_name`` (``lawindex.SPARSE_MODEL``: the sparse vectors), checked
    against ``chunks`` (None when ``settings.retrieval.law_index`` is off or no file exists for that model).
    Raises ``LawIndexError``."""
    if not settings.retrieval.law_index:
        return None
    index = lawindex.find(embedder_name, Path(settings.retrieval.law_index_dir) if settings.retrieval.law_index_dir else None)
    if index is None:
        log.info("no shipped law index for %s: the law chunks are embedded (%s)", embedder_name, lawindex.BUILD_COMMAND)
        return None
    index.check(chunks, embedder_name)
    return index


def expand_paths(paths: list[Path]) -> Iterator[Path]:
    """Files under ``paths`` (directories are walked recursively, sorted; only supported suffixes)."""
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES)
        else:
            yield path


def ingest_paths(settings: Settings, paths: list[Path], tenant_id: str = "default", progress: bool = True, *,
                 embedder: Embedder | None = None, store: VectorStore | None = None,
                 second: Embedder | None = None) -> IngestSummary:
    """Ingest text, Markdown, HTML and PDF files (directories recursively) for ``tenant_id``.

    ``second``: the second stage's embedder (rule K7; default: e5 when ``retrieval_second_stage`` is on),
    whose passage vectors go into the chunks' payloads.

    A file that cannot be read (missing, unsupported type, over 20 MiB, undecodable, empty)
    is listed in ``summary.failures`` with its reason; the others still go in.
    Raises ``StoreError`` / ``EmbeddingError`` only for store or model failures.
    """
    summary = IngestSummary()
    documents: list[tuple[str, list[Chunk]]] = []
    for path in expand_paths([Path(p) for p in paths]):
        try:
            if not path.is_file():
                raise DocumentError("no such file")
            chunks = file_chunks(path, tenant_id)
        except DocumentError as exc:
            summary.failures.append(FileFailure(str(path), str(exc)))
            continue
        except OSError as exc:
            summary.failures.append(FileFailure(str(path), f"{type(exc).__name__}: {exc}"))
            continue
        documents.append((chunks[0].document_id, chunks))
    if not documents:
        return summary
    if second is None and settings.retrieval.retrieval_second_stage:
        from services.retriever.embeddings import E5Embedder  # noqa: PLC0415

        second = E5Embedder(threads=settings.retrieval.embedding_threads)
    return _run(settings, documents, summary, "files", progress, embedder, store, second=second)


def corpus_ready(settings: Settings) -> bool:
    """True when the full law corpus has been ingested into the configured store.

    Embedded Edge: the marker file from a complete ``ingest_law_db`` with the current chunk
    layout (``LAW_LAYOUT``) exists and the shard is there (no need to open it, so this works
    while the retriever runs). Qdrant server: the public chunk count reaches the number of
    current articles.
    """
    if not settings.retrieval.qdrant_url:
        marker = Path(settings.stack.data_dir) / CORPUS_MARKER
        if not (marker.is_file() and (edge_path(settings) / "edge_config.json").is_file()):
            return False
        try:
            return json.loads(marker.read_text()).get("layout") == LAW_LAYOUT
        except (OSError, ValueError):
            return False
    from qdrant_client import QdrantClient, models  # noqa: PLC0415

    try:
        expected = lawdb.count_current_articles()
        client = QdrantClient(url=settings.retrieval.qdrant_url, api_key=settings.retrieval.qdrant_api_key)
        try:
            if not client.collection_exists(settings.retrieval.qdrant_collection):
                return False
            public = models.Filter(must=[models.FieldCondition(key="tenant_id", match=models.MatchValue(value=PUBLIC_TENANT))])
            return client.count(settings.retrieval.qdrant_collection, count_filter=public, exact=True).count >= expected
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - readiness is a yes/no question
        log.warning("corpus_ready: %s: %s", type(exc).__name__, exc)
        return False
