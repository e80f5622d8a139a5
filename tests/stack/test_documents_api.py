"""``POST /v1/search`` and ``/v1/documents`` over the real stack: gateway and retriever processes,
tansu, Redis and the embedded Qdrant Edge shard, with one real law from the corpus.

The search answer must be exactly what ``kb_search`` gives the agent: it is compared, chunk
id by chunk id, with ``KbSearcher`` run in this process over the same law ingested into a
separate data dir (only the retriever process may open the stack's shard).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from conduit.runtime.settings import Settings
from ops.stack import Stack
from testkit.pdf import minimal_pdf
from testkit.stack import admin_client, start_stack
from testkit.waits import wait_until

QUESTION = "小规模纳税人适用简易计税方法的征收率是多少？"
VAT_LAW = "中华人民共和国增值税法"
DOC_ID = "xinghe-travel-policy"
DOC_TEXT = """# 星河科技差旅报销制度

## 住宿标准
星河科技员工出差住宿费按城市分级报销：一线城市每晚不超过六百元，其他城市每晚不超过四百元。

## 交通标准
星河科技员工出差乘坐高铁二等座，八小时以上的行程可乘坐飞机经济舱。
"""


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory) -> Iterator[Stack]:
    """Retriever and gateway processes with 增值税法 ingested."""
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("docs-api"),
                     ("retriever", "gateway"), {"CONDUIT_TOOL_TIMEOUT_S": "20"}, laws=[VAT_LAW])
    yield st
    st.stop()


@pytest.fixture(scope="module")
def client(stack) -> Iterator[httpx.Client]:
    with admin_client(stack) as c:
        yield c


def in_process_kb_search(tmp_path_factory, query: str) -> list[str]:
    """Chunk ids ``kb_search`` returns in this process over a fresh ingest of the same law."""
    from services.retriever.embeddings import make_embedder
    from services.retriever.ingest import ingest_law_db
    from services.retriever.main import open_second_stage
    from services.retriever.pipeline import KbSearcher, kb_search
    from services.retriever.store import open_store

    settings = Settings(data_dir=tmp_path_factory.mktemp("docs-api-local"))
    embedder = make_embedder(settings)
    store = open_store(settings, embedder.dim)
    stage2 = open_second_stage(settings) if settings.retrieval.retrieval_second_stage else None  # as the service (rule K7)
    try:
        ingest_law_db(settings, law_names=[VAT_LAW], progress=False, embedder=embedder, store=store)
        searcher = KbSearcher(settings.retrieval, embedder, store, stage2=stage2)
        return [e.chunk_id for e in kb_search(searcher, query, settings.identity.default_tenant)]
    finally:
        store.close()
        if stage2 is not None:
            stage2.close()


def wait_status(client: httpx.Client, document_id: str, until: set[int | str], timeout_s: float = 60) -> httpx.Response:
    """Poll GET /v1/documents/{id} until the status code or the record's status is in ``until``."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = client.get(f"/v1/documents/{document_id}")
        if r.status_code in until or (r.status_code == 200 and r.json()["status"] in until):
            return r
        assert time.monotonic() < deadline, r.text
        time.sleep(0.3)


def test_search_returns_the_items_kb_search_gives_the_agent(client, tmp_path_factory):
    r = client.post("/v1/search", json={"query": QUESTION})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["query"] == QUESTION
    items = body["items"]
    assert any("增值税法" in i["title"] and i["locator"] == "第十一条" for i in items), [(i["title"], i["locator"]) for i in items]
    assert body["attempts"][0]["kind"] == "original"
    assert [i["chunk_id"] for i in items] == in_process_kb_search(tmp_path_factory, QUESTION)

    r = client.post("/v1/search", json={"query": QUESTION, "top_k": 2})
    assert r.status_code == 200, r.text
    assert [i["chunk_id"] for i in r.json()["items"]] == [i["chunk_id"] for i in items[:2]]


def test_posted_document_is_searchable_then_deleted(client):
    r = client.post("/v1/documents", json={"title": "星河科技差旅报销制度", "text": DOC_TEXT,
                                           "source": "intranet/hr", "document_id": DOC_ID})
    assert r.status_code == 202, r.text
    assert r.json() == {"document_id": DOC_ID, "status": "queued", "url": f"/v1/documents/{DOC_ID}"}

    view = wait_status(client, DOC_ID, {"ingested", "failed"}).json()
    assert view["status"] == "ingested", view
    assert view["chunks"] >= 1 and view["index_document_id"] == f"doc:default:{DOC_ID}"
    listed = client.get("/v1/documents").json()["documents"]
    assert [(d["document_id"], d["status"]) for d in listed] == [(DOC_ID, "ingested")]

    query = "星河科技员工出差住宿每晚能报销多少钱？"
    items = client.post("/v1/search", json={"query": query}).json()["items"]
    ours = [i for i in items if i["document_id"] == view["index_document_id"]]
    assert ours and "六百元" in ours[0]["text"] and ours[0]["title"] == "《星河科技差旅报销制度》", items
    only = client.post("/v1/search", json={"query": query, "filters": {"document_ids": [view["index_document_id"]]}})
    assert only.status_code == 200 and {i["document_id"] for i in only.json()["items"]} == {view["index_document_id"]}

    r = client.delete(f"/v1/documents/{DOC_ID}")
    assert r.status_code == 202 and r.json()["status"] == "deleting", r.text
    gone = client.get(f"/v1/documents/{DOC_ID}")  # gone for clients at once
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "document_not_found"
    assert client.delete(f"/v1/documents/{DOC_ID}").status_code == 404
    assert wait_until(lambda: not client.get("/v1/documents").json()["documents"], 60), \
        "the retriever never finished deleting"  # listed as deleting until then
    items = client.post("/v1/search", json={"query": query}).json()["items"]
    assert all(i["document_id"] != view["index_document_id"] for i in items)


@pytest.mark.parametrize("body", [
    {}, {"query": ""}, {"query": "   "}, {"query": QUESTION, "top_k": 0}, {"query": QUESTION, "top_k": 21},
    {"query": QUESTION, "extra": 1}, {"query": QUESTION, "filters": {"document_ids": []}}, "not json",
])
def test_bad_search_bodies_are_422(client, body):
    r = client.post("/v1/search", content=body) if isinstance(body, str) else client.post("/v1/search", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_request"


def test_bad_documents_are_rejected_with_clear_errors(client):
    cases = [
        ({"title": "空", "text": "  \n "}, 422, "invalid_request"),
        ({"text": "正文"}, 422, "invalid_request"),
        ({"title": "坏的编号", "text": "正文", "document_id": "law:1"}, 422, "invalid_request"),
        ({"title": "太长", "text": "字" * 200_001}, 413, "document_too_large"),
    ]
    for body, status, code in cases:
        r = client.post("/v1/documents", json=body)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text
    for method in ("GET", "DELETE"):
        r = client.request(method, "/v1/documents/no-such-document")
        assert (r.status_code, r.json()["error"]["code"]) == (404, "document_not_found")
    assert client.get("/v1/documents/bad:id").status_code == 422


def test_uploaded_pdf_is_searchable(client):
    pdf = minimal_pdf(["Nebula Robotics travel policy", "Hotel rooms cost at most 640 dollars per night."])
    r = client.post("/v1/documents", params={"document_id": "nebula-pdf"}, content=pdf,
                    headers={"Content-Type": "application/pdf", "X-Filename": "Nebula policy.pdf"})
    assert r.status_code == 202, r.text
    view = wait_status(client, "nebula-pdf", {"ingested", "failed"}).json()
    assert view["status"] == "ingested" and view["title"] == "Nebula policy", view
    r = client.post("/v1/search", json={"query": "Nebula Robotics hotel rooms per night",
                                        "filters": {"document_ids": [view["index_document_id"]]}})
    assert r.status_code == 200, r.text
    assert any("640 dollars" in i["text"] for i in r.json()["items"]), r.json()
    assert client.delete("/v1/documents/nebula-pdf").status_code == 202

    pdf_headers = {"Content-Type": "application/pdf"}
    cases = [
        (b"not a pdf at all", {"title": "x"}, 422, "pdf_unreadable"),
        (minimal_pdf([]), {"title": "x"}, 422, "pdf_no_text"),
        (pdf, {}, 422, "invalid_request"),  # no title anywhere
        (b"%PDF" + b"0" * (20 * 1024 * 1024), {"title": "x"}, 413, "body_too_large"),
    ]
    for body, params, status, code in cases:
        r = client.post("/v1/documents", params=params, content=body, headers=pdf_headers)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text
