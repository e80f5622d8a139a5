"""The retriever over real parts: USE embeddings, a real Qdrant Edge shard in a temp dir
(qdrant-client local mode for the server adapter), real laws from laws.db, and the
real tansu broker + Redis for the bus test (the retriever runs as its own process).

A subset of laws is ingested once per module (~300 articles, a few seconds);
tests that write get their own copy of the shard.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import ValidationError
from aiokafka import AIOKafkaConsumer

from conduit.runtime import bus
from conduit.runtime.liveness import alive_key
from ops.services import ServiceProcess, settings_env
from conduit.runtime.settings import Settings
from conduit.runtime.toolservice import ToolFailure
from contracts import topics
from contracts.events import ToolRequested, ToolRequestPayload, ToolResult
from contracts.tools import KbSearchArgs
from services.retriever.documents import law_chunks, law_document_id
from services.retriever.embeddings import UseEmbedder
from services.retriever.ingest import CORPUS_MARKER, LAW_LAYOUT, corpus_ready, ingest_law_db, ingest_paths
from services.retriever.lawdb import articles_by_law, list_laws
from services.retriever.main import make_kb_search_tool
from services.retriever.pipeline import KbSearcher
from services.retriever.store import ClientVectorStore, EdgeVectorStore, SearchFilter, StoreError, open_store

SAMPLE = "小规模纳税人适用简易计税方法的征收率是多少？"
VAT = "中华人民共和国增值税法"
LAWS = [
    VAT,
    "中华人民共和国个人所得税法",
    "中华人民共和国企业所得税法",
    "中华人民共和国税收征收管理法",
    "中华人民共和国契税法",
    "中华人民共和国印花税法",
    "中华人民共和国车船税法",
    "中华人民共和国资源税法",
    "中华人民共和国城市维护建设税法",
]
VAT_DOC = "law:4d2fd00174f8"


@pytest.fixture(scope="module")
def embedder() -> UseEmbedder:
    return UseEmbedder()


@pytest.fixture(scope="module")
def law_kb(tmp_path_factory: pytest.TempPathFactory, embedder: UseEmbedder) -> Path:
    """Data dir with the LAWS subset ingested into a closed Edge shard."""
    root = tmp_path_factory.mktemp("kb")
    summary = ingest_law_db(Settings(data_dir=root), law_names=LAWS, progress=False, embedder=embedder)
    # the law chunks' vectors come from the shipped law index (services/retriever/law_index), none is embedded
    assert summary.documents == len(LAWS) and summary.loaded == summary.chunks == summary.total_points
    assert summary.embedded == 0
    return root


@dataclass
class KB:
    settings: Settings
    store: EdgeVectorStore
    searcher: KbSearcher


@pytest.fixture
def kb(law_kb: Path, tmp_path: Path, embedder: UseEmbedder) -> Iterator[KB]:
    """A private writable copy of the subset shard, opened."""
    data = tmp_path / "kb"
    shutil.copytree(law_kb, data)
    settings = Settings(data_dir=data)
    store = open_store(settings, embedder.dim)
    assert isinstance(store, EdgeVectorStore)
    yield KB(settings, store, KbSearcher(settings.retrieval, embedder, store))
    store.close()


def _located(evidence) -> list[tuple[str, str | None]]:
    return [(e.title, e.locator) for e in evidence]


def test_sample_question_finds_vat_article_11_first(kb: KB) -> None:
    outcome = kb.searcher.search(SAMPLE, "default")
    first = outcome.evidence[0]
    assert (first.title, first.locator) == (f"《{VAT}》", "第十一条")
    assert first.text == "适用简易计税方法计算缴纳增值税的征收率为百分之三。"
    assert first.kind == "original" and first.document_id == VAT_DOC
    assert first.score is not None and first.score >= 0.5  # dense cosine, not the RRF score
    assert first.metadata["law_name"] == VAT and first.metadata["chapter"] == "第二章 税率"
    assert first.metadata["status"] == "现行有效" and first.metadata["version_date"] == "2024-12-25"
    # RRF sums stay tiny: three branches (question and expansion dense, or the question's twice; sparse)
    # of at most 1/60 each (Qdrant: 1/(position + k), position from 0)
    assert first.metadata["fused_score"] <= 3 / 60 + 1e-6
    s = kb.settings.retrieval
    assert len(outcome.evidence) <= s.retrieval_top_k
    assert all(e.score is None or e.score >= s.retrieval_min_score for e in outcome.evidence)
    assert not outcome.retried  # best cosine >= 0.5: no compressed retry
    assert len({e.chunk_id for e in outcome.evidence}) == len(outcome.evidence)


def test_compressed_retry_fires_when_best_score_is_low(kb: KB) -> None:
    query = "请问一下，发票丢了的话到底应该怎么办呢？？"
    outcome = kb.searcher.search(query, "default")
    original, compressed = outcome.attempts[0], outcome.attempts[1]
    assert original.kind == "original" and original.best is not None and original.best < 0.5
    assert compressed.kind == "compressed" and compressed.query == "发票丢应该"
    assert outcome.retried and outcome.evidence
    # merged by chunk id, keeping the higher dense score of the two rounds
    assert max(e.score for e in outcome.evidence) >= max(original.best, compressed.best or 0) - 1e-4


def test_multi_topic_query_searches_a_missing_topic(kb: KB) -> None:
    # expansion off: the first round sees only the colloquial 个税 (with it on, 个人所得税 is searched at once)
    kb.searcher.retrieval = kb.settings.retrieval.model_copy(update={"retrieval_query_expansion": False})
    outcome = kb.searcher.search("发票和个税", "default")
    topic_rounds = [a for a in outcome.attempts if a.kind.startswith("topic:")]
    assert [(a.kind, a.query) for a in topic_rounds] == [("topic:个人所得税", "个人所得税")]
    laws = {e.metadata.get("law_name") for e in outcome.evidence}
    assert "中华人民共和国个人所得税法" in laws and "中华人民共和国增值税法" in laws


def test_reingest_is_idempotent(kb: KB, embedder: UseEmbedder) -> None:
    before = kb.store.count()
    ids_before = {h.id for h in kb.searcher.store.dense_query(embedder.embed_query(SAMPLE), limit=20)}
    summary = ingest_law_db(kb.settings, law_names=LAWS, progress=False, embedder=embedder, store=kb.store)
    assert summary.embedded == 0 and summary.removed == 0
    assert summary.unchanged == summary.chunks == before
    assert kb.store.count() == before
    assert {h.id for h in kb.searcher.store.dense_query(embedder.embed_query(SAMPLE), limit=20)} == ids_before


def test_item_chunks_can_be_dropped_and_restored_by_reingest(kb: KB, embedder: UseEmbedder) -> None:
    articles = {law.law_id: articles_by_law([law])[law.law_id] for law in list_laws(law_names=LAWS)}
    n_articles = sum(len(a) for a in articles.values())
    n_items = kb.store.count() - n_articles
    assert n_items > 0
    plain = ingest_law_db(kb.settings, law_names=LAWS, progress=False, embedder=embedder, store=kb.store, items=False)
    assert plain.removed == n_items and plain.embedded == 0 and kb.store.count() == n_articles
    back = ingest_law_db(kb.settings, law_names=LAWS, progress=False, embedder=embedder, store=kb.store)
    assert back.loaded == n_items and back.removed == 0 and kb.store.count() == n_articles + n_items


def test_dense_scores_are_the_best_cosine_to_each_query_vector(kb: KB, embedder: UseEmbedder) -> None:
    question = "国债利息要交个税吗？"
    vectors = embedder.embed_queries([question, question + " 个人所得税"])
    flt = SearchFilter.for_tenant("default")
    hits = kb.store.hybrid_query(vectors, kb.searcher.encoder.encode_query(question), flt, limit=12)
    kb.store.exact = True
    try:  # exact cosines of every chunk, per query vector
        exact = [{h.id: h.score for h in kb.store.dense_query(v, flt, limit=kb.store.count())} for v in vectors]
    finally:
        kb.store.exact = False
    for h in hits:
        assert h.dense_score == pytest.approx(max(e[h.id] for e in exact), abs=1e-5)


def test_delete_by_document(kb: KB) -> None:
    before = kb.store.count()
    vat_chunks = kb.store.count(SearchFilter(document_ids=(VAT_DOC,)))
    (vat,) = list_laws(law_names=[VAT])
    assert vat_chunks == len(law_chunks(vat, articles_by_law([vat])[vat.law_id])) > 38  # 38 articles + item chunks
    assert kb.store.delete_by_document(VAT_DOC) == vat_chunks
    assert kb.store.count() == before - vat_chunks
    assert all(e.document_id != VAT_DOC for e in kb.searcher.search(SAMPLE, "default").evidence)
    assert kb.store.delete_by_document(VAT_DOC) == 0


def test_tenant_isolation_and_file_ingest(kb: KB, embedder: UseEmbedder, tmp_path: Path) -> None:
    doc = tmp_path / "acme-policy.md"
    doc.write_text("# 艾克米公司差旅报销制度\n\n员工出差的住宿费每晚不超过六百元，须凭酒店发票在三十日内报销。\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    (tmp_path / "slides.pptx").write_bytes(b"PK\x03\x04")
    (tmp_path / "broken.pdf").write_bytes(b"not a pdf")
    summary = ingest_paths(kb.settings, [doc, tmp_path / "empty.txt", tmp_path / "slides.pptx", tmp_path / "broken.pdf",
                                         tmp_path / "missing.md"],
                           tenant_id="tenant-a", progress=False, embedder=embedder, store=kb.store)
    reasons = {Path(f.path).name: f.reason for f in summary.failures}
    assert set(reasons) == {"empty.txt", "slides.pptx", "broken.pdf", "missing.md"}
    assert reasons["empty.txt"] == "no text" and "unsupported" in reasons["slides.pptx"]
    assert "unreadable PDF" in reasons["broken.pdf"] and reasons["missing.md"] == "no such file"
    assert summary.documents == 1 and summary.embedded == 1

    question = "出差住宿费报销标准是多少"
    mine = kb.searcher.search(question, "tenant-a").evidence
    assert mine[0].title == "《艾克米公司差旅报销制度》" and mine[0].metadata["source"] == "file"
    assert all(e.title != "《艾克米公司差旅报销制度》" for e in kb.searcher.search(question, "tenant-b").evidence)
    # the public corpus stays visible to every tenant
    assert kb.searcher.search(SAMPLE, "tenant-b").evidence[0].locator == "第十一条"
    assert kb.searcher.search(SAMPLE, "tenant-a").evidence[0].locator == "第十一条"
    # re-ingesting the same file changes nothing
    again = ingest_paths(kb.settings, [doc], tenant_id="tenant-a", progress=False, embedder=embedder, store=kb.store)
    assert again.embedded == 0 and again.unchanged == 1


async def test_sub_queries_are_searched_with_the_query_and_a_sloppy_rewrite_is_trimmed(kb: KB) -> None:
    """Rule K9: the model's sub-queries (at most 2; blanks, repeats and the query itself dropped) are rounds of
    their own, merged into one evidence list."""
    args = KbSearchArgs(query="个税和契税", sub_queries=["个人所得税 税率", " ", "个税和契税", "契税 税率", "车船税"], reason="r")
    assert args.sub_queries == ["个人所得税 税率", "个税和契税"]  # the first two kept, trimmed; never refused
    outcome = kb.searcher.search("个税和契税", "default", sub_queries=["个人所得税 税率", "个税和契税", "契税 税率"])
    subs = [(a.kind, a.query) for a in outcome.attempts if a.kind.startswith("sub:")]
    assert subs == [("sub:1", "个人所得税 税率"), ("sub:2", "契税 税率")]
    laws = {e.metadata.get("law_name") for e in outcome.evidence}
    assert {"中华人民共和国个人所得税法", "中华人民共和国契税法"} <= laws
    tool = make_kb_search_tool(kb.searcher)
    request = ToolRequested(task_id="t2", session_id="s2", payload=ToolRequestPayload(
        call_id="c2", tool="kb_search", arguments={}, step=1, idempotency_key="t2:1:c2"))
    out = await tool(KbSearchArgs(query="契税", sub_queries=["个人所得税 税率"], reason="r"), request)
    assert "中华人民共和国个人所得税法" in {e.metadata.get("law_name") for e in out.evidence}


def test_dense_and_sparse_queries_for_benchmarks(kb: KB, embedder: UseEmbedder) -> None:
    dense = kb.store.dense_query(embedder.embed_query(SAMPLE), SearchFilter.for_tenant("default"), limit=5)
    assert all(abs(h.score - h.dense_score) < 1e-4 for h in dense)
    assert dense == sorted(dense, key=lambda h: -h.score)
    sparse = kb.store.sparse_query(kb.searcher.encoder.encode_query(SAMPLE), limit=5)
    assert sparse and sparse[0].dense_score is None
    assert any(h.payload["article_no"] == "第十一条" and h.payload["law_name"] == VAT for h in sparse)


async def test_kb_search_tool_errors(kb: KB) -> None:
    tool = make_kb_search_tool(kb.searcher)
    request = ToolRequested(task_id="t1", session_id="s1", payload=ToolRequestPayload(
        call_id="c1", tool="kb_search", arguments={}, step=1, idempotency_key="t1:1:c1"))
    out = await tool(KbSearchArgs(query=SAMPLE, reason="r"), request)
    assert out.evidence[0].locator == "第十一条"
    kb.searcher.retrieval = kb.settings.retrieval.model_copy(update={"retrieval_min_score": 0.99})
    with pytest.raises(ToolFailure) as failure:
        await tool(KbSearchArgs(query=SAMPLE, reason="r"), request)
    assert failure.value.error.error_code == "kb_no_results" and failure.value.error.kind == "business"


def test_store_errors_are_clear(kb: KB, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="another process has it open"):
        EdgeVectorStore(kb.store.path, 512, 60)
    kb.store.close()
    with pytest.raises(StoreError, match="another embedding"):
        EdgeVectorStore(kb.store.path, 384, 60)


def test_corpus_ready_only_after_a_complete_ingest(kb: KB, tmp_path: Path) -> None:
    assert not corpus_ready(kb.settings)  # a subset does not count
    assert not corpus_ready(Settings(data_dir=tmp_path / "nothing"))
    marker = Path(kb.settings.stack.data_dir) / CORPUS_MARKER
    marker.write_text(json.dumps({"laws": 352, "chunks": 23490, "embedder": "use-multilingual-v3"}))
    assert not corpus_ready(kb.settings)  # an older store without item chunks: ingest again (adds only the items)
    marker.write_text(json.dumps({"laws": 352, "chunks": 38795, "layout": LAW_LAYOUT}))
    assert corpus_ready(kb.settings)


def test_qdrant_client_local_mode_adapter(embedder: UseEmbedder) -> None:
    """The server adapter (qdrant-client) behaves like Edge: RRF k=60, dense cosine, deletes, tenants."""
    settings = Settings(data_dir=Path("/nonexistent"))
    store = ClientVectorStore("conduit-test", embedder.dim, settings.retrieval.rrf_k, location=":memory:")
    try:
        laws = [VAT, "中华人民共和国个人所得税法"]
        vat, pit = list_laws(law_names=laws)  # ordered by name: 个人所得税法 first
        pit, vat = (pit, vat) if vat.law_name == VAT else (vat, pit)
        n_vat, n_pit = (len(law_chunks(law, articles_by_law([law])[law.law_id])) for law in (vat, pit))
        assert n_vat > 38 and n_pit > 22  # articles + item chunks of the long ones
        summary = ingest_law_db(settings, law_names=laws, progress=False, embedder=embedder, store=store)
        assert store.count() == summary.chunks == n_vat + n_pit
        again = ingest_law_db(settings, law_names=laws, progress=False, embedder=embedder, store=store)
        assert again.embedded == 0 and store.count() == n_vat + n_pit
        searcher = KbSearcher(settings.retrieval, embedder, store)
        evidence = searcher.search(SAMPLE, "default").evidence
        assert (evidence[0].title, evidence[0].locator) == (f"《{VAT}》", "第十一条") and evidence[0].score >= 0.5
        # item chunks' hits come back as their article, once, as on Edge
        exempt = searcher.search("国债利息免征个人所得税吗？", "default").evidence
        assert exempt[0].locator == "第四条" and exempt[0].text.startswith("下列各项个人所得，免征个人所得税：")
        assert [e.locator for e in exempt].count("第四条") == 1 and len({e.chunk_id for e in exempt}) == len(exempt)
        assert store.count(SearchFilter.for_tenant("x")) == n_vat + n_pit
        assert store.count(SearchFilter(tenant_ids=("x",))) == 0
        assert store.delete_by_document(law_document_id(pit)) == n_pit and store.count() == n_vat
    finally:
        store.close()


# ---------------------------------------------------------------- over the bus, as a process
async def _wait_alive(redis, pid: int, proc: ServiceProcess, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await redis.exists(alive_key("retriever", pid)):
            return
        assert proc.running, proc.log_path.read_text()[-3000:]
        await asyncio.sleep(0.2)
    raise AssertionError("retriever did not come up:\n" + proc.log_path.read_text()[-3000:])


class ResultReader:
    """Reads ``ToolResult``s of one task from ``conduit.tools.results``, buffering extras."""

    def __init__(self, consumer: AIOKafkaConsumer, task_id: str) -> None:
        self.consumer, self.task_id, self.buffer = consumer, task_id, []

    async def next(self, timeout_s: float = 30.0) -> ToolResult:
        deadline = time.monotonic() + timeout_s
        while not self.buffer and time.monotonic() < deadline:
            batches = await self.consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for record in records:
                    try:  # the topic is shared: other tests publish malformed records on purpose
                        event = ToolResult.model_validate_json(record.value)
                    except ValidationError:
                        continue
                    if isinstance(event, ToolResult) and event.task_id == self.task_id:
                        self.buffer.append(event)
        if not self.buffer:
            raise AssertionError(f"no ToolResult for {self.task_id} within {timeout_s} s")
        return self.buffer.pop(0)


CONCURRENT_QUERIES = [SAMPLE, "发票和个税", "资源税怎么算", "城市维护建设税的税率", "增值税的纳税义务发生时间",
                      "车船税谁来交", "印花税的计税依据", "契税的税率是多少"]


async def _concurrent_searches_match_sequential(broker, consumer: AIOKafkaConsumer) -> None:
    """Rule T7: the retriever (retriever_concurrency 4) answers searches sent all at once exactly as one by one."""

    def request(query: str, task_id: str) -> ToolRequested:
        call = f"call-{uuid.uuid4().hex[:8]}"
        return ToolRequested(task_id=task_id, session_id="sess-1", tenant_id="default", payload=ToolRequestPayload(
            call_id=call, tool="kb_search", arguments={"query": query, "reason": "并发检查"}, step=1,
            idempotency_key=f"{task_id}:1:{call}"))

    alone: dict[str, list] = {}
    for query in CONCURRENT_QUERIES:
        task_id = f"seq-{uuid.uuid4().hex[:8]}"
        await bus.publish(broker, topics.TOOL_REQUESTS_KB, request(query, task_id))
        alone[query] = _located((await ResultReader(consumer, task_id).next(60)).payload.evidence)
    task_ids = {f"par-{uuid.uuid4().hex[:8]}": q for q in CONCURRENT_QUERIES}
    await asyncio.gather(*(bus.publish(broker, topics.TOOL_REQUESTS_KB, request(q, t)) for t, q in task_ids.items()))
    together = await _collect(consumer, set(task_ids))
    assert {task_ids[t]: _located(r.payload.evidence) for t, r in together.items()} == alone


async def _collect(consumer: AIOKafkaConsumer, task_ids: set[str], timeout_s: float = 90.0) -> dict[str, ToolResult]:
    """The first ``ToolResult`` of each of ``task_ids`` read from ``consumer``."""
    got: dict[str, ToolResult] = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < len(task_ids) and time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=200)).values():
            for record in records:
                with contextlib.suppress(ValidationError):
                    event = ToolResult.model_validate_json(record.value)
                    if event.task_id in task_ids:
                        got.setdefault(event.task_id, event)
    assert len(got) == len(task_ids), f"results for {len(got)} of {len(task_ids)} searches within {timeout_s} s"
    return got


async def test_kb_search_over_the_bus_with_idempotency(law_kb: Path, settings: Settings, redis, infra_stack,
                                                       tmp_path: Path) -> None:
    shutil.copytree(law_kb, settings.stack.data_dir)
    proc = ServiceProcess("retriever", settings_env(infra_stack.bootstrap, infra_stack.redis_url, settings.stack.data_dir),
                          tmp_path / "logs").start()
    broker = bus.make_broker(settings, client_id="test-retriever")
    consumer = AIOKafkaConsumer(topics.TOOL_RESULTS, bootstrap_servers=infra_stack.bootstrap,
                                auto_offset_reset="earliest", fetch_max_wait_ms=10, enable_auto_commit=False)
    try:
        await _wait_alive(redis, proc.proc.pid, proc)
        await broker.start()
        await consumer.start()
        task_id = f"task-{uuid.uuid4().hex}"
        key = f"{task_id}:1:call-1"
        results = ResultReader(consumer, task_id)

        def request() -> ToolRequested:
            return ToolRequested(task_id=task_id, session_id="sess-1", tenant_id="default", payload=ToolRequestPayload(
                call_id="call-1", tool="kb_search", arguments={"query": SAMPLE, "reason": "查征收率"},
                step=1, idempotency_key=key))

        first_request = request()
        await bus.publish(broker, topics.TOOL_REQUESTS_KB, first_request)
        first = await results.next()
        p = first.payload
        assert p.outcome == "ok" and p.call_id == "call-1" and p.idempotency_key == key
        assert first.causation_id == first_request.event_id
        assert (p.evidence[0].title, p.evidence[0].locator) == (f"《{VAT}》", "第十一条")

        await bus.publish(broker, topics.TOOL_REQUESTS_KB, request())  # same idempotency key, new event
        second = await results.next()
        assert second.event_id != first.event_id
        assert second.payload == first.payload  # the stored result (same duration_ms), not a re-run
        await _concurrent_searches_match_sequential(broker, consumer)
    finally:
        await consumer.stop()
        await broker.stop()
        proc.stop()
    assert "retriever ready" in proc.log_path.read_text()
