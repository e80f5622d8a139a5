"""A question's scope over the real stack (rules Q1-Q4, docs/rules.md): a tenant with two posted
documents (one in the named collection ``hr``) and one real law; a task scoped to one document gets
evidence from it alone in every ``kb_search`` (the law is not searched), the record, the events and the
trace show the scope; a team's workers search within their supervisor's scope; chat completions
(``conduit`` extension) and the MCP ``ask`` tool take the scope; ``POST /v1/search`` filters by
collection; bad scopes are refused with their codes. The rules alone: tests/unit/test_scope_rules.py.

Real tansu broker, real Redis, Qdrant Edge, the retriever, orchestrator and gateway processes, and
the scripted OpenAI-compatible model over HTTP.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ops.client import SseEvent, create_task, stream_task
from ops.stack import Stack
from testkit.page_fixtures import fresh_script  # noqa: F401 - autouse fixture: an empty script per test
from testkit.scripted_model import Turn
from testkit.stack import admin_client, auth, model_env, start_stack
from services.orchestrator.agent import finalizer, team

VAT_LAW = "中华人民共和国增值税法"
QUERY = "星河科技 出差 住宿费 报销"
TRAVEL = ("travel", "星河科技差旅报销制度", None, """# 星河科技差旅报销制度

## 住宿标准
星河科技员工出差住宿费按城市分级报销：一线城市每晚不超过六百元，其他城市每晚不超过四百元。
""")
HANDBOOK = ("handbook", "星河科技员工手册", "hr", """# 星河科技员工手册

## 出差
星河科技员工出差住宿应选择公司协议酒店，住宿费凭增值税发票报销，超出标准的部分由员工自付。
""")
TRAVEL_ID, HANDBOOK_ID = "doc:default:travel", "doc:default:handbook"


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model) -> Iterator[Stack]:
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("scope-data"),
                     ("retriever", "orchestrator", "gateway"),
                     model_env(model.base_url, tool_timeout_s=30), laws=[VAT_LAW])
    try:
        with admin_client(st) as c:
            for doc_id, title, collection, text in (TRAVEL, HANDBOOK):
                body = {"title": title, "text": text, "document_id": doc_id} | ({"collection": collection} if collection else {})
                assert c.post("/v1/documents", json=body).status_code == 202
            deadline = time.monotonic() + 60
            while {d["status"] for d in c.get("/v1/documents").json()["documents"]} != {"ingested"}:
                assert time.monotonic() < deadline, c.get("/v1/documents").text
                time.sleep(0.3)
        yield st
    finally:
        st.stop()


@pytest.fixture(scope="module")
def client(stack) -> Iterator[httpx.Client]:
    with admin_client(stack, timeout_s=60) as c:
        yield c


def kb(query: str) -> Turn:
    return Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": query, "reason": "查制度"}}])


def cite_all(body: dict[str, Any]) -> Turn:
    """Cite every evidence number the model was shown (or answer without one)."""
    shown = sorted({int(n) for m in body["messages"] if m["role"] == "tool"
                    for n in re.findall(r"\[(\d+)\]", m.get("content") or "")})
    return Turn(content="住宿标准见" + "".join(f"[{n}]" for n in shown) + "。" if shown else "没有找到。")


def run(stack: Stack, task_id: str) -> list[SseEvent]:
    return list(stream_task(stack.gateway_url, task_id, read_timeout_s=120, api_key=stack.admin_key))


def evidence_documents(events: list[SseEvent]) -> set[str]:
    return {item["document_id"] for e in events if e.event == "evidence" for item in e.data["items"]}


def test_unscoped_search_finds_both_documents(client):
    items = client.post("/v1/search", json={"query": QUERY}).json()["items"]
    assert {TRAVEL_ID, HANDBOOK_ID} <= {i["document_id"] for i in items}, items


def test_a_scoped_task_gets_evidence_from_its_document_only(stack, client, model):
    model.push(kb(QUERY), kb("小规模纳税人 增值税 征收率"), cite_all)
    created = create_task(stack.gateway_url, "出差住宿费怎么报销？", document_ids=["travel"], api_key=stack.admin_key)
    events = run(stack, created["task_id"])
    assert events[-1].event == "task.completed", [e.event for e in events]
    assert evidence_documents(events) == {TRAVEL_ID}
    scope = {"document_ids": [TRAVEL_ID], "collections": []}
    requested = [e.data for e in events if e.event == "tool.requested"]
    assert [r["scope"] for r in requested] == [scope, scope]
    completed = [e.data for e in events if e.event == "tool.completed"]
    assert completed[0]["outcome"] == "ok"  # the law is outside the scope: the VAT query finds none of it
    assert completed[1]["outcome"] == "ok" or completed[1]["error_code"] == "kb_no_results", completed
    view = client.get(f"/v1/tasks/{created['task_id']}").json()
    assert view["scope"] == scope and view["cache"] == "off"
    assert [t["scope"] for t in view["trace"] if t.get("phase") == "tool"] == [scope, scope]
    assert view["citations"] and view["steps"]


def test_collections_limit_the_search(client):
    def documents(filters: dict[str, Any], query: str = QUERY) -> set[str]:
        r = client.post("/v1/search", json={"query": query, "filters": filters})
        assert r.status_code == 200, r.text
        return {i["document_id"] for i in r.json()["items"]}

    assert documents({"collections": ["hr"]}) == {HANDBOOK_ID}
    assert documents({"collections": ["documents"]}) == {TRAVEL_ID, HANDBOOK_ID}
    vat = "小规模纳税人 增值税 征收率"
    assert documents({}, vat) and not documents({"collections": ["hr"]}, vat) - {HANDBOOK_ID}
    law = documents({"collections": ["law"]}, vat)
    assert law and all(d.startswith("law:") for d in law)
    assert documents({"document_ids": ["travel"], "collections": ["hr"]}) == {TRAVEL_ID, HANDBOOK_ID}


@pytest.mark.parametrize("scope, status, code", [
    ({"document_ids": ["no-such-doc"]}, 404, "document_not_found"),
    ({"document_ids": ["doc:other:travel"]}, 404, "document_not_found"),  # another tenant's: as if missing
    ({"collections": ["finance"]}, 404, "collection_not_found"),
    ({"document_ids": [f"d{i}" for i in range(51)]}, 422, "scope_too_large"),
])
def test_a_bad_scope_is_refused_with_its_code(client, scope, status, code):
    for path, body in (("/v1/tasks", {"question": "出差住宿费怎么报销？", **scope}),
                       ("/v1/ask", {"question": "出差住宿费怎么报销？", **scope}),
                       ("/v1/search", {"query": QUERY, "filters": scope}),
                       ("/v1/chat/completions", {"model": "conduit", "conduit": scope,
                                                 "messages": [{"role": "user", "content": "出差住宿费怎么报销？"}]})):
        r = client.post(path, json=body)
        assert r.status_code == status and r.json()["error"]["code"] == code, (path, r.text)
    if code == "collection_not_found":
        assert r.json()["error"]["details"]["known"] == ["law", "documents", "hr"]


def test_chat_completions_take_the_scope_in_the_conduit_field(stack, client, model):
    import openai

    model.push(kb(QUERY), cite_all)
    sdk = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=stack.admin_key, timeout=120, max_retries=0)
    completion = sdk.chat.completions.create(  # the SDK sends the extension field with extra_body
        model="conduit-kb", messages=[{"role": "user", "content": "出差住宿有什么要求？"}],
        extra_body={"conduit": {"collections": ["hr"]}})
    extension = completion.model_extra["conduit"]
    assert extension["citations"], extension
    view = client.get(f"/v1/tasks/{extension['task_id']}").json()
    assert view["scope"] == {"document_ids": [], "collections": ["hr"]}
    assert evidence_documents(run(stack, extension["task_id"])) == {HANDBOOK_ID}


def test_mcp_ask_takes_the_scope(stack, client, model):
    model.push(kb(QUERY), cite_all)

    async def ask():
        http = httpx2.AsyncClient(headers=auth(stack.admin_key), timeout=httpx2.Timeout(30.0, read=300.0))
        async with Client(streamable_http_client(f"{stack.gateway_url}/mcp", http_client=http)) as mcp:
            return await mcp.call_tool("ask", {"question": "出差住宿费怎么报销？", "document_ids": ["travel"]})

    result = asyncio.run(ask())
    assert not result.is_error, result.content
    body = result.structured_content
    assert body["scope"] == {"document_ids": [TRAVEL_ID], "collections": []} and body["citations"]
    assert evidence_documents(run(stack, body["task_id"])) == {TRAVEL_ID}


def test_conduit_ask_takes_the_scope(stack, model):
    model.push(kb(QUERY), cite_all)
    run_ = subprocess.run([sys.executable, "-m", "conduit", "ask", "出差住宿费怎么报销？", "--collection", "hr",
                           "--url", stack.gateway_url, "--key", stack.admin_key],
                          capture_output=True, text=True, timeout=120)
    assert run_.returncode == 0, run_.stdout + run_.stderr
    assert "星河科技员工手册" in run_.stdout and "星河科技差旅报销制度" not in run_.stdout, run_.stdout


def _team_turn(body: dict[str, Any]) -> Turn:
    """Every role of a team: the supervisor delegates one sub-question, the worker searches it, the
    supervisor and the finalizer cite what came back."""
    system = body["messages"][0]["content"]
    tool_texts = [m for m in body["messages"] if m["role"] == "tool"]
    if system.startswith(finalizer.FINALIZER_PROMPT[:20]):
        draft = re.search(r"<untrusted_content>\n(.*)\n</untrusted_content>", body["messages"][-1]["content"], re.S)
        return Turn(content=draft.group(1))
    if system.startswith(team.SUPERVISOR_PROMPT[:20]) and not tool_texts:
        return Turn(tool_calls=[{"name": "delegate", "arguments": {
            "worker": "kb_researcher", "task": QUERY, "reason": "查制度"}}])
    if not tool_texts:
        return kb(QUERY)
    return cite_all(body)


def test_team_workers_search_within_the_scope(stack, model):
    model.default = _team_turn
    created = create_task(stack.gateway_url, "出差住宿费怎么报销？", mode="team", collections=["hr"],
                          api_key=stack.admin_key)
    events = run(stack, created["task_id"])
    assert events[-1].event == "task.completed", [e.event for e in events]
    workers = [e.data["task_id"] for e in events if e.event == "worker.started"]
    assert workers
    for worker in workers:
        seen = run(stack, worker)
        assert [e.data["scope"] for e in seen if e.event == "tool.requested"] == [
            {"document_ids": [], "collections": ["hr"]}]
        assert evidence_documents(seen) == {HANDBOOK_ID}
    assert evidence_documents(events) == {HANDBOOK_ID}
