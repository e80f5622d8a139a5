"""MCP tools in and out over the real stack (issue 21, docs/mcp.md), one module-scoped stack.

In: the tenant's stdio MCP server (``testkit.mcp_server``, written with the SDK) is listed
by the mcp service; the agent (scripted model) gets its tools as ``mcp__casefile__*`` functions,
the non-read-only ``file_note`` waits for a person's approval, runs once, and its result is cited;
a server that cannot start is reported and its tools are withheld; a streamable HTTP server
registered with ``POST /v1/mcp-servers`` (Conduit's own ``/mcp``) is listed too.
Out: the SDK's client lists and calls ``search`` over ``/mcp`` (exactly the ``POST /v1/search``
body), ``ask`` gives a cited answer with progress notifications, and ``conduit mcp`` serves the
same tools over stdio.

Real tansu broker, real Redis, Qdrant Edge with one real law, scripted OpenAI-compatible model.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from ops.client import SseEvent, create_task, stream_task
from ops.stack import Stack
from testkit.page import evidence_number
from testkit.page_fixtures import fresh_script  # noqa: F401 - autouse fixture: an empty script per test
from testkit.scripted_model import Turn
from testkit.stack import auth, start_stack
from testkit.waits import wait_until

VAT_LAW = "中华人民共和国增值税法"
WAIT_S = 120


@pytest.fixture(scope="module")
def notes(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mcp-notes") / "notes.jsonl"


@pytest.fixture(scope="module")
def stack(infra_stack, tmp_path_factory, model, notes) -> Iterator[Stack]:
    servers = {"default": [
        {"name": "casefile", "command": [sys.executable, "-m", "testkit.mcp_server", "--notes", str(notes)]},
        {"name": "dead", "command": [sys.executable, "-c", "import sys; sys.exit(3)"], "timeout_s": 10},
    ]}
    st = start_stack(infra_stack.bootstrap, infra_stack.redis_url, tmp_path_factory.mktemp("mcp-data"),
                     ("retriever", "mcp", "orchestrator", "gateway"),
                     {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
                      "CONDUIT_TOOL_TIMEOUT_S": "30", "CONDUIT_APPROVAL_TTL_S": "120",
                      "CONDUIT_MCP_SERVERS": json.dumps(servers), "CONDUIT_MCP_REFRESH_S": "1"},
                     laws=[VAT_LAW])
    yield st
    st.stop()


def servers(stack: Stack) -> dict[str, dict]:
    r = httpx.get(f"{stack.gateway_url}/v1/mcp-servers", headers=auth(stack.admin_key), timeout=10)
    assert r.status_code == 200, r.text
    return {s["server"]["name"]: s for s in r.json()["servers"]}


def listed(stack: Stack, name: str) -> dict | None:
    """The status of server ``name`` once the mcp service looked at its current configuration."""
    return (servers(stack).get(name) or {}).get("status")


def tool_text(body: dict, title: str) -> tuple[int | None, str]:
    """The pool number and text the model saw for the MCP result titled ``title``."""
    for m in body["messages"]:
        if m.get("role") == "tool" and f"] {title}（外部工具）" in (m.get("content") or ""):
            head = m["content"].split(f"] {title}（外部工具）")[0]
            return int(head.rsplit("[", 1)[1]), m["content"]
    return None, ""


def test_tenant_mcp_tool_runs_under_approval_and_is_cited(stack, model, notes):
    assert wait_until(lambda: (listed(stack, "casefile") or {}).get("ok"), WAIT_S), servers(stack)
    offered: list[str] = []

    def call_tools(body: dict) -> Turn:
        offered.extend(t["function"]["name"] for t in body.get("tools") or [])
        return Turn(tool_calls=[
            {"name": "mcp__casefile__file_note", "arguments": {"title": "VAT", "text": "小规模纳税人 3%", "reason": "登记案卷"}},
            {"name": "mcp__casefile__lookup_rate", "arguments": {"category": "books", "reason": "查图书税率"}}])

    def cite(body: dict) -> Turn:
        n, text = tool_text(body, "mcp.casefile.file_note")
        assert n is not None and "R-0001" in text and "<untrusted_content>" in text, body["messages"][-2:]
        return Turn(content=f"已登记，回执号 R-0001 [{n}]。")

    model.push(call_tools, cite)
    created = create_task(stack.gateway_url, "把这条结论登记到案卷", api_key=stack.admin_key)
    seen: list[SseEvent] = []
    for ev in stream_task(stack.gateway_url, created["task_id"], read_timeout_s=WAIT_S, api_key=stack.admin_key):
        seen.append(ev)
        if ev.event == "tool.approval_required":
            assert ev.data["tool"] == "mcp.casefile.file_note", ev.data
            assert not notes.exists(), "nothing runs before the approval"
            r = httpx.post(f"{stack.gateway_url}/v1/tasks/{created['task_id']}/approvals/{ev.data['call_id']}",
                           json={"decision": "approve", "arguments_digest": ev.data["arguments_digest"]},
                           headers=auth(stack.admin_key), timeout=10)
            assert r.status_code == 202, r.text
    kinds = [e.event for e in seen]
    assert kinds[-1] == "task.completed", kinds
    assert kinds.count("tool.approval_required") == 1, "the read-only lookup_rate needs no approval"
    assert {"mcp__casefile__file_note", "mcp__casefile__lookup_rate", "mcp__casefile__broken"} <= set(offered)
    assert not any(name.startswith("mcp__dead__") for name in offered)
    done = seen[-1].data
    assert "R-0001" in done["answer"] and done["citations"][0]["title"] == "mcp.casefile.file_note", done
    assert len(notes.read_text().splitlines()) == 1, "file_note ran exactly once"


def test_a_failing_server_is_reported_and_its_tools_withheld(stack):
    assert wait_until(lambda: listed(stack, "dead") is not None, WAIT_S), servers(stack)
    dead = listed(stack, "dead")
    assert dead["ok"] is False and dead["error"] and dead["tools"] == [], dead
    ready = httpx.get(f"{stack.gateway_url}/readyz", timeout=10)
    assert ready.status_code == 200 and ready.json()["mcp"]["failing"] >= 1, ready.text


def _mcp_client(stack: Stack) -> Client:
    http = httpx2.AsyncClient(headers=auth(stack.admin_key), timeout=httpx2.Timeout(30.0, read=300.0))
    return Client(streamable_http_client(f"{stack.gateway_url}/mcp", http_client=http))


def test_search_over_mcp_is_what_the_api_returns(stack):
    query = "小规模纳税人 征收率"

    async def run() -> tuple[list[str], dict]:
        async with _mcp_client(stack) as client:
            names = sorted(t.name for t in (await client.list_tools()).tools)
            result = await client.call_tool("search", {"query": query})
            assert not result.is_error and "征收率" in result.content[0].text
            return names, result.structured_content

    names, body = asyncio.run(run())
    assert names == ["ask", "documents", "search"]
    api = httpx.post(f"{stack.gateway_url}/v1/search", json={"query": query}, headers=auth(stack.admin_key), timeout=60).json()
    def same(response: dict) -> dict:  # the two searches' own timings differ
        return {**{k: v for k, v in response.items() if k != "duration_ms"},
                "attempts": [{k: v for k, v in a.items() if k != "duration_ms"} for a in response["attempts"]]}

    assert same(body) == same(api)


def test_ask_over_mcp_streams_progress_and_cites(stack, model):
    def cite(body: dict) -> Turn:
        n = evidence_number(body, "增值税法")
        return Turn(content=f"小规模纳税人的征收率为百分之三[{n}]。", chunks=6)

    model.push(Turn(tool_calls=[{"name": "kb_search", "arguments": {"query": "小规模纳税人 征收率", "reason": "查法条"}}]), cite)
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def run():
        async with _mcp_client(stack) as client:
            return await client.call_tool("ask", {"question": "小规模纳税人的征收率是多少？"}, progress_callback=on_progress)

    result = asyncio.run(run())
    assert not result.is_error, result.content
    text = result.content[0].text
    assert "百分之三[" in text and "Sources:" in text and VAT_LAW in text, text
    assert result.structured_content["citations"] and result.structured_content["status"] == "completed"
    assert any(p.startswith("tool.requested kb_search") for p in progress), progress
    assert sum(1 for p in progress if "百分" in p or "征收率" in p) >= 1, progress


def test_conduit_mcp_serves_the_same_tools_over_stdio(stack):
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "conduit", "mcp", "--url", stack.gateway_url, "--key", stack.admin_key])

    async def run():
        async with Client(params) as client:
            names = sorted(t.name for t in (await client.list_tools()).tools)
            docs = await client.call_tool("documents", {})
            return names, docs

    names, docs = asyncio.run(run())
    assert names == ["ask", "documents", "search"]
    assert not docs.is_error and "documents" in docs.structured_content


def test_a_registered_http_server_is_listed(stack):
    """An admin registers a streamable HTTP MCP server (here Conduit's own /mcp) with POST /v1/mcp-servers."""
    body = {"name": "self", "url": f"{stack.gateway_url}/mcp", "headers": auth(stack.admin_key)}
    r = httpx.post(f"{stack.gateway_url}/v1/mcp-servers", json=body, headers=auth(stack.admin_key), timeout=10)
    assert r.status_code == 201 and r.json()["server"]["headers"] == {"Authorization": "***"}, r.text
    refused = httpx.post(f"{stack.gateway_url}/v1/mcp-servers", json={"name": "cmd", "command": ["true"]},
                         headers=auth(stack.admin_key), timeout=10)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "mcp_commands_disabled"
    assert wait_until(lambda: (listed(stack, "self") or {}).get("ok"), WAIT_S), servers(stack)
    assert set(listed(stack, "self")["tools"]) == {"mcp.self.search", "mcp.self.ask", "mcp.self.documents"}
    gone = httpx.delete(f"{stack.gateway_url}/v1/mcp-servers/self", headers=auth(stack.admin_key), timeout=10)
    assert gone.status_code == 204
